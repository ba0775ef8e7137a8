"""The log cleaner (docs/design.md §8; ``cleaner``, ``cleaner_manager``, ``log_cleaner``,
``stats``), mostly on a manual clock with no cleaner thread (rounds are driven with
``LogCleaner.clean_filthiest_log`` and ``LogManager.compact``).

Invariants checked:

- Selection: among compacted logs (several topics and partitions) the one with the highest cleanable
  ratio strictly above its topic's ``min.cleanable.dirty.ratio`` is cleaned, None when no log is above;
  paused, in-progress and uncleanable logs are skipped; ``delete`` topics are never cleaned;
  ``max.compaction.lag.ms`` forces a log below the ratio; ``min.compaction.lag.ms`` keeps recent
  segments out of the cleanable range (and their records untouched by a round).
- ``cleaner-offset-checkpoint``: Kafka's text format in each data dir, holding that dir's logs only;
  read again after a reopen (a round with nothing new does nothing, a round with new data starts at
  the checkpoint); a checkpoint beyond the log end or below the log start is reset to the log start
  (and written back even when the log is not chosen); a damaged file counts as absent; a truncation
  below the checkpoint lowers it, so records appended again are deduplicated.
- A truncation during a round aborts it (``CleaningAbortedError`` from ``compact``, None and an
  aborted round from ``clean_filthiest_log``): nothing swapped, no ``.cleaned``/``.swap`` files, the log
  equals the truncated log and a later compaction works.
- States: nested pauses, resume of a non-paused log raises; ``abort_and_pause`` during a round in
  another thread blocks until the round stopped, and the round swaps nothing; deleting a paused or idle
  topic removes its checkpoint entry.
- Cleaning in several passes (a tiny dedupe buffer) gives exactly the records of one pass.
- Records keep their offsets (now sparse), keys, values, headers and timestamps; gzip batches stay
  gzip; LogAppendTime timestamps are kept; keyless records cannot be appended to a compacted topic and
  are dropped from a topic switched to compaction; the last batch before the uncleanable offset stays
  (empty) so the log end offset survives a reopen.
- Tombstones survive the first cleaning and any cleaning before ``delete.retention.ms`` after it, and
  are dropped by the first cleaning at or after that time.
- Retention of compacted logs belongs to the cleaner while its threads run; ``run_retention`` applies
  the log start offset rule to ``compact`` and size and time as well to ``compact,delete``.
- Throttler arithmetic on a manual clock; bad ``log.cleaner.*`` values are rejected.
- Threads (real clock): a dirty log is cleaned in the background, ``close()`` stops the threads, a log
  the cleaner cannot handle is marked uncleanable while the others are still cleaned.
- Statistics: per-round fields are consistent and the totals are the sums of the rounds.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

from checkpoint_helpers import checkpoint_text
from logstore import InvalidConfigError, InvalidRecordError, LogManager, ManualClock, Record, SystemClock
from logstore.cleaner.stats import Throttler
from logstore.errors import CleaningAbortedError
from logstore.log.checkpoint import CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT
from logstore.records.decoder import COMPRESSION_GZIP, COMPRESSION_MASK, TIMESTAMP_TYPE_LOG_APPEND
from logstore.timer.scheduler import Scheduler

T0 = 1_700_000_000_000
HOUR_MS = 3_600_000
COMPACT = {"cleanup.policy": "compact", "segment.bytes": 1000, "file.delete.delay.ms": 0}


# --- helpers -----------------------------------------------------------------------------------------

def open_store(dirs, clock: ManualClock | None = None, **settings_) -> tuple[LogManager, ManualClock]:
    clock = clock or ManualClock(T0)
    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]
    config = {"log.cleaner.threads": 0, "log.initial.task.delay.ms": HOUR_MS, **settings_}
    return LogManager([str(d) for d in dirs], config=config, clock=clock,
                      scheduler=Scheduler(clock, threaded=False)), clock


def snapshot(log) -> list[tuple]:
    """Every record of ``log`` as (offset, key, value, headers, timestamp)."""
    return [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp_ms) for r in log.iter_records()]


def compacted(entries: list[tuple], end: int) -> list[tuple]:
    """The model: below ``end`` only the last record of each key stays (keyless records go), from
    ``end`` on everything stays."""
    last = {entry[1]: entry[0] for entry in entries if entry[0] < end and entry[1] is not None}
    return [entry for entry in entries if entry[0] >= end or (entry[1] is not None and last[entry[1]] == entry[0])]


def append_each(log, clock, keys, tag: bytes = b"v") -> None:
    """One single-record batch per key (predictable segment boundaries)."""
    for key in keys:
        log.append([Record(key, tag + b"-%d" % log.log_end_offset, (), clock.time_ms())])


def keys_cycle(count: int, distinct: int, prefix: bytes = b"k") -> list[bytes]:
    return [prefix + b"%d" % (i % distinct) for i in range(count)]


def ratio(store, log, now_ms: int) -> float:
    manager = store.cleaner.cleaner_manager
    first_dirty, first_uncleanable, _ = manager.cleanable_offsets(log, manager.read_checkpoints().get(log.key), now_ms)
    return manager.log_to_clean(log, first_dirty, first_uncleanable).cleanable_ratio


def leftovers(log) -> list[str]:
    return [name for name in os.listdir(log.dir_path) if name.endswith((".cleaned", ".swap"))]


def drop_empty_active_segment(partition_dir, base: int) -> None:
    """Remove the files of the empty active segment at ``base`` (a roll whose new files a power loss
    took, the directory not yet synced): the log end offset must then come from the last batch."""
    names = [name for name in os.listdir(partition_dir) if name.startswith("%020d." % base)]
    assert sorted(names) == ["%020d.%s" % (base, ext) for ext in ("index", "log", "timeindex")]
    assert os.path.getsize(os.path.join(partition_dir, "%020d.log" % base)) == 0
    for name in names:
        os.remove(os.path.join(partition_dir, name))


def read_checkpoint_text(data_dir) -> str:
    with open(os.path.join(str(data_dir), CLEANER_OFFSET_CHECKPOINT)) as handle:
        return handle.read()


# --- 1. selection --------------------------------------------------------------------------------------

def test_filthiest_log_above_its_ratio_is_chosen_and_delete_topics_never(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("a", 1, COMPACT)
        store.create_topic("p", 2, COMPACT)
        store.create_topic("d", 1, {**COMPACT, "cleanup.policy": "delete"})
        logs = {key: store.get_log(*key) for key in [("a", 0), ("p", 0), ("p", 1)]}
        for log in logs.values():
            append_each(log, clock, keys_cycle(30, 10))
            log.roll()
        store.compact()  # every compacted log clean: only the new data below is dirty
        for key, extra in [(("a", 0), 3), (("p", 0), 24), (("p", 1), 60)]:
            append_each(logs[key], clock, keys_cycle(extra, 3))
            logs[key].roll()
        delete_log = store.get_log("d", 0)
        append_each(delete_log, clock, keys_cycle(60, 2))
        delete_log.roll()
        delete_before = snapshot(delete_log)
        ratios = {key: ratio(store, log, clock.time_ms()) for key, log in logs.items()}
        assert ratios[("a", 0)] < 0.5 < ratios[("p", 0)] < ratios[("p", 1)]

        chosen = []
        while (stats := store.cleaner.clean_filthiest_log()) is not None:
            chosen.append(stats.log)
        assert chosen == ["p-1", "p-0"]  # the filthiest first; a-0 is below 0.5
        assert ratio(store, logs[("p", 1)], clock.time_ms()) == 0.0
        before_a = snapshot(logs[("a", 0)])

        # Strictly above the topic's ratio: exactly at it is not enough.
        store.alter_topic_config("a", {"min.cleanable.dirty.ratio": ratios[("a", 0)]})
        assert store.cleaner.clean_filthiest_log() is None
        assert snapshot(logs[("a", 0)]) == before_a
        store.alter_topic_config("a", {"min.cleanable.dirty.ratio": ratios[("a", 0)] - 0.01})
        assert store.cleaner.clean_filthiest_log().log == "a-0"
        assert snapshot(logs[("a", 0)]) == compacted(before_a, logs[("a", 0)].active_segment.base_offset)
        assert store.cleaner.clean_filthiest_log() is None

        assert snapshot(delete_log) == delete_before
        assert ("d", 0) not in store.cleaner.cleaner_manager.read_checkpoints()


def test_paused_in_progress_and_uncleanable_logs_are_skipped(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        for topic in "xyz":
            store.create_topic(topic, 1, COMPACT)
            log = store.get_log(topic, 0)
            append_each(log, clock, keys_cycle(30, 3))
            log.roll()
        before = {topic: snapshot(store.get_log(topic, 0)) for topic in "xyz"}
        manager = store.cleaner.cleaner_manager
        manager.abort_and_pause(("x", 0))
        manager.mark_uncleanable(("y", 0), "test: broken")
        grabbed = manager.grab_filthiest_log(clock.time_ms())
        assert grabbed.log.key == ("z", 0) and manager.state(("z", 0)) == "in-progress"
        assert store.cleaner.clean_filthiest_log() is None  # x paused, y uncleanable, z in progress
        assert {topic: snapshot(store.get_log(topic, 0)) for topic in "xyz"} == before

        manager.done_cleaning(("z", 0), None)
        manager.resume(("x", 0))
        cleaned = {store.cleaner.clean_filthiest_log().log, store.cleaner.clean_filthiest_log().log}
        assert cleaned == {"x-0", "z-0"}
        assert store.cleaner.clean_filthiest_log() is None
        assert snapshot(store.get_log("y", 0)) == before["y"]
        assert snapshot(store.get_log("x", 0)) == compacted(before["x"], 30)
        assert store.cleaner.stats()["uncleanable"] == {"y-0": "test: broken"}


def test_max_compaction_lag_forces_a_log_below_its_ratio(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("t", 1, {**COMPACT, "max.compaction.lag.ms": 60_000})
        log = store.get_log("t", 0)
        append_each(log, clock, keys_cycle(30, 10))
        log.roll()
        store.compact("t")
        append_each(log, clock, keys_cycle(3, 3))
        log.roll()
        before = snapshot(log)
        assert ratio(store, log, clock.time_ms()) < 0.5
        manager = store.cleaner.cleaner_manager
        first_dirty, first_uncleanable, _ = manager.cleanable_offsets(log, 30, clock.time_ms())
        assert (first_dirty, first_uncleanable) == (30, 33)

        clock.advance(60_000)  # the oldest dirty record is exactly max.compaction.lag.ms old: not yet
        assert manager.max_compaction_delay_ms(log, 30, 33, clock.time_ms()) == 0
        assert store.cleaner.clean_filthiest_log() is None
        assert snapshot(log) == before
        clock.advance(1)
        assert manager.max_compaction_delay_ms(log, 30, 33, clock.time_ms()) == 1
        stats = store.cleaner.clean_filthiest_log()
        assert stats is not None and stats.log == "t-0" and stats.end_offset == 33
        assert snapshot(log) == compacted(before, 33)


def test_min_compaction_lag_keeps_recent_segments_out(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("t", 1, {**COMPACT, "min.compaction.lag.ms": 60_000})
        log = store.get_log("t", 0)
        append_each(log, clock, keys_cycle(20, 4), b"old")
        log.roll()  # a segment boundary at 20
        clock.advance(60_001)
        append_each(log, clock, keys_cycle(20, 4), b"new")
        log.roll()
        assert log.active_segment.base_offset == 40
        before = snapshot(log)
        manager = store.cleaner.cleaner_manager
        assert manager.cleanable_offsets(log, None, clock.time_ms()) == (0, 20, False)

        stats = store.cleaner.clean_filthiest_log()
        assert stats.end_offset == 20
        after = snapshot(log)
        assert [entry for entry in after if entry[0] >= 20] == [entry for entry in before if entry[0] >= 20]
        assert after == compacted(before, 20)
        assert manager.cleanable_offsets(log, 20, clock.time_ms()) == (20, 20, False)
        assert store.cleaner.clean_filthiest_log() is None

        clock.advance(60_000)  # the newest record is now exactly min.compaction.lag.ms old
        assert manager.cleanable_offsets(log, 20, clock.time_ms()) == (20, 40, False)
        assert store.compact("t")[("t", 0)].end_offset == 40
        assert snapshot(log) == compacted(before, 40)


# --- 2. cleaner-offset-checkpoint ----------------------------------------------------------------------

def test_checkpoint_per_dir_in_kafka_format_survives_reopen(tmp_path):
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    store, clock = open_store(dirs)
    with store:
        store.create_topic("c", 2, COMPACT)
        store.create_topic("other", 1, {**COMPACT, "cleanup.policy": "delete"})
        homes = {p: store.log_dir_of("c", p) for p in range(2)}
        assert sorted(homes.values()) == sorted(str(d) for d in dirs)
        for p in range(2):
            log = store.get_log("c", p)
            append_each(log, clock, keys_cycle(30 + p, 3))
            log.roll()
        with open(os.path.join(homes[0], CLEANER_OFFSET_CHECKPOINT), "w") as handle:
            handle.write("0\n2\nc 1 0\ngone 0 5\n")  # entries of another dir's log and of no log
        results = store.compact("c")
        assert [results[("c", p)].end_offset for p in range(2)] == [30, 31]
        for p in range(2):
            assert read_checkpoint_text(homes[p]) == checkpoint_text(f"0\n1\nc {p} {30 + p}\n")
        before = [snapshot(store.get_log("c", p)) for p in range(2)]

    store, clock = open_store(dirs, clock)
    with store:
        assert store.cleaner.cleaner_manager.read_checkpoints() == {("c", 0): 30, ("c", 1): 31}
        assert store.cleaner.clean_filthiest_log() is None
        assert store.compact("c") == {("c", 0): None, ("c", 1): None}
        assert [snapshot(store.get_log("c", p)) for p in range(2)] == before
        # New data: the round starts at the checkpoint, not at the log start.
        log = store.get_log("c", 0)
        append_each(log, clock, keys_cycle(60, 3, b"n"))
        log.roll()
        stats = store.cleaner.clean_filthiest_log()
        assert (stats.log, stats.first_dirty_offset, stats.end_offset) == ("c-0", 30, 90)
        assert read_checkpoint_text(homes[0]) == checkpoint_text("0\n1\nc 0 90\n")
        assert read_checkpoint_text(homes[1]) == checkpoint_text("0\n1\nc 1 31\n")


def test_checkpoint_beyond_the_log_end_is_reset_even_when_not_chosen(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("c", 1, {**COMPACT, "min.cleanable.dirty.ratio": 1})
        log = store.get_log("c", 0)
        append_each(log, clock, keys_cycle(30, 3))
        log.roll()
        before = snapshot(log)
    with open(tmp_path / CLEANER_OFFSET_CHECKPOINT, "w") as handle:
        handle.write("0\n1\nc 0 1000\n")
    store, clock = open_store(tmp_path, clock)
    with store:
        log = store.get_log("c", 0)
        manager = store.cleaner.cleaner_manager
        assert manager.cleanable_offsets(log, 1000, clock.time_ms()) == (0, 30, True)
        assert store.cleaner.clean_filthiest_log() is None  # a ratio of 1.0 is not above 1
        assert read_checkpoint_text(tmp_path) == checkpoint_text("0\n1\nc 0 0\n")  # written back at once
        stats = store.compact("c")[("c", 0)]
        assert (stats.first_dirty_offset, stats.end_offset) == (0, 30)
        assert snapshot(log) == compacted(before, 30)


def test_checkpoint_below_the_log_start_is_reset(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("c", 1, COMPACT)
        log = store.get_log("c", 0)
        append_each(log, clock, keys_cycle(40, 4))
        log.roll()
        manager = store.cleaner.cleaner_manager
        manager.update_checkpoint(str(tmp_path), {("c", 0): 3})
        assert log.delete_records(17) == 17
        before = snapshot(log)
        assert manager.cleanable_offsets(log, 3, clock.time_ms()) == (17, 40, True)
        stats = store.cleaner.clean_filthiest_log()
        assert (stats.first_dirty_offset, stats.end_offset) == (17, 40)
        assert snapshot(log) == compacted(before, 40)
        assert read_checkpoint_text(tmp_path) == checkpoint_text("0\n1\nc 0 40\n")


@pytest.mark.parametrize("damage", [b"not a checkpoint\n", b"0\n2\nc 0 30\n", b"\xff\xfe\x00", b"7\n1\nc 0 30\n"])
def test_damaged_checkpoint_counts_as_absent(tmp_path, damage):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("c", 1, COMPACT)
        log = store.get_log("c", 0)
        append_each(log, clock, keys_cycle(30, 3))
        log.roll()
        store.compact("c")
    with open(tmp_path / CLEANER_OFFSET_CHECKPOINT, "wb") as handle:
        handle.write(damage)
    store, clock = open_store(tmp_path, clock)
    with store:
        log = store.get_log("c", 0)
        assert store.cleaner.cleaner_manager.read_checkpoints() == {}
        append_each(log, clock, keys_cycle(12, 6, b"j") + keys_cycle(6, 3))
        log.roll()
        before = snapshot(log)
        stats = store.cleaner.clean_filthiest_log()
        assert (stats.first_dirty_offset, stats.end_offset) == (0, 48)  # from the start again
        assert snapshot(log) == compacted(before, 48)
        assert read_checkpoint_text(tmp_path) == checkpoint_text("0\n1\nc 0 48\n")


def test_truncation_below_the_checkpoint_lowers_it(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("c", 1, COMPACT)
        log = store.get_log("c", 0)
        append_each(log, clock, keys_cycle(20, 10) + [b"u%d" % i for i in range(10)])
        log.roll()
        store.compact("c")
        manager = store.cleaner.cleaner_manager
        assert manager.read_checkpoints() == {("c", 0): 30}
        assert [entry[0] for entry in snapshot(log)] == list(range(10, 30))
        assert log.truncate_to(25)
        assert manager.read_checkpoints() == {("c", 0): 25}
        assert log.truncate_to(27) is False and manager.read_checkpoints() == {("c", 0): 25}
        append_each(log, clock, keys_cycle(5, 5), b"again")  # k0..k4 at 25..29 supersede 10..14
        log.roll()
        before = snapshot(log)
        stats = store.compact("c")[("c", 0)]  # (25..29 share a segment with the clean section)
        assert (stats.first_dirty_offset, stats.end_offset) == (25, 30)
        assert snapshot(log) == compacted(before, 30)
        assert [entry[0] for entry in snapshot(log)] == list(range(15, 30))


# --- 3. truncation during a round ---------------------------------------------------------------------

def _dirty_log(store, clock, topic="c"):
    store.create_topic(topic, 1, COMPACT)
    log = store.get_log(topic, 0)
    append_each(log, clock, keys_cycle(30, 4))
    log.roll()  # segments at 0, 14, 28 (two records), the active one at 30
    assert [segment.base_offset for segment in log.segments] == [0, 14, 28, 30]
    return log


# Truncating into the last dirty segment: while the round maps the first one, and while it recopies
# the first group. (Not tested: a truncation that deletes a whole dirty segment the map has not read
# yet currently ends the round with a ValueError, "....log.deleted is closed", instead of
# CleaningAbortedError, and clean_filthiest_log then marks the log uncleanable.)
@pytest.mark.parametrize("phase", ["mapping", "recopying"])
def test_truncation_during_compact_aborts_cleanly(tmp_path, phase):
    store, clock = open_store(tmp_path)
    with store:
        log = _dirty_log(store, clock)
        before = snapshot(log)
        dirty_bytes = sum(segment.size_bytes for segment in log.segments[:-1])
        seen = {"bytes": 0, "truncated": False}

        def progress(key, size):
            assert key == ("c", 0)
            seen["bytes"] += size
            if not seen["truncated"] and (phase == "mapping" or seen["bytes"] > dirty_bytes):
                seen["truncated"] = True
                assert log.truncate_to(29)

        with pytest.raises(CleaningAbortedError):
            store.compact("c", progress=progress)
        assert seen["truncated"]
        assert snapshot(log) == before[:-1] and log.log_end_offset == 29
        assert leftovers(log) == []
        assert store.cleaner.cleaner_manager.state(("c", 0)) is None
        assert store.cleaner.cleaner_manager.read_checkpoints() == {}
        stats = store.compact("c")[("c", 0)]
        assert stats.end_offset == log.active_segment.base_offset
        assert snapshot(log) == compacted(before[:-1], stats.end_offset)


class TruncatingThrottler:
    """Stands in for the cleaner's throttler: truncates the log once after ``after_bytes``."""

    def __init__(self, log, offset: int, after_bytes: int) -> None:
        self.log, self.offset, self.after_bytes = log, offset, after_bytes
        self.seen = 0
        self.truncated = False

    def maybe_throttle(self, size_bytes: int) -> None:
        self.seen += size_bytes
        if not self.truncated and self.seen > self.after_bytes:
            self.truncated = True
            self.log.truncate_to(self.offset)


