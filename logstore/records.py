"""The record batch format: ``Record``, ``RecordBatch``, ``encode_batch`` and batch scanning.

Pure: bytes in, values out; no files, clocks or threads. docs/FORMAT.md is the full specification
(grammar, a worked example with bytes, and the rationale). In short, a batch is a 55-byte
little-endian header followed by a column-wise body::

    base_offset int64 | batch_length int32 | magic uint8 | crc uint32 | header_crc uint32 |
    attributes uint16 | last_offset_delta int32 | record_count int32 |
    base_timestamp int64 | max_timestamp int64 | delete_horizon_ms int64 | body

    body = [offset_deltas int32*n] [timestamps int64*n] key_ends int32*n value_ends int32*n
           [header_ends int32*n] keys values [headers]

``crc`` is one ``zlib.crc32`` over everything after the header's first 21 bytes (attributes to the
end); ``header_crc`` covers the first 17 bytes (base offset, length, magic, crc), so assigning offsets
rewrites 8 bytes and re-checksums 17 instead of the whole batch, and every single changed byte is
still detected. Columns are packed and unpacked with one ``struct`` call each, so the per-record
Python work is a slice and a tuple, nothing more.

Decoding has three outcomes: a batch, *incomplete* (the bytes end inside the batch: a torn tail is
end-of-log, never an error) and *corrupt* (``CorruptRecordError``).
"""

from __future__ import annotations

import struct
import zlib
from bisect import bisect_left
from itertools import accumulate, chain, repeat
from typing import Iterator, NamedTuple, Sequence

from .errors import CorruptRecordError, InvalidRecordError

MAGIC = 1
"""Format version. Any change to the byte layout must change it (the golden fixture pins it)."""

# base_offset(8) batch_length(4) magic(1) crc(4) header_crc(4) attributes(2) last_offset_delta(4)
# record_count(4) base_timestamp(8) max_timestamp(8) delete_horizon_ms(8)
_HEADER = struct.Struct("<qiBIIHiiqqq")
HEADER_BYTES = 55
assert _HEADER.size == HEADER_BYTES
LOG_OVERHEAD_BYTES = 12  # base_offset + batch_length: the bytes not counted by batch_length
_BASE_OFFSET = struct.Struct("<q")
_LENGTH = struct.Struct("<i")
_HEADER_CRC_AT = 17  # header_crc sits at [17, 21) and covers [0, 17)
_BODY_AT = 21  # the body crc covers [21, end)
_CRC_AT = 13
_MIN_BATCH_LENGTH = HEADER_BYTES - LOG_OVERHEAD_BYTES
MAX_BATCH_BYTES = 2**31 - 1

# attributes
COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_LOG_APPEND = 0x08  # else CreateTime
_HAS_OFFSET_DELTAS = 0x10  # offsets are sparse (compacted); else base_offset + 0..n-1
_HAS_TIMESTAMPS = 0x20  # a per-record timestamp column; else every record has base_timestamp
_HAS_HEADERS = 0x40
_HAS_NULL_KEYS = 0x80
_HAS_NULL_VALUES = 0x100
_KNOWN_ATTRIBUTES = 0x1FF

NO_TIMESTAMP = -1
RECORD_OVERHEAD_BYTES = 16
"""Fixed bytes charged per record (besides key, value and headers) when a read counts
``max_bytes``; close to what a record costs in a batch."""

_STRUCTS: dict[tuple[str, int], struct.Struct] = {}


def _columns_struct(code: str, count: int) -> struct.Struct:
    key = (code, count)
    packer = _STRUCTS.get(key)
    if packer is None:
        if len(_STRUCTS) > 512:
            _STRUCTS.clear()
        packer = _STRUCTS[key] = struct.Struct(f"<{count}{code}")
    return packer


