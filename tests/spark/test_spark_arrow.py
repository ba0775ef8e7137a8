"""Invariants checked: ``logstore.spark.arrow`` (log batches as Arrow batches for the Spark source).

- ``arrow_schema`` equals Spark's ``to_arrow_schema(..., timezone="UTC")`` of the Kafka-source schema
  that ``spark_schema_ddl`` describes, with and without headers (skipped without pyspark).
- ``arrow_batches`` and ``tuple_rows`` give exactly the records of ``Log.iter_records(start, end)``
  (keys and values null, empty or not, headers, timestamps incl. -1, offsets) over random logs
  (batches of 1..50 records, gzip or not, CreateTime or LogAppendTime, several segments) and random
  ranges; every Arrow batch has the schema, passes Arrow's full validation and holds 1..max_rows rows.
- Sparse offsets of a compacted log (with tombstones) come out as they are.
- One-record log batches are coalesced into full output batches; a large log batch is split; an
  output batch ends before its keys or values would outgrow a binary column's int32 offsets.
- The big-endian fallback (batches from tuple rows) gives the same batches.
"""

from __future__ import annotations

import re
import tempfile
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings, strategies as st

pa = pytest.importorskip("pyarrow")

from logstore import LogManager, ManualClock, Record  # noqa: E402
from logstore.records.decoder import HAS_OFFSET_DELTAS  # noqa: E402
from logstore.spark import arrow  # noqa: E402
from logstore.spark.arrow import arrow_batches, arrow_schema, spark_schema_ddl, tuple_rows  # noqa: E402
from logstore.timer.scheduler import Scheduler  # noqa: E402

T0 = 1_700_000_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999: the last millisecond a datetime holds


def open_store(path: str) -> tuple[LogManager, ManualClock]:
    clock = ManualClock(T0)
    config = {"log.cleaner.threads": 0, "log.initial.task.delay.ms": 3_600_000}
    return LogManager([path], config=config, clock=clock, scheduler=Scheduler(clock, threaded=False)), clock


def expected_rows(log, start, end, topic: str, partition: int, include_headers: bool) -> list[dict]:
    """The model: ``Log.iter_records`` as the dicts ``to_pylist`` gives."""
    log_append = any(batch.header.attributes & 0x08 for batch, _, _ in log.iter_batch_slices(start, end))
    rows = []
    for record in log.iter_records(start, end):
        row = {"key": record.key, "value": record.value, "topic": topic, "partition": partition,
               "offset": record.offset, "timestamp": EPOCH + timedelta(milliseconds=record.timestamp_ms),
               "timestampType": 1 if log_append else 0}
        if include_headers:
            row["headers"] = [{"key": key, "value": value} for key, value in record.headers]
        rows.append(row)
    return rows


def arrow_rows(log, start, end, topic, partition, include_headers, max_rows) -> list[dict]:
    """The rows of ``arrow_batches``, checking each batch on the way."""
    rows = []
    for batch in arrow_batches(log.iter_columns(start, end), topic, partition, include_headers, max_rows):
        assert isinstance(batch, pa.RecordBatch)
        assert batch.schema == arrow_schema(include_headers)
        assert 1 <= batch.num_rows <= max_rows
        batch.validate(full=True)
        rows += batch.to_pylist()
    return rows


def tuple_dicts(log, start, end, topic, partition, include_headers) -> list[dict]:
    names = arrow_schema(include_headers).names
    rows = [dict(zip(names, row)) for row in tuple_rows(log.iter_columns(start, end), topic, partition,
                                                         include_headers)]
    for row in rows:
        assert row["timestamp"].tzinfo is not None
        if include_headers:
            row["headers"] = [{"key": key, "value": value} for key, value in row["headers"]]
    return rows


