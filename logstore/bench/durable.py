"""``logstore perf durable`` and ``logstore perf open-recovery``: durable appends and store open times.

Owns two benchmarks, their goals and their tables; ``cli/perf.py`` only parses options and prints.

Durable appends: N producers each append one record (16-byte key, 100-byte value) per call for a
fixed time, in five modes, each in a fresh interpreter (``python -m logstore.bench.durable``) so the
GIL and thread state of one mode do not leak into the next:

- ``group-commit``: N threads, ``Log.append([record], acks="all")``; the store's GroupCommitFlusher
  shares one fsync among every append that arrived while the previous fsync ran.
- ``futures``: N threads, each keeping ``in_flight`` ``Log.append_future([record])`` calls waiting
  for their fsync (it waits for the oldest future when its window is full): no thread blocks per
  append, and one flush round completes every future it covers.
- ``asyncio``: N producers of ``in_flight`` tasks each on one event loop, each task awaiting
  ``Log.append_async([record])`` one record at a time.
- ``fsync-per-append``: N threads, topic ``flush.messages=1`` with ``acks=1``, Kafka's way to fsync
  every append (the append that crosses the threshold flushes inside the log lock, so each append
  pays one flush).
- ``sqlite``: N threads, WAL, ``synchronous=FULL``, a connection per thread, one INSERT + COMMIT per
  append, a busy timeout so contention waits. The embedded peer, in the same run (docs/design.md §12).

Each call is timed with ``clock.Stopwatch`` (the futures mode times one in ``LATENCY_SAMPLE``, to its
future's completion), the process's CPU time is taken per run; the fsyncs of the logstore modes are counted (and
timed) through the file-system seam. Afterwards the answers are checked (every acknowledged append is
in the log or table, durable appends are below the recovery point) or ``DurableBenchmarkError`` is raised.

Open: (a) a cleanly closed store of ``partitions`` partitions over two dirs, opened and closed with 1
and 2 recovery threads per dir; (b) a store of ``size_mb`` MB (64 MiB segments, 1 KB values) checkpointed,
then ``tail_mb`` MB more appended without a flush and the writer SIGKILLed: its unclean open is compared
with a clean open of the same store plus a verified scan of the tail (the work recovery cannot avoid).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from functools import partial
from typing import Callable

from ..clock import SYSTEM_CLOCK, Stopwatch
from ..fs import FileSystem
from ..manager.log_manager import LogManager
from ..records.decoder import Record
from .child import child_main, run_child
from .recovery import verified_scan
from .report import text_table

TOPIC = "durable"
MODES = ("group-commit", "futures", "asyncio", "fsync-per-append", "sqlite")
FUTURE_MODES = ("futures", "asyncio")  # through append_future: producers keep appends in flight
ACKS_ALL_MODES = ("group-commit", *FUTURE_MODES)  # the group-commit flusher's modes
DEFAULT_IN_FLIGHT = 16  # appends a producer of the future modes keeps waiting for their fsync
LATENCY_SAMPLE = 8  # the future modes time one append in this many (a done callback each)
GOAL_VS_FSYNC = GOAL_VS_SQLITE = 5.0  # the future modes ÷ each, appends/s, at the smallest producer count
# The blocking API's goals: group commit ÷ each of fsync-per-append and SQLite FULL, by thread count.
THREAD_GOALS = {8: 3.0, 64: 5.0}
GOAL_UNCLEAN = 2.0  # unclean open ≤ this × (clean open + scan of the tail)
MIB = 1 << 20
Say = Callable[[str], None]


class DurableBenchmarkError(Exception):
    """A child failed, or an engine gave a wrong answer: the measurement is not valid."""


class _CountingFileSystem(FileSystem):
    """The OS file system, counting fsyncs (those of ``.log`` data files apart: one per log flush)
    and the time spent in fsync and msync, so the share of wall time the disk takes is known."""

    def __init__(self, fsync_delay_s: float = 0.0) -> None:
        self.fsync_delay_s = fsync_delay_s  # a simulated slower disk: extra time per data-file fsync
        self.log_fds: set[int] = set()
        self.data_fsyncs = self.fsyncs = 0
        self.sync_s = 0.0

    def open_file(self, path: str, *, create: bool = False, writable: bool = True) -> int:
        fd = super().open_file(path, create=create, writable=writable)
        (self.log_fds.add if path.endswith(".log") else self.log_fds.discard)(fd)
        return fd

    def fsync(self, fd: int) -> None:
        start = Stopwatch.now_s()
        super().fsync(fd)
        if self.fsync_delay_s and fd in self.log_fds:
            SYSTEM_CLOCK.sleep_ms(self.fsync_delay_s * 1000)  # blocks like a real fsync: the GIL is released
        self.sync_s += Stopwatch.now_s() - start
        self.fsyncs += 1  # racy += under threads is fine: only the flusher or the log lock holder syncs
        self.data_fsyncs += fd in self.log_fds

    def msync(self, mapping) -> None:
        start = Stopwatch.now_s()
        super().msync(mapping)
        self.sync_s += Stopwatch.now_s() - start

    def fsync_dir(self, path: str) -> None:
        self.fsyncs += 1
        super().fsync_dir(path)


# --- durable appends (child side) ------------------------------------------------------------------


def run_durable(mode: str, threads: int, path: str, seconds: float = 4.0, count: int | None = None,
                fsync_delay_ms: float = 0.0, in_flight: int = DEFAULT_IN_FLIGHT) -> dict:
    """Run one mode in this process: ``threads`` producers append single records for ``seconds``
    (or ``count`` appends each); in the ``futures`` and ``asyncio`` modes each producer keeps
    ``in_flight`` appends waiting for their fsync. Returns counts, appends/s, latency percentiles
    (append to acknowledgement) and the fsync counters."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
    if count is not None and count < 1:
        raise ValueError(f"count must be >= 1 append per thread, got {count!r}")
    if not isinstance(in_flight, int) or isinstance(in_flight, bool) or in_flight < 1:
        raise ValueError(f"in_flight must be an int >= 1, got {in_flight!r}")
    os.makedirs(path, exist_ok=True)
    run = _Run(_CountingFileSystem(fsync_delay_ms / 1000.0), threads, seconds, count)
    store = log = None
    if mode == "sqlite":
        db = os.path.join(path, "log.sqlite3")
        with sqlite3.connect(db) as conn:  # journal_mode=WAL is stored in the file: set it once
            conn.executescript("PRAGMA journal_mode=WAL; CREATE TABLE log (offset INTEGER PRIMARY KEY, "
                               "key BLOB, value BLOB);")

        def appender() -> tuple[Callable[[Record], object], Callable[[], None]]:
            conn = sqlite3.connect(db, timeout=60)  # the busy timeout: contention waits, never fails
            conn.executescript("PRAGMA synchronous=FULL; PRAGMA busy_timeout=60000;")  # per connection
            return (lambda record: (conn.execute("INSERT INTO log (key, value) VALUES (?, ?)", record[:2]),
                                    conn.commit())), conn.close  # closed by its own thread (sqlite3's rule)
    else:
        store = LogManager([path], fs=run.fs)
        store.create_topic(TOPIC, 1, {"flush.messages": 1} if mode == "fsync-per-append" else {})
        log = store.get_log(TOPIC, 0)
        append = log.append
        acks = "all" if mode == "group-commit" else 1

        def appender() -> tuple[Callable[[Record], object], Callable[[], None]]:
            return (lambda record: append([record], acks=acks)), lambda: None
    if mode == "asyncio":
        run.run_asyncio(log, in_flight)
    elif mode == "futures":
        run.run_threads(partial(run.futures_producer, log, in_flight), mode)
    else:
        run.run_threads(partial(run.blocking_producer, appender), mode)
    elapsed, appends = run.elapsed_s, sum(run.counts)
    lats = sorted(lat for per_thread in run.latencies for lat in per_thread)
    row = {"mode": mode, "threads": threads, "appends": appends, "elapsed_s": elapsed,
           "appends_per_s": appends / elapsed if elapsed else 0.0,
           "p50_ms": lats[len(lats) // 2] * 1e3, "p99_ms": lats[min(len(lats) - 1, len(lats) * 99 // 100)] * 1e3,
           "max_ms": lats[-1] * 1e3, "cpu_us_per_append": run.cpu_s * 1e6 / max(appends, 1)}
    if mode in FUTURE_MODES:
        row["in_flight"] = in_flight
    if mode == "sqlite":
        with sqlite3.connect(db) as conn:
            (stored,) = conn.execute("SELECT COUNT(*) FROM log").fetchone()
        row.update(stored=stored, flushes=None)
    else:
        fs, before = run.fs, run.fs_before
        row.update(stored=log.log_end_offset, recovery_point=log.recovery_point,
                   flushes=fs.data_fsyncs - before[0], fsyncs=fs.fsyncs - before[1],
                   sync_share=(fs.sync_s - before[2]) / elapsed)
        if mode in ACKS_ALL_MODES:
            flusher = store.waits.flusher
            row.update(rounds=flusher.rounds, flusher_flushes=flusher.flushes)
        store.close()
    row["records_per_flush"] = appends / row["flushes"] if row["flushes"] else None
    _check_durable(row)
    return row


class _Run:
    """One mode's run: its producers' latencies and counts, the start gate and deadline, and the
    fsync counters when the clock started (topic creation synced too: not counted)."""

    def __init__(self, fs: _CountingFileSystem, producers: int, seconds: float, count: int | None) -> None:
        self.fs = fs
        self.producers = producers
        self.seconds = seconds
        self.count = count
        self.latencies: list[list[float]] = [[] for _ in range(producers)]
        self.counts = [0] * producers
        self.deadline_s = 0.0
        self.elapsed_s = 0.0
        self.fs_before: tuple = (0, 0, 0.0)
        self.cpu_before_s = self.cpu_s = 0.0  # process CPU time (every thread), at the start and spent

    def more(self, i: int) -> bool:
        # at least one append each: on a loaded machine a short deadline can pass before a producer
        # is first scheduled, and a row of zero appends has no latencies to report
        return (i < self.count) if self.count is not None else (i == 0 or Stopwatch.now_s() < self.deadline_s)

    def _start_clock(self) -> float:
        fs = self.fs
        self.fs_before = (fs.data_fsyncs, fs.fsyncs, fs.sync_s)
        self.cpu_before_s = time.process_time()
        self.deadline_s = Stopwatch.now_s() + self.seconds
        return Stopwatch.now_s()

    def blocking_producer(self, appender, number: int, ready: Callable[[], None]) -> None:
        """One thread of the blocking modes: one call per append, each timed."""
        call, close = appender()
        value = os.urandom(100)
        lats, clock, more = self.latencies[number], Stopwatch.now_s, self.more
        ready()
        i = 0
        while more(i):
            record = Record(b"%03d-%012d" % (number, i), value)  # 16-byte key, built untimed
            began = clock()
            call(record)
            lats.append(clock() - began)
            i += 1
        self.counts[number] = i
        close()

    def futures_producer(self, log, in_flight: int, number: int, ready: Callable[[], None]) -> None:
        """One thread of the ``futures`` mode: ``log.append_future([record])`` per record, keeping
        ``in_flight`` futures outstanding (waiting for the oldest when the window is full); one
        append in ``LATENCY_SAMPLE`` is timed to its completion (a done callback)."""
        append_future = log.append_future
        value = os.urandom(100)
        lats, clock, more = self.latencies[number], Stopwatch.now_s, self.more
        window: deque = deque()
        ready()
        i = 0
        while more(i):
            if len(window) >= in_flight:
                window.popleft().result()
            future = append_future([Record(b"%03d-%012d" % (number, i), value)])
            if not i % LATENCY_SAMPLE:
                future.add_done_callback(partial(_timed_done, lats, clock()))
            window.append(future)
            i += 1
        for future in window:
            future.result()
        self.counts[number] = i

    def run_threads(self, body: Callable[[int, Callable[[], None]], None], mode: str) -> None:
        """Run ``body(number, ready)`` on ``producers`` threads started together (``ready`` is the
        start gate)."""
        start_gate = threading.Barrier(self.producers + 1)
        errors: list[BaseException] = []

        def work(number: int) -> None:
            try:
                body(number, start_gate.wait)
            except BaseException as exc:  # reported by the main thread: a worker must not die silently
                errors.append(exc)
                start_gate.abort()

        workers = [threading.Thread(target=work, args=(n,), name=f"appender-{n}") for n in range(self.producers)]
        for worker in workers:
            worker.start()
        began = self._start_clock()
        try:
            start_gate.wait()
        except threading.BrokenBarrierError:
            pass
        for worker in workers:
            worker.join()
        self.elapsed_s = Stopwatch.now_s() - began
        self.cpu_s = time.process_time() - self.cpu_before_s
        if errors:
            raise DurableBenchmarkError(f"{mode}: an appender failed: {errors[0]!r}") from errors[0]

    def run_asyncio(self, log, in_flight: int) -> None:
        """The ``asyncio`` mode: ``producers`` producers on one event loop, each ``in_flight`` tasks
        that await ``log.append_async([record])`` one after the other (so each producer has
        ``in_flight`` appends outstanding); every append is timed."""
        import asyncio

        issued = [0] * self.producers  # appends each producer's tasks started (one thread: no race)

        async def task(number: int) -> None:
            append_async = log.append_async
            value = os.urandom(100)
            lats, clock, more, counts = self.latencies[number], Stopwatch.now_s, self.more, self.counts
            while more(issued[number]):
                record = Record(b"%03d-%012d" % (number, issued[number]), value)
                issued[number] += 1
                began = clock()
                await append_async([record])
                lats.append(clock() - began)
                counts[number] += 1

        async def main() -> None:
            began = self._start_clock()
            await asyncio.gather(*(task(n) for n in range(self.producers) for _ in range(in_flight)))
            self.elapsed_s = Stopwatch.now_s() - began
            self.cpu_s = time.process_time() - self.cpu_before_s

        asyncio.run(main())


def _timed_done(lats: list[float], began: float, _future) -> None:
    lats.append(Stopwatch.now_s() - began)


def _check_durable(row: dict) -> None:
    """Every acknowledged append is stored; durable ones are below the recovery point."""
    if row["appends"] < 1 or row["stored"] != row["appends"]:
        raise DurableBenchmarkError(f"{row['mode']}: {row['appends']} appends acknowledged, {row['stored']} stored")
    if row["mode"] != "sqlite" and row["recovery_point"] < row["stored"]:
        raise DurableBenchmarkError(f"{row['mode']}: acknowledged appends above the recovery point {row}")


# --- durable appends (parent side) -----------------------------------------------------------------


def _child(workload: str, **kwargs) -> dict:
    """Run ``workload`` in a fresh interpreter; its last stdout line is its JSON result. The
    ``build_and_crash`` child SIGKILLs itself on purpose after printing."""
    expected = (0, -signal.SIGKILL) if workload == "build_and_crash" else (0,)
    return run_child(__name__, workload, kwargs, DurableBenchmarkError, returncodes=expected)


def _work_dir(parent: str | None) -> str:
    if parent:
        os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix="logstore-perf-durable-", dir=parent)  # None: $TMPDIR or /tmp