class Record(NamedTuple):
    """One record: what you append, and what a read returns (with ``offset`` filled in).

    ``key`` and ``value`` are bytes or None (a None value is a tombstone); ``headers`` is a
    sequence of ``(str, bytes | None)`` pairs (reads return a tuple of tuples); ``timestamp_ms``
    defaults to the time of the append."""

    key: bytes | None = None
    value: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp_ms: int | None = None
    offset: int | None = None


_new_record = tuple.__new__


class BatchHeader(NamedTuple):
    """The fixed header of a batch, as decoded (no CRC check of the body yet)."""

    base_offset: int
    batch_length: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    record_count: int
    base_timestamp: int
    max_timestamp: int
    delete_horizon_ms: int

    @property
    def size_bytes(self) -> int:
        return LOG_OVERHEAD_BYTES + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


def read_header(buffer, position: int = 0, where: str = "", whole: bool = True) -> BatchHeader | None:
    """Decode the header of the batch at ``position``; None when the bytes end before the header
    or (when ``whole``) before the end of the batch: incomplete. Raises ``CorruptRecordError`` when
    the header is damaged. The body's CRC is not checked here (``RecordBatch.verify`` does it)."""
    available = len(buffer) - position
    if available < _BODY_AT:
        return None
    header_crc = int.from_bytes(buffer[position + _HEADER_CRC_AT : position + _BODY_AT], "little")
    if zlib.crc32(buffer[position : position + _HEADER_CRC_AT]) != header_crc:
        raise CorruptRecordError(f"batch header checksum mismatch{where} at position {position}")
    if available < HEADER_BYTES:
        return None
    (base_offset, batch_length, magic, crc, _hcrc, attributes, last_offset_delta, record_count,
     base_timestamp, max_timestamp, delete_horizon_ms) = _HEADER.unpack_from(buffer, position)
    if magic != MAGIC:
        raise CorruptRecordError(f"unknown batch magic {magic}{where} at position {position}")
    if batch_length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"impossible batch length {batch_length}{where} at position {position}")
    if whole and available < LOG_OVERHEAD_BYTES + batch_length:
        return None
    return BatchHeader(base_offset, batch_length, magic, crc, attributes, last_offset_delta,
                       record_count, base_timestamp, max_timestamp, delete_horizon_ms)


class RecordBatch:
    """A decoded batch over a buffer holding exactly its bytes. Columns are parsed on first use;
    ``records()`` materialises ``Record`` tuples for a range of offsets."""

    __slots__ = ("header", "buffer", "_columns")

    def __init__(self, header: BatchHeader, buffer: bytes | memoryview) -> None:
        self.header = header
        self.buffer = buffer
        self._columns: _Columns | None = None

    # header fields, for convenience
    base_offset = property(lambda self: self.header.base_offset)
    last_offset = property(lambda self: self.header.last_offset)
    next_offset = property(lambda self: self.header.next_offset)
    record_count = property(lambda self: self.header.record_count)
    max_timestamp = property(lambda self: self.header.max_timestamp)
    size_bytes = property(lambda self: self.header.size_bytes)

    @classmethod
    def decode(cls, buffer, position: int = 0, where: str = "") -> "RecordBatch | None":
        """The batch at ``position`` with its CRC verified; None when incomplete."""
        header = read_header(buffer, position, where)
        if header is None:
            return None
        batch = cls(header, buffer[position : position + header.size_bytes])
        batch.verify(where, position)
        return batch

    def verify(self, where: str = "", position: int = 0) -> None:
        """Check the body CRC and that the columns are consistent; raise CorruptRecordError."""
        if zlib.crc32(memoryview(self.buffer)[_BODY_AT:]) != self.header.crc:
            raise CorruptRecordError(f"batch checksum mismatch{where} at position {position}")
        try:
            self._columns = _Columns(self.header, self.buffer)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{exc}{where} at position {position}") from None

    @property
    def columns(self) -> "_Columns":
        if self._columns is None:
            self._columns = _Columns(self.header, self.buffer)
        return self._columns

    def offsets(self) -> Sequence[int]:
        return self.columns.offsets(self.header.base_offset)

    def index_of(self, offset: int) -> int:
        """The index of the first record with offset >= ``offset``."""
        return self.columns.index_of(self.header.base_offset, offset)

    def records(self, start: int = 0, stop: int | None = None) -> list[Record]:
        """The records at indexes [start, stop), as ``Record`` tuples with offsets."""
        return self.columns.records(self.header, start, self.header.record_count if stop is None else stop)

    def payload_bytes(self, start: int, stop: int) -> int:
        """Bytes charged against a read's ``max_bytes`` for records [start, stop)."""
        return self.columns.cumulative_bytes(stop) - self.columns.cumulative_bytes(start)


