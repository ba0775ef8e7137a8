"""Crashes around a raised log start offset: minimal reproductions of two defects, as regression
tests.

- Power loss after ``delete_records`` up to the log end and a roll: the old segment, wholly below the
  log start offset, was never fsynced (its records were deleted before a flush reached them), yet
  the recovery point had passed it, so the torn tail a power loss left there was refused as damage.
  A segment wholly below the log start offset holds only deleted records: recovery does not judge
  it, and a writer removes it.
- A kill -9 inside ``truncate_to`` at the first segment's base offset: every segment was deleted
  before the new empty one was made. A log start offset equal to the first segment's base is not
  written to the checkpoints (the files say it), so with no segment left the log restarted at 0,
  below an acknowledged ``delete_records``.
"""

from __future__ import annotations

import random
from pathlib import Path

from logstore import LogManager, ManualClock, Record
from logstore.testing import OperationHookFileSystem, SimulatedCrashFileSystem

BASE_TS = 1_700_000_000_000


class HalfKept(random.Random):
    """Crash choices of a power loss that keeps every directory change and half of each file's
    unsynced bytes (so an unsynced batch is torn), with no garbage written."""

    def randrange(self, stop, *args):  # type: ignore[override]
        return stop - 1

    def randint(self, a, b):  # type: ignore[override]
        return (a + b) // 2

    def choice(self, seq):  # type: ignore[override]
        return 0


def _records(first: int, count: int, size: int = 40) -> list[Record]:
    return [Record(b"k%d" % offset, b"v" * size, (), BASE_TS + offset) for offset in range(first, first + count)]


def _offsets(log) -> list[int]:
    return [record.offset for record in log.read(log.log_start_offset, max_bytes=1 << 30, max_records=10_000)]


def test_power_loss_after_delete_records_and_roll_is_no_damage(tmp_path: Path) -> None:
    fs = SimulatedCrashFileSystem()
    clock = ManualClock(BASE_TS)
    with LogManager([str(tmp_path)], fs=fs, clock=clock) as store:
        store.create_topic("t", 1)
        store.get_log("t", 0).append(_records(0, 2))  # fsynced by the clean close
    store = LogManager([str(tmp_path)], fs=fs, clock=clock)
    log = store.get_log("t", 0)
    log.append(_records(2, 2))  # never fsynced
    checkpointed = []
    inner = log.on_checkpoint_needed
    log.on_checkpoint_needed = lambda log: (checkpointed.append((log.log_start_offset, log.recovery_point)),
                                            inner(log))
    assert log.delete_records(4) == 4
    # The new start is checkpointed beside the old recovery point: never a recovery point that says
    # the unsynced records 2 and 3 are fsynced while the start on disk still holds them.
    assert checkpointed == [(4, 2)]
    log.roll()  # segment 0 (offsets 0..3, the last two unsynced) now lies wholly below the start
    assert log.flush() == 4
    store.checkpoint()  # the recovery point 4 on disk: segment 0 lies below it
    report = fs.crash(HalfKept())
    assert str(tmp_path / "t-0" / "00000000000000000000.log") in report.cut_files  # its unsynced tail was torn

    with LogManager([str(tmp_path)], read_only=True, clock=clock) as view:
        seen = view.get_log("t", 0)
        assert (seen.log_start_offset, seen.log_end_offset, _offsets(seen)) == (4, 4, [])
    with LogManager([str(tmp_path)], fs=fs, clock=clock) as store:
        assert store.damaged_partitions == {}
        log = store.get_log("t", 0)
        assert (log.log_start_offset, log.log_end_offset) == (4, 4)
        assert [segment.base_offset for segment in log.segments] == [4]  # the dead segment was removed
        log.append(_records(4, 1))
    with LogManager([str(tmp_path)], clock=clock) as store:
        log = store.get_log("t", 0)
        assert (log.log_start_offset, log.log_end_offset, _offsets(log)) == (4, 5, [4])


class _Killed(BaseException):
    """The process is gone: raised by every file operation from the kill on."""