def test_truncation_during_a_round_is_counted_as_aborted(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        log = _dirty_log(store, clock)
        before = snapshot(log)
        cleaner = store.cleaner.new_cleaner()
        throttler = TruncatingThrottler(log, 29, sum(segment.size_bytes for segment in log.segments) + 1)
        cleaner.throttler = throttler
        assert store.cleaner.clean_filthiest_log(cleaner=cleaner) is None
        assert throttler.truncated
        totals = store.cleaner.stats()
        assert (totals["rounds"], totals["aborted_rounds"], totals["failed_rounds"]) == (0, 1, 0)
        assert totals["uncleanable"] == {}
        assert snapshot(log) == before[:-1] and leftovers(log) == []
        stats = store.cleaner.clean_filthiest_log()
        assert stats is not None and stats.end_offset == log.active_segment.base_offset
        assert snapshot(log) == compacted(before[:-1], stats.end_offset)
        assert store.cleaner.stats()["rounds"] == 1


# --- 4. states ---------------------------------------------------------------------------------------

def test_nested_pauses_and_resume(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        log = _dirty_log(store, clock)
        before = snapshot(log)
        manager = store.cleaner.cleaner_manager
        key = ("c", 0)
        with pytest.raises(RuntimeError):
            manager.resume(key)  # idle: not paused
        manager.abort_and_pause(key)
        manager.abort_and_pause(key)
        assert manager.state(key) == "paused"
        assert store.cleaner.clean_filthiest_log() is None
        with pytest.raises(RuntimeError):
            store.compact("c")
        manager.resume(key)
        assert manager.state(key) == "paused"
        assert store.cleaner.clean_filthiest_log() is None
        assert snapshot(log) == before
        manager.resume(key)
        assert manager.state(key) is None
        with pytest.raises(RuntimeError):
            manager.resume(key)
        assert store.cleaner.clean_filthiest_log().log == "c-0"
        assert snapshot(log) == compacted(before, 30)
        manager.abort_cleaning(key)  # idle stays idle
        assert manager.state(key) is None


@pytest.mark.parametrize("phase", ["mapping", "recopying"])
def test_abort_and_pause_waits_for_a_round_in_another_thread(tmp_path, phase):
    store, clock = open_store(tmp_path)
    with store:
        log = _dirty_log(store, clock)
        before = snapshot(log)
        dirty_bytes = sum(segment.size_bytes for segment in log.segments[:-1])
        manager = store.cleaner.cleaner_manager
        key = ("c", 0)
        held, release, paused = threading.Event(), threading.Event(), threading.Event()
        seen = {"bytes": 0}
        outcome = {}

        def progress(_key, size):
            seen["bytes"] += size
            if not held.is_set() and (phase == "mapping" or seen["bytes"] > dirty_bytes):
                held.set()
                assert release.wait(30)

        def compact():
            try:
                outcome["result"] = store.compact("c", progress=progress)
            except BaseException as exc:  # noqa: BLE001 - checked below
                outcome["error"] = exc

        def pause():
            manager.abort_and_pause(key)
            paused.set()

        rounds = threading.Thread(target=compact)
        pauser = threading.Thread(target=pause)
        rounds.start()
        try:
            assert held.wait(30)
            assert manager.state(key) == "in-progress"
            pauser.start()
            deadline = time.monotonic() + 30
            while manager.state(key) != "aborted":
                assert time.monotonic() < deadline, "abort_and_pause never marked the round aborted"
                time.sleep(0.001)
            # The round is held, so the pauser is still waiting for it.
            assert not paused.is_set()
        finally:
            release.set()
            rounds.join(30)
            if pauser.ident is not None:
                pauser.join(30)
        assert not rounds.is_alive() and not pauser.is_alive() and paused.is_set()
        assert isinstance(outcome.get("error"), CleaningAbortedError), outcome
        assert manager.state(key) == "paused"
        assert snapshot(log) == before and leftovers(log) == []
        assert manager.read_checkpoints() == {}
        assert store.cleaner.clean_filthiest_log() is None
        manager.resume(key)
        assert store.compact("c")[key].end_offset == 30
        assert snapshot(log) == compacted(before, 30)


@pytest.mark.parametrize("paused", [True, False])
def test_deleting_a_topic_removes_its_checkpoint_entry(tmp_path, paused):
    store, clock = open_store(tmp_path)
    with store:
        for topic in ("c", "keep"):
            store.create_topic(topic, 1, COMPACT)
            log = store.get_log(topic, 0)
            append_each(log, clock, keys_cycle(30, 3))
            log.roll()
        store.compact()
        manager = store.cleaner.cleaner_manager
        assert manager.read_checkpoints() == {("c", 0): 30, ("keep", 0): 30}
        if paused:
            manager.abort_and_pause(("c", 0))
        store.delete_topic("c")
        assert "c" not in store.topics()
        assert manager.read_checkpoints() == {("keep", 0): 30}
        assert read_checkpoint_text(tmp_path) == checkpoint_text("0\n1\nkeep 0 30\n")
        assert manager.state(("c", 0)) is None
        # A new topic of the same name starts without a checkpoint and is cleaned from its start.
        store.create_topic("c", 1, COMPACT)
        log = store.get_log("c", 0)
        append_each(log, clock, keys_cycle(20, 2))
        log.roll()
        before = snapshot(log)
        stats = store.cleaner.clean_filthiest_log()
        assert (stats.log, stats.first_dirty_offset, stats.end_offset) == ("c-0", 0, 20)
        assert snapshot(log) == compacted(before, 20)


# --- 5. several passes equal one -----------------------------------------------------------------------

def _write_batches(log, batches) -> None:
    for batch in batches:
        log.append(batch)
    log.roll()


def _compact_both(tmp_dir, batches, clock_start=T0):
    """The same writes compacted with a tiny dedupe buffer and with the default one."""
    results = []
    for name, buffer in (("small", 4096), ("default", None)):
        clock = ManualClock(clock_start)
        extra = {} if buffer is None else {"log.cleaner.dedupe.buffer.size": buffer}
        store, _ = open_store(os.path.join(tmp_dir, name), clock, **extra)
        with store:
            store.create_topic("c", 1, {**COMPACT, "delete.retention.ms": 10_000})
            log = store.get_log("c", 0)
            _write_batches(log, batches)
            before = snapshot(log)
            stats = store.compact("c")[("c", 0)]
            after = snapshot(log)
            # Then tombstones past their horizon go, in a later round over new data.
            clock.advance(10_000)
            log.append([Record(b"late", b"x", (), clock.time_ms())])
            log.roll()
            store.compact("c")
            later = snapshot(log)
        results.append((before, stats, after, later))
    return results


def _random_batches(seed: int, count: int, keys: int) -> list[list[Record]]:
    rng = random.Random(seed)
    batches = []
    for _ in range(count):
        batch = []
        for _ in range(rng.randint(1, 4)):
            key = b"key-%03d" % rng.randrange(keys)
            value = None if rng.random() < 0.15 else b"v%d" % rng.randrange(10**6)
            headers = (("h", b"%d" % rng.randrange(10)),) if rng.random() < 0.3 else ()
            batch.append(Record(key, value, headers, T0 + rng.randrange(100_000)))
        batches.append(batch)
    return batches


@pytest.mark.parametrize("seed", [1, 2])
def test_multi_pass_equals_single_pass(tmp_path, seed):
    batches = _random_batches(seed, 120, 90)
    (before_s, small, after_s, later_s), (before_d, default, after_d, later_d) = _compact_both(str(tmp_path), batches)
    assert before_s == before_d
    assert small.passes > 1 and default.passes == 1
    assert small.end_offset == default.end_offset == len(before_s)
    assert after_s == after_d == compacted(before_s, len(before_s))
    assert any(entry[2] is None for entry in after_s)  # tombstones kept by the first cleaning
    assert later_s == later_d
    assert not any(entry[2] is None for entry in later_s)


@settings(max_examples=8)
@given(st.lists(st.lists(st.tuples(st.integers(0, 49), st.one_of(st.none(), st.binary(min_size=1, max_size=8))),
                         min_size=1, max_size=5), min_size=1, max_size=40))
def test_multi_pass_equals_single_pass_property(writes):
    batches = [[Record(b"key-%02d" % key, value, (), T0) for key, value in batch] for batch in writes]
    with tempfile.TemporaryDirectory(prefix="logstore-cleaner-") as tmp_dir:
        (before_s, small, after_s, later_s), (_, default, after_d, later_d) = _compact_both(tmp_dir, batches)
    if len({key for batch in writes for key, _ in batch}) > 40:
        assert small.passes > 1
    assert after_s == after_d == compacted(before_s, len(before_s))
    assert later_s == later_d


# --- 6. records -----------------------------------------------------------------------------------------

def test_headers_timestamps_and_sparse_offsets_are_kept(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("c", 1, COMPACT)
        log = store.get_log("c", 0)
        for i in range(24):
            headers = (("n", b"%d" % i), ("empty", None)) if i % 2 else ()
            log.append([Record(b"k%d" % (i % 5), b"value-%d" % i, headers, T0 - 1000 * i),
                        Record(b"solo-%d" % i, b"s", (("h", b"x"),), T0 + i)] if i % 3 == 0 else
                       [Record(b"k%d" % (i % 5), b"value-%d" % i, headers, T0 - 1000 * i)])
        log.roll()
        before = snapshot(log)
        end = log.log_end_offset
        store.compact("c")
        after = snapshot(log)
        assert after == compacted(before, end)
        offsets = [entry[0] for entry in after]
        assert offsets != list(range(offsets[0], offsets[0] + len(offsets)))  # sparse now
        assert log.log_end_offset == end
        assert any(entry[3] for entry in after) and any(entry[3] == (("n", b"23"), ("empty", None)) for entry in after)
        # Reads from any offset in a gap start at the next surviving record.
        for offset in range(end):
            first = next(iter(log.read(offset, 1 << 20, 1)), None)
            assert first is not None and first.offset == min(o for o in offsets if o >= offset)


def test_gzip_batches_are_cleaned_and_stay_gzip(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("c", 1, {**COMPACT, "compression.type": "gzip"})
        log = store.get_log("c", 0)
        rng = random.Random(7)
        for i in range(40):
            log.append([Record(b"k%d" % rng.randrange(12), b"gz-%d-%d" % (i, j) * 3, (("i", b"%d" % i),), T0 + j)
                        for j in range(rng.randint(1, 6))])
        log.roll()
        before = snapshot(log)
        end = log.log_end_offset
        stats = store.compact("c")[("c", 0)]
        assert stats.records_dropped > 0
        assert snapshot(log) == compacted(before, end)
        batches = [batch for segment in log.segments for _, batch in segment.iter_batches(0)]
        assert batches and all(batch.header.attributes & COMPRESSION_MASK == COMPRESSION_GZIP
                               for batch in batches if batch.header.record_count)


def test_log_append_time_is_kept(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("c", 1, {**COMPACT, "message.timestamp.type": "LogAppendTime"})
        log = store.get_log("c", 0)
        log.append([Record(b"a", b"1", (), 5), Record(b"b", b"1", (), 6)])  # a rebuilt batch (a goes)
        clock.advance(1_000)
        log.append([Record(b"c", b"1", (), 7)])
        clock.advance(1_000)
        log.append([Record(b"a", b"2", (), 8), Record(b"c", b"2", (), 9)])
        clock.advance(1_000)
        log.roll()
        before = snapshot(log)
        assert [entry[4] for entry in before] == [T0, T0, T0 + 1000, T0 + 2000, T0 + 2000]
        clock.advance(50_000)
        store.compact("c")
        assert snapshot(log) == compacted(before, 5) == [(1, b"b", b"1", (), T0), (3, b"a", b"2", (), T0 + 2000),
                                                         (4, b"c", b"2", (), T0 + 2000)]
        batches = [batch for segment in log.segments for _, batch in segment.iter_batches(0)]
        assert batches and all(batch.header.attributes & TIMESTAMP_TYPE_LOG_APPEND for batch in batches)


def test_keyless_records_are_rejected_by_compacted_topics(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("c", 1, COMPACT)
        log = store.get_log("c", 0)
        with pytest.raises(InvalidRecordError):
            log.append([Record(b"k", b"v"), Record(None, b"v")])
        with pytest.raises(InvalidRecordError):
            store.append("c", [Record(None, b"v")])
        assert log.log_end_offset == 0


@pytest.mark.parametrize("lose_active_segment", [False, True])
def test_keyless_records_of_a_topic_switched_to_compact_are_dropped(tmp_path, lose_active_segment):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("t", 1, {**COMPACT, "cleanup.policy": "delete"})
        log = store.get_log("t", 0)
        log.append([Record(b"k1", b"v0", (), T0)])
        log.append([Record(None, b"n1", (), T0)])
        log.append([Record(b"k1", b"v2", (), T0), Record(None, b"n3", (), T0), Record(b"k2", b"v4", (), T0)])
        log.append([Record(None, b"n5", (), T0), Record(None, b"n6", (), T0)])  # the last batch: all keyless
        store.alter_topic_config("t", {"cleanup.policy": "compact"})
        log.roll()
        before = snapshot(log)
        stats = store.compact("t")[("t", 0)]
        assert snapshot(log) == compacted(before, 7) == [(2, b"k1", b"v2", (), T0), (4, b"k2", b"v4", (), T0)]
        assert stats.records_dropped == 5
        assert log.log_end_offset == 7
        partition_dir = log.dir_path
    if lose_active_segment:
        drop_empty_active_segment(partition_dir, 7)
    store, clock = open_store(tmp_path, clock)
    with store:
        log = store.get_log("t", 0)
        assert log.log_end_offset == 7  # the emptied last batch still ends the log
        assert log.append([Record(b"k3", b"v7")]).first_offset == 7
        assert [entry[0] for entry in snapshot(log)] == [2, 4, 7]


def test_keyless_records_are_dropped_when_a_pass_ends_inside_their_batch(tmp_path):
    store, clock = open_store(tmp_path, **{"log.cleaner.dedupe.buffer.size": 4096})  # ~32 keys a pass
    with store:
        store.create_topic("t", 1, {**COMPACT, "cleanup.policy": "delete", "segment.bytes": 100_000})
        log = store.get_log("t", 0)
        log.append([Record(None if i % 10 == 5 else b"key-%02d" % i, b"v%d" % i, (), T0) for i in range(60)])
        log.append([Record(b"key-%02d" % i, b"w%d" % i, (), T0) for i in range(0, 60, 7)])
        store.alter_topic_config("t", {"cleanup.policy": "compact"})
        log.roll()
        before = snapshot(log)
        stats = store.compact("t")[("t", 0)]
        assert stats.passes > 1
        after = snapshot(log)
        assert after == compacted(before, log.log_end_offset)
        assert all(entry[1] is not None for entry in after)


@pytest.mark.parametrize("lose_active_segment", [False, True])
def test_last_batch_emptied_by_tombstone_removal_keeps_the_log_end(tmp_path, lose_active_segment):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("c", 1, {**COMPACT, "delete.retention.ms": 1_000})
        log = store.get_log("c", 0)
        append_each(log, clock, [b"a", b"b"])
        log.append([Record(b"a", None, (), clock.time_ms()), Record(b"b", None, (), clock.time_ms())])
        log.roll()
        store.compact("c")  # the tombstones' horizon: T0 + 1000
        assert snapshot(log) == [(2, b"a", None, (), T0), (3, b"b", None, (), T0)]
    # The checkpoint is lost: the next round covers the tombstone batch again, as its last batch.
    os.remove(tmp_path / CLEANER_OFFSET_CHECKPOINT)
    store, clock = open_store(tmp_path, clock)
    with store:
        clock.advance(1_000)
        log = store.get_log("c", 0)
        stats = store.compact("c")[("c", 0)]
        assert (stats.first_dirty_offset, stats.end_offset, stats.tombstones_removed) == (0, 4, 2)
        assert snapshot(log) == [] and log.log_end_offset == 4
        partition_dir = log.dir_path
    if lose_active_segment:
        drop_empty_active_segment(partition_dir, 4)
    store, clock = open_store(tmp_path, clock)
    with store:
        log = store.get_log("c", 0)
        assert log.log_end_offset == 4
        assert log.append([Record(b"c", b"y")]).first_offset == 4
        assert [entry[:3] for entry in snapshot(log)] == [(4, b"c", b"y")]


# --- 7. tombstones --------------------------------------------------------------------------------------

def test_tombstones_live_delete_retention_ms_after_the_first_cleaning(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("c", 1, {**COMPACT, "delete.retention.ms": 10_000})
        log = store.get_log("c", 0)
        append_each(log, clock, [b"k1", b"k2", b"k3"])
        log.append([Record(b"k1", None, (), clock.time_ms())])
        log.append([Record(b"k2", None, (), clock.time_ms()), Record(b"k3", b"keep", (), clock.time_ms())])
        log.roll()
        clock.advance(50_000)  # the records' own age does not matter: the horizon starts at the cleaning
        first = store.compact("c")[("c", 0)]
        assert first.tombstones_removed == 0
        tombstones = [(3, b"k1", None), (4, b"k2", None)]
        assert [entry[:3] for entry in snapshot(log)] == tombstones + [(5, b"k3", b"keep")]

        clock.advance(9_999)
        append_each(log, clock, [b"m1"])
        log.roll()
        second = store.compact("c")[("c", 0)]
        assert second is not None and second.tombstones_removed == 0
        assert [entry[:3] for entry in snapshot(log)] == tombstones + [(5, b"k3", b"keep"), (6, b"m1", b"v-6")]

        clock.advance(1)  # delete.retention.ms after the first cleaning
        append_each(log, clock, [b"m2"])
        log.roll()
        third = store.compact("c")[("c", 0)]
        assert third.tombstones_removed == 2
        assert [entry[:3] for entry in snapshot(log)] == [(5, b"k3", b"keep"), (6, b"m1", b"v-6"), (7, b"m2", b"v-7")]
        assert store.cleaner.stats()["tombstones_removed"] == 2


def test_tombstones_of_a_later_cleaning_get_their_own_horizon(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("c", 1, {**COMPACT, "delete.retention.ms": 10_000})
        log = store.get_log("c", 0)
        append_each(log, clock, [b"a", b"b"])
        log.append([Record(b"a", None, (), clock.time_ms())])
        log.roll()
        store.compact("c")  # a's tombstone: horizon T0 + 10000
        clock.advance(6_000)
        log.append([Record(b"b", None, (), clock.time_ms())])
        log.roll()
        store.compact("c")  # b's tombstone: horizon T0 + 16000
        assert [entry[:3] for entry in snapshot(log)] == [(2, b"a", None), (3, b"b", None)]
        clock.advance(4_000)
        append_each(log, clock, [b"c"])
        log.roll()
        assert store.compact("c")[("c", 0)].tombstones_removed == 1
        assert [entry[:3] for entry in snapshot(log)] == [(3, b"b", None), (4, b"c", b"v-4")]
        clock.advance(6_000)
        append_each(log, clock, [b"d"])
        log.roll()
        assert store.compact("c")[("c", 0)].tombstones_removed == 1
        assert [entry[:3] for entry in snapshot(log)] == [(4, b"c", b"v-4"), (5, b"d", b"v-5")]


# --- 8. retention of compacted logs -----------------------------------------------------------------------

RETENTION = {"segment.bytes": 300, "retention.ms": 100, "retention.bytes": -1, "file.delete.delay.ms": 0}


@pytest.mark.parametrize("threads", [1, 0])
def test_retention_job_leaves_compacted_logs_to_running_cleaner_threads(tmp_path, threads):
    store, clock = open_store(tmp_path, **{"log.cleaner.threads": threads})
    with store:  # starts the jobs and (threads=1) a cleaner thread, idle for an hour of real time
        assert store.cleaner.running == bool(threads)
        for topic, policy in [("c", "compact,delete"), ("d", "delete")]:
            store.create_topic(topic, 1, {**RETENTION, "cleanup.policy": policy})
            append_each(store.get_log(topic, 0), clock, [b"k%d" % i for i in range(12)])
        clock.advance(10_000)
        store.scheduler.advance(HOUR_MS)  # the first run of log-retention
        assert store.get_log("d", 0).log_start_offset == 12
        compacted_log = store.get_log("c", 0)
        assert compacted_log.log_start_offset == (0 if threads else 12)
        assert (store.cleaner.run_retention() > 0) == bool(threads)
        assert compacted_log.log_start_offset == 12
    assert not [t for t in threading.enumerate() if t.name.startswith("logstore-cleaner-")]


def test_run_retention_by_cleanup_policy(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        for topic, policy in [("c", "compact"), ("cd", "compact,delete"), ("d", "delete")]:
            store.create_topic(topic, 1, {**RETENTION, "cleanup.policy": policy})
            append_each(store.get_log(topic, 0), clock, [b"k%d" % i for i in range(30)])
        layouts = {topic: [s.base_offset for s in store.get_log(topic, 0).segments] for topic in ("c", "cd", "d")}
        assert layouts["c"] == layouts["cd"] == layouts["d"]
    with open(tmp_path / LOG_START_OFFSET_CHECKPOINT, "w") as handle:  # moved past whole segments
        handle.write("0\n3\nc 0 16\ncd 0 16\nd 0 16\n")
    store, clock = open_store(tmp_path, clock)
    with store:
        clock.advance(10_000)
        logs = {topic: store.get_log(topic, 0) for topic in ("c", "cd", "d")}
        bases = [s.base_offset for s in logs["c"].segments]
        holding_16 = max(base for base in bases if base <= 16)
        store.cleaner.run_retention()
        # compact: only the log start offset rule; the segment holding 16 and all after it stay.
        assert [s.base_offset for s in logs["c"].segments] == [base for base in bases if base >= holding_16]
        assert logs["c"].log_start_offset == 16
        assert [entry[0] for entry in snapshot(logs["c"])] == list(range(16, 30))
        # compact,delete: time retention too (every record is older than retention.ms).
        assert [s.base_offset for s in logs["cd"].segments] == [30] and logs["cd"].log_start_offset == 30
        # delete: not the cleaner's business.
        assert [s.base_offset for s in logs["d"].segments] == bases
        assert store.cleaner.cleaner_manager.state(("c", 0)) is None


# --- 9. throttler and config -----------------------------------------------------------------------------

def test_throttler_sleeps_off_the_excess_on_the_clock():
    clock = ManualClock(T0)
    throttler = Throttler(clock, max_bytes_per_second=1000, check_interval_ms=300)
    throttler.maybe_throttle(500)  # no time has passed: no check yet
    assert clock.time_ms() == T0 and throttler.slept_ms == 0
    clock.advance(300)
    throttler.maybe_throttle(500)  # 1000 bytes in 300 ms: must have taken 1000 ms, sleep 700
    assert clock.time_ms() == T0 + 1000 and throttler.slept_ms == 700
    throttler.maybe_throttle(100)  # a new period starts after the sleep
    clock.advance(299)
    throttler.maybe_throttle(199)  # interval not over yet
    assert throttler.slept_ms == 700
    clock.advance(1)
    throttler.maybe_throttle(1)  # 300 bytes in 300 ms: exactly the rate, no sleep
    assert throttler.slept_ms == 700 and clock.time_ms() == T0 + 1300
    clock.advance(300)
    throttler.maybe_throttle(600)  # 600 bytes in 300 ms: sleep 300
    assert throttler.slept_ms == 1000 and clock.time_ms() == T0 + 1900


def test_unlimited_throttler_never_sleeps():
    clock = ManualClock(T0)
    throttler = Throttler(clock)
    for _ in range(5):
        throttler.maybe_throttle(10**9)
        clock.advance(301)
    assert throttler.slept_ms == 0 and clock.time_ms() == T0 + 5 * 301
    with pytest.raises(ValueError):
        Throttler(clock, max_bytes_per_second=0)


def test_store_throttler_gets_the_configured_rate(tmp_path):
    store, _ = open_store(tmp_path, **{"log.cleaner.io.max.bytes.per.second": "5000"})
    with store:
        assert store.cleaner.throttler.max_bytes_per_second == 5000


@pytest.mark.parametrize("key, value", [
    ("log.cleaner.io.buffer.load.factor", 0), ("log.cleaner.io.buffer.load.factor", 1.5),
    ("log.cleaner.threads", -1), ("log.cleaner.threads", 65), ("log.cleaner.threads", "two"),
    ("log.cleaner.io.max.bytes.per.second", 0), ("log.cleaner.io.max.bytes.per.second", -5),
    ("log.cleaner.dedupe.buffer.size", 4095), ("log.cleaner.backoff.ms", -1), ("log.cleaner.enable", "maybe"),
    ("log.cleaner.min.cleanable.ratio", 1.5), ("log.cleaner.delete.retention.ms", -1),
])
def test_bad_cleaner_settings_are_rejected(tmp_path, key, value):
    with pytest.raises(InvalidConfigError):
        LogManager([str(tmp_path)], config={key: value})
    assert not os.path.exists(tmp_path / ".lock")


@pytest.mark.parametrize("config", [{"min.cleanable.dirty.ratio": 1.01}, {"min.cleanable.dirty.ratio": -0.1},
                                    {"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5},
                                    {"delete.retention.ms": -1}, {"max.compaction.lag.ms": 0}])
def test_bad_topic_cleaner_settings_are_rejected(tmp_path, config):
    store, _ = open_store(tmp_path)
    with store:
        with pytest.raises(InvalidConfigError):
            store.create_topic("c", 1, {**COMPACT, **config})
        assert "c" not in store.topics()


# --- 10. cleaner threads ----------------------------------------------------------------------------------

def _wait_for(condition, seconds: float = 60.0) -> None:  # bounded; generous for a loaded 2-core machine
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the cleaner thread did not get there in time"
        time.sleep(0.01)


def _cleaner_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("logstore-cleaner-")]


THREAD_CONFIG = {"log.cleaner.threads": 1, "log.cleaner.backoff.ms": 50, "log.initial.task.delay.ms": 0}


def test_cleaner_thread_cleans_in_the_background_and_stops_at_close(tmp_path):
    store = LogManager([str(tmp_path)], config=THREAD_CONFIG)
    try:
        store.create_topic("c", 1, COMPACT)
        log = store.get_log("c", 0)
        log.append([Record(b"k%d" % (i % 3), b"v%d" % i) for i in range(10)])
        for i in range(30):
            log.append([Record(b"k%d" % (i % 3), b"w%d" % i)])
        log.roll()
        before = snapshot(log)
        store.startup()
        assert [t.name for t in _cleaner_threads()] == ["logstore-cleaner-0"]
        _wait_for(lambda: store.cleaner.cleaner_manager.read_checkpoints().get(("c", 0)) == 40)
        assert snapshot(log) == compacted(before, 40)
        assert store.cleaner.stats()["rounds"] >= 1
    finally:
        store.close()
    assert _cleaner_threads() == []


def test_a_failing_log_is_marked_uncleanable_and_others_are_still_cleaned(tmp_path):
    store = LogManager([str(tmp_path)], config={**THREAD_CONFIG, "log.cleaner.dedupe.buffer.size": 4096})
    try:
        store.create_topic("bad", 1, {**COMPACT, "segment.bytes": 20_000})
        store.create_topic("good", 1, COMPACT)
        bad = store.get_log("bad", 0)
        bad.append([Record(b"K" * 5000, b"huge key")])  # more than the whole offset map
        append_each(bad, SystemClock(), keys_cycle(10, 2))
        bad.roll()
        good = store.get_log("good", 0)
        append_each(good, SystemClock(), keys_cycle(30, 3))
        good.roll()
        before_bad, before_good = snapshot(bad), snapshot(good)
        store.startup()
        manager = store.cleaner.cleaner_manager
        _wait_for(lambda: ("bad", 0) in manager.uncleanable and manager.read_checkpoints().get(("good", 0)) == 30)
        assert snapshot(good) == compacted(before_good, 30)
        assert snapshot(bad) == before_bad and leftovers(bad) == []
        stats = store.cleaner.stats()
        assert "dedupe.buffer.size" in stats["uncleanable"]["bad-0"]
        assert stats["failed_rounds"] >= 1 and list(stats["uncleanable"]) == ["bad-0"]
        # More data for the good log is still cleaned; the bad one stays out.
        append_each(good, SystemClock(), keys_cycle(30, 3))
        good.roll()
        _wait_for(lambda: manager.read_checkpoints().get(("good", 0)) == 60)
        assert ("bad", 0) not in manager.read_checkpoints() and snapshot(bad) == before_bad
    finally:
        store.close()
    assert _cleaner_threads() == []


# --- 11. statistics ---------------------------------------------------------------------------------------

def test_round_statistics_are_consistent_and_totals_add_up(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        rounds = []
        for topic in ("a", "b"):
            store.create_topic(topic, 1, COMPACT)
            log = store.get_log(topic, 0)
            append_each(log, clock, keys_cycle(45, 4 if topic == "a" else 9))
            log.roll()
            size_before = log.size_bytes
            dirty_bytes = sum(segment.size_bytes for segment in log.segments[:-1])
            stats = store.cleaner.clean_filthiest_log()
            assert stats.log == f"{topic}-0"
            rounds.append(stats)
            # One pass over a never-cleaned log: map the dirty section, then recopy it.
            assert stats.passes == 1 and stats.first_dirty_offset == 0 and stats.end_offset == 45
            assert stats.bytes_read == 2 * dirty_bytes
            assert stats.records_read == 45
            assert stats.records_kept + stats.records_dropped == stats.records_read
            assert stats.records_kept == len(snapshot(log)) == (4 if topic == "a" else 9)
            assert stats.keys_mapped == (4 if topic == "a" else 9) and 0 < stats.map_utilization < 1
            assert stats.size_bytes_before == size_before and stats.size_bytes_after == log.size_bytes
            assert stats.size_bytes_after <= stats.size_bytes_before
            assert stats.bytes_written == sum(segment.size_bytes for segment in log.segments[:-1])
            assert stats.groups >= 1 and stats.duration_ms == 0  # the manual clock did not move
            assert store.cleaner.last_stats[(topic, 0)] is stats
        # A second round of "a" after more data: the clean section is recopied too.
        log = store.get_log("a", 0)
        append_each(log, clock, keys_cycle(45, 4))
        log.roll()
        stats = store.cleaner.clean_filthiest_log()
        rounds.append(stats)
        assert (stats.first_dirty_offset, stats.end_offset) == (45, 90)
        assert stats.records_kept + stats.records_dropped == stats.records_read
        assert stats.records_dropped == 45 and stats.records_kept == 4
        totals = store.cleaner.stats()
        assert totals["rounds"] == 3 and totals["aborted_rounds"] == totals["failed_rounds"] == 0
        for name in ("bytes_read", "bytes_written", "records_dropped", "tombstones_removed", "duration_ms"):
            assert totals[name] == sum(getattr(r, name) for r in rounds), name
        assert totals["max_map_utilization"] == max(r.map_utilization for r in rounds)


def test_multi_pass_compact_statistics_merge(tmp_path):
    store, clock = open_store(tmp_path, **{"log.cleaner.dedupe.buffer.size": 4096})
    with store:
        store.create_topic("c", 1, COMPACT)
        log = store.get_log("c", 0)
        append_each(log, clock, keys_cycle(200, 100, b"key-"))
        log.roll()
        before = snapshot(log)
        stats = store.compact("c")[("c", 0)]
        assert stats.passes > 1 and stats.end_offset == 200
        assert snapshot(log) == compacted(before, 200)
        totals = store.cleaner.stats()
        assert totals["rounds"] == stats.passes
        assert totals["bytes_read"] == stats.bytes_read and totals["bytes_written"] == stats.bytes_written
        assert totals["records_dropped"] == stats.records_dropped == 100
        assert stats.records_kept == 100  # the last pass recopied everything below its end
        assert stats.size_bytes_after == log.size_bytes < stats.size_bytes_before


def test_truncation_deleting_an_unread_dirty_segment_aborts_the_round(tmp_path):
    """A truncation that deletes a dirty segment the round has not read yet is an abort (not an
    error that marks the log uncleanable), both for a cleaner round and for compact()."""
    from logstore import LogManager, ManualClock, Record
    from logstore.errors import CleaningAbortedError
    from logstore.timer.scheduler import Scheduler
    clock = ManualClock(1_700_000_000_000)
    store = LogManager([str(tmp_path)], clock=clock, scheduler=Scheduler(clock, threaded=False),
                       config={"log.cleaner.threads": 0})
    with store:
        store.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": 1000, "file.delete.delay.ms": 0})
        log = store.get_log("c", 0)
        for i in range(30):
            log.append([Record(b"k%d" % (i % 4), b"v%d" % i, (), clock.time_ms())])
        log.roll()
        assert len(log.segments) >= 3

        class TruncateOnce:  # stands in for another thread truncating while the round maps
            done = False

            def maybe_throttle(self, size_bytes):
                if not self.done:
                    self.done = True
                    log.truncate_to(20)

        cleaner = store.cleaner.new_cleaner()
        cleaner.throttler = TruncateOnce()
        assert store.cleaner.clean_filthiest_log(cleaner=cleaner) is None
        stats = store.cleaner.stats()
        assert (stats["aborted_rounds"], stats["failed_rounds"], stats["uncleanable"]) == (1, 0, {})
        for i in range(20, 40):
            log.append([Record(b"k%d" % (i % 4), b"v%d" % i, (), clock.time_ms())])
        log.roll()
        fired = []

        def truncate_on_first_bytes(key, size_bytes):
            if not fired:
                fired.append(True)
                log.truncate_to(5)

        with pytest.raises(CleaningAbortedError):
            store.compact("c", progress=truncate_on_first_bytes)
        assert [r.offset for r in log.iter_records()] == list(range(5))
        assert not [n for n in os.listdir(log.dir_path) if n.endswith((".cleaned", ".swap"))]


# --- a dirty section mapped by another engine (the Spark job's route) ---------------------------------

def _python_maps(store, ranges):
    """What the Spark job computes, in plain Python: key -> latest offset over each cleanable range."""
    from logstore.cleaner.log_cleaner import PrebuiltMap
    from logstore.cleaner.offset_map import OffsetMap

    maps = {}
    for key, (first_dirty, first_uncleanable) in ranges.items():
        latest = {}
        for record in store.get_log(*key).iter_records(first_dirty, first_uncleanable):
            if record.key is not None:
                latest[record.key] = record.offset
        offset_map = OffsetMap(2**62)
        ordered = sorted(latest.items(), key=lambda item: item[1])
        offset_map.put_batch([k for k, _ in ordered], [o for _, o in ordered])
        maps[key] = PrebuiltMap(first_dirty, first_uncleanable, offset_map)
    return maps


@pytest.mark.parametrize("seed", [3, 4])
def test_prebuilt_offset_maps_clean_exactly_like_the_local_map(tmp_path, seed):
    batches = _random_batches(seed, 150, 60)
    results = []
    for name, prebuilt in (("local", False), ("prebuilt", True)):
        store, clock = open_store(tmp_path / name, **{"log.cleaner.dedupe.buffer.size": 4096})  # ~32 keys a pass
        with store:
            store.create_topic("c", 2, COMPACT)
            for index, batch in enumerate(batches):
                store.append("c", batch, partition=index % 2)
            for round_ in range(2):  # the second round, past delete.retention.ms, drops tombstones
                ranges = store.compaction_ranges("c")
                maps = _python_maps(store, ranges) if prebuilt else None
                stats = store.compact("c", offset_maps=maps)
                if prebuilt:
                    assert all(s is None or s.passes == 1 for s in stats.values())
                clock.advance(2 * 86_400_000)
            results.append([snapshot(store.get_log("c", p)) for p in range(2)])
    assert results[0] == results[1]


def test_a_prebuilt_map_for_a_range_that_moved_aborts(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("c", 1, COMPACT)
        log = store.get_log("c", 0)
        append_each(log, clock, keys_cycle(60, 5))
        ranges = store.compaction_ranges("c")
        maps = _python_maps(store, ranges)
        append_each(log, clock, keys_cycle(60, 5))  # rolls segments: the cleanable range grows
        before = snapshot(log)
        with pytest.raises(CleaningAbortedError, match="the offset map was built for"):
            store.compact("c", offset_maps=maps)
        assert snapshot(log) == before
