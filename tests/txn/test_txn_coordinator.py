"""Unit tests of the transaction coordinator's state machine: each API in each state, on a manual
clock and an unthreaded scheduler, with in-memory fakes of the state log and the marker writer."""

from __future__ import annotations

import pytest

from logstore.clock import ManualClock
from logstore.errors import DurabilityTimeoutError, RecordTooLargeError, StorageError
from logstore.group.formats import partition_for
from logstore.txn import errors as E
from logstore.txn.formats import TransactionState as S
from logstore.txn.config import TransactionConfig
from txn_coordinator_fakes import FakeMarkers, FakeStateLog, ProducerIds, make_coordinator

P0, P1, P2 = ("t", 0), ("t", 1), ("u", 0)


def init(c, tid="tx", timeout=60000, pid=-1, epoch=-1):
    result = c.init_producer_id(tid, timeout, pid, epoch)
    assert result.error_code == E.NONE, result
    return result.producer_id, result.producer_epoch


def state(c, tid="tx"):
    return c.transactions[tid].state


# --- InitProducerId ------------------------------------------------------------------------------

def test_init_new_id_gets_a_producer_id_at_epoch_0_and_writes_empty():
    log = FakeStateLog()
    c = make_coordinator(log)
    pid, epoch = init(c)
    assert (pid, epoch) == (1000, 0)
    value = log.last("tx")
    assert (value.state, value.producer_id, value.producer_epoch, value.transaction_timeout_ms) == (S.EMPTY, 1000, 0, 60000)
    assert value.partitions == () and value.start_timestamp_ms == -1


def test_init_again_bumps_the_epoch_and_fences_the_older_instance():
    c = make_coordinator()
    pid, e0 = init(c)
    _, e1 = init(c)
    assert e1 == e0 + 1
    assert c.add_partitions("tx", pid, e0, [P0]) == {P0: E.PRODUCER_FENCED}
    assert c.add_offsets("tx", pid, e0, "g") == E.PRODUCER_FENCED
    assert c.end_txn("tx", pid, e0, True) == E.PRODUCER_FENCED
    assert c.add_partitions("tx", pid, e1, [P0]) == {P0: E.NONE}


def test_init_without_transactional_id_is_idempotent_only():
    log = FakeStateLog()
    c = make_coordinator(log)
    assert c.init_producer_id(None, 0) == (E.NONE, 1000, 0)
    assert c.init_producer_id(None, 0) == (E.NONE, 1001, 0)
    assert log.records == []


@pytest.mark.parametrize("timeout", [0, -1, 900001])
def test_init_refuses_a_timeout_out_of_range(timeout):
    c = make_coordinator()
    assert c.init_producer_id("tx", timeout).error_code == E.INVALID_TRANSACTION_TIMEOUT
    assert c.init_producer_id("tx", 900000).error_code == E.NONE


def test_max_timeout_is_a_setting():
    c = make_coordinator(config={"transaction.max.timeout.ms": 1000})
    assert c.init_producer_id("tx", 1001).error_code == E.INVALID_TRANSACTION_TIMEOUT
    assert c.init_producer_id("tx", 1000).error_code == E.NONE


def test_init_invalid_requests():
    c = make_coordinator()
    assert c.init_producer_id("", 1000).error_code == E.INVALID_REQUEST
    assert c.init_producer_id("tx", 1000, 5, -1).error_code == E.INVALID_REQUEST
    assert c.init_producer_id("tx", 1000, -1, 3).error_code == E.INVALID_REQUEST
    with pytest.raises(TypeError):
        c.init_producer_id("tx", "1000")


def test_kip360_bump_with_the_current_epoch_then_a_lost_response_retry_then_an_older_epoch():
    c = make_coordinator()
    pid, e0 = init(c)
    init(c)  # e1, a new instance
    pid, e1 = c.transactions["tx"].producer_id, c.transactions["tx"].producer_epoch
    assert c.init_producer_id("tx", 60000, pid, e1) == (E.NONE, pid, e1 + 1)
    # The answer was lost; the same request again gets the same answer, no new bump.
    assert c.init_producer_id("tx", 60000, pid, e1) == (E.NONE, pid, e1 + 1)
    assert c.init_producer_id("tx", 60000, pid, e0).error_code == E.PRODUCER_FENCED
    assert c.init_producer_id("tx", 60000, pid + 77, e1 + 1).error_code == E.PRODUCER_FENCED