# --- schema ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("include_headers", [False, True])
def test_schema_is_what_spark_expects(include_headers):
    types = pytest.importorskip("pyspark.sql.types")
    to_arrow_schema = pytest.importorskip("pyspark.sql.pandas.types").to_arrow_schema
    spark_types = {"binary": types.BinaryType(), "string": types.StringType(), "int": types.IntegerType(),
                   "bigint": types.LongType(), "timestamp": types.TimestampType(),
                   "array<struct<key:string,value:binary>>": types.ArrayType(types.StructType([
                       types.StructField("key", types.StringType()), types.StructField("value", types.BinaryType())]))}
    # Parsing DDL needs a JVM: split the (simple) DDL by hand, at commas outside <...>.
    columns = [column.split(" ", 1) for column in re.split(r", (?![^<]*>)", spark_schema_ddl(include_headers))]
    assert [name for name, _ in columns] == (["key", "value", "topic", "partition", "offset", "timestamp",
                                              "timestampType"] + ["headers"] * include_headers)
    spark_schema = types.StructType([types.StructField(name, spark_types[type_]) for name, type_ in columns])
    expected = to_arrow_schema(spark_schema, timezone="UTC")
    assert arrow_schema(include_headers).equals(expected)
    assert arrow_schema(include_headers) == expected
    assert arrow_schema(include_headers).field("timestamp").type == pa.timestamp("us", tz="UTC")


# --- records -----------------------------------------------------------------------------------------

blobs = st.one_of(st.none(), st.binary(max_size=12))
headers = st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=4))), max_size=3)
timestamps = st.one_of(st.none(), st.just(-1), st.integers(0, MAX_MS))
records = st.builds(Record, blobs, blobs, headers, timestamps)


@settings(max_examples=60)
@given(batches=st.lists(st.lists(records, min_size=1, max_size=50), min_size=1, max_size=6),
       gzip=st.booleans(), log_append_time=st.booleans(), include_headers=st.booleans(),
       max_rows=st.integers(1, 60), bounds=st.tuples(st.floats(0, 1), st.floats(0, 1)))
def test_arrow_batches_and_tuple_rows_give_the_log_records(batches, gzip, log_append_time, include_headers,
                                                           max_rows, bounds):
    with tempfile.TemporaryDirectory() as path:
        store, clock = open_store(path)
        with store:
            store.create_topic("topic-a", 2, {"compression.type": "gzip" if gzip else "producer",
                                              "segment.bytes": 2000, "message.timestamp.type":
                                                  "LogAppendTime" if log_append_time else "CreateTime"})
            for batch in batches:
                store.append("topic-a", batch, partition=1)
                clock.advance(7)
            log = store.get_log("topic-a", 1)
            total = log.log_end_offset
            start, end = sorted(round(bound * total) for bound in bounds)
            expected = expected_rows(log, start, end, "topic-a", 1, include_headers)
            assert len(expected) == end - start
            assert arrow_rows(log, start, end, "topic-a", 1, include_headers, max_rows) == expected
            assert tuple_dicts(log, start, end, "topic-a", 1, include_headers) == expected


def test_a_compacted_log_keeps_its_sparse_offsets(tmp_path):
    store, clock = open_store(str(tmp_path))
    with store:
        store.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": 1000, "file.delete.delay.ms": 0,
                                    "compression.type": "gzip"})
        log = store.get_log("c", 0)
        for i in range(120):
            value = None if i % 11 == 3 else b"v%d" % i  # some tombstones
            log.append([Record(b"k%d" % (i % 9), value, (("i", b"%d" % i),) if i % 2 else (), T0 + i),
                        Record(b"u%d" % i, b"", (), T0 - i)])
            clock.advance(1)
        log.roll()
        store.compact("c")
        slices = list(log.iter_batch_slices())
        assert any(batch.header.attributes & HAS_OFFSET_DELTAS for batch, _, _ in slices)
        offsets = [record.offset for record in log.iter_records()]
        assert len(offsets) < log.log_end_offset - log.log_start_offset  # sparse
        for start, end in [(0, None), (5, 77), (100, 230), (239, 240)]:
            for max_rows in (1, 3, 10000):
                expected = expected_rows(log, start, end, "c", 0, True)
                assert arrow_rows(log, start, end, "c", 0, True, max_rows) == expected
                assert tuple_dicts(log, start, end, "c", 0, True) == expected


