"""The transaction APIs over real sockets with the server's own codec (wire_client): what each
version of InitProducerId (with a transactional id), FindCoordinator (transaction keys),
AddPartitionsToTxn (the clients' v0-3 and the brokers' batched, verify-only v4+), AddOffsetsToTxn,
EndTxn, DescribeTransactions, ListTransactions and DescribeProducers answer, the error codes each
version understands, the transaction settings reaching the coordinator, and the ACLs of each API.
(The coordinator's state machine itself: tests/txn; markers and restarts: test_txn_markers.)"""

from __future__ import annotations

import pytest

from logstore import LogManager, Record
from logstore.group.formats import partition_for as offsets_partition_for
from logstore.server.protocol import errors
from logstore.server.security.acl_store import AclStore
from logstore.server.security.acls import bindings_for
from logstore.server.server import KafkaServer
from logstore.txn import errors as txn_errors
from wire_client import WireClient

PRODUCE, FIND_COORDINATOR, API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID = 0, 10, 18, 19, 22
ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 24, 25, 26
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66


@pytest.fixture
def store(tmp_path):
    with LogManager([str(tmp_path / "data")]) as store:
        store.create_topic("t", partitions=3)
        store.create_topic("u", partitions=1)
        yield store


@pytest.fixture
def server(store):
    with KafkaServer(store, listen="127.0.0.1:0", config={"transaction.max.timeout.ms": 120000}) as server:
        yield server


@pytest.fixture
def client(server):
    client = WireClient(server.bootstrap_servers)
    yield client
    client.close()


def init(client, transactional_id, timeout_ms=60000, version=4, **current):
    return client.call(INIT_PRODUCER_ID, version, {"transactional_id": transactional_id,
                                                   "transaction_timeout_ms": timeout_ms, **current})