def bench_durable(threads: tuple[int, ...] = (8, 64), seconds: float = 2.0, repeats: int = 2,
                  count: int | None = None, work_dir: str | None = None, say: Say | None = None,
                  fsync_delay_ms: float = 0.0, in_flight: int = DEFAULT_IN_FLIGHT,
                  modes: tuple[str, ...] = MODES, futures_at_lowest_only: bool = False) -> dict:
    """Every mode of ``modes`` at every thread (producer) count (``futures_at_lowest_only``: the
    future modes at the lowest count only, where their goal is judged), ``repeats`` times
    interleaved (so a slow spell of this shared VM's disk hits every mode), each run in its own
    child process; the best run of each is reported."""
    unknown = set(modes) - set(MODES)
    if unknown or not modes:
        raise ValueError(f"modes must be among {', '.join(MODES)}, got {', '.join(modes) or 'none'}")
    root, best = _work_dir(work_dir), {}
    try:
        for n in threads:
            for rep in range(repeats):
                for mode in (m for m in MODES if m in modes):
                    if fsync_delay_ms and mode == "sqlite":
                        continue  # its fsyncs cannot be slowed: not comparable on a simulated disk
                    if futures_at_lowest_only and mode in FUTURE_MODES and n != min(threads):
                        continue
                    (say or (lambda _: None))(f"durable: {mode}, {n} threads, run {rep + 1} of {repeats}")
                    path = os.path.join(root, f"{mode}-{n}-{rep}")
                    row = _child("durable", mode=mode, threads=n, path=path, seconds=seconds, count=count,
                                 fsync_delay_ms=fsync_delay_ms, in_flight=in_flight)
                    shutil.rmtree(path, ignore_errors=True)
                    runs = best.get((mode, n), {}).get("runs", []) + [row["appends_per_s"]]
                    if row["appends_per_s"] >= max(runs):  # noise only ever slows a run down
                        best[(mode, n)] = row
                    best[(mode, n)]["runs"] = runs
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = list(best.values())
    result = {"settings": {"threads": list(threads), "seconds": seconds, "repeats": repeats, "count": count,
                           "fsync_delay_ms": fsync_delay_ms, "in_flight": in_flight, "modes": list(modes),
                           "python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version}, "rows": rows}
    result["goals"] = judge_durable(rows)
    result["issue_goals"] = judge_durable_by_threads(rows)
    return result


def judge_durable(rows: list[dict]) -> list[dict]:
    """The appends through the future API (``futures``: threads, ``asyncio``: tasks, each producer
    with appends in flight) ≥ 5× fsync-per-append and ≥ 5× SQLite FULL at the smallest producer
    count; the blocking group commit: more threads, faster."""
    rate = {(row["mode"], row["threads"]): row["appends_per_s"] for row in rows}
    counts = sorted({row["threads"] for row in rows})
    goals, low = [], counts[0]
    for mode in FUTURE_MODES:
        for other, bound in (("fsync-per-append", GOAL_VS_FSYNC), ("sqlite", GOAL_VS_SQLITE)):
            if (mode, low) not in rate or (other, low) not in rate:  # SQLite is not run on a simulated disk
                continue
            ratio = rate[(mode, low)] / max(rate[(other, low)], 1e-9)
            goals.append({"goal": f"{mode} ÷ {other}, {low} producers", "measured": f"{ratio:.2f}×",
                          "target": f"≥ {bound:g}×", "passed": ratio >= bound})
    if len(counts) > 1 and ("group-commit", counts[0]) in rate and ("group-commit", counts[-1]) in rate:
        high = counts[-1]
        ratio = rate[("group-commit", high)] / max(rate[("group-commit", low)], 1e-9)
        goals.append({"goal": f"group commit {high} threads ÷ {low} threads", "measured": f"{ratio:.2f}×",
                      "target": "> 1×", "passed": ratio > 1})
    return goals


def judge_durable_by_threads(rows: list[dict], goals: dict[int, float] | None = None) -> list[dict]:
    """Group commit ÷ fsync-per-append and ÷ SQLite FULL at each thread count of ``goals`` (
    ≥ 3× both at 8 threads, ≥ 5× both at 64) that the run measured."""
    rate = {(row["mode"], row["threads"]): row["appends_per_s"] for row in rows}
    judged = []
    for threads, bound in sorted((THREAD_GOALS if goals is None else goals).items()):
        for other in ("fsync-per-append", "sqlite"):
            if ("group-commit", threads) not in rate or (other, threads) not in rate:
                continue
            ratio = rate[("group-commit", threads)] / max(rate[(other, threads)], 1e-9)
            judged.append({"goal": f"group commit ÷ {other}, {threads} threads", "measured": f"{ratio:.2f}×",
                           "target": f"≥ {bound:g}×", "passed": ratio >= bound})
    return judged


def _goal_lines(goals: list[dict], title: str = "goals") -> list[str]:
    return ["", title, *text_table(("goal", "measured", "target", "result"),
                                 [(g["goal"], g["measured"], g["target"], "PASS" if g["passed"] else "FAIL")
                                  for g in goals])]


def render_durable(result: dict) -> str:
    """The durable-append run as text: one row per mode and producer count, ratios, then the goals."""
    s, rows = result["settings"], result["rows"]
    rate = {(row["mode"], row["threads"]): row["appends_per_s"] for row in rows}
    length = f"{s['count']:,} appends per producer" if s["count"] else f"{s['seconds']:g} s"
    in_flight = s.get("in_flight", DEFAULT_IN_FLIGHT)
    out = [f"logstore perf durable (Python {s['python']}, SQLite {s['sqlite']}): single-record appends "
           f"(16 B key + 100 B value), {length} per run, best of {s['repeats']} interleaved runs per mode, "
           "each run in its own process", ""]
    if s.get("fsync_delay_ms"):
        out[-1:-1] = [f"simulated slower disk: +{s['fsync_delay_ms']:g} ms per fsync of a data file "
                      "(SQLite cannot be slowed the same way, so it is not run)"]
    out += text_table(("mode", "producers", "appends", "appends/s", "p50 ms", "p99 ms", "max ms", "CPU µs/append",
                       "log flushes", "appends/flush", "fsync share", "÷ fsync-per-append", "÷ sqlite"),
                  [(r["mode"], r["threads"], f"{r['appends']:,}", f"{r['appends_per_s']:,.0f}", f"{r['p50_ms']:.2f}",
                    f"{r['p99_ms']:.2f}", f"{r['max_ms']:.1f}",
                    f"{r['cpu_us_per_append']:.1f}" if "cpu_us_per_append" in r else "-",
                    "-" if r["flushes"] is None else f"{r['flushes']:,}",
                    "-" if r["records_per_flush"] is None else f"{r['records_per_flush']:.1f}",
                    f"{r['sync_share']:.0%}" if "sync_share" in r else "-",
                    *(f"{r['appends_per_s'] / max(rate[(m, r['threads'])], 1e-9):.2f}×"
                      if r["mode"] in ACKS_ALL_MODES and (m, r["threads"]) in rate
                      else "" for m in ("fsync-per-append", "sqlite"))) for r in rows])
    out += ["producers: group-commit, fsync-per-append and sqlite: a thread making one blocking call per append; "
            f"futures: a thread keeping {in_flight} log.append_future calls waiting for their fsync (it waits for "
            f"the oldest when {in_flight} are); asyncio: {in_flight} tasks on one event loop (one loop for every "
            "producer), each awaiting log.append_async one record at a time.",
            "latency: call to acknowledgement (the futures mode times one append in "
            f"{LATENCY_SAMPLE}, to its future's completion). CPU µs/append: the process's CPU time, every thread.",
            "log flushes: fsyncs of the segment data file (a Log.flush also syncs an index that changed since its last flush).",
            "fsync share: wall time inside fsync/msync calls, getting the GIL back after them included.",
            "sqlite: one fsync of the WAL per commit (synchronous=FULL); its wait for the write lock is SQLite's "
            "busy handler (sleeps), hence its max latency.",
            *(f"{r['mode']}, {r['threads']} producers: {r['rounds']:,} flusher rounds, {r['fsyncs']:,} fsync calls "
              f"in all" for r in rows if r["mode"] in ACKS_ALL_MODES),
            "appends/s of every run: " + "; ".join(f"{r['mode']} {r['threads']}: "
                                                   + ", ".join(f"{x:,.0f}" for x in r["runs"]) for r in rows)]
    out += _goal_lines(result["goals"])
    if result.get("issue_goals"):
        out += _goal_lines(result["issue_goals"], "goals of the blocking API by thread count (group commit ÷ each)")
    return "\n".join(out)


# --- open times --------------------------------------------------------------------------------------


def build_many(dirs: list[str], partitions: int, records: int = 3) -> dict:
    """A cleanly closed store of ``partitions`` one-segment partitions over ``dirs``."""
    with LogManager(dirs) as store:
        store.create_topic("many", partitions)
        for p in range(partitions):
            store.append("many", [Record(b"k%d" % i, b"v" * 100) for i in range(records)], partition=p)
    return {"partitions": partitions, "records": partitions * records}


def time_open(dirs: list[str], repeats: int = 1, threads: int = 1) -> dict:
    """Open and close the store ``repeats`` times (the first open may be unclean: it recovers)."""
    opens, closes, clean, problems = [], [], [], []
    for _ in range(repeats):
        began = Stopwatch.now_s()
        store = LogManager(dirs, config={"num.recovery.threads.per.data.dir": threads})
        opens.append(Stopwatch.now_s() - began)
        clean.append(all(status.clean_shutdown for status in store.status()))  # did it have to recover?
        problems += store.problems
        partitions = len(store.logs())
        end_offsets = sum(log.log_end_offset for log in store.logs())
        began = Stopwatch.now_s()
        store.close()
        closes.append(Stopwatch.now_s() - began)
    return {"threads": threads, "open_s": opens, "close_s": closes, "clean": clean, "partitions": partitions,
            "records": end_offsets, "problems": problems}


def build_and_crash(path: str, size_bytes: int, tail_bytes: int) -> None:
    """Write ``size_bytes`` (1 KB values, batches of 1000, acks=1), flush and checkpoint, append
    ``tail_bytes`` more without a flush, print the facts as JSON, then SIGKILL this process."""
    store = LogManager([path])
    store.create_topic(TOPIC, 1, {"segment.bytes": 64 * MIB})
    log = store.get_log(TOPIC, 0)
    value = os.urandom(1000)
    batch = [Record(b"%016d" % i, value) for i in range(1000)]  # reused: offsets come from the log
    while log.size_bytes < size_bytes:
        log.append(batch)
    store.flush()
    store.checkpoint()
    recovery_point, durable_bytes = log.log_end_offset, log.size_bytes
    tail_batch = batch[: max(1, min(1000, tail_bytes // 1100))]
    while log.size_bytes < durable_bytes + tail_bytes:
        log.append(tail_batch)
    # Recovery re-verifies from the index entry at or below the recovery point (one batch before it here).
    facts = {"recovery_point": recovery_point, "end_offset": log.log_end_offset, "durable_bytes": durable_bytes,
             "store_bytes": log.size_bytes, "segments": len(log.segments),
             "recovered_bytes": log.size_bytes - durable_bytes}
    print(json.dumps(facts), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no shutdown: no flush, no clean-shutdown marker


def time_scans(path: str, start_offset: int, repeats: int = 3) -> dict:
    """Clean opens (median of ``repeats``), then verified batch scans (what recovery does per byte)
    from ``start_offset`` to the end and of the whole log."""
    opened = time_open([path], repeats)
    with LogManager([path]) as store:
        log = store.get_log(TOPIC, 0)
        tail_s, tail_bytes = verified_scan(log, start_offset)
        full_s, full_bytes = verified_scan(log, 0)
    return {"clean_open_s": statistics.median(opened["open_s"]), "tail_scan_s": tail_s, "tail_bytes": tail_bytes,
            "full_scan_s": full_s, "full_bytes": full_bytes}


def bench_open(partitions: int = 1000, size_mb: int = 1024, tail_mb: int = 10, repeats: int = 3,
               work_dir: str | None = None, say: Say | None = None) -> dict:
    """(a) open times of a many-partition store with 1 and 2 recovery threads per dir; (b) an unclean
    open after SIGKILL against a clean open plus a scan of the tail. Each step in its own child."""
    say = say or (lambda _: None)
    root = _work_dir(work_dir)
    try:
        dirs = [os.path.join(root, "many-a"), os.path.join(root, "many-b")]
        say(f"open: building {partitions:,} partitions over 2 dirs")
        built = _child("build_many", dirs=dirs, partitions=partitions)
        many = []
        for threads in (1, 2):
            say(f"open: {partitions:,} partitions, {threads} recovery thread(s) per dir")
            many.append(_child("time_open", dirs=dirs, repeats=repeats, threads=threads))
            if many[-1]["records"] != built["records"]:
                raise DurableBenchmarkError(f"the reopened store holds {many[-1]['records']} of "
                                            f"{built['records']} records")
        for path in dirs:
            shutil.rmtree(path, ignore_errors=True)
        path = os.path.join(root, "big")
        say(f"open: writing {size_mb:,} MB + {tail_mb:,} MB unflushed, then SIGKILL")
        crash = _child("build_and_crash", path=path, size_bytes=size_mb * 10**6, tail_bytes=tail_mb * 10**6)
        say("open: unclean open")
        unclean = _child("time_open", dirs=[path])
        if unclean["clean"] != [False] or unclean["records"] != crash["end_offset"]:  # page cache kept the tail
            raise DurableBenchmarkError(f"the open after SIGKILL was not an unclean open of every record: {unclean}")
        say("open: clean opens and scans")
        scans = _child("time_scans", path=path, start_offset=crash["recovery_point"], repeats=repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {"settings": {"partitions": partitions, "size_mb": size_mb, "tail_mb": tail_mb, "repeats": repeats,
                           "python": sys.version.split()[0]},
              "many": many, "crash": crash, "unclean": unclean, "scans": scans}
    bound = scans["clean_open_s"] + scans["tail_scan_s"]
    ratio = unclean["open_s"][0] / bound
    result["goals"] = [{"goal": f"unclean open ÷ (clean open + {tail_mb} MB tail scan)", "measured": f"{ratio:.2f}×",
                        "target": f"≤ {GOAL_UNCLEAN:g}×", "passed": ratio <= GOAL_UNCLEAN}]
    return result


def render_open(result: dict) -> str:
    """The open run as text: the many-partition opens, the unclean open against its references, goals."""
    s, crash, scans = result["settings"], result["crash"], result["scans"]
    out = [f"logstore perf open-recovery (Python {s['python']})", "",
           f"(a) {s['partitions']:,} partitions over 2 dirs, cleanly closed; open + close, median of {s['repeats']}"]
    out += text_table(("recovery threads per dir", "partitions", "open s", "close s", "ms per partition (open)"),
                  [(m["threads"], f"{m['partitions']:,}", f"{statistics.median(m['open_s']):.3f}",
                    f"{statistics.median(m['close_s']):.3f}",
                    f"{statistics.median(m['open_s']) * 1e3 / max(m['partitions'], 1):.2f}") for m in result["many"]])
    unclean_s = result["unclean"]["open_s"][0]
    out += ["", f"(b) {crash['store_bytes'] / 1e6:,.0f} MB in {crash['segments']} segments (64 MiB each), "
            f"{(crash['store_bytes'] - crash['durable_bytes']) / 1e6:,.1f} MB past the recovery point, "
            "writer SIGKILLed"]
    out += text_table(("what", "seconds", "bytes"),
                  [("unclean open (recovery)", f"{unclean_s:.3f}", f"{crash['recovered_bytes']:,} re-verified"),
                   ("clean open (median)", f"{scans['clean_open_s']:.3f}", ""),
                   ("verified scan of the tail", f"{scans['tail_scan_s']:.3f}", f"{scans['tail_bytes']:,}"),
                   ("clean open + tail scan", f"{scans['clean_open_s'] + scans['tail_scan_s']:.3f}", ""),
                   ("verified scan of the whole log", f"{scans['full_scan_s']:.3f}", f"{scans['full_bytes']:,}")])
    out += ["recovery re-verifies from the index entry at or below the recovery point: the tail, and the batch "
            "that entry names.", "all data is in the page cache (just written)."]
    return "\n".join(out + _goal_lines(result["goals"]))


if __name__ == "__main__":
    child_main(sys.argv[1:], {"durable": run_durable, "build_many": build_many, "time_open": time_open,
                              "build_and_crash": build_and_crash, "time_scans": time_scans})
