"""Transactions through the Kafka protocol, over real sockets with the server's own codec (wire_client),
before the transaction coordinator is wired: transactional data comes from Produce requests (with a
producer id from InitProducerId and a stand-in coordinator for KIP-890's verification) or from the
store (``Log.append(producer=...)``), and markers from the store (``Log.append_marker``).

- Produce: transactional batches are appended with their producer block, verified once per
  producer and partition, retried idempotently; refused as Kafka refuses them (no transactional id:
  the whole request; a control batch; a non-transactional batch inside an open transaction; a fenced
  epoch, with the journal line taken back so a retry is not mistaken for a duplicate);
- Fetch: producer fields and Kafka's bits on the wire, markers sent as control batches, the last
  stable offset always, read_committed reading up to it with the aborted transactions of the range
  ([]; null for read_uncommitted), a parked read_committed fetch woken by the marker;
- ListOffsets: read_committed LATEST is the last stable offset; time lookups at or past it find
  nothing.
"""

from __future__ import annotations

import threading
import time

import pytest

from logstore import LogManager, Record
from logstore.errors import InvalidProducerEpochError, InvalidTxnStateError, TransactionCoordinatorFencedError
from logstore.records.batching import ProducerBatch
from logstore.server.handlers.fetch import CommittedFetchPosition
from logstore.server.protocol import errors
from logstore.server.server import KafkaServer
from logstore.server.wire_records import decode_fetch, encode_produce_batch
from logstore.server.wire_records.crc32c import crc32c
from wire_client import WireClient

PRODUCE, FETCH, LIST_OFFSETS, INIT_PRODUCER_ID = 0, 1, 2, 22
T0 = 1_700_000_000_000


class StandInCoordinator:
    """``verify_partitions`` as the transaction coordinator answers it: every call is recorded and
    answered with ``code``."""

    def __init__(self, code: int = errors.NONE) -> None:
        self.code = code
        self.calls: list[tuple] = []

    def verify_partitions(self, transactional_id, producer_id, producer_epoch, partitions):
        partitions = list(partitions)
        self.calls.append((transactional_id, producer_id, producer_epoch, partitions))
        return {partition: self.code for partition in partitions}


@pytest.fixture
def store(tmp_path):
    with LogManager([str(tmp_path / "data")]) as store:
        yield store


@pytest.fixture
def server(store):
    with KafkaServer(store, listen="127.0.0.1:0", config={"connections.max.idle.ms": 60000}) as server:
        server.broker.txn_coordinator = StandInCoordinator()
        yield server


@pytest.fixture
def client(server):
    client = WireClient(server.bootstrap_servers)
    yield client
    client.close()


def records(count, prefix=b"v"):
    return [Record(b"k%d" % i, prefix + b"%d" % i, (), T0 + i) for i in range(count)]


def fresh(count, prefix=b"v"):
    """Records timestamped at their append, as markers are (older timestamps would roll the segment
    at the marker, which answers a parked fetch for another reason)."""
    return [Record(b"k%d" % i, prefix + b"%d" % i) for i in range(count)]


def produce(client, topic, partition, batch: bytes, transactional_id="tx", more=()) -> list[dict]:
    """One Produce v8 request (``more``: other (topic, partition, batch) in it): the partition responses."""
    data: dict[str, list] = {}
    for name, index, records_ in ((topic, partition, batch), *more):
        data.setdefault(name, []).append({"index": index, "records": records_})
    response = client.call(PRODUCE, 8, {"transactional_id": transactional_id, "acks": 1, "timeout_ms": 10000,
                                        "topic_data": [{"name": name, "partition_data": parts}
                                                       for name, parts in data.items()]})
    return [partition for topic in response["responses"] for partition in topic["partition_responses"]]


def txn_batch(pid, sequence, count, epoch=0, prefix=b"t", transactional=True) -> bytes:
    return encode_produce_batch(records(count, prefix), producer_id=pid, producer_epoch=epoch,
                                base_sequence=sequence, transactional=transactional)


