"""Structured Streaming: availableNow with maxOffsetsPerTrigger, restarts from a checkpoint, data
loss, and an exactly-once logstore sink across a forced restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from logstore.manager.log_manager import LogManager
from logstore.records.decoder import Record

pytestmark = pytest.mark.spark


def make_store(path, partitions=3, count=300):
    with LogManager(path) as manager:
        manager.create_topic("events", partitions)
        manager.create_topic("mirror", partitions)
        for partition in range(partitions):
            manager.append("events", [Record(b"k%d" % (i % 7), b"%d-%d" % (partition, i)) for i in range(count)],
                           partition=partition)


def stream(spark, path, **options):
    reader = spark.readStream.format("logstore").option("subscribe", "events")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(path)


def run_to_parquet(df, out, checkpoint):
    query = (df.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return [progress["numInputRows"] for progress in query.recentProgress if progress["numInputRows"]]


def test_available_now_micro_batches_and_restart(spark, tmp_path):
    path, out, checkpoint = str(tmp_path / "s"), str(tmp_path / "out"), str(tmp_path / "ck")
    make_store(path)
    batches = run_to_parquet(stream(spark, path, startingOffsets="earliest", maxOffsetsPerTrigger="250"),
                             out, checkpoint)
    assert batches == [250, 250, 250, 150]  # 900 records, at most 250 per micro-batch
    assert spark.read.parquet(out).count() == 900
    with LogManager(path) as manager:
        manager.append("events", [Record(b"new", b"1-new-%d" % i) for i in range(5)], partition=1)
    # restart from the checkpoint: only the 5 new records
    assert run_to_parquet(stream(spark, path, startingOffsets="earliest", maxOffsetsPerTrigger="250"),
                          out, checkpoint) == [5]
    rows = spark.read.parquet(out).selectExpr("partition", "offset").collect()
    assert len(rows) == 905 and len(set(rows)) == 905
    # without a read limit, availableNow takes everything in one batch; the default start is latest
    fresh = run_to_parquet(stream(spark, path, startingOffsets="earliest"), str(tmp_path / "o2"), str(tmp_path / "c2"))
    assert fresh == [905]
    latest = run_to_parquet(stream(spark, path), str(tmp_path / "o3"), str(tmp_path / "c3"))
    assert latest == []


def test_stream_data_loss(spark, tmp_path):
    path, checkpoint = str(tmp_path / "s"), str(tmp_path / "ck")
    make_store(path, partitions=1, count=100)
    assert run_to_parquet(stream(spark, path, startingOffsets="earliest", maxOffsetsPerTrigger="40"),
                          str(tmp_path / "o"), checkpoint) == [40, 40, 20]
    with LogManager(path) as manager:
        manager.append("events", [Record(None, b"more-%d" % i) for i in range(50)])
        manager.get_log("events", 0).delete_records(120)  # 100..119 are gone before the query saw them
    with pytest.raises(Exception, match="offsets 100..119 of events-0 were deleted"):
        run_to_parquet(stream(spark, path), str(tmp_path / "o"), checkpoint)
    tolerant = stream(spark, path, failOnDataLoss="false")
    assert run_to_parquet(tolerant, str(tmp_path / "o"), checkpoint) == [30]
    offsets = sorted(row.offset for row in spark.read.parquet(str(tmp_path / "o")).collect())
    assert offsets == list(range(100)) + list(range(120, 150))


def mirror(spark, path, checkpoint, max_per_trigger="200"):
    query = (stream(spark, path, startingOffsets="earliest", maxOffsetsPerTrigger=max_per_trigger)
             .select("key", "value", "partition").writeStream.format("logstore").option("topic", "mirror")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start(path))
    query.awaitTermination()
    return query


def mirror_contents(path):
    with LogManager(path, read_only=True) as manager:
        return {p: [(r.key, r.value) for r in manager.get_log("mirror", p).iter_records()] for p in range(3)}


def test_logstore_sink_is_exactly_once_across_a_forced_restart(spark, tmp_path):
    path, checkpoint = str(tmp_path / "s"), str(tmp_path / "ck")
    make_store(path)
    mirror(spark, path, checkpoint)
    with LogManager(path, read_only=True) as manager:
        source = {p: [(r.key, r.value) for r in manager.get_log("events", p).iter_records()] for p in range(3)}
    assert mirror_contents(path) == source
    # A driver killed after the sink committed batch N but before Spark recorded it: Spark's commit
    # log lacks N, so the restarted query runs batch N again with the same id and data.
    commits = sorted(os.listdir(os.path.join(checkpoint, "commits")), key=lambda name: (len(name), name))
    last = [name for name in commits if name.isdigit()][-1]
    os.remove(os.path.join(checkpoint, "commits", last))
    crc = os.path.join(checkpoint, "commits", f".{last}.crc")
    if os.path.exists(crc):
        os.remove(crc)
    query = mirror(spark, path, checkpoint)
    assert sum(p["numInputRows"] for p in query.recentProgress) > 0  # the batch really ran again
    assert mirror_contents(path) == source  # and appended nothing twice
    # new data after the restart flows through once
    with LogManager(path) as manager:
        manager.append("events", [Record(b"x", b"late")], partition=2)
    mirror(spark, path, checkpoint)
    assert mirror_contents(path)[2] == source[2] + [(b"x", b"late")]


_MIRROR_DRIVER = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
         .getOrCreate())
query = (spark.readStream.format("logstore").option("subscribe", "events").option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", "60").load(sys.argv[1]).select("key", "value", "partition")
         .writeStream.format("logstore").option("topic", "mirror").option("checkpointLocation", sys.argv[2])
         .trigger(availableNow=True).start(sys.argv[1]))
query.awaitTermination()
"""


def test_logstore_sink_is_exactly_once_after_the_driver_is_killed(spark, tmp_path):
    """A real forced restart: the driver process (Python and its JVM) is SIGKILLed while micro-batches
    are being committed, then the query restarts from its checkpoint in this process."""
    path, checkpoint = str(tmp_path / "s"), str(tmp_path / "ck")
    make_store(path)
    driver = subprocess.Popen([sys.executable, "-c", _MIRROR_DRIVER, path, checkpoint], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and driver.poll() is None:
            if sum(len(records) for records in mirror_contents(path).values()) >= 200:
                break  # a few micro-batches of 60 are in: kill somewhere in the middle of the next ones
            time.sleep(0.05)
        seen_before_kill = sum(len(records) for records in mirror_contents(path).values())
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    print(f"mirrored before the kill: {seen_before_kill} of 900")
    assert 0 < seen_before_kill < 900, "the kill must land while the query is under way"
    mirror(spark, path, checkpoint, max_per_trigger="300")
    with LogManager(path, read_only=True) as manager:
        source = {p: [(r.key, r.value) for r in manager.get_log("events", p).iter_records()] for p in range(3)}
    assert mirror_contents(path) == source  # every record once, in order, whatever the kill interrupted
