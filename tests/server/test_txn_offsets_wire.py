"""TxnOffsetCommit (API 28) on the wire, and its ACLs.

Raw requests (wire_client against a KafkaServer bound to 127.0.0.1): every version 0-4 is served
and advertised, v0-2 without member fields and v3+ (flexible) with KIP-447's checks answered per
partition, unknown topics and partitions refused alone, the offsets invisible to OffsetFetch until
the producer's COMMIT marker on the group's ``__consumer_offsets`` partition (written here through
the store as the transaction coordinator's marker writer does) and dropped by an ABORT. The ACL rule
(Kafka's order: WRITE on the transactional id, READ on the group, READ on each topic) is checked
against a stand-in authorizer with the server's own codec.
"""

from __future__ import annotations

import pytest

from logstore import LogManager
from logstore.group.coordinator import GroupCoordinator
from logstore.group.formats import OFFSETS_TOPIC
from logstore.server.protocol.codec import decode_request, decode_request_header, decode_response, encode_request, \
    encode_response
from logstore.server.security.authorization import GROUP, READ, TOPIC, TRANSACTIONAL_ID, WRITE, RequestAuthorization
from logstore.server.server import KafkaServer
from wire_client import WireClient

TXN_OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, SYNC_GROUP, API_VERSIONS = 28, 9, 11, 14, 18
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST = 22, 25, 3, 42
UNSTABLE_OFFSET_COMMIT = 88
TOPIC_DENIED, GROUP_DENIED, TXN_DENIED = 29, 30, 53
PID = 7000

SETTINGS = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    data = tmp_path_factory.mktemp("txn-offsets") / "data"
    with LogManager([str(data)]) as store, KafkaServer(store, listen="127.0.0.1:0", config=SETTINGS) as server:
        store.create_topic("in", partitions=2)
        yield server, store


@pytest.fixture
def client(running):
    made = WireClient(running[0].bootstrap_servers, client_id="txn-offsets-test")
    yield made
    made.close()