class _Columns:
    """The parsed body of a batch: column tuples and blobs."""

    __slots__ = ("count", "offset_deltas", "timestamps", "key_ends", "value_ends", "header_ends",
                 "keys", "values", "headers", "null_keys", "null_values", "timestamp_default")

    def __init__(self, header: BatchHeader, buffer) -> None:
        attributes = header.attributes
        if attributes & ~_KNOWN_ATTRIBUTES:
            raise CorruptRecordError(f"unknown attribute bits {attributes:#x}")
        body = memoryview(buffer)[HEADER_BYTES:]
        compression = attributes & COMPRESSION_MASK
        if compression == COMPRESSION_GZIP:
            try:
                body = memoryview(zlib.decompress(body, wbits=31))
            except zlib.error as exc:
                raise CorruptRecordError(f"undecodable gzip body: {exc}") from None
        elif compression != COMPRESSION_NONE:
            raise CorruptRecordError(f"unknown compression codec {compression}")
        count = header.record_count
        if count < 0 or header.last_offset_delta < 0 or (
                count > 0 and not attributes & _HAS_OFFSET_DELTAS
                and count != header.last_offset_delta + 1):
            raise CorruptRecordError(
                f"record count {count} does not match last offset delta {header.last_offset_delta}")
        self.count = count
        self.null_keys = bool(attributes & _HAS_NULL_KEYS)
        self.null_values = bool(attributes & _HAS_NULL_VALUES)
        self.timestamp_default = (header.max_timestamp if attributes & TIMESTAMP_TYPE_LOG_APPEND
                                  else header.base_timestamp)
        position = 0
        int_columns = _columns_struct("i", count)
        column_bytes = 4 * count
        needed = column_bytes * (2 + bool(attributes & _HAS_OFFSET_DELTAS) + bool(attributes & _HAS_HEADERS))
        needed += 8 * count if attributes & _HAS_TIMESTAMPS else 0
        if needed > len(body):
            raise CorruptRecordError(f"batch body of {len(body)} bytes is too short for {count} records")
        self.offset_deltas = None
        if attributes & _HAS_OFFSET_DELTAS:
            self.offset_deltas = int_columns.unpack_from(body, position)
            position += column_bytes
            if count and (self.offset_deltas[0] < 0 or self.offset_deltas[-1] > header.last_offset_delta
                          or any(map(int.__ge__, self.offset_deltas, self.offset_deltas[1:]))):
                raise CorruptRecordError("offset deltas are not increasing within the batch")
        self.timestamps = None
        if attributes & _HAS_TIMESTAMPS:
            self.timestamps = _columns_struct("q", count).unpack_from(body, position)
            position += 8 * count
        self.key_ends = int_columns.unpack_from(body, position)
        position += column_bytes
        self.value_ends = int_columns.unpack_from(body, position)
        position += column_bytes
        self.header_ends = None
        if attributes & _HAS_HEADERS:
            self.header_ends = int_columns.unpack_from(body, position)
            position += column_bytes
        blobs = []
        for ends in (self.key_ends, self.value_ends, self.header_ends):
            length = _end_at(ends, count - 1) if ends else 0
            if length < 0 or position + length > len(body):
                raise CorruptRecordError("batch blobs overrun the batch body")
            blobs.append(body[position : position + length])
            position += length
        if position != len(body):
            raise CorruptRecordError(f"batch body has {len(body) - position} unexplained bytes")
        # Views until records are materialised: verification alone copies nothing.
        self.keys, self.values, self.headers = blobs

    def _materialise(self) -> None:
        if isinstance(self.keys, memoryview):
            self.keys, self.values, self.headers = bytes(self.keys), bytes(self.values), bytes(self.headers)

    def offsets(self, base_offset: int) -> Sequence[int]:
        if self.offset_deltas is None:
            return range(base_offset, base_offset + self.count)
        return [base_offset + delta for delta in self.offset_deltas]

    def index_of(self, base_offset: int, offset: int) -> int:
        relative = offset - base_offset
        if self.offset_deltas is None:
            return min(max(relative, 0), self.count)
        return bisect_left(self.offset_deltas, relative)

    def cumulative_bytes(self, index: int) -> int:
        """Charged bytes of records [0, index)."""
        if index <= 0:
            return 0
        total = _end_at(self.key_ends, index - 1) + _end_at(self.value_ends, index - 1)
        if self.header_ends is not None:
            total += self.header_ends[index - 1]
        return total + RECORD_OVERHEAD_BYTES * index

    def records(self, header: BatchHeader, start: int, stop: int) -> list[Record]:
        start = max(start, 0)
        stop = min(stop, self.count)
        if start >= stop:
            return []
        n = stop - start
        base = header.base_offset
        self._materialise()
        if self.offset_deltas is None:
            offsets = range(base + start, base + stop)
        else:
            offsets = map(base.__add__, self.offset_deltas[start:stop])
        timestamps = (repeat(self.timestamp_default, n) if self.timestamps is None
                      or header.attributes & TIMESTAMP_TYPE_LOG_APPEND else self.timestamps[start:stop])
        keys = _slices(self.keys, self.key_ends, start, stop, self.null_keys)
        values = _slices(self.values, self.value_ends, start, stop, self.null_values)
        headers = repeat((), n) if self.header_ends is None else _decode_headers(
            self.headers, self.header_ends, start, stop)
        return list(map(_new_record, repeat(Record, n), zip(keys, values, headers, timestamps, offsets)))


