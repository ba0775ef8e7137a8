"""RequestAuthorization (logstore.server.security.authorization): Kafka's ACL rule of every API
applied to decoded requests, with a fake authorizer (a set of allowed (principal, operation, type,
name) tuples).

Requests are real: each is encoded by our codec and decoded with ``decode_request`` at every version
we serve, so the rules read exactly the dicts the handlers get. Each API has a stand-in handler
(``ECHO``) that answers the (narrowed) request with success entries, the way the real handler shapes
its answer; every refusal and every amended response is encoded and decoded again at every version,
which proves the refusal bodies carry every field the codec needs. Covered: narrowing and amending
per API, whole refusals, filtered listings, auto-creation switched off without CREATE, the
authorized-operations bit fields, the super-broad allow that changes nothing, the denial reports and
the one-question-per-resource cache, and a hypothesis test over random ACL sets in which every
refused item gets exactly its code and every allowed item is untouched.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.server.protocol.codec import (SUPPORTED_VERSIONS, decode_request, decode_request_header, decode_response,
                                            encode_request, encode_response)
from logstore.server.security.authorization import (ALTER, ALTER_CONFIGS, CLUSTER, CLUSTER_ACTION, CLUSTER_NAME,
                                                    CREATE, DELETE, DESCRIBE, DESCRIBE_CONFIGS, GROUP,
                                                    IDEMPOTENT_WRITE, NOT_REQUESTED, READ, TOPIC, TRANSACTIONAL_ID,
                                                    WRITE, RequestAuthorization, Verdict)

ALICE, HOST = "User:alice", "10.0.0.7"
TOPICS = ("a", "b", "c")
GROUPS = ("g1", "g2")
OK, TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 0, 29, 30, 31, 53


class FakeAuthorizer:
    """Allows exactly the (principal, operation, resource type, name) tuples in ``allowed`` (the
    principal ``"*"`` there matches everyone); counts the questions asked."""

    def __init__(self, allowed=(), everything: bool = False) -> None:
        self.allowed = set(allowed)
        self.everything = everything
        self.asked: list[tuple] = []

    def authorize(self, principal, host, operation, resource_type, name) -> bool:
        self.asked.append((operation, resource_type, name))
        return self.everything or any((who, operation, resource_type, name) in self.allowed for who in (principal, "*"))

    def authorize_any(self, principal, host, operation, resource_type) -> bool:
        return self.everything or any(who in (principal, "*") and op == operation and kind == resource_type
                                      for who, op, kind, _name in self.allowed)

    def authorized_operations(self, principal, host, resource_type, name) -> set[int]:
        # Operation 2 (ALL) is never a bit of the field: the rule must mask it away.
        found = {op for who, op, kind, found_name in self.allowed
                 if who in (principal, "*") and kind == resource_type and found_name == name}
        return found | {2} | ({READ, WRITE, DESCRIBE, DELETE, CREATE, ALTER} if self.everything else set())


def allow(*entries) -> FakeAuthorizer:
    """``allow((READ, TOPIC, "a"), ...)`` for ALICE."""
    return FakeAuthorizer({(ALICE, *entry) for entry in entries})


def check(authorizer, api_key, version, request, denied=None) -> Verdict:
    return RequestAuthorization(authorizer, denied).check(api_key, version, request, ALICE, HOST)


def versions(api_key):
    low, high = SUPPORTED_VERSIONS[api_key]
    return range(low, high + 1)


def decoded(api_key: int, version: int, body: dict) -> dict:
    """``body`` as the server decodes it: encoded by our codec, read back by ``decode_request``."""
    frame = memoryview(encode_request(api_key, version, 7, "test", body))[4:]
    header, offset = decode_request_header(frame)
    return decode_request(api_key, version, frame, offset)


def on_the_wire(api_key: int, version: int, body: dict) -> dict:
    """A response body encoded and decoded again: what the client reads."""
    frame = b"".join(bytes(chunk) for chunk in encode_response(api_key, version, 7, body))
    return decode_response(api_key, version, memoryview(frame)[4:])[1]


# --- sample requests and stand-in handlers, per API ------------------------------------------------

def _topics(key, partitions_key, make, topics=TOPICS):
    return [{key: name, partitions_key: [make(index) for index in (0, 1)]} for name in topics]


SAMPLES = {
    0: lambda v: {"acks": 1, "timeout_ms": 100, "topic_data": _topics("name", "partition_data",
                                                                       lambda i: {"index": i, "records": b""})},
    1: lambda v: {"max_wait_ms": 0, "min_bytes": 1, "topics": _topics(
        "topic", "partitions", lambda i: {"partition": i, "fetch_offset": 0, "partition_max_bytes": 9})},
    2: lambda v: {"replica_id": -1, "topics": _topics("name", "partitions",
                                                      lambda i: {"partition_index": i, "timestamp": -1})},
    3: lambda v: {"topics": [{"name": name} for name in TOPICS], "allow_auto_topic_creation": False},
    8: lambda v: {"group_id": "g1", "member_id": "", "topics": _topics(
        "name", "partitions", lambda i: {"partition_index": i, "committed_offset": 5, "committed_metadata": ""})},
    9: lambda v: {"group_id": "g1", "topics": [{"name": name, "partition_indexes": [0, 1]} for name in TOPICS]},
    10: lambda v: {"key": "g1", "key_type": 0, "coordinator_keys": list(GROUPS)},
    11: lambda v: {"group_id": "g1", "session_timeout_ms": 10, "member_id": "", "protocol_type": "consumer",
                   "protocols": [{"name": "range", "metadata": b""}]},
    12: lambda v: {"group_id": "g1", "generation_id": 1, "member_id": "m"},
    13: lambda v: {"group_id": "g1", "member_id": "m", "members": [{"member_id": "m"}]},
    14: lambda v: {"group_id": "g1", "generation_id": 1, "member_id": "m", "assignments": []},
    15: lambda v: {"groups": list(GROUPS)},
    16: lambda v: {},
    19: lambda v: {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1} for name in TOPICS]},
    20: lambda v: {"topic_names": list(TOPICS), "timeout_ms": 10},
    21: lambda v: {"topics": _topics("name", "partitions", lambda i: {"partition_index": i, "offset": 3}),
                   "timeout_ms": 10},
    22: lambda v: {"transactional_id": None, "transaction_timeout_ms": 10},
    23: lambda v: {"topics": _topics("topic", "partitions", lambda i: {"partition": i, "leader_epoch": 0})},
    32: lambda v: {"resources": [{"resource_type": 2, "resource_name": name, "configuration_keys": None}
                                 for name in TOPICS] + [{"resource_type": 4, "resource_name": "0"}]},
    37: lambda v: {"topics": [{"name": name, "count": 3, "assignments": None} for name in TOPICS],
                   "timeout_ms": 10, "validate_only": False},
    42: lambda v: {"groups_names": list(GROUPS)},
    44: lambda v: {"resources": [{"resource_type": 2, "resource_name": name, "configs": []} for name in TOPICS]
                   + [{"resource_type": 4, "resource_name": "0", "configs": []}], "validate_only": False},
    47: lambda v: {"group_id": "g1", "topics": _topics("name", "partitions", lambda i: {"partition_index": i})},
}


def _echo_partitions(request_topics, key, partitions_key, out_key, out_partitions_key, make):
    return [{out_key: topic[key], out_partitions_key: [make(partition) for partition in topic[partitions_key]]}
            for topic in request_topics]


def _metadata_echo(v, r):
    names = [topic["name"] for topic in r["topics"]] if r["topics"] else list(TOPICS)  # null/v0 []: every topic
    return {"brokers": [{"node_id": 0, "host": "h", "port": 1}], "topics": [
        {"error_code": OK, "name": name, "partitions": [], "topic_authorized_operations": NOT_REQUESTED}
        for name in names], "cluster_authorized_operations": NOT_REQUESTED}


ECHO = {
    0: lambda v, r: {"responses": _echo_partitions(r["topic_data"], "name", "partition_data", "name",
                                                   "partition_responses",
                                                   lambda p: {"index": p["index"], "error_code": OK, "base_offset": 0})},
    1: lambda v, r: {"error_code": OK, "responses": _echo_partitions(
        r["topics"], "topic", "partitions", "topic", "partitions",
        lambda p: {"partition_index": p["partition"], "error_code": OK, "high_watermark": 0, "records": b""})},
    2: lambda v, r: {"topics": _echo_partitions(r["topics"], "name", "partitions", "name", "partitions",
                                                lambda p: {"partition_index": p["partition_index"], "error_code": OK})},
    3: _metadata_echo,
    8: lambda v, r: {"topics": _echo_partitions(r["topics"], "name", "partitions", "name", "partitions",
                                                lambda p: {"partition_index": p["partition_index"], "error_code": OK})},
    9: lambda v, r: {"error_code": OK, "topics": [
        {"name": topic["name"], "partitions": [{"partition_index": i, "committed_offset": 5, "metadata": "",
                                                "error_code": OK} for i in topic["partition_indexes"]]}
        for topic in (r["topics"] if r.get("topics") is not None else
                      [{"name": name, "partition_indexes": [0, 1]} for name in TOPICS])]},
    10: lambda v, r: ({"coordinators": [{"key": key, "node_id": 0, "host": "h", "port": 1, "error_code": OK}
                                        for key in r["coordinator_keys"]]} if v >= 4 else
                      {"error_code": OK, "node_id": 0, "host": "h", "port": 1}),
    11: lambda v, r: {"error_code": OK, "generation_id": 1, "protocol_name": "range", "leader": "m", "member_id": "m"},
    12: lambda v, r: {"error_code": OK},
    13: lambda v, r: {"error_code": OK, "members": []},
    14: lambda v, r: {"error_code": OK, "assignment": b"x"},
    15: lambda v, r: {"groups": [{"error_code": OK, "group_id": group, "group_state": "Stable", "members": [],
                                  "authorized_operations": NOT_REQUESTED} for group in r["groups"]]},
    16: lambda v, r: {"error_code": OK, "groups": [{"group_id": group, "protocol_type": "consumer"}
                                                   for group in GROUPS]},
    19: lambda v, r: {"topics": [{"name": topic["name"], "error_code": OK, "error_message": None}
                                 for topic in r["topics"]]},
    20: lambda v, r: {"responses": [{"name": name, "error_code": OK} for name in r["topic_names"]]},
    21: lambda v, r: {"topics": _echo_partitions(r["topics"], "name", "partitions", "name", "partitions",
                                                 lambda p: {"partition_index": p["partition_index"], "low_watermark": 3,
                                                            "error_code": OK})},
    22: lambda v, r: {"error_code": OK, "producer_id": 1, "producer_epoch": 0},
    23: lambda v, r: {"topics": _echo_partitions(r["topics"], "topic", "partitions", "topic", "partitions",
                                                 lambda p: {"error_code": OK, "partition": p["partition"],
                                                            "end_offset": 1})},
    32: lambda v, r: {"results": [{"error_code": OK, "error_message": None, "resource_type": res["resource_type"],
                                   "resource_name": res["resource_name"], "configs": [
                                       {"name": "k", "value": "v", "read_only": False, "is_sensitive": False}]}
                                  for res in r["resources"]]},
    37: lambda v, r: {"results": [{"name": topic["name"], "error_code": OK, "error_message": None}
                                  for topic in r["topics"]]},
    42: lambda v, r: {"results": [{"group_id": group, "error_code": OK} for group in dict.fromkeys(r["groups_names"])]},
    44: lambda v, r: {"responses": [{"error_code": OK, "error_message": None, "resource_type": res["resource_type"],
                                     "resource_name": res["resource_name"]} for res in r["resources"]]},
    47: lambda v, r: {"error_code": OK, "topics": _echo_partitions(
        r["topics"], "name", "partitions", "name", "partitions",
        lambda p: {"partition_index": p["partition_index"], "error_code": OK})},
}


def serve(authorizer, api_key, version, body=None, denied=None):
    """Decode the sample (or ``body``), check it, run the stand-in handler as the integration would,
    and return (verdict, the original request, the response as the client reads it or None)."""
    request = decoded(api_key, version, SAMPLES[api_key](version) if body is None else body)
    verdict = check(authorizer, api_key, version, request, denied)
    if verdict.response is not None:
        return verdict, request, on_the_wire(api_key, version, verdict.response)
    if verdict.close is not None:
        return verdict, request, None
    response = ECHO[api_key](version, request if verdict.request is None else verdict.request)
    if verdict.amend is not None:
        response = verdict.amend(response)
    return verdict, request, on_the_wire(api_key, version, response)


def partition_codes(response, list_key, name_key, partitions_key, index_key):
    return {(topic[name_key], partition[index_key]): partition["error_code"]
            for topic in response[list_key] for partition in topic[partitions_key]}


def per_partition(codes_by_topic):
    return {(name, index): code for name, code in codes_by_topic.items() for index in (0, 1)}


# --- the data APIs -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(0))
def test_produce_narrowed_per_topic(version):
    verdict, request, response = serve(allow((WRITE, TOPIC, "a"), (WRITE, TOPIC, "c")), 0, version)
    assert [topic["name"] for topic in verdict.request["topic_data"]] == ["a", "c"]
    assert [topic["name"] for topic in request["topic_data"]] == list(TOPICS)  # the original is not touched
    assert partition_codes(response, "responses", "name", "partition_responses", "index") == per_partition(
        {"a": OK, "b": TOPIC_DENIED, "c": OK})
    refused = response["responses"][-1]["partition_responses"][0]
    assert refused["base_offset"] == -1 and refused.get("log_start_offset", -1) == -1


@pytest.mark.parametrize("version", range(3, 9))
def test_produce_transactional_id_refused_as_a_whole(version):
    body = {**SAMPLES[0](version), "transactional_id": "tx"}
    verdict, _, response = serve(allow(*((WRITE, TOPIC, name) for name in TOPICS)), 0, version, body)
    assert verdict.response is not None
    assert set(partition_codes(response, "responses", "name", "partition_responses", "index").values()) == {TXN_DENIED}
    verdict, _, _ = serve(allow((WRITE, TRANSACTIONAL_ID, "tx"), (WRITE, TOPIC, "a"), (WRITE, TOPIC, "b"),
                                (WRITE, TOPIC, "c")), 0, version, body)
    assert verdict is Verdict.ALLOWED


def test_produce_acks_0_closes_and_narrows():
    body = {**SAMPLES[0](8), "acks": 0}
    verdict, _, _ = serve(allow((WRITE, TOPIC, "a")), 0, 8, body)
    assert verdict.close and verdict.response is None
    assert [topic["name"] for topic in verdict.request["topic_data"]] == ["a"]
    verdict, _, _ = serve(allow(), 0, 8, {**body, "transactional_id": "tx"})
    assert verdict.close and verdict.request["topic_data"] == []


@pytest.mark.parametrize("version", versions(1))
def test_fetch_refused_partitions_have_no_data(version):
    verdict, _, response = serve(allow((READ, TOPIC, "b")), 1, version)
    assert [topic["topic"] for topic in verdict.request["topics"]] == ["b"]
    assert partition_codes(response, "responses", "topic", "partitions", "partition_index") == per_partition(
        {"a": TOPIC_DENIED, "b": OK, "c": TOPIC_DENIED})
    refused = response["responses"][-1]["partitions"][0]
    assert refused["high_watermark"] == -1 and not refused["records"]
    if version >= 4:
        assert refused["last_stable_offset"] == -1 and refused["aborted_transactions"] is None


def test_fetch_session_error_gets_no_refused_partitions():
    """An unknown session is answered alone (the handler declines sessions, so nothing rides in one)."""
    request = decoded(1, 11, {**SAMPLES[1](11), "session_id": 5, "forgotten_topics_data": [
        {"topic": "b", "partitions": [0]}]})
    verdict = check(allow(), 1, 11, request)
    body = verdict.amend({"error_code": 70, "session_id": 0, "responses": []})
    assert body["responses"] == [] and verdict.request["topics"] == []


@pytest.mark.parametrize("api_key, name_key, index_key", [(2, "name", "partition_index"), (23, "topic", "partition")])
def test_list_offsets_and_offset_for_leader_epoch_need_describe(api_key, name_key, index_key):
    for version in versions(api_key):
        verdict, _, response = serve(allow((DESCRIBE, TOPIC, "a")), api_key, version)
        assert partition_codes(response, "topics", name_key, "partitions", index_key) == per_partition(
            {"a": OK, "b": TOPIC_DENIED, "c": TOPIC_DENIED})
        refused = response["topics"][-1]["partitions"][0]
        assert refused.get("offset", refused.get("end_offset")) == -1


def test_offset_for_leader_epoch_cluster_action_allows_every_topic():
    seen = []
    verdict, _, _ = serve(allow((CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)), 23, 3, denied=lambda *a: seen.append(a))
    assert verdict is Verdict.ALLOWED and seen == []


# --- Metadata ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(3))
def test_metadata_listing_keeps_described_topics(version):
    body = {"topics": [] if version == 0 else None}
    seen = []
    verdict, request, response = serve(allow((DESCRIBE, TOPIC, "c")), 3, version, body, lambda *a: seen.append(a))
    assert verdict.request is request  # nothing to narrow: the handler lists, the amend filters
    assert [topic["name"] for topic in response["topics"]] == ["c"]
    assert seen == []  # a listing reports no denial


@pytest.mark.parametrize("version", versions(3))
def test_metadata_named_topics_refused_without_describe(version):
    verdict, _, response = serve(allow((DESCRIBE, TOPIC, "b")), 3, version)
    by_name = {topic["name"]: topic for topic in response["topics"]}
    assert {name: topic["error_code"] for name, topic in by_name.items()} == {"a": TOPIC_DENIED, "b": OK,
                                                                              "c": TOPIC_DENIED}
    assert by_name["a"]["partitions"] == [] and by_name["a"].get("is_internal", False) is False


@pytest.mark.parametrize("version", [0, 1])
def test_metadata_every_named_topic_refused_lists_nothing_else(version):
    """At v0 a request narrowed to no topics reads "every topic": the amend keeps only what was asked."""
    body = {"topics": [{"name": "a"}]}
    verdict, _, response = serve(allow(*((DESCRIBE, TOPIC, name) for name in TOPICS[1:])), 3, version, body)
    assert [(topic["name"], topic["error_code"]) for topic in response["topics"]] == [("a", TOPIC_DENIED)]


@pytest.mark.parametrize("version", versions(3))
def test_metadata_auto_creation_needs_create(version):
    body = {"topics": [{"name": "a"}, {"name": "b"}], "allow_auto_topic_creation": True}
    describe = [(DESCRIBE, TOPIC, "a"), (DESCRIBE, TOPIC, "b")]
    verdict, request, _ = serve(allow(*describe, (CREATE, TOPIC, "a")), 3, version, body)
    assert verdict.request["allow_auto_topic_creation"] is False  # b cannot be created: neither is a
    assert verdict.request["topics"] == request["topics"]
    for rights in ([(CREATE, CLUSTER, CLUSTER_NAME)], [(CREATE, TOPIC, "a"), (CREATE, TOPIC, "b")]):
        verdict, _, _ = serve(allow(*describe, *rights), 3, version, body)
        assert verdict is Verdict.ALLOWED
    if version >= 4:  # the client did not ask for creation: nothing to switch off
        verdict, _, _ = serve(allow(*describe), 3, version, {**body, "allow_auto_topic_creation": False})
        assert verdict is Verdict.ALLOWED


def test_metadata_authorized_operations_bit_fields():
    authorizer = allow((DESCRIBE, TOPIC, "a"), (READ, TOPIC, "a"), (DESCRIBE, CLUSTER, CLUSTER_NAME),
                       (CREATE, CLUSTER, CLUSTER_NAME))
    body = {"topics": [{"name": "a"}, {"name": "b"}], "include_cluster_authorized_operations": True,
            "include_topic_authorized_operations": True}
    _, _, response = serve(authorizer, 3, 8, body)
    assert response["cluster_authorized_operations"] == (1 << DESCRIBE) | (1 << CREATE)
    by_name = {topic["name"]: topic for topic in response["topics"]}
    assert by_name["a"]["topic_authorized_operations"] == (1 << DESCRIBE) | (1 << READ)
    assert by_name["b"]["topic_authorized_operations"] == NOT_REQUESTED
    verdict, _, response = serve(authorizer, 3, 8, {"topics": [{"name": "a"}]})
    assert response["cluster_authorized_operations"] == NOT_REQUESTED  # not asked for: left alone


# --- the group APIs ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(8))
def test_offset_commit(version):
    _, _, response = serve(allow((READ, TOPIC, "a")), 8, version)  # no READ on the group
    assert set(partition_codes(response, "topics", "name", "partitions", "partition_index").values()) == {GROUP_DENIED}
    _, _, response = serve(allow((READ, GROUP, "g1"), (READ, TOPIC, "a")), 8, version)
    assert partition_codes(response, "topics", "name", "partitions", "partition_index") == per_partition(
        {"a": OK, "b": TOPIC_DENIED, "c": TOPIC_DENIED})


@pytest.mark.parametrize("version", versions(9))
def test_offset_fetch(version):
    _, _, response = serve(allow((DESCRIBE, TOPIC, "a")), 9, version)  # no DESCRIBE on the group
    if version >= 2:
        assert response["error_code"] == GROUP_DENIED and response["topics"] == []
    else:
        assert set(partition_codes(response, "topics", "name", "partitions", "partition_index").values()) == {
            GROUP_DENIED}
    group = (DESCRIBE, GROUP, "g1")
    _, _, response = serve(allow(group, (DESCRIBE, TOPIC, "c")), 9, version)
    codes = partition_codes(response, "topics", "name", "partitions", "partition_index")
    assert codes == per_partition({"a": TOPIC_DENIED, "b": TOPIC_DENIED, "c": OK})
    refused = response["topics"][-1]["partitions"][0]
    assert refused["committed_offset"] == -1 and refused["metadata"] == ""
    if version >= 2:  # null topics: every committed offset, the listing filtered
        verdict, request, response = serve(allow(group, (DESCRIBE, TOPIC, "b")), 9, version,
                                           {"group_id": "g1", "topics": None})
        assert verdict.request is request and [topic["name"] for topic in response["topics"]] == ["b"]


@pytest.mark.parametrize("version", versions(10))
def test_find_coordinator(version):
    verdict, _, response = serve(allow((DESCRIBE, GROUP, "g2")), 10, version)
    if version >= 4:
        assert {entry["key"]: entry["error_code"] for entry in response["coordinators"]} == {"g1": GROUP_DENIED,
                                                                                              "g2": OK}
        assert response["coordinators"][-1]["node_id"] == -1
    else:
        assert response["error_code"] == GROUP_DENIED and response["node_id"] == -1
    if version >= 1:
        body = {"key": "tx", "key_type": 1, "coordinator_keys": ["tx"]}
        _, _, response = serve(allow((DESCRIBE, GROUP, "tx")), 10, version, body)
        codes = [entry["error_code"] for entry in response["coordinators"]] if version >= 4 else [response["error_code"]]
        assert codes == [TXN_DENIED]
        verdict, _, _ = serve(allow((DESCRIBE, TRANSACTIONAL_ID, "tx")), 10, version, body)
        assert verdict is Verdict.ALLOWED


@pytest.mark.parametrize("api_key", [11, 12, 13, 14])
def test_membership_apis_need_read_on_the_group(api_key):
    for version in versions(api_key):
        verdict, _, response = serve(allow((DESCRIBE, GROUP, "g1")), api_key, version)
        assert verdict.response is not None and response["error_code"] == GROUP_DENIED
        if api_key == 11:
            assert (response["generation_id"], response["member_id"], response["leader"], response["members"]) == (
                -1, "", "", [])
        verdict, _, _ = serve(allow((READ, GROUP, "g1")), api_key, version)
        assert verdict is Verdict.ALLOWED


@pytest.mark.parametrize("version", versions(15))
def test_describe_groups(version):
    authorizer = allow((DESCRIBE, GROUP, "g2"), (READ, GROUP, "g2"))
    _, _, response = serve(authorizer, 15, version)
    by_id = {group["group_id"]: group for group in response["groups"]}
    assert by_id["g1"]["error_code"] == GROUP_DENIED and by_id["g1"]["members"] == [] and by_id["g1"][
        "group_state"] == ""
    assert by_id["g2"]["error_code"] == OK
    if version >= 3:
        _, _, response = serve(authorizer, 15, version, {"groups": ["g2"], "include_authorized_operations": True})
        assert response["groups"][0]["authorized_operations"] == (1 << DESCRIBE) | (1 << READ)


@pytest.mark.parametrize("version", versions(16))
def test_list_groups(version):
    verdict, _, response = serve(allow((DESCRIBE, GROUP, "g2")), 16, version)
    assert [group["group_id"] for group in response["groups"]] == ["g2"]
    verdict, _, _ = serve(allow((DESCRIBE, CLUSTER, CLUSTER_NAME)), 16, version)
    assert verdict is Verdict.ALLOWED


@pytest.mark.parametrize("version", versions(42))
def test_delete_groups(version):
    body = {"groups_names": ["g1", "g2", "g1"]}
    _, _, response = serve(allow((DELETE, GROUP, "g2")), 42, version, body)
    assert sorted((r["group_id"], r["error_code"]) for r in response["results"]) == [("g1", GROUP_DENIED), ("g2", OK)]


def test_offset_delete():
    _, _, response = serve(allow((READ, GROUP, "g1"), (READ, TOPIC, "a")), 47, 0)
    assert response["error_code"] == GROUP_DENIED and response["topics"] == []
    _, _, response = serve(allow((DELETE, GROUP, "g1"), (READ, TOPIC, "a")), 47, 0)
    assert partition_codes(response, "topics", "name", "partitions", "partition_index") == per_partition(
        {"a": OK, "b": TOPIC_DENIED, "c": TOPIC_DENIED})
    verdict = check(allow((DELETE, GROUP, "g1")), 47, 0, decoded(47, 0, SAMPLES[47](0)))
    assert verdict.amend({"error_code": 69, "topics": []})["topics"] == []  # a group error answers no partition


# --- the admin APIs ------------------------------------------------------------------------------


@pytest.mark.parametrize("api_key, operation, list_key", [(19, CREATE, "topics"), (20, DELETE, "responses")])
def test_create_and_delete_topics(api_key, operation, list_key):
    for version in versions(api_key):
        verdict, _, response = serve(allow((operation, TOPIC, "a")), api_key, version)
        assert {entry["name"]: entry["error_code"] for entry in response[list_key]} == {
            "a": OK, "b": TOPIC_DENIED, "c": TOPIC_DENIED}
    verdict, _, _ = serve(allow((CREATE, CLUSTER, CLUSTER_NAME)), 19, 4)
    assert verdict is Verdict.ALLOWED


@pytest.mark.parametrize("version", versions(21))
def test_delete_records(version):
    _, _, response = serve(allow((DELETE, TOPIC, "c")), 21, version)
    assert partition_codes(response, "topics", "name", "partitions", "partition_index") == per_partition(
        {"a": TOPIC_DENIED, "b": TOPIC_DENIED, "c": OK})
    assert response["topics"][-1]["partitions"][0]["low_watermark"] == -1


@pytest.mark.parametrize("version", versions(22))
def test_init_producer_id(version):
    seen = []
    _, _, response = serve(allow((READ, TOPIC, "a")), 22, version, denied=lambda *a: seen.append(a))
    assert (response["error_code"], response["producer_id"], response["producer_epoch"]) == (CLUSTER_DENIED, -1, -1)
    assert seen == [(ALICE, HOST, "IdempotentWrite", "Cluster", CLUSTER_NAME)]
    for rights in ([(IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)], [(WRITE, TOPIC, "b")]):
        assert serve(allow(*rights), 22, version)[0] is Verdict.ALLOWED
    body = {"transactional_id": "tx", "transaction_timeout_ms": 10}
    _, _, response = serve(allow((IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)), 22, version, body)
    assert response["error_code"] == TXN_DENIED
    assert serve(allow((WRITE, TRANSACTIONAL_ID, "tx")), 22, version, body)[0] is Verdict.ALLOWED


@pytest.mark.parametrize("version", versions(37))
def test_create_partitions_needs_alter_on_each_topic_and_leaves_duplicates_to_the_handler(version):
    seen = []
    verdict, _, response = serve(allow((ALTER, TOPIC, "b")), 37, version, denied=lambda *a: seen.append(a))
    assert [topic["name"] for topic in verdict.request["topics"]] == ["b"]
    assert {entry["name"]: entry["error_code"] for entry in response["results"]} == {
        "a": TOPIC_DENIED, "b": OK, "c": TOPIC_DENIED}
    assert sorted(entry[4] for entry in seen) == ["a", "c"] and {entry[2] for entry in seen} == {"Alter"}
    # CREATE or ALTER_CONFIGS do not grow a topic
    assert serve(allow((CREATE, TOPIC, "a"), (ALTER_CONFIGS, TOPIC, "a")), 37, version)[0].request["topics"] == []
    # a name given twice reaches the handler (INVALID_REQUEST whatever the ACLs), unasked about
    body = {"topics": [{"name": "a", "count": 2, "assignments": None}, {"name": "a", "count": 3, "assignments": None},
                       {"name": "b", "count": 2, "assignments": None}], "timeout_ms": 10, "validate_only": True}
    seen.clear()
    verdict, _, response = serve(allow(), 37, version, body, denied=lambda *a: seen.append(a))
    assert [topic["name"] for topic in verdict.request["topics"]] == ["a", "a"]
    assert [entry[4] for entry in seen] == ["b"]


@pytest.mark.parametrize("api_key, operation, list_key", [(32, DESCRIBE_CONFIGS, "results"),
                                                          (44, ALTER_CONFIGS, "responses")])
def test_configs(api_key, operation, list_key):
    for version in versions(api_key):
        _, _, response = serve(allow((operation, TOPIC, "b")), api_key, version)
        codes = {(entry["resource_type"], entry["resource_name"]): entry["error_code"] for entry in response[list_key]}
        assert codes == {(2, "a"): TOPIC_DENIED, (2, "b"): OK, (2, "c"): TOPIC_DENIED, (4, "0"): CLUSTER_DENIED}
        if api_key == 32:
            assert all(entry["configs"] == [] for entry in response[list_key] if entry["error_code"])
    # A resource type the handler refuses itself passes through.
    body = {"resources": [{"resource_type": 9, "resource_name": "x", "configs": []}]}
    assert serve(allow(), api_key, 0, body)[0] is Verdict.ALLOWED
    everything = allow(*((operation, TOPIC, name) for name in TOPICS), (operation, CLUSTER, CLUSTER_NAME))
    assert serve(everything, api_key, 0)[0] is Verdict.ALLOWED


# --- the security APIs: whole refusals of cluster operations -----------------------------------

SECURITY = {
    29: (DESCRIBE, {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1, "permission_type": 1}),
    30: (ALTER, {"creations": [{"resource_type": 2, "resource_name": "a", "resource_pattern_type": 3,
                                "principal": "User:bob", "host": "*", "operation": 3, "permission_type": 3}] * 2}),
    31: (ALTER, {"filters": [{"resource_type_filter": 2, "pattern_type_filter": 1, "operation": 1,
                              "permission_type": 1}]}),
    50: (DESCRIBE, {"users": [{"name": "bob"}, {"name": "carol"}]}),
    51: (ALTER, {"deletions": [{"name": "bob", "mechanism": 1}], "upsertions": [
        {"name": "bob", "mechanism": 2, "iterations": 4096, "salt": b"s", "salted_password": b"p"},
        {"name": "carol", "mechanism": 1, "iterations": 4096, "salt": b"s", "salted_password": b"p"}]}),
}


@pytest.mark.parametrize("api_key", sorted(SECURITY))
def test_security_apis_need_a_cluster_operation(api_key):
    operation, body = SECURITY[api_key]
    for version in versions(api_key):
        request = decoded(api_key, version, body)
        seen = []
        verdict = check(allow((READ, CLUSTER, CLUSTER_NAME)), api_key, version, request, lambda *a: seen.append(a))
        response = on_the_wire(api_key, version, verdict.response)
        if "error_code" in response:
            assert response["error_code"] == CLUSTER_DENIED
        items = response.get("results", response.get("filter_results", []))
        expected = {30: 2, 31: 1, 50: 2, 51: 2}.get(api_key, 0)  # one per creation, filter, distinct user
        assert [item["error_code"] for item in items] == [CLUSTER_DENIED] * expected
        if api_key in (50, 51):
            assert [item["user"] for item in items] == ["bob", "carol"]
        assert seen == [(ALICE, HOST, {DESCRIBE: "Describe", ALTER: "Alter"}[operation], "Cluster", CLUSTER_NAME)]
        assert check(allow((operation, CLUSTER, CLUSTER_NAME)), api_key, version, request) is Verdict.ALLOWED


@pytest.mark.parametrize("api_key", [17, 18, 36, 68, 999])
def test_unchecked_apis_are_allowed(api_key):
    assert check(allow(), api_key, 0, {"mechanism": "PLAIN"}) is Verdict.ALLOWED


# --- across every API ----------------------------------------------------------------------------

LISTINGS = {3: {"topics": None}, 9: {"group_id": "g1", "topics": None}}


@pytest.mark.parametrize("api_key", sorted(SAMPLES))
def test_super_broad_allow_changes_nothing(api_key):
    """Everything allowed: the very request object runs, and nothing amends its answer (a listing of
    everything keeps its amend, which then drops nothing)."""
    authorizer = FakeAuthorizer(everything=True)
    for version in versions(api_key):
        request = decoded(api_key, version, SAMPLES[api_key](version))
        assert check(authorizer, api_key, version, request) is Verdict.ALLOWED
        if api_key in LISTINGS and (api_key != 9 or version >= 2):
            listing = {**LISTINGS[api_key], "topics": []} if version == 0 else LISTINGS[api_key]
            request = decoded(api_key, version, listing)
            verdict = check(authorizer, api_key, version, request)
            assert verdict.request is request and verdict.response is None
            response = ECHO[api_key](version, request)
            assert verdict.amend(ECHO[api_key](version, request)) == response


def test_each_resource_is_asked_once_and_each_denial_reported_once():
    authorizer = allow((WRITE, TOPIC, "a"))
    body = {"acks": 1, "timeout_ms": 9, "topic_data": [{"name": name, "partition_data": [{"index": 0, "records": b""}]}
                                                       for name in ("a", "b", "a", "b", "b")]}
    seen = []
    verdict = check(authorizer, 0, 8, decoded(0, 8, body), lambda *a: seen.append(a))
    assert sorted(authorizer.asked) == [(WRITE, TOPIC, "a"), (WRITE, TOPIC, "b")]
    assert seen == [(ALICE, HOST, "Write", "Topic", "b")]
    assert [topic["name"] for topic in verdict.request["topic_data"]] == ["a", "a"]


def test_a_failing_denial_callback_does_not_fail_the_request():
    def broken(*args):
        raise RuntimeError("log is down")
    verdict = check(allow(), 12, 0, decoded(12, 0, SAMPLES[12](0)), broken)
    assert verdict.response["error_code"] == GROUP_DENIED


# --- hypothesis: random ACLs, every item's code ----------------------------------------------------

UNIVERSE = ([(op, TOPIC, name) for op in (READ, WRITE, CREATE, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
             for name in TOPICS]
            + [(op, GROUP, name) for op in (READ, DELETE, DESCRIBE) for name in GROUPS]
            + [(op, CLUSTER, CLUSTER_NAME) for op in (DESCRIBE_CONFIGS, ALTER_CONFIGS)])


def _topic_partitions(list_key, name_key, partitions_key, index_key):
    return lambda v, response: partition_codes(response, list_key, name_key, partitions_key, index_key)


def _entries(list_key, key):
    return lambda v, response: {key(entry): entry["error_code"] for entry in response[list_key]}


def _per_topic(op, group=None, partitions=True):
    """Expected codes: 29 for topics without ``op``, all 30 without ``group`` (operation) on g1."""
    def expected(v, ok):
        codes = {name: OK if ok(op, TOPIC, name) else TOPIC_DENIED for name in TOPICS}
        if group is not None and not ok(group, GROUP, "g1"):
            codes = dict.fromkeys(TOPICS, GROUP_DENIED)
        return per_partition(codes) if partitions else codes
    return expected


def _config_expected(op):
    def expected(v, ok):
        codes = {(2, name): OK if ok(op, TOPIC, name) else TOPIC_DENIED for name in TOPICS}
        codes[(4, "0")] = OK if ok(op, CLUSTER, CLUSTER_NAME) else CLUSTER_DENIED
        return codes
    return expected


def _offset_fetch_outcome(v, response):
    if v >= 2 and response["error_code"]:
        return dict.fromkeys(per_partition(dict.fromkeys(TOPICS)), response["error_code"])
    return partition_codes(response, "topics", "name", "partitions", "partition_index")


PROPERTIES = {
    0: (_topic_partitions("responses", "name", "partition_responses", "index"), _per_topic(WRITE)),
    1: (_topic_partitions("responses", "topic", "partitions", "partition_index"), _per_topic(READ)),
    2: (_topic_partitions("topics", "name", "partitions", "partition_index"), _per_topic(DESCRIBE)),
    3: (_entries("topics", lambda e: e["name"]), _per_topic(DESCRIBE, partitions=False)),
    8: (_topic_partitions("topics", "name", "partitions", "partition_index"), _per_topic(READ, group=READ)),
    9: (_offset_fetch_outcome, _per_topic(DESCRIBE, group=DESCRIBE)),
    15: (_entries("groups", lambda e: e["group_id"]),
         lambda v, ok: {g: OK if ok(DESCRIBE, GROUP, g) else GROUP_DENIED for g in GROUPS}),
    19: (_entries("topics", lambda e: e["name"]), _per_topic(CREATE, partitions=False)),
    20: (_entries("responses", lambda e: e["name"]), _per_topic(DELETE, partitions=False)),
    21: (_topic_partitions("topics", "name", "partitions", "partition_index"), _per_topic(DELETE)),
    23: (_topic_partitions("topics", "topic", "partitions", "partition"), _per_topic(DESCRIBE)),
    32: (_entries("results", lambda e: (e["resource_type"], e["resource_name"])), _config_expected(DESCRIBE_CONFIGS)),
    37: (_entries("results", lambda e: e["name"]), _per_topic(ALTER, partitions=False)),
    42: (_entries("results", lambda e: e["group_id"]),
         lambda v, ok: {g: OK if ok(DELETE, GROUP, g) else GROUP_DENIED for g in GROUPS}),
    44: (_entries("responses", lambda e: (e["resource_type"], e["resource_name"])), _config_expected(ALTER_CONFIGS)),
    47: (lambda v, r: ({"group": r["error_code"]} if r["error_code"] else
                       partition_codes(r, "topics", "name", "partitions", "partition_index")),
         lambda v, ok: {"group": GROUP_DENIED} if not ok(DELETE, GROUP, "g1") else _per_topic(READ)(v, ok)),
}


@settings(max_examples=200, deadline=None)
@given(allowed=st.sets(st.sampled_from(UNIVERSE)), api_key=st.sampled_from(sorted(PROPERTIES)), data=st.data())
def test_random_acls_refuse_exactly_the_unauthorized_items(allowed, api_key, data):
    version = data.draw(st.sampled_from(list(versions(api_key))), label="version")
    authorizer = allow(*allowed)
    verdict, request, response = serve(authorizer, api_key, version)
    outcome, expected = PROPERTIES[api_key]
    assert outcome(version, response) == expected(version, lambda *resource: resource in allowed)
    # Every allowed item reaches the handler as it came; nothing refused does.
    if verdict.request is not None:
        for key, items in verdict.request.items():
            if isinstance(items, list):
                assert all(item in request[key] for item in items)


# --- with the real authorizer ----------------------------------------------------------------------


def test_codes_match_acls_and_the_real_authorizer_fits():
    """The codes repeated in ``authorization`` are ``acls``'s, and ``acls.Authorizer`` is an
    authorizer the rules can use: prefix allows, a literal deny beating them, a super user."""
    from logstore.server.security import acls, authorization

    for name in ("READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS",
                 "ALTER_CONFIGS", "IDEMPOTENT_WRITE"):
        assert getattr(authorization, name) == getattr(acls, f"OP_{name}")
    for name in ("TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID"):
        assert getattr(authorization, name) == getattr(acls, f"RESOURCE_{name}")
    assert authorization.CLUSTER_NAME == acls.CLUSTER_NAME
    assert {k: set(v) for k, v in authorization.SUPPORTED_OPERATIONS.items()} == {
        k: set(acls.SUPPORTED_OPERATIONS[k]) for k in authorization.SUPPORTED_OPERATIONS}

    def binding(kind, name, pattern, operation, permission=acls.PERMISSION_ALLOW):
        return acls.AclBinding(kind, name, pattern, ALICE, "*", operation, permission)

    class Store:
        def bindings(self):
            return [binding(acls.RESOURCE_TOPIC, "a", acls.PATTERN_PREFIXED, acls.OP_READ),
                    binding(acls.RESOURCE_TOPIC, "ab", acls.PATTERN_LITERAL, acls.OP_READ, acls.PERMISSION_DENY)]

    authorizer = acls.Authorizer(Store(), super_users=["User:admin"])
    body = {"max_wait_ms": 0, "min_bytes": 1, "topics": [
        {"topic": name, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 9}]}
        for name in ("a1", "ab", "b")]}
    _, _, response = serve(authorizer, 1, 11, body)
    assert partition_codes(response, "responses", "topic", "partitions", "partition_index") == {
        ("a1", 0): OK, ("ab", 0): TOPIC_DENIED, ("b", 0): TOPIC_DENIED}
    request = decoded(1, 11, body)
    assert RequestAuthorization(authorizer).check(1, 11, request, "User:admin", HOST) is Verdict.ALLOWED


# --- DescribeCluster, DescribeTopicPartitions ------------------------------------------------------


def test_describe_cluster_needs_describe_on_the_cluster():
    request = {"include_cluster_authorized_operations": True, "endpoint_type": 1}
    refused = RequestAuthorization(allow((DESCRIBE, TOPIC, "a"))).check(60, 1, request, ALICE, "h")
    assert refused.response["error_code"] == CLUSTER_DENIED and refused.response["brokers"] == []
    on_the_wire(60, 1, refused.response)  # a whole answer of the API's shape
    allowed = RequestAuthorization(allow((DESCRIBE, CLUSTER, CLUSTER_NAME))).check(60, 1, request, ALICE, "h")
    body = allowed.amend({"error_code": OK, "cluster_authorized_operations": NOT_REQUESTED})
    assert body["cluster_authorized_operations"] == 1 << DESCRIBE  # the principal's, not every operation


def test_describe_topic_partitions_refuses_named_topics_and_filters_a_listing():
    def answer():
        return {"topics": [{"name": name, "error_code": OK, "partitions": [{"partition_index": 0}],
                            "topic_authorized_operations": -1} for name in ("a", "b")]}
    authorization = RequestAuthorization(allow((DESCRIBE, TOPIC, "a")))
    named = authorization.check(75, 0, {"topics": [{"name": "a"}, {"name": "b"}]}, ALICE, "h")
    topics = named.amend(answer())["topics"]
    assert [(t["name"], t["error_code"], len(t["partitions"])) for t in topics] == [("a", OK, 1), ("b", TOPIC_DENIED, 0)]
    assert topics[0]["topic_authorized_operations"] == 1 << DESCRIBE
    listing = authorization.check(75, 0, {"topics": []}, ALICE, "h")
    assert [t["name"] for t in listing.amend(answer())["topics"]] == ["a"]
