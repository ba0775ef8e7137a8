"""Authorization of every request: Kafka's per-API ACL rules as a table between decoding and the handlers.

``RequestAuthorization.check(api_key, version, request, principal, host)`` runs after a request is
decoded and before its handler. It asks the authorizer about each resource the request names (the
topics, the group, the transactional id, the cluster) and returns a ``Verdict``:

- ``Verdict.ALLOWED``: run the handler on the request as it is (every check passed);
- ``verdict.response``: a whole refusal, to be sent at once without running the handler (JoinGroup on
  a group the principal may not READ, DescribeAcls without DESCRIBE on the cluster...);
- ``verdict.request`` (+ ``verdict.amend``): a narrowed copy of the request with the refused items
  removed, for the handler to serve the rest; ``amend(body) -> body`` then adds the refused items'
  error entries to the handler's response body (and/or filters it: Metadata of every topic lists
  only the topics the principal may DESCRIBE). ``request`` may be the original object when only the
  response needs amending (listings);
- ``verdict.close``: set only for an ``acks=0`` Produce with refused partitions: Kafka closes such a
  connection (the client gets no response to learn the error from). The verdict still carries the
  narrowed request, so an integration that does not close writes nothing unauthorized.

So handlers stay unaware of ACLs, and every refusal has one shape per API, written here once, with
Kafka's codes: TOPIC_AUTHORIZATION_FAILED (29), GROUP_AUTHORIZATION_FAILED (30),
CLUSTER_AUTHORIZATION_FAILED (31), TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53). A refused topic gets 29
whether or not it exists, and never appears in a listing, so a refusal tells nothing about what
exists. Response fields a refusal leaves out take their defaults when encoded (``codec``), and keys
a version does not have are ignored, so one entry shape serves every version.

The authorizer is any object with ``authorize(principal, host, operation, resource_type, name)``,
``authorize_any(principal, host, operation, resource_type)`` and ``authorized_operations(principal,
host, resource_type, name)`` (``acls.Authorizer``). Each distinct (operation, resource) is asked once
per request. Every denial of a resource the request named is reported to ``on_denied(principal,
host, operation_name, resource_type_name, name)`` (Kafka's names: ``"Read"``, ``"Topic"``); the
filtering of listings and the probes Kafka makes with ``logIfDenied = false`` (CREATE for
auto-creation, CLUSTER_ACTION, DESCRIBE on the cluster for ListGroups) are not reported, or a
restricted client would fill the log with every metadata refresh.

APIs without a rule here (ApiVersions, SaslHandshake, SaslAuthenticate, the refused KIP-848
heartbeat, and any API added later without a rule) are ALLOWED: an API cannot be refused without
knowing its response's shape, so adding an API means adding its rule here. The group APIs' rules
(``GROUP_RULES``) follow the data, admin and security APIs' (``RULES``), then the transaction APIs'
(``TXN_RULES``).
"""

from __future__ import annotations

import logging
import uuid
from typing import Callable

from ...clock import SYSTEM_CLOCK, Clock
from ..protocol import errors
from ..protocol.messages import NOT_REQUESTED
from .sasl import LOG_INTERVAL_MS, LogLimiter

logger = logging.getLogger(__name__)

# Kafka's resource types and operations (AclResourceType, AclOperation). ``acls`` defines the same
# values; they are repeated here so this layer depends only on the authorizer's three methods.
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
CLUSTER_NAME = "kafka-cluster"

OPERATION_NAMES = {READ: "Read", WRITE: "Write", CREATE: "Create", DELETE: "Delete", ALTER: "Alter",
                   DESCRIBE: "Describe", CLUSTER_ACTION: "ClusterAction", DESCRIBE_CONFIGS: "DescribeConfigs",
                   ALTER_CONFIGS: "AlterConfigs", IDEMPOTENT_WRITE: "IdempotentWrite"}
RESOURCE_TYPE_NAMES = {TOPIC: "Topic", GROUP: "Group", CLUSTER: "Cluster", TRANSACTIONAL_ID: "TransactionalId"}

SUPPORTED_OPERATIONS = {
    TOPIC: frozenset({READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS}),
    GROUP: frozenset({READ, DESCRIBE, DELETE}),
    CLUSTER: frozenset({CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE}),
    TRANSACTIONAL_ID: frozenset({DESCRIBE, WRITE}),
}
"""The operations valid on each resource type (Kafka's AclEntry.supportedOperations): the bits an
authorized-operations field may have."""


