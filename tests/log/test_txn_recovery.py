"""Producer state across reopens (producer-state snapshots, docs/FORMAT.md 3.8): after a clean close,
a process crash or a power loss, a partition's producers, open transactions, last stable offset and
aborted transactions equal a replay of its log from scratch; the snapshot files follow their rules
(none for a partition without producer batches; flagged before the first producer batch; exact at a
roll and at a clean close; removed above a truncation and below the log start)."""

from __future__ import annotations

import os
import random

import pytest

from logstore import LogManager, ManualClock, Record
from logstore.fs import OS_FILE_SYSTEM, FileSystem
from logstore.log.producer_snapshot import list_snapshots, read_snapshot, snapshot_file_name
from logstore.log.producer_state import ProducerStateTable
from logstore.log.txn_index import AbortedTxn
from logstore.records.batching import ProducerBatch
from logstore.testing import SimulatedCrashFileSystem

T0 = 1_700_000_000_000
RC, RU = "read_committed", "read_uncommitted"
SMALL = {"segment.bytes": 600, "segment.index.bytes": 120, "index.interval.bytes": 64}


def rec(tag: str, i: int = 0) -> Record:
    return Record(f"{tag}-{i}".encode(), f"value-{tag}-{i}".encode(), (), T0 + i)


def txn(pid: int, epoch: int = 0) -> ProducerBatch:
    return ProducerBatch(pid, epoch, 0, transactional=True)


def scratch(log) -> tuple[list, int, list[AbortedTxn]]:
    """Producer entries, LSO and aborted transactions from a replay of the whole log."""
    table = ProducerStateTable()
    aborted = []
    for batch, producer, marker in log.iter_batches_with_control(log.log_start_offset, log.log_end_offset):
        if producer is not None:
            completed = table.on_batch(batch.header, producer, marker)
            if completed is not None and completed.aborted:
                aborted.append(AbortedTxn(completed.producer_id, completed.first_offset))
    first = table.first_unstable_offset
    lso = log.log_end_offset if first is None else max(first, log.log_start_offset)
    return list(table.entries()), lso, aborted


def state(log) -> tuple[list, int, list[AbortedTxn]]:
    return (list(log.producer_state.entries()), log.last_stable_offset,
            log.aborted_transactions(log.log_start_offset, log.log_end_offset))


def committed_values(log) -> list[bytes]:
    return [record.value for record in log.iter_records(isolation=RC)]


def check(log) -> None:
    assert state(log) == scratch(log)


class Store:
    def __init__(self, root: str, fs=None, config=None) -> None:
        self.root, self.fs, self.clock = root, fs, ManualClock(T0)
        self.config = config or {}
        self.store = None

    def open(self):
        kwargs = {"fs": self.fs} if self.fs is not None else {}
        self.store = LogManager([self.root], clock=self.clock, **kwargs)
        if "t" not in self.store.topics():
            self.store.create_topic("t", 1, self.config)
        return self.store.get_log("t", 0)

    def close(self) -> None:
        self.store.close()

    @property
    def dir(self) -> str:
        return os.path.join(self.root, "t-0")


def workload(log) -> None:
    """Plain data, a committed, an aborted and a still open transaction, interleaved."""
    log.append([rec("plain", i) for i in range(3)])
    log.append([rec("a", 0)], producer=txn(1))
    log.append([rec("b", 0), rec("b", 1)], producer=txn(2))
    log.append([rec("plain", 3)])
    log.append([rec("a", 1)], producer=txn(1))
    log.append_marker(1, 0, 5, commit=True)
    log.append([rec("c", 0)], producer=txn(3, epoch=2))
    log.append_marker(2, 0, 5, commit=False)
    log.append([rec("plain", 4)])


class SnapshotReads(FileSystem):
    def __init__(self) -> None:
        self.reads = 0

    def read_file(self, path: str) -> bytes:
        self.reads += path.endswith(".snapshot")
        return super().read_file(path)


def test_a_partition_without_producer_batches_writes_no_snapshot(tmp_path):
    fs = SnapshotReads()
    s = Store(str(tmp_path), fs=fs, config=SMALL)
    log = s.open()
    for i in range(40):
        log.append([rec("plain", i)])
    log.roll()
    log.truncate_to(30)
    log.delete_records(5)
    s.close()
    log = s.open()
    assert [name for name in os.listdir(s.dir) if "snapshot" in name] == []
    assert list(log.producer_state.entries()) == [] and fs.reads == 0
    assert log.last_stable_offset == log.log_end_offset
    s.close()


def test_a_flagged_snapshot_precedes_the_first_producer_batch(tmp_path):
    s = Store(str(tmp_path))
    log = s.open()
    log.append([rec("plain", i) for i in range(3)])
    assert list_snapshots(log._fs, s.dir) == []
    log.append([rec("a", 0)], producer=txn(1))
    snapshot = read_snapshot(log._fs, s.dir, 3)
    assert snapshot.batches_follow and snapshot.entries == ()
    log.append([rec("a", 1)], producer=txn(1))
    log.append_marker(1, 0, 0, commit=True)
    assert list_snapshots(log._fs, s.dir) == [3]  # one per run of producer batches, not per batch
    s.close()


