"""Kafka's RecordBatch v2 header and varints: the layout constants, ``WireBatch``, the errors, and
the varint tables that the record decoders and encoders share.

A v2 batch (https://kafka.apache.org/documentation/#recordbatch) is a 61-byte big-endian header, then the records::

    base_offset int64 | batch_length int32 | partition_leader_epoch int32 | magic int8 | crc uint32 |
    attributes int16 | last_offset_delta int32 | base_timestamp int64 | max_timestamp int64 |
    producer_id int64 | producer_epoch int16 | base_sequence int32 | record_count int32 | records

``crc`` is CRC-32C over bytes [21, end). Each record is::

    length varint | attributes int8 | timestamp_delta varlong | offset_delta varint |
    key_length varint (-1 = null) | key | value_length varint | value |
    header_count varint | (header_key_length varint | key (UTF-8) | value_length varint | value) *

Kafka's varints are zigzag-encoded base-128 numbers, least significant group first: 0, -1, 1, -2,
... encode as 0, 1, 2, 3, ...; an int32 takes at most 5 bytes, an int64 at most 10. Most varints in
a batch fit one byte (lengths below 64, the first 64 offset deltas), so the decoders read one byte
and index ``ZIGZAG_BYTE``; the encoders look up ready-made byte strings in ``VARINTS``.

The errors carry Kafka's error code (https://kafka.apache.org/protocol#protocol_error_codes), so a request handler can answer with it directly.
This module is the bottom of ``wire_records`` (which re-exports everything public here) and of
``compression``.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

# --- errors, with Kafka's error codes ---------------------------------------------------------------


class WireRecordError(Exception):
    """Bytes of a record batch that Kafka would refuse; ``error_code`` is Kafka's code for it."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR; every subclass has its own

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        if error_code is not None:
            self.error_code = error_code


class CorruptMessageError(WireRecordError):
    """CORRUPT_MESSAGE (2): a CRC mismatch, a wrong magic, a truncated or undecodable batch."""

    error_code = 2


class MessageTooLargeError(WireRecordError):
    """MESSAGE_TOO_LARGE (10): a batch larger than ``max.message.bytes`` (or one that decompresses
    to more than the server allows). Java producers split a compressed batch and retry on it."""

    error_code = 10


class InvalidTimestampError(WireRecordError):
    """INVALID_TIMESTAMP (32): e.g. a client batch that claims LogAppendTime."""

    error_code = 32


class UnsupportedCompressionError(WireRecordError):
    """UNSUPPORTED_COMPRESSION_TYPE (76): a codec this server cannot decode (cramjam missing, or an
    unknown codec id)."""

    error_code = 76


class InvalidRecordError(WireRecordError):
    """INVALID_RECORD (87): a well-formed batch that breaks a rule (no records, a count that does not
    match the last offset delta, a control or transactional batch, bad offset deltas, ...). Produce
    versions before 8 have no code 87: the handler answers CORRUPT_MESSAGE (2) there."""

    error_code = 87


# --- the batch header ------------------------------------------------------------------------------

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = 61  # Kafka's RECORD_BATCH_OVERHEAD
assert HEADER_STRUCT.size == HEADER_BYTES
LOG_OVERHEAD_BYTES = 12  # base_offset + batch_length: the bytes batch_length does not count
MIN_BATCH_LENGTH = HEADER_BYTES - LOG_OVERHEAD_BYTES
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21  # the CRC covers [21, end): attributes through the last record
CRC_STRUCT = struct.Struct(">I")
# The header after the CRC: attributes .. record_count (what the CRC covers of the header)
TAIL_STRUCT = struct.Struct(">hiqqqhii")
# base_offset, batch_length, partition_leader_epoch, magic (what precedes the CRC)
HEAD_STRUCT = struct.Struct(">qiib")
MAGIC = 2

# attributes
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # LogAppendTime
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1