# DescribeConfigs / IncrementalAlterConfigs resource types: a topic, or the broker (and its loggers),
# whose configs are the cluster's to guard.
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER = 2, 4, 8

OnDenied = Callable[[str, str, str, str, str], None]


class Verdict:
    """What ``RequestAuthorization.check`` decided about one request (see the module docstring).

    The integration: if ``response`` is not None, send it and do not run the handler; else if
    ``close`` is set, close the connection (``acks=0`` Produce); else run the handler on ``request``
    (the original when it is None) and pass its response body through ``amend`` (when set) before
    encoding it. ``Verdict.ALLOWED`` has all four None."""

    __slots__ = ("response", "request", "amend", "close")
    ALLOWED: Verdict

    def __init__(self, *, response: dict | None = None, request: dict | None = None,
                 amend: Callable[[dict], dict] | None = None, close: str | None = None) -> None:
        self.response = response
        self.request = request
        self.amend = amend
        self.close = close

    @property
    def allowed(self) -> bool:
        """Whether the request runs unchanged with its response unchanged."""
        return self.response is None and self.request is None and self.amend is None and self.close is None

    def __repr__(self) -> str:
        if self.allowed:
            return "Verdict.ALLOWED"
        parts = [f"{name}={getattr(self, name)!r}" for name in self.__slots__ if getattr(self, name) is not None]
        return f"Verdict({', '.join(parts)})"


Verdict.ALLOWED = Verdict()


def _no_op(principal: str, host: str, operation: str, resource_type: str, name: str) -> None:
    pass


class Check:
    """One request's authorization: the principal, a per-request cache (each distinct operation and
    resource is asked once), and the denial reports. The rules receive it."""

    __slots__ = ("authorizer", "principal", "host", "on_denied", "_cache")

    def __init__(self, authorizer, principal: str, host: str, on_denied: OnDenied) -> None:
        self.authorizer = authorizer
        self.principal = principal
        self.host = host
        self.on_denied = on_denied
        self._cache: dict[tuple[int, int, str], bool] = {}

    def allowed(self, operation: int, resource_type: int, name: str, report: bool = True) -> bool:
        """Whether the principal may do ``operation`` on the resource; a denial is reported once
        (unless ``report`` is False: listings and Kafka's ``logIfDenied = false`` probes)."""
        key = (operation, resource_type, name)
        verdict = self._cache.get(key)
        if verdict is None:
            verdict = self._cache[key] = bool(
                self.authorizer.authorize(self.principal, self.host, operation, resource_type, name))
            if not verdict and report:
                self.report(operation, resource_type, name)
        return verdict

    def report(self, operation: int, resource_type: int, name: str) -> None:
        """Tell ``on_denied`` that ``operation`` on the resource was refused."""
        try:
            self.on_denied(self.principal, self.host, OPERATION_NAMES.get(operation, str(operation)),
                           RESOURCE_TYPE_NAMES.get(resource_type, str(resource_type)), name)
        except Exception:  # a broken log callback must not fail the request it reports on
            logger.exception("the on_denied callback failed")

    def any_allowed(self, operation: int, resource_type: int) -> bool:
        """Whether the principal may do ``operation`` on at least one resource of the type."""
        return bool(self.authorizer.authorize_any(self.principal, self.host, operation, resource_type))

    def operations(self, resource_type: int, name: str) -> int:
        """Kafka's authorized-operations bit field of a resource: bit n set for operation code n,
        over the operations valid for the type."""
        valid = SUPPORTED_OPERATIONS[resource_type]
        bits = 0
        for operation in self.authorizer.authorized_operations(self.principal, self.host, resource_type, name):
            if operation in valid:
                bits |= 1 << operation
        return bits

    def split(self, items, name_of: Callable, operation: int, resource_type: int) -> tuple[list, list]:
        """``items`` split into (allowed, refused) by ``operation`` on the resource each names."""
        allowed, refused = [], []
        for item in items or ():
            (allowed if self.allowed(operation, resource_type, name_of(item)) else refused).append(item)
        return allowed, refused


Rule = Callable[[Check, int, dict], Verdict]


def appending(list_key: str, entries: list, skip_on_error: bool = False) -> Callable[[dict], dict]:
    """An amend that appends ``entries`` (the refused items' error entries) to the response's list
    ``list_key``. With ``skip_on_error`` a response with a top-level error is left alone: Kafka
    answers such a request (an unknown fetch session, a group-level error) without any item."""
    def amend(body: dict) -> dict:
        if skip_on_error and body.get("error_code", errors.NONE) != errors.NONE:
            return body
        body[list_key] = [*(body.get(list_key) or ()), *entries]
        return body
    return amend


