"""The LogManager's background jobs, loading, checkpoints, offline dirs and status (docs/design.md §8.1;
``manager.jobs``, ``manager.log_dirs``), on a manual clock and a manually driven
scheduler.

Invariants checked:

- Flush job: a topic's ``flush.ms`` is enforced by the ``log-flusher`` job every
  ``log.flush.scheduler.interval.ms``: the recovery point advances only when the job runs and
  ``flush.ms`` has passed since the log's last flush (moving the clock alone does nothing); topics
  without ``flush.ms`` are never flushed by it; without the interval there is no flusher job.
- Checkpoint jobs: ``recovery-point-offset-checkpoint`` (Kafka's text: version ``0``, a count line,
  ``topic partition offset`` lines) changes only when ``recovery-point-checkpoint`` runs, at its
  initial delay and then every ``log.flush.offset.checkpoint.interval.ms``; likewise
  ``log-start-offset-checkpoint`` with its own job and interval (``delete_records`` persists both at
  once, by design: a crash must not bring deleted records back).
- Lifecycle: ``startup()`` is idempotent; the context manager starts the jobs (``log-retention``,
  ``recovery-point-checkpoint``, ``log-start-offset-checkpoint``, and ``log-flusher`` only when its
  interval is set), each first due at ``log.initial.task.delay.ms``; shutdown stops them; a second
  shutdown is harmless and a closed store cannot be started again; a read-only store runs no job.
- Loading: partitions created topic by topic over 3 dirs stay balanced (max - min per dir <= 1 after
  every creation, on disk); a reopen with ``num.recovery.threads.per.data.dir=2`` loads every partition
  with the same offsets, on threads ``log-recovery-<dir>_*`` of a pool per dir, all dirs at once (a
  barrier that only all 3 x 2 loading threads together can pass).
- A damaged recovery-point checkpoint: the store opens, reports the problem, re-verifies every segment
  and loses nothing (after an unclean shutdown; and after a clean one, as docs/design.md §7 and the
  log_dirs docstring promise).
- After an unclean shutdown only the segments from the one holding the checkpointed recovery point on
  are re-verified (a process crash, and power losses that may cut unsynced data); nothing below the
  recovery point is lost.
- Offline dir: with every operation under one of two dirs failing with EIO (or only one partition's
  files), the store opens; ``status()`` shows the dir offline with a reason; reads, appends and
  ``get_log`` of every partition on it raise ``OfflineDirError``; partitions on the other dir work;
  jobs run without failures; a new topic goes only to the healthy dir; all dirs failing is a
  ``StorageError`` at open; a later reopen with the normal file system finds everything intact.
- ``status()``: per dir partitions, ``size_bytes`` (the sum of its ``.log`` files), recovery points and
  log end offsets; ``clean_shutdown`` True after a clean close, False after an abandoned process and
  for a new store.
"""

from __future__ import annotations

import errno
import os
import random
import threading

import pytest

import logstore.manager.log_dirs
from crash_helpers import read_all
from checkpoint_helpers import checkpoint_text
from logstore import (LogManager, ManualClock, Record, Scheduler, ShutdownError,
                      StorageError, StoreClosedError)
from logstore.errors import OfflineDirError
from logstore.log.checkpoint import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from logstore.log.segment import LogSegment
from logstore.testing import OperationHookFileSystem, SimulatedCrashFileSystem

T0 = 1_700_000_000_000
SEGMENT_BYTES = 300  # three one-record batches per segment
NEVER = 10**12
JOB_NAMES = {"log-retention", "recovery-point-checkpoint", "log-start-offset-checkpoint", "producer-expiration",
             "log-descriptor-release"}


# --- helpers -----------------------------------------------------------------------------------------

def rec(i: int, tag: bytes = b"") -> Record:
    return Record(b"k%d" % (i % 5), tag + b"v%04d|" % i + b"x" * 24, (), T0 + i)


def expected(i: int, tag: bytes = b"") -> Record:
    return rec(i, tag)._replace(offset=i)


