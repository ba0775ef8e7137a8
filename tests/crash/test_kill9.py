"""Kill -9 crash harness at scale (docs/design.md §7, §12;
at least 1,000 crash points in every run).

A forked writer child opens a store (recovery), then appends batches of random sizes with
deterministic payloads, flushes often, rolls, checkpoints, truncates, deletes records, applies
retention (time-based against the records' timestamps, and ``retention.bytes`` for some stores),
compacts (a compacted topic: ``LogManager.compact``, the cleaner's recopy and ``.swap`` swap) and
sometimes closes and reopens the store, reporting through a pipe what it is about to write and what
each call acknowledged. It is SIGKILLed either by the parent after a random delay ("timer") or by
itself just before its N-th mutating file operation through the ``FileSystem`` seam ("fs-op"; a data
write that crosses a page boundary is sometimes torn first, as a SIGKILL between two page copies
leaves it). Then:

- about 10% of the time a recovery is itself killed (after a random delay, or at its N-th file
  operation), and recovery runs again (compound failure);
- the crashed state is checked: the store is opened (recovery) and every partition read end to end:
  every flushed offset (and every appended one: a process crash keeps the page cache) is present with
  its exact payload, offsets are contiguous from the log start offset to the log end offset (on the
  compacted topic an offset may be missing only if a later record with the same key is there: the
  cleaner keeps the latest record of every key), nothing was written that no writer attempted,
  records removed by ``truncate_to``/``delete_records`` stay removed, the log start offset stays
  between what was acknowledged and what was requested, and index lookups (by offset, by timestamp)
  agree with the scan;
- 30% of the checks run in a separate child that exits without closing, and the next writer's open
  (a second recovery of the same state) must find the same log offsets and the same bytes in every
  partition file (idempotence); the other checks are made by the next writer itself, right after its
  own open, before it writes anything (one recovery per crash point, not two).

Three kinds of store take turns: a 4-partition topic on 2 data dirs written with ``LogManager.append``
(records spread by key, some null keys spread round-robin), a single ``Log`` from ``get_log``, and a
3-partition compacted topic (``compact`` or ``compact,delete``). Truncations on the compacted topic
stay at or above the log end at the last compaction (as Kafka cleans below the high watermark and
truncates above it: a truncation below it could remove the records that superseded what the cleaner
removed). Segment and index sizes are small so rolls (by size and by full index) are frequent; the
logs are kept small (so a check is quick); each store gets a random config and is replaced by a
fresh one after 30 crash points. Worker processes (``LOGSTORE_KILL9_WORKERS``, default 2: one per
core) share the crash points, each with its own stores.

Engine bugs this harness found (a gap after a crash inside ``truncate_to``, a torn in-place rewrite
losing records, a rebuilt index overflowing, a read skipping records at a segment boundary) have
minimal reproductions at the end of this file, as regression tests.

Settings: ``LOGSTORE_KILL9_SECONDS`` (default 40) of crash points, and never fewer than
``LOGSTORE_KILL9_MIN_POINTS`` (default 1,000: the run goes on until it has both, and fails if it
cannot reach the minimum within the hard cap); ``LOGSTORE_KILL9_SEED`` replays the random choices
(not the timing); ``LOGSTORE_KILL9_KEEP=<dir>`` keeps the crashed state of any failing separate check (set
``LOGSTORE_KILL9_SEPARATE_CHECKS=1`` with it);
``LOGSTORE_KILL9_SEPARATE_CHECKS`` (default 0.3). The figure is printed and written to
``test-results/kill9.txt`` (details in ``kill9.json``).

Run: ``pytest -s -m slow tests/crash/test_kill9.py``
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import time
from pathlib import Path

import pytest
from crash_helpers import PAGE, VIOLATIONS, CrashFS, collect_child, fork_child
from kill9_harness import (
    CHILD_TIMEOUT_S,
    HARD_CAP_S,
    MIN_CRASH_POINTS,
    WORKERS,
    figure,
    merge_stats,
    run_worker,
)

from logstore import FileSystem, LogManager, Record

RESULTS_DIR = Path(__file__).resolve().parents[2] / "test-results"


@pytest.mark.slow
def test_kill9_random_crash_points(tmp_path: Path, record_property) -> None:
    seed = int(os.environ.get("LOGSTORE_KILL9_SEED", random.SystemRandom().getrandbits(32)))
    started = time.monotonic()
    # Worker processes (one per core by default) share the work: each has its own stores and its own
    # share of the minimum, and forks its own writers, checkers and recoveries.
    share = math.ceil(MIN_CRASH_POINTS / WORKERS)
    children = [fork_child(lambda w=w: run_worker(tmp_path / f"worker-{w}", f"{seed}/{w}", share))
                for w in range(WORKERS)]
    outcomes = [collect_child(child, HARD_CAP_S + 4 * CHILD_TIMEOUT_S) for child in children]
    broken = [f"worker {w}: {o.status} {o.result or o.detail}" for w, o in enumerate(outcomes) if o.status != "ok"]
    assert not broken, "\n".join(broken)
    stats = merge_stats([outcome.result for outcome in outcomes])
    seconds = time.monotonic() - started
    line = figure(stats, seconds)
    print(f"\n{line}\nseed: {seed}")
    record_property("kill9", line)  # in the junit XML; with -s or -rA the print shows in the terminal
    for text in stats.examples:
        print("  " + text)
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "kill9.txt").write_text(line + "\n")
    (RESULTS_DIR / "kill9.json").write_text(json.dumps({
        "figure": line, "seed": seed, "seconds": seconds, "crash_points": stats.crash_points,
        "by_mode": stats.by_mode, "by_phase": stats.by_phase, "by_op": stats.by_op,
        "recovery_kills": stats.recovery_kills, "recovery_kill_attempts": stats.recovery_kill_attempts,
        "violations": {kind: stats.violations[kind] for kind in VIOLATIONS},
        "idempotence_violations": stats.idempotence_violations, "recovery_exceptions": stats.recovery_exceptions,
        "workload_exceptions": stats.workload_exceptions, "hangs": stats.hangs, "checks": stats.checks, "records_verified": stats.records_verified,
        "workers": WORKERS, "recovery_ms": stats.recovery_ms, "examples": stats.examples}, indent=2) + "\n")
    failures = {kind: stats.violations[kind] for kind in VIOLATIONS if stats.violations[kind]}
    for name in ("idempotence_violations", "recovery_exceptions", "workload_exceptions", "hangs"):
        if getattr(stats, name):
            failures[name] = getattr(stats, name)
    context = f"{line}\nseed {seed} (replay with LOGSTORE_KILL9_SEED={seed})\n" + "\n".join(stats.examples)
    assert not failures, f"{failures}\n{context}"
    assert stats.crash_points >= MIN_CRASH_POINTS, f"only {stats.crash_points} crash points\n{context}"


# --- engine bugs found by the harness, reduced to minimal reproductions ----------------------------
# Each ``*_bug`` function returns True when the bug reproduces; the tests below assert it does not.

def _contiguous(offsets: list[int]) -> bool:
    return offsets == list(range(offsets[0], offsets[0] + len(offsets))) if offsets else True


def _in_child(fn) -> None:
    """Run ``fn()`` in a forked child that dies without any cleanup (as with kill -9)."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _all_offsets(data_dir: str, topic: str = "t") -> list[int]:
    with LogManager([data_dir]) as store:
        log = store.get_log(topic, 0)
        return [record.offset for record in log.read(log.log_start_offset, 1 << 50, 1000)]


