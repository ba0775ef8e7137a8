"""Compaction with a dedupe buffer too small for the dirty section's keys (``cleaner.multipass``):
the round maps the range in hash partitions into a survivor bitmap and recopies the log once.

Invariants checked:

- The records a multi-pass compaction leaves are exactly those of a single pass with a large buffer
  and those of the plain model (the last record of each key below the end; keyless records gone;
  tombstones kept by the first cleaning and dropped by the first one after their horizon), for
  random logs: key spaces from a few keys to many times the buffer (partitions split again), empty
  and variable-size keys, keyless records, tombstones, gzip batches, small and large segments,
  several buffer sizes, and a second round over a clean section.
- A round whose bitmap would not fit half the buffer ends at a segment base and the next rounds go
  on; when the hashes cannot split a partition the round falls back to Kafka's (ends where the map
  filled); a full disk while spilling aborts the round and changes nothing; no scratch file stays.
- ``SurvivorBitmap.between`` and ``KeySpill`` (routing, flushes, read-back order) against plain models.
"""

from __future__ import annotations

import errno
import os
import tempfile

import pytest
from hypothesis import given, settings, strategies as st

from logstore import LogManager, ManualClock, Record
from logstore.cleaner import multipass
from logstore.cleaner.multipass import CLEAN, DIRTY, KeySpill, SurvivorBitmap
from logstore.errors import CleaningAbortedError
from logstore.timer.scheduler import Scheduler

T0 = 1_700_000_000_000
RETENTION_MS = 10_000
SMALL = 4096  # the config's minimum: about 30 short keys a pass


def open_store(path, clock: ManualClock, buffer: int | None) -> LogManager:
    config = {"log.cleaner.threads": 0, "log.initial.task.delay.ms": 3_600_000}
    if buffer is not None:
        config["log.cleaner.dedupe.buffer.size"] = buffer
    return LogManager([str(path)], config=config, clock=clock, scheduler=Scheduler(clock, threaded=False))


def snapshot(log) -> list[tuple]:
    return [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp_ms) for r in log.iter_records()]


def model(entries: list[tuple], end: int, horizon_passed_below: int = 0) -> list[tuple]:
    """Below ``end`` the last record of each key (keyless ones go); a tombstone below
    ``horizon_passed_below`` (recopied by an earlier round whose horizon has passed) goes too."""
    last = {entry[1]: entry[0] for entry in entries if entry[0] < end and entry[1] is not None}
    kept = [entry for entry in entries if entry[0] >= end or (entry[1] is not None and last[entry[1]] == entry[0])]
    return [entry for entry in kept if not (entry[2] is None and entry[0] < horizon_passed_below)]


def scratch_files(log) -> list[str]:
    """Spill files left in the partition dir (an unnamed O_TMPFILE never shows; a named fallback would)."""
    return [name for name in os.listdir(log.dir_path) if "spill" in name or name.startswith("tmp")]


def compact_twice(root: str, buffer: int | None, first: list[list[Record]], second: list[list[Record]],
                  topic_config: dict, keyless: bool):
    """Write ``first``, compact; write ``second`` after delete.retention.ms, compact again. Returns
    the records before and after each compaction and the statistics."""
    clock = ManualClock(T0)
    store = open_store(os.path.join(root, "small" if buffer else "default"), clock, buffer)
    with store:
        config = {**topic_config, "delete.retention.ms": RETENTION_MS, "file.delete.delay.ms": 0}
        store.create_topic("c", 1, {**config, "cleanup.policy": "delete"} if keyless else config)
        log = store.get_log("c", 0)
        for batch in first:
            log.append(batch)
        if keyless:
            store.alter_topic_config("c", {"cleanup.policy": "compact"})
        log.roll()
        before_1 = snapshot(log)
        stats_1 = store.compact("c")[("c", 0)]
        after_1 = snapshot(log)
        clock.advance(RETENTION_MS)
        for batch in second:
            log.append(batch)
        log.append([Record(b"late", b"x", (), clock.time_ms())])
        log.roll()
        before_2 = snapshot(log)
        stats_2 = store.compact("c")[("c", 0)]
        after_2 = snapshot(log)
        assert scratch_files(log) == []
        return before_1, stats_1, after_1, before_2, stats_2, after_2