def open_store(dirs, clock: ManualClock | None = None, *, fs=None, read_only: bool = False, **settings):
    clock = clock or ManualClock(T0)
    config = {"log.initial.task.delay.ms": NEVER, **settings}
    return LogManager(dirs, config=config, clock=clock, fs=fs, read_only=read_only,
                      scheduler=Scheduler(clock, threaded=False)), clock


def append_each(log, offsets, tag: bytes = b"") -> None:
    for i in offsets:
        log.append([rec(i, tag)])


def read_text(data_dir: str, name: str) -> str | None:
    path = os.path.join(data_dir, name)
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return handle.read()


def dirs_of(tmp_path, count: int) -> list[str]:
    return [str(tmp_path / f"d{n}") for n in range(count)]


def partition_dirs(data_dir: str) -> list[str]:
    return sorted(name for name in os.listdir(data_dir) if os.path.isdir(os.path.join(data_dir, name)))


@pytest.fixture
def recovered(monkeypatch):
    """The base offsets of the segments ``LogSegment.recover`` re-verifies, in call order."""
    calls: list[int] = []
    original = LogSegment.recover

    def spy(self, *args, **kwargs):
        calls.append(self.base_offset)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "recover", spy)
    return calls


# --- the flush job -----------------------------------------------------------------------------------

def test_flush_job_enforces_flush_ms_only_when_it_runs(tmp_path):
    store, clock = open_store(dirs_of(tmp_path, 1), **{"log.initial.task.delay.ms": 1000,
                                                     "log.flush.scheduler.interval.ms": 1000})
    with store:
        (flusher,) = [task for task in store.scheduler.tasks() if task.name == "log-flusher"]
        assert (flusher.next_run_ms, flusher.period_ms) == (T0 + 1000, 1000)
        store.create_topic("timed", 1, {"flush.ms": 5000})
        store.create_topic("untimed", 1)
        timed, untimed = store.get_log("timed", 0), store.get_log("untimed", 0)
        append_each(timed, range(10))
        append_each(untimed, range(10))
        for _ in range(4):  # runs at T0 + 1000 .. T0 + 4000: flush.ms has not passed
            store.scheduler.advance(1000)
            assert timed.recovery_point == 0
        store.scheduler.advance(999)
        assert timed.recovery_point == 0 and flusher.runs == 4
        store.scheduler.advance(1)  # T0 + 5000: 5000 ms since the log's last flush (its open)
        assert flusher.runs == 5 and timed.recovery_point == 10 == timed.log_end_offset
        assert timed.last_flush_ms == T0 + 5000
        append_each(timed, range(10, 15))
        # Time alone does not flush: only a run of the job does.
        clock.advance(7000)
        assert timed.recovery_point == 10
        store.scheduler.advance(0)  # the overdue run, now (T0 + 12000)
        assert timed.recovery_point == 15
        append_each(timed, range(15, 18))
        store.scheduler.advance(4999)  # runs every second; 5000 ms since the flush only at T0 + 17000
        assert timed.recovery_point == 15
        store.scheduler.advance(1)
        assert timed.recovery_point == 18
        # flush.ms at its default (never): the job leaves the other topic alone.
        store.scheduler.advance(60_000)
        assert untimed.recovery_point == 0 and flusher.failures == 0


def test_no_flusher_job_without_its_interval(tmp_path):
    store, clock = open_store(dirs_of(tmp_path, 1), **{"log.initial.task.delay.ms": 0})
    with store:
        assert {task.name for task in store.scheduler.tasks()} == JOB_NAMES
        store.create_topic("t", 1, {"flush.ms": 0})
        log = store.get_log("t", 0)
        append_each(log, range(5))
        store.scheduler.advance(3_600_000)
        assert log.recovery_point == 0
        assert store.flush_dirty_logs() == 1 and log.recovery_point == 5  # what the job would do


# --- the checkpoint jobs ------------------------------------------------------------------------------

