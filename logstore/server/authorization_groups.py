"""The consumer-group APIs' authorization rules (Kafka's KafkaApis checks), for ``authorization``.

A group's members need READ on it (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit),
reading its offsets DESCRIBE (OffsetFetch, DescribeGroups, FindCoordinator), removing it or its
offsets DELETE (DeleteGroups, OffsetDelete); offsets of a topic also need a right on the topic (READ
to commit or delete them, DESCRIBE to fetch them). A refusal of the group refuses the request as a
whole where Kafka does (the answer's other fields at their "empty" values), item by item where the
request names several groups; the rules' shared vocabulary (``Check``, ``Verdict``, ``narrowed``)
is ``authorization``'s.
"""

from __future__ import annotations

from . import errors
from .authorization import (CLUSTER, CLUSTER_NAME, DELETE, DESCRIBE, GROUP, NOT_REQUESTED, READ, TOPIC,
                            TRANSACTIONAL_ID, Check, Rule, Verdict, by_name, narrowed)

GROUP_DENIED = errors.GROUP_AUTHORIZATION_FAILED
TOPIC_DENIED = errors.TOPIC_AUTHORIZATION_FAILED
GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 0, 1  # FindCoordinator's KeyType


def _partitions_refused(topics, partitions_key: str, entry) -> list[dict]:
    """``[{"name", "partitions": [entry(partition) ...]}]`` for each of ``topics`` (request topics)."""
    return [{"name": topic["name"], "partitions": [entry(partition) for partition in topic.get(partitions_key) or ()]}
            for topic in topics]


def _commit_partition(code: int):
    return lambda partition: {"partition_index": partition["partition_index"], "error_code": code}


def _offset_commit(check: Check, version: int, request: dict) -> Verdict:
    """READ on the group (else every partition 30), then READ on each topic (else its partitions 29)."""
    topics = request.get("topics") or []
    if not check.allowed(READ, GROUP, request["group_id"]):
        return Verdict(response={"throttle_time_ms": 0, "topics": _partitions_refused(
            topics, "partitions", _commit_partition(GROUP_DENIED))})
    allowed, refused = check.split(topics, by_name("name"), READ, TOPIC)
    if not refused:
        return Verdict.ALLOWED
    return narrowed(request, "topics", allowed, "topics",
                    _partitions_refused(refused, "partitions", _commit_partition(TOPIC_DENIED)))


def _fetched_refused(code: int):
    return lambda index: {"partition_index": index, "committed_offset": -1, "committed_leader_epoch": -1,
                          "metadata": "", "error_code": code}


def _offset_fetch(check: Check, version: int, request: dict) -> Verdict:
    """DESCRIBE on the group, else 30 (v2+ top-level, no topics; v1 on every partition asked for);
    DESCRIBE on each named topic, else its partitions 29; null topics (every committed offset):
    the response keeps only the topics with DESCRIBE."""
    topics = request.get("topics")
    if not check.allowed(DESCRIBE, GROUP, request["group_id"]):
        if version >= 2:
            return Verdict(response={"throttle_time_ms": 0, "topics": [], "error_code": GROUP_DENIED})
        return Verdict(response={"throttle_time_ms": 0, "topics": _partitions_refused(
            topics or (), "partition_indexes", _fetched_refused(GROUP_DENIED))})
    if topics is None:
        def listing(body: dict) -> dict:
            body["topics"] = [topic for topic in body.get("topics") or ()
                              if check.allowed(DESCRIBE, TOPIC, topic["name"], report=False)]
            return body
        return Verdict(request=request, amend=listing)
    allowed, refused = check.split(topics, by_name("name"), DESCRIBE, TOPIC)
    if not refused:
        return Verdict.ALLOWED
    return narrowed(request, "topics", allowed, "topics",
                    _partitions_refused(refused, "partition_indexes", _fetched_refused(TOPIC_DENIED)),
                    skip_on_error=True)


def _offset_delete(check: Check, version: int, request: dict) -> Verdict:
    """DELETE on the group (else 30 with no topics, Kafka's whole refusal), then READ on each topic
    (else its partitions 29)."""
    if not check.allowed(DELETE, GROUP, request["group_id"]):
        return Verdict(response={"error_code": GROUP_DENIED, "throttle_time_ms": 0, "topics": []})
    allowed, refused = check.split(request.get("topics"), by_name("name"), READ, TOPIC)
    if not refused:
        return Verdict.ALLOWED
    return narrowed(request, "topics", allowed, "topics",
                    _partitions_refused(refused, "partitions", _commit_partition(TOPIC_DENIED)), skip_on_error=True)


