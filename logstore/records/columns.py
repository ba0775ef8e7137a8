"""Columnar reads: ``ColumnBatch``, the records of one stored batch as columns, and ``take_columns``,
the fetch rule (``max_bytes``, ``max_records``) applied to batches instead of records.

A bulk consumer (an aggregation, a copy into another store, Arrow, numpy) wants whole columns, not a
Python object per record. A stored batch's body is already column-wise (docs/FORMAT.md): fixed-width
little-endian columns (offset deltas, timestamps, key ends, value ends, header ends) followed by the
key, value and header bytes concatenated. ``ColumnBatch`` hands those out as views into the read
buffer (the uncompressed body of a verified batch), restricted to the records in range
``[start, stop)`` of the batch, so reading a batch costs the same few operations whether it holds one
record or ten thousand:

- offsets: ``first_offset`` and ``last_offset``; ``dense`` batches (every offset in between, the
  usual case) have no offset column at all (``offset_deltas`` is None) and ``offsets()`` is a
  ``range``; compacted batches have ``offset_deltas`` (int32 from ``base_offset``);
- timestamps: ``timestamps`` (int64 milliseconds) or None when every record has
  ``timestamp_default`` (LogAppendTime batches, or batches of one timestamp);
- keys and values: ``keys_data``/``values_data`` (the batch's bytes, whole) with ``key_ends`` /
  ``value_ends`` (int32 per record in range: where its bytes end in the data, ``~end`` for a null)
  and ``key_start``/``value_start`` (where the first record in range begins); ``key_nulls()`` /
  ``value_nulls()`` give a byte mask when the batch has nulls;
- headers: ``header_ends`` and ``headers_data`` raw (their layout depends on the batch's magic,
  docs/FORMAT.md), decoded by ``headers()``.

Typed columns are ``memoryview`` casts on a little-endian host (no copy) and ``array`` copies on a
big-endian one. Views keep the read buffer alive (a chunk of up to 1 MiB) as long as they are held.

``to_arrow()`` builds a ``pyarrow.RecordBatch`` (pyarrow is imported on first use: the engine itself
needs only the standard library) with the key and value bytes shared, not copied (see its docstring
for what is copied).
"""

from __future__ import annotations

import struct
import sys
from array import array
from typing import TYPE_CHECKING, Any, Iterable, Literal, Sequence

from .decoder import RawColumns, Record, RecordBatch
from .fetch import _fit as fit_records  # the read's byte rule, shared so both charge alike

if TYPE_CHECKING:  # annotations only
    from typing import TypeAlias

    from .decoder import Headers

    IntColumn: TypeAlias = "memoryview | array[int]"
    """A column of ints: a typed view into the read buffer (little-endian host) or an array copy."""

_LITTLE_ENDIAN = sys.byteorder == "little"
_SIGN = bytes(byte >= 0x80 for byte in range(256))
"""Maps the high byte of a little-endian int32 to 1 when the int is negative (a null's ``~end``)."""
_ZERO_INT = bytes(4)
_INT = struct.Struct("<i")
_arange64 = b""  # int64 0, 1, 2, ...: the offsets of a dense batch minus its first offset, grown on demand


def _typed(view: memoryview, code: Literal["i", "q"]) -> IntColumn:
    """Little-endian ints in ``view`` as a typed view (no copy) or, on a big-endian host, an array."""
    if _LITTLE_ENDIAN:
        return view.cast(code)
    out = array(code)
    out.frombytes(view)
    out.byteswap()
    return out


def _ends(view: memoryview, start: int, stop: int) -> array[int]:
    """Entries [start, stop) of a raw ends column as an ``array('i')`` (a copy)."""
    out = array("i")
    out.frombytes(view[4 * start : 4 * stop])
    if not _LITTLE_ENDIAN:
        out.byteswap()
    return out


def _end_before(view: memoryview, index: int) -> int:
    """Where record ``index``'s bytes begin: the end of record ``index - 1`` (a null's too), 0 first."""
    if index <= 0:
        return 0
    end: int = _INT.unpack_from(view, 4 * index - 4)[0]
    return end if end >= 0 else ~end


