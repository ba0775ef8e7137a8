"""Decoding Kafka RecordBatch v2 bytes into logstore ``Record``s: ``decode_produce`` (the server's
produce hot path, with Kafka's validation; ``decode_produce_columns`` gives the records as columns) and ``decode_fetch`` (what a consumer does with a fetch
response; used by tests and by our own client).

``decode_produce`` mirrors the checks Kafka applies to a client's batch (Kafka's
``UnifiedLog.analyzeAndValidateRecords`` and ``LogValidator``), in this order per batch:

=====================================================================  ============================
check                                                                  error (Kafka code)
=====================================================================  ============================
magic != 2; batch_length < 49; the batch runs past the data            CorruptMessageError (2)
size (batch_length + 12) > ``max_message_bytes``                       MessageTooLargeError (10)
base_offset != 0 (clients always send 0; Kafka refuses anything else)  InvalidRecordError (87)
CRC-32C of [21, end) != crc                                            CorruptMessageError (2)
codec id > 4, or a codec this process lacks                            UnsupportedCompressionError (76)
control batch (only the broker writes markers)                         InvalidRecordError (87)
transactional batch outside a transactional request, or without a      InvalidRecordError (87)
producer id and epoch
LogAppendTime bit set by the client; a timestamp outside int64          InvalidTimestampError (32)
record_count <= 0, or last_offset_delta + 1 != record_count            InvalidRecordError (87)
producer_id >= 0 with base_sequence < 0                                InvalidRecordError (87)
records that do not decompress or parse; count or sizes that disagree  CorruptMessageError (2)
records decompressing to more than ``max_decompressed_bytes``          MessageTooLargeError (10)
offset deltas other than 0, 1, ..., n-1                                InvalidRecordError (87)
a header key that is not UTF-8, or a negative header key length        InvalidRecordError (87)
=====================================================================  ============================

The record loop is the cost that matters. Runs of records that share one layout (what producers
send: same lengths, no headers) are checked and sliced a column at a time by ``runs.take_run``;
the rest go through the general loop (one Python-level step per varint), which binds everything to
locals, reads one- and two-byte varints (nearly all of them) by indexing a table, calls
``read_varint`` only for longer ones, and slices keys and values straight out of the request's
bytes. Both give the same records and the same errors (tests/server/test_wire_runs.py).
"""

from __future__ import annotations

from itertools import repeat
from typing import Sequence

from ...records.batching import RecordColumns
from ...records.decoder import Record
from .batch import (ATTRIBUTES_AT, CONTROL_MASK, COMPRESSION_MASK, HEADER_BYTES, HEADER_STRUCT, LOG_OVERHEAD_BYTES,
                    MAGIC, MAGIC_AT, MIN_BATCH_LENGTH, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, ZIGZAG_BYTE,
                    ZIGZAG_PAIR, CorruptMessageError, InvalidRecordError, InvalidTimestampError, MessageTooLargeError,
                    WireBatch, read_varint)
from .compression import DEFAULT_MAX_DECOMPRESSED_BYTES, decompress
from .crc32c import crc32c
from .runs import take_run

_new_record = tuple.__new__
_MIN_LONG, _MAX_LONG = -(2**63), 2**63 - 1
_MIN_RECORD_BYTES = 7  # length, attributes, timestamp delta, offset delta, key, value, header count


def _as_bytes(data) -> bytes:
    """Records are sliced out of the buffer, so it must be ``bytes`` (one copy for a memoryview)."""
    return data if type(data) is bytes else bytes(data)


def _header_at(buffer: bytes, position: int, total: int) -> WireBatch:
    """The header of the batch at ``position`` (CorruptMessageError when it is not a whole v2 batch)."""
    available = total - position
    if available > MAGIC_AT and buffer[position + MAGIC_AT] != MAGIC:
        raise CorruptMessageError(f"record batch magic {buffer[position + MAGIC_AT]} at position {position}: "
                                  f"only v2 batches (magic 2) are supported")
    if available < HEADER_BYTES:
        raise CorruptMessageError(f"the data ends inside a batch header at position {position}")
    batch = WireBatch._make(HEADER_STRUCT.unpack_from(buffer, position))
    if batch.batch_length < MIN_BATCH_LENGTH:
        raise CorruptMessageError(f"impossible batch length {batch.batch_length} at position {position}")
    return batch