class WireBatch(NamedTuple):
    """The header of one v2 batch, as found on the wire (``record_count`` is the header's claim)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_bytes(self) -> int:
        """The whole batch's size: ``batch_length`` + 12."""
        return self.batch_length + LOG_OVERHEAD_BYTES

    @property
    def compression(self) -> int:
        """The codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


# --- varints ---------------------------------------------------------------------------------------


def zigzag(value: int) -> int:
    """The zigzag mapping of a signed number: 0, -1, 1, -2 -> 0, 1, 2, 3."""
    return value << 1 if value >= 0 else ((-value) << 1) - 1


ZIGZAG_BYTE = tuple((byte >> 1) ^ -(byte & 1) for byte in range(128))
"""The value of a one-byte varint, by its byte (< 0x80)."""


def _two_byte_values() -> list[int]:
    # Built from slices (C loops) rather than entry by entry: it runs at `logstore serve`'s start-up.
    # For each second byte, the 128 indexes with a first byte < 0x80 stay 0 (they are no two-byte
    # varint); the next 128 hold the values of the numbers (second << 7) .. (second << 7) + 127.
    decoded = [(number >> 1) ^ -(number & 1) for number in range(1 << 14)]
    zeros = [0] * 0x80
    table: list[int] = []
    for second in range(0x80):
        table += zeros
        table += decoded[second << 7:(second + 1) << 7]
    return table


ZIGZAG_PAIR = _two_byte_values()
"""The value of a two-byte varint by ``(second << 8) | first`` (``first >= 0x80 > second``): lengths
from 64 to 8191 bytes and offset deltas from 64 on, common enough to inline."""


def read_varint(buffer: bytes, position: int, max_bytes: int = 5) -> tuple[int, int]:
    """Decode the varint at ``position``: ``(value, position after it)``. ``max_bytes`` is 5 for
    Kafka's varint (int32), 10 for its varlong (int64). A varint longer than that, or one cut off
    by the end of ``buffer``, raises ``CorruptMessageError``. The decoders inline the one-byte
    case and call this for the rest."""
    result = 0
    shift = 0
    limit = position + max_bytes
    while position < limit:
        try:
            byte = buffer[position]
        except IndexError:
            raise CorruptMessageError("a varint runs past the end of the records") from None
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >> (32 if max_bytes <= 5 else 64):  # more bits than an int32 (int64) has
                raise CorruptMessageError("a varint overflows its integer type")
            return (result >> 1) ^ -(result & 1), position
        shift += 7
    raise CorruptMessageError(f"a varint is longer than {max_bytes} bytes")


def encode_varint(value: int) -> bytes:
    """The varint (zigzag, base 128) of ``value``; small ones come ready-made from ``VARINTS``."""
    number = value << 1 if value >= 0 else ((-value) << 1) - 1
    return VARINTS[number] if number < VARINT_TABLE_SIZE else _varint_of_zigzag(number)


def _varint_of_zigzag(number: int) -> bytes:
    out = bytearray()
    while number > 0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


VARINT_TABLE_SIZE = 1 << 15
VARINTS: list[bytes] = (
    [bytes((number,)) for number in range(0x80)]  # one byte: 0 .. 127
    + [bytes((low | 0x80, high)) for high in range(1, 0x80) for low in range(0x80)]  # two: .. 16383
    + [bytes((low | 0x80, middle | 0x80, 1)) for middle in range(0x80) for low in range(0x80)])  # three
"""``VARINTS[zigzag(v)]``: the encoded varint of ``v`` for every ``|v| < 16384``."""
NONNEGATIVE_VARINTS: list[bytes] = VARINTS[::2]
"""``NONNEGATIVE_VARINTS[v]``: the encoded varint of ``v`` for ``0 <= v < 16384``: lengths, counts
and offset deltas, looked up by ``map(NONNEGATIVE_VARINTS.__getitem__, values)`` in C."""
NONNEGATIVE_VARINT_LIMIT = len(NONNEGATIVE_VARINTS)