def test_epoch_exhaustion_rotates_to_a_new_producer_id_and_a_retry_is_accepted():
    log = FakeStateLog()
    c = make_coordinator(log)
    pid, _ = init(c)
    c.transactions["tx"].producer_epoch = 32766  # as if bumped that often
    assert c.init_producer_id("tx", 60000, pid, 32766) == (E.NONE, 1001, 0)
    assert log.last("tx").previous_producer_id == pid
    # The answer was lost: the old producer's retry is recognised.
    assert c.init_producer_id("tx", 60000, pid, 32766) == (E.NONE, 1001, 0)
    assert c.init_producer_id("tx", 60000, pid, 5).error_code == E.PRODUCER_FENCED


def test_epoch_exhaustion_without_expected_epoch_rotates_too():
    c = make_coordinator()
    pid, _ = init(c)
    c.transactions["tx"].producer_epoch = 32766
    assert c.init_producer_id("tx", 60000) == (E.NONE, 1001, 0)


def test_init_on_an_open_transaction_fences_aborts_and_answers_concurrent_then_epoch_plus_2():
    markers = FakeMarkers()
    log = FakeStateLog()
    c = make_coordinator(log, markers)
    pid, e = init(c)
    c.add_partitions("tx", pid, e, [P0, P1])
    assert c.init_producer_id("tx", 60000).error_code == E.CONCURRENT_TRANSACTIONS
    assert log.last("tx").state == S.PREPARE_ABORT and log.last("tx").producer_epoch == e + 1
    assert c.init_producer_id("tx", 60000).error_code == E.CONCURRENT_TRANSACTIONS  # markers not written yet
    assert c.end_txn("tx", pid, e, True) == E.PRODUCER_FENCED  # the zombie
    markers.complete_all()
    assert state(c) == S.COMPLETE_ABORT
    assert sorted(markers.written) == [(P0, pid, e + 1, False), (P1, pid, e + 1, False)]
    assert c.init_producer_id("tx", 60000) == (E.NONE, pid, e + 2)


# --- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------------

def test_add_partitions_opens_the_transaction_and_starts_its_clock():
    clock = ManualClock()
    log = FakeStateLog()
    c = make_coordinator(log, clock=clock)
    pid, e = init(c)
    clock.advance(500)
    assert c.add_partitions("tx", pid, e, [P0]) == {P0: E.NONE}
    value = log.last("tx")
    assert value.state == S.ONGOING and value.partitions == (P0,) and value.start_timestamp_ms == clock.time_ms()
    start = value.start_timestamp_ms
    clock.advance(100)
    assert c.add_partitions("tx", pid, e, [P2, P1]) == {P1: E.NONE, P2: E.NONE}
    assert log.last("tx").partitions == (P0, P1, P2) and log.last("tx").start_timestamp_ms == start


def test_add_partitions_already_in_the_transaction_writes_nothing():
    log = FakeStateLog()
    c = make_coordinator(log)
    pid, e = init(c)
    c.add_partitions("tx", pid, e, [P0, P1])
    count = len(log.records)
    assert c.add_partitions("tx", pid, e, [P1]) == {P1: E.NONE}
    assert len(log.records) == count


def test_add_partitions_producer_checks():
    c = make_coordinator()
    assert c.add_partitions("nope", 1, 0, [P0]) == {P0: E.INVALID_PRODUCER_ID_MAPPING}
    pid, e = init(c)
    assert c.add_partitions("tx", pid + 1, e, [P0]) == {P0: E.INVALID_PRODUCER_ID_MAPPING}
    assert c.add_partitions("tx", pid, e + 1, [P0]) == {P0: E.PRODUCER_FENCED}
    assert c.add_partitions("", pid, e, [P0]) == {P0: E.INVALID_REQUEST}
    with pytest.raises(ValueError):
        c.add_partitions("tx", pid, e, [("t", -1)])


def test_add_offsets_adds_the_groups_consumer_offsets_partition():
    log = FakeStateLog()
    c = make_coordinator(log)
    pid, e = init(c)
    assert c.add_offsets("tx", pid, e, "my-group") == E.NONE
    assert log.last("tx").partitions == (("__consumer_offsets", partition_for("my-group", 50)),)


def test_add_partitions_while_prepared_is_concurrent_and_after_completion_starts_a_new_transaction():
    clock = ManualClock()
    markers = FakeMarkers()
    log = FakeStateLog()
    c = make_coordinator(log, markers, clock=clock)
    pid, e = init(c)
    c.add_partitions("tx", pid, e, [P0])
    assert c.end_txn("tx", pid, e, True) == E.NONE
    assert c.add_partitions("tx", pid, e, [P1]) == {P1: E.CONCURRENT_TRANSACTIONS}
    markers.complete_all()
    clock.advance(1000)
    assert c.add_partitions("tx", pid, e, [P1]) == {P1: E.NONE}
    assert log.last("tx").partitions == (P1,) and log.last("tx").start_timestamp_ms == clock.time_ms()


