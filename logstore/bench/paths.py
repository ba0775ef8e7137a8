"""The workloads of ``logstore perf paths`` (and of ``perf all``): the paths users take, each
against its baseline in the same run, judged against their goals (``paths_report``).

Owns the sizes (``PathSizes``), the data sets, rows 1-6 and 10 (measured in this process) and the run of the
whole table (``bench_paths``); rows 7-9 run in child processes (``paths_process``).

Every figure is the best of ``repeats`` runs, logstore and its baseline alternating (logstore run 1,
baseline run 1, logstore run 2, ...), so a slow spell of this shared machine hits both. Inputs are
built before the clock starts; afterwards the answers are checked (counts, last offsets, sampled
records) and a wrong answer raises ``BenchmarkError`` instead of producing a figure.

Data (``records`` records, 16 B keys and 100 B values as ``core.Workload`` makes them, unless stated):
plain (rows 1, 2), varied (keys of 1-32 B, values of 10-300 B, row 3), with two headers each
(``trace``: 8 B, ``src``: 3 B; row 4), each in a logstore topic (batches of 1000, flushed) and, for the
first two, in SQLite as ``logstore perf`` sets it up (``core.SqliteEngine``: WAL, synchronous=NORMAL,
``log(offset INTEGER PRIMARY KEY, key BLOB, value BLOB, ts INTEGER)``).

1. ``log.read(offset, max_bytes=1 MiB)`` from 0 until the end, reading ``offset`` and ``value`` of
   every record (``read_loop_touching``), against iterating ``SELECT ... ORDER BY offset`` reading
   the same two columns of every row.
2. ``log.read(o, max_bytes=1)`` and ``log.read(o, max_records=1)`` at ``lookups`` seeded random
   offsets, against ``SELECT ... WHERE offset = ?`` at the same offsets (repeated: the batches were
   read before); and *cold*, ``read(o, max_records=1)`` at one random offset in each batch, in a
   random order, each set through a freshly opened read-only view (no batch read before in it, no
   cached batch head: the first read into every batch), against a fresh SQLite connection per set
   (at most ``COLD_SETS`` sets a run; only the lookups are timed, not the opens).
3. ``iter_records(0)`` and the read loop of row 1 on the varied data, against the SQLite scan of it.
4. ``iter_records(0)`` and the read loop on the records with headers (an absolute goal).
5. ``singles`` appends of one record each (``log.append([r])``) to a new topic, then ``flush()``,
   against one autocommit INSERT each (``isolation_level=None``) into a new database, then
   ``PRAGMA wal_checkpoint(FULL)``.
6. ``iter_records(0)`` over the ``singles`` one-record batches row 5 appended (an absolute goal).
10. ``iter_columns(0)`` over the plain data (``scan_columns``: per ``ColumnBatch`` its first and last
    offsets, the value bytes from the ends column and a CRC-32 over every value byte), against the
    SQLite scan of row 1; with pyarrow installed, a note gives ``to_arrow()`` of every batch too.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import sys
import tempfile
import zlib
from dataclasses import asdict
from functools import cached_property
from typing import Callable, Sequence

from ..clock import Stopwatch
from ..manager.log_manager import LogManager
from ..records.decoder import Record
from .core import BASE_TIMESTAMP_MS, BenchmarkError, SqliteEngine, Workload, pretouch
from .paths_report import PATH_ROWS, Goal, Measurement, PathSizes, Say, measurement_line, table_rows

MAX_BYTES = 1 << 20  # the consumer's fetch size
HEADERS = (("trace", b"abcdefgh"), ("src", b"svc"))
SIZE_POOL = 1021  # varied sizes cycle through this many seeded draws
COLD_SETS = 5  # row 2, cold: at most this many freshly opened views per run, one lookup per batch each


# --- data ------------------------------------------------------------------------------------------


class VariedWorkload(Workload):
    """``core.Workload`` with key sizes of 1-32 bytes and value sizes of 10-300 bytes, a pure
    function of the offset (sizes cycle through a seeded pool)."""

    @cached_property
    def _sizes(self) -> tuple[list[int], list[int]]:
        rng = random.Random(self.seed + 2)
        return [rng.randint(1, 32) for _ in range(SIZE_POOL)], [rng.randint(10, 300) for _ in range(SIZE_POOL)]

    @cached_property
    def _blob(self) -> bytes:
        return random.Random(self.seed + 3).randbytes(400)

    def row(self, offset: int) -> tuple[int, bytes, bytes, int]:
        key_sizes, value_sizes = self._sizes
        key = (b"%032d" % offset)[-key_sizes[offset % SIZE_POOL]:]
        start = offset % 97
        return offset, key, self._blob[start:start + value_sizes[(offset * 7) % SIZE_POOL]], BASE_TIMESTAMP_MS + offset


def _record(row: tuple, headers: tuple = ()) -> Record:
    return Record(row[1], row[2], headers, row[3])


def _fill_log(store: LogManager, topic: str, workload: Workload, headers: tuple = ()):
    """A new one-partition topic holding the workload (batches of 1000, flushed): its ``Log``."""
    store.create_topic(topic, 1)
    log = store.get_log(topic, 0)
    for start, stop in workload.batch_ranges():  # batches of 1000 (the Workload's default batch size)
        log.append([_record(row, headers) for row in workload.rows(start, stop)])
    log.flush()
    return log


def _fill_sqlite(path: str, workload: Workload) -> SqliteEngine:
    engine = SqliteEngine(path, workload)
    engine.append([workload.rows(start, stop) for start, stop in workload.batch_ranges()])
    engine.sync()
    return engine


def _check_log(log, workload: Workload, headers: tuple = ()) -> None:
    """The log holds the workload: its end offset, and the records at sampled offsets (untimed)."""
    if log.log_end_offset != workload.records:
        raise BenchmarkError(f"{log.name} holds {log.log_end_offset} records, expected {workload.records}")
    rng = random.Random(workload.seed + 4)
    for offset in [0, workload.records - 1, *(rng.randrange(workload.records) for _ in range(32))]:
        got = next(iter(log.read(offset, max_records=1)), None)
        want = workload.row(offset)
        if got is None or (got.offset, got.key, got.value, got.timestamp_ms, tuple(got.headers)) != (*want, headers):
            raise BenchmarkError(f"{log.name} returned {got!r:.160} at offset {offset}, expected {want!r:.160}")


# --- timed bodies ----------------------------------------------------------------------------------


def _timed(body: Callable[[], object]) -> tuple[float, object]:
    watch = Stopwatch()
    outcome = body()
    return watch.elapsed_s, outcome


def read_loop(log, end_offset: int) -> int:
    """A consumer's loop: ``read(offset, 1 MiB)`` from 0 until ``end_offset``; the records read."""
    read, offset, count = log.read, 0, 0
    while offset < end_offset:
        records = read(offset, MAX_BYTES)
        count += len(records)
        offset = records[-1].offset + 1
    return count