def test_checkpoint_files_change_only_when_their_jobs_run(tmp_path):
    dirs = dirs_of(tmp_path, 1)
    store, clock = open_store(dirs, **{"log.initial.task.delay.ms": 1000,
                                      "log.flush.offset.checkpoint.interval.ms": 2000,
                                      "log.flush.start.offset.checkpoint.interval.ms": 3000})
    with store:
        tasks = {task.name: task for task in store.scheduler.tasks()}
        assert tasks["recovery-point-checkpoint"].period_ms == 2000
        assert tasks["log-start-offset-checkpoint"].period_ms == 3000
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.ms": -1, "file.delete.delay.ms": 0})
        store.create_topic("u", 2)
        log = store.get_log("t", 0)
        append_each(log, range(30))
        append_each(store.get_log("u", 1), range(4))
        log.flush()
        assert log.recovery_point == 30
        store.scheduler.advance(999)
        assert read_text(dirs[0], RECOVERY_POINT_CHECKPOINT) is None
        assert read_text(dirs[0], LOG_START_OFFSET_CHECKPOINT) is None
        store.scheduler.advance(1)  # T0 + 1000: both jobs
        assert read_text(dirs[0], RECOVERY_POINT_CHECKPOINT) == checkpoint_text("0\n3\nt 0 30\nu 0 0\nu 1 0\n")
        assert read_text(dirs[0], LOG_START_OFFSET_CHECKPOINT) == checkpoint_text("0\n0\n")

        store.get_log("u", 1).flush()
        store.scheduler.advance(1999)
        assert read_text(dirs[0], RECOVERY_POINT_CHECKPOINT) == checkpoint_text("0\n3\nt 0 30\nu 0 0\nu 1 0\n")
        store.scheduler.advance(1)  # T0 + 3000: the recovery-point job only
        assert read_text(dirs[0], RECOVERY_POINT_CHECKPOINT) == checkpoint_text("0\n3\nt 0 30\nu 0 0\nu 1 4\n")
        assert tasks["recovery-point-checkpoint"].runs == 2 and tasks["log-start-offset-checkpoint"].runs == 1

        # delete_records persists at once (the engine's choice, stronger than Kafka's lazy write).
        log.delete_records(16)
        assert read_text(dirs[0], LOG_START_OFFSET_CHECKPOINT) == checkpoint_text("0\n1\nt 0 16\n")
        # Retention moves the start to a segment boundary (15 and 18 go: 21 = the first base), so
        # the entry is no longer needed; the file says so only after the job's next run.
        store.alter_topic_config("t", {"retention.bytes": sum(s.size_bytes for s in log.segments[-3:])})
        (result,) = store.cleanup_logs("t")
        assert [d.base_offset for d in result.deleted] == [15, 18] and log.log_start_offset == 21
        store.scheduler.advance(999)  # T0 + 3999
        assert read_text(dirs[0], LOG_START_OFFSET_CHECKPOINT) == checkpoint_text("0\n1\nt 0 16\n")
        store.scheduler.advance(1)  # T0 + 4000: the log-start-offset job
        assert read_text(dirs[0], LOG_START_OFFSET_CHECKPOINT) == checkpoint_text("0\n0\n")
        assert tasks["log-start-offset-checkpoint"].runs == 2

        append_each(log, range(30, 35))
        log.flush()
        store.scheduler.advance(999)  # T0 + 4999
        assert "t 0 30" in read_text(dirs[0], RECOVERY_POINT_CHECKPOINT).splitlines()
        store.scheduler.advance(1)  # T0 + 5000
        assert "t 0 35" in read_text(dirs[0], RECOVERY_POINT_CHECKPOINT).splitlines()
        assert all(task.failures == 0 for task in tasks.values())