class ColumnBatch:
    """Records ``[start, stop)`` (indexes) of one verified stored batch, as columns over its bytes.

    ``Log.iter_columns`` and ``Log.fetch_columns`` (``LogManager.fetch_columns``) yield these: a batch
    that straddles the start (or end) of the range read comes with ``start > 0`` (or ``stop`` below
    ``batch_record_count``), and every column here covers the records in range only. The data
    buffers (``keys_data``, ``values_data``, ``headers_data``) are the batch's whole; the ends say
    where each record in range lies in them. ``len(cb)`` is the number of records in range."""

    __slots__ = ("batch", "start", "stop", "_raw")

    def __init__(self, batch: RecordBatch, start: int = 0, stop: int | None = None) -> None:
        count = batch.header.record_count
        stop = count if stop is None else stop
        if not 0 <= start <= stop <= count:
            raise ValueError(f"records [{start}, {stop}) are not within the {count} records of the batch")
        self.batch = batch
        self.start = start
        self.stop = stop
        self._raw: RawColumns | None = None  # parsed on first use: a one-record reader may never need it

    @property
    def raw(self) -> RawColumns:
        """The whole stored batch's columns as raw little-endian buffers (``RecordBatch.raw_columns``)."""
        raw = self._raw
        if raw is None:
            raw = self._raw = self.batch.raw_columns()
        return raw

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, index: slice) -> "ColumnBatch":
        """``cb[i:j]``: records ``i`` to ``j`` of the range (as a list slices: negative indexes count
        from the end) as a ``ColumnBatch`` over the same batch, its columns not parsed again."""
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError(f"a ColumnBatch is cut with a slice of step 1, got {index!r}")
        low, high, _ = index.indices(self.stop - self.start)
        part = ColumnBatch(self.batch, self.start + low, self.start + max(low, high))
        part._raw = self.raw
        return part

    def __repr__(self) -> str:
        return (f"ColumnBatch(offsets {self.first_offset}..{self.last_offset}, {len(self)} record(s), "
                f"records [{self.start}, {self.stop}) of the batch at {self.base_offset})")

    # --- offsets ---------------------------------------------------------------------------------

    @property
    def base_offset(self) -> int:
        """The stored batch's base offset (``offset_deltas`` count from it)."""
        return self.raw.base_offset

    @property
    def batch_record_count(self) -> int:
        """Records in the whole stored batch (``stop`` is at most this)."""
        return self.raw.count

    @property
    def dense(self) -> bool:
        """Whether the offsets are ``first_offset, first_offset + 1, ...`` (no offset column)."""
        return self.raw.offset_deltas is None

    @property
    def offset_deltas(self) -> IntColumn | None:
        """int32 per record in range: its offset minus ``base_offset``; None when ``dense``."""
        deltas = self.raw.offset_deltas
        return None if deltas is None else _typed(deltas[4 * self.start : 4 * self.stop], "i")

    def _offset_at(self, index: int) -> int:
        deltas = self.raw.offset_deltas
        if deltas is None:
            return self.raw.base_offset + index
        delta: int = _INT.unpack_from(deltas, 4 * index)[0]
        return self.raw.base_offset + delta

    @property
    def first_offset(self) -> int:
        """The offset of the first record in range (of ``start`` when the range is empty)."""
        return self._offset_at(self.start) if self.stop > self.start else self.raw.base_offset + self.start

    @property
    def last_offset(self) -> int:
        """The offset of the last record in range (``first_offset - 1`` when the range is empty)."""
        return self._offset_at(self.stop - 1) if self.stop > self.start else self.first_offset - 1

    def offsets(self) -> Sequence[int]:
        """Every offset in range: a ``range`` when ``dense`` (nothing materialised), else an
        ``array('q')``."""
        if self.raw.offset_deltas is None:
            first = self.raw.base_offset + self.start
            return range(first, first + len(self))
        return self.offset_array()

    def offset_array(self) -> array[int]:
        """Every offset in range as an ``array('q')`` (int64), materialised even when ``dense``."""
        base = self.raw.base_offset
        deltas = self.offset_deltas
        if deltas is None:
            return array("q", range(base + self.start, base + self.stop))
        return array("q", map(base.__add__, deltas))

    # --- timestamps ------------------------------------------------------------------------------

    @property
    def log_append_time(self) -> bool:
        """Whether the timestamps are the broker's append time (else the producer's CreateTime)."""
        return self.raw.log_append_time

    @property
    def timestamp_default(self) -> int:
        """The timestamp of every record when ``timestamps`` is None."""
        return self.raw.timestamp_default

    @property
    def timestamps(self) -> IntColumn | None:
        """int64 milliseconds per record in range; None when every record has ``timestamp_default``."""
        raw = self.raw
        if raw.timestamps is None or raw.log_append_time:
            return None
        return _typed(raw.timestamps[8 * self.start : 8 * self.stop], "q")

    def timestamp_array(self) -> array[int]:
        """Every timestamp in range as an ``array('q')``, materialised even when constant."""
        timestamps = self.timestamps
        if timestamps is None:
            return array("q", (self.raw.timestamp_default,)) * len(self)
        return array("q", timestamps)

    # --- keys and values -------------------------------------------------------------------------

    @property
    def keys_data(self) -> memoryview:
        """The batch's key bytes, every record's, concatenated."""
        return self.raw.keys

    @property
    def values_data(self) -> memoryview:
        """The batch's value bytes, every record's, concatenated."""
        return self.raw.values

    @property
    def has_null_keys(self) -> bool:
        """Whether the batch has null keys (perhaps outside the range)."""
        return self.raw.null_keys

    @property
    def has_null_values(self) -> bool:
        """Whether the batch has null values (tombstones; perhaps outside the range)."""
        return self.raw.null_values

    @property
    def key_ends(self) -> IntColumn:
        """int32 per record in range: where its key ends in ``keys_data`` (``~end`` for a null key)."""
        return _typed(self.raw.key_ends[4 * self.start : 4 * self.stop], "i")

    @property
    def value_ends(self) -> IntColumn:
        """int32 per record in range: where its value ends in ``values_data`` (``~end`` for null)."""
        return _typed(self.raw.value_ends[4 * self.start : 4 * self.stop], "i")

    @property
    def key_start(self) -> int:
        """Where the first key in range begins in ``keys_data``."""
        return _end_before(self.raw.key_ends, self.start)

    @property
    def value_start(self) -> int:
        """Where the first value in range begins in ``values_data``."""
        return _end_before(self.raw.value_ends, self.start)

    @property
    def key_bytes(self) -> int:
        """Bytes of the keys in range."""
        begin, end = self.key_span()
        return end - begin

    @property
    def value_bytes(self) -> int:
        """Bytes of the values in range."""
        begin, end = self.value_span()
        return end - begin

    def key_span(self) -> tuple[int, int]:
        """``(begin, end)``: the keys in range are ``keys_data[begin:end]``."""
        ends = self.raw.key_ends
        return _end_before(ends, self.start), _end_before(ends, self.stop)

    def value_span(self) -> tuple[int, int]:
        """``(begin, end)``: the values in range are ``values_data[begin:end]``."""
        ends = self.raw.value_ends
        return _end_before(ends, self.start), _end_before(ends, self.stop)

    def key_nulls(self) -> bytes | None:
        """One byte per record in range, 1 where the key is null; None when the batch has no null key."""
        return self._nulls(self.raw.key_ends) if self.raw.null_keys else None

    def value_nulls(self) -> bytes | None:
        """One byte per record in range, 1 where the value is null; None when the batch has none."""
        return self._nulls(self.raw.value_ends) if self.raw.null_values else None

    def _nulls(self, ends: memoryview) -> bytes:
        # The sign bit of each little-endian int32 is the top bit of its last byte: one slice and one
        # translate, no Python work per record.
        return bytes(ends[4 * self.start + 3 : 4 * self.stop : 4]).translate(_SIGN)

    def key_offsets(self) -> array[int]:
        """``len(self) + 1`` int32: key ``i`` in range is ``keys_data[o[i]:o[i + 1]]`` (empty for a
        null). A copy of the ends, with nulls resolved (a Python pass when the batch has nulls)."""
        return self._offsets(self.raw.key_ends, self.raw.null_keys)

    def value_offsets(self) -> array[int]:
        """``len(self) + 1`` int32: value ``i`` in range is ``values_data[o[i]:o[i + 1]]`` (empty
        for a null; ``value_nulls`` tells which)."""
        return self._offsets(self.raw.value_ends, self.raw.null_values)

    def _offsets(self, view: memoryview, has_nulls: bool) -> array[int]:
        out = array("i", (_end_before(view, self.start),))
        ends = _ends(view, self.start, self.stop)
        if has_nulls:
            ends = array("i", [end if end >= 0 else ~end for end in ends])
        out += ends
        return out

    def keys(self) -> Sequence[bytes | None]:
        """Every key in range as bytes (None for a null key): one object per record."""
        return self._cut(self.batch.keys())

    def values(self) -> Sequence[bytes | None]:
        """Every value in range as bytes (None for a null value): one object per record."""
        return self._cut(self.batch.values())

    def _cut(self, whole: Sequence[bytes | None]) -> Sequence[bytes | None]:
        return whole if self.start == 0 and self.stop == self.raw.count else whole[self.start : self.stop]

    # --- headers ---------------------------------------------------------------------------------

    @property
    def header_ends(self) -> IntColumn | None:
        """int32 per record in range: the cumulative end of its header bytes (docs/FORMAT.md: names
        and values; magic 1 includes the length prefixes); None when no record has headers."""
        ends = self.raw.header_ends
        return None if ends is None else _typed(ends[4 * self.start : 4 * self.stop], "i")

    @property
    def headers_data(self) -> memoryview:
        """The batch's headers section, raw (its layout depends on ``magic``: docs/FORMAT.md)."""
        return self.raw.headers

    @property
    def magic(self) -> int:
        """The stored batch's format version."""
        return self.batch.header.magic

    def headers(self) -> list[Headers]:
        """Per record in range, its headers as ``(name, value)`` pairs (decoded column-wise)."""
        return self.batch.headers(self.start, self.stop)

    # --- whole records, Arrow --------------------------------------------------------------------

    def records(self) -> list[Record]:
        """The records in range as ``Record`` tuples (what ``Log.read`` returns for them)."""
        return self.batch.records(self.start, self.stop)

    def to_arrow(self, headers: bool = False) -> Any:
        """The records in range as a ``pyarrow.RecordBatch`` of ``arrow_schema(headers)``: ``key``
        and ``value`` (binary), ``offset`` (int64), ``timestamp`` (timestamp[ms, UTC]: the stored
        milliseconds; Spark's Kafka source has microseconds, one cast), ``timestampType`` (int32: 0
        CreateTime, 1 LogAppendTime) and, with ``headers``, ``headers`` (list of struct<key: string,
        value: binary>), the names and types of Spark's Kafka source without topic and partition.

        Shared with the read buffer (no copy): the key and value bytes, a per-record timestamp
        column and, for a range that does not start at the batch's first record and a batch
        without nulls, the key and value offsets (they are the ends column from the record before
        the range on). Copied: the offsets column (int64 from ``first_offset`` or from the int32
        deltas, one compute call), a constant timestamp and ``timestampType`` (repeated), the
        key/value offsets of a range starting at the batch's first record (4 bytes per record, one
        copy) or of a batch with nulls (a validity bitmap and the resolved ends, a few compute
        calls), and the headers (built from Python tuples). Needs pyarrow (``ImportError``
        otherwise)."""
        return _to_arrow(self, headers)