def test_verify_partitions():
    c = make_coordinator()
    pid, e = init(c)
    c.add_partitions("tx", pid, e, [P0])
    assert c.verify_partitions("tx", pid, e, [P0, P1]) == {P0: E.NONE, P1: E.TRANSACTION_ABORTABLE}
    assert c.verify_partitions("tx", pid, e - 1, [P0]) == {P0: E.PRODUCER_FENCED}


# --- EndTxn --------------------------------------------------------------------------------------

def test_commit_writes_prepare_then_markers_then_complete():
    markers = FakeMarkers()
    log = FakeStateLog()
    c = make_coordinator(log, markers)
    pid, e = init(c)
    c.add_partitions("tx", pid, e, [P0, P2])
    assert c.end_txn("tx", pid, e, True) == E.NONE
    # answered once PrepareCommit is durable, before any marker
    assert log.last("tx").state == S.PREPARE_COMMIT and log.last("tx").partitions == (P0, P2)
    assert markers.written == [] and len(markers.pending) == 1
    markers.complete_all()
    assert sorted(markers.written) == [(P0, pid, e, True), (P2, pid, e, True)]
    assert log.last("tx").state == S.COMPLETE_COMMIT and log.last("tx").partitions == ()


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_retries_and_the_other_outcome(commit):
    markers = FakeMarkers()
    c = make_coordinator(markers=markers)
    pid, e = init(c)
    assert c.end_txn("tx", pid, e, commit) == E.INVALID_TXN_STATE  # Empty
    c.add_partitions("tx", pid, e, [P0])
    assert c.end_txn("tx", pid, e, commit) == E.NONE
    assert c.end_txn("tx", pid, e, commit) == E.CONCURRENT_TRANSACTIONS  # prepared, markers pending
    assert c.end_txn("tx", pid, e, not commit) == E.INVALID_TXN_STATE
    markers.complete_all()
    assert c.end_txn("tx", pid, e, commit) == E.NONE  # idempotent retry
    assert c.end_txn("tx", pid, e, not commit) == E.INVALID_TXN_STATE
    assert state(c) == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)


def test_end_txn_producer_checks():
    c = make_coordinator()
    assert c.end_txn("nope", 1, 0, True) == E.INVALID_PRODUCER_ID_MAPPING
    pid, e = init(c)
    assert c.end_txn("tx", pid + 1, e, True) == E.INVALID_PRODUCER_ID_MAPPING
    assert c.end_txn("tx", pid, e + 1, True) == E.PRODUCER_FENCED
    with pytest.raises(TypeError):
        c.end_txn("tx", pid, e, 1)


def test_requests_during_a_pending_transition_get_concurrent_transactions():
    log = FakeStateLog()
    c = make_coordinator(log)
    pid, e = init(c)
    c.add_partitions("tx", pid, e, [P0])
    seen = []
    # Inside the PrepareCommit append (the fsync has not returned yet):
    log.during_append = lambda: seen.extend([
        c.add_partitions("tx", pid, e, [P1])[P1], c.end_txn("tx", pid, e, True),
        c.init_producer_id("tx", 1000).error_code, c.describe_transactions(["tx"])[0].state])
    assert c.end_txn("tx", pid, e, True) == E.NONE
    assert seen == [E.CONCURRENT_TRANSACTIONS] * 3 + ["Ongoing"]


@pytest.mark.parametrize("exc, code", [(StorageError("disk"), E.NOT_COORDINATOR),
                                       (DurabilityTimeoutError("slow", 10, 5), E.COORDINATOR_NOT_AVAILABLE),
                                       (RecordTooLargeError("big"), E.UNKNOWN_SERVER_ERROR)])
def test_a_failed_prepare_append_rolls_back_and_answers_the_mapped_error(exc, code):
    log = FakeStateLog()
    markers = FakeMarkers(auto=True)
    c = make_coordinator(log, markers)
    pid, e = init(c)
    c.add_partitions("tx", pid, e, [P0])
    log.fail_next(exc)
    assert c.end_txn("tx", pid, e, True) == code
    assert state(c) == S.ONGOING and c.transactions["tx"].pending is None and markers.requests == []
    assert c.end_txn("tx", pid, e, True) == E.NONE
    assert state(c) == S.COMPLETE_COMMIT


