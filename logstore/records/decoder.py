"""The record batch format, decoding side: ``Record``, ``BatchHeader``, ``RecordBatch``, batch scanning.

Pure: bytes in, values out; no files, clocks or threads. docs/FORMAT.md is the full specification
(grammar, a worked example with bytes, and the rationale). In short, a batch is a 55-byte
little-endian header followed by a column-wise body::

    base_offset int64 | batch_length int32 | magic uint8 | crc uint32 | header_crc uint32 |
    attributes uint16 | last_offset_delta int32 | record_count int32 |
    base_timestamp int64 | max_timestamp int64 | delete_horizon_ms int64 | body

    body = [offset_deltas int32*n] [timestamps int64*n] key_ends int32*n value_ends int32*n
           [header_ends int32*n header_counts uint16*n] keys values [headers]   (headers: header_columns.py)

``crc`` is one ``zlib.crc32`` over everything after the header's first 21 bytes (attributes to the
end); ``header_crc`` covers the first 17 bytes (base offset, length, magic, crc), so assigning offsets
rewrites 8 bytes and re-checksums 17 instead of the whole batch, and every single changed byte is
still detected. Columns are packed and unpacked with one ``struct`` call each, so the per-record
Python work is a slice and a tuple, nothing more.

Encoding lives in ``encoder.py``. Decoding has three outcomes: a batch, *incomplete* (the bytes end inside the batch: a torn tail is
end-of-log, never an error) and *corrupt* (``CorruptRecordError``).

Why a read's ``Record`` is built whole (every field decoded), by measurement. A record that decodes
its fields on first access was measured against today's, per record in a 1,000-record batch, with a
loop reading ``offset`` and ``value`` (the commands are in docs/guide/benchmarks.md, row 1):
built whole by C-level calls over whole columns (``map(tuple.__new__, ...)`` over ``struct``-cut
keys and values) 136 ns; the same without the key (what laziness could save at best) 122 ns; a
slotted object holding the batch's columns and an index, decoding on access, 157 ns, because each
field read runs a Python ``property`` (about 40 ns) where a ``Record`` field is a C-level tuple
read; SQLite's scan reading the same two columns 355 ns. A lazy ``Record`` *subclass* is worse
still: a tuple subclass cannot add slots, so its state has to live in the tuple's own items, every
tuple method must be overridden in Python (a field read then cost 365 ns per record in the same
loop), and C code that takes a tuple's items directly still sees the batch and the index instead of
the fields, silently (``"%s %s" % r`` does; so does any extension using ``PyTuple_GET_ITEM``). So reads return
plain ``Record`` tuples, built in bulk at C level. (A slotted non-tuple object given ``offset`` and
``value`` at build and decoding the rest on access measured 110 ns: it would pass 3× on the loop
body alone, but it is another type, not a tuple nor a ``Record``, and the read around it, I/O and
checksums, costs about 70 ns a record more on a quiet machine.) What is never read costs little (keys are cut
by the same ``struct`` call as the values; timestamps and empty headers are shared objects). Reads
that must not build a Python object per record take columns instead.
"""

from __future__ import annotations

import struct
import zlib
from bisect import bisect_left
from functools import lru_cache
from itertools import chain, repeat
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, NamedTuple, Sequence

from ..errors import CorruptRecordError
from . import codecs, control, header_columns
from .codecs import COMPRESSION_GZIP, COMPRESSION_NONE

if TYPE_CHECKING:  # annotations only
    from mmap import mmap
    from typing import TypeAlias

    BufferLike: TypeAlias = "bytes | bytearray | memoryview | mmap"
    """What batches are decoded from: bytes read from a segment, a mapping of one, or a view."""
    Headers: TypeAlias = "tuple[tuple[str, bytes | None], ...]"
    """One record's headers as reads return them: ``(name, value)`` pairs."""

MAGIC = 3
"""Format version the encoder writes; any byte layout change must change it (golden fixtures pin it)."""
MAGICS = (1, 2, 3)  # what readers read: magic 1 (headers as length-prefixed pairs) and 2 stay readable