def _end_at(ends: Sequence[int], index: int) -> int:
    end = ends[index]
    return end if end >= 0 else ~end


def _slices(blob: bytes, ends: Sequence[int], start: int, stop: int, has_nulls: bool) -> list:
    first = _end_at(ends, start - 1) if start else 0
    window = ends[start:stop]
    if not has_nulls:
        return [blob[a:b] for a, b in zip(chain((first,), window), window)]
    out = []
    previous = first
    for end in window:
        if end < 0:
            out.append(None)
            previous = ~end
        else:
            out.append(blob[previous:end])
            previous = end
    return out


_HEADER_FIELD = struct.Struct("<i")


def _decode_headers(blob: bytes, ends: Sequence[int], start: int, stop: int) -> list:
    out = []
    position = ends[start - 1] if start else 0
    unpack = _HEADER_FIELD.unpack_from
    try:
        for end in ends[start:stop]:
            if position == end:
                out.append(())
                continue
            pairs = []
            while position < end:
                (key_length,) = unpack(blob, position)
                position += 4
                key = blob[position : position + key_length].decode("utf-8")
                position += key_length
                (value_length,) = unpack(blob, position)
                position += 4
                if value_length < 0:
                    value = None
                else:
                    value = blob[position : position + value_length]
                    position += value_length
                pairs.append((key, value))
            if position != end:
                raise CorruptRecordError("record headers overrun their bounds")
            out.append(tuple(pairs))
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"undecodable record headers: {exc}") from None
    return out


# --- encoding ------------------------------------------------------------------------------------


