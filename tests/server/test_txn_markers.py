"""Transactions ended through the server, down to the markers in the logs: StoreMarkerWriter on a
store (markers appended, fsynced before ``done``, offsets partitions settled with the group
coordinator, unknown partitions answered), EndTxn commit and abort end to end (the markers, the
last stable offset, what read_committed returns), the coordinator's restart (its state replayed; a
transaction found prepared is finished: a crash between the decision and the markers), the abort of
a transaction past its timeout, and zombie fencing (a second InitProducerId aborts the first
instance's transaction under a bumped epoch; the old epoch is refused by the coordinator and by the
logs). Transactional data is appended to the logs directly (the produce path has its own tests:
test_txn_wire*). Waits are bounded polls of the coordinator's state."""

from __future__ import annotations

import threading
import time

import pytest

from logstore import LogManager, Record
from logstore.clock import SYSTEM_CLOCK
from logstore.records.batching import ProducerBatch
from logstore.server.protocol import errors
from logstore.server.server import KafkaServer
from logstore.timer.scheduler import Scheduler
from logstore.txn import errors as txn_errors
from logstore.txn.formats import TransactionLogValue, TransactionState
from logstore.txn.markers import StoreMarkerWriter
from logstore.txn.metadata import MarkerRequest
from logstore.txn.state_log import TransactionStateLog
from wire_client import WireClient

INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN, DESCRIBE_TRANSACTIONS = 22, 24, 26, 65
WAIT_S = 20.0


def records(count, prefix=b"v"):
    return [Record(key=b"k%d" % i, value=prefix + b"%d" % i, timestamp_ms=1_700_000_000_000 + i)
            for i in range(count)]


def markers_of(log):
    """(offset, producer id, epoch, commit) of every marker in ``log``, in order."""
    found = []
    for batch, producer, marker in log.iter_batches_with_control():
        if marker is not None:
            found.append((batch.base_offset, producer.producer_id, producer.producer_epoch, marker.commit))
    return found


def values(log, isolation):
    return [record.value for record in log.read(0, max_bytes=1 << 20, isolation=isolation)]


def append_transactional(log, producer_id, epoch, count, prefix=b"v", sequence=0):
    return log.append(records(count, prefix), producer=ProducerBatch(producer_id, epoch, sequence, transactional=True))


# --- StoreMarkerWriter on a store ----------------------------------------------------------------


class Group:
    """A stand-in for the group coordinator's ``complete_transaction``."""

    def __init__(self):
        self.calls = []

    def complete_transaction(self, partition, producer_id, commit, marker_offset):
        self.calls.append((partition, producer_id, commit, marker_offset))


@pytest.fixture
def writer_store(tmp_path):
    with LogManager([str(tmp_path / "data")]) as store:
        store.create_topic("t", partitions=2)
        store.create_topic("__consumer_offsets", partitions=3)
        yield store


def write(writer, request):
    answered = threading.Event()
    results = {}

    def done(codes):
        results.update(codes)
        results["thread"] = threading.current_thread().name
        answered.set()

    writer(request, done)
    assert answered.wait(WAIT_S), "the marker writer never answered"
    return results