def fetch(client, topic, partition, offset, isolation, *, version=11, max_wait_ms=0, send_only=False):
    body = {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 50 << 20,
            "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                          "fetch_offset": offset, "log_start_offset": -1,
                                                          "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    if send_only:
        return client.send(FETCH, version, body)
    return fetched(client.call(FETCH, version, body))


def fetched(response) -> tuple[dict, list]:
    """(the partition's response, [(WireBatch, records)] as a consumer decodes them)."""
    result = response["responses"][0]["partitions"][0]
    return result, decode_fetch(bytes(result["records"] or b""))


def committed_view(batches, aborted) -> list[tuple[int, bytes]]:
    """What a read_committed consumer delivers (Kafka's client algorithm): markers never; a
    transactional batch dropped while its producer has an aborted transaction begun at or before it,
    until that producer's ABORT marker."""
    pending = sorted((entry["first_offset"], entry["producer_id"]) for entry in aborted)
    aborting: set[int] = set()
    out = []
    for header, batch_records in batches:
        while pending and pending[0][0] <= header.last_offset:
            aborting.add(pending.pop(0)[1])
        if header.is_control:
            if batch_records[0].key == b"\x00\x00\x00\x00":  # ABORT
                aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        out += [(r.offset, r.value) for r in batch_records]
    return out


def new_producer_id(client) -> int:
    response = client.call(INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": -1})
    assert response["error_code"] == errors.NONE
    return response["producer_id"]


def test_transactional_produce_is_verified_once_stored_with_its_producer_and_retried_idempotently(client, server,
                                                                                                  store):
    store.create_topic("t")
    log = store.get_log("t", 0)
    pid = new_producer_id(client)
    coordinator = server.broker.txn_coordinator
    [first] = produce(client, "t", 0, txn_batch(pid, 0, 3))
    assert first["error_code"] == errors.NONE and first["base_offset"] == 0
    assert coordinator.calls == [("tx", pid, 0, [("t", 0)])]
    assert log.producer_state.open_transaction(pid) == 0 and log.last_stable_offset == 0
    [second] = produce(client, "t", 0, txn_batch(pid, 3, 2))
    assert second["base_offset"] == 3 and len(coordinator.calls) == 1  # the open transaction needs no check
    [retry] = produce(client, "t", 0, txn_batch(pid, 0, 3))
    assert retry["error_code"] == errors.NONE and retry["base_offset"] == 0 and log.log_end_offset == 5
    stored = [batch.producer for batch, _first, _stop in log.iter_batch_slices(0, include_empty=True)]
    assert stored[0][:4] == (pid, 0, 0, True) and stored[1][:4] == (pid, 0, 3, True)
    # the wire: producer fields and the transactional bit; nothing for read_committed yet
    result, batches = fetch(client, "t", 0, 0, 0)
    assert (result["high_watermark"], result["last_stable_offset"], result["aborted_transactions"]) == (5, 0, None)
    assert [(h.producer_id, h.producer_epoch, h.base_sequence, h.attributes) for h, _ in batches] == [
        (pid, 0, 0, 0x10), (pid, 0, 3, 0x10)]
    result, batches = fetch(client, "t", 0, 0, 1)
    assert (result["high_watermark"], result["last_stable_offset"], result["aborted_transactions"], batches) == (
        5, 0, [], [])
    # the marker (as the coordinator's writer appends it) ends the transaction: all of it visible
    assert log.append_marker(pid, 0, 3, True) == 5
    result, batches = fetch(client, "t", 0, 0, 1)
    assert (result["high_watermark"], result["last_stable_offset"], result["aborted_transactions"]) == (6, 6, [])
    marker_header, [marker] = batches[-1]
    assert marker_header.attributes == 0x30 and marker_header.base_offset == 5
    assert (marker_header.producer_id, marker_header.producer_epoch, marker_header.base_sequence) == (pid, 0, -1)
    assert (marker.key, marker.value) == (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x03")
    assert committed_view(batches, []) == [(i, b"t%d" % j) for i, j in ((0, 0), (1, 1), (2, 2), (3, 0), (4, 1))]
    # a next transaction is verified again (its first batch on the partition)
    assert produce(client, "t", 0, txn_batch(pid, 5, 1))[0]["base_offset"] == 6 and len(coordinator.calls) == 2


def test_produce_refusals_have_kafkas_codes_and_leave_no_journal_line(client, server, store):
    store.create_topic("r", partitions=2)
    log = store.get_log("r", 0)
    pid = new_producer_id(client)
    # transactional batches without a transactional id: the whole request, plain partitions too
    answers = produce(client, "r", 0, txn_batch(pid, 0, 1), transactional_id=None,
                      more=[("r", 1, encode_produce_batch(records(1)))])
    assert [a["error_code"] for a in answers] == [errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] * 2
    assert store.get_log("r", 1).log_end_offset == 0 == log.log_end_offset
    # a control batch from a client
    control = bytearray(txn_batch(pid, 0, 1))
    control[22] |= 0x20
    control[17:21] = crc32c(bytes(control[21:])).to_bytes(4, "big")
    assert produce(client, "r", 0, bytes(control))[0]["error_code"] == errors.INVALID_RECORD
    # the coordinator's verification refuses: Kafka's codes for Produce clients; nothing appended
    coordinator = server.broker.txn_coordinator
    for answer, code in ((errors.TRANSACTION_ABORTABLE, errors.INVALID_TXN_STATE),
                         (errors.PRODUCER_FENCED, errors.INVALID_PRODUCER_EPOCH),
                         (errors.CONCURRENT_TRANSACTIONS, errors.NOT_ENOUGH_REPLICAS),
                         (errors.INVALID_PRODUCER_EPOCH, errors.INVALID_PRODUCER_EPOCH)):
        coordinator.code = answer
        assert produce(client, "r", 0, txn_batch(pid, 0, 2))[0]["error_code"] == code
    assert log.log_end_offset == 0
    coordinator.code = errors.NONE
    assert produce(client, "r", 0, txn_batch(pid, 0, 2))[0]["base_offset"] == 0  # sequence 0 was never journaled
    # a non-transactional batch of the producer while its transaction is open
    plain = encode_produce_batch(records(1), producer_id=pid, producer_epoch=0, base_sequence=2)
    answer = produce(client, "r", 0, plain)[0]
    assert answer["error_code"] == errors.INVALID_TXN_STATE and "transaction open" in answer["error_message"]
    assert log.log_end_offset == 2
    # a timeout abort bumps the epoch with its marker: the old epoch is fenced by the log, and the
    # refused batch's journal line is taken back (its retry is refused again, not "a duplicate")
    log.append_marker(pid, 1, 0, False)
    for _attempt in range(2):
        assert produce(client, "r", 0, txn_batch(pid, 2, 1))[0]["error_code"] == errors.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 3
    # with the transaction ended, the plain batch the producer was refused is taken (new epoch, sequence 0)
    plain = encode_produce_batch(records(1), producer_id=pid, producer_epoch=1, base_sequence=0)
    assert produce(client, "r", 0, plain)[0]["base_offset"] == 3


def test_the_log_refusals_map_to_kafkas_codes():
    assert errors.error_code_for(InvalidProducerEpochError("e")) == errors.INVALID_PRODUCER_EPOCH == 47
    assert errors.error_code_for(InvalidTxnStateError("s")) == errors.INVALID_TXN_STATE == 48
    assert errors.error_code_for(TransactionCoordinatorFencedError("c")) == errors.TRANSACTION_COORDINATOR_FENCED == 52


def fill_transactions(log, pids=(901, 902, 903)):
    """0-1 plain, 2-3 pid1 (aborted), 4 plain, 5 ABORT pid1, 6-7 pid2, 8 COMMIT pid2, 9 pid3 (open),
    10 plain: the last stable offset is 9, the end 11."""
    one, two, three = pids
    log.append(records(2, b"a"))
    log.append(records(2, b"x"), producer=ProducerBatch(one, 0, 0, True))
    log.append([Record(b"k", b"a2", (), T0)])
    assert log.append_marker(one, 0, 0, False) == 5
    log.append(records(2, b"c"), producer=ProducerBatch(two, 0, 0, True))
    assert log.append_marker(two, 0, 0, True) == 8
    log.append([Record(b"k", b"o0", (), T0)], producer=ProducerBatch(three, 0, 0, True))
    log.append([Record(b"k", b"a3", (), T0)])
    assert (log.last_stable_offset, log.log_end_offset) == (9, 11)


def test_read_committed_fetches_stop_at_the_last_stable_offset_with_the_aborted_transactions(client, store):
    store.create_topic("f")
    log = store.get_log("f", 0)
    fill_transactions(log)
    result, batches = fetch(client, "f", 0, 0, 0)
    assert (result["high_watermark"], result["last_stable_offset"], result["aborted_transactions"]) == (11, 9, None)
    assert [r.value for _h, rs in batches for r in rs if not _h.is_control] == [
        b"a0", b"a1", b"x0", b"x1", b"a2", b"c0", b"c1", b"o0", b"a3"]
    assert [h.base_offset for h, _ in batches if h.is_control] == [5, 8]
    result, batches = fetch(client, "f", 0, 0, 1)
    assert (result["high_watermark"], result["last_stable_offset"]) == (11, 9)
    assert result["aborted_transactions"] == [{"producer_id": 901, "first_offset": 2}]
    assert batches[-1][0].next_offset == 9  # nothing at or past the last stable offset
    assert committed_view(batches, result["aborted_transactions"]) == [
        (0, b"a0"), (1, b"a1"), (4, b"a2"), (6, b"c0"), (7, b"c1")]
    # from past the aborted transaction's marker, nothing to drop; at or past the stable offset, nothing
    assert fetch(client, "f", 0, 6, 1)[0]["aborted_transactions"] == []
    for offset in (9, 10, 11):
        result, batches = fetch(client, "f", 0, offset, 1)
        assert (result["error_code"], batches, result["aborted_transactions"]) == (errors.NONE, [], [])
    # an older fetch version (v4, the first with isolation) has the same fields
    result, _batches = fetch(client, "f", 0, 0, 1, version=4)
    assert result["last_stable_offset"] == 9 and result["aborted_transactions"] == [
        {"producer_id": 901, "first_offset": 2}]
    # the open transaction commits: everything but the aborted data is visible
    log.append_marker(903, 0, 0, True)
    result, batches = fetch(client, "f", 0, 0, 1)
    assert (result["high_watermark"], result["last_stable_offset"]) == (12, 12)
    assert [v for _o, v in committed_view(batches, result["aborted_transactions"])] == [
        b"a0", b"a1", b"a2", b"c0", b"c1", b"o0", b"a3"]


def test_list_offsets_read_committed_answers_the_last_stable_offset(client, store):
    store.create_topic("l")
    log = store.get_log("l", 0)
    log.append([Record(b"k", b"v%d" % i, (), T0 + i) for i in range(3)])
    log.append([Record(b"k", b"t", (), T0 + 10)], producer=ProducerBatch(77, 0, 0, True))
    log.append([Record(b"k", b"after", (), T0 + 20)])

    def lookup(timestamp, isolation, version=7):
        response = client.call(LIST_OFFSETS, version, {"replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": "l", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]})
        result = response["topics"][0]["partitions"][0]
        return result["error_code"], result["offset"], result["timestamp"]

    assert lookup(-1, 0) == (0, 5, -1) and lookup(-1, 1) == (0, 3, -1)
    assert lookup(-2, 1) == (0, 0, -1)
    assert lookup(T0 + 1, 1) == lookup(T0 + 1, 0) == (0, 1, T0 + 1)
    assert lookup(T0 + 10, 0) == (0, 3, T0 + 10) and lookup(T0 + 10, 1) == (0, -1, -1)
    assert lookup(T0 + 15, 0) == (0, 4, T0 + 20) and lookup(T0 + 15, 1) == (0, -1, -1)
    assert lookup(-3, 0) == (0, 4, T0 + 20) and lookup(-3, 1) == (0, -1, -1)  # max timestamp, past the LSO
    log.append_marker(77, 0, 0, True)
    assert lookup(-1, 1) == (0, 6, -1) and lookup(T0 + 15, 1) == (0, 4, T0 + 20)


def test_a_read_committed_position_counts_bytes_only_once_the_stable_offset_passes_it(store):
    store.create_topic("w")
    log = store.get_log("w", 0)

    log.append(fresh(1, b"v"))
    log.append(fresh(2, b"t"), producer=ProducerBatch(5, 0, 0, True))
    position = CommittedFetchPosition.at(log, 1)
    log.append(fresh(2, b"u"), producer=ProducerBatch(5, 0, 2, True))  # the open transaction grows
    log.append(fresh(1, b"p"))  # and others append behind it
    assert position.available_bytes() == 0
    log.append_marker(5, 0, 0, False)
    assert position.available_bytes() > 0


def test_a_parked_read_committed_fetch_is_answered_when_the_marker_lands(server, store):
    store.create_topic("p")
    log = store.get_log("p", 0)
    log.append(fresh(2, b"t"), producer=ProducerBatch(5, 0, 0, True))
    client = WireClient(server.bootstrap_servers)
    try:
        started = time.monotonic()
        fetch_id = fetch(client, "p", 0, 0, 1, max_wait_ms=8000, send_only=True)
        marker = threading.Timer(0.2, log.append_marker, (5, 0, 0, True))
        marker.start()
        got_id, response = client.receive(FETCH, 11)
        marker.join()
        assert got_id == fetch_id and time.monotonic() - started < 7
        result, batches = fetched(response)
        assert result["last_stable_offset"] == 3 and result["aborted_transactions"] == []
        assert [r.value for _h, rs in batches for r in rs][:2] == [b"t0", b"t1"]
    finally:
        client.close()
