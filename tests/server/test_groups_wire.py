"""The consumer-group APIs over real sockets (wire_client against a KafkaServer): how each request
version maps onto the coordinator and how its answers fill each version's response. The group logic
itself (states, rebalances, retention) is tested in tests/group; here it is only driven far enough
to see every field of the wire mapping: FindCoordinator v0-v4 (batched keys), JoinGroup v0/v3
direct joins and v4's MEMBER_ID_REQUIRED, SyncGroup leader and follower, Heartbeat, LeaveGroup v0
and v3 batches, OffsetCommit/OffsetFetch (v2 and v5+ fields, null topics, the v0-1 error layout),
ListGroups v4's states filter, DescribeGroups, DeleteGroups, OffsetDelete, the refused KIP-848
heartbeat, and a stop that does not wait for a parked rebalance.

Every server here binds 127.0.0.1 and is stopped by its fixture; every blocking call has a timeout.
"""

from __future__ import annotations

import struct
import time

import pytest

from logstore import LogManager
from logstore.client.connection import BrokerConnection
from logstore.server.protocol import errors
from logstore.server.server import KafkaServer
from wire_client import WireClient

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 10, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, API_VERSIONS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 18, 42, 47
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
ILLEGAL_GENERATION, INVALID_GROUP_ID, UNKNOWN_MEMBER_ID, INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS = 22, 24, 25, 26, 27
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, MEMBER_ID_REQUIRED = 68, 69, 79

SETTINGS = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 100,
            "offsets.topic.num.partitions": 3}
"""No initial delay (joins complete at once), short sessions allowed, a small __consumer_offsets."""


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    """One server for the module (each test uses its own group ids and topics): (server, store)."""
    data = tmp_path_factory.mktemp("groups") / "data"
    with LogManager([str(data)]) as store, KafkaServer(store, listen="127.0.0.1:0", config=SETTINGS) as server:
        yield server, store


@pytest.fixture
def server(running):
    return running[0]


@pytest.fixture
def store(running):
    return running[1]


@pytest.fixture
def connect(server):
    """``connect(client_id)`` -> a WireClient to the module's server (closed after the test)."""
    clients = []

    def make(client_id: str = "wire-test") -> WireClient:
        clients.append(WireClient(server.bootstrap_servers, client_id=client_id))
        return clients[-1]
    yield make
    for client in clients:
        client.close()