def read_loop_touching(log, end_offset: int) -> int:
    """``read_loop`` reading ``offset`` and ``value`` of every record, as a consumer does; the offset
    after the last record read (the records read, from offset 0)."""
    read, offset = log.read, 0
    while offset < end_offset:
        for record in read(offset, MAX_BYTES):
            record.offset
            record.value
        offset = record.offset + 1
    return offset


def scan_rows_touching(conn: sqlite3.Connection) -> int:
    """``scan_rows`` reading the offset and value columns of every row; the offset after the last."""
    offset = 0
    for row in conn.execute(SqliteEngine.SCAN):
        offset = row[0]
        row[2]
    return offset + 1


def scan_records(log) -> int:
    """``iter_records(0)``, one record at a time as a consumer takes them; the offset after the last."""
    last = None
    for last in log.iter_records(0):
        pass
    return 0 if last is None else last.offset + 1


def scan_rows(conn: sqlite3.Connection) -> int:
    """Iterate ``SELECT ... ORDER BY offset`` one row at a time; the offset after the last."""
    last = None
    for last in conn.execute(SqliteEngine.SCAN):
        pass
    return 0 if last is None else last[0] + 1


def scan_columns(log) -> tuple[int, int, int]:
    """``iter_columns(0)`` as a bulk consumer takes it: per ``ColumnBatch``, its first offset must
    follow the last one's last offset (no record missing or repeated), the value bytes are summed
    from the ends column (``value_bytes``) and every value byte goes through a CRC-32
    (``values_data``). No object per record. Returns (offset after the last, value bytes, CRC)."""
    expected = total = crc = 0
    crc32 = zlib.crc32
    for batch in log.iter_columns(0):
        if batch.first_offset != expected:
            raise BenchmarkError(f"columnar scan: a batch starts at {batch.first_offset}, expected {expected}")
        expected = batch.last_offset + 1
        total += batch.value_bytes
        crc = crc32(batch.values_data, crc)
    return expected, total, crc


