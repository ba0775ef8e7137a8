"""Transactions in the log layer: the producer-state checks of each append (Kafka's rules), markers,
the last stable offset, the aborted transactions of a range, and every read path at both isolation
levels (markers never returned; read_committed stops at the LSO and drops aborted data; a reader is
never left at a marker)."""

from __future__ import annotations

import threading

import pytest

from logstore import LogManager, ManualClock, Record
from logstore.errors import InvalidProducerEpochError, InvalidTxnStateError, TransactionCoordinatorFencedError
from logstore.log.producer_state import CompletedTxn, ProducerEntry, ProducerStateTable
from logstore.log.txn_index import AbortedTxn
from logstore.records.batching import ProducerBatch
from logstore.records.control import Marker

T0 = 1_700_000_000_000
RC, RU = "read_committed", "read_uncommitted"


def rec(tag: str, i: int = 0) -> Record:
    return Record(f"{tag}-{i}".encode(), f"value-{tag}-{i}".encode(), (), T0 + i)


def txn(pid: int, epoch: int = 0, seq: int = 0) -> ProducerBatch:
    return ProducerBatch(pid, epoch, seq, transactional=True)


def values(records) -> list[bytes]:
    return [record.value for record in records]


@pytest.fixture
def store(tmp_path):
    with LogManager([str(tmp_path)], clock=ManualClock(T0)) as store:
        store.create_topic("t", 1)
        yield store


@pytest.fixture
def log(store):
    return store.get_log("t", 0)


# --- producer state: the rules of each append ---------------------------------------------------


def test_a_transactional_batch_opens_a_transaction_at_its_base_offset(log):
    log.append([rec("plain")])
    info = log.append([rec("a", 0), rec("a", 1)], producer=txn(7))
    assert (info.first_offset, info.last_offset) == (1, 2)
    assert log.producer_state.open_transaction(7) == 1
    assert log.first_unstable_offset == 1 and log.last_stable_offset == 1 and log.log_end_offset == 3
    log.append([rec("a", 2)], producer=txn(7, seq=2))  # the same transaction: its first offset stays
    assert log.producer_state.open_transaction(7) == 1
    (entry,) = log.producer_state.entries()
    assert entry == ProducerEntry(7, 0, -1, 3, T0 + 2, 1)


def test_data_with_an_older_epoch_is_refused_and_nothing_is_appended(log):
    log.append([rec("a")], producer=txn(7, epoch=3))
    for producer in (txn(7, epoch=2), ProducerBatch(7, 1, 0, transactional=False)):
        with pytest.raises(InvalidProducerEpochError):
            log.append([rec("old")], producer=producer)
    assert log.log_end_offset == 1
    log.append([rec("b")], producer=txn(7, epoch=4))  # a newer epoch is taken
    assert log.producer_state.entry(7).epoch == 4


def test_a_non_transactional_batch_while_the_transaction_is_open_is_refused(log):
    log.append([rec("a")], producer=txn(7))
    with pytest.raises(InvalidTxnStateError):
        log.append([rec("idempotent")], producer=ProducerBatch(7, 0, 1, transactional=False))
    assert log.log_end_offset == 1
    log.append([rec("other")], producer=ProducerBatch(8, 0, 0, transactional=False))  # another producer may
    log.append_marker(7, 0, 0, commit=True)
    log.append([rec("after")], producer=ProducerBatch(7, 0, 1, transactional=False))  # closed: allowed now
    assert log.log_end_offset == 4


def test_prepared_appends_are_checked_when_appended(log):
    log.append([rec("a")], producer=txn(7, epoch=2))
    prepared = log.prepare([rec("old")], producer=txn(7, epoch=1))  # encoding checks nothing about state
    with pytest.raises(InvalidProducerEpochError):
        log.append_prepared(prepared)
    with pytest.raises(TypeError):
        log.prepare([rec("x")], producer=(7, 0, 0))


