"""Batch reads through Spark: equal to the core's reads, Kafka's options, the Arrow and tuple paths,
registration routes, and a consistent prefix while another process appends."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest

from logstore.manager.log_manager import LogManager
from logstore.records.decoder import Record

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two topics: ``events`` (3 partitions, small segments, headers, null keys and values, varied
    timestamps) and ``zipped`` (gzip, LogAppendTime)."""
    path = str(tmp_path_factory.mktemp("spark-read") / "store")
    rng = random.Random(7)
    with LogManager(path) as manager:
        manager.create_topic("events", 3, config={"segment.bytes": "4096"})
        manager.create_topic("zipped", 1, config={"compression.type": "gzip", "message.timestamp.type": "LogAppendTime"})
        for partition in range(3):
            for _ in range(40):  # batches of 1..30 records
                records = []
                for _ in range(rng.randint(1, 30)):
                    key = None if rng.random() < 0.1 else b"k%d" % rng.randint(0, 50)
                    value = None if rng.random() < 0.05 else bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
                    headers = tuple((f"h{i}", None if rng.random() < 0.2 else b"x%d" % i) for i in range(rng.randint(0, 2)))
                    records.append(Record(key, value, headers, rng.randint(1_600_000_000_000, 1_700_000_000_000)))
                manager.append("events", records, partition=partition)
        manager.append("zipped", [Record(b"z%d" % i, b"v" * i) for i in range(500)])
    return path


def core_rows(path, topic, partition, start, end):
    with LogManager(path, read_only=True) as manager:
        log = manager.get_log(topic, partition)
        timestamp_type = 1 if log.config.message_timestamp_type == "LogAppendTime" else 0
        return [(r.key, r.value, topic, partition, r.offset, r.timestamp_ms, timestamp_type,
                 [(name, value) for name, value in r.headers]) for r in log.iter_records(start, end)]


def spark_rows(df):
    """Rows as core_rows shapes them (no headers column: empty headers)."""
    rows = df.orderBy("topic", "partition", "offset").collect()
    with_headers = "headers" in df.columns
    return [(r.key, r.value, r.topic, r.partition, r.offset, _ms(r.timestamp), r.timestampType,
             [(h.key, h.value) for h in r.headers] if with_headers else []) for r in rows]


def _ms(timestamp: datetime) -> int:
    # The session time zone is UTC: Spark hands back naive UTC datetimes.
    return (timestamp.replace(tzinfo=timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)


def read(spark, path, **options):
    reader = spark.read.format("logstore")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(path)


def test_batch_read_equals_the_core_for_random_ranges(spark, store):
    rng = random.Random(11)
    with LogManager(store, read_only=True) as manager:
        ends = {p: manager.get_log("events", p).log_end_offset for p in range(3)}
    for arrow in ("true", "false", "true", "true"):
        chosen = {p: sorted(rng.sample(range(ends[p] + 1), 2)) for p in range(3)}
        starting = json.dumps({"events": {str(p): lo for p, (lo, _) in chosen.items()}})
        ending = json.dumps({"events": {str(p): hi for p, (_, hi) in chosen.items()}})
        df = read(spark, store, subscribe="events", startingOffsets=starting, endingOffsets=ending,
                  includeHeaders="true", arrow=arrow)
        expected = [row for p, (lo, hi) in chosen.items() for row in core_rows(store, "events", p, lo, hi)]
        assert spark_rows(df) == expected


def test_whole_topics_timestamps_and_compression(spark, store):
    df = read(spark, store, subscribePattern="zip.*", includeHeaders="true")
    rows = spark_rows(df)
    assert rows == core_rows(store, "zipped", 0, 0, 500)
    assert {row[6] for row in rows} == {1}  # LogAppendTime
    assert df.schema.simpleString() == ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                                        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,"
                                        "value:binary>>>")
    plain = read(spark, store, subscribe="zipped")
    assert "headers" not in plain.columns and plain.count() == 500


def test_min_partitions_splits_tasks(spark, store):
    assert read(spark, store, subscribe="events").rdd.getNumPartitions() == 3
    df = read(spark, store, subscribe="events", minPartitions="9")
    assert df.rdd.getNumPartitions() >= 9
    assert spark_rows(df) == [row[:7] + ([],) for p in range(3) for row in core_rows(store, "events", p, None, None)]


def test_starting_timestamp_and_sql(spark, store):
    with LogManager(store, read_only=True) as manager:
        log = manager.get_log("events", 1)
        records = list(log.iter_records())
        pivot = sorted(r.timestamp_ms for r in records)[len(records) // 2]
        first = log.offset_for_timestamp(pivot)
    df = read(spark, store, assign='{"events": [1]}', startingTimestamp=str(pivot))
    assert df.agg({"offset": "min"}).first()[0] == first
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW ev USING logstore OPTIONS (path '{store}', subscribe 'events')")
    counts = {row.partition: row.n for row in spark.sql("SELECT partition, count(*) AS n FROM ev GROUP BY partition")
              .collect()}
    assert counts == {p: len(core_rows(store, "events", p, None, None)) for p in range(3)}


def test_the_installed_package_registers_the_source_from_any_directory(tmp_path):
    """Spark finds Python data sources in top-level ``pyspark_*`` modules on the workers' path: the
    installed ``pyspark_logstore`` (not the checkout) must be there, as CI's ``pip install .`` puts it.
    (An editable install's import hooks hide it from that scan: there, ``logstore.spark.register``.)"""
    code = ("import pkgutil, pyspark_logstore; "
            "assert 'pyspark_logstore' in {m.name for m in pkgutil.iter_modules()}, 'not on sys.path'; "
            "assert pyspark_logstore.DefaultSource.name() == 'logstore'")
    subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), check=True)


