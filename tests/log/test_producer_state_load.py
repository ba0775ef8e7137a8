"""Choosing the snapshot and the replay at load (``producer_snapshot.load_producer_state``), on real
segments holding producer batches, with a small table that records what it was fed."""

from __future__ import annotations

import os

import pytest

from logstore import ManualClock, Record
from logstore.fs import FileSystem
from logstore.log.producer_snapshot import (SnapshotEntry, iter_producer_batches, list_snapshots,
                                            load_producer_state, read_snapshot, snapshot_file_name, write_snapshot)
from logstore.log.segment import LogSegment
from logstore.records.encoder import assign_base_offset, encode_batch, encode_marker_batch

T0 = 1_700_000_000_000


class CountingFs(FileSystem):
    """Counts whole-file reads (snapshots are read with ``read_file``)."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def read_file(self, path: str) -> bytes:
        self.reads.append(os.path.basename(path))
        return super().read_file(path)


class FakeTable:
    """What ``load_producer_state`` needs of a table: entries, ``load``, ``on_batch``."""

    def __init__(self) -> None:
        self.state: dict[int, list[int]] = {}
        self.fed: list[int] = []  # base offsets fed
        self.first_unstable_offset = None

    def load(self, entries) -> None:
        self.state = {entry[0]: list(entry) for entry in entries}
        self._publish()

    def entries(self):
        return iter(sorted(tuple(entry) for entry in self.state.values()))

    def _publish(self) -> None:
        opened = [entry[5] for entry in self.state.values() if entry[5] >= 0]
        self.first_unstable_offset = min(opened) if opened else None

    def on_batch(self, header, producer, marker):
        self.fed.append(header.base_offset)
        pid = producer.producer_id
        entry = self.state.get(pid, [pid, producer.producer_epoch, -1, 0, 0, -1])
        entry[1], entry[3], entry[4] = max(entry[1], producer.producer_epoch), header.last_offset, header.max_timestamp
        completed = None
        if marker is not None:
            entry[2] = marker.coordinator_epoch
            if entry[5] >= 0:
                completed = type("Completed", (), {"producer_id": pid, "first_offset": entry[5],
                                                   "last_offset": header.base_offset, "aborted": not marker.commit})()
            entry[5] = -1
        elif producer.transactional and entry[5] < 0:
            entry[5] = header.base_offset
        self.state[pid] = entry
        self._publish()
        return completed


class Builder:
    """Segments written batch by batch: plain, transactional data, markers."""

    def __init__(self, directory: str, fs: FileSystem) -> None:
        self.dir, self.fs, self.clock = directory, fs, ManualClock(T0)
        self.segments: list[LogSegment] = []
        self.end = 0
        self.roll()

    def roll(self) -> None:
        self.segments.append(LogSegment(self.fs, self.clock, self.dir, self.end, create=True,
                                        index_interval_bytes=4096, max_index_size_bytes=4096))

    def _put(self, batch: bytearray, count: int) -> int:
        base = self.end
        assign_base_offset(batch, base)
        self.segments[-1].append(base, base + count - 1, T0 + base, bytes(batch))
        self.end = base + count
        return base

    def plain(self, count: int = 2) -> int:
        records = [Record(b"k", b"v%d" % i, (), T0 + self.end + i) for i in range(count)]
        return self._put(encode_batch(records), count)

    def txn(self, pid: int, epoch: int = 0, count: int = 2) -> int:
        records = [Record(b"k", b"t%d" % i, (), T0 + self.end + i) for i in range(count)]
        return self._put(encode_batch(records, producer=(pid, epoch, 0), transactional=True), count)

    def marker(self, pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> int:
        return self._put(encode_marker_batch(commit, coordinator_epoch, pid, epoch, T0 + self.end), 1)

    def close(self) -> None:
        for segment in self.segments:
            segment.close_handlers()


@pytest.fixture
def built(tmp_path):
    fs = CountingFs()
    builder = Builder(str(tmp_path), fs)
    yield builder
    builder.close()


def load(builder: Builder, table=None, *, recovery_point=None, read_only=False, on_aborted=None):
    table = FakeTable() if table is None else table
    problems: list[str] = []
    result = load_producer_state(builder.fs, builder.dir, list_snapshots(builder.fs, builder.dir), builder.segments,
                                 table, log_start_offset=0, log_end_offset=builder.end, recovery_point=recovery_point,
                                 read_only=read_only, problems=problems, on_aborted=on_aborted)
    return table, result, problems


def scratch(builder: Builder) -> list[tuple]:
    """The state a replay of the whole log gives."""
    table = FakeTable()
    for batch in iter_producer_batches(builder.segments, 0, builder.end):
        table.on_batch(*batch)
    return list(table.entries())


def test_no_snapshot_reads_nothing(built):
    built.plain()
    built.plain()
    table, result, problems = load(built)
    assert (table.state, table.fed, built.fs.reads, problems, result.snapshots) == ({}, [], [], [], [])


def test_iter_producer_batches_skips_plain_batches_and_decodes_markers(built):
    built.plain()
    data = built.txn(7)
    built.plain()
    built.roll()
    mark = built.marker(7, commit=False, coordinator_epoch=3)
    found = list(iter_producer_batches(built.segments, 0, built.end))
    assert [header.base_offset for header, _, _ in found] == [data, mark]
    assert found[0][1].transactional and found[0][2] is None
    assert found[1][2] == (False, 3) and found[1][1].control
    assert [h.base_offset for h, _, _ in iter_producer_batches(built.segments, data + 2, built.end)] == [mark]
    assert list(iter_producer_batches(built.segments, 0, mark)) == found[:1]


def test_a_clear_snapshot_is_exact_and_nothing_is_replayed(built):
    first = built.plain()
    write_snapshot(built.fs, built.dir, first, [], batches_follow=True)
    built.txn(7)
    built.marker(7, commit=True)
    write_snapshot(built.fs, built.dir, built.end, scratch(built), batches_follow=False)
    built.plain()
    table, result, problems = load(built)
    assert table.fed == [] and list(table.entries()) == scratch(built)
    assert built.fs.reads == [snapshot_file_name(built.end - 2)]  # the newest only
    assert result.snapshots == [0, built.end - 2] and not result.newest_flagged and problems == []


def test_a_flagged_snapshot_is_replayed_from(built):
    built.plain()
    flagged = built.end
    write_snapshot(built.fs, built.dir, flagged, [], batches_follow=True)
    data = built.txn(7)
    built.plain()
    built.txn(9)
    mark = built.marker(7, commit=False)
    table, result, problems = load(built)
    assert table.fed == [data, data + 4, mark]
    assert list(table.entries()) == scratch(built)
    assert table.state[9][5] == data + 4  # 9's transaction is still open
    assert (result.replayed_from, result.replayed_batches, result.newest_flagged) == (flagged, 3, True)


def test_snapshots_above_the_log_end_go_unless_read_only(built):
    write_snapshot(built.fs, built.dir, 0, [], batches_follow=True)
    built.txn(7)
    write_snapshot(built.fs, built.dir, built.end + 5, [], batches_follow=True)
    table, result, _ = load(built, read_only=True)
    assert list_snapshots(built.fs, built.dir) == [0, built.end + 5] and result.snapshots == [0]
    table, result, _ = load(built)
    assert list_snapshots(built.fs, built.dir) == [0] and list(table.entries()) == scratch(built)


def test_a_damaged_snapshot_is_reported_and_rewritten_from_the_replay(built):
    write_snapshot(built.fs, built.dir, 0, [], batches_follow=True)
    built.txn(7)
    built.marker(7, commit=True)
    middle = built.end
    write_snapshot(built.fs, built.dir, middle, scratch(built), batches_follow=False)
    built.txn(8)
    path = os.path.join(built.dir, snapshot_file_name(middle))
    good = open(path, "rb").read()
    damaged = bytearray(good)
    damaged[10] ^= 1
    open(path, "wb").write(damaged)
    table, result, problems = load(built, read_only=True)
    assert list(table.entries()) == scratch(built) and open(path, "rb").read() == damaged
    assert len(problems) == 1 and path in problems[0] and "CRC" in problems[0]
    table, result, problems = load(built)
    assert list(table.entries()) == scratch(built) and path in problems[0]
    rewritten = read_snapshot(built.fs, built.dir, middle)
    assert rewritten.batches_follow and list(rewritten.entries) == [SnapshotEntry(*e) for e in scratch(built)[:1]]
    table, result, problems = load(built)
    assert problems == [] and list(table.entries()) == scratch(built)


def test_only_damaged_snapshots_replay_from_the_log_start(built):
    write_snapshot(built.fs, built.dir, 0, [], batches_follow=True)
    built.txn(7)
    open(os.path.join(built.dir, snapshot_file_name(0)), "wb").write(b"junk")
    table, result, problems = load(built)
    assert result.replayed_from == 0 and list(table.entries()) == scratch(built) and len(problems) == 1
    assert read_snapshot(built.fs, built.dir, 0).entries == ()


def test_unclean_load_replays_from_at_or_below_the_recovery_point(built):
    write_snapshot(built.fs, built.dir, 0, [], batches_follow=True)
    built.txn(7)
    early_abort = built.marker(7, commit=False)
    built.roll()
    roll = built.end
    write_snapshot(built.fs, built.dir, roll, scratch(built), batches_follow=False)
    write_snapshot(built.fs, built.dir, roll, scratch(built), batches_follow=True)
    first = built.txn(8)
    built.txn(9)
    late_abort = built.marker(8, commit=False)
    aborted = []
    # Clean: from the newest (at the roll); an unclean load whose recovery point is above the
    # early abort re-derives only the late one; one below it re-derives both.
    table, result, _ = load(built, on_aborted=lambda c, lso: aborted.append((c.first_offset, c.last_offset, lso)))
    assert result.replayed_from == roll and aborted == []
    table, result, _ = load(built, recovery_point=roll + 1, on_aborted=lambda c, lso: aborted.append(
        (c.first_offset, c.last_offset, lso)))
    assert result.replayed_from == roll and aborted == [(first, late_abort, first + 2)]
    aborted.clear()
    table, result, _ = load(built, recovery_point=early_abort, on_aborted=lambda c, lso: aborted.append(
        (c.first_offset, c.last_offset, lso)))
    assert result.replayed_from == 0 and list(table.entries()) == scratch(built)
    assert aborted == [(0, early_abort, early_abort + 1), (first, late_abort, first + 2)]


def test_unclean_load_without_a_snapshot_below_the_recovery_point_starts_at_the_oldest(built):
    built.plain()
    built.plain()
    first = built.end
    write_snapshot(built.fs, built.dir, first, [], batches_follow=True)
    built.txn(7)
    table, result, _ = load(built, recovery_point=1)
    assert result.replayed_from == first and list(table.entries()) == scratch(built)


# --- the writing rules (ProducerSnapshots) --------------------------------------------------------


class SizedTable(FakeTable):
    def __len__(self) -> int:
        return len(self.state)


def test_writing_rules(built):
    from logstore.log.producer_snapshot import ProducerSnapshots

    rules = ProducerSnapshots(built.fs, built.dir, [], False)
    table = SizedTable()
    rules.on_roll(10, table)
    rules.on_close(10, table)
    rules.on_log_start_moved(10)
    assert list_snapshots(built.fs, built.dir) == []  # no producer batch: no file, ever
    built.plain()
    rules.before_producer_batch(built.end, table)  # rule 1: flagged, before the batch
    first = built.txn(7)
    table.on_batch(*next(iter_producer_batches(built.segments, first, built.end)))
    rules.before_producer_batch(built.end, table)  # the newest is flagged: nothing more
    assert list_snapshots(built.fs, built.dir) == [first] and rules.newest_flagged
    assert read_snapshot(built.fs, built.dir, first).batches_follow
    built.roll()
    rules.on_roll(built.end, table)  # rule 2: exact state at the new base
    roll = built.end
    assert rules.offsets == [first, roll] and not rules.newest_flagged
    snapshot = read_snapshot(built.fs, built.dir, roll)
    assert not snapshot.batches_follow and list(snapshot.entries) == list(table.entries())
    rules.on_close(roll, table)  # nothing appended since: no trace
    assert os.path.getmtime(os.path.join(built.dir, snapshot_file_name(roll))) and rules.offsets == [first, roll]
    built.plain()
    rules.on_roll(built.end, table)  # a state to keep: at every roll
    third = built.end
    rules.before_producer_batch(third, table)  # same offset: becomes flagged
    assert rules.offsets == [first, roll, third] and rules.newest_flagged
    rules.on_close(third, table)
    assert not read_snapshot(built.fs, built.dir, third).batches_follow
    rules.on_log_start_moved(roll)  # keep the newest at or below the start
    assert rules.offsets == [roll, third] == list_snapshots(built.fs, built.dir)
    fresh = SizedTable()
    rules.reload(built.segments, fresh, log_start_offset=0, log_end_offset=roll, problems=[])
    assert rules.offsets == [roll] == list_snapshots(built.fs, built.dir)
    assert list(fresh.entries()) == list(table.entries())