def narrowed(request: dict, list_key: str, allowed: list, response_key: str, entries: list,
             skip_on_error: bool = False) -> Verdict:
    """The verdict of a request whose list ``list_key`` keeps only ``allowed``, the refused items'
    ``entries`` appended to the response's ``response_key``."""
    return Verdict(request={**request, list_key: allowed},
                   amend=appending(response_key, entries, skip_on_error))


def by_name(key: str) -> Callable[[dict], str]:
    return lambda item: item[key]


def _name(item: str) -> str:
    return item


# --- Produce, Fetch, ListOffsets, OffsetForLeaderEpoch -------------------------------------------


def produce_partition(index: int, code: int) -> dict:
    return {"index": index, "error_code": code, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1,
            "record_errors": [], "error_message": None}


def _produce(check: Check, version: int, request: dict) -> Verdict:
    """WRITE on the transactional id (else every partition 53, Kafka's whole refusal), then WRITE on
    each topic (else its partitions 29). ``acks=0`` is never answered: Kafka closes the connection of
    an acks=0 produce that failed anywhere, so the client notices."""
    topics = request.get("topic_data") or []
    transactional_id = request.get("transactional_id")
    if transactional_id is not None and not check.allowed(WRITE, TRANSACTIONAL_ID, transactional_id):
        allowed, refused, code = [], topics, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        allowed, refused = check.split(topics, by_name("name"), WRITE, TOPIC)
        code = errors.TOPIC_AUTHORIZATION_FAILED
    if not refused:
        return Verdict.ALLOWED
    entries = [{"name": topic["name"], "partition_responses": [
        produce_partition(partition["index"], code) for partition in topic.get("partition_data") or ()]}
        for topic in refused]
    if request.get("acks") == 0:
        return Verdict(request={**request, "topic_data": allowed},
                       close=f"an acks=0 produce was refused ({errors.NAMES[code]})")
    if code == errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return Verdict(response={"responses": entries, "throttle_time_ms": 0})
    return narrowed(request, "topic_data", allowed, "responses", entries)


def _fetch(check: Check, version: int, request: dict) -> Verdict:
    """READ on each topic, else its partitions 29 with no data. A refused topic never enters a fetch
    session (it is taken out of the request before the handler sees it); the handler asks this rule
    again about the topics of an incremental fetch's session on every fetch, so a READ withdrawn
    later ends its data too."""
    allowed, refused = check.split(request.get("topics"), by_name("topic"), READ, TOPIC)
    if not refused:
        return Verdict.ALLOWED
    entries = [{"topic": topic["topic"], "partitions": [
        {"partition_index": partition["partition"], "error_code": errors.TOPIC_AUTHORIZATION_FAILED,
         "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
         "preferred_read_replica": -1, "records": b""}
        for partition in topic.get("partitions") or ()]} for topic in refused]
    return narrowed(request, "topics", allowed, "responses", entries, skip_on_error=True)


def _list_offsets(check: Check, version: int, request: dict) -> Verdict:
    """DESCRIBE on each topic, else its partitions 29 (offset and timestamp -1)."""
    allowed, refused = check.split(request.get("topics"), by_name("name"), DESCRIBE, TOPIC)
    if not refused:
        return Verdict.ALLOWED
    entries = [{"name": topic["name"], "partitions": [
        {"partition_index": partition["partition_index"], "error_code": errors.TOPIC_AUTHORIZATION_FAILED,
         "timestamp": -1, "offset": -1, "leader_epoch": -1}
        for partition in topic.get("partitions") or ()]} for topic in refused]
    return narrowed(request, "topics", allowed, "topics", entries)


def _offset_for_leader_epoch(check: Check, version: int, request: dict) -> Verdict:
    """CLUSTER_ACTION on the cluster (a follower's right, probed without a report) or DESCRIBE on
    each topic (KIP-320's consumers), else its partitions 29."""
    if check.allowed(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME, report=False):
        return Verdict.ALLOWED
    allowed, refused = check.split(request.get("topics"), by_name("topic"), DESCRIBE, TOPIC)
    if not refused:
        return Verdict.ALLOWED
    entries = [{"topic": topic["topic"], "partitions": [
        {"error_code": errors.TOPIC_AUTHORIZATION_FAILED, "partition": partition["partition"], "leader_epoch": -1,
         "end_offset": -1}
        for partition in topic.get("partitions") or ()]} for topic in refused]
    return narrowed(request, "topics", allowed, "topics", entries)