def decode_produce(data, *, max_message_bytes: int, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
                   transactional: bool = False) -> list[tuple[WireBatch, list[Record]]]:
    """The batches of a Produce request's ``records`` (bytes or memoryview; several batches may
    follow each other), validated as Kafka validates a client's batches (see the module docstring),
    as ``(WireBatch, records)`` pairs. Records are ``Record(key, value, headers, timestamp_ms)``
    with ``offset`` None; ``timestamp_ms`` is ``base_timestamp + timestamp_delta`` (CreateTime).
    Empty or None ``data`` gives ``[]``. ``transactional``: the request carries a transactional
    id, so batches with the transactional bit (and a producer id and epoch) are accepted. Raises a
    ``WireRecordError`` subclass carrying Kafka's error code; nothing else, whatever the bytes."""
    return [(batch, list(records)) for batch, records in
            decode_produce_columns(data, max_message_bytes=max_message_bytes,
                                   max_decompressed_bytes=max_decompressed_bytes, transactional=transactional)]


def decode_produce_columns(data, *, max_message_bytes: int, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
                           transactional: bool = False) -> list[tuple[WireBatch, RecordColumns]]:
    """``decode_produce`` with each batch's records as ``RecordColumns`` (a sequence of the same
    records, held as columns): what the produce handler appends, so that no ``Record`` is built
    per record only to be taken apart again by the append."""
    if not data:
        return []
    buffer = _as_bytes(data)
    total = len(buffer)
    out = []
    position = 0
    while position < total:
        batch = _header_at(buffer, position, total)
        end = position + LOG_OVERHEAD_BYTES + batch.batch_length
        if end > total:
            raise CorruptMessageError(f"the data ends inside the batch at position {position} "
                                      f"({batch.batch_length + LOG_OVERHEAD_BYTES} bytes, {total - position} present)")
        if end - position > max_message_bytes:
            raise MessageTooLargeError(f"a record batch of {end - position} bytes is larger than "
                                       f"max.message.bytes ({max_message_bytes})")
        if batch.base_offset != 0:
            raise InvalidRecordError(f"the base offset of a produced batch must be 0, not {batch.base_offset}")
        if crc32c(buffer[position + ATTRIBUTES_AT : end]) != batch.crc:
            raise CorruptMessageError(f"record batch CRC mismatch at position {position}")
        _check_produced_header(batch, transactional)
        keys, values, headers, timestamps, _offsets = _columns_of(buffer, position + HEADER_BYTES, end, batch, None,
                                                                  max_decompressed_bytes)
        # the producer's codec goes with the records: a topic with compression.type=producer keeps it
        out.append((batch, RecordColumns(keys, values, headers, timestamps, batch.attributes & COMPRESSION_MASK)))
        position = end
    return out


def _check_produced_header(batch: WireBatch, transactional: bool) -> None:
    """Kafka's rules for the header of a batch a client produces (after its CRC was checked);
    ``transactional``: the request carries a transactional id."""
    attributes = batch.attributes
    if attributes & (CONTROL_MASK | TRANSACTIONAL_MASK):
        # only the broker writes transaction markers (control batches)
        if attributes & CONTROL_MASK:
            raise InvalidRecordError("clients may not produce control batches")
        if not transactional:
            raise InvalidRecordError("a transactional batch needs a produce request with a transactional id")
        if batch.producer_id < 0 or batch.producer_epoch < 0:
            raise InvalidRecordError(f"a transactional batch needs a producer id and epoch, got producer id "
                                     f"{batch.producer_id} epoch {batch.producer_epoch}")
    if attributes & TIMESTAMP_TYPE_MASK:
        raise InvalidTimestampError("a produced batch may not set the LogAppendTime timestamp type")
    count = batch.record_count
    if count <= 0:
        raise InvalidRecordError(f"a produced batch must hold records (record count {count})")
    if batch.last_offset_delta + 1 != count:
        raise InvalidRecordError(f"last offset delta {batch.last_offset_delta} does not match the record "
                                 f"count {count}")
    if not _MIN_LONG + 64 <= batch.base_timestamp <= _MAX_LONG - 64:
        raise InvalidTimestampError(f"base timestamp {batch.base_timestamp} is at the edge of the int64 range")
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise InvalidRecordError(f"producer id {batch.producer_id} with an invalid base sequence {batch.base_sequence}")


