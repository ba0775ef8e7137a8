"""Log record batches as Arrow record batches: the data path of the PySpark source's ``read()``.

Owns the Arrow schema of the Kafka-source columns (``arrow_schema``, ``spark_schema_ddl``) and the two
ways of turning ``Log.iter_columns`` output (``ColumnBatch``: the records in range of one stored batch,
as columns over its bytes) into rows:

- ``arrow_batches``: ``pyarrow.RecordBatch`` objects built from the column batches' raw columns
  (little-endian int32/int64 columns and the key/value bytes, see docs/FORMAT.md). The records of
  consecutive log batches are appended to one buffer per column, a few buffer appends per log
  batch (one-record batches, common in logs appended a record at a time, go through ``record_at``,
  which is cheaper than parsing the columns), and each output batch is built from those buffers by
  a fixed number of ``pyarrow.compute`` calls. No Python work is done per record of a larger batch,
  except decoding headers when they are asked for. The output batches are coalesced (up to
  ``max_rows`` rows) rather than ``ColumnBatch.to_arrow`` per log batch: Spark serialises every
  batch it gets into the JVM (a copy whatever the source shares), and fewer, larger batches cost
  it less.
- ``tuple_rows``: the same rows as Python tuples, one per record: the fallback, and the baseline of
  the benchmark.

Imports pyarrow (the ``spark`` extra) but never pyspark, so it is usable and testable without a JVM.
"""

from __future__ import annotations

import struct
import sys
from array import array
from datetime import datetime, timedelta, timezone
from itertools import islice
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..records.columns import ColumnBatch
from ..records.decoder import Record

CREATE_TIME = 0
LOG_APPEND_TIME = 1
"""``timestampType`` values, as Kafka and Spark's Kafka source report them."""

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
# Spark's to_arrow_schema names a list's element field "element" (pyarrow's default is "item").
HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()),
                                                       pa.field("value", pa.binary())])))
_FIELDS = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
           pa.field("partition", pa.int32()), pa.field("offset", pa.int64()), pa.field("timestamp", TIMESTAMP_TYPE),
           pa.field("timestampType", pa.int32())]
_SCHEMAS = {False: pa.schema(_FIELDS), True: pa.schema(_FIELDS + [pa.field("headers", HEADERS_TYPE)])}
_DDL = "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, timestampType int"
_HEADERS_DDL = ", headers array<struct<key:string,value:binary>>"

_MAX_BLOB_BYTES = 2**31 - 1  # a binary column's int32 offsets address no more
# The raw columns are little-endian and Arrow buffers native-endian: only a little-endian host can
# take them as they are (a big-endian one builds batches from tuple rows instead).
_LITTLE_ENDIAN = sys.byteorder == "little"
_INT = struct.Struct("<i")
_LONG = struct.Struct("<q")
_ZERO_INT32 = pa.array([0], pa.int32())
_NO_DELTA = bytes(4)
# Compute arguments as ready scalars: converting a Python int tries to import dateutil on each call.
_ZERO = pa.scalar(0, pa.int32())
_US_PER_MS = pa.scalar(1000, pa.int64())
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_arange = b""  # int32 0, 1, 2, ...: the offset deltas of dense batches, grown on demand


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of the batches ``arrow_batches`` yields: equal to what Spark derives from
    ``spark_schema_ddl(include_headers)`` (``to_arrow_schema(schema, timezone="UTC")``), which Spark
    requires of a data source's Arrow batches."""
    return _SCHEMAS[bool(include_headers)]


def spark_schema_ddl(include_headers: bool) -> str:
    """The Spark schema (DDL) of the Kafka source, with ``headers`` when ``include_headers``."""
    return _DDL + (_HEADERS_DDL if include_headers else "")


def arrow_batches(columns: Iterable[ColumnBatch], topic: str, partition: int, include_headers: bool,
                  max_rows: int = 10000) -> Iterator[pa.RecordBatch]:
    """The records of ``columns`` (``ColumnBatch``es of whole, verified log batches, as
    ``Log.iter_columns`` yields them) as Arrow record batches of ``arrow_schema(include_headers)``
    holding 1 to ``max_rows`` rows each: small log batches are coalesced, large ones split. Rows
    are in order; a record without a timestamp (-1) reads as -1 ms, as Kafka reports it."""
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows!r}")
    if not _LITTLE_ENDIAN:
        yield from _batches_from_rows(tuple_rows(columns, topic, partition, include_headers),
                                      arrow_schema(include_headers), max_rows)
        return
    builder = _Builder(topic, partition, include_headers)
    for batch in columns:
        count = len(batch)
        if not count:
            continue
        if batch.batch_record_count == 1:  # many logs are appended a record at a time: take the cheaper record
            record = batch.batch.record_at(0)
            if not builder.fits(len(record.key or b""), len(record.value or b"")):
                yield builder.build()
            builder.add_record(record, batch.log_append_time)
            if builder.rows >= max_rows:
                yield builder.build()
            continue
        first = 0
        while first < count:
            if not builder.fits(batch.key_bytes, batch.value_bytes):
                yield builder.build()
            end = min(count, first + max_rows - builder.rows)
            builder.add(batch if first == 0 and end == count else batch[first:end])
            first = end
            if builder.rows >= max_rows:
                yield builder.build()
    if builder.rows:
        yield builder.build()