# base_offset(8) batch_length(4) magic(1) crc(4) header_crc(4) attributes(2) last_offset_delta(4)
# record_count(4) base_timestamp(8) max_timestamp(8) delete_horizon_ms(8)
HEADER_STRUCT = struct.Struct("<qiBIIHiiqqq")
HEADER_BYTES = 55
assert HEADER_STRUCT.size == HEADER_BYTES
LOG_OVERHEAD_BYTES = 12  # base_offset + batch_length: the bytes not counted by batch_length
CRC_AT = 13
HEADER_CRC_AT = 17  # header_crc sits at [17, 21) and covers [0, 17)
BODY_AT = 21  # the body crc covers [21, end)
_MIN_BATCH_LENGTH = HEADER_BYTES - LOG_OVERHEAD_BYTES
_MIN_PRODUCER_BATCH_LENGTH = _MIN_BATCH_LENGTH + 14  # with the producer block
MAX_BATCH_BYTES = 2**31 - 1

# attributes
COMPRESSION_MASK = 0x07  # the codec (``codecs``): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
TIMESTAMP_TYPE_LOG_APPEND = 0x08  # else CreateTime
HAS_OFFSET_DELTAS = 0x10  # offsets are sparse (compacted); else base_offset + 0..n-1
HAS_TIMESTAMPS = 0x20  # a per-record timestamp column; else every record has base_timestamp
HAS_HEADERS = 0x40
HAS_NULL_KEYS = 0x80
HAS_NULL_VALUES = 0x100
KNOWN_ATTRIBUTES = 0x1FF
# magic 3 (known only there: in magic 1 and 2 these bits are unknown, so corrupt)
HAS_PRODUCER = 0x400  # a producer block follows the header (``PRODUCER_STRUCT``)
TRANSACTIONAL = 0x800  # part of its producer's transaction
CONTROL = 0x1000  # a control batch: one control record (``control.py``), a transaction marker
PRODUCER_BITS = HAS_PRODUCER | TRANSACTIONAL | CONTROL
PRODUCER_STRUCT = struct.Struct("<qhi")  # producer_id int64, producer_epoch int16, base_sequence int32
PRODUCER_BYTES = 14
assert PRODUCER_STRUCT.size == PRODUCER_BYTES
NO_SEQUENCE = -1

NO_TIMESTAMP = -1
RECORD_OVERHEAD_BYTES = 16
"""Fixed bytes charged per record (besides key, value and headers) when a read counts
``max_bytes``; close to what a record costs in a batch."""

_STRUCTS: dict[tuple[str, int], struct.Struct] = {}


def body_at(attributes: int) -> int:
    """Where the body of a batch with these ``attributes`` starts: after the header, and after the
    producer block when the batch has one."""
    return HEADER_BYTES + PRODUCER_BYTES if attributes & HAS_PRODUCER else HEADER_BYTES


class ProducerFields(NamedTuple):
    """A batch's producer block (magic 3, ``HAS_PRODUCER``), and its two flags."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool = False
    control: bool = False


def columns_struct(code: str, count: int) -> struct.Struct:
    """A cached ``Struct`` packing ``count`` little-endian values of type ``code``."""
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


def record_charge(record: Record) -> int:
    """Bytes a read charges against ``max_bytes`` for ``record``: key, value and header bytes plus
    ``RECORD_OVERHEAD_BYTES`` (the same sum ``RecordBatch.payload_bytes`` takes from the columns)."""
    charge = len(record.key or b"") + len(record.value or b"") + RECORD_OVERHEAD_BYTES
    for name, value in record.headers:
        charge += 8 + len(name.encode("utf-8")) + len(value or b"")
    return charge


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


def read_header(buffer: BufferLike, position: int = 0, where: str = "", whole: bool = True) -> BatchHeader | None:
    """Decode the header of the batch at ``position``; None when the bytes end before the header
    or (when ``whole``) before the end of the batch: incomplete. Raises ``CorruptRecordError`` when
    the header is damaged. The body's CRC is not checked here (``RecordBatch.verify`` does it)."""
    available = len(buffer) - position
    if available < BODY_AT:
        return None
    header_crc = int.from_bytes(buffer[position + HEADER_CRC_AT : position + BODY_AT], "little")
    if zlib.crc32(buffer[position : position + HEADER_CRC_AT]) != header_crc:
        raise CorruptRecordError(f"batch header checksum mismatch{where} at position {position}")
    if available < HEADER_BYTES:
        return None
    (base_offset, batch_length, magic, crc, _hcrc, attributes, last_offset_delta, record_count,
     base_timestamp, max_timestamp, delete_horizon_ms) = HEADER_STRUCT.unpack_from(buffer, position)
    if magic not in MAGICS:
        raise CorruptRecordError(f"unknown batch magic {magic}{where} at position {position}")
    if batch_length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"impossible batch length {batch_length}{where} at position {position}")
    if attributes & HAS_PRODUCER and batch_length < _MIN_PRODUCER_BATCH_LENGTH and magic >= 3:
        raise CorruptRecordError(f"impossible batch length {batch_length}{where} at position {position}")
    if whole and available < LOG_OVERHEAD_BYTES + batch_length:
        return None
    return BatchHeader(base_offset, batch_length, magic, crc, attributes, last_offset_delta,
                       record_count, base_timestamp, max_timestamp, delete_horizon_ms)