def scan_arrow(log) -> int:
    """``to_arrow()`` of every ``ColumnBatch`` of ``iter_columns(0)``; the rows built."""
    rows = 0
    for batch in log.iter_columns(0):
        rows += batch.to_arrow().num_rows
    return rows


def _values_checksum(workload: Workload) -> tuple[int, int]:
    """The value bytes and their CRC-32, value after value, of the whole workload (untimed)."""
    total = crc = 0
    for start, stop in workload.batch_ranges():
        for row in workload.rows(start, stop):
            total += len(row[2])
            crc = zlib.crc32(row[2], crc)
    return total, crc


def point_reads(log, offsets: Sequence[int], by_records: bool) -> int:
    """``read(o, max_records=1)`` or ``read(o, max_bytes=1)`` at each offset; those that found o."""
    read, hits = log.read, 0
    if by_records:
        for offset in offsets:
            hits += read(offset, max_records=1)[0].offset == offset
    else:
        for offset in offsets:
            hits += read(offset, 1)[0].offset == offset
    return hits


def cold_point_reads(open_log: Callable[[], tuple[object, Callable[[], None]]], offset_sets: Sequence[Sequence[int]],
                     query: Callable[[object, Sequence[int]], int]) -> tuple[float, int]:
    """``query(reader, offsets)`` for each set of offsets on a reader freshly opened by ``open_log``
    (which returns the reader and its close); the seconds the queries took (opens and closes
    untimed) and the lookups that found their offset."""
    seconds, hits = 0.0, 0
    for offsets in offset_sets:
        reader, close = open_log()
        try:
            took, found = _timed(lambda: query(reader, offsets))
        finally:
            close()
        seconds += took
        hits += found
    return seconds, hits


def _sqlite_lookups(conn: sqlite3.Connection, offsets: Sequence[int]) -> int:
    execute, hits = conn.execute, 0
    for offset in offsets:
        hits += execute(SqliteEngine.POINT, (offset,)).fetchone() is not None
    return hits


def _rate_text(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.2f} M rec/s"


def _expect(what: str, got: int, want: int) -> None:
    if got != want:
        raise BenchmarkError(f"{what}: got {got:,}, expected {want:,}")