def _records(draw_batches: int, keyed: bool, key_space: int):
    key = st.one_of(st.just(b""), st.integers(0, key_space - 1).map(lambda k: b"key-%d" % k))
    if not keyed:
        key = st.one_of(key, st.none())
    value = st.one_of(st.none(), st.binary(max_size=12))
    return st.lists(st.lists(st.tuples(key, value), min_size=1, max_size=8), max_size=draw_batches)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), key_space=st.sampled_from([8, 45, 120, 700]), buffer=st.sampled_from([SMALL, 6000, 9000]),
       segment_bytes=st.sampled_from([400, 1500, 100_000]), compression=st.sampled_from(["uncompressed", "gzip"]),
       keyless=st.booleans())
def test_multi_pass_equals_single_pass_and_the_model(data, key_space, buffer, segment_bytes, compression, keyless):
    def batches(count: int, keyed: bool):
        raw = data.draw(_records(count, keyed, key_space))
        return [[Record(key, value, (("h", b"1"),) if value and value[:1] < b"\x10" else (), T0 + 7 * i + j)
                 for j, (key, value) in enumerate(batch)] for i, batch in enumerate(raw)]

    first, second = batches(60, not keyless), batches(30, True)
    topic = {"cleanup.policy": "compact", "segment.bytes": segment_bytes, "compression.type": compression}
    with tempfile.TemporaryDirectory(prefix="logstore-multipass-") as root:
        small = compact_twice(root, buffer, first, second, topic, keyless)
        large = compact_twice(root, None, first, second, topic, keyless)
    before_1, stats_1, after_1, before_2, stats_2, after_2 = small
    assert (before_1, before_2) == (large[0], large[3])
    assert after_1 == large[2] == model(before_1, len(before_1) and before_1[-1][0] + 1)
    end_1 = stats_1.end_offset if stats_1 else 0
    assert after_2 == large[5] == model(before_2, stats_2.end_offset, horizon_passed_below=end_1)
    assert stats_2.end_offset == large[4].end_offset
    distinct = {entry[1] for entry in before_1}
    if stats_1 is not None and len(distinct) > buffer * 0.9 / 107:  # more keys than the map holds: several passes
        assert stats_1.passes > 1


def _keys_log(store, records: int, keys: int, batch: int, segment_bytes: int):
    store.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": segment_bytes,
                                "file.delete.delay.ms": 0})
    log = store.get_log("c", 0)
    for start in range(0, records, batch):
        log.append([Record(b"key-%05d" % ((offset * 7919) % keys), b"v%d" % offset, (), T0)
                    for offset in range(start, min(start + batch, records))])
    log.roll()
    return log


def test_partitions_that_overflow_the_map_are_split_again(tmp_path):
    store = open_store(tmp_path, ManualClock(T0), SMALL)
    with store:
        log = _keys_log(store, 6000, 2500, 100, 64_000)
        before = snapshot(log)
        stats = store.compact("c")[("c", 0)]
        assert snapshot(log) == model(before, 6000)
        # 2500 keys, ~30 a pass: a first level of at most 8 partitions must split again.
        assert stats.passes > 2500 // 30 and stats.keys_mapped == 2500 and stats.end_offset == 6000
        assert store.cleaner.stats()["rounds"] == stats.passes