def tuple_rows(columns: Iterable[ColumnBatch], topic: str, partition: int, include_headers: bool) -> Iterator[tuple]:
    """The same rows as ``arrow_batches``, one tuple per record in schema order: ``(key, value,
    topic, partition, offset, timestamp, timestampType[, headers])`` with ``timestamp`` an aware UTC
    ``datetime`` (exact to the millisecond) and ``headers`` a list of ``(key, value)`` tuples."""
    last_ms, last_time = None, None
    for batch in columns:
        timestamp_type = LOG_APPEND_TIME if batch.log_append_time else CREATE_TIME
        for record in batch.batch.iter_records(batch.start, batch.stop):
            if record.timestamp_ms != last_ms:  # neighbours often share a timestamp: one datetime for them
                last_ms, last_time = record.timestamp_ms, _EPOCH + timedelta(milliseconds=record.timestamp_ms)
            if include_headers:
                yield (record.key, record.value, topic, partition, record.offset, last_time, timestamp_type,
                       list(record.headers))
            else:
                yield record.key, record.value, topic, partition, record.offset, last_time, timestamp_type


# --- building ------------------------------------------------------------------------------------


class _Builder:
    """The rows of one output batch, collected piece by piece (a piece: the records in range of one
    log batch) into growing buffers, one per column, plus a few numbers per piece; ``build`` turns
    them into Arrow arrays with a fixed number of compute calls and starts over.

    Copying each piece's column entries and blob bytes at once (``bytearray +=``) is as cheap as
    joining them later, and it keeps no object per piece alive: holding the columns of ten thousand
    one-record batches until ``build`` would cost more in garbage collection than the copies."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = pa.scalar(topic, pa.string())
        self.partition = pa.scalar(partition, pa.int32())
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        # Fresh buffers each time, never cleared: the last batch's arrays still point into the old ones.
        self.rows = 0
        self.run_ends: list[int] = []  # per piece: the rows up to its end
        self.bases: list[int] = []  # per piece: its batch's base offset
        self.types: list[int] = []  # per piece: timestampType
        self.deltas = bytearray()  # int32 offset deltas (base_offset + delta = offset)
        self.millis = bytearray()  # int64 timestamps in milliseconds
        self.keys = _BlobColumn()
        self.values = _BlobColumn()
        self.headers: list = []

    def fits(self, key_bytes: int, value_bytes: int) -> bool:
        """Whether records with this many key and value bytes can join without a blob going past the
        int32 offsets of a binary column (an empty builder takes anything: a batch is < 2 GiB)."""
        return not self.rows or (len(self.keys.data) + key_bytes <= _MAX_BLOB_BYTES
                                 and len(self.values.data) + value_bytes <= _MAX_BLOB_BYTES)

    def add_record(self, record: Record, log_append_time: bool) -> None:
        """Add one record (of a one-record batch: ``record_at`` costs half as much as ``raw_columns``)."""
        key, value, headers, timestamp_ms, offset = record
        self.rows += 1
        self.run_ends.append(self.rows)
        self.bases.append(offset)
        self.types.append(LOG_APPEND_TIME if log_append_time else CREATE_TIME)
        self.deltas += _NO_DELTA
        self.millis += _LONG.pack(timestamp_ms)
        self.keys.add_value(key)
        self.values.add_value(value)
        if self.include_headers:
            self.headers.append(headers)

    def add(self, batch: ColumnBatch) -> None:
        """Add the records of ``batch`` (one piece: a log batch's records in range, or part of them)."""
        count = len(batch)
        self.rows += count
        self.run_ends.append(self.rows)
        self.types.append(LOG_APPEND_TIME if batch.log_append_time else CREATE_TIME)
        deltas = batch.offset_deltas
        if deltas is None:  # dense: offsets are the first one plus 0, 1, 2, ...
            self.bases.append(batch.first_offset)
            self.deltas += _dense_deltas(count)[: 4 * count]
        else:
            self.bases.append(batch.base_offset)
            self.deltas += deltas
        millis = batch.timestamps
        if millis is None:
            self.millis += _LONG.pack(batch.timestamp_default) * count
        else:
            self.millis += millis
        raw = batch.raw  # the flags and data buffers, without a property call each
        low, high = batch.key_span()
        self.keys.add(batch.key_ends, raw.keys[low:high], low, raw.null_keys)
        low, high = batch.value_span()
        self.values.add(batch.value_ends, raw.values[low:high], low, raw.null_values)
        if self.include_headers:
            self.headers += batch.headers()

    def build(self) -> pa.RecordBatch:
        """The output batch of the pieces added since the last build."""
        count = self.rows
        run_ends = pa.array(self.run_ends, pa.int32())

        def spread(values: list[int], type_: pa.DataType) -> pa.Array:
            """One value per piece, repeated for each row of its piece."""
            # (RunEndEncodedArray.from_arrays would try to import pandas on every call: 70 us)
            encoded = pa.Array.from_buffers(pa.run_end_encoded(pa.int32(), type_), count, [None],
                                            children=[run_ends, pa.array(values, type_)])
            return pc.run_end_decode(encoded)

        offsets = pc.add(pc.cast(_int_array(pa.int32(), count, self.deltas), pa.int64()),
                         spread(self.bases, pa.int64()))
        timestamps = pc.multiply_checked(_int_array(pa.int64(), count, self.millis), _US_PER_MS).view(TIMESTAMP_TYPE)
        columns = [self.keys.build(count, spread), self.values.build(count, spread), pa.repeat(self.topic, count),
                   pa.repeat(self.partition, count), offsets, timestamps, spread(self.types, pa.int32())]
        if self.include_headers:
            columns.append(pa.array(self.headers, HEADERS_TYPE))
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        self._reset()
        return batch


class _BlobColumn:
    """The keys or values of one output batch: the pieces' ends columns and blob bytes, joined, and
    per piece the shift that turns its ends (relative to its batch's blob) into ends in ``data``."""

    __slots__ = ("ends", "data", "shifts", "has_nulls")

    def __init__(self) -> None:
        self.ends = bytearray()
        self.data = bytearray()
        self.shifts: list[int] = []
        self.has_nulls = False

    def add(self, ends, blob: memoryview, low: int, has_nulls: bool) -> None:
        """Add the ends and blob bytes of some records, ``blob`` starting at byte ``low`` of their
        batch's blob (which their ends count from)."""
        self.shifts.append(len(self.data) - low)
        self.ends += ends
        self.data += blob
        self.has_nulls = self.has_nulls or has_nulls

    def add_value(self, item: bytes | None) -> None:
        """Add one key or value."""
        self.shifts.append(0)
        if item is None:
            self.ends += _INT.pack(~len(self.data))
            self.has_nulls = True
        else:
            self.data += item
            self.ends += _INT.pack(len(self.data))

    def build(self, count: int, spread) -> pa.Array:
        ends = _int_array(pa.int32(), count, self.ends)
        validity = None
        if self.has_nulls:
            # A null is stored as ~end (negative): valid where end >= 0, and max(e, ~e) is the real end.
            validity = pc.greater_equal(ends, _ZERO).buffers()[1]
            ends = pc.max_element_wise(ends, pc.bit_wise_not(ends))
        ends = pc.add(ends, spread(self.shifts, pa.int32()))
        offsets = pa.concat_arrays([_ZERO_INT32, ends]).buffers()[1]
        return pa.Array.from_buffers(pa.binary(), count, [validity, offsets, pa.py_buffer(self.data)])


def _int_array(type_: pa.DataType, count: int, data: bytearray) -> pa.Array:
    """An int array over little-endian ``data`` (no copy)."""
    return pa.Array.from_buffers(type_, count, [None, pa.py_buffer(data)])


def _dense_deltas(count: int) -> memoryview:
    """int32 0, 1, 2, ... (at least ``count`` of them), little-endian: a dense batch's offset deltas."""
    global _arange
    cached = _arange
    if len(cached) < 4 * count:
        cached = _arange = array("i", range(max(count, 2 * len(cached) // 4, 1024))).tobytes()
    return memoryview(cached)


def _batches_from_rows(rows: Iterator[tuple], schema: pa.Schema, max_rows: int) -> Iterator[pa.RecordBatch]:
    """Arrow batches from tuple rows (the path of a big-endian host)."""
    while True:
        chunk = list(islice(rows, max_rows))
        if not chunk:
            return
        yield pa.RecordBatch.from_arrays([pa.array(column, field.type) for column, field in zip(zip(*chunk), schema)],
                                         schema=schema)