class KillAtFS(OperationHookFileSystem, SimulatedCrashFileSystem):
    """A kill -9 just before the ``kill_at``-th mutating file operation once armed: that one and
    every later one fail, so nothing after the kill reaches the files."""

    def __init__(self, kill_at: int) -> None:
        SimulatedCrashFileSystem.__init__(self)
        self.kill_at = kill_at
        self.armed = False
        self.operations = 0
        self.killed = False

    def before(self, operation, path):
        if self.armed:
            self.operations += 1
            self.killed = self.killed or self.operations >= self.kill_at
        if self.killed:
            raise _Killed(f"{operation} {path}")


def _truncate_to_start_killed_at(data_dir: str, kill_at: int) -> bool:
    """Segments [0..9] [10..19] [20..29]; delete_records(10) removes the first, a checkpoint writes
    the start 10 as the files say it (not in the checkpoints); truncate_to(10) is killed before its
    ``kill_at``-th file operation. Returns whether the kill happened inside it."""
    fs = KillAtFS(kill_at)
    store = LogManager([data_dir], fs=fs)
    store.create_topic("t", 1)
    log = store.get_log("t", 0)
    for first in (0, 10, 20):
        log.append(_records(first, 10))
        if first < 20:
            log.roll()
    log.flush()
    assert log.delete_records(10) == 10
    assert [segment.base_offset for segment in log.segments] == [10, 20]
    store.checkpoint()
    fs.armed = True
    try:
        log.truncate_to(10)
    except _Killed:
        pass
    fs.crash(random.Random(0), lose_unsynced=False)
    return fs.killed


def test_kill_inside_truncate_to_the_log_start_keeps_the_start(tmp_path: Path) -> None:
    kill_at = 1
    while True:
        data_dir = tmp_path / f"kill-{kill_at}"
        killed = _truncate_to_start_killed_at(str(data_dir), kill_at)
        with LogManager([str(data_dir)]) as store:
            log = store.get_log("t", 0)
            offsets = _offsets(log)
            # The start stays the acknowledged 10; records at or above it may survive the
            # unfinished truncation, as a gap-free run.
            assert log.log_start_offset == 10, (kill_at, log.log_start_offset, log.log_end_offset)
            assert offsets == list(range(10, log.log_end_offset)), (kill_at, offsets)
            assert log.log_end_offset in (10, 20, 30), (kill_at, log.log_end_offset)
            if not killed:
                assert log.log_end_offset == 10  # the truncation completed
                break
        kill_at += 1
        assert kill_at < 100, "truncate_to never completed"


def test_kill_inside_truncate_below_the_first_segment_keeps_a_start(tmp_path: Path) -> None:
    """truncate_to(5) below the first segment's base 10 (and below the log start): the new segment at
    5 is made before the old ones go, so every crash point leaves the log starting at 5 or 10."""
    kill_at = 1
    while True:
        data_dir = tmp_path / f"kill-{kill_at}"
        fs = KillAtFS(kill_at)
        store = LogManager([str(data_dir)], fs=fs)
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        for first in (0, 10, 20):
            log.append(_records(first, 10))
            if first < 20:
                log.roll()
        log.flush()
        log.delete_records(10)
        store.checkpoint()
        fs.armed = True
        try:
            log.truncate_to(5)
        except _Killed:
            pass
        fs.crash(random.Random(0), lose_unsynced=False)
        with LogManager([str(data_dir)]) as store:
            log = store.get_log("t", 0)
            offsets = _offsets(log)
            assert (log.log_start_offset, log.log_end_offset) in ((5, 5), (10, 20), (10, 30)), (
                kill_at, log.log_start_offset, log.log_end_offset)
            assert offsets == list(range(log.log_start_offset, log.log_end_offset)), (kill_at, offsets)
            if not fs.killed:
                assert (log.log_start_offset, log.log_end_offset) == (5, 5)
                break
        kill_at += 1
        assert kill_at < 100, "truncate_to never completed"
