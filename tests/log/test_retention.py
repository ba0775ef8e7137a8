"""Retention (docs/design.md §8.2; ``logstore.log.retention``, ``Log.delete_old_segments``,
``LogManager.cleanup_logs``) on a manual clock and a manually driven scheduler.

Invariants checked:

- Size (``retention.bytes``): the oldest segments go first while what remains stays >= the limit, so the
  remaining size is never below it and above it by less than the oldest kept segment; a log smaller
  than the limit loses nothing. What remains is a suffix of the old segments (never a gap), the log
  start offset is the first segment's base, reads below it raise ``OffsetOutOfRangeError`` and reads
  from it return exactly the records appended there.
- Time (``retention.ms``, explicit record timestamps): a segment goes only when ``now - its largest
  timestamp > retention.ms`` (checked at the boundary, also after a reopen); a segment holding a newer
  record stops the walk even when later segments are expired (timestamps out of order across segments).
- Log start offset: ``delete_records`` removes the segments wholly below the new start and keeps the
  one holding it; a log start offset that moved past whole segments (checkpointed, segments still on
  disk) makes retention remove exactly those, by the log-start-offset rule.
- The active segment: when expired and non-empty the log rolls first; the log end offset is unchanged,
  appends continue at the same offsets; an empty active segment is never deleted; retention never
  moves the log start offset past the log end.
- ``cleanup.policy=compact``: only the log-start-offset rule applies; ``compact,delete``: size and time
  too, in the order log start, size, time.
- A dry run changes no file and no offset and reports exactly the segments the real run then deletes
  (also from a read-only store).
- ``.deleted`` files: a store with started jobs renames deleted segments ``*.deleted`` and keeps them
  until ``file.delete.delay.ms`` has passed on the scheduler (an iterator created before retention
  still reads them); shutdown removes pending ones; ``.deleted`` files left by a crash (by hand, and
  by an abandoned process) are removed by the next open, and the remaining data is intact.
- The retention job runs first at ``log.initial.task.delay.ms`` and then every
  ``log.retention.check.interval.ms``: deletions happen exactly then, never a millisecond before.
- Property (hypothesis): ``plan_retention`` on random segment sizes, timestamps (some without, falling
  back to the file mtime), settings and log start offsets equals an independent model written from the
  rules of Kafka's ``deleteOldSegments`` (separate passes in Kafka's order, each stopping at the first segment that
  stays, the empty active segment never deleted); the result is a prefix with next offsets that never
  pass the log end.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from dataclasses import dataclass

import pytest
from hypothesis import given, settings, strategies as st

from crash_helpers import file_snapshot, read_all
from logstore import LogManager, ManualClock, OffsetOutOfRangeError, Record, Scheduler
from logstore.log.checkpoint import LOG_START_OFFSET_CHECKPOINT
from logstore.log.retention import (LOG_START_OFFSET_BREACH, SIZE_BREACH, TIME_BREACH, RetentionDecision,
                                RetentionResult, describe, plan_retention)
from logstore.testing import SimulatedCrashFileSystem

T0 = 1_700_000_000_000
SEGMENT_BYTES = 300  # three one-record batches per segment (98 bytes each)
NEVER = 10**12  # a job delay that never comes within a test


# --- helpers -----------------------------------------------------------------------------------------

def value_of(i: int) -> bytes:
    return b"v%04d|" % i + hashlib.sha256(b"%d" % i).hexdigest()[:28].encode()


def rec(i: int, ts: int | None = None) -> Record:
    return Record(b"k%d" % (i % 7), value_of(i), (), T0 + i if ts is None else ts)


def expected(i: int, ts: int | None = None) -> Record:
    return rec(i, ts)._replace(offset=i)


def open_store(dirs, clock: ManualClock | None = None, *, read_only: bool = False, fs=None, **settings_):
    clock = clock or ManualClock(T0)
    config = {"log.initial.task.delay.ms": NEVER, **settings_}
    return LogManager(dirs, config=config, clock=clock, scheduler=Scheduler(clock, threaded=False),
                      read_only=read_only, fs=fs), clock


def append_each(log, offsets, ts=None) -> None:
    """One batch per record, so segment boundaries are predictable."""
    for i in offsets:
        log.append([rec(i, None if ts is None else ts(i))])


def layout(log) -> list[tuple[int, int]]:
    return [(segment.base_offset, segment.size_bytes) for segment in log.segments]


def files(log, suffix: str = ".log") -> list[str]:
    return sorted(name for name in os.listdir(log.dir_path) if name.endswith(suffix))


def live_bases_on_disk(log) -> list[int]:
    return [int(name[:20]) for name in files(log, ".log")]


def deleted_bases_on_disk(log) -> list[int]:
    return sorted({int(name[:20]) for name in files(log, ".deleted")})


def check_readable_suffix(log, first: int, end: int, ts=None) -> None:
    """Reads below the log start offset fail; from it to the end return exactly what was appended."""
    assert log.log_start_offset == first and log.segments[0].base_offset <= first
    if first > 0:
        for below in (0, first - 1):
            with pytest.raises(OffsetOutOfRangeError):
                log.read(below)
    assert read_all(log) == [expected(i, None if ts is None else ts(i)) for i in range(first, end)]
    assert log.log_end_offset == end


# --- size --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("retention_bytes", [0, 1, 293, 294, 295, 1000, 2939, 2940, 2941, 10_000])
def test_size_retention(tmp_path, retention_bytes):
    store, _ = open_store([str(tmp_path / "d")])
    with store:
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.bytes": retention_bytes,
                                    "retention.ms": -1, "file.delete.delay.ms": 0})
        log = store.get_log("t", 0)
        append_each(log, range(29))  # ten segments, the active one holding two records
        before = layout(log)
        total = log.size_bytes
        assert len(before) == 10 and total == sum(size for _, size in before)
        (result,) = store.cleanup_logs("t")
        after = layout(log)
        deleted = [decision.base_offset for decision in result.deleted]
        assert all(decision.reason == SIZE_BREACH for decision in result.deleted)
        # The oldest go first: a prefix of the old segments.
        assert deleted == [base for base, _ in before[:len(deleted)]]
        if total < retention_bytes:
            assert deleted == [] and after == before
        remaining = log.size_bytes
        if len(deleted) < len(before):
            # Never a gap: the rest is the old suffix, unchanged.
            assert after == before[len(deleted):]
            assert remaining >= min(retention_bytes, total)
            if total >= retention_bytes:
                # Above the limit by less than the oldest kept segment (else it would have gone too).
                assert remaining - retention_bytes < after[0][1]
        else:
            # Everything went (retention.bytes 0): a new empty active segment holds the log end.
            assert retention_bytes == 0 and after == [(29, 0)]
        assert log.log_start_offset == log.segments[0].base_offset
        assert result.log_start_offset == log.log_start_offset
        assert live_bases_on_disk(log) == [base for base, _ in after]
        assert result.deleted_bytes == total - remaining
        check_readable_suffix(log, log.log_start_offset, 29)
        # A second pass finds nothing more to do.
        assert store.cleanup_logs("t")[0].deleted == ()


def test_size_retention_keeps_going_as_the_log_grows(tmp_path):
    store, _ = open_store([str(tmp_path / "d")])
    with store:
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.bytes": 1000, "retention.ms": -1})
        log = store.get_log("t", 0)
        for end in range(3, 61, 3):
            append_each(log, range(log.log_end_offset, end))
            store.cleanup_logs()
            sizes = [size for _, size in layout(log)]
            assert sum(sizes) >= 1000 or log.log_start_offset == 0
            assert sum(sizes) - 1000 < sizes[0] or log.log_start_offset == 0
            assert log.log_start_offset == log.segments[0].base_offset
            check_readable_suffix(log, log.log_start_offset, end)


# --- time --------------------------------------------------------------------------------------------

# Record timestamps, by offset (one record per batch, three per segment; the active segment holds
# 12..13). Segment 3..5 holds a newer record in the middle; the segments after it are old again.
NEWER = T0 + 50_000
ACTIVE_TS = T0 + 100_000


def out_of_order_ts(i: int) -> int:
    if i == 4:
        return NEWER
    if i >= 12:
        return ACTIVE_TS + i
    return T0 + i


def test_time_retention_walk_stops_at_a_newer_segment(tmp_path):
    dirs = [str(tmp_path / "d")]
    store, clock = open_store(dirs)
    retention_ms = 10_000
    with store:
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.ms": retention_ms,
                                    "file.delete.delay.ms": 0})
        log = store.get_log("t", 0)
        append_each(log, range(14), out_of_order_ts)
        assert [base for base, _ in layout(log)] == [0, 3, 6, 9, 12]
        assert [segment.max_timestamp_so_far.timestamp_ms for segment in log.segments] == \
            [T0 + 2, NEWER, T0 + 8, T0 + 11, ACTIVE_TS + 13]

        # Segment 0's newest record is T0 + 2: it goes once now - (T0 + 2) > retention.ms, not before.
        clock.advance(2 + retention_ms)
        assert store.cleanup_logs()[0].deleted == ()
        clock.advance(1)
        (result,) = store.cleanup_logs()
        # Segments 6 and 9 are expired too, but segment 3 (holding NEWER) stops the walk.
        assert [(d.base_offset, d.reason) for d in result.deleted] == [(0, TIME_BREACH)]
        assert result.deleted[0].largest_timestamp_ms == T0 + 2
        assert [base for base, _ in layout(log)] == [3, 6, 9, 12]
        check_readable_suffix(log, 3, 14, out_of_order_ts)

    # The largest timestamps survive a reopen (time index), so the boundary is the same afterwards.
    store, clock = open_store(dirs, clock)
    with store:
        log = store.get_log("t", 0)
        clock.advance(NEWER + retention_ms - clock.time_ms())
        assert store.cleanup_logs(now_ms=clock.time_ms())[0].deleted == ()
        assert [base for base, _ in layout(log)] == [3, 6, 9, 12]
        clock.advance(1)
        (result,) = store.cleanup_logs()
        assert [(d.base_offset, d.reason) for d in result.deleted] == [(3, TIME_BREACH), (6, TIME_BREACH),
                                                                       (9, TIME_BREACH)]
        assert layout(log)[0][0] == 12 and log.log_start_offset == 12
        check_readable_suffix(log, 12, 14, out_of_order_ts)


def test_time_retention_uses_now_ms_and_the_clock(tmp_path):
    store, clock = open_store([str(tmp_path / "d")])
    with store:
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.ms": 0})
        log = store.get_log("t", 0)
        append_each(log, range(6), lambda i: T0 + 1000)
        # retention.ms = 0: expired as soon as now is past the newest timestamp.
        assert store.cleanup_logs(dry_run=True, now_ms=T0 + 1000)[0].deleted == ()
        assert len(store.cleanup_logs(dry_run=True, now_ms=T0 + 1001)[0].deleted) == 2
        assert store.cleanup_logs()[0].deleted == ()  # the clock is still at T0
        clock.advance(1001)
        assert [d.base_offset for d in store.cleanup_logs()[0].deleted] == [0, 3]


# --- the log start offset ----------------------------------------------------------------------------

def test_delete_records_then_retention_keeps_the_segment_holding_the_start(tmp_path):
    store, clock = open_store([str(tmp_path / "d")])
    with store:
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.ms": -1})
        log = store.get_log("t", 0)
        append_each(log, range(30))
        assert log.delete_records(16) == 16
        # Segments wholly below 16 are gone; segment 15 (holding 16) stays, 15 is unreadable.
        assert [base for base, _ in layout(log)] == [15, 18, 21, 24, 27]
        assert store.cleanup_logs()[0].deleted == ()
        assert [base for base, _ in layout(log)] == [15, 18, 21, 24, 27]
        check_readable_suffix(log, 16, 30)
        # At a segment boundary the segment starting there is the one holding it.
        assert log.delete_records(21) == 21
        store.cleanup_logs()
        assert [base for base, _ in layout(log)] == [21, 24, 27]
        check_readable_suffix(log, 21, 30)


def _reopen_with_log_start_offset(dirs, clock, offset: int, **config):
    """A log start offset that moved past whole segments whose files are still there (Kafka's lazy
    deletion; here: a crash between persisting the start offset and removing the segments)."""
    with open(os.path.join(dirs[0], LOG_START_OFFSET_CHECKPOINT), "w") as handle:
        handle.write(f"0\n1\nt 0 {offset}\n")
    return open_store(dirs, clock, **config)


@pytest.mark.parametrize("policy", ["delete", "compact", "compact,delete"])
def test_log_start_offset_breach_and_cleanup_policies(tmp_path, policy):
    dirs = [str(tmp_path / "d")]
    store, clock = open_store(dirs)
    with store:
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "cleanup.policy": policy,
                                    "retention.ms": -1, "retention.bytes": -1, "file.delete.delay.ms": 0})
        append_each(store.get_log("t", 0), range(30))
    store, clock = _reopen_with_log_start_offset(dirs, clock, 16)
    with store:
        log = store.get_log("t", 0)
        assert log.log_start_offset == 16 and layout(log)[0][0] == 0
        # Size and time would delete (almost) everything, if they applied.
        store.alter_topic_config("t", {"retention.bytes": 600, "retention.ms": 100})
        clock.advance(10_000)
        dry = store.cleanup_logs(dry_run=True)[0]
        (result,) = store.cleanup_logs()
        assert result.deleted == dry.deleted
        reasons = [(d.base_offset, d.reason) for d in result.deleted]
        by_start = [(base, LOG_START_OFFSET_BREACH) for base in (0, 3, 6, 9, 12)]
        if policy == "compact":
            # Only the log start offset rule: the segment holding 16 stays, and everything after it.
            assert reasons == by_start
            assert [base for base, _ in layout(log)] == [15, 18, 21, 24, 27]
            check_readable_suffix(log, 16, 30)
        else:
            # The log start offset first, then size (1470 bytes left, 600 kept: two of the five
            # 294-byte segments go, 882 bytes stay), then
            # time takes the rest: every record is older than 100 ms, so the active segment goes
            # too (after a roll), and the log ends empty at its old end.
            assert reasons[:5] == by_start
            assert [reason for _, reason in reasons[5:]] == [SIZE_BREACH] * 2 + [TIME_BREACH] * 3
            assert [base for base, _ in reasons] == [0, 3, 6, 9, 12, 15, 18, 21, 24, 27]
            assert layout(log) == [(30, 0)] and log.log_start_offset == log.log_end_offset == 30
        assert live_bases_on_disk(log) == [base for base, _ in layout(log)]


# --- the active segment ------------------------------------------------------------------------------

def test_expired_active_segment_rolls_first_and_appends_continue(tmp_path):
    dirs = [str(tmp_path / "d")]
    store, clock = open_store(dirs)
    with store:
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.ms": 1000, "file.delete.delay.ms": 0})
        log = store.get_log("t", 0)
        append_each(log, range(5))
        assert [base for base, _ in layout(log)] == [0, 3]
        clock.advance(1005)  # past every record's timestamp + retention.ms
        (result,) = store.cleanup_logs()
        assert [d.base_offset for d in result.deleted] == [0, 3]
        assert result.deleted[-1].next_offset == 5 == log.log_end_offset  # never past the log end
        # A new empty active segment at the unchanged log end offset.
        assert layout(log) == [(5, 0)]
        assert log.log_start_offset == log.log_end_offset == 5
        assert live_bases_on_disk(log) == [5]
        assert log.read(5) == []
        with pytest.raises(OffsetOutOfRangeError):
            log.read(4)
        # The empty active segment is never deleted, however far time moves.
        clock.advance(10**9)
        assert store.cleanup_logs()[0].deleted == ()
        assert layout(log) == [(5, 0)]
        # Appends continue at the same offsets.
        info = log.append([rec(5, clock.time_ms())])
        assert (info.first_offset, info.last_offset) == (5, 5)
        assert read_all(log) == [expected(5, clock.time_ms())]
        assert store.cleanup_logs()[0].deleted == ()  # not expired yet
    store, clock = open_store(dirs, clock)
    with store:
        log = store.get_log("t", 0)
        assert (log.log_start_offset, log.log_end_offset) == (5, 6)
        assert read_all(log) == [expected(5, clock.time_ms())]


def test_size_zero_deletes_a_full_log_but_never_the_empty_active_segment(tmp_path):
    store, _ = open_store([str(tmp_path / "d")])
    with store:
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.bytes": 0, "retention.ms": -1})
        log = store.get_log("t", 0)
        # An empty log: the lone (empty, active) segment stays.
        assert store.cleanup_logs()[0].deleted == ()
        assert layout(log) == [(0, 0)]
        append_each(log, range(7))
        (result,) = store.cleanup_logs()
        assert [d.base_offset for d in result.deleted] == [0, 3, 6]
        assert layout(log) == [(7, 0)] and log.log_end_offset == 7 == log.log_start_offset
        append_each(log, range(7, 9))
        assert read_all(log) == [expected(7), expected(8)]


def test_delete_records_to_the_end_then_time_retention(tmp_path):
    store, clock = open_store([str(tmp_path / "d")])
    with store:
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.ms": 50})
        log = store.get_log("t", 0)
        append_each(log, range(8))
        log.delete_records(8)
        # The active segment (6..7) is not removed by the log start offset rule (it is the last).
        assert [base for base, _ in layout(log)] == [6]
        assert store.cleanup_logs()[0].deleted == ()
        clock.advance(100)
        (result,) = store.cleanup_logs()
        assert [(d.base_offset, d.reason) for d in result.deleted] == [(6, TIME_BREACH)]
        assert layout(log) == [(8, 0)] and log.log_start_offset == log.log_end_offset == 8


# --- dry run -----------------------------------------------------------------------------------------

def test_dry_run_changes_nothing_and_matches_the_real_run(tmp_path):
    dirs = [str(tmp_path / "d")]
    store, clock = open_store(dirs, **{"log.initial.task.delay.ms": 0})
    with store:
        store.create_topic("a", 2, {"segment.bytes": SEGMENT_BYTES, "retention.bytes": 700, "retention.ms": -1})
        store.create_topic("b", 1, {"segment.bytes": SEGMENT_BYTES, "retention.ms": 20})
        store.create_topic("c", 1, {"segment.bytes": SEGMENT_BYTES})  # nothing to delete
        for p in range(2):
            append_each(store.get_log("a", p), range(20))
        append_each(store.get_log("b", 0), range(10), lambda i: T0 + 3 * i)
        append_each(store.get_log("c", 0), range(10))
        store.get_log("b", 0).delete_records(1)
        now = T0 + 15 + 20 + 1  # b's segments 0 and 3 (newest T0 + 15) are expired, 6 (T0 + 24) is not
        clock.advance(now - T0 + 5)
        before = file_snapshot(dirs[0])
        state = [(log.name, log.log_start_offset, log.log_end_offset, layout(log)) for log in store.logs()]

        # A read-only view plans the same (it changes nothing either).
        with LogManager(dirs, read_only=True, clock=clock) as viewer:
            viewed = viewer.cleanup_logs(dry_run=True, now_ms=now)
        dry = store.cleanup_logs(dry_run=True, now_ms=now)
        assert file_snapshot(dirs[0]) == before
        assert [(log.name, log.log_start_offset, log.log_end_offset, layout(log)) for log in store.logs()] == state
        assert all(result.dry_run for result in dry)
        assert [(r.log, r.deleted) for r in viewed] == [(r.log, r.deleted) for r in dry]
        assert [r.log_start_offset for r in dry] == [s[1] for s in state]
        by_log = {r.log: r for r in dry}
        assert by_log["c-0"].deleted == ()
        assert [d.base_offset for d in by_log["b-0"].deleted] == [0, 3]
        assert {d.reason for d in by_log["a-0"].deleted} == {SIZE_BREACH}
        assert all(line.startswith(f"{r.log}: would delete segment") for r in dry for line in describe(r))

        real = store.cleanup_logs(now_ms=now)
        assert [(r.log, r.deleted) for r in real] == [(r.log, r.deleted) for r in dry]
        assert not any(r.dry_run for r in real)
        for r in real:
            topic, partition = r.log.rsplit("-", 1)
            log = store.get_log(topic, int(partition))
            assert r.log_start_offset == log.log_start_offset
            if r.deleted:
                assert log.segments[0].base_offset == r.deleted[-1].next_offset
            assert all(line.startswith(f"{r.log}: deleted segment") for line in describe(r))
        assert sum(r.deleted_records for r in real) == sum(d.next_offset - d.base_offset
                                                           for r in real for d in r.deleted)


# --- .deleted files and delayed deletion ---------------------------------------------------------

def test_deleted_files_wait_for_file_delete_delay_and_readers_finish(tmp_path):
    dirs = [str(tmp_path / "d")]
    store, clock = open_store(dirs)
    delay = 5000
    with store:
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.bytes": 600, "retention.ms": -1,
                                    "file.delete.delay.ms": delay})
        log = store.get_log("t", 0)
        append_each(log, range(30))
        iterator = log.iter_records()  # a reader's snapshot of the segments, taken before retention
        started = log.iter_records()
        first = next(started)
        (result,) = store.cleanup_logs()
        doomed = [d.base_offset for d in result.deleted]
        assert doomed == [0, 3, 6, 9, 12, 15, 18]
        # Renamed, still there (all three files of each segment).
        assert deleted_bases_on_disk(log) == doomed
        assert len(files(log, ".deleted")) == 3 * len(doomed)
        assert live_bases_on_disk(log) == [21, 24, 27]
        assert "delete-segment-files" in [task.name for task in store.scheduler.tasks()]
        # The readers that took their snapshot before still read every record.
        assert list(iterator) == [expected(i) for i in range(30)]
        assert [first, *started] == [expected(i) for i in range(30)]
        store.scheduler.advance(delay - 1)
        assert deleted_bases_on_disk(log) == doomed
        store.scheduler.advance(1)
        assert deleted_bases_on_disk(log) == []
        assert live_bases_on_disk(log) == [21, 24, 27]
        check_readable_suffix(log, 21, 30)


def test_pending_deleted_files_are_removed_at_shutdown(tmp_path):
    dirs = [str(tmp_path / "d")]
    store, clock = open_store(dirs)
    store.startup()
    store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.bytes": 294, "retention.ms": -1,
                                "file.delete.delay.ms": 60_000})
    log = store.get_log("t", 0)
    append_each(log, range(12))
    store.cleanup_logs()
    assert deleted_bases_on_disk(log) == [0, 3, 6]
    store.scheduler.advance(59_999)
    assert deleted_bases_on_disk(log) == [0, 3, 6]
    store.close()
    assert deleted_bases_on_disk(log) == []
    assert live_bases_on_disk(log) == [9]
    store, clock = open_store(dirs, clock)
    with store:
        check_readable_suffix(store.get_log("t", 0), 9, 12)


def test_without_started_jobs_deleted_files_go_at_once(tmp_path):
    store, _ = open_store([str(tmp_path / "d")])
    try:
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.bytes": 294, "retention.ms": -1})
        log = store.get_log("t", 0)
        append_each(log, range(12))
        store.cleanup_logs()
        assert deleted_bases_on_disk(log) == [] and live_bases_on_disk(log) == [9]
    finally:
        store.close()


def test_deleted_files_left_by_a_crash_are_removed_at_open(tmp_path):
    dirs = [str(tmp_path / "d")]
    store, clock = open_store(dirs)
    with store:
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.ms": -1})
        log = store.get_log("t", 0)
        append_each(log, range(12))
        log.delete_records(6)
        assert live_bases_on_disk(log) == [6, 9]
        part = log.dir_path
    # By hand: leftovers of the removed segments 0 and 3, and a .deleted twin of the live segment 9.
    for name in ("00000000000000000000.log", "00000000000000000003.index", "00000000000000000003.timeindex"):
        with open(os.path.join(part, name + ".deleted"), "wb") as handle:
            handle.write(os.urandom(100))
    twin = os.path.join(part, "00000000000000000009.log")
    shutil.copyfile(twin, twin + ".deleted")
    store, clock = open_store(dirs, clock)
    with store:
        log = store.get_log("t", 0)
        assert files(log, ".deleted") == []
        assert live_bases_on_disk(log) == [6, 9]
        check_readable_suffix(log, 6, 12)


def test_deleted_files_of_an_abandoned_process_are_removed_at_open(tmp_path):
    dirs = [str(tmp_path / "d")]
    fs = SimulatedCrashFileSystem()
    store, clock = open_store(dirs, fs=fs)
    store.startup()
    store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.bytes": 600, "retention.ms": -1})
    log = store.get_log("t", 0)
    append_each(log, range(15))
    log.flush()
    store.cleanup_logs()
    part = log.dir_path
    assert deleted_bases_on_disk(log) == [0, 3]  # 1470 bytes, 600 kept: 882 stay
    fs.crash(random.Random(7), lose_unsynced=False)  # the process dies before the delayed removal
    store.cleaner.shutdown()  # and its threads with it (they would outlive this test otherwise)
    store, clock = open_store(dirs, clock)
    with store:
        log = store.get_log("t", 0)
        assert not [name for name in os.listdir(part) if name.endswith(".deleted")]
        assert live_bases_on_disk(log) == [6, 9, 12]
        check_readable_suffix(log, 6, 15)


# --- the scheduled job -------------------------------------------------------------------------------

def test_retention_job_runs_at_the_initial_delay_then_every_interval(tmp_path):
    initial, interval = 1000, 5000
    store, clock = open_store([str(tmp_path / "d")], **{"log.initial.task.delay.ms": initial,
                                                       "log.retention.check.interval.ms": interval})
    with store:
        (task,) = [task for task in store.scheduler.tasks() if task.name == "log-retention"]
        assert (task.next_run_ms, task.period_ms) == (T0 + initial, interval)
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.ms": 100, "file.delete.delay.ms": 0})
        log = store.get_log("t", 0)
        append_each(log, range(7), lambda i: T0)  # expired from T0 + 101 on
        store.scheduler.advance(initial - 1)
        assert log.log_start_offset == 0 and len(log.segments) == 3
        store.scheduler.advance(1)  # the first run, at T0 + initial
        assert task.runs == 1
        assert layout(log) == [(7, 0)] and log.log_start_offset == 7
        # New records, expired long before the next run.
        append_each(log, range(7, 11), lambda i: clock.time_ms())
        store.scheduler.advance(interval - 1)
        assert task.runs == 1 and log.log_start_offset == 7 and [b for b, _ in layout(log)] == [7, 10]
        store.scheduler.advance(1)  # the second run, at T0 + initial + interval
        assert task.runs == 2 and layout(log) == [(11, 0)] and log.log_start_offset == 11
        # Nothing to do: the job keeps its schedule (fixed rate).
        store.scheduler.advance(3 * interval)
        assert task.runs == 5 and task.next_run_ms == T0 + initial + 5 * interval
        assert task.failures == 0


def test_retention_job_deletes_after_the_first_run_only_what_is_expired_then(tmp_path):
    initial, interval = 0, 1000
    store, clock = open_store([str(tmp_path / "d")], **{"log.initial.task.delay.ms": initial,
                                                       "log.retention.check.interval.ms": interval})
    with store:
        store.create_topic("t", 1, {"segment.bytes": SEGMENT_BYTES, "retention.ms": 2500, "file.delete.delay.ms": 0})
        log = store.get_log("t", 0)
        append_each(log, range(4), lambda i: T0 + 100 * (i // 3))  # segment 0: T0; active 3: T0 + 100
        # Segment 0 expires after T0 + 2500, i.e. at the run at T0 + 3000; the active at T0 + 3000 too.
        store.scheduler.advance(2999)
        assert [b for b, _ in layout(log)] == [0, 3]
        store.scheduler.advance(1)
        assert layout(log) == [(4, 0)]


# --- the model: plan_retention against Kafka's rules -------------------------------------------------

@dataclass
class FakeTimestamp:
    timestamp_ms: int


@dataclass
class FakeSegment:
    base_offset: int
    size_bytes: int
    max_timestamp_so_far: FakeTimestamp
    log_path: str


def model_retention(segments, log_end_offset, log_start_offset, delete_policy, retention_bytes, retention_ms,
                    now_ms, mtimes):
    """Kafka's deleteOldSegments from its rules: separate passes (log start offset; then, for a
    policy with delete, size and time), each over what the previous one left, each walking from the
    oldest and stopping at the first segment that is not deletable. Returns (base, reason) pairs."""
    remaining = list(segments)
    deleted = []

    def deletable_segments(predicate):
        chosen = []
        for index, segment in enumerate(remaining):
            following = remaining[index + 1] if index + 1 < len(remaining) else None
            upper_bound = following.base_offset if following is not None else log_end_offset
            assert upper_bound <= log_end_offset  # HW == LEO here: always satisfied
            if following is None and segment.size_bytes == 0:
                break
            if not predicate(segment, following):
                break
            chosen.append(segment)
        return chosen

    def run(reason, predicate):
        nonlocal remaining
        chosen = deletable_segments(predicate)
        deleted.extend((segment.base_offset, reason) for segment in chosen)
        remaining = remaining[len(chosen):]

    run(LOG_START_OFFSET_BREACH, lambda s, n: n is not None and n.base_offset <= log_start_offset)
    if not delete_policy:
        return deleted
    size = sum(segment.size_bytes for segment in remaining)
    if retention_bytes >= 0 and size >= retention_bytes:
        diff = size - retention_bytes

        def size_predicate(segment, _next):
            nonlocal diff
            if diff - segment.size_bytes >= 0:
                diff -= segment.size_bytes
                return True
            return False

        run(SIZE_BREACH, size_predicate)
    if retention_ms >= 0:
        def largest(segment):
            ts = segment.max_timestamp_so_far.timestamp_ms
            return ts if ts >= 0 else mtimes[segment.log_path]

        run(TIME_BREACH, lambda s, n: now_ms - largest(s) > retention_ms)
    return deleted


@st.composite
def retention_cases(draw):
    count = draw(st.integers(1, 8))
    base = draw(st.integers(0, 50))
    segments, mtimes = [], {}
    for index in range(count):
        last = index == count - 1
        size = draw(st.integers(0 if last else 1, 400))
        records = draw(st.integers(1, 20)) if size else 0
        ts = draw(st.one_of(st.just(-1), st.integers(0, 10_000)))
        path = f"/seg/{base:020d}.log"
        mtimes[path] = draw(st.integers(0, 10_000))
        segments.append(FakeSegment(base, size, FakeTimestamp(ts if size else -1), path))
        base += records if not last else 0
        if last:
            log_end_offset = base + records
    log_start_offset = draw(st.integers(segments[0].base_offset, log_end_offset))
    total = sum(segment.size_bytes for segment in segments)
    retention_bytes = draw(st.one_of(st.just(-1), st.integers(0, total + 50), st.sampled_from([0, total])))
    retention_ms = draw(st.one_of(st.just(-1), st.integers(0, 10_000)))
    now_ms = draw(st.integers(0, 20_000))
    delete_policy = draw(st.booleans())
    return segments, mtimes, log_end_offset, log_start_offset, delete_policy, retention_bytes, retention_ms, now_ms


@settings(max_examples=400)
@given(retention_cases())
def test_plan_retention_matches_the_model(case):
    segments, mtimes, leo, lso, delete_policy, retention_bytes, retention_ms, now_ms = case
    decisions = plan_retention(segments, log_end_offset=leo, log_start_offset=lso, delete_policy=delete_policy,
                               retention_bytes=retention_bytes, retention_ms=retention_ms, now_ms=now_ms,
                               mtime_ms=mtimes.__getitem__)
    assert all(isinstance(d, RetentionDecision) for d in decisions)
    # A prefix of the segments, oldest first, with the right bounds and sizes.
    assert [d.base_offset for d in decisions] == [s.base_offset for s in segments[:len(decisions)]]
    bounds = [s.base_offset for s in segments[1:]] + [leo]
    assert [(d.next_offset, d.size_bytes) for d in decisions] == \
        [(bounds[i], segments[i].size_bytes) for i in range(len(decisions))]
    assert all(d.next_offset <= leo for d in decisions)
    # Never the empty active segment.
    if segments[-1].size_bytes == 0:
        assert len(decisions) < len(segments)
    # The rules in order.
    order = {LOG_START_OFFSET_BREACH: 0, SIZE_BREACH: 1, TIME_BREACH: 2}
    ranks = [order[d.reason] for d in decisions]
    assert ranks == sorted(ranks)
    if not delete_policy:
        assert set(ranks) <= {0}
    assert [(d.base_offset, d.reason) for d in decisions] == model_retention(
        segments, leo, lso, delete_policy, retention_bytes, retention_ms, now_ms, mtimes)
    # What remains after a size deletion is never below retention.bytes.
    if SIZE_BREACH in [d.reason for d in decisions]:
        after_size = [d for d in decisions if d.reason != TIME_BREACH]
        assert sum(s.size_bytes for s in segments[len(after_size):]) >= retention_bytes
    result = RetentionResult("t-0", tuple(decisions), lso, True)
    assert result.deleted_records == (decisions[-1].next_offset - decisions[0].base_offset if decisions else 0)
    assert len(describe(result)) == len(decisions)