def columns_bytes(header: BatchHeader) -> int:
    """Bytes of the fixed-width columns at the start of an uncompressed body."""
    attributes = header.attributes
    per_record = 8 + 4 * bool(attributes & HAS_OFFSET_DELTAS) + 8 * bool(attributes & HAS_TIMESTAMPS)
    per_record += header_columns.per_record_bytes(header.magic, attributes) if attributes & HAS_HEADERS else 0
    return per_record * header.record_count


class RecordBatch:
    """A batch over a buffer holding its bytes. Columns are parsed on demand; ``records()``
    materialises ``Record`` tuples for a range of record indexes.

    A *partial* batch (``RecordBatch(header, header_and_columns, fetch)``) holds only the header and
    the columns of an uncompressed batch already known to be intact, and reads the key, value and
    header bytes it needs through ``fetch(position_in_body, size)``: a point read of one record in
    a large batch costs a few small reads instead of the whole batch."""

    __slots__ = ("header", "buffer", "_fetch", "_columns")

    def __init__(self, header: BatchHeader, buffer: BufferLike,
                 fetch: Callable[[int, int], bytes] | None = None) -> None:
        self.header = header
        self.buffer = buffer
        self._fetch = fetch
        self._columns: _Columns | None = None

    # header fields, for convenience
    base_offset = property(lambda self: self.header.base_offset)
    last_offset = property(lambda self: self.header.last_offset)
    next_offset = property(lambda self: self.header.next_offset)
    record_count = property(lambda self: self.header.record_count)
    max_timestamp = property(lambda self: self.header.max_timestamp)
    size_bytes = property(lambda self: self.header.size_bytes)

    @classmethod
    def decode(cls, buffer: BufferLike, position: int = 0, where: str = "") -> "RecordBatch | None":
        """The batch at ``position`` with its CRC verified; None when incomplete."""
        header = read_header(buffer, position, where)
        if header is None:
            return None
        batch = cls(header, memoryview(buffer)[position : position + header.size_bytes])
        batch.verify(where, position)
        return batch

    def verify(self, where: str = "", position: int = 0) -> None:
        """Check the body CRC and that the columns are consistent; raise CorruptRecordError."""
        if self._fetch is not None:
            raise ValueError("a partial batch cannot be verified")
        if zlib.crc32(memoryview(self.buffer)[BODY_AT:]) != self.header.crc:
            raise CorruptRecordError(f"batch checksum mismatch{where} at position {position}")
        attributes = self.header.attributes
        try:
            if attributes & PRODUCER_BITS:  # plain batches pay nothing for the rules below
                _check_producer_rules(self.header)
            self._columns = _Columns(self.header, memoryview(self.buffer)[body_at(attributes):], None)
            if attributes & CONTROL:
                record = self._columns._record_at(self.header, 0)
                control.decode_marker(record.key, record.value)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{exc}{where} at position {position}") from None

    @property
    def columns(self) -> "_Columns":
        if self._columns is None:
            self._columns = _Columns(self.header, memoryview(self.buffer)[body_at(self.header.attributes):],
                                     self._fetch)
        return self._columns

    @property
    def producer(self) -> ProducerFields | None:
        """The batch's producer block with its transactional and control flags, or None when it
        has none (every magic 1 and 2 batch, and magic 3 batches not written for a producer)."""
        attributes = self.header.attributes
        if not attributes & HAS_PRODUCER or self.header.magic < 3:
            return None
        producer_id, epoch, sequence = PRODUCER_STRUCT.unpack_from(self.buffer, HEADER_BYTES)
        return ProducerFields(producer_id, epoch, sequence, bool(attributes & TRANSACTIONAL),
                              bool(attributes & CONTROL))

    def offsets(self) -> Sequence[int]:
        return self.columns.offsets(self.header.base_offset)

    def index_of(self, offset: int) -> int:
        """The index of the first record with offset >= ``offset``."""
        return self.columns.index_of(self.header.base_offset, offset)

    def records(self, start: int = 0, stop: int | None = None) -> list[Record]:
        """The records at indexes [start, stop), as ``Record`` tuples with offsets."""
        return list(self.iter_records(start, stop))

    def iter_records(self, start: int = 0, stop: int | None = None) -> Iterator[Record]:
        """Like ``records`` but builds each ``Record`` only when the iterator reaches it, so a scan
        that drops records as it goes keeps few objects alive (and the garbage collector idle)."""
        count = self.header.record_count
        return self.columns.iter_records(self.header, max(start, 0), count if stop is None else min(stop, count))

    def record_at(self, index: int) -> Record:
        """The record at ``index`` alone, reading only its own column entries and bytes."""
        if not 0 <= index < self.header.record_count:
            raise IndexError(f"record index {index} is outside the {self.header.record_count} records of the batch")
        return self.columns._record_at(self.header, index)

    def keys(self) -> Sequence[bytes | None]:
        """Every record's key (None for a null key), cut from the key column in one pass: what the
        cleaner maps and filters by, without building records."""
        columns = self.columns
        if not columns.count:
            return ()
        return columns._byte_values(_KEYS, _KEY_ENDS, 0, columns.count, columns.null_keys)

    def values(self) -> Sequence[bytes | None]:
        """Every record's value (None for a tombstone), cut from the value column in one pass: what
        the Kafka server's fetch path re-encodes, without building records."""
        columns = self.columns
        if not columns.count:
            return ()
        return columns._byte_values(_VALUES, _VALUE_ENDS, 0, columns.count, columns.null_values)

    def headers(self, start: int = 0, stop: int | None = None) -> list[Headers]:
        """Per record [start, stop), its headers (a tuple of ``(name, value)`` pairs), decoded column-wise
        without building records: what the Spark source and the Kafka server's fetch path take."""
        count = self.header.record_count
        start, stop = max(start, 0), count if stop is None else min(stop, count)
        if start >= stop or self.columns.at[_HEADER_ENDS] < 0:
            return [()] * max(stop - start, 0)
        return self.columns._headers(start, stop)

    def null_values(self) -> Sequence[bool] | None:
        """Per record, whether its value is null (a tombstone); None when the batch has none."""
        columns = self.columns
        if not columns.null_values or not columns.count:
            return None
        return [end < 0 for end in columns.ints(_VALUE_ENDS, 0, columns.count)]

    def raw_columns(self) -> "RawColumns":
        """The batch's columns as raw little-endian buffers (memoryviews into the batch, or into its
        decompressed body), for consumers that take whole columns without building records: the
        Spark source turns them into Arrow arrays. See docs/FORMAT.md for the layout."""
        columns = self.columns
        body, at, count = columns.body, columns.at, columns.count

        def column(index: int) -> memoryview | None:
            return None if at[index] < 0 else body[at[index] : at[index] + _WIDTHS[index] * count]

        keys, values, headers = (body[start : start + size] for start, size in zip(columns.blob_at, columns.blob_bytes))
        return RawColumns(count, self.header.base_offset, column(_DELTAS), column(_TIMESTAMPS),
                          columns.timestamp_default, bool(self.header.attributes & TIMESTAMP_TYPE_LOG_APPEND),
                          columns.column_bytes(_KEY_ENDS), columns.column_bytes(_VALUE_ENDS), column(_HEADER_ENDS),
                          keys, values, headers, columns.null_keys, columns.null_values)

    def payload_bytes(self, start: int, stop: int) -> int:
        """Bytes charged against a read's ``max_bytes`` for records [start, stop)."""
        return self.columns.cumulative_bytes(stop) - self.columns.cumulative_bytes(start)