def test_clean_close_and_reopen_give_the_same_state_and_open_transactions_stay_open(tmp_path):
    s = Store(str(tmp_path))
    log = s.open()
    workload(log)
    before, values = state(log), committed_values(log)
    assert log.producer_state.open_transaction(3) is not None and log.last_stable_offset < log.log_end_offset
    s.close()
    log = s.open()
    assert state(log) == before and committed_values(log) == values
    check(log)
    assert log.producer_state.open_transaction(3) == before[1]
    # The transaction is still open: its marker closes it after the reopen.
    log.append_marker(3, 2, 5, commit=True)
    assert log.last_stable_offset == log.log_end_offset
    check(log)
    s.close()
    log = s.open()
    check(log)
    s.close()


def test_the_clean_close_snapshot_is_exact_and_a_no_op_open_leaves_no_trace(tmp_path):
    s = Store(str(tmp_path))
    log = s.open()
    workload(log)
    end = log.log_end_offset
    s.close()
    path = os.path.join(s.dir, snapshot_file_name(end))
    snapshot = read_snapshot(OS_FILE_SYSTEM, s.dir, end)
    assert not snapshot.batches_follow and len(snapshot.entries) == 3
    files = {name: open(os.path.join(s.dir, name), "rb").read() for name in os.listdir(s.dir)
             if "snapshot" in name}
    mtime = os.stat(path).st_mtime_ns
    log = s.open()
    check(log)
    s.close()
    assert {name: open(os.path.join(s.dir, name), "rb").read() for name in os.listdir(s.dir)
            if "snapshot" in name} == files
    assert os.stat(path).st_mtime_ns == mtime


def test_rolls_write_exact_snapshots_at_the_new_base(tmp_path):
    s = Store(str(tmp_path), config=SMALL)
    log = s.open()
    for round_ in range(6):
        log.append([rec("t", round_)], producer=txn(1))
        for i in range(3):
            log.append([rec("plain", 10 * round_ + i)])
        log.append_marker(1, 0, 0, commit=round_ % 2 == 0)
    bases = [segment.base_offset for segment in log.segments]
    assert len(bases) > 2
    snapshots = list_snapshots(log._fs, s.dir)
    for base in bases[1:]:
        assert base in snapshots
    check(log)
    s.close()
    log = s.open()
    check(log)
    s.close()


def test_truncation_removes_later_snapshots_and_reloads(tmp_path):
    s = Store(str(tmp_path), config=SMALL)
    log = s.open()
    workload(log)
    for round_ in range(4):
        log.append([rec("d", round_)], producer=txn(4))
        log.append([rec("plain", 20 + round_)])
        log.append_marker(4, 0, 5, commit=False)
    middle = 9  # before b's ABORT marker (offset 9)
    log.truncate_to(middle)
    assert all(offset <= middle for offset in list_snapshots(log._fs, s.dir))
    check(log)
    assert log.producer_state.open_transaction(2) == 4  # its ABORT marker was cut: open again
    s.close()
    log = s.open()
    check(log)
    assert log.producer_state.open_transaction(2) == 4
    s.close()


def test_retention_keeps_the_newest_snapshot_at_or_below_the_log_start(tmp_path):
    s = Store(str(tmp_path), config=SMALL)
    log = s.open()
    for round_ in range(8):
        log.append([rec("t", round_)], producer=txn(1))
        for i in range(3):
            log.append([rec("plain", 10 * round_ + i)])
        log.append_marker(1, 0, 0, commit=round_ % 3 != 0)
    log.append([rec("open", 0)], producer=txn(9))
    start = log.segments[3].base_offset
    # What the log start keeps: the aborted transactions whose marker is at or after it (their data
    # may start below it: a replay from the new start alone could not tell them).
    expected = (log.last_stable_offset, log.aborted_transactions(start, log.log_end_offset))
    assert expected[1][0].first_offset < start
    log.delete_records(start)
    snapshots = list_snapshots(log._fs, s.dir)
    assert [offset for offset in snapshots if offset <= start] == [max(o for o in snapshots if o <= start)]
    entries = list(log.producer_state.entries())
    assert state(log) == (entries, *expected)
    s.close()
    log = s.open()
    assert log.log_start_offset == start
    assert state(log) == (entries, *expected)
    assert log.producer_state.open_transaction(9) is not None
    s.close()


@pytest.mark.parametrize("seed", range(6))
def test_process_crash_and_power_loss(tmp_path, seed):
    rng = random.Random(seed)
    fs = SimulatedCrashFileSystem()
    s = Store(str(tmp_path), fs=fs, config=SMALL)
    log = s.open()
    workload(log)
    log.flush()
    for i in range(rng.randint(1, 6)):
        pid = rng.choice([1, 2, 5])
        log.append([rec("x", i)], producer=txn(pid))
        if rng.random() < 0.4:
            log.append_marker(pid, 0, 5, commit=rng.random() < 0.5)
        if rng.random() < 0.3:
            log.flush()
    fs.crash(rng, lose_unsynced=seed % 2 == 0)
    log = s.open()
    check(log)
    files = {name: open(os.path.join(s.dir, name), "rb").read() for name in sorted(os.listdir(s.dir))}
    fs.crash(rng, lose_unsynced=False)  # a crash right after recovery: the second one finds the same
    log = s.open()
    check(log)
    assert {name: open(os.path.join(s.dir, name), "rb").read() for name in sorted(os.listdir(s.dir))} == files
    s.close()