class _Runner:
    """Runs rows 1-6 and 10 in one work dir: one ``LogManager`` with a topic per data set, a SQLite file each."""

    def __init__(self, root: str, sizes: PathSizes, sqlite: bool, say: Say) -> None:
        self.root, self.sizes, self.sqlite, self.say = root, sizes, sqlite, say
        self.store = LogManager([os.path.join(root, "logstore")])
        self.plain = Workload(sizes.records, seed=sizes.seed)
        self._engines: list[SqliteEngine] = []

    def close(self) -> None:
        for engine in self._engines:
            engine.close()
        self.store.close()

    def _sqlite(self, name: str, workload: Workload) -> SqliteEngine | None:
        if not self.sqlite:
            return None
        self.say(f"writing {workload.records:,} {name} rows to SQLite (untimed)")
        engine = _fill_sqlite(os.path.join(self.root, f"sqlite-{name}"), workload)
        self._engines.append(engine)
        _expect(f"sqlite {name} rows", engine.end_offset(), workload.records)
        return engine

    def _log(self, name: str, workload: Workload, headers: tuple = ()):
        self.say(f"writing {workload.records:,} {name} records to logstore (untimed)")
        log = _fill_log(self.store, name, workload, headers)
        _check_log(log, workload, headers)
        return log

    def _alternate(self, bodies: Sequence[tuple[Measurement, Callable[[], int], int, bool]]) -> None:
        """``repeats`` rounds; in each, every body once in order, timed. A body is (measurement,
        callable returning its count of records or lookups done, the count expected, whether it is the
        baseline)."""
        for _round in range(self.sizes.repeats):
            for measurement, body, want, is_baseline in bodies:
                seconds, got = _timed(body)
                _expect(f"row {measurement.row} {measurement.label}"
                        f"{' (' + measurement.baseline_name + ')' if is_baseline else ''}", got, want)
                runs = measurement.baseline if is_baseline else measurement.logstore
                runs.append(want / seconds)  # what was expected is what was done: records or lookups

    @staticmethod
    def _m(row: int, label: str, goal: Goal, baseline_name: str = "", has_baseline: bool = False) -> Measurement:
        return Measurement(row, label, "rec/s", goal, baseline_name=baseline_name if has_baseline else "",
                           baseline=[] if has_baseline else None)

    def plain_rows(self, rows: set[int]) -> list[Measurement]:
        """Rows 1, 2 and 10 on the plain data."""
        n, out = self.sizes.records, []
        log = self._log("plain", self.plain)
        engine = self._sqlite("plain", self.plain)
        if 1 in rows:
            m = self._m(1, "read loop touching offset, value", Goal("faster", 3.0), "SQLite scan", bool(engine))
            bodies = [(m, lambda: read_loop_touching(log, n), n, False)]
            if engine:
                bodies.append((m, lambda: scan_rows_touching(engine.conn), n, True))
            self._alternate(bodies)
            out.append(self._done(m))
        if 2 in rows:
            rng = random.Random(self.sizes.seed + 1)
            offsets = [rng.randrange(n) for _ in range(self.sizes.lookups)]
            k = len(offsets)
            by_bytes = self._m(2, "read(o, max_bytes=1)", Goal("faster", 3.0), "SQLite point SELECT", bool(engine))
            by_records = self._m(2, "read(o, max_records=1)", Goal("faster", 3.0), "SQLite point SELECT", bool(engine))
            bodies = [(by_bytes, lambda: point_reads(log, offsets, False), k, False),
                      (by_records, lambda: point_reads(log, offsets, True), k, False)]
            if engine:
                bodies.append((by_bytes, lambda: engine.lookups(offsets), k, True))
            self._alternate(bodies)
            by_records.baseline = by_bytes.baseline  # the same SQLite runs judge both forms
            out += [self._done(by_bytes), self._done(by_records), self._done(self._cold_point_reads(engine))]
        if 10 in rows:
            out += self._columns_row(log, engine)
        return out

    def _cold_point_reads(self, engine: SqliteEngine | None) -> Measurement:
        """Row 2, cold: one lookup in each batch per set, each set on a freshly opened read-only view
        (and a fresh SQLite connection)."""
        rng = random.Random(self.sizes.seed + 5)
        batches = self.plain.batch_ranges()
        sets = max(1, min(COLD_SETS, self.sizes.lookups // max(len(batches), 1)))
        offset_sets = []
        for _ in range(sets):
            offsets = [rng.randrange(start, stop) for start, stop in batches]
            rng.shuffle(offsets)
            offset_sets.append(offsets)
        k = sum(map(len, offset_sets))
        m = self._m(2, "read(o, max_records=1), cold", Goal("faster", 3.0), "SQLite point SELECT, fresh connection",
                    bool(engine))
        path = os.path.join(self.root, "logstore")

        def open_view():
            view = LogManager([path], read_only=True, load_only=[("plain", 0)])
            return view.get_log("plain", 0), view.close

        def open_sqlite():
            conn = sqlite3.connect(engine.path)  # type: ignore[union-attr]
            return conn, conn.close

        for _round in range(self.sizes.repeats):
            seconds, hits = cold_point_reads(open_view, offset_sets,
                                             lambda log, offsets: point_reads(log, offsets, True))
            _expect("row 2 cold point reads", hits, k)
            m.logstore.append(k / seconds)
            if engine:
                seconds, hits = cold_point_reads(open_sqlite, offset_sets, _sqlite_lookups)
                _expect("row 2 cold SQLite lookups", hits, k)
                m.baseline.append(k / seconds)  # type: ignore[union-attr]
        return m

    def _columns_row(self, log, engine: SqliteEngine | None) -> list[Measurement]:
        """Row 10: the columnar scan, judged as a rate and against the SQLite scan (the same runs)."""
        n = self.sizes.records
        want = (n, *_values_checksum(self.plain))

        def columns() -> int:
            got = scan_columns(log)
            if got != want:
                raise BenchmarkError(f"row 10 columnar scan: (end, value bytes, crc) {got}, expected {want}")
            return got[0]

        rate = self._m(10, "iter_columns: offsets + value CRC", Goal("rate", 10e6))
        ratio = self._m(10, "iter_columns vs SQLite scan", Goal("faster", 5.0), "SQLite scan", bool(engine))
        bodies = [(rate, columns, n, False)]
        if engine:
            bodies.append((ratio, lambda: scan_rows(engine.conn), n, True))
        self._alternate(bodies)
        ratio.logstore = rate.logstore  # the same columnar runs judge both goals
        try:
            import pyarrow  # noqa: F401  (optional: the spark extra)
        except ImportError:
            rate.notes.append("row 10: to_arrow() not timed (pyarrow is not installed)")
        else:
            next(log.iter_columns(0)).to_arrow()  # untimed: the first call imports pyarrow.compute
            arrow = self._m(10, "to_arrow", Goal("rate", 0.0))
            self._alternate([(arrow, lambda: scan_arrow(log), n, False)])
            rate.notes.append(f"row 10: iter_columns + to_arrow() of every batch: {_rate_text(arrow.best)} (best of "
                              f"{len(arrow.logstore)}; runs {', '.join(_rate_text(v) for v in arrow.logstore)})")
        return [self._done(rate)] + ([self._done(ratio)] if engine else [])

    def varied_row(self) -> list[Measurement]:
        """Row 3: varied sizes."""
        n = self.sizes.records
        workload = VariedWorkload(n, seed=self.sizes.seed)
        log = self._log("varied", workload)
        engine = self._sqlite("varied", workload)
        scan = self._m(3, "varied sizes: iter_records", Goal("faster", 3.0), "SQLite scan", bool(engine))
        loop = self._m(3, "varied sizes: read loop", Goal("faster", 3.0), "SQLite scan", bool(engine))
        bodies = [(scan, lambda: scan_records(log), n, False), (loop, lambda: read_loop(log, n), n, False)]
        if engine:
            bodies.append((scan, lambda: scan_rows(engine.conn), n, True))
        self._alternate(bodies)
        loop.baseline = scan.baseline
        return [self._done(scan), self._done(loop)]

    def headers_row(self) -> list[Measurement]:
        """Row 4: two headers per record; an absolute goal."""
        n = self.sizes.records
        log = self._log("headers", self.plain, HEADERS)
        scan = self._m(4, "2 headers: iter_records", Goal("rate", 3e6))
        loop = self._m(4, "2 headers: read loop", Goal("rate", 3e6))
        self._alternate([(scan, lambda: scan_records(log), n, False),
                         (loop, lambda: read_loop(log, n), n, False)])
        return [self._done(scan), self._done(loop)]

    def single_rows(self, rows: set[int]) -> list[Measurement]:
        """Rows 5 and 6: one-record appends, a new topic (and database) per run; then reading the
        last run's one-record batches."""
        count = self.sizes.singles
        workload = Workload(count, seed=self.sizes.seed)
        records = [_record(row) for row in workload.rows(0, count)]
        rows_in = workload.rows(0, count)
        out, last_log = [], None
        appends = self._m(5, "log.append([r]) per record, then flush", Goal("faster", 3.0),
                          "SQLite autocommit INSERT", self.sqlite)
        for run in range(self.sizes.repeats):
            topic = f"single-{run}"
            self.store.create_topic(topic, 1)
            log = self.store.get_log(topic, 0)

            def append_all(log=log) -> int:
                append = log.append
                for record in records:
                    append([record])
                log.flush()
                return log.log_end_offset

            seconds, end = _timed(append_all)
            _expect("row 5 single-record appends", end, count)
            appends.logstore.append(count / seconds)
            if self.sqlite:
                conn = _autocommit_table(os.path.join(self.root, f"single-{run}.sqlite3"))
                try:
                    seconds, _ = _timed(lambda: _insert_each(conn, rows_in))
                    _expect("row 5 SQLite autocommit inserts", conn.execute("SELECT COUNT(*) FROM log").fetchone()[0],
                            count)
                finally:
                    conn.close()
                appends.baseline.append(count / seconds)
            last_log = log
        _check_log(last_log, workload)
        if 5 in rows:
            out.append(self._done(appends))
        if 6 in rows:
            reads = self._m(6, "iter_records over one-record batches", Goal("rate", 1.5e6))
            self._alternate([(reads, lambda: scan_records(last_log), count, False)])
            out.append(self._done(reads))
        return out

    def _done(self, m: Measurement) -> Measurement:
        self.say(measurement_line(m))
        return m


def _autocommit_table(path: str) -> sqlite3.Connection:
    """A new database with the baseline's table and settings, in autocommit mode."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE log "
                       "(offset INTEGER PRIMARY KEY, key BLOB, value BLOB, ts INTEGER);")
    return conn


def _insert_each(conn: sqlite3.Connection, rows: Sequence[tuple]) -> None:
    """One INSERT per row, each its own transaction (autocommit), then a full checkpoint: like the
    logstore side's ``flush()``, it ends with everything in the database file."""
    execute = conn.execute
    for row in rows:
        execute(SqliteEngine.INSERT, row)
    conn.execute("PRAGMA wal_checkpoint(FULL)")


# --- the whole table -------------------------------------------------------------------------------


def bench_paths(sizes: PathSizes = PathSizes(), *, rows: Sequence[int] = tuple(PATH_ROWS), compare: bool = True,
                work_dir: str | None = None, keep: bool = False, say: Say | None = None) -> dict:
    """Measure the ``rows`` (numbers 1-10) at ``sizes``, SQLite baselines when ``compare``.
    Returns ``{"settings", "measurements" (Measurement objects), "rows" (JSON rows), "notes"}``;
    ``as_json`` turns it into plain data."""
    from . import paths_process  # children of rows 7-9 (imported here: it loads the durable, compact and recovery benches)

    wanted = set(rows)
    unknown = wanted - set(PATH_ROWS)
    if unknown or not wanted:
        raise ValueError(f"rows must be among {sorted(PATH_ROWS)}, got {sorted(rows)!r}")
    say = say or (lambda _: None)
    if work_dir:
        os.makedirs(work_dir, exist_ok=True)
    root = tempfile.mkdtemp(prefix="logstore-perf-paths-", dir=work_dir)
    measurements: list[Measurement] = []
    notes: list[str] = []
    try:
        if wanted & {1, 2, 3, 4, 5, 6, 10}:
            pretouch(root, sizes.records * 200 * 2)  # page-cache memory the VM has backed (see core.pretouch)
            runner = _Runner(root, sizes, compare, say)
            try:
                if wanted & {1, 2, 10}:
                    measurements += runner.plain_rows(wanted)
                if 3 in wanted:
                    measurements += runner.varied_row()
                if 4 in wanted:
                    measurements += runner.headers_row()
                if wanted & {5, 6}:
                    measurements += runner.single_rows(wanted)
            finally:
                runner.close()
        if 7 in wanted:
            measurements += paths_process.durable_row(sizes, root, say)
        if 8 in wanted:
            measurements += paths_process.compaction_row(sizes, root, say)
        if 9 in wanted:
            measurements += paths_process.recovery_row(sizes, root, say)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    notes.append("rec/s: records read or appended per second of wall time; the baselines run in the same "
                 "process run, alternating with logstore (run 1 logstore, run 1 baseline, ...).")
    settings = {**asdict(sizes), "rows": sorted(wanted), "compare": "sqlite" if compare else "none",
                "python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version, "path": root if keep else None}
    return {"settings": settings, "measurements": measurements, "rows": table_rows(measurements), "notes": notes}


def as_json(result: dict) -> dict:
    """``bench_paths``'s result as plain data (the measurements live in ``rows``)."""
    return {key: value for key, value in result.items() if key != "measurements"}