def test_marker_epoch_and_coordinator_epoch_checks(log):
    log.append([rec("a")], producer=txn(7, epoch=5))
    log.append_marker(7, 5, 3, commit=True)
    log.append([rec("b")], producer=txn(7, epoch=5))
    end = log.log_end_offset
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(7, 4, 3, commit=False)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_marker(7, 5, 2, commit=False)
    assert log.log_end_offset == end and log.producer_state.open_transaction(7) == 2
    # A higher epoch is allowed (a timeout or fencing abort) and installs itself.
    offset = log.append_marker(7, 6, 4, commit=False)
    assert offset == end and log.producer_state.open_transaction(7) is None
    entry = log.producer_state.entry(7)
    assert (entry.epoch, entry.coordinator_epoch, entry.last_offset, entry.txn_first_offset) == (6, 4, end, -1)
    with pytest.raises(InvalidProducerEpochError):
        log.append([rec("zombie")], producer=txn(7, epoch=5))


def test_markers_close_transactions_and_aborts_are_listed_once(log):
    log.append([rec("a", 0), rec("a", 1)], producer=txn(7))
    abort_at = log.append_marker(7, 0, 0, commit=False)
    assert abort_at == 2 and log.last_stable_offset == 3 and log.first_unstable_offset is None
    assert log.aborted_transactions(0, 3) == [AbortedTxn(7, 0)]
    # A resent marker (the coordinator retrying) is appended but completes nothing: no second entry.
    again = log.append_marker(7, 0, 0, commit=False)
    assert again == 3 and log.aborted_transactions(0, 10) == [AbortedTxn(7, 0)]
    log.append([rec("c")], producer=txn(7))
    log.append_marker(7, 0, 0, commit=True)
    assert log.aborted_transactions(0, 10) == [AbortedTxn(7, 0)]  # a commit is not listed
    assert log.last_stable_offset == log.log_end_offset == 6


def test_the_table_reports_completed_transactions_and_expires_idle_producers():
    table = ProducerStateTable()
    table.on_data(1, 0, True, 10, 12, T0, publish=True)
    table.on_data(2, 0, True, 13, 13, T0, publish=True)
    assert table.first_unstable_offset == 10
    assert table.on_marker(1, 0, 0, False, 14, T0, publish=False) == CompletedTxn(1, 10, 14, True)
    assert table.first_unstable_offset == 10  # not yet published
    table.publish_first_unstable()
    assert table.first_unstable_offset == 13
    assert table.on_marker(3, 0, 0, True, 15, T0) is None  # no open transaction: nothing completed
    table.on_data(4, 0, False, 16, 16, T0 + 5000)
    assert sorted(table.expire(T0 + 1000, 1000)) == [1, 3]  # 2 holds a transaction, 4 is recent
    assert [entry.producer_id for entry in table.entries()] == [2, 4]


# --- the last stable offset and read_committed ----------------------------------------------------


def test_an_open_transaction_blocks_read_committed_readers_at_its_first_offset(log):
    log.append([rec("before")])
    log.append([rec("t", 0), rec("t", 1)], producer=txn(7))  # offsets 1, 2
    log.append([rec("plain-after")])  # offset 3: decided, but behind the open transaction
    assert log.last_stable_offset == 1
    assert values(log.read(0, isolation=RC)) == [b"value-before-0"]
    assert log.read(1, isolation=RC) == [] and log.read(3, isolation=RC) == []
    result = log.fetch(0, isolation=RC)
    assert (result.next_offset, result.high_watermark, result.last_stable_offset) == (1, 4, 1)
    assert values(log.read(0)) == [b"value-before-0", b"value-t-0", b"value-t-1", b"value-plain-after-0"]
    log.append_marker(7, 0, 0, commit=True)
    assert log.last_stable_offset == 5
    assert values(log.read(0, isolation=RC)) == values(log.read(0))
    assert len(log.read(0)) == 4  # the marker at 4 is never returned