def test_log_append_time_topics_report_the_append_time(tmp_path):
    store, clock = open_store(str(tmp_path))
    with store:
        store.create_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
        store.append("t", [Record(b"a", b"1", (), 5), Record(b"b", b"2", (), -1)], partition=0)
        clock.advance(1000)
        store.append("t", [Record(b"c", b"3")], partition=0)
        (batch,) = arrow_batches(store.get_log("t", 0).iter_columns(), "t", 0, False)
        assert batch.column("timestampType").to_pylist() == [1, 1, 1]
        assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [T0 * 1000, T0 * 1000, (T0 + 1000) * 1000]


def test_missing_timestamps_read_as_minus_one_millisecond(tmp_path):
    store, _clock = open_store(str(tmp_path))
    with store:
        store.create_topic("t", 1)
        store.append("t", [Record(b"a", b"1", (), -1)], partition=0)
        store.append("t", [Record(b"a", b"1", (), -1), Record(b"b", b"2", (), 3)], partition=0)
        (batch,) = arrow_batches(store.get_log("t", 0).iter_columns(), "t", 0, False)
        assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [-1000, -1000, 3000]
        assert batch.column("timestampType").to_pylist() == [0, 0, 0]


# --- batching ----------------------------------------------------------------------------------------


def test_one_record_batches_are_coalesced_and_large_batches_split(tmp_path):
    store, _clock = open_store(str(tmp_path))
    with store:
        store.create_topic("t", 1)
        for i in range(100):
            store.append("t", [Record(b"k", b"%d" % i)], partition=0)
        store.append("t", [Record(None, b"x" * 10)] * 1000, partition=0)
        log = store.get_log("t", 0)
        sizes = [batch.num_rows for batch in arrow_batches(log.iter_columns(0, 100), "t", 0, True, 30)]
        assert sizes == [30, 30, 30, 10]
        sizes = [batch.num_rows for batch in arrow_batches(log.iter_columns(90, 1100), "t", 0, False, 300)]
        assert sizes == [300, 300, 300, 110]
        assert [batch.num_rows for batch in arrow_batches(log.iter_columns(), "t", 0, False)] == [1100]
        assert list(arrow_batches(log.iter_columns(1100, 1100), "t", 0, False)) == []  # never an empty batch
        assert arrow_rows(log, 95, 1100, "t", 0, False, 7) == expected_rows(log, 95, 1100, "t", 0, False)
        with pytest.raises(ValueError):
            next(arrow_batches(log.iter_columns(), "t", 0, False, 0))


def test_an_output_batch_ends_before_its_keys_or_values_outgrow_binary_offsets(tmp_path, monkeypatch):
    monkeypatch.setattr(arrow, "_MAX_BLOB_BYTES", 40)  # stands for 2 GiB - 1
    store, _clock = open_store(str(tmp_path))
    with store:
        store.create_topic("t", 1)
        for i in range(12):
            store.append("t", [Record(b"k", b"%010d" % i)] * (1 + i % 3), partition=0)
        log = store.get_log("t", 0)
        batches = list(arrow_batches(log.iter_columns(), "t", 0, False, 1000))
        assert len(batches) > 1
        assert all(sum(map(len, batch.column("value").to_pylist())) <= 40 for batch in batches)
        assert arrow_rows(log, 0, None, "t", 0, False, 1000) == expected_rows(log, 0, None, "t", 0, False)


def test_the_big_endian_fallback_gives_the_same_batches(tmp_path, monkeypatch):
    store, _clock = open_store(str(tmp_path))
    with store:
        store.create_topic("t", 1)
        store.append("t", [Record(b"k", None, (("h", None),), 3), Record(None, b"v", (), -1)], partition=0)
        store.append("t", [Record(b"", b"")] * 5, partition=0)
        log = store.get_log("t", 0)
        native = list(arrow_batches(log.iter_columns(), "t", 0, True, 4))
        monkeypatch.setattr(arrow, "_LITTLE_ENDIAN", False)
        fallback = list(arrow_batches(log.iter_columns(), "t", 0, True, 4))
        assert [batch.num_rows for batch in fallback] == [4, 3]
        assert [batch.to_pylist() for batch in fallback] == [batch.to_pylist() for batch in native]
        assert all(batch.schema == arrow_schema(True) for batch in fallback)