def read_gap_bug(data_dir: str) -> bool:
    """Log.read(max_bytes) returns [0, 1, 3]: the byte budget ran out inside the batch 0..2 and the
    next segment's record 3 still fitted."""
    with LogManager([data_dir]) as store:
        store.create_topic("t", 1, {"segment.bytes": 1024})
        log = store.get_log("t", 0)
        log.append([Record(b"k", b"x" * 300, (), 1) for _ in range(3)])  # offsets 0..2: one batch
        log.roll()
        log.append([Record(b"k", b"y", (), 2)])  # offset 3, in the next segment
        return not _contiguous([record.offset for record in log.read(0, max_bytes=700)])


def truncate_gap_bug(data_dir: str) -> bool:
    """Segments [0, 1] [2, 3] [4, 5]; truncate_to(1) is SIGKILLed after renaming the files of
    [2, 3] to .deleted and before renaming those of [4, 5]: recovery reads 0, 1, 4, 5."""

    def writer() -> None:
        fs = CrashFS(kill_at=4)
        store = LogManager([data_dir], fs=fs)
        store.create_topic("t", 1, {"segment.bytes": 1024})
        log = store.get_log("t", 0)
        for first in (0, 2, 4):
            log.append([Record(b"k", b"x" * 300, (), first), Record(b"k", b"x" * 300, (), first + 1)])
            if first < 4:
                log.roll()
        fs.armed = True
        log.truncate_to(1)  # ops 1-3 rename segment [2, 3] to .deleted; op 4 would start on [4, 5]

    _in_child(writer)
    return not _contiguous(_all_offsets(data_dir))