def test_a_round_whose_bitmap_does_not_fit_ends_at_a_segment_base(tmp_path, caplog):
    store = open_store(tmp_path, ManualClock(T0), SMALL)  # half of 3686 bytes: 14,744 offsets a round
    with store:
        log = _keys_log(store, 40_000, 200, 500, 30_000)
        before = snapshot(log)
        bases = [segment.base_offset for segment in log.segments]
        stats = store.cleaner.clean_filthiest_log()
        assert stats.end_offset in bases and 200 < stats.end_offset <= 14_744 and stats.passes > 1
        assert snapshot(log) == model(before, stats.end_offset)
        # The next rounds go on in passes too: the clean section costs a bit per record, not per offset.
        # Partitions follow hash(), so the count moves with PYTHONHASHSEED (54-62 over 16 seeds for
        # two more rounds of ~8 first-level partitions, some split again); a per-offset cost would
        # need hundreds.
        total = store.compact("c")[("c", 0)]
        assert snapshot(log) == model(before, 40_000)
        assert "ends where the map filled" not in caplog.text and total.passes < 3 * 30


def test_when_the_hashes_cannot_split_a_partition_the_round_is_kafkas(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(multipass, "MAX_DEPTH", 1)  # no byte left to split an overflowing partition
    store = open_store(tmp_path, ManualClock(T0), SMALL)
    with store:
        log = _keys_log(store, 3000, 400, 100, 20_000)
        before = snapshot(log)
        stats = store.cleaner.clean_filthiest_log()
        assert stats.end_offset < 3000 and "ends where the map filled" in caplog.text
        assert snapshot(log) == model(before, stats.end_offset)
        store.compact("c")
        assert snapshot(log) == model(before, 3000) and scratch_files(log) == []


def test_a_full_disk_while_spilling_aborts_the_round(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    store = open_store(tmp_path, ManualClock(T0), SMALL)
    with store:
        log = _keys_log(store, 3000, 400, 100, 20_000)
        before = snapshot(log)
        monkeypatch.setattr(multipass, "_write", full)
        with pytest.raises(CleaningAbortedError, match="No space left"):
            store.compact("c")
        assert snapshot(log) == before and scratch_files(log) == []
        monkeypatch.undo()
        store.compact("c")
        assert snapshot(log) == model(before, 3000)


# --- the parts ----------------------------------------------------------------------------------------


@given(st.integers(0, 10**6), st.sets(st.integers(0, 300)), st.data())
def test_bitmap_between_matches_a_set(base, relative, data):
    bitmap = SurvivorBitmap(base, base + 301)
    bitmap.add(base + offset for offset in relative)
    first = data.draw(st.integers(0, 300))
    last = data.draw(st.integers(first, 300))
    assert bitmap.between(base + first, base + last) == sorted(base + o for o in relative if first <= o <= last)
    assert bitmap.memory_bytes == 38


@given(st.lists(st.tuples(st.lists(st.binary(max_size=6), max_size=40), st.sampled_from([DIRTY, CLEAN]))),
       st.sampled_from([1, 2, 8, 64]), st.integers(0, 7), st.integers(1, 3000))
def test_key_spill_gives_back_each_partition_in_order(adds, fanout, depth, budget):
    with tempfile.TemporaryFile() as scratch:
        spill = KeySpill(scratch.fileno(), fanout, depth, budget)
        offset = 0
        expected = []
        for keys, kind in adds:
            offsets = range(offset, offset + len(keys))
            spill.add(keys, offsets, kind)
            expected += [(key, o, kind) for key, o in zip(keys, offsets)]
            offset += len(keys)
        spill.flush()
        got = []
        partition_of = {}
        for part in range(fanout):
            for kind in (DIRTY, CLEAN):
                entries = [(key, o, kind) for chunk in spill.kind_chunks(part, kind)
                           for key, o in zip(*spill.read(chunk))]
                assert [o for _, o, _ in entries] == sorted(o for _, o, _ in entries)  # order kept
                for key, _, _ in entries:
                    assert partition_of.setdefault(key, part) == part  # a key lives in one partition
                got += entries
        assert sorted(got, key=lambda entry: entry[1]) == expected
        assert spill.entries[0][DIRTY] + spill.entries[0][CLEAN] <= len(expected)