def test_explicit_registration(spark, store):
    import logstore.spark

    logstore.spark.register(spark)  # the explicit route; format("logstore") already worked without it
    assert read(spark, store, subscribe="zipped").count() == 500
    logstore.spark.register(spark)  # again, as compact_on_spark does on every run: it only replaces the source
    assert read(spark, store, subscribe="zipped").count() == 500


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "nope"}, "topic 'nope' does not exist"),
    ({"subscribe": "events", "startingOffsets": "latest"}, "cannot be 'latest' for a batch query"),
    ({"subscribe": "events", "minPartitions": "-3"}, "minPartitions must be an integer >= 1"),
    ({"assign": '{"events": [7]}'}, "has no partition 7"),
    ({"subscrib": "events"}, "unknown option 'subscrib'"),
])
def test_invalid_options_fail_at_planning(spark, store, options, message):
    with pytest.raises(Exception) as info:
        read(spark, store, **options).count()
    assert message in str(info.value)


def test_fail_on_data_loss(spark, tmp_path):
    path = str(tmp_path / "store")
    with LogManager(path) as manager:
        manager.create_topic("t", 1)
        manager.append("t", [Record(None, b"%d" % i) for i in range(10)])
        manager.get_log("t", 0).delete_records(4)
    with pytest.raises(Exception, match="offsets 0..3 of t-0 were deleted"):
        read(spark, path, subscribe="t", startingOffsets='{"t": {"0": 0}}').count()
    df = read(spark, path, subscribe="t", startingOffsets='{"t": {"0": 0}}', failOnDataLoss="false")
    assert [row.offset for row in df.collect()] == list(range(4, 10))


def test_kafka_isolation_level_reads_committed_records_only(spark, tmp_path):
    from logstore.records.batching import ProducerBatch

    path = str(tmp_path / "store")
    with LogManager(path) as manager:
        manager.create_topic("t", 1)
        log = manager.get_log("t", 0)
        log.append([Record(None, b"plain-0")])
        log.append([Record(None, b"aborted-1"), Record(None, b"aborted-2")], producer=ProducerBatch(5, 0, 0, True))
        log.append_marker(5, 0, 0, False)
        log.append([Record(None, b"committed-4")], producer=ProducerBatch(6, 0, 0, True))
        log.append_marker(6, 0, 0, True)
        log.append([Record(None, b"open-6")], producer=ProducerBatch(7, 0, 0, True))
        log.append([Record(None, b"plain-7")])
    for arrow in ("true", "false"):
        default = read(spark, path, subscribe="t", arrow=arrow).orderBy("offset").collect()
        assert [(row.offset, row.value) for row in default] == [
            (0, b"plain-0"), (1, b"aborted-1"), (2, b"aborted-2"), (4, b"committed-4"), (6, b"open-6"), (7, b"plain-7")]
        committed = read(spark, path, subscribe="t", arrow=arrow,
                         **{"kafka.isolation.level": "read_committed"}).orderBy("offset").collect()
        assert [(row.offset, row.value) for row in committed] == [(0, b"plain-0"), (4, b"committed-4")]


_APPENDER = """
import os, sys, time
from logstore.manager import LogManager
from logstore.records import Record
with LogManager(sys.argv[1]) as manager:
    sequence = 0
    deadline = time.time() + 120
    while time.time() < deadline and not os.path.exists(sys.argv[2]):
        for partition in range(2):
            manager.append("live", [Record(b"k", b"%d" % (sequence + i)) for i in range(50)], partition=partition)
        sequence += 50
        time.sleep(0.01)  # about 10k records/s: the log keeps growing while each query stays small
"""


def test_reading_while_another_process_appends_gives_a_consistent_prefix(spark, tmp_path):
    path = str(tmp_path / "store")
    with LogManager(path) as manager:
        manager.create_topic("live", 2, config={"segment.bytes": "65536"})
    stop = str(tmp_path / "stop")
    writer = subprocess.Popen([sys.executable, "-c", _APPENDER, path, stop], env=dict(os.environ))
    try:
        time.sleep(1.0)
        counts = []
        while writer.poll() is None and len(counts) < 3:
            rows = read(spark, path, subscribe="live").select("partition", "offset", "value").collect()
            for partition in range(2):
                mine = sorted((r.offset, int(r.value)) for r in rows if r.partition == partition)
                # a prefix: offsets 0..n-1 with no hole, each holding the value written there
                assert [offset for offset, _ in mine] == list(range(len(mine)))
                assert all(offset == value for offset, value in mine)
            counts.append(len(rows))
        assert len(counts) == 3 and counts[-1] > counts[0] > 0  # the writer really was appending
    finally:
        open(stop, "w").close()
        try:
            writer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            writer.kill()
            writer.wait()


def test_a_user_schema_must_be_the_source_schema(spark, store):
    same = "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, timestampType int"
    assert spark.read.format("logstore").schema(same).option("subscribe", "zipped").load(store).count() == 500
    with pytest.raises(Exception, match="the logstore source has a fixed schema"):
        spark.read.format("logstore").schema("value string").option("subscribe", "zipped").load(store).count()