def decode_fetch(data) -> list[tuple[WireBatch, list[Record]]]:
    """The batches of a Fetch response's ``records``, as a consumer reads them: CRC checked (as
    kafka-python and aiokafka do by default), decompressed, every record with its ``offset``
    (``base_offset + offset_delta``) and timestamp (``max_timestamp`` for every record of a
    LogAppendTime batch). A truncated last batch is ignored, as clients ignore it; control batches
    are returned like the others. Raises ``CorruptMessageError`` for damaged bytes."""
    if not data:
        return []
    buffer = _as_bytes(data)
    total = len(buffer)
    out = []
    position = 0
    while total - position >= LOG_OVERHEAD_BYTES:
        length = int.from_bytes(buffer[position + 8 : position + 12], "big", signed=True)
        if position + LOG_OVERHEAD_BYTES + length > total:
            break  # a partial batch at the end: the broker cut the response there
        batch = _header_at(buffer, position, total)
        end = position + batch.size_bytes
        if crc32c(buffer[position + ATTRIBUTES_AT : end]) != batch.crc:
            raise CorruptMessageError(f"record batch CRC mismatch at position {position}")
        if batch.record_count < 0:
            raise CorruptMessageError(f"negative record count {batch.record_count} at position {position}")
        records = _records_of(buffer, position + HEADER_BYTES, end, batch, batch.base_offset,
                              DEFAULT_MAX_DECOMPRESSED_BYTES)
        if batch.attributes & TIMESTAMP_TYPE_MASK:
            records = [record._replace(timestamp_ms=batch.max_timestamp) for record in records]
        out.append((batch, records))
        position = end
    return out


def _records_of(buffer: bytes, start: int, end: int, batch: WireBatch, base_offset: int | None,
                max_decompressed_bytes: int) -> list[Record]:
    """The records in ``buffer[start:end]`` (decompressed first when the batch is compressed)."""
    keys, values, headers, timestamps, offsets = _columns_of(buffer, start, end, batch, base_offset,
                                                             max_decompressed_bytes)
    # Record tuples made in C from the columns: cheaper than one tuple.__new__ call per record
    return list(map(_new_record, repeat(Record), zip(keys, values, headers, timestamps,
                                                     repeat(None) if offsets is None else offsets)))


def _columns_of(buffer: bytes, start: int, end: int, batch: WireBatch, base_offset: int | None,
                max_decompressed_bytes: int) -> tuple[list, list, list, list, list | None]:
    """The records in ``buffer[start:end]`` as columns (see ``_parse_records``), decompressed first
    when the batch is compressed."""
    codec = batch.attributes & COMPRESSION_MASK
    if codec:
        buffer = decompress(codec, memoryview(buffer)[start:end], max_decompressed_bytes)
        start, end = 0, len(buffer)
    if batch.record_count * _MIN_RECORD_BYTES > end - start:
        raise CorruptMessageError(f"{end - start} bytes cannot hold {batch.record_count} records")
    try:
        return _parse_records(buffer, start, end, batch.record_count, batch.base_timestamp, base_offset)
    except IndexError:
        raise CorruptMessageError("a record runs past the end of its batch") from None


def _parse_records(buffer: bytes, position: int, end: int, count: int, base_timestamp: int,
                   base_offset: int | None) -> tuple[list, list, list, list, list | None]:
    """``count`` records from ``buffer[position:end]`` as columns: ``(keys, values, headers,
    timestamps, offsets)``. ``base_offset`` None (produce): offset deltas must be 0..count-1 and
    ``offsets`` is None; else each record's offset is ``base_offset + delta``.

    Runs of records that share one layout are taken by ``take_run`` (a few C-level passes per
    column); the others by ``_parse_general``, one varint at a time. After a record no run starts
    from, the general loop takes the next 1, 2, 4, ... (at most 256) records before the next try, so
    a batch of records that all differ pays little for the tries. IndexError (bytes ending early)
    is turned into CorruptMessageError by the caller."""
    columns = ([], [], [], [], None if base_offset is None else [])
    index = 0
    tries = 1
    while index < count:
        taken, position = take_run(buffer, position, end, index, count, base_timestamp, base_offset, *columns)
        if taken:
            index += taken
            tries = 1
            continue
        stop = min(count, index + tries)
        position = _parse_general(buffer, position, index, stop, base_timestamp, base_offset, *columns)
        index = stop
        tries = min(tries * 2, 256)
    if position != end:
        raise CorruptMessageError(f"{end - position} bytes left over after the batch's {count} records")
    return columns