# --- lifecycle ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("flusher", [False, True])
def test_context_manager_starts_the_jobs_and_shutdown_stops_them(tmp_path, flusher):
    settings = {"log.initial.task.delay.ms": 700, "log.retention.check.interval.ms": 5000,
                "log.flush.offset.checkpoint.interval.ms": 6000, "log.flush.start.offset.checkpoint.interval.ms": 7000}
    if flusher:
        settings["log.flush.scheduler.interval.ms"] = 8000
    store, clock = open_store(dirs_of(tmp_path, 1), **settings)
    assert not store.scheduler.is_started and store.scheduler.tasks() == []
    with store as entered:
        assert entered is store
        tasks = {task.name: task for task in store.scheduler.tasks()}
        assert set(tasks) == JOB_NAMES | ({"log-flusher"} if flusher else set())
        assert {task.next_run_ms for task in tasks.values()} == {T0 + 700}
        periods = {"log-retention": 5000, "recovery-point-checkpoint": 6000, "log-start-offset-checkpoint": 7000,
                   "log-flusher": 8000, "producer-expiration": 600000, "log-descriptor-release": 300000}
        assert all(task.period_ms == periods[name] for name, task in tasks.items())
        # startup() again changes nothing.
        store.startup()
        store.startup()
        assert sorted(task.name for task in store.scheduler.tasks()) == sorted(tasks)
        assert store.scheduler.pending() == len(tasks)
        store.scheduler.advance(700)
        assert all(task.runs == 1 for task in tasks.values())
    assert not store.scheduler.is_started and store.scheduler.tasks() == []
    assert all(task.cancelled for task in tasks.values())
    with pytest.raises(ShutdownError):
        store.scheduler.advance(10_000)
    store.shutdown()  # a second shutdown is harmless
    store.close()
    with pytest.raises(StoreClosedError):
        store.startup()


def test_startup_without_the_context_manager_and_explicit_shutdown(tmp_path):
    store, clock = open_store(dirs_of(tmp_path, 1), **{"log.initial.task.delay.ms": 10})
    try:
        assert store.scheduler.tasks() == []
        store.startup()
        assert {task.name for task in store.scheduler.tasks()} == JOB_NAMES
        store.startup()
        assert len(store.scheduler.tasks()) == len(JOB_NAMES)
        store.scheduler.advance(10)
        assert all(task.runs == 1 for task in store.scheduler.tasks())
    finally:
        store.shutdown()
    assert not store.scheduler.is_started
    store.shutdown()


def test_read_only_store_runs_no_jobs(tmp_path):
    dirs = dirs_of(tmp_path, 1)
    store, clock = open_store(dirs, **{"log.initial.task.delay.ms": 0})
    with store:
        store.create_topic("t", 1)
        append_each(store.get_log("t", 0), range(3))
    viewer, clock = open_store(dirs, clock, read_only=True, **{"log.initial.task.delay.ms": 0,
                                                              "log.flush.scheduler.interval.ms": 1})
    with viewer:
        viewer.startup()
        assert not viewer.scheduler.is_started and viewer.scheduler.tasks() == []
        assert read_all(viewer.get_log("t", 0)) == [expected(i) for i in range(3)]


# --- loading -----------------------------------------------------------------------------------------