def txn_commit(client, version, group, offsets, *, pid=PID, epoch=0, generation=-1, member_id="", instance=None):
    topics: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                             "committed_leader_epoch": 3, "committed_metadata": "m"})
    response = client.call(TXN_OFFSET_COMMIT, version, {
        "transactional_id": "tx", "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": generation, "member_id": member_id, "group_instance_id": instance,
        "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()]})
    assert response["throttle_time_ms"] == 0
    return {(topic["name"], partition["partition_index"]): partition["error_code"]
            for topic in response["topics"] for partition in topic["partitions"]}


def fetched(client, group, version=5):
    response = client.call(OFFSET_FETCH, version, {"group_id": group, "topics": [
        {"name": "in", "partition_indexes": [0, 1]}]})
    return {partition["partition_index"]: partition["committed_offset"] for partition in response["topics"][0]["partitions"]}


def marker(store, group, commit, pid=PID, epoch=0):
    coordinator = GroupCoordinator.running(store)
    partition = coordinator.partition_for(group)
    log = store.get_log(OFFSETS_TOPIC, partition)
    offset = log.append_marker(pid, epoch, 0, commit)
    log.flush()
    coordinator.complete_transaction(partition, pid, commit, offset)


def test_txn_offset_commit_is_advertised_at_kafkas_versions(client):
    response = client.call(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    advertised = {entry["api_key"]: (entry["min_version"], entry["max_version"]) for entry in response["api_keys"]}
    assert advertised[TXN_OFFSET_COMMIT] == (0, 4)


@pytest.mark.parametrize("version", range(5))
def test_offsets_wait_for_the_commit_marker_and_an_abort_drops_them(client, running, version):
    store = running[1]
    group = f"txn-v{version}"
    assert txn_commit(client, version, group, {("in", 0): 10, ("in", 1): 11, ("in", 9): 1, ("nope", 0): 1},
                      pid=PID + version) == {("in", 0): 0, ("in", 1): 0, ("in", 9): UNKNOWN_TOPIC_OR_PARTITION,
                                             ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION}
    assert fetched(client, group) == {0: -1, 1: -1}
    marker(store, group, True, pid=PID + version)
    assert fetched(client, group) == {0: 10, 1: 11}
    value = GroupCoordinator.running(store).fetch_offsets(group, [("in", 0)])[1][("in", 0)]
    assert (value.metadata, value.leader_epoch) == ("m", 3 if version >= 2 else -1)
    assert txn_commit(client, version, group, {("in", 0): 20}, pid=PID + version) == {("in", 0): 0}
    marker(store, group, False, pid=PID + version)
    assert fetched(client, group) == {0: 10, 1: 11}


@pytest.mark.parametrize("version", (6, 7))
def test_offset_fetch_require_stable_names_the_partitions_a_transaction_holds(client, running, version):
    store, group, pid = running[1], f"txn-stable-{version}", PID + 100 + version
    assert txn_commit(client, 3, group, {("in", 0): 30}, pid=pid) == {("in", 0): 0}

    def partitions(require_stable, topics="named"):
        body = {"group_id": group, "require_stable": require_stable,
                "topics": None if topics is None else [{"name": "in", "partition_indexes": [0, 1]}]}
        response = client.call(OFFSET_FETCH, version, body)
        assert response["error_code"] == 0
        return {p["partition_index"]: (p["committed_offset"], p["error_code"])
                for topic in response["topics"] for p in topic["partitions"]}

    stable_asked = version >= 7  # v6 has no RequireStable: never unstable
    assert partitions(True) == {0: (-1, UNSTABLE_OFFSET_COMMIT if stable_asked else 0), 1: (-1, 0)}
    assert partitions(False) == {0: (-1, 0), 1: (-1, 0)}
    marker(store, group, True, pid=pid)
    assert partitions(True) == {0: (30, 0), 1: (-1, 0)}
    assert txn_commit(client, 3, group, {("in", 0): 31}, pid=pid) == {("in", 0): 0}
    assert partitions(True, topics=None) == {0: (-1, UNSTABLE_OFFSET_COMMIT) if stable_asked else (30, 0)}
    marker(store, group, False, pid=pid)
    assert partitions(True, topics=None) == {0: (30, 0)}


def test_kip_447_checks_from_version_3(client):
    joined = client.call(JOIN_GROUP, 3, {"group_id": "txn-members", "session_timeout_ms": 10000,
                                         "rebalance_timeout_ms": 10000, "member_id": "", "protocol_type": "consumer",
                                         "protocols": [{"name": "range", "metadata": b""}]})
    member, generation = joined["member_id"], joined["generation_id"]
    synced = client.call(SYNC_GROUP, 3, {"group_id": "txn-members", "generation_id": generation, "member_id": member,
                                         "assignments": [{"member_id": member, "assignment": b""}]})
    assert synced["error_code"] == 0
    key = ("in", 0)
    assert txn_commit(client, 3, "txn-members", {key: 1}, generation=generation, member_id=member) == {key: 0}
    assert txn_commit(client, 3, "txn-members", {key: 1}, generation=generation + 1, member_id=member) == {
        key: ILLEGAL_GENERATION}
    assert txn_commit(client, 4, "txn-members", {key: 1}, generation=generation, member_id="zombie") == {
        key: UNKNOWN_MEMBER_ID}
    assert txn_commit(client, 3, "txn-nobody", {key: 1}, generation=2, member_id="x") == {key: ILLEGAL_GENERATION}
    # v0-2 carry no member: accepted in the active group, as Kafka accepts its older producers
    assert txn_commit(client, 2, "txn-members", {key: 1}) == {key: 0}


def test_a_malformed_producer_is_an_invalid_request(client):
    assert txn_commit(client, 3, "txn-bad", {("in", 0): 1}, pid=-1) == {("in", 0): INVALID_REQUEST}


# --- ACLs ----------------------------------------------------------------------------------------


class Authorizer:
    """Allows exactly ``allowed``: (operation, resource type, name) tuples."""

    def __init__(self, *allowed) -> None:
        self.allowed = set(allowed)

    def authorize(self, principal, host, operation, resource_type, name) -> bool:
        return (operation, resource_type, name) in self.allowed


def authorized(authorizer, version):
    """A TxnOffsetCommit for topics a, b (two partitions each) as the server decodes it, checked, a
    handler answering 0 for what reaches it: the error per partition as the client reads it."""
    body = {"transactional_id": "tx", "group_id": "g", "producer_id": 1, "producer_epoch": 0, "topics": [
        {"name": name, "partitions": [{"partition_index": i, "committed_offset": 5, "committed_metadata": ""}
                                      for i in (0, 1)]} for name in ("a", "b")]}
    frame = memoryview(encode_request(TXN_OFFSET_COMMIT, version, 7, "test", body))[4:]
    _header, offset = decode_request_header(frame)
    request = decode_request(TXN_OFFSET_COMMIT, version, frame, offset)
    verdict = RequestAuthorization(authorizer).check(TXN_OFFSET_COMMIT, version, request, "User:alice", "10.0.0.7")
    if verdict.response is not None:
        response = verdict.response
    else:
        served = verdict.request if verdict.request is not None else request
        response = {"throttle_time_ms": 0, "topics": [
            {"name": topic["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": 0}
                                                   for p in topic["partitions"]]} for topic in served["topics"]]}
        if verdict.amend is not None:
            response = verdict.amend(response)
    data = b"".join(bytes(chunk) for chunk in encode_response(TXN_OFFSET_COMMIT, version, 7, response))
    read = decode_response(TXN_OFFSET_COMMIT, version, memoryview(data)[4:])[1]
    return {(topic["name"], p["partition_index"]): p["error_code"] for topic in read["topics"]
            for p in topic["partitions"]}


@pytest.mark.parametrize("version", range(5))
def test_acls_write_on_the_transactional_id_then_read_on_the_group_then_read_on_each_topic(version):
    every = {(name, i) for name in ("a", "b") for i in (0, 1)}
    txn, group, topic_a = (WRITE, TRANSACTIONAL_ID, "tx"), (READ, GROUP, "g"), (READ, TOPIC, "a")
    assert authorized(Authorizer(group, topic_a, (READ, TOPIC, "b")), version) == dict.fromkeys(every, TXN_DENIED)
    assert authorized(Authorizer(txn, topic_a), version) == dict.fromkeys(every, GROUP_DENIED)
    assert authorized(Authorizer(txn, group, topic_a), version) == {
        ("a", 0): 0, ("a", 1): 0, ("b", 0): TOPIC_DENIED, ("b", 1): TOPIC_DENIED}
    assert authorized(Authorizer(txn, group, (READ, TOPIC, "a"), (READ, TOPIC, "b")), version) == dict.fromkeys(every, 0)
    # WRITE on the group or DESCRIBE on the transactional id is not enough
    assert authorized(Authorizer((WRITE, GROUP, "g"), (READ, TRANSACTIONAL_ID, "tx"), topic_a), version) == \
        dict.fromkeys(every, TXN_DENIED)