def _check_producer_rules(header: BatchHeader) -> None:
    """The structural rules of magic 3's producer bits (docs/FORMAT.md 1.12); raise
    CorruptRecordError. The bits themselves are refused as unknown in older magics (``_Columns``)."""
    attributes = header.attributes
    if header.magic < 3:
        return  # unknown bits: _Columns reports them
    if not attributes & HAS_PRODUCER:
        raise CorruptRecordError(f"attributes {attributes:#x}: transactional or control without a producer block")
    if attributes & CONTROL:
        if not attributes & TRANSACTIONAL:
            raise CorruptRecordError(f"attributes {attributes:#x}: a control batch that is not transactional")
        if attributes & (COMPRESSION_MASK | HAS_HEADERS | HAS_OFFSET_DELTAS):
            raise CorruptRecordError(f"attributes {attributes:#x}: a control batch compressed, with headers "
                                     "or with offset deltas")
        if header.record_count != 1 or header.last_offset_delta != 0:
            raise CorruptRecordError(f"a control batch of {header.record_count} records "
                                     f"(last offset delta {header.last_offset_delta}), not one")


class RawColumns(NamedTuple):
    """A batch's columns as raw buffers (``RecordBatch.raw_columns``). Ends columns hold int32 blob
    ends, ``~end`` (negative) for a null; ``offset_deltas`` is None when offsets are dense
    (``base_offset + i``), ``timestamps`` None when every record has ``timestamp_default``, and
    ``header_ends`` None when no record has headers (then ``headers`` is empty)."""

    count: int  # type: ignore[assignment]  # the record count, named so; it hides tuple.count, unused here
    base_offset: int
    offset_deltas: memoryview | None  # int32 * count
    timestamps: memoryview | None  # int64 * count, milliseconds
    timestamp_default: int
    log_append_time: bool
    key_ends: memoryview  # int32 * count
    value_ends: memoryview
    header_ends: memoryview | None
    keys: memoryview
    values: memoryview
    headers: memoryview
    null_keys: bool
    null_values: bool