def test_placement_stays_balanced_and_parallel_reload(tmp_path, monkeypatch):
    dirs = dirs_of(tmp_path, 3)
    rng = random.Random(5)
    store, clock = open_store(dirs)
    ends: dict[tuple[str, int], int] = {}
    with store:
        for number in range(8):
            topic = f"topic{number}"
            store.create_topic(topic, rng.randint(1, 4), {"segment.bytes": SEGMENT_BYTES})
            counts = [len(partition_dirs(d)) for d in dirs]
            assert max(counts) - min(counts) <= 1, (topic, counts)
            for partition in range(store.partitions(topic)):
                on_disk = [d for d in dirs if f"{topic}-{partition}" in partition_dirs(d)]
                assert on_disk == [store.log_dir_of(topic, partition)]
                log = store.get_log(topic, partition)
                append_each(log, range(rng.randint(0, 8)), tag=topic.encode())
                ends[(topic, partition)] = log.log_end_offset
    counts = [len(partition_dirs(d)) for d in dirs]
    assert sum(counts) == len(ends) and min(counts) >= 2

    # Reopen with a pool of 2 threads per dir: record who loads what, and hold each loading thread's
    # first load at a barrier that only 3 dirs x 2 threads arriving together can pass.
    loaded: list[tuple[str, str, str]] = []
    barrier = threading.Barrier(3 * 2)
    first_loads: set[str] = set()
    guard = threading.Lock()
    original = logstore.manager.log_dirs.Log

    def recording_log(path, *args, **kwargs):
        name = threading.current_thread().name
        with guard:
            first = name not in first_loads
            first_loads.add(name)
            loaded.append((name, os.path.dirname(path), os.path.basename(path)))
        if first:
            barrier.wait(timeout=20)  # BrokenBarrierError: the dirs or the threads were not loaded at once
        return original(path, *args, **kwargs)

    monkeypatch.setattr(logstore.manager.log_dirs, "Log", recording_log)
    store, clock = open_store(dirs, clock, **{"num.recovery.threads.per.data.dir": 2})
    with store:
        assert sorted(name for _, _, name in loaded) == sorted(f"{t}-{p}" for t, p in ends)
        for thread_name, data_dir, _ in loaded:
            prefix = f"log-recovery-{os.path.basename(data_dir)}_"
            assert thread_name.startswith(prefix) and thread_name[len(prefix):] in ("0", "1"), thread_name
        assert len({name for name, _, _ in loaded}) == 6
        for (topic, partition), end in ends.items():
            log = store.get_log(topic, partition)
            assert (log.log_start_offset, log.log_end_offset) == (0, end)
            assert read_all(log) == [expected(i, topic.encode()) for i in range(end)]
            assert os.path.dirname(log.dir_path) == store.log_dir_of(topic, partition)


# --- damaged checkpoints and recovery ----------------------------------------------------------------

def _build_and_crash(dirs, *, records: int = 40, flushed: int = 31, lose_unsynced: bool = False, seed: int = 0):
    """A writer appends ``flushed`` records, flushes and checkpoints, appends up to ``records`` more,
    then its process dies (power loss when ``lose_unsynced``)."""
    fs = SimulatedCrashFileSystem()
    store, clock = open_store(dirs, fs=fs)
    store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES})
    log = store.get_log("t", 0)
    append_each(log, range(flushed))
    log.flush()
    store.checkpoint()
    append_each(log, range(flushed, records))
    bases = [segment.base_offset for segment in log.segments]
    fs.crash(random.Random(seed), lose_unsynced=lose_unsynced)
    return bases


def _damage(path: str, how: str) -> None:
    """Damage both copies of a checkpoint (one damaged copy is survived: see test_checkpoint_files)."""
    with open(path, "rb") as handle:
        data = bytearray(handle.read())
    half = len(data) // 2
    if how == "flip":
        data[half // 2] ^= 0x80  # no longer UTF-8, in each copy
        data[half + half // 2] ^= 0x80
    elif how == "truncate":
        data = data[: half - 3]  # cut inside the first copy
    else:
        data[0:1] = data[half:half + 1] = b"7"  # an unknown version
    with open(path, "wb") as handle:
        handle.write(data)


@pytest.mark.parametrize("how", ["flip", "truncate", "version"])
def test_damaged_recovery_point_checkpoint_after_unclean_shutdown(tmp_path, recovered, how):
    dirs = dirs_of(tmp_path, 1)
    bases = _build_and_crash(dirs)
    _damage(os.path.join(dirs[0], RECOVERY_POINT_CHECKPOINT), how)
    store, clock = open_store(dirs)
    with store:
        assert any(RECOVERY_POINT_CHECKPOINT in problem and "treated as absent" in problem
                   for problem in store.problems), store.problems
        assert recovered == bases  # every segment re-verified, oldest first
        log = store.get_log("t", 0)
        assert log.log_end_offset == 40 and read_all(log) == [expected(i) for i in range(40)]
        assert not store.status()[0].clean_shutdown


def test_damaged_recovery_point_checkpoint_after_clean_shutdown(tmp_path, recovered):
    """docs/design.md §7 and the log_dirs docstring say a damaged
    checkpoint means "that dir is fully recovered", but with a clean-shutdown marker present the
    loader re-verifies nothing (load_log trusts clean_shutdown and ignores the recovery point)."""
    dirs = dirs_of(tmp_path, 1)
    store, clock = open_store(dirs)
    with store:
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES})
        log = store.get_log("t", 0)
        append_each(log, range(20))
        bases = [segment.base_offset for segment in log.segments]
    _damage(os.path.join(dirs[0], RECOVERY_POINT_CHECKPOINT), "flip")
    store, clock = open_store(dirs, clock)
    with store:
        assert any("treated as absent" in problem for problem in store.problems), store.problems
        log = store.get_log("t", 0)
        assert read_all(log) == [expected(i) for i in range(20)]
        assert recovered == bases, "a damaged checkpoint must mean a full recovery of the dir"