# --- Metadata ------------------------------------------------------------------------------------


def _metadata(check: Check, version: int, request: dict) -> Verdict:
    """Every topic (null topics; v0: an empty list): the response keeps the topics with DESCRIBE.
    Named topics: those without DESCRIBE are removed and answered 29. Auto-creation (v0-3 always,
    v4+ when asked; the handler reads ``allow_auto_topic_creation`` with a default of True) needs
    CREATE on the cluster or on the topic: when a remaining named topic has neither, the narrowed
    request says ``allow_auto_topic_creation: False``, so a request mixing such a topic with
    creatable ones creates none of them (we do not know here which exist; the missing ones get
    UNKNOWN_TOPIC_OR_PARTITION where Kafka would say 29: they may be described, so no secret is
    told). v8+: the authorized-operations fields are filled when asked for."""
    requested = request.get("topics")
    want_cluster = version >= 8 and bool(request.get("include_cluster_authorized_operations"))
    want_topics = version >= 8 and bool(request.get("include_topic_authorized_operations"))

    def fill(body: dict) -> None:
        if want_cluster:
            body["cluster_authorized_operations"] = check.operations(CLUSTER, CLUSTER_NAME)
        if want_topics:
            for topic in body.get("topics") or ():
                if topic.get("error_code") != errors.TOPIC_AUTHORIZATION_FAILED:
                    topic["topic_authorized_operations"] = check.operations(TOPIC, topic["name"])

    if requested is None or (version == 0 and not requested):
        def listing(body: dict) -> dict:
            body["topics"] = [topic for topic in body.get("topics") or ()
                              if check.allowed(DESCRIBE, TOPIC, topic["name"], report=False)]
            fill(body)
            return body
        return Verdict(request=request, amend=listing)

    names = list(dict.fromkeys(topic["name"] for topic in requested))
    refused = {name for name in names if not check.allowed(DESCRIBE, TOPIC, name)}
    kept = [name for name in names if name not in refused]
    result = request
    if kept and (version < 4 or request.get("allow_auto_topic_creation", True)) \
            and not check.allowed(CREATE, CLUSTER, CLUSTER_NAME, report=False) \
            and not all(check.allowed(CREATE, TOPIC, name, report=False) for name in kept):
        result = {**request, "allow_auto_topic_creation": False}
    if not refused and not (want_cluster or want_topics):
        return Verdict.ALLOWED if result is request else Verdict(request=result)
    if refused:
        result = {**result, "topics": [topic for topic in requested if topic["name"] not in refused]}
    entries = [{"error_code": errors.TOPIC_AUTHORIZATION_FAILED, "name": name, "topic_id": uuid.UUID(int=0),
                "is_internal": False, "partitions": [], "topic_authorized_operations": NOT_REQUESTED}
               for name in names if name in refused]
    allowed = set(kept)

    def amend(body: dict) -> dict:
        if refused:
            # Only what was asked and allowed: at v0 a request narrowed to no topics reads "all".
            body["topics"] = [topic for topic in body.get("topics") or () if topic["name"] in allowed] + entries
        fill(body)
        return body
    return Verdict(request=result, amend=amend)


# --- the admin APIs ------------------------------------------------------------------------------


def _create_topics(check: Check, version: int, request: dict) -> Verdict:
    """CREATE on the cluster (probed without a report), else CREATE on each topic, else 29."""
    if check.allowed(CREATE, CLUSTER, CLUSTER_NAME, report=False):
        return Verdict.ALLOWED
    allowed, refused = check.split(request.get("topics"), by_name("name"), CREATE, TOPIC)
    if not refused:
        return Verdict.ALLOWED
    entries = [{"name": topic["name"], "error_code": errors.TOPIC_AUTHORIZATION_FAILED,
                "error_message": "Authorization failed."} for topic in refused]
    return narrowed(request, "topics", allowed, "topics", entries)


def _delete_topics(check: Check, version: int, request: dict) -> Verdict:
    """DELETE on each topic, else 29."""
    allowed, refused = check.split(request.get("topic_names"), _name, DELETE, TOPIC)
    if not refused:
        return Verdict.ALLOWED
    entries = [{"name": name, "error_code": errors.TOPIC_AUTHORIZATION_FAILED} for name in refused]
    return narrowed(request, "topic_names", allowed, "responses", entries)