_DELTAS, _TIMESTAMPS, _KEY_ENDS, _VALUE_ENDS, _HEADER_ENDS, _HEADER_COUNTS = range(6)
_CODES, _CODES_WIDE = ("i", "q", "i", "i", "i", "H"), ("i", "q", "i", "i", "i", "i")  # header_counts: uint16 | int32
_WIDTHS, _WIDTHS_WIDE = (4, 8, 4, 4, 4, 2), (4, 8, 4, 4, 4, 4)
_KEYS, _VALUES, _HEADERS = range(3)
assert (_HEADER_ENDS, _HEADER_COUNTS, _HEADERS) == header_columns.COLUMN_NUMBERS
_INT = struct.Struct("<i")
_INT_PAIR = struct.Struct("<ii")
_LONG = struct.Struct("<q")


class _Columns:
    """The body of a batch, parsed on demand. ``body`` holds at least the columns; the key, value
    and header blobs come from ``body`` too, or through ``fetch`` for a partial batch. Only the
    column entries and blob bytes a request touches are unpacked and copied."""

    __slots__ = ("count", "body", "fetch", "at", "cache", "blob_at", "blob_bytes", "full_blobs",
                 "null_keys", "null_values", "timestamp_default", "constant_timestamps", "codes", "widths")

    def __init__(self, header: BatchHeader, body: memoryview, fetch: Callable[[int, int], bytes] | None) -> None:
        attributes = header.attributes
        extra = attributes & ~KNOWN_ATTRIBUTES  # none in most batches: one test
        if extra and extra & ~(header_columns.known_attributes(header.magic, attributes)
                               | (PRODUCER_BITS if header.magic >= 3 else 0)):
            raise CorruptRecordError(f"unknown attribute bits {attributes:#x}")
        wide = attributes & header_columns.WIDE_COUNTS
        self.codes, self.widths = (_CODES_WIDE, _WIDTHS_WIDE) if wide else (_CODES, _WIDTHS)
        compression = attributes & COMPRESSION_MASK
        if compression == COMPRESSION_GZIP:
            if fetch is not None:
                raise ValueError("compressed batches cannot be read partially")
            try:
                body = memoryview(zlib.decompress(body, wbits=31))
            except zlib.error as exc:
                raise CorruptRecordError(f"undecodable gzip body: {exc}") from None
        elif compression != COMPRESSION_NONE:
            if fetch is not None:
                raise ValueError("compressed batches cannot be read partially")
            body = codecs.decompress(compression, body)
        count = header.record_count
        if count < 0 or header.last_offset_delta < 0 or (
                count > 0 and not attributes & HAS_OFFSET_DELTAS and count != header.last_offset_delta + 1):
            raise CorruptRecordError(
                f"record count {count} does not match last offset delta {header.last_offset_delta}")
        self.count = count
        self.body = body
        self.fetch = fetch
        self.cache: list[tuple[int, ...] | None] = [None] * 6
        self.full_blobs: list[bytes | None] = [None] * 3
        self.null_keys = bool(attributes & HAS_NULL_KEYS)
        self.null_values = bool(attributes & HAS_NULL_VALUES)
        self.constant_timestamps = bool(attributes & TIMESTAMP_TYPE_LOG_APPEND or not attributes & HAS_TIMESTAMPS)
        self.timestamp_default = (header.max_timestamp if attributes & TIMESTAMP_TYPE_LOG_APPEND
                                  else header.base_timestamp)
        present = (attributes & HAS_OFFSET_DELTAS, attributes & HAS_TIMESTAMPS, True, True, attributes & HAS_HEADERS,
                   attributes & HAS_HEADERS and header.magic >= 2)
        self.at = [-1] * 6
        position = 0
        for column in range(6):
            if present[column]:
                self.at[column] = position
                position += self.widths[column] * count
        if position > len(body):
            raise CorruptRecordError(f"batch body of {len(body)} bytes is too short for {count} records")
        lengths = (self.end_at(_KEY_ENDS, count - 1), self.end_at(_VALUE_ENDS, count - 1),
                   self.end_at(_HEADER_ENDS, count - 1) if present[_HEADER_ENDS] else 0)
        if present[_HEADER_COUNTS]:  # magic 2: the headers section holds 8 bytes per header too
            lengths = (*lengths[:2], lengths[2] + header_columns.ENTRY_BYTES * self.count_at(count - 1))
        self.blob_at = (position, position + lengths[0], position + lengths[0] + lengths[1])
        self.blob_bytes = lengths
        total = position + sum(lengths)
        expected = len(body) if fetch is None else header.size_bytes - body_at(attributes)
        if min(lengths) < 0 or total != expected:
            raise CorruptRecordError(f"batch body holds {expected} bytes but its columns describe {total}")
        if present[_DELTAS] and count:
            deltas = self.ints(_DELTAS, 0, count)
            if deltas[0] < 0 or deltas[-1] > header.last_offset_delta or any(map(int.__ge__, deltas, deltas[1:])):
                raise CorruptRecordError("offset deltas are not increasing within the batch")
        if present[_HEADER_COUNTS] and fetch is None:
            header_columns.check(body[self.blob_at[_HEADERS] :], self.column_bytes(_HEADER_COUNTS),
                                 self.column_bytes(_HEADER_ENDS), count)

    # --- column access ---------------------------------------------------------------------------

    def ints(self, column: int, start: int, stop: int) -> tuple[int, ...]:
        """Entries [start, stop) of a column (the whole column is cached once unpacked)."""
        cached = self.cache[column]
        if cached is None:
            if start == 0 and stop == self.count:
                cached = self.cache[column] = columns_struct(self.codes[column], stop).unpack_from(
                    self.body, self.at[column])
                return cached
            return columns_struct(self.codes[column], stop - start).unpack_from(
                self.body, self.at[column] + self.widths[column] * start)
        return cached if start == 0 and stop == self.count else cached[start:stop]

    def column_bytes(self, column: int) -> memoryview:
        return self.body[self.at[column] : self.at[column] + self.widths[column] * self.count]

    def count_at(self, index: int) -> int:
        """``header_counts[index]`` (0 before the first record)."""
        return self.ints(_HEADER_COUNTS, index, index + 1)[0] if index >= 0 else 0

    def end_at(self, column: int, index: int) -> int:
        """The blob end of record ``index`` in an ends column (0 before the first record)."""
        if index < 0:
            return 0
        cached = self.cache[column]
        end: int = cached[index] if cached is not None else _INT.unpack_from(self.body, self.at[column] + 4 * index)[0]
        return end if end >= 0 else ~end

    def blob(self, which: int, low: int, high: int) -> tuple[bytes, int]:
        """Bytes [low, high) of a blob as ``(data, base)``: ``data[i - base]`` is blob byte ``i``.
        Copies the whole blob once when most of it is wanted, else only the range."""
        if self.fetch is not None:
            start = self.blob_at[which] + low
            if start + high - low <= len(self.body):
                return bytes(self.body[start : start + high - low]), low
            return self.fetch(start, high - low), low
        full = self.full_blobs[which]
        if full is None and (high - low) * 4 >= self.blob_bytes[which]:
            start = self.blob_at[which]
            full = self.full_blobs[which] = bytes(self.body[start : start + self.blob_bytes[which]])
        if full is not None:
            return full, 0
        start = self.blob_at[which]
        return bytes(self.body[start + low : start + high]), low

    # --- records ---------------------------------------------------------------------------------

    def offsets(self, base_offset: int) -> Sequence[int]:
        if self.at[_DELTAS] < 0:
            return range(base_offset, base_offset + self.count)
        return [base_offset + delta for delta in self.ints(_DELTAS, 0, self.count)]

    def index_of(self, base_offset: int, offset: int) -> int:
        relative = offset - base_offset
        if self.at[_DELTAS] < 0:
            return min(max(relative, 0), self.count)
        return bisect_left(self.ints(_DELTAS, 0, self.count), relative)

    def cumulative_bytes(self, index: int) -> int:
        """Charged bytes of records [0, index)."""
        if index <= 0:
            return 0
        total = self.end_at(_KEY_ENDS, index - 1) + self.end_at(_VALUE_ENDS, index - 1)
        if self.at[_HEADER_ENDS] >= 0:
            total += self.end_at(_HEADER_ENDS, index - 1)
            if self.at[_HEADER_COUNTS] >= 0:  # magic 2: header_ends count names and values only
                total += header_columns.ENTRY_BYTES * self.count_at(index - 1)
        return total + RECORD_OVERHEAD_BYTES * index

    def iter_records(self, header: BatchHeader, start: int, stop: int) -> Iterator[Record]:
        if start >= stop:
            return iter(())
        n = stop - start
        if n == 1:
            return iter((self._record_at(header, start),))
        base = header.base_offset
        offsets: Iterable[int]
        if self.at[_DELTAS] < 0:
            offsets = range(base + start, base + stop)
        else:
            offsets = map(base.__add__, self.ints(_DELTAS, start, stop))
        timestamps = (repeat(self.timestamp_default, n) if self.constant_timestamps
                      else self.ints(_TIMESTAMPS, start, stop))
        keys = self._byte_values(_KEYS, _KEY_ENDS, start, stop, self.null_keys)
        values = self._byte_values(_VALUES, _VALUE_ENDS, start, stop, self.null_values)
        headers = repeat((), n) if self.at[_HEADER_ENDS] < 0 else self._headers(start, stop)
        return map(_new_record, repeat(Record, n), zip(keys, values, headers, timestamps, offsets))

    def _record_at(self, header: BatchHeader, index: int) -> Record:
        """One record, touching only its own column entries and bytes (point reads). The hot path of
        a point read: locals instead of repeated attribute lookups, one unpack per pair of ends."""
        body, at, blob_at = self.body, self.at, self.blob_at
        if index:
            key_first, key_end = _INT_PAIR.unpack_from(body, at[_KEY_ENDS] + 4 * index - 4)
            value_first, value_end = _INT_PAIR.unpack_from(body, at[_VALUE_ENDS] + 4 * index - 4)
            key_first, value_first = (key_first if key_first >= 0 else ~key_first,
                                      value_first if value_first >= 0 else ~value_first)
        else:
            key_first = value_first = 0
            key_end = _INT.unpack_from(body, at[_KEY_ENDS])[0]
            value_end = _INT.unpack_from(body, at[_VALUE_ENDS])[0]
        if key_end < 0:
            key = None
        else:
            start = blob_at[_KEYS] + key_first
            stop = blob_at[_KEYS] + key_end
            # A body without the blobs is a partial batch's, which has a fetch.
            key = bytes(body[start:stop]) if stop <= len(body) else (
                self.fetch(start, stop - start))  # type: ignore[misc]
        if value_end < 0:
            value = None
        else:
            start = blob_at[_VALUES] + value_first
            stop = blob_at[_VALUES] + value_end
            value = bytes(body[start:stop]) if stop <= len(body) else (
                self.fetch(start, stop - start))  # type: ignore[misc]
        timestamp = (self.timestamp_default if self.constant_timestamps
                     else _LONG.unpack_from(self.body, at[_TIMESTAMPS] + 8 * index)[0])
        headers = () if at[_HEADER_ENDS] < 0 else self._headers(index, index + 1)[0]
        delta = index if at[_DELTAS] < 0 else self.ints(_DELTAS, index, index + 1)[0]
        return _new_record(Record, (key, value, headers, timestamp, header.base_offset + delta))

    def _byte_values(self, which: int, column: int, start: int, stop: int, has_nulls: bool) -> Sequence[bytes | None]:
        if not has_nulls and 4 * (stop - start) >= self.count > 1 and self.fetch is None:
            fixed = self._fixed_size_values(which, column)  # all of them: a part is a slice of the tuple
            if fixed is not None:
                return fixed if stop - start == self.count else fixed[start:stop]
        ends = self.ints(column, start, stop)
        first = self.end_at(column, start - 1)
        blob, base = self.blob(which, first, self.end_at(column, stop - 1))
        if not has_nulls:
            if base == 0:
                return [blob[a:b] for a, b in zip(chain((first,), ends), ends)]
            return [blob[a - base : b - base] for a, b in zip(chain((first,), ends), ends)]
        out: list[bytes | None] = []
        previous = first - base
        for end in ends:
            if end < 0:
                out.append(None)
                previous = ~end - base
            else:
                out.append(blob[previous : end - base])
                previous = end - base
        return out

    def _fixed_size_values(self, which: int, column: int) -> tuple[bytes, ...] | None:
        """All values of a blob when they share one size (keys often do): cut out by one cached
        ``struct`` call instead of a slice per value. Detected by comparing the raw ends column with
        the pattern k, 2k, 3k, ... (a memcmp)."""
        count = self.count
        size = self.end_at(column, 0)
        if size * count != self.blob_bytes[which] or size > _FIXED_SIZE_MAX_BYTES:
            return None
        at = self.at[column]
        if bytes(self.body[at : at + 4 * count]) != _fixed_ends(size, count):
            return None
        return _fixed_values_struct(size, count).unpack_from(self.body, self.blob_at[which])

    def _headers(self, start: int, stop: int) -> list[Headers]:
        """One headers tuple per record [start, stop) (magic 2: header_columns.py; magic 1: a loop)."""
        if self.at[_HEADER_COUNTS] >= 0:
            return header_columns.read(self, start, stop)
        ends = self.ints(_HEADER_ENDS, start, stop)
        first = self.end_at(_HEADER_ENDS, start - 1)
        blob, base = self.blob(_HEADERS, first, ends[-1])
        return header_columns.decode_headers(blob, [end - base for end in ends], first - base)