def test_unclean_shutdown_recovers_only_from_the_recovery_point(tmp_path, recovered):
    dirs = dirs_of(tmp_path, 1)
    bases = _build_and_crash(dirs, records=50, flushed=31)
    assert read_text(dirs[0], RECOVERY_POINT_CHECKPOINT) == checkpoint_text("0\n1\nt 0 31\n")
    holding = max(base for base in bases if base <= 31)
    assert holding == 30 and bases[0] == 0 and len(bases) == 17
    store, clock = open_store(dirs)
    with store:
        assert recovered == [base for base in bases if base >= holding]
        log = store.get_log("t", 0)
        assert log.log_end_offset == 50 and read_all(log) == [expected(i) for i in range(50)]
        (status,) = store.status()
        assert not status.clean_shutdown and status.recovery_points == {("t", 0): 31}
    recovered.clear()
    store, clock = open_store(dirs, clock)  # after a clean close: nothing to re-verify
    with store:
        assert recovered == [] and store.status()[0].clean_shutdown


@pytest.mark.parametrize("seed", range(4))
def test_power_loss_recovers_only_from_the_recovery_point_and_keeps_what_was_flushed(tmp_path, recovered, seed):
    dirs = dirs_of(tmp_path, 1)
    bases = _build_and_crash(dirs, records=50, flushed=31, lose_unsynced=True, seed=seed)
    store, clock = open_store(dirs)
    with store:
        log = store.get_log("t", 0)
        assert recovered and recovered[0] == 30 and min(recovered) == 30
        assert recovered == [base for base in bases if 30 <= base <= recovered[-1]]  # contiguous
        assert 31 <= log.log_end_offset <= 50
        assert read_all(log) == [expected(i) for i in range(log.log_end_offset)]


# --- offline dirs -----------------------------------------------------------------------------------

class FailingDirFS(OperationHookFileSystem):
    """Every operation on a path under one of ``roots`` fails with EIO (a dead disk)."""

    def __init__(self, *roots: str) -> None:
        self.roots = [os.path.abspath(root) for root in roots]
        self.failures = 0

    def _check(self, path) -> None:
        if path is None:
            return
        path = os.path.abspath(path)
        if any(path == root or path.startswith(root + os.sep) for root in self.roots):
            self.failures += 1
            raise OSError(errno.EIO, f"injected EIO on {path}")

    def before(self, operation, path):
        self._check(path)

    def open_file(self, path, *, create=False, writable=True):
        self._check(path)
        return super().open_file(path, create=create, writable=writable)

    def try_lock(self, path):
        self._check(path)
        return super().try_lock(path)

    def list_dir(self, path):
        self._check(path)
        return super().list_dir(path)

    def read_file(self, path):
        self._check(path)
        return super().read_file(path)