def test_a_damaged_snapshot_is_reported_and_the_state_rebuilt(tmp_path):
    s = Store(str(tmp_path))
    log = s.open()
    workload(log)
    end = log.log_end_offset
    s.close()
    path = os.path.join(s.dir, snapshot_file_name(end))
    data = bytearray(open(path, "rb").read())
    data[9] ^= 0x40
    open(path, "wb").write(data)
    log = s.open()
    check(log)
    assert any(path in problem for problem in log.load_problems)
    s.close()


def test_a_read_only_view_follows_the_writer(tmp_path):
    s = Store(str(tmp_path))
    log = s.open()
    workload(log)
    view = LogManager([str(tmp_path)], read_only=True).get_log("t", 0)
    assert state(view) == state(log)
    log.append([rec("e", 0)], producer=txn(6))
    log.append_marker(3, 2, 5, commit=False)
    log.append_marker(6, 0, 5, commit=False)
    view.refresh()
    assert state(view) == state(log) == scratch(log)
    log.roll()
    log.append([rec("f", 0)], producer=txn(7))
    view.refresh()  # a new segment: the view reloads its segment list, then follows
    assert state(view) == state(log) == scratch(log)
    view.close()
    s.close()


def test_repair_of_a_damaged_log_reloads_and_drops_the_snapshots_above_the_cut(tmp_path):
    s = Store(str(tmp_path), config=SMALL)
    log = s.open()
    for round_ in range(6):
        log.append([rec("t", round_)], producer=txn(1))
        for i in range(3):
            log.append([rec("plain", 10 * round_ + i)])
        log.append_marker(1, 0, 0, commit=round_ % 2 == 0)
    log.append([rec("open", 0)], producer=txn(2))
    damaged_segment = log.segments[1]
    s.close()
    with open(damaged_segment.log_path, "r+b") as handle:  # a segment below the end cut short: damage
        handle.truncate(os.path.getsize(damaged_segment.log_path) - 5)
    s.store = LogManager([s.root], clock=s.clock)
    assert ("t", 0) in s.store.damaged_partitions
    before = list_snapshots(OS_FILE_SYSTEM, s.dir)
    s.store.repair("t", 0)
    log = s.store.get_log("t", 0)
    assert damaged_segment.base_offset < log.log_end_offset < log.segments[-1].base_offset + 10
    assert [offset for offset in before if offset > log.log_end_offset]  # there were some above the cut
    assert all(offset <= log.log_end_offset for offset in list_snapshots(OS_FILE_SYSTEM, s.dir))
    check(log)
    log.append([rec("after", 0)], producer=txn(3))
    check(log)
    s.close()
    log = s.open()
    check(log)
    assert log.producer_state.open_transaction(3) is not None
    s.close()


def test_a_read_only_view_of_a_plain_partition_scans_no_header_for_producers(tmp_path, monkeypatch):
    """No snapshot file = the writer never appended a producer batch: the view's refresh does not
    read the new batches' headers a second time (followers of plain topics pay nothing)."""
    from logstore.log import log as log_module
    s = Store(str(tmp_path))
    log = s.open()
    log.append([rec("a", 0)])
    view = LogManager([str(tmp_path)], read_only=True).get_log("t", 0)
    scans: list[int] = []
    real = log_module.iter_producer_batches
    monkeypatch.setattr(log_module, "iter_producer_batches",
                        lambda *args: (scans.append(1), real(*args))[1])
    log.append([rec("b", 0)])
    assert view.refresh() and scans == []
    log.append([rec("c", 0)], producer=txn(3))  # the first producer batch: its snapshot comes first
    assert view.refresh() and scans == [1]
    assert view.last_stable_offset == log.last_stable_offset == 2
    view.close()
    s.close()


def test_a_read_only_view_that_loses_a_segment_while_following_replays_on_the_next_refresh(tmp_path,
                                                                                          monkeypatch):
    """The writer removed a segment under the view's header scan (retention, a compaction swap):
    no raw OSError reaches the reader, and the next refresh replays the producers from the log start."""
    from logstore.log import log as log_module
    s = Store(str(tmp_path))
    log = s.open()
    workload(log)
    view = LogManager([str(tmp_path)], read_only=True).get_log("t", 0)
    real = log_module.iter_producer_batches
    failures = [FileNotFoundError(2, "gone")]

    def flaky(*args):
        if failures:
            raise failures.pop()
        return real(*args)

    monkeypatch.setattr(log_module, "iter_producer_batches", flaky)
    log.append([rec("e", 0)], producer=txn(6))
    assert view.refresh()  # the scan failed: the view keeps its state, marked stale
    log.append_marker(6, 0, 5, commit=False)
    assert view.refresh()
    assert state(view) == state(log) == scratch(log)
    view.close()
    s.close()