def test_interleaved_producers_one_commits_one_aborts(log):
    log.append([rec("c", 0)], producer=txn(1))
    log.append([rec("a", 0)], producer=txn(2))
    log.append([rec("plain", 0)])
    log.append([rec("c", 1), rec("c", 2)], producer=txn(1, seq=1))
    log.append([rec("a", 1)], producer=txn(2, seq=1))
    log.append_marker(2, 0, 0, commit=False)
    assert log.last_stable_offset == 0  # producer 1 still open from offset 0
    log.append_marker(1, 0, 0, commit=True)
    committed = [b"value-c-0", b"value-plain-0", b"value-c-1", b"value-c-2"]
    assert values(log.read(0, isolation=RC)) == committed
    assert values(log.iter_records(isolation=RC)) == committed
    assert values(log.read(0)) == committed[:1] + [b"value-a-0"] + committed[1:] + [b"value-a-1"]
    result = log.fetch(0, isolation=RC)
    assert result.aborted == [AbortedTxn(2, 1)] and result.next_offset == log.log_end_offset
    # Record by record, following next_offset, a reader sees the same and never stalls.
    seen, offset = [], 0
    for _ in range(20):
        result = log.fetch(offset, max_records=1, isolation=RC)
        seen += result.records
        assert result.next_offset > offset or offset == log.log_end_offset
        offset = result.next_offset
        if offset == log.log_end_offset:
            break
    assert values(seen) == committed


def test_aborted_transactions_of_a_range(log):
    log.append([rec("x", 0), rec("x", 1)], producer=txn(1))  # 0-1
    log.append_marker(1, 0, 0, commit=False)  # 2
    log.append([rec("y", 0)])  # 3
    log.append([rec("z", 0)], producer=txn(2))  # 4
    log.append([rec("y", 1)])  # 5
    log.append_marker(2, 0, 0, commit=False)  # 6
    log.append([rec("w", 0)], producer=txn(3))  # 7
    log.append_marker(3, 0, 0, commit=False)  # 8
    assert log.aborted_transactions(0, 9) == [AbortedTxn(1, 0), AbortedTxn(2, 4), AbortedTxn(3, 7)]
    assert log.aborted_transactions(3, 9) == [AbortedTxn(2, 4), AbortedTxn(3, 7)]  # wholly before: left out
    assert log.aborted_transactions(5, 6) == [AbortedTxn(2, 4)]  # straddling the start: in
    assert log.aborted_transactions(0, 4) == [AbortedTxn(1, 0)]  # starting after the range: out
    assert values(log.read(0, isolation=RC)) == [b"value-y-0", b"value-y-1"]
    assert values(log.read(5, isolation=RC)) == [b"value-y-1"]
    result = log.fetch(3, max_records=1, isolation=RC)
    # The read passed the aborted batch at 4 after its limit: the next read starts at 5, and the
    # transaction it passed is reported.
    assert values(result.records) == [b"value-y-0"] and result.next_offset == 5
    assert result.aborted == [AbortedTxn(2, 4)]
    result = log.fetch(0, max_records=1, isolation=RC)
    assert values(result.records) == [b"value-y-0"] and result.next_offset == 5
    assert result.aborted == [AbortedTxn(1, 0), AbortedTxn(2, 4)]
    result = log.fetch(4, isolation=RC)
    assert values(result.records) == [b"value-y-1"] and result.next_offset == 9
    assert result.aborted == [AbortedTxn(2, 4), AbortedTxn(3, 7)]


def test_an_aborted_transaction_spanning_segments_is_reported_from_its_first_segment(log):
    log.append([rec("a", 0)], producer=txn(9))
    log.roll()
    log.append([rec("plain")])
    log.append([rec("a", 1)], producer=txn(9, seq=1))
    log.append_marker(9, 0, 0, commit=False)
    assert len(log.segments) == 2
    assert log.fetch(0, isolation=RC).aborted == [AbortedTxn(9, 0)]
    assert values(log.read(0, isolation=RC)) == [b"value-plain-0"]


# --- read paths: markers are never returned ----------------------------------------------------------


