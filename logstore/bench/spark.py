"""``logstore perf spark``: what Spark adds on top of the store, measured in one run and one Spark session.

Owns the benchmark, its checks, its conclusions and its text; ``cli/perf.py`` only parses options and
prints. The workload, the builders, the check of a compacted log and the child process that runs the
local cleaner are ``perf_compact``'s (``CompactWorkload``: 16-byte keys cycling through ``keys``
distinct keys in a seeded shuffled order, 100-byte values led by their own offset), imported, not copied.

1. Reading. The workload in one topic of ``partitions`` partitions (log batch i of 1000 records goes
   to partition i % partitions; built untimed). Spark reads it through ``format("logstore")`` on both
   data paths, Arrow batches (``arrow=true``, the default) and one tuple per row (``arrow=false``),
   with two queries: ``count()``, and ``groupBy("key").count()`` summarised to one collected row (the
   number of groups and the sum of their counts). The source has no count or column push-down, so
   both run ``read()`` over every record. A query is timed from ``spark.read...load()`` to its
   checked answer (planning included): the count must equal the records, the groups the keys and
   their sum the records. After an untimed warm-up query (the first one starts Spark's Python
   workers), each query runs ``repeats`` times on each path, the paths interleaved; the best counts.
   Context, in the same run and process, each checked to see every record: the source's own work
   with no Spark (the batch plan and every task's ``read()``, one after another, on both paths), the
   core's scan (``Log.iter_records`` over every partition, one thread) and SQLite's (``SELECT key,
   value FROM log`` iterated, perf_compact's table).
2. Writing as many records (16-byte keys, 100-byte values, generated in the JVM) from a DataFrame
   through the sink (tasks stage, the driver's one commit appends and fsyncs), against the core
   appending the workload's records in batches of 1000 and flushing; both checked by the log end
   offsets, after an untimed warm-up write.
3. Compaction of the workload as ``perf_compact`` builds it (one compacted partition, rolled): the
   local cleaner (``LogManager.compact``, in a fresh child, as ``logstore perf compact`` runs it)
   against ``compact_on_spark`` on a copy, in this process with the session already started and
   after an untimed warm-up compaction of a small log (the first compiles the job's code); then
   both again with a dedupe buffer holding a quarter of the keys, where the local cleaner needs many
   passes and Spark, whose key map has no bound, one. The Spark run's time is split at the cleaner's
   first progress call: before it, the Spark job mapping the keys and the map built in the driver;
   after it, the recopy and swap by the store's cleaner in the driver. Every result is read back with
   ``perf_compact.verify_log`` (one record per key, the latest) before any number is reported.

The session is ``local[2]`` with the tests' settings but the JVM's default JIT (no UI, two shuffle partitions, UTC);
its start and the warm-ups are timed and reported apart, with the load average before and after (the
machine is shared). pyspark is imported inside functions: importing this module needs neither pyspark
nor pyarrow.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import sys
import tempfile
from typing import Callable

from ..cleaner.offset_map import ENTRY_OVERHEAD_BYTES
from ..clock import Stopwatch
from ..manager.log_manager import LogManager
from .compact import (BATCH_RECORDS, DEFAULT_DEDUPE_BUFFER_BYTES, LOAD_FACTOR, TOPIC as COMPACT_TOPIC,
                      CompactBenchmarkError, CompactWorkload, _child, build_log, build_sqlite, verify_log)
from .core import pretouch
from .report import MB, text_table

READ_TOPIC = "events"
MASTER = "local[2]"
PATHS = {"arrow": "true", "tuple": "false"}  # the source's ``arrow`` option per data path
QUERIES = ("count", "groupby")
QUERY_TEXT = {"count": "count()", "groupby": "groupBy(key).count(), summarised"}
SESSION_CONFIG = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                  "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
                  "spark.sql.session.timeZone": "UTC", "spark.python.worker.reuse": "true"}
# The JVM's default JIT, as a user's job gets it: the tests' C1-only setting starts faster but ran
# the timed queries about half as fast in a side comparison here.
Say = Callable[[str], None]


class SparkBenchmarkError(Exception):
    """Spark failed, or a query or a compaction gave a wrong answer: the measurement is not valid."""


@contextlib.contextmanager
def bench_session(master: str = MASTER):
    """A new SparkSession with the benchmark's settings, stopped at the end: yields ``(session,
    seconds its start took)``. Its Python workers run this interpreter (which has logstore)."""
    from ..spark import require_spark
    from ..spark.compact import spark_error_summary

    require_spark()
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName("logstore-perf-spark")
    for name, value in SESSION_CONFIG.items():
        builder = builder.config(name, value)
    watch = Stopwatch()
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # no Java, most often: one line, not the JVM's trace
        raise SparkBenchmarkError(f"could not start Spark ({master}; is Java installed?): "
                                  f"{spark_error_summary(exc)}") from exc
    started_s = watch.elapsed_s
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session, started_s
    finally:
        session.stop()


# --- reading -----------------------------------------------------------------------------------------


def build_read_store(path: str, workload: CompactWorkload, partitions: int) -> dict:
    """The workload's records in topic ``READ_TOPIC`` of ``partitions`` partitions, a log batch of
    ``BATCH_RECORDS`` at a time, round-robin; closed (flushed). Returns its size and end offsets."""
    store = LogManager([path], config={"log.cleaner.threads": 0})
    try:
        store.create_topic(READ_TOPIC, partitions, {"retention.ms": -1})  # 2023 timestamps: keep them
        logs = [store.get_log(READ_TOPIC, number) for number in range(partitions)]
        for batch_number, start in enumerate(range(0, workload.records, BATCH_RECORDS)):
            logs[batch_number % partitions].append(workload.batch(start, min(start + BATCH_RECORDS, workload.records)))
        facts = {"log_bytes": sum(log.size_bytes for log in logs), "end_offsets": [log.log_end_offset for log in logs]}
    finally:
        store.close()
    if sum(facts["end_offsets"]) != workload.records:
        raise SparkBenchmarkError(f"the store holds {sum(facts['end_offsets']):,} records after "
                                  f"{workload.records:,} appends")
    return facts


def scan_core(path: str, partitions: int) -> tuple[float, int]:
    """Seconds to iterate every record of every partition (record objects, one thread), and the count."""
    with LogManager([path], read_only=True) as store:
        watch, count = Stopwatch(), 0
        for number in range(partitions):
            for _record in store.get_log(READ_TOPIC, number).iter_records(0):
                count += 1
        return watch.elapsed_s, count


def scan_sqlite(path: str) -> tuple[float, int]:
    """Seconds to iterate ``SELECT key, value FROM log`` in Python, and the rows seen."""
    conn = sqlite3.connect(path)
    try:
        watch, count = Stopwatch(), 0
        for _key, _value in conn.execute("SELECT key, value FROM log"):
            count += 1
        return watch.elapsed_s, count
    finally:
        conn.close()


def scan_source(path: str, data_path: str) -> tuple[float, int]:
    """Seconds for the source's own work with no Spark: the batch plan and every task's ``read()``
    (``source.read_range``) run one after another in this process; and the records yielded."""
    from ..spark.options import parse_source_options
    from ..spark.planning import plan_batch
    from ..spark.source import read_range

    watch, count = Stopwatch(), 0
    options = parse_source_options({"path": path, "subscribe": READ_TOPIC, "arrow": PATHS[data_path]},
                                   streaming=False)
    for offset_range in plan_batch(options):
        for item in read_range(options, offset_range):  # Arrow record batches, or one tuple per record
            count += item.num_rows if data_path == "arrow" else 1
    return watch.elapsed_s, count


def spark_query(spark, path: str, data_path: str, query: str, workload: CompactWorkload) -> tuple[float, int]:
    """Seconds for one query on one data path, from ``load()`` to the checked answer; and the
    records it saw. A wrong answer raises ``SparkBenchmarkError``. The ``logstore`` source must be
    known to ``spark`` (``bench_spark`` registers it)."""
    from pyspark.sql import functions as F

    from ..spark.compact import spark_error_summary

    watch = Stopwatch()
    try:
        frame = (spark.read.format("logstore").option("subscribe", READ_TOPIC)
                 .option("arrow", PATHS[data_path]).load(path))
        if query == "count":
            groups, records = None, frame.count()
        else:  # one row back: what is timed is reading and aggregating, not shipping 100k rows to Python
            row = (frame.groupBy("key").count()
                   .agg(F.count(F.lit(1)).alias("groups"), F.sum("count").alias("records")).collect()[0])
            groups, records = row["groups"], row["records"]
    except Exception as exc:  # Py4J and captured JVM errors carry pages of trace
        raise SparkBenchmarkError(f"Spark {query} with arrow={PATHS[data_path]} failed: "
                                  f"{spark_error_summary(exc)}") from exc
    elapsed_s = watch.elapsed_s
    if records != workload.records or groups not in (None, workload.keys):
        seen, expected = f"{records:,} records", f"{workload.records:,}"
        if groups is not None:
            seen, expected = f"{seen} in {groups:,} keys", f"{expected} in {workload.keys:,}"
        raise SparkBenchmarkError(f"Spark {query} with arrow={PATHS[data_path]} saw {seen}, expected {expected}")
    return elapsed_s, records


def _best(name: str, times_s: list[float], records: int, checked: int) -> dict:
    best_s = min(times_s)
    return {"name": name, "times_s": times_s, "best_s": best_s, "records_per_s": records / max(best_s, 1e-9),
            "checked": checked}


def bench_read(spark, root: str, workload: CompactWorkload, partitions: int, repeats: int, say: Say) -> dict:
    """Part 1: the Spark queries on both paths (warm-up, then interleaved best of ``repeats``), and
    the core's and SQLite's scans of the same records as context."""
    store_path, sqlite_path = os.path.join(root, "read-store"), os.path.join(root, "read.sqlite3")
    say(f"writing {workload.records:,} records to {partitions} partitions (untimed)")
    facts = build_read_store(store_path, workload, partitions)
    say(f"writing {workload.records:,} rows to SQLite (untimed)")
    build_sqlite(sqlite_path, workload)
    say("warm-up query (starts Spark's Python workers)")
    warmup_s, _ = spark_query(spark, store_path, "arrow", "groupby", workload)  # reading, shuffle and aggregation
    times: dict[tuple[str, str], list[float]] = {(p, q): [] for q in QUERIES for p in PATHS}
    scans = {"source arrow": lambda: scan_source(store_path, "arrow"),
             "source tuple": lambda: scan_source(store_path, "tuple"),
             "core": lambda: scan_core(store_path, partitions), "sqlite": lambda: scan_sqlite(sqlite_path)}
    context: dict[str, list[float]] = {name: [] for name in scans}
    checked: dict[str, int] = {}
    for repeat in range(repeats):
        for query in QUERIES:
            # Interleaved, the order flipped each round: a slow stretch of the machine, or the JIT's first
            # compile of a plan, does not always fall on the same path.
            for data_path in list(PATHS)[:: 1 if repeat % 2 == 0 else -1]:
                say(f"round {repeat + 1}/{repeats}: Spark {query}, arrow={PATHS[data_path]}")
                elapsed_s, checked[f"spark {data_path} {query}"] = spark_query(spark, store_path, data_path, query,
                                                                              workload)
                times[(data_path, query)].append(elapsed_s)
        say(f"round {repeat + 1}/{repeats}: the source alone, the core's and SQLite's scans")
        for name, scan in scans.items():
            elapsed_s, checked[name] = scan()
            if checked[name] != workload.records:
                raise SparkBenchmarkError(f"the {name} scan saw {checked[name]:,} records, "
                                          f"expected {workload.records:,}")
            context[name].append(elapsed_s)
    spark_rows = {f"{p} {q}": _best(f"{p} {q}", t, workload.records, checked[f"spark {p} {q}"])
                  for (p, q), t in times.items()}
    ratios = {query: spark_rows[f"tuple {query}"]["best_s"] / max(spark_rows[f"arrow {query}"]["best_s"], 1e-9)
              for query in QUERIES}
    return {"store": facts, "warmup_s": warmup_s, "spark": spark_rows, "arrow_over_tuple": ratios,
            "context": {name: _best(name, context[name], workload.records, checked[name]) for name in scans}}


# --- writing ----------------------------------------------------------------------------------------


def bench_write(spark, root: str, workload: CompactWorkload, partitions: int, say: Say) -> dict:
    """Part 3: the same number of records written from a DataFrame through the sink (tasks stage, the
    driver's commit appends and fsyncs) against the core appending them in batches of 1000 and
    flushing, in this process. Both are checked by their log end offsets."""
    records, key_digits = workload.records, max(workload.key_bytes - 4, 1)
    frame = spark.range(records).selectExpr(
        f"concat('key-', lpad(cast(id % {workload.keys} as string), {key_digits}, '0')) as key",
        f"repeat('x', {workload.value_bytes}) as value")
    sizes = {}
    for name in ("warmup", "spark", "core"):
        with contextlib.closing(LogManager(os.path.join(root, f"write-{name}"))) as manager:
            manager.create_topic("out", partitions)
    say("warm-up write (starts Spark's Python writer workers)")
    frame.limit(1000).write.format("logstore").mode("append").option("topic", "out") \
        .save(os.path.join(root, "write-warmup"))
    say(f"Spark writes {records:,} records")
    watch = Stopwatch()
    frame.write.format("logstore").mode("append").option("topic", "out").save(os.path.join(root, "write-spark"))
    spark_s = watch.elapsed_s
    batches = [[r._replace(timestamp_ms=None) for r in workload.batch(start, min(start + BATCH_RECORDS, records))]
               for start in range(0, records, BATCH_RECORDS)]  # built untimed
    say(f"the core appends {records:,} records")
    with contextlib.closing(LogManager(os.path.join(root, "write-core"))) as manager:
        watch = Stopwatch()
        for batch in batches:
            manager.append("out", batch)
        manager.flush()
        core_s = watch.elapsed_s
    for name in ("spark", "core"):
        with contextlib.closing(LogManager(os.path.join(root, f"write-{name}"), read_only=True)) as manager:
            sizes[name] = sum(manager.get_log("out", p).log_end_offset for p in range(partitions))
        if sizes[name] != records:
            raise SparkBenchmarkError(f"the {name} write left {sizes[name]:,} records, expected {records:,}")
    return {"spark": _best("spark write", [spark_s], records, sizes["spark"]),
            "core": _best("core append", [core_s], records, sizes["core"])}


# --- compaction -------------------------------------------------------------------------------------


def spark_compact(spark, path: str, dedupe_buffer_bytes: int | None) -> dict:
    """``compact_on_spark`` of perf_compact's topic, timed, split at the cleaner's first progress
    call into mapping (Spark job + map in the driver) and recopy (store's cleaner in the driver)."""
    from ..spark.compact import compact_on_spark

    config = {"log.cleaner.threads": 0}  # as perf_compact's child opens the store
    if dedupe_buffer_bytes is not None:
        config["log.cleaner.dedupe.buffer.size"] = dedupe_buffer_bytes
    recopy_start_s: list[float] = []

    def progress(_key, _size_bytes: int) -> None:
        if not recopy_start_s:  # the first bytes the cleaner reads: the map is built, recopying starts
            recopy_start_s.append(watch.elapsed_s)

    cpu_start, watch = Stopwatch.cpu_s(), Stopwatch()
    stats = compact_on_spark(spark, path, COMPACT_TOPIC, config=config, progress=progress)[(COMPACT_TOPIC, 0)]
    elapsed_s, cpu_s = watch.elapsed_s, Stopwatch.cpu_s() - cpu_start
    if stats is None:
        raise SparkBenchmarkError("compaction on Spark found nothing to clean")
    map_s = recopy_start_s[0] if recopy_start_s else elapsed_s
    return {"engine": "spark", "dedupe_buffer_bytes": dedupe_buffer_bytes or DEFAULT_DEDUPE_BUFFER_BYTES,
            "elapsed_s": elapsed_s, "driver_cpu_s": cpu_s, "map_s": map_s, "recopy_s": elapsed_s - map_s,
            "bytes_before": stats.size_bytes_before, "bytes_after": stats.size_bytes_after, "stats": stats.as_dict()}


def bench_compact(spark, root: str, workload: CompactWorkload, say: Say) -> dict:
    """Part 2: local cleaner against Spark, with the default and with a quarter-of-the-keys dedupe
    buffer, each on its own copy of one log; every result verified."""
    small = workload.small_buffer_bytes()
    cases = {"local": None, "spark": None, "local-small": small, "spark-small": small}
    paths = {case: os.path.join(root, f"compact-{case}") for case in cases}
    say(f"writing {workload.records:,} records to a compacted topic (untimed)")
    facts = build_log(paths["local"], workload)
    for case in list(cases)[1:]:
        shutil.copytree(paths["local"], paths[case])
    # The first compaction on a session compiles its plan's code (aggregation, sort, collection to
    # Arrow): paid once, untimed here and reported, so the timed runs compare the steady state.
    say("warm-up: compaction on Spark of a small log")
    warmup = CompactWorkload(min(workload.records, 10_000), min(workload.keys, 1_000))
    build_log(os.path.join(root, "compact-warmup"), warmup)
    warmup_s = spark_compact(spark, os.path.join(root, "compact-warmup"), None)["elapsed_s"]
    runs = {}
    for case, buffer in cases.items():
        say(f"timing compaction: {case}")
        pretouch(root, facts["log_bytes"] * 3 // 2)  # page-cache memory the VM has backed, for whichever runs
        if case.startswith("local"):
            runs[case] = _child("logstore", path=paths[case],
                                dedupe_buffer_bytes=DEFAULT_DEDUPE_BUFFER_BYTES if buffer is None else buffer)
        else:
            runs[case] = spark_compact(spark, paths[case], buffer)
    say("checking every compacted log (untimed)")
    latest = workload.latest()
    verified = {case: verify_log(paths[case], workload, latest) for case in cases}
    return {"log": facts, "small_buffer_bytes": small, "runs": runs, "verified": verified,
            "distinct_keys": len(latest), "warmup_s": warmup_s, "warmup_records": warmup.records}


# --- the benchmark ------------------------------------------------------------------------------------


def bench_spark(*, records: int = 1_000_000, keys: int = 100_000, partitions: int = 4, repeats: int = 2,
                compact: bool = True, work_dir: str | None = None, spark=None, say: Say | None = None) -> dict:
    """The whole benchmark in one Spark session: ``spark`` if given (its start is then not timed),
    else a new ``local[2]`` one. Returns plain data (JSON-ready) with ``findings``."""
    from ..spark import register, require_spark

    require_spark()  # before anything is built: a missing extra is said at once
    if partitions < 1 or repeats < 1:
        raise ValueError(f"partitions and repeats must be >= 1, got {partitions} and {repeats}")
    workload = CompactWorkload(records, keys)
    say = say or (lambda _: None)
    load_before = _load_average()
    if work_dir:
        os.makedirs(work_dir, exist_ok=True)
    root = tempfile.mkdtemp(prefix="logstore-perf-spark-", dir=work_dir)  # None: $TMPDIR or /tmp
    try:
        with contextlib.ExitStack() as stack:
            session_start_s = None
            if spark is None:
                say("starting Spark")
                spark, session_start_s = stack.enter_context(bench_session())
            # Explicitly, the given session too, before any part reads or writes format("logstore"):
            # Spark's discovery of the top-level pyspark_logstore module fails under an editable install.
            register(spark)
            read = bench_read(spark, root, workload, partitions, repeats, say)
            write = bench_write(spark, root, workload, partitions, say)
            compaction = bench_compact(spark, root, workload, say) if compact else None
            versions = {"python": sys.version.split()[0], "pyspark": _version("pyspark"),
                        "pyarrow": _version("pyarrow"), "sqlite": sqlite3.sqlite_version,
                        "master": spark.sparkContext.master}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {"settings": {"records": records, "keys": keys, "partitions": partitions, "repeats": repeats,
                           "key_bytes": workload.key_bytes, "value_bytes": workload.value_bytes,
                           "batch_records": BATCH_RECORDS, "seed": workload.seed, **versions,
                           "load_average_before": load_before, "load_average_after": _load_average()},
              "session_start_s": session_start_s, "read": read, "write": write, "compact": compaction}
    result["findings"] = findings(result)
    return result


def _load_average() -> float | None:
    """The 1-minute load average (None where the OS has none): on a shared 2-core VM it says how
    much else ran."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _version(module: str) -> str:
    return getattr(sys.modules.get(module) or __import__(module), "__version__", "?")


def findings(result: dict) -> list[str]:
    """What the numbers say, each sentence computed from this run's measurements."""
    s, read = result["settings"], result["read"]
    arrow, core, lite = read["spark"]["arrow count"], read["context"]["core"], read["context"]["sqlite"]
    source = read["context"]["source arrow"]
    cores = int(s["master"][6:-1]) if s["master"].startswith("local[") and s["master"][6:-1].isdigit() else None
    out = [f"Reading: Spark with Arrow counted {arrow['records_per_s']:,.0f} records/s"
           + (f" on {cores} cores" if cores else "") + f", {core['records_per_s'] / arrow['records_per_s']:.1f}× "
           f"slower than the core's own one-thread scan ({core['records_per_s']:,.0f}/s) and "
           f"{lite['records_per_s'] / arrow['records_per_s']:.1f}× slower than SQLite's "
           f"({lite['records_per_s']:,.0f}/s). "
           f"The source's own work (plan and read(), Arrow) takes {source['best_s']:.2f} s of the "
           f"{arrow['best_s']:.2f} s: the rest is Spark (planning, Python workers, Arrow into the JVM, the job). "
           f"Arrow is {read['arrow_over_tuple']['count']:.1f}× the tuple path on count() and "
           f"{read['arrow_over_tuple']['groupby']:.1f}× on the aggregation."]
    if result["session_start_s"] is not None:
        out.append(f"One-off costs a single Spark job pays on top: session start {result['session_start_s']:.1f} s, "
                   f"first query {read['warmup_s']:.1f} s (Python workers start).")
    write = result["write"]
    out.append(f"Writing: Spark wrote {write['spark']['records_per_s']:,.0f} records/s through the sink (tasks stage; "
               f"the driver's one commit appends), the core appended {write['core']['records_per_s']:,.0f}/s in "
               f"batches of {BATCH_RECORDS}: all-or-nothing staging costs "
               f"{write['core']['records_per_s'] / max(write['spark']['records_per_s'], 1e-9):.1f}× "
               "the direct append.")
    comp = result["compact"]
    if comp is None:
        return out
    runs = comp["runs"]
    local, spark_run, small, spark_small = runs["local"], runs["spark"], runs["local-small"], runs["spark-small"]
    local_map_s = local["elapsed_s"] - spark_run["recopy_s"]  # the same cleaner code recopies in both
    head = (f"Compaction, default buffer: the local cleaner took {local['elapsed_s']:.2f} s, Spark "
            f"{spark_run['elapsed_s']:.2f} s ({spark_run['elapsed_s'] / max(local['elapsed_s'], 1e-9):.1f}×): "
            f"{spark_run['map_s']:.2f} s mapping the keys (one Spark task: the topic has one partition), then "
            f"{spark_run['recopy_s']:.2f} s recopying in the driver, as the local cleaner does. ")
    if local_map_s <= 0:
        out.append(head + "That recopy alone took as long as the whole local compaction, so at this size no "
                          "number of executors makes Spark faster.")
    elif spark_run["map_s"] <= local_map_s:
        out.append(head + f"Spark's mapping already beats the local cleaner's (about {local_map_s:.2f} s) on one task.")
    else:
        out.append(head + f"The local mapping takes about {local_map_s:.2f} s (its time minus that recopy), so "
                          f"Spark's would beat it only spread over more than {spark_run['map_s'] / local_map_s:.0f} "
                          f"executor cores (a topic with at least that many partitions, if the job divided evenly "
                          f"over them); the recopy stays on the driver either way.")
    passes, spark_passes = small["stats"]["passes"], spark_small["stats"]["passes"]
    faster, slower = sorted((small["elapsed_s"], spark_small["elapsed_s"]))
    line = (f"More keys than the dedupe buffer holds ({comp['small_buffer_bytes']:,} bytes, a quarter of the keys): "
            f"the local cleaner needed {passes} pass{'es' * (passes != 1)} and {small['elapsed_s']:.2f} s, Spark "
            f"{spark_passes} pass{'es' * (spark_passes != 1)} and {spark_small['elapsed_s']:.2f} s: Spark "
            f"{'wins' if spark_small['elapsed_s'] < small['elapsed_s'] else 'loses'} by "
            f"{slower / max(faster, 1e-9):.1f}×.")
    overhead_s = spark_run["elapsed_s"] - local["elapsed_s"]  # what Spark costs more at one local pass
    if passes > 1 and overhead_s > 0:
        per_pass_s = (small["elapsed_s"] - local["elapsed_s"]) / (passes - 1)
        line += (f" Each extra local pass cost about {per_pass_s:.2f} s, so Spark's {overhead_s:.2f} s of overhead "
                 f"is repaid once the local cleaner needs about {1 + overhead_s / max(per_pass_s, 1e-9):.0f} passes "
                 f"or more.")
    out.append(line)
    return out


# --- text ---------------------------------------------------------------------------------------------


def render_spark(result: dict) -> str:
    """The run as text: the read table, the compaction table, what was verified, and the findings."""
    s, read = result["settings"], result["read"]
    start = result["session_start_s"]
    out = [f"logstore perf spark (Python {s['python']}, pyspark {s['pyspark']}, pyarrow {s['pyarrow']}, "
           f"SQLite {s['sqlite']}, master {s['master']}): {s['records']:,} records, {s['key_bytes']} B keys from "
           f"{s['keys']:,} distinct keys, {s['value_bytes']} B values, batches of {s['batch_records']}; "
           f"1-min load average {s['load_average_before']} before, {s['load_average_after']} after",
           f"Spark session start {'(given, not timed)' if start is None else f'{start:.2f} s'}; "
           f"warm-up query (the aggregation, arrow=true) {read['warmup_s']:.2f} s", "",
           f"reading {s['records']:,} records from {s['partitions']} partitions "
           f"({read['store']['log_bytes'] / MB:,.1f} MB "
           f"of log); best of {s['repeats']}, Spark paths interleaved; Spark timed from load() to the checked answer"]
    rows = [(f"spark arrow={PATHS[p]}", QUERY_TEXT[q], read["spark"][f"{p} {q}"]) for q in QUERIES for p in PATHS]
    rows += [("source alone, arrow=true", "plan + read() of every task, no Spark", read["context"]["source arrow"]),
             ("source alone, arrow=false", "plan + read() of every task, no Spark", read["context"]["source tuple"]),
             ("core (1 thread)", "Log.iter_records, every partition", read["context"]["core"]),
             ("sqlite (1 thread)", "SELECT key, value FROM log", read["context"]["sqlite"])]
    out += text_table(("engine", "query", "best s", "records/s", "runs s", "records checked"),
                  [(engine, query, f"{r['best_s']:.3f}", f"{r['records_per_s']:,.0f}",
                    " / ".join(f"{t:.3f}" for t in r["times_s"]), f"{r['checked']:,}") for engine, query, r in rows])
    out.append("arrow ÷ tuple (records/s): " + ", ".join(f"{QUERY_TEXT[q]} {read['arrow_over_tuple'][q]:.2f}×"
                                                         for q in QUERIES))
    write = result["write"]
    out += ["", f"writing {s['records']:,} records to {s['partitions']} partitions (one run each, checked by the "
                f"log end offsets)"]
    out += text_table(("engine", "how", "time s", "records/s"),
                  [("spark", 'df.write.format("logstore"): stage, then one commit', f"{write['spark']['best_s']:.2f}",
                    f"{write['spark']['records_per_s']:,.0f}"),
                   ("core (1 thread)", f"LogManager.append, batches of {BATCH_RECORDS}, then flush",
                    f"{write['core']['best_s']:.2f}", f"{write['core']['records_per_s']:,.0f}")])
    comp = result["compact"]
    if comp is not None:
        keys_room = int(comp["small_buffer_bytes"] * LOAD_FACTOR) // (ENTRY_OVERHEAD_BYTES + s["key_bytes"])
        out += ["", f"compacting {s['records']:,} -> {comp['distinct_keys']:,} records (one partition, "
                f"{comp['log']['log_bytes'] / MB:,.1f} MB in {comp['log']['segments']} segment(s)); each run once, "
                f"on its own copy; local in a fresh child process, Spark in this one, after an untimed "
                f"warm-up compaction of {comp['warmup_records']:,} records ({comp['warmup_s']:.2f} s)"]
        labels = {"local": ("local cleaner", "default"), "spark": ("Spark", "default"),
                  "local-small": ("local cleaner", f"{comp['small_buffer_bytes']:,} B (~{keys_room:,} keys)"),
                  "spark-small": ("Spark", f"{comp['small_buffer_bytes']:,} B (unused)")}
        out += text_table(("engine", "dedupe buffer", "time s", "passes", "map s", "recopy s", "MB after", "verified"),
                      [(labels[case][0], labels[case][1], f"{run['elapsed_s']:.2f}", run["stats"]["passes"],
                        f"{run['map_s']:.2f}" if "map_s" in run else "-",
                        f"{run['recopy_s']:.2f}" if "recopy_s" in run else "-", f"{run['bytes_after'] / MB:,.1f}",
                        f"{comp['verified'][case]:,} records") for case, run in comp["runs"].items()])
        out.append("map s: from the call to the cleaner's first progress call (Spark job, key map built in the "
                   "driver); recopy s: the rest (store's cleaner recopies and swaps, in the driver).")
        out.append("verified: read back untimed, exactly one record per key, each the latest written.")
    out += ["", "findings"] + [f"- {line}" for line in result["findings"]]
    return "\n".join(out)


__all__ = ["SparkBenchmarkError", "CompactBenchmarkError", "bench_session", "bench_spark", "bench_read",
           "bench_compact", "spark_compact", "spark_query", "findings", "render_spark"]