class _TearNextWrite(FileSystem):
    """Once armed, the next pwrite writes only up to the first page boundary, then SIGKILL: what a
    kill -9 arriving between two page copies of one write(2) leaves."""

    armed = False

    def pwrite(self, fd: int, data, position: int) -> None:
        if self.armed:
            os.pwrite(fd, memoryview(data)[: PAGE - position % PAGE], position)
            os.kill(os.getpid(), signal.SIGKILL)
        super().pwrite(fd, data, position)

    def pwritev(self, fd: int, buffers: list, position: int) -> None:
        if self.armed:
            self.pwrite(fd, b"".join(bytes(buffer) for buffer in buffers), position)
        super().pwritev(fd, buffers, position)


def torn_truncate_bug(data_dir: str) -> bool:
    """20 flushed records in one ~20 KB batch; truncate_to(10) must rewrite records 0..9, and the
    first write of that rewrite is torn after its first page by a kill. The truncation may or may
    not have taken effect (the call never returned), but records 0..9 must survive either way."""
    values = random.Random(7)

    def writer() -> None:
        fs = _TearNextWrite()
        store = LogManager([data_dir], fs=fs)
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        log.append([Record(b"k", values.randbytes(1000), (), i) for i in range(20)])
        log.flush()  # offsets 0..19 are durable and acknowledged
        fs.armed = True
        log.truncate_to(10)

    _in_child(writer)
    offsets = _all_offsets(data_dir)
    return offsets not in (list(range(10)), list(range(20)))


def recovery_index_overflow_bug(data_dir: str) -> bool:
    """A crashed log whose active segment holds more index-interval steps than its small time index
    has slots (truncate_to restarts the live count, so the live appends made fewer entries): the
    rebuild in recovery raises ValueError and the store cannot be opened."""
    with LogManager([data_dir]) as store:
        store.create_topic("t", 1, {"segment.index.bytes": 96, "index.interval.bytes": 0})  # 8 time slots

    def writer() -> None:
        log = LogManager([data_dir]).get_log("t", 0)
        for i in range(10):
            log.append([Record(b"k", b"v", (), 2 * i)])  # no index entry: truncate_to reset the count
            log.append([Record(b"k", b"v", (), 2 * i + 1)])  # an entry...
            log.truncate_to(log.log_end_offset - 1)  # ...removed again

    _in_child(writer)
    try:
        LogManager([data_dir]).close()
    except ValueError:
        return True
    return False




def test_read_with_max_bytes_is_contiguous(tmp_path: Path) -> None:
    """Regression: Log.read(max_bytes=...) used to skip the rest of a batch cut by the byte budget
    when the next segment's first record still fitted, returning [0, 1, 3]."""
    assert not read_gap_bug(str(tmp_path))


def test_crash_inside_truncate_to_leaves_no_gap(tmp_path: Path) -> None:
    """Regression: segments above the truncation point were renamed oldest first."""
    assert not truncate_gap_bug(str(tmp_path))


def test_torn_truncate_rewrite_keeps_records_below_the_point(tmp_path: Path) -> None:
    """Regression: the straddling batch was rewritten in place, so a torn write lost it."""
    assert not torn_truncate_bug(str(tmp_path))


def test_recovery_never_overflows_a_small_index(tmp_path: Path) -> None:
    """Regression: recovery rebuilt more index entries than a small index holds, and raised."""
    assert not recovery_index_overflow_bug(str(tmp_path))