def _ends(items: Sequence, what: str) -> tuple[list[int], bytes, bool]:
    """Cumulative ends of ``items`` (bytes or None) and their concatenation."""
    try:
        ends = list(accumulate(map(len, items)))
        has_nulls = False
    except TypeError:
        ends = []
        total = 0
        for item in items:
            if item is None:
                ends.append(~total)
            else:
                total += len(item)
                ends.append(total)
        has_nulls = True
    try:
        blob = b"".join(filter(None, items)) if has_nulls else b"".join(items)
    except TypeError:
        bad = next(item for item in items if item is not None and not isinstance(item, (bytes, bytearray, memoryview)))
        raise TypeError(f"record {what} must be bytes or None, got {bad!r}") from None
    if ends and _end_at(ends, -1) != len(blob):
        bad = next(item for item in items if item is not None and not isinstance(item, (bytes, bytearray)))
        raise TypeError(f"record {what} must be bytes or None, got {bad!r}")
    return ends, blob, has_nulls


def _encode_headers(all_headers: Sequence) -> tuple[list[int], bytes]:
    parts = []
    ends = []
    total = 0
    pack = _HEADER_FIELD.pack
    for headers in all_headers:
        for pair in headers:
            try:
                key, value = pair
                key_bytes = key.encode("utf-8")
            except (TypeError, ValueError, AttributeError):
                raise TypeError(f"a record header must be a (str, bytes | None) pair, got {pair!r}") from None
            parts.append(pack(len(key_bytes)))
            parts.append(key_bytes)
            if value is None:
                parts.append(pack(-1))
                total += 8 + len(key_bytes)
            else:
                if not isinstance(value, (bytes, bytearray)):
                    raise TypeError(f"a record header value must be bytes or None, got {value!r}")
                parts.append(pack(len(value)))
                parts.append(value)
                total += 8 + len(key_bytes) + len(value)
        ends.append(total)
    return ends, b"".join(parts)