def test_markers_inside_runs_of_one_record_batches(log):
    expected = []
    for i in range(300):
        log.append([rec("p", i)])  # the one-record fast path, on both sides of each marker
        expected.append(f"value-p-{i}".encode())
        if i % 10 == 3:
            log.append([rec("t", i)], producer=txn(5, seq=i))
            log.append_marker(5, 0, 0, commit=i % 20 == 3)
            if i % 20 == 3:
                expected.append(f"value-t-{i}".encode())
    everything = [record for record in log.read(0, max_bytes=1 << 30) if record.value.startswith(b"value-p")]
    assert len(everything) == 300
    assert all(record.value.startswith(b"value-") for record in log.read(0, max_bytes=1 << 30))  # no marker
    assert values(log.read(0, max_bytes=1 << 30, isolation=RC)) == expected
    assert values(log.iter_records(isolation=RC)) == expected
    assert values(record for batch, first, stop in log.iter_batch_slices(isolation=RC)
                  for record in batch.records(first, stop)) == expected
    uncommitted = values(log.iter_records())
    assert len(uncommitted) == 300 + 30 and all(value.startswith(b"value-") for value in uncommitted)
    # Small reads walk across the markers as well.
    got, offset = [], 0
    while offset < log.log_end_offset:
        result = log.fetch(offset, max_bytes=0, isolation=RC)
        got += result.records
        assert result.next_offset > offset
        offset = result.next_offset
    assert values(got) == expected


def test_a_point_read_at_a_marker_and_next_offset_past_trailing_markers(log):
    log.append([rec("a", 0)], producer=txn(1))
    marker = log.append_marker(1, 0, 0, commit=True)
    log.append([rec("b", 0)])
    assert values(log.read(marker, max_records=1)) == [b"value-b-0"]
    assert values(log.read(marker, max_bytes=0)) == [b"value-b-0"]
    log.append([rec("c", 0)], producer=txn(2))
    trailing = log.append_marker(2, 0, 0, commit=True)
    assert log.read(trailing) == [] and log.read(trailing, max_records=1) == []
    for isolation in (RU, RC):
        result = log.fetch(trailing, isolation=isolation)
        assert result.records == [] and result.next_offset == log.log_end_offset
        result = log.fetch(marker + 1, isolation=isolation)
        assert values(result.records) == [b"value-b-0", b"value-c-0"]
        assert result.next_offset == log.log_end_offset  # past the trailing marker
    result = log.fetch(0, max_records=1)
    assert values(result.records) == [b"value-a-0"] and result.next_offset == marker + 1  # past the marker


def test_iter_batches_with_control_yields_every_batch_with_its_producer_and_marker(log):
    log.append([rec("plain")])
    log.append([rec("a", 0)], producer=txn(3, epoch=2))
    log.append_marker(3, 2, 9, commit=False)
    got = [(batch.base_offset, producer and producer[:2], marker) for batch, producer, marker
           in log.iter_batches_with_control()]
    assert got == [(0, None, None), (1, (3, 2), None), (2, (3, 2), Marker(False, 9))]
    assert [batch.base_offset for batch, _, _ in log.iter_batches_with_control(2)] == [2]
    assert [(b.base_offset, first, stop) for b, first, stop in log.iter_batch_slices(include_empty=True)] == \
        [(0, 0, 1), (1, 0, 1), (2, 0, 0)]


def test_isolation_is_checked(log, store):
    for call in (lambda: log.read(0, isolation="committed"), lambda: log.fetch(0, isolation=""),
                 lambda: log.iter_records(isolation="READ_COMMITTED"), lambda: store.read("t", 0, 0, isolation=1),
                 lambda: store.fetch({("t", 0): 0}, isolation="x")):
        with pytest.raises(ValueError, match="isolation"):
            call()


def test_a_truncation_rebuilds_the_producer_state(log):
    log.append([rec("a", 0)], producer=txn(1))
    log.append([rec("b", 0)], producer=txn(2))
    marker = log.append_marker(2, 0, 0, commit=False)
    log.append_marker(1, 0, 0, commit=True)
    assert log.last_stable_offset == 4 and log.aborted_transactions(0, 4) == [AbortedTxn(2, 1)]
    log.truncate_to(marker)  # both markers gone: both transactions open again
    assert log.producer_state.open_transactions() == {1: 0, 2: 1}
    assert log.last_stable_offset == 0 and log.aborted_transactions(0, 4) == []
    assert log.read(0, isolation=RC) == []
    log.truncate_to(1)
    assert log.producer_state.open_transactions() == {1: 0} and log.last_stable_offset == 0