def _find_coordinator(check: Check, version: int, request: dict) -> Verdict:
    """DESCRIBE on the group (key type 0, else 30) or the transactional id (1, else 53); other key
    types are the handler's to refuse. v4 names several keys: each refused key gets its own entry."""
    key_type = request.get("key_type", GROUP_KEY_TYPE)
    if key_type == GROUP_KEY_TYPE:
        resource_type, code = GROUP, GROUP_DENIED
    elif key_type == TRANSACTION_KEY_TYPE:
        resource_type, code = TRANSACTIONAL_ID, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        return Verdict.ALLOWED
    nowhere = {"node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": None}
    if version >= 4:
        allowed, refused = check.split(request.get("coordinator_keys"), str, DESCRIBE, resource_type)
        if not refused:
            return Verdict.ALLOWED
        return narrowed(request, "coordinator_keys", allowed, "coordinators",
                        [{"key": key, **nowhere} for key in refused])
    if check.allowed(DESCRIBE, resource_type, request["key"]):
        return Verdict.ALLOWED
    return Verdict(response={"throttle_time_ms": 0, **nowhere})


def _membership(refusal) -> Rule:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group, else ``refusal(version)``."""
    def rule(check: Check, version: int, request: dict) -> Verdict:
        if check.allowed(READ, GROUP, request["group_id"]):
            return Verdict.ALLOWED
        return Verdict(response=refusal(version))
    return rule


def _join_refusal(version: int) -> dict:
    # Kafka's JoinGroupResult(UNKNOWN_MEMBER_ID, GROUP_AUTHORIZATION_FAILED); the protocol name is
    # nullable only from v7.
    return {"throttle_time_ms": 0, "error_code": GROUP_DENIED, "generation_id": -1,
            "protocol_type": None, "protocol_name": None if version >= 7 else "", "leader": "",
            "skip_assignment": False, "member_id": "", "members": []}


def _sync_refusal(version: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": GROUP_DENIED, "protocol_type": None, "protocol_name": None,
            "assignment": b""}


def _heartbeat_refusal(version: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": GROUP_DENIED}


def _leave_refusal(version: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": GROUP_DENIED, "members": []}


def _describe_groups(check: Check, version: int, request: dict) -> Verdict:
    """DESCRIBE on each group, else that group's entry is 30 (state and protocol empty, no members).
    v3+ with ``include_authorized_operations``: each described group's real bit field."""
    allowed, refused = check.split(request.get("groups"), str, DESCRIBE, GROUP)
    with_operations = version >= 3 and bool(request.get("include_authorized_operations"))
    if not refused and not with_operations:
        return Verdict.ALLOWED
    entries = [{"error_code": GROUP_DENIED, "group_id": group_id, "group_state": "", "protocol_type": "",
                "protocol_data": "", "members": [], "authorized_operations": NOT_REQUESTED} for group_id in refused]
    refused_set = set(refused)

    def amend(body: dict) -> dict:
        groups = body.get("groups") or []
        if with_operations:
            for group in groups:
                if group.get("error_code") == errors.NONE and group["group_id"] not in refused_set:
                    group["authorized_operations"] = check.operations(GROUP, group["group_id"])
        body["groups"] = [*groups, *entries]
        return body
    return Verdict(request={**request, "groups": allowed} if refused else request, amend=amend)


def _list_groups(check: Check, version: int, request: dict) -> Verdict:
    """DESCRIBE on the cluster lists every group (probed without a report); otherwise the response
    keeps the groups with DESCRIBE."""
    if check.allowed(DESCRIBE, CLUSTER, CLUSTER_NAME, report=False):
        return Verdict.ALLOWED

    def listing(body: dict) -> dict:
        body["groups"] = [group for group in body.get("groups") or ()
                          if check.allowed(DESCRIBE, GROUP, group["group_id"], report=False)]
        return body
    return Verdict(request=request, amend=listing)


def _delete_groups(check: Check, version: int, request: dict) -> Verdict:
    """DELETE on each group, else 30 (a name given twice answered once, as the handler does)."""
    allowed, refused = check.split(request.get("groups_names"), str, DELETE, GROUP)
    if not refused:
        return Verdict.ALLOWED
    return narrowed(request, "groups_names", allowed, "results",
                    [{"group_id": group_id, "error_code": GROUP_DENIED} for group_id in dict.fromkeys(refused)])


GROUP_RULES: dict[int, Rule] = {
    8: _offset_commit,
    9: _offset_fetch,
    10: _find_coordinator,
    11: _membership(_join_refusal),
    12: _membership(_heartbeat_refusal),
    13: _membership(_leave_refusal),
    14: _membership(_sync_refusal),
    15: _describe_groups,
    16: _list_groups,
    42: _delete_groups,
    47: _offset_delete,
}
"""API key -> rule for the group APIs. ConsumerGroupHeartbeat (68) has none: the server refuses it
before any handler (``KafkaApis.refuse``)."""