def encode_batch(records: Sequence[Record], *, base_offset: int = 0, default_timestamp_ms: int = NO_TIMESTAMP,
                 compression: int = COMPRESSION_NONE, log_append_time: bool = False,
                 offset_deltas: Sequence[int] | None = None, last_offset_delta: int | None = None,
                 delete_horizon_ms: int = -1) -> bytearray:
    """Encode ``records`` as one batch.

    Records whose ``timestamp_ms`` is None get ``default_timestamp_ms``. ``offset_deltas`` (strictly
    increasing, for compacted batches) and ``last_offset_delta`` override the dense 0..n-1 offsets;
    with no records, ``last_offset_delta`` makes an empty batch that only carries offsets forward.
    The result is a bytearray so the caller can assign the base offset in place
    (``assign_base_offset``)."""
    count = len(records)
    if count:
        keys, values, headers, timestamps, _offsets = zip(*records)
    else:
        keys = values = headers = timestamps = ()
    if log_append_time:  # every record reads as the append time, kept once in the header
        timestamps = (default_timestamp_ms,) * count
    try:
        low = min(timestamps) if count else default_timestamp_ms
        high = max(timestamps) if count else default_timestamp_ms
        if low is None or high is None:  # a single record: min/max compared nothing
            raise TypeError
    except TypeError:
        timestamps = tuple(default_timestamp_ms if t is None else t for t in timestamps)
        try:
            low, high = min(timestamps), max(timestamps)
        except TypeError:
            bad = next(t for t in timestamps if not isinstance(t, int))
            raise TypeError(f"record timestamp_ms must be an int or None, got {bad!r}") from None
    if not isinstance(low, int) or not isinstance(high, int):
        bad = next(t for t in timestamps if not isinstance(t, int))
        raise TypeError(f"record timestamp_ms must be an int or None, got {bad!r}")
    attributes = compression | (TIMESTAMP_TYPE_LOG_APPEND if log_append_time else 0)
    parts: list[bytes] = []
    if offset_deltas is not None:
        if len(offset_deltas) != count:
            raise ValueError(f"{len(offset_deltas)} offset deltas for {count} records")
        attributes |= _HAS_OFFSET_DELTAS
        parts.append(_columns_struct("i", count).pack(*offset_deltas))
        if last_offset_delta is None:
            last_offset_delta = offset_deltas[-1] if count else 0
    elif last_offset_delta is None:
        last_offset_delta = max(count - 1, 0)
    elif count and last_offset_delta != count - 1:
        raise ValueError(f"last_offset_delta {last_offset_delta} needs offset_deltas for {count} records")
    if low != high:
        attributes |= _HAS_TIMESTAMPS
        try:
            parts.append(_columns_struct("q", count).pack(*timestamps))
        except struct.error:
            raise ValueError(f"record timestamps out of the int64 range: {low!r}..{high!r}") from None
    key_ends, key_blob, null_keys = _ends(keys, "key")
    value_ends, value_blob, null_values = _ends(values, "value")
    if null_keys:
        attributes |= _HAS_NULL_KEYS
    if null_values:
        attributes |= _HAS_NULL_VALUES
    int_columns = _columns_struct("i", count)
    try:
        parts.append(int_columns.pack(*key_ends))
        parts.append(int_columns.pack(*value_ends))
    except struct.error:
        raise InvalidRecordError("a batch's keys or values exceed 2 GiB") from None
    blobs = [key_blob, value_blob]
    if any(headers):
        attributes |= _HAS_HEADERS
        header_ends, header_blob = _encode_headers(headers)
        parts.append(int_columns.pack(*header_ends))
        blobs.append(header_blob)
    body = b"".join(chain(parts, blobs))
    if compression == COMPRESSION_GZIP:
        body = zlib.compress(body, 6, wbits=31)
    elif compression != COMPRESSION_NONE:
        raise ValueError(f"unknown compression codec {compression!r}")
    batch_length = HEADER_BYTES - LOG_OVERHEAD_BYTES + len(body)
    if batch_length > MAX_BATCH_BYTES - LOG_OVERHEAD_BYTES:
        raise InvalidRecordError(f"a batch of {batch_length} bytes exceeds the 2 GiB format limit")
    buffer = bytearray(HEADER_BYTES + len(body))
    buffer[HEADER_BYTES:] = body
    _HEADER.pack_into(buffer, 0, base_offset, batch_length, MAGIC, 0, 0, attributes, last_offset_delta,
                      count, low, high, delete_horizon_ms)
    struct.pack_into("<I", buffer, _CRC_AT, zlib.crc32(memoryview(buffer)[_BODY_AT:]))
    _seal_header(buffer, 0)
    return buffer


def _seal_header(buffer: bytearray, position: int) -> None:
    struct.pack_into("<I", buffer, position + _HEADER_CRC_AT,
                     zlib.crc32(memoryview(buffer)[position : position + _HEADER_CRC_AT]))


def assign_base_offset(buffer: bytearray, base_offset: int, position: int = 0) -> None:
    """Rewrite the base offset of the batch at ``position`` and re-seal its header checksum.
    The body CRC does not cover the base offset, so this costs 17 checksummed bytes."""
    _BASE_OFFSET.pack_into(buffer, position, base_offset)
    _seal_header(buffer, position)


def iter_batches(buffer, position: int = 0, where: str = "") -> Iterator[tuple[int, RecordBatch]]:
    """Yield ``(position, batch)`` for consecutive verified batches from ``position``; stop quietly
    at an incomplete batch (torn tail); raise ``CorruptRecordError`` at a corrupt one."""
    while True:
        batch = RecordBatch.decode(buffer, position, where)
        if batch is None:
            return
        yield position, batch
        position += batch.header.size_bytes


def iter_headers(buffer, position: int = 0, where: str = "") -> Iterator[tuple[int, BatchHeader]]:
    """Like ``iter_batches`` but decodes headers only (no body CRC): for skipping through data."""
    while True:
        header = read_header(buffer, position, where)
        if header is None:
            return
        yield position, header
        position += header.size_bytes
