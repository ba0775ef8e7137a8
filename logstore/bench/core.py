"""Benchmarks behind ``logstore perf``: logstore against SQLite, same workload, same process.

Owns the workloads, the SQLite baseline, the comparison
with the acceptance targets and the result table; ``cli/perf.py`` only parses options and prints.

- Records are a pure function of their offset (``Workload.row``), so any answer can be checked. The
  payload per record is key + value + 8 bytes of timestamp; MB is 10**6 bytes.
- What an engine is handed (``Record`` lists, SQLite row tuples) is built before the clock starts.
  Timing (``clock.Stopwatch``: wall and process CPU time) runs in chunks; progress is reported between.
- append: ``Log.append`` per batch then one ``flush()``, against one ``executemany`` transaction per
  batch (WAL, synchronous=NORMAL) then one ``PRAGMA wal_checkpoint(FULL)``: both end synced to disk.
- scan: ``Log.iter_records(0)`` (record objects, one at a time) against iterating the cursor of
  ``SELECT ... ORDER BY offset`` the same way.
- random: ``Log.read(offset, max_bytes=1)`` against ``SELECT ... WHERE offset = ?`` at the same seeded
  uniformly random offsets.
- open: median time of ``LogManager([dir])`` on cleanly closed stores of several sizes, and the segment
  bytes read while opening (counted through the file-system seam).

After timing, the answers are checked (record counts, end offsets, sampled records): a wrong answer
raises ``BenchmarkError`` instead of producing a number.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import statistics
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from itertools import islice
from typing import Callable, Iterator, Sequence

from ..clock import Stopwatch
from ..fs import FileSystem
from ..manager.log_manager import LogManager
from ..records.decoder import Record
from .report import MB, TARGETS, Result, compare, format_bytes, parse_size, render_table  # noqa: F401

TOPIC = "perf"
BASE_TIMESTAMP_MS = 1_700_000_000_000
TIMESTAMP_BYTES = 8
DEFAULT_MAX_MESSAGE_BYTES = 1048588  # Kafka's default max.message.bytes
CHUNKS = 50  # progress reports per timed phase
VALUE_POOL_BYTES = 1 << 24
Progress = Callable[[str, int, int], None]
"""``progress(label, done, total)``, called between timed chunks."""


class BenchmarkError(Exception):
    """An engine gave a wrong answer: the measurement is not valid."""


@dataclass(frozen=True)
class Workload:
    """The records of a benchmark: ``records`` of ``key_bytes`` + ``value_bytes``, appended in
    batches of ``batch_size``. ``max_message_bytes`` sets the logstore topic's max.message.bytes
    (None: the default, so a larger batch is split by logstore; 0: just large enough for one batch)."""

    records: int
    key_bytes: int = 16
    value_bytes: int = 100
    batch_size: int = 1000
    seed: int = 42
    max_message_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.records < 1 or self.batch_size < 1 or self.key_bytes < 0 or self.value_bytes < 0:
            raise ValueError(f"records and batch_size must be >= 1, sizes >= 0: {self}")

    @property
    def record_payload_bytes(self) -> int:
        return self.key_bytes + self.value_bytes + TIMESTAMP_BYTES

    @cached_property
    def _values(self) -> list[bytes]:
        rng = random.Random(self.seed)
        count = max(1, min(self.records, VALUE_POOL_BYTES // max(self.value_bytes, 1)))
        return [rng.randbytes(self.value_bytes) for _ in range(count)]

    def topic_config(self) -> dict[str, int]:
        """The logstore topic overrides this workload needs."""
        if self.max_message_bytes is None:
            return {}
        if self.max_message_bytes == 0:  # room for one batch: columns + blobs + header, with margin
            needed = self.batch_size * (self.record_payload_bytes + 16) + 4096
            return {"max.message.bytes": max(needed, DEFAULT_MAX_MESSAGE_BYTES)}
        return {"max.message.bytes": self.max_message_bytes}

    def row(self, offset: int) -> tuple[int, bytes, bytes, int]:
        """``(offset, key, value, timestamp_ms)`` of the record at ``offset``."""
        key = (b"%0*d" % (self.key_bytes, offset))[-self.key_bytes:] if self.key_bytes else b""
        values = self._values
        return offset, key, values[offset % len(values)], BASE_TIMESTAMP_MS + offset

    def rows(self, start: int, stop: int) -> list[tuple[int, bytes, bytes, int]]:
        return [self.row(offset) for offset in range(start, stop)]

    def batch_ranges(self) -> list[tuple[int, int]]:
        return [(start, min(start + self.batch_size, self.records))
                for start in range(0, self.records, self.batch_size)]


class _Meter:
    """Accumulates wall and CPU time over the timed chunks of one phase."""

    def __init__(self) -> None:
        self.elapsed_s = 0.0
        self.cpu_s = 0.0

    def run(self, work: Callable[[], object]) -> object:
        cpu_start = Stopwatch.cpu_s()
        watch = Stopwatch()
        outcome = work()
        self.elapsed_s += watch.elapsed_s
        self.cpu_s += Stopwatch.cpu_s() - cpu_start
        return outcome


def _chunked(label: str, total: int, step: Callable[[int, int], int], meter: _Meter,
             progress: Progress | None) -> int:
    """Run ``position = step(position, target)`` in timed chunks until ``position >= total``."""
    position = 0
    chunk = max(1, -(-total // CHUNKS))
    while position < total:
        target = min(position + chunk, total)
        reached = meter.run(lambda: step(position, target))
        if reached <= position:
            raise BenchmarkError(f"{label}: no progress at {position} of {total}")
        position = reached
        if progress:
            progress(label, min(position, total), total)
    return position


# --- the engines -----------------------------------------------------------------------------------


class LogstoreEngine:
    """A one-partition logstore topic in ``path``, driven through ``Log``. An engine ``build``s its
    input from rows, ``append``s batches, ``sync``s to disk, reports its ``end_offset``, ``scan``s from
    an offset to at least a target (returning the next offset), counts the ``lookups`` that found
    their record, ``get``s one row back, and ``close``s."""

    name = "logstore"

    def __init__(self, path: str, workload: Workload, config: dict | None = None) -> None:
        self.path = path
        self.store = LogManager([path])
        self.store.create_topic(TOPIC, 1, {**workload.topic_config(), **(config or {})})
        self.log = self.store.get_log(TOPIC, 0)
        self._records = None

    @staticmethod
    def build(rows: Sequence[tuple[int, bytes, bytes, int]]) -> list[Record]:
        return [Record(key, value, (), timestamp_ms) for _, key, value, timestamp_ms in rows]

    def append(self, batches: Sequence[list[Record]]) -> None:
        append = self.log.append
        for batch in batches:
            append(batch)

    def sync(self) -> None:
        self.log.flush()

    def end_offset(self) -> int:
        return self.log.log_end_offset

    def scan(self, offset: int, target: int) -> int:
        # One record object at a time, as a consumer loop sees them (Log.iter_records builds each
        # Record only when reached); the SQLite engine iterates its cursor the same way.
        if self._records is None or offset == 0:
            self._records = self.log.iter_records(offset)
        last = None
        for last in islice(self._records, target - offset):
            pass
        return offset if last is None else last.offset + 1

    def lookups(self, offsets: Sequence[int]) -> int:
        read = self.log.read
        hits = 0
        for offset in offsets:
            records = read(offset, 1)
            if len(records) == 1 and records[0].offset == offset:
                hits += 1
        return hits

    def get(self, offset: int) -> tuple[int, bytes, bytes, int] | None:
        return next(((r.offset, r.key, r.value, r.timestamp_ms) for r in self.log.read(offset, 1)), None)

    def close(self) -> None:
        self.store.close()


class SqliteEngine:
    """The SQLite baseline: one table, WAL, synchronous=NORMAL; the engine
    interface of ``LogstoreEngine``."""

    name = "sqlite"
    INSERT = "INSERT INTO log (offset, key, value, ts) VALUES (?, ?, ?, ?)"
    SCAN = "SELECT offset, key, value, ts FROM log ORDER BY offset"
    POINT = "SELECT key, value, ts FROM log WHERE offset = ?"

    def __init__(self, path: str, workload: Workload) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = os.path.join(path, "log.sqlite3")
        self.conn = sqlite3.connect(self.path)
        self.conn.executescript("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE IF NOT EXISTS "
                                "log (offset INTEGER PRIMARY KEY, key BLOB, value BLOB, ts INTEGER);")
        self._cursor = None

    @staticmethod
    def build(rows: Sequence[tuple[int, bytes, bytes, int]]) -> list[tuple[int, bytes, bytes, int]]:
        return list(rows)

    def append(self, batches: Sequence[list[tuple]]) -> None:
        conn = self.conn
        for batch in batches:
            conn.executemany(self.INSERT, batch)
            conn.commit()

    def sync(self) -> None:
        self.conn.execute("PRAGMA wal_checkpoint(FULL)")

    def end_offset(self) -> int:
        (last,) = self.conn.execute("SELECT MAX(offset) FROM log").fetchone()
        return 0 if last is None else last + 1

    def scan(self, offset: int, target: int) -> int:
        if self._cursor is None or offset == 0:
            self._cursor = self.conn.execute(self.SCAN)
        last = None
        for last in islice(self._cursor, target - offset):
            pass
        if last is None:
            self._cursor = None
            return offset
        return last[0] + 1

    def lookups(self, offsets: Sequence[int]) -> int:
        execute = self.conn.cursor().execute
        sql = self.POINT
        hits = 0
        for offset in offsets:
            if execute(sql, (offset,)).fetchone() is not None:
                hits += 1
        return hits

    def get(self, offset: int) -> tuple[int, bytes, bytes, int] | None:
        row = self.conn.execute(self.POINT, (offset,)).fetchone()
        return None if row is None else (offset, *row)

    def close(self) -> None:
        self.conn.close()


ENGINES = {"logstore": LogstoreEngine, "sqlite": SqliteEngine}


# --- workloads -------------------------------------------------------------------------------------


def _verify(engine, workload: Workload, offsets: Sequence[int]) -> None:
    """Compare the engine's records at ``offsets`` with what was appended (untimed)."""
    for offset in offsets:
        got = engine.get(offset)
        if got != workload.row(offset):
            raise BenchmarkError(f"{engine.name} returned {got!r:.120} at offset {offset}, "
                                 f"expected {workload.row(offset)!r:.120}")