def test_markers_are_written_fsynced_and_settled_before_done(writer_store):
    store = writer_store
    group = Group()
    writer = StoreMarkerWriter(store, SYSTEM_CLOCK, store.scheduler, group)
    data = store.get_log("t", 0)
    append_transactional(data, 7, 0, 3)
    offsets_log = store.get_log("__consumer_offsets", 2)
    offsets_log.append([Record(key=b"offset-key", value=b"offset-value", timestamp_ms=1)],
                       producer=ProducerBatch(7, 0, -1, transactional=True))
    assert data.last_stable_offset == 0  # the open transaction holds readers back
    results = write(writer, MarkerRequest("tx", 7, 0, True, frozenset({("t", 0), ("t", 1), ("__consumer_offsets", 2),
                                                                        ("gone", 0), ("t", 9)}), 0))
    assert {key: code for key, code in results.items() if key != "thread"} == {
        ("t", 0): 0, ("t", 1): 0, ("__consumer_offsets", 2): 0,
        ("gone", 0): txn_errors.UNKNOWN_TOPIC_OR_PARTITION, ("t", 9): txn_errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert results["thread"] != threading.main_thread().name  # answered from the scheduler
    assert markers_of(data) == [(3, 7, 0, True)]
    assert data.recovery_point >= 4 and offsets_log.recovery_point >= 2  # fsynced before done
    assert data.last_stable_offset == data.log_end_offset == 4
    assert values(data, "read_committed") == [b"v0", b"v1", b"v2"]
    assert markers_of(store.get_log("t", 1)) == [(0, 7, 0, True)]  # a partition without data gets one too
    assert group.calls == [(2, 7, True, 1)]  # only the offsets partition, with its marker's offset


def test_an_abort_marker_hides_the_data_from_read_committed(writer_store):
    store = writer_store
    writer = StoreMarkerWriter(store, SYSTEM_CLOCK, store.scheduler)  # no group coordinator: nothing settled
    data = store.get_log("t", 1)
    append_transactional(data, 9, 2, 2, b"aborted")
    data.append(records(1, b"plain"))
    results = write(writer, MarkerRequest("tx", 9, 2, False, frozenset({("t", 1), ("__consumer_offsets", 0)}), 0))
    assert results[("t", 1)] == 0 and results[("__consumer_offsets", 0)] == 0
    assert markers_of(data) == [(3, 9, 2, False)]
    assert values(data, "read_committed") == [b"plain0"]
    assert values(data, "read_uncommitted") == [b"aborted0", b"aborted1", b"plain0"]
    assert [(txn.producer_id, txn.first_offset) for txn in data.aborted_transactions(0, 4)] == [(9, 0)]


def test_a_marker_of_an_older_epoch_stops_the_markers(writer_store):
    store = writer_store
    writer = StoreMarkerWriter(store, SYSTEM_CLOCK, store.scheduler)
    append_transactional(store.get_log("t", 0), 5, 3, 1)
    results = write(writer, MarkerRequest("tx", 5, 2, True, frozenset({("t", 0)}), 0))
    assert results[("t", 0)] == txn_errors.TRANSACTION_COORDINATOR_FENCED
    assert markers_of(store.get_log("t", 0)) == []


def test_done_is_not_called_once_the_scheduler_stopped(tmp_path):
    with LogManager([str(tmp_path / "data")]) as store:
        store.create_topic("t")
        scheduler = Scheduler(SYSTEM_CLOCK, name="test-markers")
        scheduler.startup()
        scheduler.shutdown()
        called = []
        StoreMarkerWriter(store, SYSTEM_CLOCK, scheduler)(MarkerRequest("tx", 1, 0, True, frozenset({("t", 0)}), 0),
                                                          called.append)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and store.get_log("t", 0).recovery_point < 1:
            time.sleep(0.01)
        assert called == []  # the coordinator is stopping: its successor finishes the transaction


def test_the_writer_refuses_a_bad_timeout(writer_store):
    with pytest.raises(ValueError, match="timeout_ms"):
        StoreMarkerWriter(writer_store, SYSTEM_CLOCK, writer_store.scheduler, timeout_ms=0)


# --- through the server --------------------------------------------------------------------------


def init(client, transactional_id, timeout_ms=60000, version=4):
    return client.call(INIT_PRODUCER_ID, version, {"transactional_id": transactional_id,
                                                   "transaction_timeout_ms": timeout_ms})


def add(client, transactional_id, producer_id, epoch, topic, partitions):
    response = client.call(ADD_PARTITIONS, 3, {
        "v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": producer_id,
        "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic, "partitions": partitions}]})
    return {partition["partition_error_code"] for topic in response["results_by_topic_v3_and_below"]
            for partition in topic["results_by_partition"]}


def end(client, transactional_id, producer_id, epoch, commit, version=3):
    return client.call(END_TXN, version, {"transactional_id": transactional_id, "producer_id": producer_id,
                                          "producer_epoch": epoch, "committed": commit})["error_code"]


def state_of(client, transactional_id):
    [state] = client.call(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]})["transaction_states"]
    return state


def wait_for_state(client, transactional_id, wanted, timeout_s=WAIT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        state = state_of(client, transactional_id)
        if state["transaction_state"] == wanted or time.monotonic() > deadline:
            assert state["transaction_state"] == wanted, state
            return state
        time.sleep(0.02)


@pytest.fixture
def served(tmp_path):
    with LogManager([str(tmp_path / "data")]) as store:
        store.create_topic("t", partitions=2)
        with KafkaServer(store, listen="127.0.0.1:0") as server:
            client = WireClient(server.bootstrap_servers)
            yield server, store, client
            client.close()


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_writes_the_markers_then_completes(served, commit):
    server, store, client = served
    producer = init(client, "tx")
    pid, epoch = producer["producer_id"], producer["producer_epoch"]
    assert add(client, "tx", pid, epoch, "t", [0, 1]) == {errors.NONE}
    append_transactional(store.get_log("t", 0), pid, epoch, 2)
    append_transactional(store.get_log("t", 1), pid, epoch, 1)
    assert store.get_log("t", 0).last_stable_offset == 0
    assert end(client, "tx", pid, epoch, commit) == errors.NONE
    wait_for_state(client, "tx", "CompleteCommit" if commit else "CompleteAbort")
    assert markers_of(store.get_log("t", 0)) == [(2, pid, epoch, commit)]
    assert markers_of(store.get_log("t", 1)) == [(1, pid, epoch, commit)]
    for index, count in ((0, 2), (1, 1)):
        log = store.get_log("t", index)
        assert log.last_stable_offset == log.log_end_offset == count + 1
        assert len(values(log, "read_committed")) == (count if commit else 0)
    # The same EndTxn again (a retry whose answer was lost) is answered NONE; the other outcome is not.
    assert end(client, "tx", pid, epoch, commit) == errors.NONE
    assert end(client, "tx", pid, epoch, not commit) == txn_errors.INVALID_TXN_STATE
    # The next transaction of the same producer starts afresh.
    assert add(client, "tx", pid, epoch, "t", [1]) == {errors.NONE}
    assert state_of(client, "tx")["transaction_state"] == "Ongoing"


def test_zombie_fencing_aborts_the_old_instances_transaction(served):
    server, store, client = served
    old = init(client, "tx")
    pid = old["producer_id"]
    assert add(client, "tx", pid, 0, "t", [0]) == {errors.NONE}
    append_transactional(store.get_log("t", 0), pid, 0, 2, b"zombie")
    # A new instance: the open transaction is aborted under epoch 1 first (CONCURRENT_TRANSACTIONS
    # until it is complete), then the new instance gets epoch 2.
    deadline = time.monotonic() + WAIT_S
    while (new := init(client, "tx"))["error_code"] == txn_errors.CONCURRENT_TRANSACTIONS:
        assert time.monotonic() < deadline, "the fencing abort never completed"
        time.sleep(0.02)
    assert (new["error_code"], new["producer_id"], new["producer_epoch"]) == (errors.NONE, pid, 2)
    log = store.get_log("t", 0)
    assert markers_of(log) == [(2, pid, 1, False)]
    assert values(log, "read_committed") == []
    # The zombie is refused by the coordinator (every version's code) and by the log.
    assert end(client, "tx", pid, 0, True) == txn_errors.PRODUCER_FENCED
    assert end(client, "tx", pid, 0, True, version=1) == errors.INVALID_PRODUCER_EPOCH
    assert add(client, "tx", pid, 0, "t", [1]) == {txn_errors.PRODUCER_FENCED}
    with pytest.raises(Exception) as refused:
        append_transactional(log, pid, 0, 1, b"late", sequence=2)
    assert type(refused.value).__name__ == "InvalidProducerEpochError"


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(tmp_path):
    config = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 50}
    with LogManager([str(tmp_path / "data")]) as store, \
            KafkaServer(store, listen="127.0.0.1:0", config=config) as server:
        store.create_topic("t")
        client = WireClient(server.bootstrap_servers)
        producer = init(client, "slow-tx", timeout_ms=1000)  # long enough for the appends below, on a busy machine
        pid = producer["producer_id"]
        assert add(client, "slow-tx", pid, 0, "t", [0]) == {errors.NONE}
        append_transactional(store.get_log("t", 0), pid, 0, 3)
        state = wait_for_state(client, "slow-tx", "CompleteAbort")
        assert state["producer_epoch"] == 1  # bumped: the producer that let it time out is fenced
        assert markers_of(store.get_log("t", 0)) == [(3, pid, 1, False)]
        assert end(client, "slow-tx", pid, 0, True) == txn_errors.PRODUCER_FENCED
        assert values(store.get_log("t", 0), "read_committed") == []
        client.close()


def test_a_restart_finishes_a_decided_transaction_and_keeps_an_open_one(tmp_path):
    """The crash between the decision and the markers: PrepareCommit is durable in
    ``__transaction_state`` but no marker was written. The next start writes them and completes."""
    data = str(tmp_path / "data")
    with KafkaServer([data], listen="127.0.0.1:0") as server:
        store = server.store
        store.create_topic("t", partitions=2)
        client = WireClient(server.bootstrap_servers)
        decided, still_open = init(client, "decided-tx"), init(client, "open-tx")
        assert add(client, "decided-tx", decided["producer_id"], 0, "t", [0]) == {errors.NONE}
        assert add(client, "open-tx", still_open["producer_id"], 0, "t", [1]) == {errors.NONE}
        append_transactional(store.get_log("t", 0), decided["producer_id"], 0, 2)
        append_transactional(store.get_log("t", 1), still_open["producer_id"], 0, 1)
        started_ms = state_of(client, "decided-tx")["transaction_start_time_ms"]
        client.close()
    # What a coordinator that died right after writing PrepareCommit leaves behind.
    with LogManager([data]) as store:
        TransactionStateLog(store, SYSTEM_CLOCK).append("decided-tx", TransactionLogValue(
            producer_id=decided["producer_id"], producer_epoch=0, transaction_timeout_ms=60000,
            state=TransactionState.PREPARE_COMMIT, partitions=(("t", 0),), last_update_timestamp_ms=started_ms + 1,
            start_timestamp_ms=started_ms))
    with KafkaServer([data], listen="127.0.0.1:0") as server:
        client = WireClient(server.bootstrap_servers)
        wait_for_state(client, "decided-tx", "CompleteCommit")
        log = server.store.get_log("t", 0)
        assert markers_of(log) == [(2, decided["producer_id"], 0, True)]
        assert len(values(log, "read_committed")) == 2
        opened = state_of(client, "open-tx")
        assert opened["transaction_state"] == "Ongoing" and opened["transaction_start_time_ms"] > 0
        open_log = server.store.get_log("t", 1)
        assert open_log.last_stable_offset == 0 and values(open_log, "read_committed") == []  # open in the log too
        # Its producer carries on and commits it.
        assert end(client, "open-tx", still_open["producer_id"], 0, True) == errors.NONE
        wait_for_state(client, "open-tx", "CompleteCommit")
        assert markers_of(open_log) == [(1, still_open["producer_id"], 0, True)]
        assert open_log.last_stable_offset == open_log.log_end_offset == 2
        assert len(values(open_log, "read_committed")) == 1
        client.close()


def test_describe_producers_shows_an_open_transactions_first_offset(served):
    server, store, client = served
    producer = init(client, "tx")
    pid = producer["producer_id"]
    store.get_log("t", 0).append(records(2, b"before"))
    assert add(client, "tx", pid, 0, "t", [0]) == {errors.NONE}
    append_transactional(store.get_log("t", 0), pid, 0, 3)

    def described():
        response = client.call(61, 0, {"topics": [{"name": "t", "partition_indexes": [0]}]})
        [partition] = response["topics"][0]["partitions"]
        assert partition["error_code"] == errors.NONE
        return {entry["producer_id"]: entry for entry in partition["active_producers"]}

    entry = described()[pid]
    assert (entry["producer_epoch"], entry["current_txn_start_offset"], entry["coordinator_epoch"]) == (0, 2, -1)
    assert end(client, "tx", pid, 0, True) == errors.NONE
    wait_for_state(client, "tx", "CompleteCommit")
    entry = described()[pid]
    assert (entry["current_txn_start_offset"], entry["coordinator_epoch"]) == (-1, 0)


def produce_transactional(client, transactional_id, producer_id, epoch, sequence, topic, partition, count):
    from logstore.server.wire_records import encode_produce_batch
    batch = encode_produce_batch(records(count), producer_id=producer_id, producer_epoch=epoch,
                                 base_sequence=sequence, transactional=True)
    response = client.call(0, 8, {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 10000,
                                  "topic_data": [{"name": topic, "partition_data": [{"index": partition,
                                                                                     "records": batch}]}]})
    return response["responses"][0]["partition_responses"][0]["error_code"]


def test_a_late_transactional_batch_cannot_open_a_transaction_no_one_ends(served):
    """The produce path asks this coordinator (KIP-890): a transactional batch for a partition not
    in its producer's ongoing transaction is refused, before AddPartitionsToTxn and after the
    transaction ended, so no such batch pins the last stable offset."""
    server, store, client = served
    pid = init(client, "tx")["producer_id"]
    log = store.get_log("t", 0)
    assert produce_transactional(client, "tx", pid, 0, 0, "t", 0, 2) == errors.INVALID_TXN_STATE
    assert add(client, "tx", pid, 0, "t", [0]) == {errors.NONE}
    assert produce_transactional(client, "tx", pid, 0, 0, "t", 0, 2) == errors.NONE
    assert log.last_stable_offset == 0
    assert end(client, "tx", pid, 0, True) == errors.NONE
    wait_for_state(client, "tx", "CompleteCommit")
    assert produce_transactional(client, "tx", pid, 0, 2, "t", 0, 1) == errors.INVALID_TXN_STATE  # a late batch
    assert log.last_stable_offset == log.log_end_offset == 3


def test_idle_transactional_ids_expire(tmp_path):
    config = {"transactional.id.expiration.ms": 200, "transaction.remove.expired.transaction.cleanup.interval.ms": 50}
    with LogManager([str(tmp_path / "data")]) as store, \
            KafkaServer(store, listen="127.0.0.1:0", config=config) as server:
        client = WireClient(server.bootstrap_servers)
        first = init(client, "idle-tx")
        deadline = time.monotonic() + WAIT_S
        while state_of(client, "idle-tx")["error_code"] != txn_errors.TRANSACTIONAL_ID_NOT_FOUND:
            assert time.monotonic() < deadline, "the idle transactional id never expired"
            time.sleep(0.02)
        # Forgotten for good: a new InitProducerId of the same id starts from a new producer id.
        again = init(client, "idle-tx")
        assert again["error_code"] == errors.NONE and again["producer_id"] != first["producer_id"]
        assert again["producer_epoch"] == 0
        client.close()


def test_an_aborted_transaction_stays_hidden_after_a_restart(tmp_path):
    data = str(tmp_path / "data")
    with KafkaServer([data], listen="127.0.0.1:0") as server:
        server.store.create_topic("t")
        client = WireClient(server.bootstrap_servers)
        pid = init(client, "tx")["producer_id"]
        server.store.get_log("t", 0).append(records(1, b"plain"))
        assert add(client, "tx", pid, 0, "t", [0]) == {errors.NONE}
        append_transactional(server.store.get_log("t", 0), pid, 0, 2, b"aborted")
        assert end(client, "tx", pid, 0, False) == errors.NONE
        wait_for_state(client, "tx", "CompleteAbort")
        client.close()
    with KafkaServer([data], listen="127.0.0.1:0") as server:
        log = server.store.get_log("t", 0)
        assert values(log, "read_committed") == [b"plain0"]
        assert [(txn.producer_id, txn.first_offset) for txn in log.aborted_transactions(0, log.log_end_offset)] == [
            (pid, 1)]
        client = WireClient(server.bootstrap_servers)
        assert state_of(client, "tx")["transaction_state"] == "CompleteAbort"
        client.close()


def test_the_next_transactions_first_add_waits_for_the_last_ones_completion(served):
    """EndTxn is answered before the markers are written; a producer's next AddPartitionsToTxn or
    AddOffsetsToTxn arriving meanwhile is parked until the transaction completes, not answered
    CONCURRENT_TRANSACTIONS (on which clients back off for 20 ms or more)."""
    server, store, client = served
    coordinator = server.txn_coordinator
    real_writer = coordinator.marker_writer
    gate = threading.Event()  # the markers are written once the test opens it

    def gated_writer(request, done):
        threading.Thread(target=lambda: (gate.wait(WAIT_S), real_writer(request, done)), daemon=True).start()

    def open_gate_soon():
        gate.clear()
        threading.Timer(0.01, gate.set).start()  # while the next request is parked

    coordinator.marker_writer = gated_writer
    pid = init(client, "tx")["producer_id"]
    offsets = {"transactional_id": "tx", "producer_id": pid, "producer_epoch": 0, "group_id": "g"}
    for commit in (True, False):
        gate.clear()
        assert add(client, "tx", pid, 0, "t", [0]) == {errors.NONE}
        assert end(client, "tx", pid, 0, commit) == errors.NONE
        assert state_of(client, "tx")["transaction_state"] == ("PrepareCommit" if commit else "PrepareAbort")
        open_gate_soon()
        assert add(client, "tx", pid, 0, "t", [1]) == {errors.NONE}  # answered once the last one completed
        state = state_of(client, "tx")
        assert state["transaction_state"] == "Ongoing" and {topic["topic"]: topic["partitions"]
                                                            for topic in state["topics"]} == {"t": [1]}
        gate.clear()
        assert end(client, "tx", pid, 0, commit) == errors.NONE
        open_gate_soon()
        assert client.call(25, 3, offsets)["error_code"] == errors.NONE  # AddOffsetsToTxn waits the same way
        assert state_of(client, "tx")["transaction_state"] == "Ongoing"
        gate.set()
        assert end(client, "tx", pid, 0, False) == errors.NONE
        wait_for_state(client, "tx", "CompleteAbort")


def test_a_transaction_whose_markers_do_not_come_answers_concurrent_transactions(served):
    server, store, client = served
    server.txn_coordinator.marker_writer = lambda request, done: None  # never answers
    pid = init(client, "tx")["producer_id"]
    assert add(client, "tx", pid, 0, "t", [0]) == {errors.NONE}
    assert end(client, "tx", pid, 0, True) == errors.NONE
    started = time.monotonic()
    assert add(client, "tx", pid, 0, "t", [1]) == {txn_errors.CONCURRENT_TRANSACTIONS}
    assert time.monotonic() - started < WAIT_S  # parked a bounded while, then answered
    assert state_of(client, "tx")["transaction_state"] == "PrepareCommit"