def _parse_general(buffer: bytes, position: int, index: int, stop: int, base_timestamp: int,
                   base_offset: int | None, keys: list, values: list, headers: list, timestamps: list,
                   offsets: list | None) -> int:
    """Records ``index`` to ``stop - 1`` from ``position``, appended to the columns; returns the
    position after them.

    The general loop: every field is a varint, and nearly every varint is one byte, read as
    ``zigzag[byte]`` inline (two-byte ones from ``pair``); ``read_varint`` handles the rest."""
    zigzag = ZIGZAG_BYTE
    pair = ZIGZAG_PAIR
    varint = read_varint
    produce = base_offset is None
    add_key = keys.append
    add_value = values.append
    add_headers = headers.append
    add_timestamp = timestamps.append
    for expected in range(index, stop):
        byte = buffer[position]
        if byte < 0x80:
            length = zigzag[byte]
            position += 1
        elif (second := buffer[position + 1]) < 0x80:
            length = pair[(second << 8) | byte]
            position += 2
        else:
            length, position = varint(buffer, position)
        record_end = position + length
        # buffer[position] is the record's attributes byte: unused, ignored (as Kafka does)
        byte = buffer[position + 1]
        if byte < 0x80:
            timestamp = base_timestamp + zigzag[byte]
            position += 2
        else:
            timestamp, position = varint(buffer, position + 1, 10)
            timestamp += base_timestamp
            if not _MIN_LONG <= timestamp <= _MAX_LONG:
                raise InvalidTimestampError(f"record {expected} has a timestamp outside the int64 range")
        byte = buffer[position]
        if byte < 0x80:
            delta = zigzag[byte]
            position += 1
        elif (second := buffer[position + 1]) < 0x80:
            delta = pair[(second << 8) | byte]
            position += 2
        else:
            delta, position = varint(buffer, position)
        byte = buffer[position]
        if byte < 0x80:
            size = zigzag[byte]
            position += 1
        elif (second := buffer[position + 1]) < 0x80:
            size = pair[(second << 8) | byte]
            position += 2
        else:
            size, position = varint(buffer, position)
        if size >= 0:
            key = buffer[position : position + size]
            position += size
        elif size == -1:
            key = None
        else:
            raise CorruptMessageError(f"invalid key length {size}")
        byte = buffer[position]
        if byte < 0x80:
            size = zigzag[byte]
            position += 1
        elif (second := buffer[position + 1]) < 0x80:
            size = pair[(second << 8) | byte]
            position += 2
        else:
            size, position = varint(buffer, position)
        if size >= 0:
            value = buffer[position : position + size]
            position += size
        elif size == -1:
            value = None
        else:
            raise CorruptMessageError(f"invalid value length {size}")
        if buffer[position] == 0:
            record_headers = ()
            position += 1
        else:
            record_headers, position = _parse_headers(buffer, position)
        if position != record_end:
            raise CorruptMessageError(f"record {expected} has a length of {length} bytes but its fields "
                                      f"take {position - record_end + length}")
        if produce:
            if delta != expected:
                raise InvalidRecordError(f"record {expected} has offset delta {delta}: a produced batch "
                                         f"must number its records 0, 1, 2, ...")
        else:
            offsets.append(base_offset + delta)
        add_key(key)
        add_value(value)
        add_headers(record_headers)
        add_timestamp(timestamp)
    return position


def _parse_headers(buffer: bytes, position: int) -> tuple[Sequence[tuple[str, bytes | None]], int]:
    """A record's headers (count, then key/value pairs) from ``position``: ``(headers, position)``."""
    count, position = read_varint(buffer, position)
    if count < 0:
        raise CorruptMessageError(f"invalid header count {count}")
    headers = []
    for _ in range(count):
        size, position = read_varint(buffer, position)
        if size < 0:
            raise InvalidRecordError(f"invalid header key length {size}")
        if position + size > len(buffer):
            raise CorruptMessageError("a header key runs past the end of the records")
        try:
            key = buffer[position : position + size].decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRecordError("a record header key is not valid UTF-8") from None
        position += size
        size, position = read_varint(buffer, position)
        if size >= 0:
            value = buffer[position : position + size]
            position += size
        elif size == -1:
            value = None
        else:
            raise CorruptMessageError(f"invalid header value length {size}")
        headers.append((key, value))
    return tuple(headers), position