def _measure(kind: str, label: str, engine, workload: Workload, total: int, step: Callable[[int, int], int],
             progress: Progress | None, finish: Callable[[], object] | None = None) -> Result:
    """Time ``step`` over ``total`` records (or lookups) in chunks, then ``finish``; the row for it.
    ``checked`` holds the position the steps reached."""
    meter = _Meter()
    reached = _chunked(f"{kind} {engine.name}", total, step, meter, progress)
    if finish is not None:
        meter.run(finish)
    return Result(kind, label, engine.name, total, total * workload.record_payload_bytes, meter.elapsed_s,
                  meter.cpu_s, reached, path=engine.path)


def _run_append(engine, workload: Workload, progress: Progress | None) -> Result:
    batches = []
    ranges = workload.batch_ranges()
    for number, (start, stop) in enumerate(ranges, 1):
        batches.append(engine.build(workload.rows(start, stop)))
        if progress and number % max(1, len(ranges) // CHUNKS) == 0:
            progress(f"build {engine.name}", number, len(ranges))
    size = workload.batch_size

    def step(position: int, target: int) -> int:  # whole batches from the one holding ``position``
        last = -(-target // size)
        engine.append(batches[position // size : last])
        return min(last * size, workload.records)

    label = f"append {workload.key_bytes}B key+{workload.value_bytes}B value, batch {size}"
    result = _measure("append", label, engine, workload, workload.records, step, progress, finish=engine.sync)
    batches.clear()  # free the pre-built input before the read phases
    result.checked = engine.end_offset()
    if result.checked != workload.records:
        raise BenchmarkError(f"{engine.name} holds {result.checked} records after appending {workload.records}")
    _verify(engine, workload, [0, workload.records - 1, *random_offsets(workload, 32)])
    config = workload.topic_config()
    if config and engine.name == "logstore":
        result.extra["note"] = f"topic max.message.bytes={config['max.message.bytes']:,}"
    return result


def _run_scan(engine, workload: Workload, progress: Progress | None) -> Result:
    label = f"scan {workload.key_bytes}B key+{workload.value_bytes}B value"
    result = _measure("scan", label, engine, workload, workload.records, engine.scan, progress)
    if result.checked != workload.records:
        raise BenchmarkError(f"{engine.name} scan ended at offset {result.checked}, expected {workload.records}")
    return result


def random_offsets(workload: Workload, lookups: int) -> list[int]:
    """The seeded, uniformly random offsets of the random-read workload."""
    rng = random.Random(workload.seed + 1)
    return [rng.randrange(workload.records) for _ in range(lookups)]


def _run_random(engine, workload: Workload, offsets: list[int], progress: Progress | None) -> Result:
    hits = 0

    def step(position: int, target: int) -> int:
        nonlocal hits
        hits += engine.lookups(offsets[position:target])
        return target

    result = _measure("random", f"random 1-record read of {workload.records:,}", engine, workload,
                      len(offsets), step, progress)
    result.checked = hits
    if hits != len(offsets):
        raise BenchmarkError(f"{engine.name}: {hits} of {len(offsets)} random reads found their record")
    _verify(engine, workload, offsets[:32])
    return result


@contextmanager
def _work_dir(parent: str | None, keep: bool) -> Iterator[str]:
    """A temporary directory under ``parent`` (default: the system's), removed unless ``keep``."""
    if parent:
        os.makedirs(parent, exist_ok=True)
    path = tempfile.mkdtemp(prefix="logstore-perf-", dir=parent)
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def bench_log(workload: Workload, *, phases: Sequence[str] = ("append",), engines: Sequence[str] = ("logstore",),
              lookups: int = 100_000, work_dir: str | None = None, keep: bool = False,
              progress: Progress | None = None) -> list[Result]:
    """Append ``workload`` to each engine, then run the read ``phases`` ("scan", "random") on the same
    data. The append is timed and reported only when "append" is among ``phases``. Returns the rows
    with ratios and targets filled in when SQLite is among the engines."""
    offsets = random_offsets(workload, lookups) if "random" in phases else []
    results = []
    with _work_dir(work_dir, keep) as root:
        for name in engines:
            path = os.path.join(root, name)
            pretouch(root, workload.records * workload.record_payload_bytes * 3 // 2)
            engine = ENGINES[name](path, workload)
            try:
                appended = _run_append(engine, workload, progress)
                if "append" in phases:
                    results.append(appended)
                if "scan" in phases:
                    results.append(_run_scan(engine, workload, progress))
                if "random" in phases:
                    results.append(_run_random(engine, workload, offsets, progress))
            finally:
                engine.close()
            if not keep:  # give its page cache back before the next engine runs
                shutil.rmtree(path, ignore_errors=True)
    results.sort(key=lambda result: ("append", "scan", "random").index(result.kind))  # side by side
    return compare(results)


def pretouch(root: str, size_bytes: int) -> None:
    """Write and delete a scratch file of ``size_bytes`` (untimed), so the engine that runs next
    writes into page-cache memory the VM has already backed. On this kind of VM, the first touch of
    guest memory runs at ~350 MB/s against ~4 GB/s afterwards: without this, whichever engine runs
    first would pay it."""
    path = os.path.join(root, "pretouch.tmp")
    chunk = bytes(1 << 20)
    with open(path, "wb") as scratch:
        for _ in range(0, size_bytes, len(chunk)):
            scratch.write(chunk)
    os.unlink(path)


def bench_all(*, records: int = 1_000_000, lookups: int = 100_000, large_records: int = 100_000,
              large_value_bytes: int = 10_240, open_sizes: Sequence[int] = (10**6, 10**9), repeats: int = 7,
              engines: Sequence[str] = ("logstore", "sqlite"), seed: int = 42, work_dir: str | None = None,
              keep: bool = False, progress: Progress | None = None) -> list[Result]:
    """The acceptance table: append, scan and random reads of ``records`` 16+100-byte records;
    append of ``large_records`` records of ``large_value_bytes`` (batches of 1000, the topic's
    max.message.bytes raised to hold one batch); open of stores of ``open_sizes``."""
    small = Workload(records, seed=seed, max_message_bytes=0)
    large = Workload(large_records, value_bytes=large_value_bytes, seed=seed, max_message_bytes=0)
    options = dict(engines=engines, work_dir=work_dir, keep=keep, progress=progress)
    return (bench_log(small, phases=("append", "scan", "random"), lookups=lookups, **options)
            + bench_log(large, phases=("append",), **options)
            + bench_open(open_sizes, repeats=repeats, work_dir=work_dir, keep=keep, progress=progress))


# --- opening ---------------------------------------------------------------------------------------


class _CountingFileSystem(FileSystem):
    """The OS file system, counting the bytes read from ``.log`` files with ``pread``."""

    def __init__(self) -> None:
        self.log_bytes_read = 0
        self._log_fds: set[int] = set()

    def open_file(self, path: str, *, create: bool = False, writable: bool = True) -> int:
        fd = super().open_file(path, create=create, writable=writable)
        (self._log_fds.add if path.endswith(".log") else self._log_fds.discard)(fd)
        return fd

    def pread(self, fd: int, size: int, position: int) -> bytes:
        data = super().pread(fd, size, position)
        if fd in self._log_fds:
            self.log_bytes_read += len(data)
        return data


def _build_store(path: str, size_bytes: int, value_bytes: int, batch_size: int, config: dict,
                 progress: Progress | None) -> tuple[int, int, int]:
    """Append records to a new store until its log holds ``size_bytes``, then close it cleanly.
    Returns ``(records, log bytes, segments)``."""
    workload = Workload(-(-size_bytes // (16 + value_bytes)),  # enough: a record takes more on disk
                        value_bytes=value_bytes, batch_size=batch_size, max_message_bytes=0)
    engine = LogstoreEngine(path, workload, config)
    try:
        for start, stop in workload.batch_ranges():
            if engine.log.size_bytes >= size_bytes:
                break
            engine.append([engine.build(workload.rows(start, stop))])
            if progress:
                progress(f"build {format_bytes(size_bytes)} store", min(engine.log.size_bytes, size_bytes), size_bytes)
        return engine.end_offset(), engine.log.size_bytes, len(engine.log.segments)
    finally:
        engine.close()


def bench_open(sizes_bytes: Sequence[int], *, repeats: int = 7, value_bytes: int = 1000,
               batch_size: int = 1000, segment_bytes: int | None = None, work_dir: str | None = None,
               keep: bool = False, progress: Progress | None = None) -> list[Result]:
    """Build one cleanly closed store per size (``value_bytes`` records, untimed), then time
    ``LogManager([dir])`` ``repeats`` times each (after one warm-up open) and report the median open
    time; the median close time and the ``.log`` bytes read while opening go in ``extra``."""
    results = []
    config = {} if segment_bytes is None else {"segment.bytes": segment_bytes}
    with _work_dir(work_dir, keep) as root:
        for size in sizes_bytes:
            label = f"open {format_bytes(size)} store"
            path = os.path.join(root, f"open-{size}")
            records, store_bytes, segments = _build_store(path, size, value_bytes, batch_size, config, progress)
            counting = _CountingFileSystem()
            with LogManager([path], fs=counting) as store:  # warm-up, counting data reads
                if store.get_log(TOPIC, 0).log_end_offset != records:
                    raise BenchmarkError(f"the reopened {format_bytes(size)} store lost records")
            opens, closes = [], []
            for run in range(repeats):
                opens.append(_Meter())
                closes.append(_Meter())
                store = opens[-1].run(lambda: LogManager([path]))
                closes[-1].run(store.close)
                if progress:
                    progress(label, run + 1, repeats)
            extra = {"close_s": statistics.median(m.elapsed_s for m in closes), "segments": segments,
                     "log_bytes_read_at_open": counting.log_bytes_read, "store_bytes": store_bytes,
                     "repeats": repeats}
            results.append(Result("open", label, "logstore", records, store_bytes,
                                  statistics.median(m.elapsed_s for m in opens),
                                  statistics.median(m.cpu_s for m in opens), records, extra=extra, path=path))
    return compare(results)