def test_failed_init_append_leaves_the_epoch():
    log = FakeStateLog()
    c = make_coordinator(log)
    pid, e = init(c)
    log.fail_next(StorageError("disk"))
    assert c.init_producer_id("tx", 1000).error_code == E.NOT_COORDINATOR
    assert c.transactions["tx"].producer_epoch == e
    assert init(c) == (pid, e + 1)


def test_markers_retry_retriable_errors_and_drop_deleted_partitions():
    markers = FakeMarkers(auto=True)
    c = make_coordinator(markers=markers)
    pid, e = init(c)
    c.add_partitions("tx", pid, e, [P0, P1, P2])
    markers.errors = {P0: 6, P2: E.UNKNOWN_TOPIC_OR_PARTITION}  # NOT_LEADER_OR_FOLLOWER, deleted
    assert c.end_txn("tx", pid, e, True) == E.NONE
    assert state(c) == S.PREPARE_COMMIT
    assert markers.written == [(P1, pid, e, True)]
    c.scheduler.advance(100)
    assert markers.requests[-1].partitions == frozenset([P0])
    assert sorted(markers.written) == [(P0, pid, e, True), (P1, pid, e, True)]
    assert state(c) == S.COMPLETE_COMMIT


def test_a_failed_complete_append_is_retried():
    markers = FakeMarkers(auto=True)
    log = FakeStateLog()
    c = make_coordinator(log, markers)
    pid, e = init(c)
    c.add_partitions("tx", pid, e, [P0])
    original = log.append
    calls = []

    def append(tid, value):  # the PrepareCommit goes through, the first CompleteCommit fails
        calls.append(value.state)
        if value.state == S.COMPLETE_COMMIT and calls.count(S.COMPLETE_COMMIT) == 1:
            raise StorageError("disk")
        original(tid, value)
    log.append = append
    assert c.end_txn("tx", pid, e, True) == E.NONE
    assert state(c) == S.PREPARE_COMMIT
    c.scheduler.advance(100)
    assert state(c) == S.COMPLETE_COMMIT


# --- timeouts and expiration ---------------------------------------------------------------------

def test_a_timed_out_transaction_is_aborted_under_a_bumped_epoch():
    clock = ManualClock()
    markers = FakeMarkers(auto=True)
    log = FakeStateLog()
    c = make_coordinator(log, markers, clock=clock)
    pid, e = init(c, timeout=15000)
    c.scheduler.advance(60000)  # idle producer: its clock has not started
    assert state(c) == S.EMPTY
    c.add_partitions("tx", pid, e, [P0])
    c.scheduler.advance(10000)
    assert state(c) == S.ONGOING
    c.scheduler.advance(10000)  # 20 s after the first partition; scanner runs every 10 s
    assert state(c) == S.COMPLETE_ABORT
    assert markers.written == [(P0, pid, e + 1, False)]
    assert c.end_txn("tx", pid, e, True) == E.PRODUCER_FENCED
    assert c.add_partitions("tx", pid, e, [P0]) == {P0: E.PRODUCER_FENCED}
    assert init(c) == (pid, e + 2)


def test_expired_transactional_ids_are_tombstoned_and_come_back_with_a_new_producer_id():
    clock = ManualClock()
    log = FakeStateLog()
    c = make_coordinator(log, clock=clock, config={"transactional.id.expiration.ms": 60000,
                                                   "transaction.remove.expired.transaction.cleanup.interval.ms": 1000,
                                                   "transaction.max.timeout.ms": 10**9})
    pid, e = init(c, timeout=10**9)
    c.add_partitions("tx", pid, e, [P0])
    other_pid, _ = init(c, "other")
    c.scheduler.advance(120000)
    assert "other" not in c.transactions  # idle 2 min: expired
    assert log.records[-1] == ("other", None)
    assert state(c) == S.ONGOING  # an open transaction is never expired
    assert c.end_txn("tx", pid, e, False) == E.NONE
    c.scheduler.advance(59000)
    assert state(c) == S.COMPLETE_ABORT
    c.scheduler.advance(2000)
    assert "tx" not in c.transactions and log.records[-1] == ("tx", None)
    assert c.describe_transactions(["tx"])[0].error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    new_pid, epoch = init(c)
    assert new_pid not in (pid, other_pid) and epoch == 0


# --- load ----------------------------------------------------------------------------------------