def test_retention_forgets_producers_whose_batches_are_gone(log):
    log.append([rec("a", 0)], producer=ProducerBatch(1, 0, 0))
    log.append([rec("b", 0)], producer=txn(2))
    log.append([rec("c", 0)])
    log.delete_records(2)
    assert [entry.producer_id for entry in log.producer_state.entries()] == [2]  # 2's transaction is open
    assert log.last_stable_offset == 2  # clamped at the log start offset


def test_the_log_manager_passes_producer_and_isolation_through(store):
    store.create_topic("two", 2)
    with pytest.raises(ValueError, match="partition"):
        store.append("two", [rec("x")], producer=txn(1))
    store.append("two", [rec("x")], 1, producer=txn(1))
    store.append("t", [rec("y")], producer=txn(4))
    log = store.get_log("two", 1)
    assert log.producer_state.open_transaction(1) == 0
    assert store.read("two", 1, 0, isolation=RC) == [] and len(store.read("two", 1, 0)) == 1
    assert store.fetch({("two", 1): 0, ("t", 0): 0}, isolation=RC) == {("two", 1): [], ("t", 0): []}
    log.append_marker(1, 0, 0, commit=True)
    results = store.fetch_results({("two", 1): 0}, isolation=RC)
    assert values(results[("two", 1)].records) == [b"value-x-0"] and results[("two", 1)].next_offset == 2


def test_a_read_committed_read_waits_for_the_lso_to_move(store, log):
    log.append([rec("a", 0)], producer=txn(1))
    assert log.read(0, min_bytes=1, max_wait_ms=1, isolation=RC) == []


def test_a_read_starting_at_an_abort_marker_still_delivers_the_next_transaction(log):
    log.append([rec("a", 0)], producer=txn(1))  # 0
    abort = log.append_marker(1, 0, 0, commit=False)  # 1
    log.append([rec("b", 0)], producer=txn(1))  # 2: the producer's next transaction
    log.append_marker(1, 0, 0, commit=True)  # 3
    result = log.fetch(abort, isolation=RC)
    assert result.aborted == [AbortedTxn(1, 0)] and values(result.records) == [b"value-b-0"]
    assert values(log.iter_records(abort, isolation=RC)) == [b"value-b-0"]


def test_idle_producers_expire_unless_their_transaction_is_open(tmp_path):
    clock = ManualClock(T0)
    with LogManager([str(tmp_path)], clock=clock, config={"producer.id.expiration.ms": 60_000}) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        log.append([Record(b"k", b"v", (), T0)], producer=ProducerBatch(1, 0, 0))
        log.append([Record(b"k", b"v", (), T0)], producer=txn(2))
        log.append([Record(b"k", b"v", (), T0 + 50_000)], producer=ProducerBatch(3, 0, 0))
        clock.advance(60_000)
        assert store.expire_producers() == 1  # 2's transaction is open; 3 is younger
        assert [entry.producer_id for entry in log.producer_state.entries()] == [2, 3]
        log.append_marker(2, 0, 0, commit=True, timestamp_ms=T0)
        clock.advance(60_000)
        assert store.expire_producers() == 2 and len(log.producer_state) == 0


def test_a_read_committed_wait_is_answered_by_the_marker_not_by_undecided_data(log):
    from logstore.log.waits import FetchPosition

    log.append([rec("plain")])
    committed, uncommitted = FetchPosition.at(log, 1, 0, committed=True), FetchPosition.at(log, 1, 0)
    log.append([rec("t", 0)], producer=txn(1))
    assert uncommitted.available_bytes() > 0 and committed.available_bytes() == 0
    log.append_marker(1, 0, 0, commit=True)
    assert committed.available_bytes() > 0
    # A waiting read_committed read: answered with the records once the marker decides them.
    log.append([rec("t", 1)], producer=txn(1))
    found: list = []
    reader = threading.Thread(target=lambda: found.extend(
        log.read(3, min_bytes=1, max_wait_ms=60_000, isolation=RC)))
    reader.start()
    log.append_marker(1, 0, 0, commit=True)
    reader.join(60)
    assert values(found) == [b"value-t-1"]