def _two_dir_store(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    store, clock = open_store(dirs)
    with store:
        store.create_topic("t", 4, {"segment.bytes": SEGMENT_BYTES})
        for p in range(4):
            append_each(store.get_log("t", p), range(5 + p), tag=b"p%d" % p)
        placement = {p: store.log_dir_of("t", p) for p in range(4)}
    assert sorted(placement.values()) == sorted(dirs * 2)
    return dirs, clock, placement


@pytest.mark.parametrize("scope", ["whole-dir", "one-partition"])
def test_offline_dir(tmp_path, scope):
    """With scope "one-partition" only the files of the first partition loaded from dir B fail:
    that takes all of B offline, so every partition on B must refuse service too.

    ENGINE BUG (scope "one-partition"): LogDirs.load marks B offline when that
    partition's load fails, but the partitions of B whose load jobs finish afterwards are still put
    into ``_logs`` (``self._logs[key] = future.result()``), so they stay readable and writable on
    the offline dir (and are flushed and closed there at shutdown).

    ENGINE BUG (scope "whole-dir"): when B fails before its partitions are listed (lock, marker),
    ``_log_dir_of`` knows none of them, so ``_load_logs`` reports them as missing ("was a data dir
    left out?") and ``get_log``/``read``/``append`` raise a plain ``StorageError`` saying so instead
    of ``OfflineDirError`` naming B and its cause."""
    dirs, clock, placement = _two_dir_store(tmp_path)
    a, b = dirs
    on_a = [p for p, d in placement.items() if d == a]
    on_b = [p for p, d in placement.items() if d == b]
    fs = FailingDirFS(b) if scope == "whole-dir" else FailingDirFS(os.path.join(b, f"t-{on_b[0]}"))
    store, clock = open_store(dirs, clock, fs=fs, **{"log.initial.task.delay.ms": 0})
    with store:
        assert fs.failures >= 1
        status = {entry.path: entry for entry in store.status()}
        assert status[a].online and status[a].offline_reason is None
        assert not status[b].online and "injected EIO" in status[b].offline_reason
        assert b in store.offline_dirs and any("offline" in problem for problem in store.problems)
        acknowledged = {p: [expected(i, b"p%d" % p) for i in range(5 + p)] for p in range(4)}
        for p in on_a:
            assert read_all(store.get_log("t", p)) == acknowledged[p]
            store.append("t", [rec(99)], partition=p)
            acknowledged[p].append(expected(99)._replace(offset=5 + p))
        # Every partition on B refuses service with OfflineDirError naming B (checked at the end,
        # so that the other checks run whatever happens here).
        served_offline = {}
        for p in on_b:
            for what, action in (("get_log", lambda: store.get_log("t", p)), ("read", lambda: store.read("t", p, 0)),
                                 ("append", lambda: store.append("t", [rec(99)], partition=p))):
                try:
                    action()
                    outcome = "served"
                    if what == "append":  # (a bug) it must not be lost either
                        acknowledged[p].append(expected(99)._replace(offset=len(acknowledged[p])))
                except OfflineDirError as exc:
                    outcome = "ok" if b in str(exc) else f"OfflineDirError not naming B: {exc}"
                except Exception as exc:  # noqa: BLE001 - reported below
                    outcome = f"{type(exc).__name__}: {exc}"
                if outcome != "ok":
                    served_offline[(p, what)] = outcome
        # The jobs run without touching B (and without failing).
        store.scheduler.advance(10)
        assert all(task.failures == 0 for task in store.scheduler.tasks())
        assert os.path.exists(os.path.join(a, RECOVERY_POINT_CHECKPOINT))
        # A new topic goes only to the healthy dir.
        before_b = partition_dirs(b)
        store.create_topic("new", 3)
        assert [store.log_dir_of("new", p) for p in range(3)] == [a] * 3
        assert partition_dirs(b) == before_b
    # With the disk repaired, a reopen finds everything intact (B recovers if it was left unclean).
    store, clock = open_store(dirs, clock)
    with store:
        assert not store.offline_dirs
        for p in range(4):
            assert read_all(store.get_log("t", p)) == acknowledged[p]
        assert store.partitions("new") == 3 and [store.log_dir_of("new", p) for p in range(3)] == [a] * 3
    assert served_offline == {}, f"partitions on the offline dir B did not raise OfflineDirError: {served_offline}"


def test_all_dirs_failing_is_a_storage_error(tmp_path):
    dirs, clock, placement = _two_dir_store(tmp_path)
    with pytest.raises(StorageError, match="no data dir"):
        open_store(dirs, clock, fs=FailingDirFS(*dirs))
    store, clock = open_store(dirs, clock)  # the failed open left nothing locked or changed
    with store:
        for p in range(4):
            assert read_all(store.get_log("t", p)) == [expected(i, b"p%d" % p) for i in range(5 + p)]


# --- status ------------------------------------------------------------------------------------------

def _log_file_bytes(data_dir: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(data_dir)
               for name in names if name.endswith(".log"))


def test_status_after_clean_and_unclean_shutdown(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    store, clock = open_store(dirs)
    with store:
        statuses = store.status()
        assert [s.clean_shutdown for s in statuses] == [False, False]  # a new store had no session
        store.create_topic("t", 3, {"segment.bytes": SEGMENT_BYTES})
        for p in range(3):
            append_each(store.get_log("t", p), range(4 * (p + 1)))
        store.get_log("t", 1).flush()
        statuses = store.status()
        assert [s.partitions for s in statuses] == [2, 1]
        assert statuses[0].recovery_points == {("t", 0): 0, ("t", 2): 0}
        assert statuses[1].recovery_points == {("t", 1): 8}
        assert statuses[0].log_end_offsets == {("t", 0): 4, ("t", 2): 12}
    store, clock = open_store(dirs, clock)
    with store:
        statuses = store.status()
        assert [s.path for s in statuses] == [os.path.abspath(d) for d in dirs]
        assert all(s.online and s.offline_reason is None and s.clean_shutdown for s in statuses)
        assert [s.partitions for s in statuses] == [2, 1]
        assert [s.size_bytes for s in statuses] == [_log_file_bytes(d) for d in dirs]
        assert statuses[0].size_bytes > 0 and statuses[1].size_bytes > 0
        assert statuses[0].recovery_points == {("t", 0): 4, ("t", 2): 12}
        assert statuses[1].recovery_points == {("t", 1): 8}

    # An abandoned process (never closed): the next session sees an unclean previous one.
    fs = SimulatedCrashFileSystem()
    store, clock = open_store(dirs, clock, fs=fs)
    store.get_log("t", 0).append([rec(4)])
    store.get_log("t", 1).flush()
    store.checkpoint()
    store.get_log("t", 1).append([rec(8)])
    fs.crash(random.Random(1), lose_unsynced=False)
    store, clock = open_store(dirs, clock)
    with store:
        statuses = store.status()
        assert [s.clean_shutdown for s in statuses] == [False, False]
        assert statuses[0].log_end_offsets == {("t", 0): 5, ("t", 2): 12}
        assert statuses[1].log_end_offsets == {("t", 1): 9}
        assert statuses[1].recovery_points == {("t", 1): 8}
        assert statuses[0].recovery_points == {("t", 0): 4, ("t", 2): 12}
        assert [s.size_bytes for s in statuses] == [_log_file_bytes(d) for d in dirs]


def test_the_producer_expiration_job_drops_idle_producers(tmp_path):
    from logstore.records.batching import ProducerBatch
    store, clock = open_store(dirs_of(tmp_path, 1), **{"log.initial.task.delay.ms": 0,
                                                       "producer.id.expiration.ms": 1000,
                                                       "producer.id.expiration.check.interval.ms": 500})
    with store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        log.append([Record(b"k", b"v", (), clock.time_ms())], producer=ProducerBatch(1, 0, 0))
        log.append([Record(b"k", b"v", (), clock.time_ms())], producer=ProducerBatch(2, 0, 0, transactional=True))
        store.scheduler.advance(500)
        assert len(log.producer_state) == 2
        store.scheduler.advance(1000)
        assert [entry.producer_id for entry in log.producer_state.entries()] == [2]  # its transaction is open