def test_restart_finishes_prepared_transactions_and_keeps_open_ones_timing():
    clock = ManualClock()
    log = FakeStateLog()
    markers = FakeMarkers()
    pids = ProducerIds()
    c = make_coordinator(log, markers, clock=clock, pids=pids)
    pid, e = init(c, "a", timeout=30000)
    c.add_partitions("a", pid, e, [P0, P1])
    assert c.end_txn("a", pid, e, True) == E.NONE
    pid_b, e_b = init(c, "b", timeout=30000)
    c.add_partitions("b", pid_b, e_b, [P2])
    markers.drop_all()  # crash: the PrepareCommit is durable, no marker written
    c.shutdown()
    clock.advance(5000)

    markers2 = FakeMarkers(auto=True)
    c2 = make_coordinator(log, markers2, clock=clock, pids=pids)
    assert sorted(markers2.written) == [(P0, pid, e, True), (P1, pid, e, True)]
    assert state(c2, "a") == S.COMPLETE_COMMIT and log.last("a").state == S.COMPLETE_COMMIT
    assert c2.end_txn("a", pid, e, True) == E.NONE  # the client's retry
    assert state(c2, "b") == S.ONGOING
    c2.scheduler.advance(20000)
    assert state(c2, "b") == S.ONGOING
    c2.scheduler.advance(10000)  # 35 s after it started
    assert state(c2, "b") == S.COMPLETE_ABORT
    assert (P2, pid_b, e_b + 1, False) in markers2.written


def test_not_started_and_stopped_coordinators_answer_load_in_progress_and_not_coordinator():
    c = make_coordinator(start=False)
    assert c.init_producer_id("tx", 1000).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert c.list_transactions().error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    c.startup()
    pid, e = init(c)
    c.shutdown()
    assert c.end_txn("tx", pid, e, True) == E.NOT_COORDINATOR
    assert c.describe_transactions(["tx"])[0].error_code == E.NOT_COORDINATOR
    assert c.scheduler.tasks() == []


# --- describe / list -----------------------------------------------------------------------------

def test_describe_and_list():
    clock = ManualClock()
    c = make_coordinator(clock=clock)
    pid, e = init(c, "a", timeout=5000)
    c.add_partitions("a", pid, e, [P1, P0, P2])
    pid_b, _ = init(c, "b")
    clock.advance(10)
    a, b, missing, empty = c.describe_transactions(["a", "b", "zz", ""])
    assert a == (E.NONE, "a", "Ongoing", 5000, clock.time_ms() - 10, pid, e, {"t": [0, 1], "u": [0]})
    assert (b.state, b.start_timestamp_ms, b.topics) == ("Empty", -1, {})
    assert missing.error_code == E.TRANSACTIONAL_ID_NOT_FOUND and empty.error_code == E.INVALID_REQUEST
    assert [t.transactional_id for t in c.list_transactions().transactions] == ["a", "b"]
    listed = c.list_transactions(["Ongoing", "Bogus"])
    assert listed.unknown_state_filters == ["Bogus"] and [t.state for t in listed.transactions] == ["Ongoing"]
    assert [t.transactional_id for t in c.list_transactions(producer_id_filters=[pid_b]).transactions] == ["b"]
    assert [t.transactional_id for t in c.list_transactions(duration_filter_ms=5).transactions] == ["a"]
    assert c.list_transactions(duration_filter_ms=10).transactions == []


def test_fenced_code_downgrade_for_old_versions():
    assert E.fenced_for_version(E.PRODUCER_FENCED, "EndTxn", 1) == E.INVALID_PRODUCER_EPOCH
    assert E.fenced_for_version(E.PRODUCER_FENCED, "EndTxn", 2) == E.PRODUCER_FENCED
    assert E.fenced_for_version(E.PRODUCER_FENCED, "InitProducerId", 3) == E.INVALID_PRODUCER_EPOCH
    assert E.fenced_for_version(E.CONCURRENT_TRANSACTIONS, "AddPartitionsToTxn", 0) == E.CONCURRENT_TRANSACTIONS


def test_config_defaults_and_unknown_keys():
    config = TransactionConfig.from_properties(None)
    assert config.to_properties() == {
        "transaction.max.timeout.ms": 900000, "transactional.id.expiration.ms": 604800000,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 10000,
        "transaction.remove.expired.transaction.cleanup.interval.ms": 3600000}
    with pytest.raises(ValueError):
        TransactionConfig.from_properties({"transaction.max.timeout.msx": 1})
    with pytest.raises(ValueError):
        TransactionConfig.from_properties({"transaction.max.timeout.ms": 0})