def arrow_schema(headers: bool = False) -> Any:
    """The Arrow schema of ``ColumnBatch.to_arrow(headers)`` (needs pyarrow)."""
    import pyarrow as pa  # optional (the spark extra): imported on first use, never by the engine itself

    global _SCHEMAS
    if _SCHEMAS is None:
        headers_type = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()),
                                                               pa.field("value", pa.binary())])))
        fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("offset", pa.int64()),
                  pa.field("timestamp", pa.timestamp("ms", tz="UTC")), pa.field("timestampType", pa.int32())]
        _SCHEMAS = (pa.schema(fields), pa.schema(fields + [pa.field("headers", headers_type)]))
    return _SCHEMAS[bool(headers)]


_SCHEMAS: tuple[Any, Any] | None = None


def _to_arrow(cb: ColumnBatch, headers: bool) -> Any:
    """``ColumnBatch.to_arrow``: what it says is shared and copied is decided here."""
    import pyarrow as pa  # optional (the spark extra): imported on first use, never by the engine itself
    import pyarrow.compute as pc

    schema = arrow_schema(headers)
    n, raw = len(cb), cb.raw
    if not _LITTLE_ENDIAN:  # the raw columns are little-endian, Arrow's buffers native: build from values
        columns = [pa.array(list(cb.keys()), pa.binary()), pa.array(list(cb.values()), pa.binary()),
                   pa.array(cb.offset_array(), pa.int64()),
                   pa.array(cb.timestamp_array(), pa.int64()).cast(schema.field("timestamp").type)]
    else:
        offsets_type = pa.int64()
        if raw.offset_deltas is None:
            offsets = pc.add(_int_array(pa, offsets_type, n, _dense_offsets(n)),
                             pa.scalar(cb.first_offset, offsets_type))
        else:
            deltas = _int_array(pa, pa.int32(), n, raw.offset_deltas[4 * cb.start : 4 * cb.stop])
            offsets = pc.add(pc.cast(deltas, offsets_type), pa.scalar(raw.base_offset, offsets_type))
        timestamp_type = schema.field("timestamp").type
        if raw.timestamps is None or raw.log_append_time:
            timestamps = pa.repeat(pa.scalar(raw.timestamp_default, timestamp_type), n)
        else:
            timestamps = _int_array(pa, timestamp_type, n, raw.timestamps[8 * cb.start : 8 * cb.stop])
        columns = [_binary(pa, pc, n, raw.key_ends, raw.keys, cb.start, cb.stop, raw.null_keys),
                   _binary(pa, pc, n, raw.value_ends, raw.values, cb.start, cb.stop, raw.null_values),
                   offsets, timestamps]
    columns.append(pa.repeat(pa.scalar(1 if raw.log_append_time else 0, pa.int32()), n))
    if headers:
        columns.append(pa.array(cb.headers(), schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _int_array(pa: Any, type_: Any, count: int, data: Any) -> Any:
    """An Arrow array of ``count`` fixed-width values over ``data`` (shared, not copied)."""
    return pa.Array.from_buffers(type_, count, [None, pa.py_buffer(data)])


def _binary(pa: Any, pc: Any, count: int, ends: memoryview, data: memoryview, start: int, stop: int,
            has_nulls: bool) -> Any:
    """Records [start, stop) of a key or value column as an Arrow binary array over ``data``.
    Arrow wants ``count + 1`` int32 offsets and a validity bitmap for nulls; the ends column has
    ``count`` ends, ``~end`` for a null."""
    if not has_nulls:
        if start:  # the end of the record before the range is the first offset: the column as it is
            offsets = pa.py_buffer(ends[4 * start - 4 : 4 * stop])
        else:
            offsets = pa.py_buffer(_ZERO_INT + bytes(ends[: 4 * stop]))
        return pa.Array.from_buffers(pa.binary(), count, [None, offsets, pa.py_buffer(data)], null_count=0)
    column = _int_array(pa, pa.int32(), count, ends[4 * start : 4 * stop])
    valid = pc.greater_equal(column, pa.scalar(0, pa.int32()))
    resolved = pc.max_element_wise(column, pc.bit_wise_not(column))
    first = pa.array([_end_before(ends, start)], pa.int32())
    offsets = pa.concat_arrays([first, resolved]).buffers()[1]
    return pa.Array.from_buffers(pa.binary(), count, [valid.buffers()[1], offsets, pa.py_buffer(data)])


def _dense_offsets(count: int) -> memoryview:
    """int64 0, 1, 2, ... (at least ``count``), little-endian: a dense range's offsets minus its first."""
    global _arange64
    cached = _arange64
    if len(cached) < 8 * count:
        cached = _arange64 = array("q", range(max(count, 2 * len(cached) // 8, 1024))).tobytes()
    return memoryview(cached)[: 8 * count]


class ColumnTaker:
    """The fetch rule applied slice by slice (``(batch, first, stop)``: records in range, as
    ``Log.iter_batch_slices`` yields them): at least one record when ``need_one`` and any exists,
    then as many as fit ``max_bytes`` (charged as ``Log.read`` charges: key, value and header bytes
    plus 16 per record) and ``max_records``. ``batches`` collects what was taken."""

    __slots__ = ("max_bytes", "max_records", "need_one", "charged", "taken", "batches")

    def __init__(self, max_bytes: int, max_records: int, need_one: bool = True) -> None:
        self.max_bytes, self.max_records, self.need_one = max_bytes, max_records, need_one
        self.charged = self.taken = 0
        self.batches: list[ColumnBatch] = []

    def take(self, batch: RecordBatch, first: int, stop: int) -> int:
        """Take what fits of records [first, stop) of ``batch``; returns -1 when the read may go on,
        else the offset the next read starts at (a limit was reached)."""
        if first >= stop:
            return -1
        out = self.batches
        limit = min(stop, first + self.max_records - self.taken)
        end, cost = fit_records(batch, first, limit, self.max_bytes - self.charged, self.need_one and not out)
        if end > first:
            out.append(ColumnBatch(batch, first, end))
            self.taken += end - first
            self.charged += cost
        if end < stop or self.taken >= self.max_records or self.charged >= self.max_bytes:
            if out:  # after the last record taken, as ``Log.fetch`` says
                return out[-1].last_offset + 1
            return ColumnBatch(batch, first, first + 1).first_offset  # nothing taken: start there next time
        return -1


def take_columns(slices: Iterable[tuple[RecordBatch, int, int]], max_bytes: int,
                 max_records: int) -> tuple[list[ColumnBatch], int]:
    """``ColumnTaker`` over ``slices``: the column batches and the offset after the last record
    taken when a limit ended the read, else -1 (the slices ran out)."""
    taker = ColumnTaker(max_bytes, max_records)
    for batch, first, stop in slices:
        resume = taker.take(batch, first, stop)
        if resume >= 0:
            return taker.batches, resume
    return taker.batches, -1
