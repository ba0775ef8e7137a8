"""The consumer-group APIs on the wire: Kafka's requests mapped onto ``logstore.group``'s coordinator.

``GroupHandlers`` owns the translation between the wire and ``GroupCoordinator`` for
FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
DescribeGroups, DeleteGroups, OffsetDelete and TxnOffsetCommit: what each version's request fields
mean (JoinGroup v0 has no rebalance timeout, v4+ gets KIP-394's MEMBER_ID_REQUIRED; LeaveGroup v0-2
names one member; OffsetFetch v2+ may ask for every partition with null topics, v7+ for stable
offsets only; TxnOffsetCommit v3+ names the member, KIP-447) and how the coordinator's results fill
each version's response (Kafka's shapes for error answers, LeaveGroup v0-2's single error code,
OffsetFetch v0-1's errors on every partition). It also gives KIP-848's ConsumerGroupHeartbeat, which
is never advertised, its UNSUPPORTED_VERSION answer. What a group does - states, rebalances, member
and generation checks, whether a committed topic exists, storage - is the coordinator's alone.

JoinGroup and SyncGroup are answered from the coordinator's callbacks, on whichever thread completes
the rebalance (a timer's, or the handler thread of the request that completed it); until then the
request is parked and its connection's later responses wait behind it. A callback answers its
request once: a second call (a retried JoinGroup superseding a parked one) is dropped. When the
server stops, ``close()`` closes the connections of the requests still parked, as a stopping Kafka
broker drops its connections, so the shutdown does not wait for rebalances that cannot finish.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from ...group import errors as group_errors
from ...group.coordinator import GroupCoordinator
from ...group.results import JoinResult, OffsetCommit, SyncResult
from ..network.request_context import RequestContext
from ..protocol import errors
from ..protocol.messages import API_KEYS, NOT_REQUESTED
from .kafka_apis import Broker, KafkaApis

logger = logging.getLogger(__name__)

GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 0, 1  # FindCoordinator's KeyType
# What a Kafka broker without an authorizer reports as allowed on a group: READ (3), DELETE (6) and
# DESCRIBE (8), the operations a group resource supports (AclEntry.supportedOperations).
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
CLASSIC_GROUP_TYPE = "classic"  # KIP-848: the one group type this coordinator runs (ListGroups v5)

KIP_848_REFUSAL = {"throttle_time_ms": 0, "error_code": errors.UNSUPPORTED_VERSION,
                   "error_message": "the consumer group protocol of KIP-848 is not supported by this server; "
                                    "use group.protocol=classic", "member_id": None, "member_epoch": 0,
                   "heartbeat_interval_ms": 0}
"""The answer to ConsumerGroupHeartbeat, as Kafka gives it with the new protocol disabled (KafkaApis
``handleConsumerGroupHeartbeat``): clients that opted in then fail with a clear message."""


def client_host(peer: str) -> str:
    """A member's ClientHost as Kafka shows it (``InetAddress.toString`` of an address without a
    host name): ``"/127.0.0.1"`` for the peer ``"127.0.0.1:54321"``."""
    return "/" + peer.rsplit(":", 1)[0]


class GroupHandlers:
    """The group APIs of one server, over its coordinator. ``register(apis)`` plugs them in."""

    def __init__(self, broker: Broker, coordinator: GroupCoordinator) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self._lock = threading.Lock()
        self._parked: dict[int, RequestContext] = {}  # id(context) -> a JoinGroup or SyncGroup waiting
        self._closing = False

    def register(self, apis: KafkaApis) -> None:
        """Serve (and so advertise) the group APIs; refuse KIP-848's heartbeat without advertising it."""
        for name, handler in (("FindCoordinator", self.find_coordinator), ("JoinGroup", self.join_group),
                              ("SyncGroup", self.sync_group), ("Heartbeat", self.heartbeat),
                              ("LeaveGroup", self.leave_group), ("OffsetCommit", self.offset_commit),
                              ("OffsetFetch", self.offset_fetch), ("ListGroups", self.list_groups),
                              ("DescribeGroups", self.describe_groups), ("DeleteGroups", self.delete_groups),
                              ("OffsetDelete", self.offset_delete), ("TxnOffsetCommit", self.txn_offset_commit)):
            apis.register(API_KEYS[name], handler)
        apis.refuse(API_KEYS["ConsumerGroupHeartbeat"], KIP_848_REFUSAL)

    def close(self) -> None:
        """The server is stopping: close the connections of parked JoinGroups and SyncGroups, and of
        any that arrive from now on (their clients look for the coordinator again)."""
        with self._lock:
            self._closing = True
            parked, self._parked = list(self._parked.values()), {}
        for context in parked:
            context.close("the server is stopping")

    # --- answering from a callback, once ---------------------------------------------------------

    def _answer_once(self, context: RequestContext, build: Callable, *, park: bool) -> Callable | None:
        """The callback that answers ``context`` with ``build(result)``, at most once. With ``park``
        the request counts as parked (``close`` closes its connection); None when the server is
        stopping (the connection is closed at once)."""
        key = id(context)
        if park:
            with self._lock:
                if self._closing:
                    closing = True
                else:
                    closing = False
                    # Superseded JoinGroups are never answered; drop those whose client went away.
                    for stale in [k for k, parked in self._parked.items() if parked.connection.closed]:
                        del self._parked[stale]
                    self._parked[key] = context
            if closing:
                context.close("the server is stopping")
                return None
        answered = [False]

        def answer(result) -> None:
            with self._lock:
                if answered[0] or (park and self._parked.pop(key, None) is None):
                    return  # answered already, or closed by close()
                answered[0] = True
            try:
                body = build(result)
            except Exception:  # a bug here must not unwind into the coordinator's thread
                logger.exception("answering %s from %s failed", context.correlation_id, context.peer)
                context.close("answering the request failed")
                return
            context.respond(body)

        return answer

    # --- FindCoordinator -------------------------------------------------------------------------

    def find_coordinator(self, context: RequestContext, request: dict) -> None:
        """Every group's coordinator is this broker. (Advertising FindCoordinator at all is also what
        makes librdkafka use lz4.) v4+ asks for several keys at once and gets one entry each."""
        key_type = request.get("key_type", GROUP_KEY_TYPE)
        if context.api_version >= 4:
            context.respond({"throttle_time_ms": 0, "coordinators": [
                {"key": key, **self._coordinator(key_type, context)} for key in request.get("coordinator_keys") or []]})
        else:
            context.respond({"throttle_time_ms": 0, **self._coordinator(key_type, context)})

    def _coordinator(self, key_type: int, context: RequestContext) -> dict:
        broker = self.broker
        if key_type == GROUP_KEY_TYPE and self.coordinator.active:
            host, port = broker.endpoint(context)
            return {"error_code": errors.NONE, "error_message": None, "node_id": broker.node_id, "host": host,
                    "port": port}
        if key_type == GROUP_KEY_TYPE:
            error, message = errors.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running"
        elif key_type == TRANSACTION_KEY_TYPE:
            # Transactions are not supported, and a retriable error would leave a transactional
            # producer retrying until its timeout instead of failing at once.
            error, message = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactions are not supported"
        else:
            error, message = errors.INVALID_REQUEST, f"unknown coordinator key type {key_type}"
        return {"error_code": error, "error_message": message, "node_id": -1, "host": "", "port": -1}

    # --- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ---------------------------------------------

    def join_group(self, context: RequestContext, request: dict) -> None:
        version = context.api_version
        instance_id = request.get("group_instance_id")
        answer = self._answer_once(context, lambda result: join_response(version, result), park=True)
        if answer is None:
            return
        self.coordinator.join_group(
            request["group_id"], request["member_id"], protocol_type=request["protocol_type"],
            protocols=[(protocol["name"], bytes(protocol["metadata"])) for protocol in request["protocols"]],
            session_timeout_ms=request["session_timeout_ms"],
            # v0 has no rebalance timeout: the decoded default -1 makes the coordinator use the session's.
            rebalance_timeout_ms=request.get("rebalance_timeout_ms", -1),
            group_instance_id=instance_id, client_id=context.client_id or "", client_host=client_host(context.peer),
            # KIP-394 from v4, for dynamic members only: a static member is known by its instance id.
            require_known_member_id=version >= 4 and instance_id is None, callback=answer)

    def sync_group(self, context: RequestContext, request: dict) -> None:
        answer = self._answer_once(context, sync_response, park=True)
        if answer is None:
            return
        # Only the leader sends assignments; a member id given twice keeps its last one (Kafka's map).
        assignments = {entry["member_id"]: bytes(entry["assignment"]) for entry in request["assignments"]}
        self.coordinator.sync_group(
            request["group_id"], request["generation_id"], request["member_id"], assignments=assignments,
            group_instance_id=request.get("group_instance_id"), protocol_type=request.get("protocol_type"),
            protocol_name=request.get("protocol_name"), callback=answer)

    def heartbeat(self, context: RequestContext, request: dict) -> None:
        error = self.coordinator.heartbeat(request["group_id"], request["generation_id"], request["member_id"],
                                           request.get("group_instance_id"))
        context.respond({"throttle_time_ms": 0, "error_code": error})

    def leave_group(self, context: RequestContext, request: dict) -> None:
        if context.api_version < 3:  # one member, by id: a batch of one (Kafka's normalizedData)
            members = [(request["member_id"], None)]
        else:
            members = [(member["member_id"], member.get("group_instance_id")) for member in request["members"]]
        top_error, member_errors = self.coordinator.leave_group(request["group_id"], members)
        if context.api_version < 3:
            # One error code to say it all: the group's, else the member's (LeaveGroupResponse).
            error = top_error if top_error != errors.NONE else next(
                (code for code in member_errors if code != errors.NONE), errors.NONE)
            context.respond({"throttle_time_ms": 0, "error_code": error})
            return
        # With a group-level error the coordinator answers no member, and neither does Kafka.
        context.respond({"throttle_time_ms": 0, "error_code": top_error, "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "error_code": code}
            for (member_id, instance_id), code in zip(members, member_errors)]})

    # --- OffsetCommit, OffsetFetch, OffsetDelete -------------------------------------------------

    def offset_commit(self, context: RequestContext, request: dict) -> None:
        topics = request["topics"]
        offsets = _offsets_of(topics)

        def build(results: dict) -> dict:
            return {"throttle_time_ms": 0, "topics": [
                {"name": topic["name"], "partitions": [
                    {"partition_index": partition["partition_index"],
                     "error_code": results.get((topic["name"], partition["partition_index"]),
                                               errors.UNKNOWN_SERVER_ERROR)}
                    for partition in topic["partitions"]]}
                for topic in topics]}

        if not offsets:  # nothing to commit: Kafka answers without asking the coordinator
            context.respond(build({}))
            return
        # Unknown topics and partitions are the coordinator's to refuse (UNKNOWN_TOPIC_OR_PARTITION
        # for those partitions, the rest committed), as Kafka's KafkaApis does before its coordinator.
        self.coordinator.commit_offsets(
            request["group_id"], request["generation_id_or_member_epoch"], request["member_id"], offsets,
            group_instance_id=request.get("group_instance_id"), retention_ms=request.get("retention_time_ms", -1),
            callback=self._answer_once(context, build, park=False))

    def txn_offset_commit(self, context: RequestContext, request: dict) -> None:
        """TxnOffsetCommit: a transactional producer's offsets, pending in the group until its
        transaction's marker. An error per partition; v0-1 get COORDINATOR_NOT_AVAILABLE where a
        loading coordinator would say COORDINATOR_LOAD_IN_PROGRESS (their clients took that as fatal)."""
        topics = request["topics"]
        version = context.api_version
        offsets = _offsets_of(topics)

        def build(results: dict) -> dict:
            def code(key) -> int:
                error = results.get(key, errors.UNKNOWN_SERVER_ERROR)
                if version < 2 and error == errors.COORDINATOR_LOAD_IN_PROGRESS:
                    return errors.COORDINATOR_NOT_AVAILABLE
                return error
            return {"throttle_time_ms": 0, "topics": [
                {"name": topic["name"], "partitions": [
                    {"partition_index": partition["partition_index"],
                     "error_code": code((topic["name"], partition["partition_index"]))}
                    for partition in topic["partitions"]]}
                for topic in topics]}

        if not offsets:
            context.respond(build({}))
            return
        try:
            self.coordinator.txn_offset_commit(
                request["group_id"], request["transactional_id"], request["producer_id"], request["producer_epoch"],
                request.get("generation_id", -1), request.get("member_id", ""), request.get("group_instance_id"),
                offsets, callback=self._answer_once(context, build, park=False))
        except ValueError:  # an empty transactional id, a negative producer id or epoch
            context.respond(build({key: errors.INVALID_REQUEST for key in offsets}))

    def offset_fetch(self, context: RequestContext, request: dict) -> None:
        version = context.api_version
        topics = request["topics"]  # v2+: None means every partition the group committed
        wanted = None if topics is None else [(topic["name"], index) for topic in topics
                                              for index in topic["partition_indexes"]]
        error, offsets = self.coordinator.fetch_offsets(request["group_id"], wanted)
        # v7+ require_stable (KIP-447): partitions an open transaction holds an offset for are
        # answered UNSTABLE_OFFSET_COMMIT (the consumer retries once the transaction is decided).
        unstable = (self.coordinator.unstable_offsets(request["group_id"], wanted)
                    if error == errors.NONE and request.get("require_stable") else set())
        if error != errors.NONE:
            if version >= 2:
                context.respond({"throttle_time_ms": 0, "topics": [], "error_code": error})
            else:  # v0-1 have no top-level error: each partition asked for carries it
                context.respond({"throttle_time_ms": 0, "topics": [
                    {"name": topic["name"], "partitions": [fetched_partition(index, None, error)
                                                           for index in topic["partition_indexes"]]}
                    for topic in topics or []]})
            return
        if topics is None:
            by_topic: dict[str, list] = {}
            for (name, index), value in sorted(offsets.items()):
                by_topic.setdefault(name, []).append(
                    fetched_partition(index, None, group_errors.UNSTABLE_OFFSET_COMMIT) if (name, index) in unstable
                    else fetched_partition(index, value))
            response_topics = [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]
        else:
            response_topics = [{"name": topic["name"], "partitions": [
                fetched_partition(index, None, group_errors.UNSTABLE_OFFSET_COMMIT) if (topic["name"], index) in unstable
                else fetched_partition(index, offsets.get((topic["name"], index)))
                for index in topic["partition_indexes"]]}
                for topic in topics]
        context.respond({"throttle_time_ms": 0, "topics": response_topics, "error_code": errors.NONE})

    def offset_delete(self, context: RequestContext, request: dict) -> None:
        topics = request["topics"]
        wanted = [(topic["name"], partition["partition_index"]) for topic in topics for partition in topic["partitions"]]
        error, results = self.coordinator.delete_offsets(request["group_id"], wanted)
        if error != errors.NONE:  # a group-level error answers no partition (Kafka's getErrorResponse)
            context.respond({"error_code": error, "throttle_time_ms": 0, "topics": []})
            return
        context.respond({"error_code": errors.NONE, "throttle_time_ms": 0, "topics": [
            {"name": topic["name"], "partitions": [
                {"partition_index": partition["partition_index"],
                 "error_code": results.get((topic["name"], partition["partition_index"]), errors.UNKNOWN_SERVER_ERROR)}
                for partition in topic["partitions"]]}
            for topic in topics]})

    # --- ListGroups, DescribeGroups, DeleteGroups ------------------------------------------------

    def list_groups(self, context: RequestContext, request: dict) -> None:
        """v5+: every group is a ``classic`` one (KIP-848's type): a types filter without it lists none."""
        types = {name.lower() for name in request.get("types_filter") or ()}
        if types and CLASSIC_GROUP_TYPE not in types:
            context.respond({"throttle_time_ms": 0, "error_code": errors.NONE, "groups": []})
            return
        error, groups = self.coordinator.list_groups(request.get("states_filter") or ())
        context.respond({"throttle_time_ms": 0, "error_code": error, "groups": [
            {"group_id": group.group_id, "protocol_type": group.protocol_type or "", "group_state": group.state,
             "group_type": CLASSIC_GROUP_TYPE} for group in groups]})

    def describe_groups(self, context: RequestContext, request: dict) -> None:
        with_operations = context.api_version >= 3 and request.get("include_authorized_operations", False)
        described = []
        for group_id in request["groups"]:
            summary = self.coordinator.describe_group(group_id)
            described.append({
                "error_code": summary.error_code, "group_id": summary.group_id, "group_state": summary.state,
                "protocol_type": summary.protocol_type or "", "protocol_data": summary.protocol_name or "",
                "members": [{"member_id": member.member_id, "group_instance_id": member.group_instance_id,
                             "client_id": member.client_id, "client_host": member.client_host,
                             "member_metadata": member.metadata, "member_assignment": member.assignment}
                            for member in summary.members],
                "authorized_operations": (GROUP_OPERATIONS if with_operations and summary.error_code == errors.NONE
                                          else NOT_REQUESTED)})
        context.respond({"throttle_time_ms": 0, "groups": described})

    def delete_groups(self, context: RequestContext, request: dict) -> None:
        names = list(dict.fromkeys(request["groups_names"]))  # a name given twice is answered once
        results = self.coordinator.delete_groups(names)
        context.respond({"throttle_time_ms": 0, "results": [
            {"group_id": name, "error_code": results.get(name, errors.UNKNOWN_SERVER_ERROR)} for name in names]})