def _delete_records(check: Check, version: int, request: dict) -> Verdict:
    """DELETE on each topic, else its partitions 29 (low watermark -1)."""
    allowed, refused = check.split(request.get("topics"), by_name("name"), DELETE, TOPIC)
    if not refused:
        return Verdict.ALLOWED
    entries = [{"name": topic["name"], "partitions": [
        {"partition_index": partition["partition_index"], "low_watermark": -1,
         "error_code": errors.TOPIC_AUTHORIZATION_FAILED} for partition in topic.get("partitions") or ()]}
        for topic in refused]
    return narrowed(request, "topics", allowed, "topics", entries)


def _create_partitions(check: Check, version: int, request: dict) -> Verdict:
    """ALTER on each topic, else 29. A name given twice is the handler's (INVALID_REQUEST whatever
    the ACLs, as Kafka answers duplicates before it authorizes), so it is not asked about here."""
    topics = request.get("topics") or []
    names = [topic["name"] for topic in topics]
    unique = [topic for topic in topics if names.count(topic["name"]) == 1]
    allowed, refused = check.split(unique, by_name("name"), ALTER, TOPIC)
    if not refused:
        return Verdict.ALLOWED
    refused_names = {topic["name"] for topic in refused}
    entries = [{"name": topic["name"], "error_code": errors.TOPIC_AUTHORIZATION_FAILED,
                "error_message": "Authorization failed."} for topic in refused]
    kept = [topic for topic in topics if topic["name"] not in refused_names]
    return narrowed(request, "topics", kept, "results", entries)