_FIXED_SIZE_MAX_BYTES = 64 * 1024


@lru_cache(maxsize=64)
def _fixed_ends(size: int, count: int) -> bytes:
    """The ends column of ``count`` values of ``size`` bytes each."""
    if size == 0:
        return bytes(4 * count)
    return columns_struct("i", count).pack(*range(size, size * count + 1, size))


@lru_cache(maxsize=8)  # each holds a code per value: ~0.3 MB for a 9000-record batch
def _fixed_values_struct(size: int, count: int) -> struct.Struct:
    return struct.Struct("<" + f"{size}s" * count)


def iter_batches(buffer: BufferLike, position: int = 0, where: str = "") -> Iterator[tuple[int, RecordBatch]]:
    """Yield ``(position, batch)`` for consecutive verified batches from ``position``; stop quietly
    at an incomplete batch (torn tail); raise ``CorruptRecordError`` at a corrupt one."""
    while True:
        batch = RecordBatch.decode(buffer, position, where)
        if batch is None:
            return
        yield position, batch
        position += batch.header.size_bytes


def iter_headers(buffer: BufferLike, position: int = 0, where: str = "") -> Iterator[tuple[int, BatchHeader]]:
    """Like ``iter_batches`` but decodes headers only (no body CRC): for skipping through data."""
    while True:
        header = read_header(buffer, position, where)
        if header is None:
            return
        yield position, header
        position += header.size_bytes