# --- responses from the coordinator's results --------------------------------------------------------


def join_response(version: int, result: JoinResult) -> dict:
    """A JoinGroup response at ``version``. An error answer has Kafka's shape (GenerationId -1,
    ProtocolName "" - null from v7 -, Leader "", no members) and the member id the coordinator gave:
    the new one with MEMBER_ID_REQUIRED, else the request's or ""."""
    if result.error_code != group_errors.NONE:
        return {"throttle_time_ms": 0, "error_code": result.error_code, "generation_id": -1,
                "protocol_name": None if version >= 7 else "", "leader": "", "member_id": result.member_id or "",
                "members": []}
    protocol_name = result.protocol_name
    if protocol_name is None and version < 7:  # not nullable before v7
        protocol_name = ""
    return {"throttle_time_ms": 0, "error_code": errors.NONE, "generation_id": result.generation_id,
            "protocol_name": protocol_name, "leader": result.leader_id or "", "member_id": result.member_id,
            "members": [{"member_id": member.member_id, "group_instance_id": member.group_instance_id,
                         "metadata": member.metadata} for member in result.members]}


def sync_response(result: SyncResult) -> dict:
    """A SyncGroup response (v0-3): this member's assignment, empty with an error."""
    ok = result.error_code == group_errors.NONE
    return {"throttle_time_ms": 0, "error_code": result.error_code, "assignment": result.assignment if ok else b""}


def fetched_partition(index: int, value, error: int = errors.NONE) -> dict:
    """One partition of an OffsetFetch response: the committed offset, or -1, "" when there is none
    (or with ``error``)."""
    if value is None:
        return {"partition_index": index, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                "error_code": error}
    return {"partition_index": index, "committed_offset": value.offset,
            "committed_leader_epoch": -1 if value.leader_epoch is None else value.leader_epoch,
            "metadata": "" if value.metadata is None else value.metadata, "error_code": errors.NONE}


def _offsets_of(topics: list[dict]) -> dict[tuple[str, int], OffsetCommit]:
    """The offsets an OffsetCommit or TxnOffsetCommit request's ``topics`` name."""
    return {(topic["name"], partition["partition_index"]): OffsetCommit(
        partition["committed_offset"], partition.get("committed_leader_epoch", -1),
        partition["committed_metadata"] or "")  # Kafka stores a null metadata as "" (OffsetAndMetadata.NoMetadata)
        for topic in topics for partition in topic["partitions"]}
