"""Compaction as a Spark job: ``logstore compact --engine spark`` and
``spark-submit .../logstore/spark/compact.py PATH [TOPIC]`` (or ``python -m logstore.spark.compact``).

The local cleaner maps each dirty section (key -> latest offset) into a memory-bounded ``OffsetMap``
and needs several passes when a log has more keys than ``log.cleaner.dedupe.buffer.size`` holds.
Here Spark does the mapping, with no bound: one DataFrame aggregation over every partition's cleanable
range, ``max(offset)`` per ``(topic, partition, key)`` over the records with a key, read through the
``logstore`` source from read-only views. The job registers that source itself, so it also runs
where Spark's scan cannot find ``pyspark_logstore`` (an editable install). The driver then hands
each partition's map to the store's own cleaner (``LogManager.compact(offset_maps=...)``), which
recopies, handles tombstones and swaps the cleaned segments in through ``Log.replace_segments``
(``.cleaned`` -> ``.swap`` -> final), the same crash-safe code as local compaction, in one round per
partition. So the result (retained offsets, keys, values, headers, timestamps, tombstones and their
delete horizons) equals the local cleaner's, and the active segment, hence the log end offset, is
never touched.

The store is opened for writing (its lock held) for the whole job without starting its background
jobs, so nothing else cleans or appends between mapping and swapping; a cleanable range that moved
anyway aborts that partition (``CleaningAbortedError``) with nothing swapped.

Absolute imports: spark-submit runs this file as a script.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Callable, Mapping, Sequence

from logstore.cleaner.log_cleaner import PrebuiltMap
from logstore.cleaner.offset_map import OffsetMap
from logstore.clock import SYSTEM_CLOCK
from logstore.errors import LogStoreError, StorageError
from logstore.manager.log_manager import LogManager

TopicPartition = tuple[str, int]
UNBOUNDED_MAP_BYTES = 2**62  # the map's accounting bound, never reached: Spark did the deduplication


def spark_offset_maps(spark, data_dirs: Sequence[str], ranges: Mapping[TopicPartition, tuple[int, int]],
                      ) -> dict[TopicPartition, PrebuiltMap]:
    """Map every partition's cleanable range ``[first dirty, first uncleanable)`` with one Spark
    aggregation: key -> latest offset, records without a key left out (compaction drops them)."""
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    from logstore.spark import register

    if not ranges:
        return {}
    # Registered here, not found by Spark's scan for pyspark_* modules, which an editable install's
    # import hooks defeat: every caller (compact_on_spark, the CLI, spark-submit, perf) gets it.
    # Registering again (or over the discovered source) only replaces it with the same class.
    register(spark)
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for (topic, partition), (first_dirty, first_uncleanable) in sorted(ranges.items()):
        assign.setdefault(topic, []).append(partition)
        starting.setdefault(topic, {})[str(partition)] = first_dirty
        ending.setdefault(topic, {})[str(partition)] = first_uncleanable
    records = (spark.read.format("logstore").option("assign", json.dumps(assign))
               .option("startingOffsets", json.dumps(starting)).option("endingOffsets", json.dumps(ending))
               .load(",".join(data_dirs)))
    latest = (records.where(F.col("key").isNotNull()).groupBy("topic", "partition", "key")
              .agg(F.max("offset").alias("offset")))
    table = latest.orderBy("topic", "partition", "offset").toArrow()
    maps = {key: PrebuiltMap(first_dirty, first_uncleanable, OffsetMap(UNBOUNDED_MAP_BYTES))
            for key, (first_dirty, first_uncleanable) in ranges.items()}
    for topic in table.column("topic").unique().to_pylist():
        rows = table.filter(pc.equal(table.column("topic"), topic))
        runs = pc.run_end_encode(rows.column("partition").combine_chunks())  # rows come sorted by partition
        keys, offsets = rows.column("key").to_pylist(), rows.column("offset").to_pylist()
        start = 0
        for partition, stop in zip(runs.values.to_pylist(), runs.run_ends.to_pylist()):
            maps[(topic, partition)].offset_map.put_batch(keys[start:stop], offsets[start:stop])
            start = stop
    return maps


def compact_on_spark(spark, data_dirs: Sequence[str] | str, topic: str | None = None, partition: int | None = None,
                     *, config: Mapping[str, str] | None = None, now_ms: int | None = None,
                     progress: Callable[[TopicPartition, int], None] | None = None,
                     say: Callable[[str], None] | None = None) -> dict:
    """Compact ``topic`` (default: every compacted topic), or one ``partition`` of it, to completion
    with Spark doing the key mapping; then retention, as ``LogManager.compact`` does. Returns
    ``CleanerStats`` (or None where nothing was dirty) per partition. Takes the store's lock.
    ``progress(key, bytes)`` is told of bytes recopied; ``say(text)`` of each phase."""
    say = say or (lambda text: None)
    dirs = [data_dirs] if isinstance(data_dirs, (str, os.PathLike)) else list(data_dirs)
    with contextlib.closing(LogManager(dirs, config=config)) as manager:
        now = SYSTEM_CLOCK.time_ms() if now_ms is None else now_ms
        ranges = manager.compaction_ranges(topic, partition, now_ms=now)
        records = sum(end - start for start, end in ranges.values())
        say(f"mapping keys of {len(ranges)} partition{'s' if len(ranges) != 1 else ''} "
            f"({records} dirty offsets) on Spark")
        try:
            maps = spark_offset_maps(spark, manager.log_dirs, ranges)
        except Exception as exc:  # Spark's errors (Py4J, captured JVM exceptions) carry pages of trace
            if isinstance(exc, LogStoreError):
                raise
            raise StorageError(f"the Spark job mapping the keys failed: {spark_error_summary(exc)}") from exc
        say(f"mapped {sum(len(m.offset_map) for m in maps.values())} keys; recopying and swapping")
        return manager.compact(topic, partition, now_ms=now, progress=progress, offset_maps=maps)


@contextlib.contextmanager
def spark_session(master: str | None = None, app_name: str = "logstore-compact"):
    """A SparkSession for a job started from Python: the active one if there is one (left running),
    else a new one (stopped at the end) whose workers run this interpreter, which has logstore and
    pyarrow."""
    from logstore.spark import require_spark

    require_spark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
    if master:
        builder = builder.master(master)
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # no Java, a bad master URL: the environment, said in one line
        raise StorageError(f"could not start Spark (master {master or 'local[*]'}; is Java installed?): "
                           f"{spark_error_summary(exc)}") from exc
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def spark_error_summary(exc: BaseException) -> str:
    """The line of a Spark error that says what went wrong (Spark appends JVM and Python traces)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    meaningful = [line for line in lines if not line.startswith(("at ", "File ", "^", "Traceback", "SQLSTATE"))]
    errors = [line for line in meaningful if "Error:" in line or "Exception:" in line]
    return (errors[-1] if errors else meaningful[0] if meaningful else type(exc).__name__)[:500]


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit compact.py PATH [TOPIC] [--partition P]`` (PATH: data dirs, comma-separated)."""
    parser = argparse.ArgumentParser(prog="logstore.spark.compact", description=main.__doc__)
    parser.add_argument("path", help="the store's data dir(s), comma-separated")
    parser.add_argument("topic", nargs="?", help="a compacted topic (default: every compacted topic)")
    parser.add_argument("--partition", type=int, help="only this partition of TOPIC")
    parser.add_argument("--master", default=None, help="Spark master (default: spark-submit's, else local[*])")
    args = parser.parse_args(argv)
    from logstore.cleaner.stats import describe

    with spark_session(args.master) as spark:  # no --master: spark-submit's, or Spark's default local[*]
        results = compact_on_spark(spark, args.path.split(","), args.topic, args.partition)
    for (name, number), stats in results.items():
        print(describe(stats, f"{name}-{number}"))
    compacted = sum(stats is not None for stats in results.values())
    print(f"Compacted {compacted} of {len(results)} partition{'s' if len(results) != 1 else ''} on Spark.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