def add_partitions(client, transactional_id, producer_id, epoch, topics, version=3):
    response = client.call(ADD_PARTITIONS, version, {
        "v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": producer_id,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": name, "partitions": list(indexes)} for name, indexes in topics.items()]})
    return {(topic["name"], partition["partition_index"]): partition["partition_error_code"]
            for topic in response["results_by_topic_v3_and_below"] for partition in topic["results_by_partition"]}


def describe(client, *transactional_ids):
    response = client.call(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": list(transactional_ids)})
    return {state["transactional_id"]: state for state in response["transaction_states"]}


def partitions_of(state):
    return {(topic["topic"], index) for topic in state["topics"] for index in topic["partitions"]}


# --- ApiVersions, FindCoordinator ----------------------------------------------------------------


def test_api_versions_advertise_the_transaction_apis(client):
    response = client.call(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    advertised = {entry["api_key"]: (entry["min_version"], entry["max_version"]) for entry in response["api_keys"]}
    assert {key: advertised[key] for key in (INIT_PRODUCER_ID, FIND_COORDINATOR, ADD_PARTITIONS, ADD_OFFSETS, END_TXN,
                                             DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS)} == {
        INIT_PRODUCER_ID: (0, 4), FIND_COORDINATOR: (0, 4), ADD_PARTITIONS: (0, 5), ADD_OFFSETS: (0, 4),
        END_TXN: (0, 4), DESCRIBE_PRODUCERS: (0, 0), DESCRIBE_TRANSACTIONS: (0, 0), LIST_TRANSACTIONS: (0, 1)}
    assert advertised[28] == (0, 4)  # TxnOffsetCommit, served by the group handlers


@pytest.mark.parametrize("version", [1, 2, 3])
def test_find_coordinator_of_a_transactional_id_is_this_broker(client, server, version):
    found = client.call(FIND_COORDINATOR, version, {"key": "tx", "key_type": 1})
    assert (found["error_code"], found["node_id"], found["port"]) == (errors.NONE, server.node_id, server.port)
    empty = client.call(FIND_COORDINATOR, version, {"key": "", "key_type": 1})
    assert empty["error_code"] == errors.INVALID_REQUEST and empty["node_id"] == -1
    group = client.call(FIND_COORDINATOR, version, {"key": "g", "key_type": 0})  # still the group handlers'
    assert group["error_code"] == errors.NONE and group["node_id"] == server.node_id
    unknown = client.call(FIND_COORDINATOR, version, {"key": "x", "key_type": 7})
    assert unknown["error_code"] == errors.INVALID_REQUEST


def test_find_coordinator_v4_answers_each_transactional_id(client, server):
    found = client.call(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["a", "b", ""]})
    by_key = {entry["key"]: entry for entry in found["coordinators"]}
    assert [by_key[key]["error_code"] for key in ("a", "b", "")] == [errors.NONE, errors.NONE, errors.INVALID_REQUEST]
    assert by_key["a"]["node_id"] == server.node_id and by_key["a"]["port"] == server.port


# --- InitProducerId ------------------------------------------------------------------------------


def test_init_producer_id_with_a_transactional_id_bumps_the_epoch_and_fences_older_instances(client):
    first = init(client, "tx")
    assert first["error_code"] == errors.NONE and first["producer_id"] >= 0 and first["producer_epoch"] == 0
    second = init(client, "tx")
    assert (second["producer_id"], second["producer_epoch"]) == (first["producer_id"], 1)
    other = init(client, "other-tx")
    assert other["producer_id"] != first["producer_id"]
    idempotent = client.call(INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": -1})
    assert idempotent["error_code"] == errors.NONE and idempotent["producer_id"] not in (
        first["producer_id"], other["producer_id"])
    # The first instance is a zombie now: it is fenced at every step.
    codes = add_partitions(client, "tx", first["producer_id"], 0, {"t": [0]}, version=3)
    assert codes == {("t", 0): txn_errors.PRODUCER_FENCED}
    codes = add_partitions(client, "tx", first["producer_id"], 0, {"t": [0]}, version=1)
    assert codes == {("t", 0): errors.INVALID_PRODUCER_EPOCH}  # before v2 a client knows no PRODUCER_FENCED
    # KIP-360: the instance that has epoch 1 asks for a bump and gets epoch 2; the fenced one is refused.
    bumped = init(client, "tx", producer_id=first["producer_id"], producer_epoch=1)
    assert (bumped["error_code"], bumped["producer_epoch"]) == (errors.NONE, 2)
    for version, fenced in ((4, txn_errors.PRODUCER_FENCED), (3, errors.INVALID_PRODUCER_EPOCH)):
        zombie = init(client, "tx", version=version, producer_id=first["producer_id"], producer_epoch=0)
        assert (zombie["error_code"], zombie["producer_id"], zombie["producer_epoch"]) == (fenced, -1, -1)


def test_init_producer_id_refuses_a_timeout_above_the_maximum(client):
    assert init(client, "tx", timeout_ms=120001)["error_code"] == txn_errors.INVALID_TRANSACTION_TIMEOUT
    assert init(client, "tx", timeout_ms=0)["error_code"] == txn_errors.INVALID_TRANSACTION_TIMEOUT
    assert init(client, "tx", timeout_ms=120000)["error_code"] == errors.NONE


@pytest.mark.parametrize("version", [0, 1, 2])
def test_init_producer_id_at_old_versions(client, version):
    first = init(client, f"tx-{version}", version=version)
    again = init(client, f"tx-{version}", version=version)
    assert first["error_code"] == again["error_code"] == errors.NONE
    assert again["producer_epoch"] == first["producer_epoch"] + 1


# --- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn -------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_partitions_opens_the_transaction(client, version):
    producer = init(client, "tx")
    pid = producer["producer_id"]
    assert add_partitions(client, "tx", pid, 0, {"t": [0, 2], "u": [0]}, version) == {
        ("t", 0): errors.NONE, ("t", 2): errors.NONE, ("u", 0): errors.NONE}
    state = describe(client, "tx")["tx"]
    assert state["transaction_state"] == "Ongoing" and partitions_of(state) == {("t", 0), ("t", 2), ("u", 0)}
    assert state["transaction_start_time_ms"] > 0 and state["transaction_timeout_ms"] == 60000
    assert add_partitions(client, "tx", pid + 1000, 0, {"t": [1]}, version) == {
        ("t", 1): txn_errors.INVALID_PRODUCER_ID_MAPPING}
    assert add_partitions(client, "unknown-tx", pid, 0, {"t": [1]}, version) == {
        ("t", 1): txn_errors.INVALID_PRODUCER_ID_MAPPING}


def test_add_partitions_with_an_unknown_partition_adds_none(client):
    pid = init(client, "tx")["producer_id"]
    assert add_partitions(client, "tx", pid, 0, {"t": [0, 3], "nope": [0]}) == {
        ("t", 0): errors.OPERATION_NOT_ATTEMPTED, ("t", 3): errors.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): errors.UNKNOWN_TOPIC_OR_PARTITION}
    state = describe(client, "tx")["tx"]
    assert state["transaction_state"] == "Empty" and partitions_of(state) == set()


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_v4_batches_transactions_and_verifies(client, version):
    a, b = init(client, "tx-a"), init(client, "tx-b")
    assert add_partitions(client, "tx-a", a["producer_id"], 0, {"t": [0]}) == {("t", 0): errors.NONE}

    def request(transactions):
        response = client.call(ADD_PARTITIONS, version, {"transactions": transactions})
        assert response["error_code"] == errors.NONE
        return {(result["transactional_id"], topic["name"], partition["partition_index"]):
                partition["partition_error_code"] for result in response["results_by_transaction"]
                for topic in result["topic_results"] for partition in topic["results_by_partition"]}

    not_in_transaction = txn_errors.TRANSACTION_ABORTABLE if version >= 5 else txn_errors.INVALID_TXN_STATE
    assert request([{"transactional_id": "tx-a", "producer_id": a["producer_id"], "producer_epoch": 0,
                     "verify_only": True, "topics": [{"name": "t", "partitions": [0, 1]}]},
                    {"transactional_id": "tx-b", "producer_id": b["producer_id"], "producer_epoch": 0,
                     "verify_only": False, "topics": [{"name": "u", "partitions": [0]}]}]) == {
        ("tx-a", "t", 0): errors.NONE, ("tx-a", "t", 1): not_in_transaction, ("tx-b", "u", 0): errors.NONE}
    assert partitions_of(describe(client, "tx-a")["tx-a"]) == {("t", 0)}  # verifying adds nothing
    assert partitions_of(describe(client, "tx-b")["tx-b"]) == {("u", 0)}
    fenced = request([{"transactional_id": "tx-a", "producer_id": a["producer_id"], "producer_epoch": 7,
                       "verify_only": True, "topics": [{"name": "t", "partitions": [0]}]}])
    assert fenced == {("tx-a", "t", 0): txn_errors.PRODUCER_FENCED}


@pytest.mark.parametrize("version", [0, 2, 3, 4])
def test_add_offsets_adds_the_groups_offsets_partition(client, server, version):
    pid = init(client, "tx")["producer_id"]
    response = client.call(ADD_OFFSETS, version, {"transactional_id": "tx", "producer_id": pid, "producer_epoch": 0,
                                                  "group_id": "my-group"})
    assert response["error_code"] == errors.NONE
    expected = ("__consumer_offsets", offsets_partition_for("my-group", server.coordinator.storage.num_partitions))
    assert partitions_of(describe(client, "tx")["tx"]) == {expected}
    fenced = client.call(ADD_OFFSETS, version, {"transactional_id": "tx", "producer_id": pid, "producer_epoch": 9,
                                                "group_id": "my-group"})
    assert fenced["error_code"] == (txn_errors.PRODUCER_FENCED if version >= 2 else errors.INVALID_PRODUCER_EPOCH)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_end_txn_without_an_open_transaction_and_from_a_zombie(client, version):
    pid = init(client, "tx")["producer_id"]
    end = {"transactional_id": "tx", "producer_id": pid, "committed": True}
    assert client.call(END_TXN, version, {**end, "producer_epoch": 0})["error_code"] == txn_errors.INVALID_TXN_STATE
    init(client, "tx")  # epoch 1: the epoch-0 instance is fenced
    fenced = client.call(END_TXN, version, {**end, "producer_epoch": 0})["error_code"]
    assert fenced == (txn_errors.PRODUCER_FENCED if version >= 2 else errors.INVALID_PRODUCER_EPOCH)
    unknown = client.call(END_TXN, version, {**end, "transactional_id": "never", "producer_epoch": 0})
    assert unknown["error_code"] == txn_errors.INVALID_PRODUCER_ID_MAPPING


# --- DescribeTransactions, ListTransactions, DescribeProducers ------------------------------------


def test_describe_and_list_transactions(client):
    a = init(client, "tx-a")
    b = init(client, "tx-b")
    add_partitions(client, "tx-a", a["producer_id"], 0, {"t": [1]})
    described = describe(client, "tx-a", "tx-b", "missing", "")
    assert described["tx-a"]["transaction_state"] == "Ongoing" and described["tx-b"]["transaction_state"] == "Empty"
    assert (described["tx-b"]["producer_id"], described["tx-b"]["producer_epoch"]) == (b["producer_id"], 0)
    assert described["missing"]["error_code"] == txn_errors.TRANSACTIONAL_ID_NOT_FOUND
    assert described[""]["error_code"] == errors.INVALID_REQUEST

    def listed(version=1, **filters):
        body = {"state_filters": [], "producer_id_filters": [], **filters}
        response = client.call(LIST_TRANSACTIONS, version, body)
        assert response["error_code"] == errors.NONE
        return ({state["transactional_id"]: (state["producer_id"], state["transaction_state"])
                 for state in response["transaction_states"]}, response["unknown_state_filters"])

    assert listed(version=0) == ({"tx-a": (a["producer_id"], "Ongoing"), "tx-b": (b["producer_id"], "Empty")}, [])
    assert listed(state_filters=["Ongoing", "Sleeping"]) == ({"tx-a": (a["producer_id"], "Ongoing")}, ["Sleeping"])
    assert listed(producer_id_filters=[b["producer_id"]]) == ({"tx-b": (b["producer_id"], "Empty")}, [])
    assert listed(duration_filter=3_600_000) == ({}, [])  # none open for an hour
    assert listed(duration_filter=-1)[0].keys() == {"tx-a", "tx-b"}


def test_describe_producers_lists_a_partitions_producers(client, store):
    pid = client.call(INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": -1})["producer_id"]
    records = [Record(key=b"k", value=b"v%d" % i, timestamp_ms=1_700_000_000_000) for i in range(3)]
    assert client.produce("t", 1, records, producer_id=pid, producer_epoch=0, base_sequence=0)["error_code"] == 0
    response = client.call(DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "t", "partition_indexes": [0, 1, 9]},
                                                              {"name": "nope", "partition_indexes": [0]}]})
    by_partition = {(topic["name"], partition["partition_index"]): partition
                    for topic in response["topics"] for partition in topic["partitions"]}
    assert by_partition[("t", 0)]["error_code"] == errors.NONE and by_partition[("t", 0)]["active_producers"] == []
    [producer] = by_partition[("t", 1)]["active_producers"]
    assert (producer["producer_id"], producer["producer_epoch"], producer["last_sequence"]) == (pid, 0, 2)
    assert producer["current_txn_start_offset"] == -1 and producer["last_timestamp"] > 0
    assert by_partition[("t", 9)]["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION
    assert by_partition[("nope", 0)]["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION


# --- the state across a restart ------------------------------------------------------------------


def test_the_coordinators_state_is_replayed_at_start(tmp_path):
    data = str(tmp_path / "data")
    with KafkaServer([data], listen="127.0.0.1:0") as server:
        server.store.create_topic("t", partitions=2)
        client = WireClient(server.bootstrap_servers)
        first = init(client, "tx")
        init(client, "tx")  # epoch 1
        empty = init(client, "idle-tx")
        client.close()
    with KafkaServer([data], listen="127.0.0.1:0") as server:
        client = WireClient(server.bootstrap_servers)
        described = describe(client, "tx", "idle-tx")
        assert (described["tx"]["producer_id"], described["tx"]["producer_epoch"]) == (first["producer_id"], 1)
        assert described["idle-tx"]["producer_id"] == empty["producer_id"]
        # The next bump goes on from the replayed epoch, and the replayed epoch still fences.
        assert init(client, "tx")["producer_epoch"] == 2
        assert add_partitions(client, "tx", first["producer_id"], 1, {"t": [0]}) == {
            ("t", 0): txn_errors.PRODUCER_FENCED}
        # Producer ids are never handed out twice across restarts, whoever asks.
        fresh = client.call(INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": -1})
        assert fresh["producer_id"] > max(first["producer_id"], empty["producer_id"])
        client.close()


# --- settings ------------------------------------------------------------------------------------


def test_transaction_settings_reach_the_coordinator_and_the_state_log(tmp_path):
    config = {"transaction.max.timeout.ms": 5000, "transaction.state.log.num.partitions": 3,
              "transaction.state.log.segment.bytes": 1 << 20, "transactional.id.expiration.ms": 86400000}
    with KafkaServer([str(tmp_path / "data")], listen="127.0.0.1:0", config=config) as server:
        coordinator = server.txn_coordinator
        assert server.broker.txn_coordinator is coordinator and coordinator.active
        assert coordinator.config.max_timeout_ms == 5000 and coordinator.config.transactional_id_expiration_ms == 86400000
        client = WireClient(server.bootstrap_servers)
        assert init(client, "tx", timeout_ms=5001)["error_code"] == txn_errors.INVALID_TRANSACTION_TIMEOUT
        assert init(client, "tx", timeout_ms=5000)["error_code"] == errors.NONE
        client.close()
        assert server.store.partitions("__transaction_state") == 3
        assert server.store.topic_config("__transaction_state").segment_bytes == 1 << 20
    assert not coordinator.active  # stopped with the server


def test_a_bad_transaction_setting_is_refused_before_start(tmp_path):
    from logstore.errors import InvalidConfigError
    with pytest.raises(InvalidConfigError, match="transaction.max.timeout.ms"):
        KafkaServer([str(tmp_path / "data")], listen="127.0.0.1:0", config={"transaction.max.timeout.ms": 0})
    with pytest.raises(InvalidConfigError, match="transaction.partition.verification.enable"):
        KafkaServer([str(tmp_path / "data")], listen="127.0.0.1:0",
                    config={"transaction.partition.verification.enable": "maybe"})


# --- ACLs ----------------------------------------------------------------------------------------

ANONYMOUS = "User:ANONYMOUS"  # a PLAINTEXT connection's principal


@pytest.fixture
def acl_server(tmp_path):
    """ACLs enforced; the anonymous principal may write transactional id "ok-tx" (and describe it),
    write topic "t", read group "g", read topic "u", describe transactional id "seen-tx"."""
    data = tmp_path / "data"
    data.mkdir()
    AclStore(str(data)).add(
        bindings_for(allow_principals=[ANONYMOUS], transactional_ids=["ok-tx"], operations=["Write", "Describe"])
        + bindings_for(allow_principals=[ANONYMOUS], topics=["t"], operations=["Write", "Describe", "Create"])
        + bindings_for(allow_principals=[ANONYMOUS], groups=["g"], operations=["Read"])
        + bindings_for(allow_principals=[ANONYMOUS], topics=["u"], operations=["Read"])
        + bindings_for(allow_principals=[ANONYMOUS], transactional_ids=["seen-tx"], operations=["Describe"]))
    with KafkaServer([str(data)], listen="127.0.0.1:0", config={"authorizer.enable": True}) as server:
        server.store.create_topic("t", partitions=2)
        server.store.create_topic("u", partitions=1)
        server.store.create_topic("v", partitions=1)  # no ACL names it
        # "seen-tx" and "hidden-tx" exist, made by the server's own coordinator (no ACL asked there).
        coordinator = server.txn_coordinator
        for transactional_id in ("seen-tx", "hidden-tx"):
            result = coordinator.init_producer_id(transactional_id, 60000)
            coordinator.add_partitions(transactional_id, result.producer_id, result.producer_epoch,
                                       [("t", 0), ("u", 0), ("v", 0)])
        yield server


def test_acls_of_the_transaction_apis(acl_server):
    client = WireClient(acl_server.bootstrap_servers)
    denied = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # InitProducerId and FindCoordinator: WRITE / DESCRIBE on the transactional id.
    assert init(client, "other-tx")["error_code"] == denied
    producer = init(client, "ok-tx")
    pid = producer["producer_id"]
    assert producer["error_code"] == errors.NONE
    assert client.call(FIND_COORDINATOR, 3, {"key": "other-tx", "key_type": 1})["error_code"] == denied
    assert client.call(FIND_COORDINATOR, 3, {"key": "ok-tx", "key_type": 1})["error_code"] == errors.NONE
    # AddPartitionsToTxn: WRITE on the id, then on each topic; a partial refusal adds nothing.
    assert add_partitions(client, "other-tx", pid, 0, {"t": [0]}) == {("t", 0): denied}
    assert add_partitions(client, "ok-tx", pid, 0, {"t": [0], "u": [0]}) == {
        ("t", 0): errors.OPERATION_NOT_ATTEMPTED, ("u", 0): errors.TOPIC_AUTHORIZATION_FAILED}
    assert describe(client, "ok-tx")["ok-tx"]["transaction_state"] == "Empty"
    assert add_partitions(client, "ok-tx", pid, 0, {"t": [0, 1]}) == {("t", 0): 0, ("t", 1): 0}
    # The brokers' form needs CLUSTER_ACTION.
    brokers = client.call(ADD_PARTITIONS, 4, {"transactions": [
        {"transactional_id": "ok-tx", "producer_id": pid, "producer_epoch": 0, "verify_only": True,
         "topics": [{"name": "t", "partitions": [0]}]}]})
    assert brokers["error_code"] == errors.CLUSTER_AUTHORIZATION_FAILED and brokers["results_by_transaction"] == []
    # AddOffsetsToTxn: WRITE on the id, READ on the group.
    offsets = {"transactional_id": "ok-tx", "producer_id": pid, "producer_epoch": 0}
    assert client.call(ADD_OFFSETS, 3, {**offsets, "group_id": "g"})["error_code"] == errors.NONE
    assert client.call(ADD_OFFSETS, 3, {**offsets, "group_id": "h"})["error_code"] == errors.GROUP_AUTHORIZATION_FAILED
    assert client.call(ADD_OFFSETS, 3, {**offsets, "transactional_id": "other-tx", "group_id": "g"})[
        "error_code"] == denied
    # EndTxn: WRITE on the id.
    assert client.call(END_TXN, 3, {**offsets, "transactional_id": "other-tx", "committed": False})[
        "error_code"] == denied
    # DescribeTransactions: DESCRIBE on each id; topics the principal may not describe are left out.
    described = describe(client, "seen-tx", "hidden-tx", "ok-tx")
    assert described["hidden-tx"]["error_code"] == denied and described["hidden-tx"]["topics"] == []
    assert described["seen-tx"]["error_code"] == errors.NONE
    assert partitions_of(described["seen-tx"]) == {("t", 0), ("u", 0)}  # READ implies DESCRIBE; "v": nothing
    # ListTransactions: only the ids the principal may DESCRIBE.
    listed = client.call(LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters": []})
    assert sorted(state["transactional_id"] for state in listed["transaction_states"]) == ["ok-tx", "seen-tx"]
    # DescribeProducers: READ on the topic.
    producers = client.call(DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "t", "partition_indexes": [0]},
                                                               {"name": "u", "partition_indexes": [0]}]})
    codes = {topic["name"]: topic["partitions"][0]["error_code"] for topic in producers["topics"]}
    assert codes == {"t": errors.TOPIC_AUTHORIZATION_FAILED, "u": errors.NONE}
    client.close()