def subscription(*topics: str) -> bytes:
    """ConsumerProtocol subscription v0: version, topics, null user data."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)


def join_body(group: str, member_id: str = "", *, topic: str = "t", session_ms: int = 10000,
              rebalance_ms: int = 10000, instance_id: str | None = None) -> dict:
    return {"group_id": group, "session_timeout_ms": session_ms, "rebalance_timeout_ms": rebalance_ms,
            "member_id": member_id, "group_instance_id": instance_id, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription(topic)}]}


def join_and_sync(client: WireClient, group: str, topic: str = "t") -> tuple[str, int]:
    """One member alone in a new group, Stable: (member id, generation)."""
    joined = client.call(JOIN_GROUP, 3, join_body(group, topic=topic))
    assert joined["error_code"] == 0, joined
    synced = client.call(SYNC_GROUP, 3, {"group_id": group, "generation_id": joined["generation_id"],
                                         "member_id": joined["member_id"], "assignments": [
                                             {"member_id": joined["member_id"], "assignment": b"all"}]})
    assert synced["error_code"] == 0, synced
    return joined["member_id"], joined["generation_id"]


def commit(client: WireClient, group: str, offsets: dict, *, version: int = 7, generation: int = -1,
           member_id: str = "", epoch: int = -1) -> dict:
    """OffsetCommit of ``{(topic, partition): (offset, metadata)}``: {(topic, partition): error}."""
    topics: dict[str, list] = {}
    for (topic, partition), (offset, metadata) in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                             "committed_leader_epoch": epoch, "committed_metadata": metadata})
    response = client.call(OFFSET_COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": None, "retention_time_ms": -1,
        "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()]})
    return {(topic["name"], partition["partition_index"]): partition["error_code"]
            for topic in response["topics"] for partition in topic["partitions"]}


def fetch(client: WireClient, group: str, partitions: dict | None, version: int = 5) -> dict:
    """OffsetFetch of ``{topic: [partitions]}`` (None: all): the response body."""
    topics = None if partitions is None else [{"name": name, "partition_indexes": indexes}
                                              for name, indexes in partitions.items()]
    return client.call(OFFSET_FETCH, version, {"group_id": group, "topics": topics})


def fetched(response: dict) -> dict:
    return {(topic["name"], partition["partition_index"]): partition
            for topic in response["topics"] for partition in topic["partitions"]}


# --- ApiVersions and FindCoordinator ------------------------------------------------------------


def test_the_group_apis_are_advertised_and_kip_848_is_not(connect):
    response = connect().call(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    advertised = {entry["api_key"]: (entry["min_version"], entry["max_version"]) for entry in response["api_keys"]}
    assert {key: advertised.get(key) for key in (8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47)} == {
        8: (2, 7), 9: (1, 7), 10: (0, 4), 11: (0, 5), 12: (0, 3), 13: (0, 3), 14: (0, 3), 15: (0, 5), 16: (0, 5),
        42: (0, 2), 47: (0, 0)}
    assert CONSUMER_GROUP_HEARTBEAT not in advertised and CONSUMER_GROUP_DESCRIBE not in advertised


def test_find_coordinator_names_this_broker_at_every_version(connect, server):
    client = connect()
    this = {"node_id": server.node_id, "host": "127.0.0.1", "port": server.port}
    assert client.call(FIND_COORDINATOR, 0, {"key": "g"}) == {"error_code": 0, **this}
    for version in (1, 2, 3):
        assert client.call(FIND_COORDINATOR, version, {"key": "g", "key_type": 0}) == {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None, **this}
    transaction = client.call(FIND_COORDINATOR, 3, {"key": "tx", "key_type": 1})
    assert transaction == {"throttle_time_ms": 0, "error_code": 0, "error_message": None, **this}
    assert client.call(FIND_COORDINATOR, 2, {"key": "x", "key_type": 9})["error_code"] == errors.INVALID_REQUEST
    batched = client.call(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["a", "b", ""]})
    assert batched["coordinators"] == [{"key": key, **this, "error_code": 0, "error_message": None}
                                       for key in ("a", "b", "")]
    transactions = client.call(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["t1", "t2"]})
    assert [(c["key"], c["error_code"], c["node_id"]) for c in transactions["coordinators"]] == [
        ("t1", 0, server.node_id), ("t2", 0, server.node_id)]


# --- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ------------------------------------------------


def test_join_group_v3_and_v0_join_directly(connect):
    client = connect("joiner")
    joined = client.call(JOIN_GROUP, 3, join_body("join-v3"))
    assert joined["error_code"] == 0 and joined["generation_id"] == 1 and joined["protocol_name"] == "range"
    assert joined["member_id"].startswith("joiner-") and joined["leader"] == joined["member_id"]
    assert joined["members"] == [{"member_id": joined["member_id"], "metadata": subscription("t")}]
    # v0 has no rebalance timeout (the session timeout stands in) and no throttle time.
    body = join_body("join-v0")
    del body["rebalance_timeout_ms"]
    old = client.call(JOIN_GROUP, 0, body)
    assert old["error_code"] == 0 and old["generation_id"] == 1 and "throttle_time_ms" not in old


def test_join_group_v4_asks_for_a_member_id_first(connect):
    client = connect("kip-394")
    first = client.call(JOIN_GROUP, 4, join_body("join-v4"))
    assert first["error_code"] == MEMBER_ID_REQUIRED and first["member_id"].startswith("kip-394-")
    assert (first["generation_id"], first["protocol_name"], first["leader"], first["members"]) == (-1, "", "", [])
    second = client.call(JOIN_GROUP, 4, join_body("join-v4", first["member_id"]))
    assert second["error_code"] == 0 and second["member_id"] == first["member_id"] and second["generation_id"] == 1
    # A static member (v5, instance id) is never asked for one.
    static = client.call(JOIN_GROUP, 5, join_body("join-v5-static", instance_id="instance-1"))
    assert static["error_code"] == 0 and static["member_id"].startswith("instance-1-")
    assert static["members"] == [{"member_id": static["member_id"], "group_instance_id": "instance-1",
                                  "metadata": subscription("t")}]


def test_join_group_errors_have_kafkas_shape(connect):
    client = connect()
    too_short = client.call(JOIN_GROUP, 5, join_body("join-errors", session_ms=50))
    assert too_short == {"throttle_time_ms": 0, "error_code": INVALID_SESSION_TIMEOUT, "generation_id": -1,
                         "protocol_name": "", "leader": "", "member_id": "", "members": []}
    unknown = client.call(JOIN_GROUP, 2, join_body("join-errors", "who-is-this"))
    assert unknown["error_code"] == UNKNOWN_MEMBER_ID and unknown["member_id"] == "who-is-this"
    assert client.call(JOIN_GROUP, 2, join_body(""))["error_code"] == INVALID_GROUP_ID


def test_a_second_member_joins_and_the_leader_assigns_to_both(connect):
    group = "two-members"
    leader_client, follower_client = connect("leader"), connect("follower")
    leader, generation = join_and_sync(leader_client, group)
    assert generation == 1
    # The follower's join starts a rebalance that waits for the leader to rejoin.
    follower_client.send(JOIN_GROUP, 3, join_body(group))
    for _ in range(200):  # bounded: the leader learns of the rebalance from its heartbeat
        beat = leader_client.call(HEARTBEAT, 3, {"group_id": group, "generation_id": 1, "member_id": leader})
        if beat["error_code"] == REBALANCE_IN_PROGRESS:
            break
        assert beat["error_code"] == 0
        time.sleep(0.02)
    else:
        pytest.fail("the leader never saw REBALANCE_IN_PROGRESS")
    rejoined = leader_client.call(JOIN_GROUP, 3, join_body(group, leader))
    _, follower_joined = follower_client.receive(JOIN_GROUP, 3)
    follower = follower_joined["member_id"]
    assert rejoined["generation_id"] == follower_joined["generation_id"] == 2
    assert rejoined["leader"] == follower_joined["leader"] == leader
    assert sorted(member["member_id"] for member in rejoined["members"]) == sorted([leader, follower])
    assert follower_joined["members"] == []  # only the leader gets the member list
    # The follower's SyncGroup waits for the leader's, which carries both assignments.
    follower_client.send(SYNC_GROUP, 2, {"group_id": group, "generation_id": 2, "member_id": follower,
                                         "assignments": []})
    synced = leader_client.call(SYNC_GROUP, 3, {"group_id": group, "generation_id": 2, "member_id": leader,
                                                "group_instance_id": None, "assignments": [
                                                    {"member_id": leader, "assignment": b"mine"},
                                                    {"member_id": follower, "assignment": b"yours"}]})
    assert synced == {"throttle_time_ms": 0, "error_code": 0, "assignment": b"mine"}
    assert follower_client.receive(SYNC_GROUP, 2)[1] == {"throttle_time_ms": 0, "error_code": 0,
                                                          "assignment": b"yours"}
    assert follower_client.call(SYNC_GROUP, 0, {"group_id": group, "generation_id": 1, "member_id": follower,
                                                "assignments": []}) == {"error_code": ILLEGAL_GENERATION,
                                                                        "assignment": b""}
    for version in (0, 3):
        assert follower_client.call(HEARTBEAT, version, {"group_id": group, "generation_id": 2,
                                                         "member_id": follower})["error_code"] == 0
    described = leader_client.call(DESCRIBE_GROUPS, 4, {"groups": [group], "include_authorized_operations": True})
    (summary,) = described["groups"]
    assert (summary["error_code"], summary["group_state"], summary["protocol_type"], summary["protocol_data"]) == (
        0, "Stable", "consumer", "range")
    assert summary["authorized_operations"] == (1 << 3) | (1 << 6) | (1 << 8)  # READ, DELETE, DESCRIBE
    members = {member["member_id"]: member for member in summary["members"]}
    assert members[follower] == {"member_id": follower, "group_instance_id": None, "client_id": "follower",
                                 "client_host": "/127.0.0.1", "member_metadata": subscription("t"),
                                 "member_assignment": b"yours"}
    assert members[leader]["client_id"] == "leader" and members[leader]["member_assignment"] == b"mine"

    # LeaveGroup v0: one member; v0 answers an unknown member with the top-level code.
    assert follower_client.call(LEAVE_GROUP, 0, {"group_id": group, "member_id": follower}) == {"error_code": 0}
    assert follower_client.call(LEAVE_GROUP, 1, {"group_id": group, "member_id": follower}) == {
        "throttle_time_ms": 0, "error_code": UNKNOWN_MEMBER_ID}
    assert leader_client.call(HEARTBEAT, 3, {"group_id": group, "generation_id": 2,
                                             "member_id": leader})["error_code"] == REBALANCE_IN_PROGRESS
    # LeaveGroup v3: a batch, answered per member.
    left = leader_client.call(LEAVE_GROUP, 3, {"group_id": group, "members": [
        {"member_id": leader, "group_instance_id": None}, {"member_id": "nobody", "group_instance_id": None},
        {"member_id": "", "group_instance_id": "no-such-instance"}]})
    assert left == {"throttle_time_ms": 0, "error_code": 0, "members": [
        {"member_id": leader, "group_instance_id": None, "error_code": 0},
        {"member_id": "nobody", "group_instance_id": None, "error_code": UNKNOWN_MEMBER_ID},
        {"member_id": "", "group_instance_id": "no-such-instance", "error_code": UNKNOWN_MEMBER_ID}]}
    (empty,) = leader_client.call(DESCRIBE_GROUPS, 0, {"groups": [group]})["groups"]
    assert empty["group_state"] == "Empty" and empty["members"] == [] and empty["protocol_data"] == ""


def test_leave_group_v0_of_an_unknown_group_is_the_members_error(connect):
    assert connect().call(LEAVE_GROUP, 2, {"group_id": "never-seen", "member_id": "m"})["error_code"] == \
        UNKNOWN_MEMBER_ID


# --- offsets -------------------------------------------------------------------------------------


def test_commit_and_fetch_round_trip_v2_and_v7(connect, store):
    client = connect()
    store.create_topic("offsets-a", partitions=3)
    group = "simple-commits"
    # v2 (kafka-python 2.0.2, aiokafka): no leader epoch; a null metadata is stored as "".
    assert commit(client, group, {("offsets-a", 0): (10, "first"), ("offsets-a", 1): (11, None)}, version=2) == {
        ("offsets-a", 0): 0, ("offsets-a", 1): 0}
    # v7: the leader epoch; an unknown topic and partition fail alone.
    assert commit(client, group, {("offsets-a", 2): (12, "third"), ("no-such-topic", 0): (1, ""),
                                  ("offsets-a", 7): (1, "")}, version=7, epoch=4) == {
        ("offsets-a", 2): 0, ("no-such-topic", 0): 3, ("offsets-a", 7): 3}
    v1 = fetched(fetch(client, group, {"offsets-a": [0, 1, 2], "never-committed": [0]}, version=1))
    assert v1[("offsets-a", 0)] == {"partition_index": 0, "committed_offset": 10, "metadata": "first", "error_code": 0}
    assert v1[("offsets-a", 1)]["metadata"] == "" and v1[("offsets-a", 1)]["committed_offset"] == 11
    assert v1[("never-committed", 0)] == {"partition_index": 0, "committed_offset": -1, "metadata": "",
                                          "error_code": 0}
    v5 = fetched(fetch(client, group, {"offsets-a": [0, 2]}, version=5))
    assert v5[("offsets-a", 2)] == {"partition_index": 2, "committed_offset": 12, "committed_leader_epoch": 4,
                                    "metadata": "third", "error_code": 0}
    assert v5[("offsets-a", 0)]["committed_leader_epoch"] == -1
    # v2+: null topics means every committed partition, in order.
    every = fetch(client, group, None, version=3)
    assert every["error_code"] == 0 and [(t["name"], [p["partition_index"] for p in t["partitions"]])
                                         for t in every["topics"]] == [("offsets-a", [0, 1, 2])]
    assert fetch(client, "no-such-group", None, version=2) == {"topics": [], "error_code": 0}
    unknown = fetched(fetch(client, "no-such-group", {"offsets-a": [0]}, version=1))
    assert unknown[("offsets-a", 0)]["committed_offset"] == -1 and unknown[("offsets-a", 0)]["error_code"] == 0


def test_commits_of_a_member_check_its_generation(connect, store):
    client = connect()
    store.create_topic("offsets-b")
    member, generation = join_and_sync(client, "member-commits", topic="offsets-b")
    assert commit(client, "member-commits", {("offsets-b", 0): (5, "m")}, generation=generation,
                  member_id=member) == {("offsets-b", 0): 0}
    assert commit(client, "member-commits", {("offsets-b", 0): (6, "m")}, generation=generation + 1,
                  member_id=member) == {("offsets-b", 0): ILLEGAL_GENERATION}
    # A simple commit into a group with members is refused.
    assert commit(client, "member-commits", {("offsets-b", 0): (7, "")}) == {("offsets-b", 0): UNKNOWN_MEMBER_ID}
    assert fetched(fetch(client, "member-commits", {"offsets-b": [0]}))[("offsets-b", 0)]["committed_offset"] == 5
    # An empty commit is answered without a group being made.
    empty = client.call(OFFSET_COMMIT, 3, {"group_id": "commit-nothing", "generation_id_or_member_epoch": -1,
                                           "member_id": "", "topics": []})
    assert empty == {"throttle_time_ms": 0, "topics": []}


def test_offset_delete(connect, store):
    client = connect()
    store.create_topic("offsets-c", partitions=2)
    group = "offset-delete"
    commit(client, group, {("offsets-c", 0): (1, ""), ("offsets-c", 1): (2, "")})
    deleted = client.call(OFFSET_DELETE, 0, {"group_id": group, "topics": [
        {"name": "offsets-c", "partitions": [{"partition_index": 0}]},
        {"name": "no-such-topic", "partitions": [{"partition_index": 0}]}]})
    assert deleted == {"error_code": 0, "throttle_time_ms": 0, "topics": [
        {"name": "offsets-c", "partitions": [{"partition_index": 0, "error_code": 0}]},
        {"name": "no-such-topic", "partitions": [{"partition_index": 0, "error_code": 3}]}]}
    left = fetched(fetch(client, group, {"offsets-c": [0, 1]}))
    assert (left[("offsets-c", 0)]["committed_offset"], left[("offsets-c", 1)]["committed_offset"]) == (-1, 2)
    assert client.call(OFFSET_DELETE, 0, {"group_id": "no-such-group", "topics": [
        {"name": "offsets-c", "partitions": [{"partition_index": 0}]}]}) == {
        "error_code": GROUP_ID_NOT_FOUND, "throttle_time_ms": 0, "topics": []}


# --- ListGroups, DescribeGroups, DeleteGroups ---------------------------------------------------


def test_list_groups_with_and_without_a_states_filter(connect, store):
    client = connect()
    store.create_topic("offsets-d")
    join_and_sync(client, "listed-stable", topic="offsets-d")
    commit(client, "listed-simple", {("offsets-d", 0): (1, "")})
    stable = client.call(LIST_GROUPS, 4, {"states_filter": ["Stable"]})
    assert stable["error_code"] == 0
    assert {"group_id": "listed-stable", "protocol_type": "consumer", "group_state": "Stable"} in stable["groups"]
    assert all(group["group_state"] == "Stable" for group in stable["groups"])
    empty = client.call(LIST_GROUPS, 4, {"states_filter": ["empty"]})  # compared case-insensitively
    assert {"group_id": "listed-simple", "protocol_type": "", "group_state": "Empty"} in empty["groups"]
    assert "listed-stable" not in {group["group_id"] for group in empty["groups"]}
    for version in (0, 2, 3):
        every = client.call(LIST_GROUPS, version, {})
        assert {"group_id": "listed-simple", "protocol_type": ""} in every["groups"]
        assert {"group_id": "listed-stable", "protocol_type": "consumer"} in every["groups"]


def test_describe_an_unknown_group(connect):
    (dead,) = connect().call(DESCRIBE_GROUPS, 4, {"groups": ["never-was"], "include_authorized_operations": False})[
        "groups"]
    assert dead == {"error_code": 0, "group_id": "never-was", "group_state": "Dead", "protocol_type": "",
                    "protocol_data": "", "members": [], "authorized_operations": -2147483648}


def test_describe_groups_at_every_version_through_our_client(server, connect, store):
    """v0-v5 (v5: the first flexible version, v4's fields) as our client's connection sends them:
    each version's fields, a Stable group's static member and assignment, and ApiVersions' range."""
    client = connect()
    store.create_topic("described")
    joined = client.call(JOIN_GROUP, 5, join_body("described-g", topic="described", instance_id="static-1"))
    assert joined["error_code"] == 0, joined
    assert client.call(SYNC_GROUP, 3, {"group_id": "described-g", "generation_id": joined["generation_id"],
                                       "member_id": joined["member_id"], "group_instance_id": "static-1",
                                       "assignments": [{"member_id": joined["member_id"], "assignment": b"all"}]}
                       )["error_code"] == 0
    host, port = server.bootstrap_servers.rsplit(":", 1)
    with BrokerConnection(host, int(port), client_id="describe-versions", request_timeout_ms=10_000) as connection:
        assert connection.broker_versions[DESCRIBE_GROUPS] == (0, 5)
        assert connection.version_of("DescribeGroups") == 5
        for version in range(6):
            body = connection.request("DescribeGroups", {"groups": ["described-g", "never-was"],
                                                         "include_authorized_operations": True}, version=version)
            stable, dead = body["groups"]
            assert (stable["error_code"], stable["group_id"], stable["group_state"], stable["protocol_type"],
                    stable["protocol_data"]) == (0, "described-g", "Stable", "consumer", "range"), version
            (member,) = stable["members"]
            assert (member["member_id"], member["client_id"], member["client_host"], member["member_assignment"]) \
                == (joined["member_id"], "wire-test", "/127.0.0.1", b"all"), version
            assert member["member_metadata"] == subscription("described"), version
            assert member.get("group_instance_id") == ("static-1" if version >= 4 else None), version
            assert ("throttle_time_ms" in body) == (version >= 1), version
            for group in (stable, dead):  # READ, DELETE and DESCRIBE, asked for from v3
                assert group.get("authorized_operations") == ((1 << 3) | (1 << 6) | (1 << 8) if version >= 3
                                                              else None), version
            assert (dead["error_code"], dead["group_state"], dead["members"]) == (0, "Dead", []), version


def test_delete_groups(connect, store):
    client = connect()
    store.create_topic("offsets-e")
    commit(client, "to-delete", {("offsets-e", 0): (9, "")})
    join_and_sync(client, "in-use", topic="offsets-e")
    for version in (0, 2):
        body = client.call(DELETE_GROUPS, version, {"groups_names": ["to-delete", "never-was", "in-use", "to-delete"]})
        if version == 0:
            assert body == {"throttle_time_ms": 0, "results": [
                {"group_id": "to-delete", "error_code": 0}, {"group_id": "never-was", "error_code": GROUP_ID_NOT_FOUND},
                {"group_id": "in-use", "error_code": NON_EMPTY_GROUP}]}
        else:  # deleted by the first call
            assert body["results"][0] == {"group_id": "to-delete", "error_code": GROUP_ID_NOT_FOUND}
    assert fetched(fetch(client, "to-delete", {"offsets-e": [0]}))[("offsets-e", 0)]["committed_offset"] == -1


# --- KIP-848, a stopped coordinator, stopping the server ------------------------------------------


def test_a_kip_848_heartbeat_is_answered_unsupported_version_and_the_connection_stays(connect):
    client = connect()
    client.send(CONSUMER_GROUP_HEARTBEAT, 0, {"group_id": "new-protocol", "member_id": "", "member_epoch": 0,
                                              "subscribed_topic_names": ["t"]})
    _, refused = client.receive(CONSUMER_GROUP_HEARTBEAT, 0)
    assert refused["error_code"] == errors.UNSUPPORTED_VERSION and "group.protocol=classic" in refused["error_message"]
    assert (refused["member_id"], refused["assignment"]) == (None, -1)  # a null Assignment
    assert client.call(FIND_COORDINATOR, 0, {"key": "g"})["error_code"] == 0  # the connection goes on
    # ConsumerGroupDescribe has no table: the connection is closed, as for any unknown API.
    client.send_raw(struct.pack(">ihhih", 2 + 2 + 4 + 2 + 1, CONSUMER_GROUP_DESCRIBE, 0, 5, -1) + b"\x00")
    assert client.is_closed_by_server()


def test_without_a_running_coordinator_group_requests_say_so(tmp_path):
    with LogManager([str(tmp_path / "data")]) as store, \
            KafkaServer(store, listen="127.0.0.1:0", config=SETTINGS) as server:
        store.create_topic("t")
        server.coordinator.shutdown()
        client = WireClient(server.bootstrap_servers)
        try:
            unavailable = errors.COORDINATOR_NOT_AVAILABLE
            assert client.call(FIND_COORDINATOR, 1, {"key": "g", "key_type": 0})["error_code"] == unavailable
            assert fetch(client, "g", {"t": [0, 1]}, version=1)["topics"] == [{"name": "t", "partitions": [
                {"partition_index": index, "committed_offset": -1, "metadata": "", "error_code": unavailable}
                for index in (0, 1)]}]
            assert fetch(client, "g", {"t": [0]}, version=2) == {"topics": [], "error_code": unavailable}
            assert client.call(JOIN_GROUP, 5, join_body("g"))["error_code"] == unavailable
            assert client.call(LEAVE_GROUP, 3, {"group_id": "g", "members": [{"member_id": "m"}]}) == {
                "throttle_time_ms": 0, "error_code": unavailable, "members": []}
            assert commit(client, "g", {("t", 0): (1, "")}) == {("t", 0): unavailable}
        finally:
            client.close()


def test_stopping_closes_a_parked_join_instead_of_waiting_for_it(tmp_path):
    with LogManager([str(tmp_path / "data")]) as store:
        server = KafkaServer(store, listen="127.0.0.1:0", config=SETTINGS).start()
        first, second = WireClient(server.bootstrap_servers), WireClient(server.bootstrap_servers)
        try:
            join_and_sync(first, "parked")
            # The second member's join waits for the first to rejoin, within 60 s: it is parked.
            second.send(JOIN_GROUP, 3, join_body("parked", rebalance_ms=60000))
            time.sleep(0.2)
            started = time.monotonic()
            server.stop()
            assert time.monotonic() - started < 3  # not the 5 s drain, nor the rebalance timeout
            with pytest.raises(ConnectionError):  # closed, never answered
                second.receive_frame()
        finally:
            server.stop()
            first.close()
            second.close()


def test_group_settings_are_the_coordinators_and_the_brokers_described_configs(tmp_path):
    from logstore.errors import InvalidConfigError

    settings = {**SETTINGS, "offsets.retention.minutes": 5, "num.partitions": 2}
    with LogManager([str(tmp_path / "data")]) as store, \
            KafkaServer(store, listen="127.0.0.1:0", config=settings) as server:
        assert server.coordinator.config.offsets_retention_minutes == 5
        assert server.coordinator.config.initial_rebalance_delay_ms == 0
        assert server.config.num_partitions == 2 and "__consumer_offsets" not in store.topics()  # until used
        assert server.coordinator.partition_for("group1") == 1  # of 3 (of 50 it would be 40)
        described = WireClient(server.bootstrap_servers)
        try:
            (result,) = described.call(32, 2, {"resources": [{"resource_type": 4, "resource_name": "",
                                                               "configuration_keys": None}],
                                               "include_synonyms": False})["results"]
            values = {entry["name"]: entry["value"] for entry in result["configs"]}
            assert values["offsets.retention.minutes"] == "5" and values["group.min.session.timeout.ms"] == "100"
        finally:
            described.close()
    with pytest.raises(InvalidConfigError):
        KafkaServer(str(tmp_path / "other"), listen="127.0.0.1:0",
                    config={"group.min.session.timeout.ms": 10, "group.max.session.timeout.ms": 5})


def test_a_stopped_servers_consumer_offsets_come_back(tmp_path):
    data = str(tmp_path / "data")
    with KafkaServer(data, listen="127.0.0.1:0", config=SETTINGS) as server:
        server.store.create_topic("kept")
        client = WireClient(server.bootstrap_servers)
        assert commit(client, "durable", {("kept", 0): (42, "meta")}) == {("kept", 0): 0}
        client.close()
    with KafkaServer(data, listen="127.0.0.1:0", config=SETTINGS) as server:
        client = WireClient(server.bootstrap_servers)
        try:
            partition = fetched(fetch(client, "durable", {"kept": [0]}))[("kept", 0)]
            assert (partition["committed_offset"], partition["metadata"]) == (42, "meta")
        finally:
            client.close()


def test_logstore_serve_documents_every_group_setting():
    from logstore.cli.serve import serve
    from logstore.group.config import GROUP_KEYS

    documented = " ".join(serve.help.split())
    assert [key for key in GROUP_KEYS if key not in documented] == []
