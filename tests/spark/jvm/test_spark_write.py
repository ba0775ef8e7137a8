"""Batch writes through Spark: Kafka-sink columns, the core's key hash, all or nothing per job,
idempotent foreachBatch writes, and clear refusals."""

from __future__ import annotations

import os
from datetime import datetime, timezone

import pytest

from logstore.records.decoder import Record
from logstore.manager.log_manager import LogManager
from logstore.manager.topics import STAGING_DIR, partition_for_key

pytestmark = pytest.mark.spark


@pytest.fixture
def store(tmp_path):
    path = str(tmp_path / "store")
    with LogManager(path) as manager:
        manager.create_topic("out", 3)
        manager.create_topic("side", 1)
    return path


def contents(path, topic, partitions):
    with LogManager(path, read_only=True) as manager:
        return {p: list(manager.get_log(topic, p).iter_records()) for p in range(partitions)}


def test_rows_land_by_the_core_key_hash_with_headers_and_timestamps(spark, store):
    when = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    rows = [(f"user{i}", f"value {i}", [("source", b"spark")], when) for i in range(60)]
    df = spark.createDataFrame(rows, "key string, value string, headers array<struct<key:string,value:binary>>, "
                                     "timestamp timestamp").repartition(4)
    df.write.format("logstore").mode("append").option("topic", "out").save(store)
    written = contents(store, "out", 3)
    assert sum(len(records) for records in written.values()) == 60
    expected_ms = int(when.timestamp() * 1000)
    for partition, records in written.items():
        for record in records:
            assert partition_for_key(record.key, 3) == partition
            assert record.value == b"value " + record.key[4:]
            assert record.headers == (("source", b"spark"),)
            assert record.timestamp_ms == expected_ms
        assert [r.offset for r in records] == list(range(len(records)))


def test_topic_and_partition_columns(spark, store):
    df = spark.createDataFrame([("out", 2, b"a"), ("side", 0, b"b"), ("out", 0, None)],
                               "topic string, partition int, value binary")
    df.write.format("logstore").mode("append").save(store)
    assert [r.value for r in contents(store, "out", 3)[2]] == [b"a"]
    assert [r.value for r in contents(store, "out", 3)[0]] == [None]  # a tombstone
    assert [r.value for r in contents(store, "side", 1)[0]] == [b"b"]
    # the option wins over the column
    df.select("value").write.format("logstore").mode("append").option("topic", "side").save(store)
    assert len(contents(store, "side", 1)[0]) == 4


def test_a_failing_task_appends_nothing(spark, store):
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    @F.udf(StringType())
    def explode_late(value):
        if value == "v-150":
            raise ValueError("boom in one task")
        return value

    df = spark.range(200).selectExpr("cast(id as string) as key", "concat('v-', id) as value").repartition(4, "key")
    with pytest.raises(Exception, match="boom in one task"):
        df.withColumn("value", explode_late("value")).write.format("logstore").mode("append") \
            .option("topic", "out").save(store)
    assert all(records == [] for records in contents(store, "out", 3).values())
    staging = os.path.join(store, STAGING_DIR)
    assert not os.path.exists(staging) or not [name for name in os.listdir(staging) if name != "sinks"]
    df.write.format("logstore").mode("append").option("topic", "out").save(store)  # the same job, now whole
    assert sum(len(r) for r in contents(store, "out", 3).values()) == 200


def test_foreach_batch_writes_are_idempotent_per_batch_id(spark, store):
    df = spark.createDataFrame([("k", "v1"), ("k", "v2")], "key string, value string")
    for _ in range(2):  # the same batch id twice: one append
        df.write.format("logstore").mode("append").option("topic", "side").option("sinkId", "job-a") \
            .option("batchId", 0).save(store)
    df.write.format("logstore").mode("append").option("topic", "side").option("sinkId", "job-a") \
        .option("batchId", 1).save(store)
    assert [r.value for r in contents(store, "side", 1)[0]] == [b"v1", b"v2", b"v1", b"v2"]


@pytest.mark.parametrize("make, options, message", [
    (lambda s: s.createDataFrame([("a",)], "key string"), {"topic": "out"}, "needs a 'value' column"),
    (lambda s: s.createDataFrame([("a", "b")], "value string, vaule string"), {"topic": "out"},
     "column 'vaule' is not a logstore sink column"),
    (lambda s: s.createDataFrame([(1,)], "value int"), {"topic": "out"}, "column 'value' must be binary or string"),
    (lambda s: s.createDataFrame([("a",)], "value string"), {}, "needs a 'topic' column or the option topic"),
    (lambda s: s.createDataFrame([("a",)], "value string"), {"topic": "missing"}, "topic 'missing' does not exist"),
    (lambda s: s.createDataFrame([("a", 9)], "value string, partition int"), {"topic": "out"}, "partition 9"),
    (lambda s: s.createDataFrame([("a",)], "value string"), {"topic": "out", "batchId": "1"},
     "sinkId and batchId go together"),
])
def test_refusals_are_clear_and_write_nothing(spark, store, make, options, message):
    writer = make(spark).write.format("logstore").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception) as info:
        writer.save(store)
    assert message in str(info.value)
    assert all(records == [] for records in contents(store, "out", 3).values())


def test_overwrite_and_default_modes_are_refused(spark, store):
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="append-only"):
        df.write.format("logstore").mode("overwrite").option("topic", "out").save(store)
    with pytest.raises(Exception, match="(?i)append"):
        df.write.format("logstore").option("topic", "out").save(store)


def test_the_writer_places_keys_by_each_topics_placement(spark, tmp_path):
    """Keys written by ``store.append`` and then by the Spark writer share one partition per key, in a
    new topic (Kafka's murmur2) and in one placed by crc32 (a topic of an earlier version)."""
    path = str(tmp_path / "placed")
    keys = [b"alice", b"bob"] + [b"user%d" % i for i in range(30)]
    with LogManager(path) as manager:
        manager.create_topic("new", 4)
        manager.create_topic("old", 4, {"logstore.key.placement": "crc32"})
        for topic in ("new", "old"):
            manager.append(topic, [Record(key, b"store") for key in keys])
    df = spark.createDataFrame([(key, b"spark") for key in keys], "key binary, value binary").repartition(3)
    for topic in ("new", "old"):
        df.write.format("logstore").mode("append").option("topic", topic).save(path)
    for topic, placement in (("new", "murmur2"), ("old", "crc32")):
        found = {}
        for partition, records in contents(path, topic, 4).items():
            for record in records:
                found.setdefault(record.key, set()).add((partition, record.value))
        assert {key: sorted(places) for key, places in found.items()} == {
            key: [(partition_for_key(key, 4, placement), b"spark"), (partition_for_key(key, 4, placement), b"store")]
            for key in keys}, topic