def _init_producer_id(check: Check, version: int, request: dict) -> Verdict:
    """A transactional id needs WRITE on it (else 53); an idempotent producer needs IDEMPOTENT_WRITE
    on the cluster or WRITE on some topic (Kafka 3's rule, KIP-679), else 31."""
    transactional_id = request.get("transactional_id")
    if transactional_id is not None:
        if check.allowed(WRITE, TRANSACTIONAL_ID, transactional_id):
            return Verdict.ALLOWED
        code = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        if check.allowed(IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME, report=False) or check.any_allowed(WRITE, TOPIC):
            return Verdict.ALLOWED
        # Probed without a report above (WRITE on a topic may still have allowed it): report it now.
        check.report(IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)
        code = errors.CLUSTER_AUTHORIZATION_FAILED
    return Verdict(response={"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1})


def _config_resource(resource: dict) -> tuple[int, str, int] | None:
    """The ACL resource guarding a config resource and the code refusing it; None for the types the
    handler refuses itself (INVALID_REQUEST)."""
    kind = resource["resource_type"]
    if kind == CONFIG_TOPIC:
        return TOPIC, resource["resource_name"], errors.TOPIC_AUTHORIZATION_FAILED
    if kind in (CONFIG_BROKER, CONFIG_BROKER_LOGGER):
        return CLUSTER, CLUSTER_NAME, errors.CLUSTER_AUTHORIZATION_FAILED
    return None


def _configs(operation: int, response_key: str, with_configs: bool) -> Rule:
    """DescribeConfigs (DESCRIBE_CONFIGS), AlterConfigs and IncrementalAlterConfigs (ALTER_CONFIGS): each resource
    needs the operation on its topic (else 29) or, for the broker, on the cluster (else 31)."""
    def rule(check: Check, version: int, request: dict) -> Verdict:
        allowed, entries = [], []
        for resource in request.get("resources") or ():
            guard = _config_resource(resource)
            if guard is None or check.allowed(operation, guard[0], guard[1]):
                allowed.append(resource)
                continue
            entry = {"error_code": guard[2], "error_message": None, "resource_type": resource["resource_type"],
                     "resource_name": resource["resource_name"]}
            if with_configs:
                entry["configs"] = []
            entries.append(entry)
        if not entries:
            return Verdict.ALLOWED
        return narrowed(request, "resources", allowed, response_key, entries)
    return rule


# --- ACLs and SCRAM credentials: cluster operations, refused as a whole --------------------------


def _cluster_refusal(operation: int, refusal: Callable[[dict], dict]) -> Rule:
    """A rule needing ``operation`` on the cluster; ``refusal(request)`` is the whole answer if not."""
    def rule(check: Check, version: int, request: dict) -> Verdict:
        if check.allowed(operation, CLUSTER, CLUSTER_NAME):
            return Verdict.ALLOWED
        return Verdict(response=refusal(request))
    return rule


_CLUSTER_DENIED = errors.CLUSTER_AUTHORIZATION_FAILED


def _describe_acls_refusal(request: dict) -> dict:
    return {"throttle_time_ms": 0, "error_code": _CLUSTER_DENIED, "error_message": None, "resources": []}


def _create_acls_refusal(request: dict) -> dict:
    return {"throttle_time_ms": 0, "results": [{"error_code": _CLUSTER_DENIED, "error_message": None}
                                               for _ in request.get("creations") or ()]}


def _delete_acls_refusal(request: dict) -> dict:
    return {"throttle_time_ms": 0, "filter_results": [
        {"error_code": _CLUSTER_DENIED, "error_message": None, "matching_acls": []} for _ in request.get("filters") or ()]}


def _describe_scram_refusal(request: dict) -> dict:
    return {"throttle_time_ms": 0, "error_code": _CLUSTER_DENIED, "error_message": None, "results": [
        {"user": user["name"], "error_code": _CLUSTER_DENIED, "error_message": None, "credential_infos": []}
        for user in request.get("users") or ()]}


def _alter_scram_refusal(request: dict) -> dict:
    users = dict.fromkeys(entry["name"] for key in ("deletions", "upsertions") for entry in request.get(key) or ())
    return {"throttle_time_ms": 0, "results": [{"user": user, "error_code": _CLUSTER_DENIED, "error_message": None}
                                               for user in users]}


def _describe_cluster(check: Check, version: int, request: dict) -> Verdict:
    """DESCRIBE on the cluster, else the whole answer is 31; the authorized operations, when asked
    for, are the principal's."""
    if not check.allowed(DESCRIBE, CLUSTER, CLUSTER_NAME):
        return Verdict(response={"throttle_time_ms": 0, "error_code": _CLUSTER_DENIED, "error_message": None,
                                 "endpoint_type": request.get("endpoint_type", 1), "cluster_id": "",
                                 "controller_id": -1, "brokers": [],
                                 "cluster_authorized_operations": NOT_REQUESTED})
    if not request.get("include_cluster_authorized_operations"):
        return Verdict.ALLOWED

    def fill(body: dict) -> dict:
        if body.get("error_code") == errors.NONE:
            body["cluster_authorized_operations"] = check.operations(CLUSTER, CLUSTER_NAME)
        return body
    return Verdict(request=request, amend=fill)


def _describe_topic_partitions(check: Check, version: int, request: dict) -> Verdict:
    """DESCRIBE on each topic: a named topic without it is answered 29 (no partitions), a listing of
    every topic keeps only those with it; each listed topic's authorized operations are the
    principal's."""
    named = bool(request.get("topics"))

    def amend(body: dict) -> dict:
        kept = []
        for topic in body.get("topics") or ():
            name = topic["name"]
            if check.allowed(DESCRIBE, TOPIC, name, report=named):
                if topic.get("error_code") == errors.NONE:
                    topic["topic_authorized_operations"] = check.operations(TOPIC, name)
                kept.append(topic)
            elif named:
                kept.append({**topic, "error_code": errors.TOPIC_AUTHORIZATION_FAILED, "partitions": [],
                             "topic_authorized_operations": NOT_REQUESTED})
        body["topics"] = kept
        return body
    return Verdict(request=request, amend=amend)


RULES: dict[int, Rule] = {
    0: _produce,
    1: _fetch,
    2: _list_offsets,
    3: _metadata,
    19: _create_topics,
    20: _delete_topics,
    21: _delete_records,
    22: _init_producer_id,
    23: _offset_for_leader_epoch,
    29: _cluster_refusal(DESCRIBE, _describe_acls_refusal),
    30: _cluster_refusal(ALTER, _create_acls_refusal),
    31: _cluster_refusal(ALTER, _delete_acls_refusal),
    32: _configs(DESCRIBE_CONFIGS, "results", with_configs=True),
    37: _create_partitions,
    33: _configs(ALTER_CONFIGS, "responses", with_configs=False),
    44: _configs(ALTER_CONFIGS, "responses", with_configs=False),
    50: _cluster_refusal(DESCRIBE, _describe_scram_refusal),
    51: _cluster_refusal(ALTER, _alter_scram_refusal),
    60: _describe_cluster,
    75: _describe_topic_partitions,
}
"""API key -> rule, for the data, admin and security APIs (the group APIs' are ``GROUP_RULES``).
ApiVersions (18), SaslHandshake (17) and SaslAuthenticate (36) need no right: they come before
authentication, or are it."""


# --- the consumer-group APIs -----------------------------------------------------------------
# A group's members need READ on it (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit; a
# transactional producer's TxnOffsetCommit also WRITE on its transactional id),
# reading its offsets DESCRIBE (OffsetFetch, DescribeGroups, FindCoordinator), removing it or its
# offsets DELETE (DeleteGroups, OffsetDelete); offsets of a topic also need a right on the topic (READ
# to commit or delete them, DESCRIBE to fetch them). A refusal of the group refuses the request as a
# whole where Kafka does (the answer's other fields at their "empty" values), item by item where the
# request names several groups.

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


def _txn_offset_commit(check: Check, version: int, request: dict) -> Verdict:
    """WRITE on the transactional id (else every partition 53), then READ on the group (else 30),
    then READ on each topic (else its partitions 29), in Kafka's order."""
    topics = request.get("topics") or []
    for allowed, code in ((lambda: check.allowed(WRITE, TRANSACTIONAL_ID, request["transactional_id"]),
                           errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                          (lambda: check.allowed(READ, GROUP, request["group_id"]), GROUP_DENIED)):
        if not allowed():
            return Verdict(response={"throttle_time_ms": 0, "topics": _partitions_refused(
                topics, "partitions", _commit_partition(code))})
    allowed_topics, refused = check.split(topics, by_name("name"), READ, TOPIC)
    if not refused:
        return Verdict.ALLOWED
    return narrowed(request, "topics", allowed_topics, "topics",
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
    28: _txn_offset_commit,
}
"""API key -> rule for the group APIs. ConsumerGroupHeartbeat (68) has none: the server refuses it
before any handler (``KafkaApis.refuse``)."""


# --- the transaction APIs ----------------------------------------------------------------------
# A transactional producer needs WRITE on its transactional id for every step (InitProducerId is
# with the data APIs' rules), WRITE on the topics it adds and READ on the group whose offsets it
# adds; describing transactions needs DESCRIBE on their ids, describing a partition's producers
# READ on its topic. AddPartitionsToTxn v4+ is the brokers' form: CLUSTER_ACTION on the cluster.

TXN_DENIED = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _add_partitions_results(topics, code_of: Callable[[str], int]) -> list[dict]:
    return [{"name": topic["name"], "results_by_partition": [
        {"partition_index": index, "partition_error_code": code_of(topic["name"])}
        for index in topic.get("partitions") or ()]} for topic in topics]


def _add_partitions_to_txn(check: Check, version: int, request: dict) -> Verdict:
    """v0-3: WRITE on the transactional id, else every partition 53; then WRITE on each topic,
    else its partitions 29 and every other partition OPERATION_NOT_ATTEMPTED (Kafka adds none of
    a request it refuses in part). v4+: CLUSTER_ACTION on the cluster, else 31 at the top."""
    if version >= 4:
        if check.allowed(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
            return Verdict.ALLOWED
        return Verdict(response={"throttle_time_ms": 0, "error_code": errors.CLUSTER_AUTHORIZATION_FAILED,
                                 "results_by_transaction": []})
    topics = request.get("v3_and_below_topics") or []
    if not check.allowed(WRITE, TRANSACTIONAL_ID, request["v3_and_below_transactional_id"]):
        results = _add_partitions_results(topics, lambda name: TXN_DENIED)
    else:
        _allowed, refused = check.split(topics, by_name("name"), WRITE, TOPIC)
        if not refused:
            return Verdict.ALLOWED
        refused_names = {topic["name"] for topic in refused}
        results = _add_partitions_results(topics, lambda name: TOPIC_DENIED if name in refused_names
                                          else errors.OPERATION_NOT_ATTEMPTED)
    return Verdict(response={"throttle_time_ms": 0, "results_by_topic_v3_and_below": results})


def _add_offsets_to_txn(check: Check, version: int, request: dict) -> Verdict:
    """WRITE on the transactional id (else 53), then READ on the group (else 30)."""
    if not check.allowed(WRITE, TRANSACTIONAL_ID, request["transactional_id"]):
        return Verdict(response={"throttle_time_ms": 0, "error_code": TXN_DENIED})
    if not check.allowed(READ, GROUP, request["group_id"]):
        return Verdict(response={"throttle_time_ms": 0, "error_code": GROUP_DENIED})
    return Verdict.ALLOWED


def _end_txn(check: Check, version: int, request: dict) -> Verdict:
    """WRITE on the transactional id, else 53."""
    if check.allowed(WRITE, TRANSACTIONAL_ID, request["transactional_id"]):
        return Verdict.ALLOWED
    return Verdict(response={"throttle_time_ms": 0, "error_code": TXN_DENIED})


def _describe_producers(check: Check, version: int, request: dict) -> Verdict:
    """READ on each topic, else its partitions 29."""
    allowed, refused = check.split(request.get("topics"), by_name("name"), READ, TOPIC)
    if not refused:
        return Verdict.ALLOWED
    entries = [{"name": topic["name"], "partitions": [
        {"partition_index": index, "error_code": TOPIC_DENIED, "error_message": None, "active_producers": []}
        for index in topic.get("partition_indexes") or ()]} for topic in refused]
    return narrowed(request, "topics", allowed, "topics", entries)


def _describe_transactions(check: Check, version: int, request: dict) -> Verdict:
    """DESCRIBE on each transactional id, else its entry is 53; a described transaction lists only
    the topics the principal may DESCRIBE (as Kafka filters them)."""
    allowed, refused = check.split(request.get("transactional_ids"), str, DESCRIBE, TRANSACTIONAL_ID)
    entries = [{"error_code": TXN_DENIED, "transactional_id": transactional_id, "transaction_state": "",
                "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
                "producer_epoch": -1, "topics": []} for transactional_id in refused]

    def amend(body: dict) -> dict:
        states = body.get("transaction_states") or []
        for state in states:
            state["topics"] = [topic for topic in state.get("topics") or ()
                               if check.allowed(DESCRIBE, TOPIC, topic["topic"], report=False)]
        body["transaction_states"] = [*states, *entries]
        return body
    return Verdict(request={**request, "transactional_ids": allowed} if refused else request, amend=amend)


def _list_transactions(check: Check, version: int, request: dict) -> Verdict:
    """The listing keeps the transactional ids the principal may DESCRIBE (probed without a report)."""
    def listing(body: dict) -> dict:
        body["transaction_states"] = [
            state for state in body.get("transaction_states") or ()
            if check.allowed(DESCRIBE, TRANSACTIONAL_ID, state["transactional_id"], report=False)]
        return body
    return Verdict(request=request, amend=listing)


TXN_RULES: dict[int, Rule] = {
    24: _add_partitions_to_txn,
    25: _add_offsets_to_txn,
    26: _end_txn,
    61: _describe_producers,
    65: _describe_transactions,
    66: _list_transactions,
}
"""API key -> rule for the transaction APIs and DescribeProducers (InitProducerId's is in ``RULES``,
FindCoordinator's in ``GROUP_RULES``)."""


class DenialLog:
    """The log line of each request the ACLs refused (Kafka's authorizer logs denials), at most
    one per (principal, operation, resource) per ``LOG_INTERVAL_MS``, with a count of the ones left
    out, so a client retrying a refused request does not flood the log."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._limiter = LogLimiter(clock or SYSTEM_CLOCK)

    def denied(self, principal: str, host: str, operation: str, resource_type: str, name: str) -> None:
        left_out = self._limiter.admit((principal, operation, resource_type, name))
        if left_out is None:
            return
        logger.warning("denied: %s from %s may not %s %s %r%s", principal, host, operation, resource_type,
                               name, f" ({left_out} more times in the last {LOG_INTERVAL_MS // 1000} s)"
                               if left_out else "")


class RequestAuthorization:
    """Kafka's per-API authorization rules over an authorizer (see the module docstring).

    ``on_denied(principal, host, operation_name, resource_type_name, name)`` is called once per
    resource a request was refused (the integration logs it, rate-limited); by default nothing."""

    def __init__(self, authorizer, on_denied: OnDenied | None = None) -> None:
        self.authorizer = authorizer
        self.on_denied = on_denied or _no_op
        self.rules: dict[int, Rule] = {**RULES, **GROUP_RULES, **TXN_RULES}

    def check(self, api_key: int, version: int, request: dict, principal: str, host: str) -> Verdict:
        """The verdict on one decoded request of ``principal`` connected from ``host``."""
        rule = self.rules.get(api_key)
        if rule is None:
            return Verdict.ALLOWED
        return rule(Check(self.authorizer, principal, host, self.on_denied), version, request)
