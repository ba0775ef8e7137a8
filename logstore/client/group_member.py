"""``GroupMember``: the consumer's part in a consumer group, over the network: the group coordinator
found with FindCoordinator, JoinGroup and SyncGroup (the assignment computed here when this member
leads), heartbeats on a background thread, LeaveGroup, and the group's offsets (OffsetCommit,
OffsetFetch).

What it owns:
- the coordinator: found from any broker, forgotten on NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
  COORDINATOR_LOAD_IN_PROGRESS or a broken connection, and found again before the next request;
  ``call`` (the offsets and the admin's requests) tries again after such a failure, with back-off
  from ``retry.backoff.ms`` doubling up to ``retry.backoff.max.ms``, for up to
  ``default.api.timeout.ms`` (or the caller's timeout), as Kafka's commitSync and AdminClient do:
  a broker restarting or a coordinator moving is waited out, not reported;
- membership, Kafka's eager protocol: ``join()`` sends JoinGroup (protocol type ``consumer``, one
  protocol per assignor with this member's ConsumerProtocol subscription), answers MEMBER_ID_REQUIRED
  by joining again with the id given (KIP-394), and when the coordinator names this member leader,
  decodes every member's subscription and assigns with the range or round-robin assignor
  (``logstore.group.consumer_protocol``), then SyncGroup gives this member its partitions;
- heartbeats every ``heartbeat.interval.ms`` on a thread with its own connection (connections are
  not shared between threads): REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or
  FENCED_INSTANCE_ID set ``rejoin_needed`` (the consumer's next ``poll`` rejoins);
- offsets: ``commit`` (sync), ``commit_async`` (sent now, its answer applied at the next
  ``poll_commits``: a future), ``committed``;
- ``leave()``: LeaveGroup, so the others rebalance at once instead of after the session timeout;
- the leader's metadata snapshot: the partition count of each subscribed topic its assignment was
  computed from (``assigned_counts``); ``metadata_changed(network)`` asks again and says whether a
  count differs, and the consumer then rejoins, so a topic that grew is assigned in full (Kafka's
  leader rejoins on a metadata change the same way; the coordinator rebalances when the leader does).

The JoinGroup request waits at the coordinator until every member has joined, so this member's
connection to the coordinator allows ``rebalance.timeout.ms`` plus 5 s for an answer, as Kafka's does.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import Mapping

from ..clock import SYSTEM_CLOCK, Clock
from ..group import errors as group_errors
from ..group.consumer_protocol import (ASSIGNORS, Assignment, Subscription, decode_assignment, decode_subscription,
                                       encode_assignment, encode_subscription)
from ..server.protocol import errors as kafka_errors
from .cluster import NetworkClient
from .connection import BrokerConnection
from .errors import BrokerResponseError, NetworkError

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_COORDINATOR_ERRORS = {group_errors.NOT_COORDINATOR, group_errors.COORDINATOR_NOT_AVAILABLE,
                       group_errors.COORDINATOR_LOAD_IN_PROGRESS}
_REJOIN_ERRORS = {group_errors.REBALANCE_IN_PROGRESS, group_errors.ILLEGAL_GENERATION,
                  group_errors.UNKNOWN_MEMBER_ID, group_errors.FENCED_INSTANCE_ID}
_REJOIN_GRACE_MS = 5000
_UNSTABLE_OFFSET_COMMIT = 88  # OffsetFetch v7+: a transaction holds offsets of the partition pending
DEFAULT_API_TIMEOUT_MS = 60_000
"""Kafka's ``default.api.timeout.ms``: how long ``call`` keeps trying a coordinator that is gone."""


def coordinator_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the group's coordinator could not be reached or is not (yet) the
    coordinator: a failure that ends when the broker is back, unlike a refusal."""
    return isinstance(exc, NetworkError) or getattr(exc, "error_code", None) in _COORDINATOR_ERRORS


def _first_partition_error(body: dict) -> int:
    """The first error code of a response whose errors are per partition (OffsetCommit)."""
    return next((partition["error_code"] for topic in body["topics"] for partition in topic["partitions"]
                 if partition["error_code"]), 0)


def _error(what: str, code: int) -> BrokerResponseError:
    name = kafka_errors.NAMES.get(code) or group_errors.name_of(code)
    return BrokerResponseError(f"{what}: {name} ({code})", code, name)


class GroupMember:
    """One member of ``group_id`` (see the module docstring). The consumer's thread calls
    everything but the heartbeat loop, which runs on its own thread."""

    def __init__(self, network: NetworkClient, group_id: str, *, session_timeout_ms: int,
                 rebalance_timeout_ms: int, heartbeat_interval_ms: int, assignors: list[str],
                 group_instance_id: str | None, client_id: str, request_timeout_ms: int,
                 default_api_timeout_ms: int = DEFAULT_API_TIMEOUT_MS, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 1000, clock: Clock = SYSTEM_CLOCK) -> None:
        self._network = network
        self.group_id = group_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.assignors = assignors
        self.group_instance_id = group_instance_id
        self._client_id = client_id
        self._request_timeout_ms = max(request_timeout_ms, rebalance_timeout_ms + _REJOIN_GRACE_MS)
        self.default_api_timeout_ms = default_api_timeout_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._retry_backoff_max_ms = max(retry_backoff_ms, retry_backoff_max_ms)
        self.clock = clock
        self.member_id = ""
        self.generation_id = -1
        self.rejoin_needed = True
        self.is_leader = False
        # What the leader's last assignment was computed from: subscribed topic -> partition count.
        self.assigned_counts: dict[str, int] | None = None
        self._coordinator: tuple[str, int] | None = None
        self._connection: BrokerConnection | None = None
        self._async_commits: dict[int, tuple[Future, dict]] = {}  # correlation id -> (future, offsets)
        self._lock = threading.Lock()  # member id and generation, shared with the heartbeat thread
        self._stop = threading.Event()
        self._heartbeats: threading.Thread | None = None

    # --- the coordinator -------------------------------------------------------------------------

    def _find_coordinator(self) -> tuple[str, int]:
        body = self._network.request_any("FindCoordinator", {"key": self.group_id, "key_type": 0,
                                                             "coordinator_keys": [self.group_id]})
        entry = body["coordinators"][0] if body.get("coordinators") else body
        if entry["error_code"]:
            raise _error(f"FindCoordinator for group {self.group_id}", entry["error_code"])
        return entry["host"], entry["port"]

    def _coordinator_connection(self) -> BrokerConnection:
        if self._connection is not None and self._connection.connected:
            return self._connection
        if self._coordinator is None:
            self._coordinator = self._find_coordinator()
        connection = BrokerConnection(*self._coordinator, client_id=self._client_id,
                                      request_timeout_ms=self._request_timeout_ms, clock=self.clock,
                                      security=self._network.security)
        try:
            connection.connect()
        except NetworkError:
            self._coordinator = None
            raise
        self._connection = connection
        return connection

    def request(self, api: str, body: dict) -> dict:
        """``body`` to the group's coordinator; NetworkError (the coordinator forgotten) when it fails."""
        try:
            return self._coordinator_connection().request(api, body)
        except NetworkError:
            self._lose_coordinator()
            raise

    def call(self, api: str, body: dict, *, error_code=lambda answer: answer.get("error_code", 0),
             timeout_ms: int | None = None) -> dict:
        """``request``, tried again while the coordinator cannot be reached or answers that it is
        not (or not yet) the coordinator (``error_code(answer)`` says, for APIs whose error is not
        at the top), for up to ``timeout_ms`` (default ``default.api.timeout.ms``; 0: one try).
        The last failure is raised when the time is up; any other error code is the caller's."""
        deadline_ms = self.clock.monotonic_ms() + (self.default_api_timeout_ms if timeout_ms is None else timeout_ms)
        backoff_ms = self._retry_backoff_ms
        while True:
            try:
                answer = self.request(api, body)
                code = error_code(answer)
                if code not in _COORDINATOR_ERRORS:
                    return answer
                self._lose_coordinator()
                failure: Exception = _error(f"{api} for group {self.group_id}", code)
            except NetworkError as exc:  # the coordinator is already forgotten
                failure = exc
            except BrokerResponseError as exc:  # FindCoordinator's answer
                if exc.error_code not in _COORDINATOR_ERRORS:
                    raise
                failure = exc
            if self.clock.monotonic_ms() + backoff_ms >= deadline_ms:
                raise failure
            logger.info("group %s: %s failed (%s): trying again in %d ms", self.group_id, api, failure, backoff_ms)
            self.clock.sleep_ms(backoff_ms)
            backoff_ms = min(backoff_ms * 2, self._retry_backoff_max_ms)

    @property
    def coordinator_known(self) -> bool:
        """Whether the coordinator is known (it is forgotten when it cannot be reached or says it
        is not the coordinator)."""
        return self._coordinator is not None

    def _lose_coordinator(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection, self._coordinator = None, None

    # --- membership ------------------------------------------------------------------------------

    def join(self, topics: list[str], owned: list[TopicPartition]) -> list[TopicPartition] | None:
        """One round of JoinGroup and SyncGroup: this member's new partitions, or None when the
        round must be tried again (a new member id, a rebalance started meanwhile, a lost coordinator)."""
        subscription = encode_subscription(Subscription(topics, owned_partitions=owned))
        body = self.request("JoinGroup", {
            "group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms, "member_id": self.member_id,
            "group_instance_id": self.group_instance_id, "protocol_type": "consumer",
            "protocols": [{"name": name, "metadata": subscription} for name in self.assignors]})
        code = body["error_code"]
        if code == group_errors.MEMBER_ID_REQUIRED:
            self.member_id = body["member_id"]
            return None
        if code in (group_errors.UNKNOWN_MEMBER_ID, group_errors.FENCED_INSTANCE_ID):
            self.member_id = ""
            return None
        if code in _COORDINATOR_ERRORS:
            self._lose_coordinator()
            return None
        if code == group_errors.REBALANCE_IN_PROGRESS:
            return None
        if code:
            raise _error(f"joining group {self.group_id}", code)
        with self._lock:
            self.member_id, self.generation_id = body["member_id"], body["generation_id"]
        assignments = []
        self.is_leader = body["leader"] == self.member_id
        self.assigned_counts = None
        if self.is_leader:
            plan = self._assign(body["protocol_name"] or self.assignors[0], body["members"])
            assignments = [{"member_id": member, "assignment": data} for member, data in plan.items()]
        sync = self.request("SyncGroup", {
            "group_id": self.group_id, "generation_id": self.generation_id, "member_id": self.member_id,
            "group_instance_id": self.group_instance_id, "protocol_type": "consumer",
            "protocol_name": body["protocol_name"], "assignments": assignments})
        code = sync["error_code"]
        if code in _REJOIN_ERRORS or code in _COORDINATOR_ERRORS:
            if code in (group_errors.UNKNOWN_MEMBER_ID, group_errors.FENCED_INSTANCE_ID):
                self.member_id = ""
            if code in _COORDINATOR_ERRORS:
                self._lose_coordinator()
            return None
        if code:
            raise _error(f"syncing group {self.group_id}", code)
        partitions = sorted(decode_assignment(sync["assignment"]).partitions) if sync["assignment"] else []
        self.rejoin_needed = False
        logger.info("group %s: member %s holds %s in generation %d", self.group_id, self.member_id, partitions,
                    self.generation_id)
        self._start_heartbeats()
        return partitions

    def _assign(self, protocol: str, members: list[dict]) -> dict[str, bytes]:
        """The leader's plan: every member's partitions, by ``protocol``'s assignor."""
        subscriptions = {member["member_id"]: decode_subscription(member["metadata"]) for member in members}
        topics = sorted({topic for subscription in subscriptions.values() for topic in subscription.topics})
        metadata = self._network.refresh_metadata(topics)
        partitions_per_topic = {topic: metadata.partitions(topic) for topic in topics
                                if metadata.partitions(topic) is not None}
        self.assigned_counts = dict(partitions_per_topic)
        instance_ids = {member["member_id"]: member.get("group_instance_id") for member in members}
        plan = ASSIGNORS[protocol](subscriptions, partitions_per_topic, instance_ids=instance_ids)
        return {member_id: encode_assignment(Assignment(partitions)) for member_id, partitions in plan.items()}

    def metadata_changed(self) -> bool:
        """For the leader: whether a subscribed topic's partition count differs from the one its
        assignment used (asks the broker: Metadata). Always False for the other members."""
        snapshot = self.assigned_counts
        if not self.is_leader or snapshot is None or self.rejoin_needed:
            return False
        metadata = self._network.refresh_metadata(sorted(snapshot))
        current = {topic: metadata.partitions(topic) for topic in snapshot if metadata.partitions(topic) is not None}
        if current != snapshot:
            logger.info("group %s: the partition counts changed (%s -> %s): the leader rejoins", self.group_id,
                        snapshot, current)
            return True
        return False

    def leave(self) -> None:
        """Stop heartbeating and leave the group (best effort: a coordinator that is gone lets the
        session expire instead)."""
        self._stop.set()
        if self._heartbeats is not None:
            self._heartbeats.join(5)
        if self.member_id and self.group_instance_id is None:
            try:
                body = self.request("LeaveGroup", {"group_id": self.group_id, "member_id": self.member_id,
                                                    "members": [{"member_id": self.member_id,
                                                                 "group_instance_id": None}]})
                if body["error_code"]:
                    logger.info("group %s: LeaveGroup answered %s", self.group_id, body["error_code"])
            except (NetworkError, BrokerResponseError) as exc:
                logger.warning("group %s: could not leave: %s", self.group_id, exc)
        self.member_id, self.generation_id, self.rejoin_needed = "", -1, True

    def close(self) -> None:
        self._stop.set()
        if self._heartbeats is not None:
            self._heartbeats.join(5)
        self._lose_coordinator()

    # --- heartbeats ------------------------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        if self._heartbeats is None or not self._heartbeats.is_alive():
            self._stop.clear()
            self._heartbeats = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                                name=f"logstore-heartbeat-{self.group_id}")
            self._heartbeats.start()

    def _heartbeat_loop(self) -> None:
        connection: BrokerConnection | None = None
        try:
            while not self._stop.wait(self.heartbeat_interval_ms / 1000):
                with self._lock:
                    member_id, generation_id = self.member_id, self.generation_id
                if not member_id or generation_id < 0 or self.rejoin_needed:
                    continue
                try:
                    if connection is None or not connection.connected:
                        coordinator = self._coordinator or self._find_coordinator_for_heartbeat()
                        if coordinator is None:
                            continue
                        connection = BrokerConnection(*coordinator, client_id=self._client_id,
                                                      request_timeout_ms=self.session_timeout_ms, clock=self.clock,
                                                      security=self._network.security)
                        connection.connect()
                    body = connection.request("Heartbeat", {"group_id": self.group_id, "generation_id": generation_id,
                                                            "member_id": member_id,
                                                            "group_instance_id": self.group_instance_id})
                except (NetworkError, BrokerResponseError) as exc:
                    logger.warning("group %s: heartbeat failed: %s", self.group_id, exc)
                    if connection is not None:
                        connection.close()
                    connection = None
                    continue
                code = body["error_code"]
                if code in _REJOIN_ERRORS:
                    logger.info("group %s: heartbeat answered %s: rejoining", self.group_id,
                                group_errors.name_of(code))
                    with self._lock:
                        if code in (group_errors.UNKNOWN_MEMBER_ID, group_errors.FENCED_INSTANCE_ID):
                            self.member_id = ""
                        self.rejoin_needed = True
                elif code in _COORDINATOR_ERRORS:
                    connection.close()
                    connection = None
                    self.rejoin_needed = True
                elif code:
                    logger.warning("group %s: heartbeat answered %s", self.group_id, group_errors.name_of(code))
        finally:
            if connection is not None:
                connection.close()

    def _find_coordinator_for_heartbeat(self) -> tuple[str, int] | None:
        # The main thread owns the network client: the heartbeat thread asks a fresh one.
        network = NetworkClient(list(self._network.bootstrap), client_id=self._client_id,
                                clock=self.clock, security=self._network.security)
        try:
            body = network.request_any("FindCoordinator", {"key": self.group_id, "key_type": 0,
                                                           "coordinator_keys": [self.group_id]})
        except NetworkError:
            return None
        finally:
            network.close()
        entry = body["coordinators"][0] if body.get("coordinators") else body
        return None if entry["error_code"] else (entry["host"], entry["port"])

    # --- offsets ---------------------------------------------------------------------------------

    def _commit_body(self, offsets: Mapping[TopicPartition, int], metadata: Mapping[TopicPartition, str] | None = None
                     ) -> dict:
        topics: dict[str, list] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                 "committed_leader_epoch": -1,
                                                 "committed_metadata": (metadata or {}).get((topic, partition), "")})
        in_group = not self.rejoin_needed and self.generation_id >= 0
        return {"group_id": self.group_id, "generation_id_or_member_epoch": self.generation_id if in_group else -1,
                "member_id": self.member_id if in_group else "", "group_instance_id": self.group_instance_id,
                "retention_time_ms": -1,
                "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}

    def _commit_result(self, body: dict) -> None:
        for topic in body["topics"]:
            for partition in topic["partitions"]:
                code = partition["error_code"]
                if code in _REJOIN_ERRORS:
                    self.rejoin_needed = True
                if code in _COORDINATOR_ERRORS:
                    self._lose_coordinator()
                if code:
                    raise _error(f"committing {topic['name']}-{partition['partition_index']} for group "
                                 f"{self.group_id}", code)

    def commit(self, offsets: Mapping[TopicPartition, int], metadata: Mapping[TopicPartition, str] | None = None,
               *, timeout_ms: int | None = None) -> None:
        """Store ``offsets`` (the next offset to read, per partition) as the group's, durably, with
        ``metadata`` strings beside them; a coordinator gone is waited for (``call``). Committing
        the same offsets twice is harmless, so one whose answer was lost is sent again."""
        if offsets:
            self._commit_result(self.call("OffsetCommit", self._commit_body(offsets, metadata),
                                          error_code=_first_partition_error, timeout_ms=timeout_ms))

    def commit_async(self, offsets: Mapping[TopicPartition, int]) -> Future[dict[TopicPartition, int]]:
        """Send the commit now; the future completes when ``poll_commits`` sees the answer."""
        future: Future[dict[TopicPartition, int]] = Future()
        if not offsets:
            future.set_result(dict(offsets))
            return future
        try:
            correlation_id = self._coordinator_connection().send("OffsetCommit", self._commit_body(offsets))
        except (NetworkError, BrokerResponseError) as exc:
            self._lose_coordinator()
            future.set_exception(exc)
            return future
        self._async_commits[correlation_id] = (future, dict(offsets))
        return future

    def poll_commits(self, wait: bool = False) -> None:
        """Apply the answers to asynchronous commits that arrived (all of them, with ``wait``)."""
        while self._async_commits:
            connection = self._connection
            try:
                if connection is None or not connection.connected:
                    raise NetworkError(f"the connection to the coordinator of group {self.group_id} closed")
                responses = connection.poll(self._request_timeout_ms if wait else 0)
            except NetworkError as exc:
                for future, _ in self._async_commits.values():
                    future.set_exception(exc)
                self._async_commits.clear()
                self._lose_coordinator()
                return
            for response in responses:
                entry = self._async_commits.pop(response.correlation_id, None)
                if entry is None:
                    continue
                future, offsets = entry
                try:
                    self._commit_result(response.body)
                except BrokerResponseError as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(offsets)
            if not wait:
                return

    def committed(self, partitions: list[TopicPartition] | None, *, timeout_ms: int | None = None,
                  require_stable: bool = False) -> dict[TopicPartition, int | None]:
        """The group's committed offsets of ``partitions`` (None where it has none); every
        partition it has committed when ``partitions`` is None (``require_stable``:
        ``committed_entries``)."""
        entries = self.committed_entries(partitions, timeout_ms=timeout_ms, require_stable=require_stable)
        return {tp: None if entry is None else entry[0] for tp, entry in entries.items()}

    def committed_entries(self, partitions: list[TopicPartition] | None, *, timeout_ms: int | None = None,
                          require_stable: bool = False) -> dict[TopicPartition, tuple[int, str | None] | None]:
        """``committed`` with the metadata string committed beside each offset (a coordinator gone
        is waited for: ``call``). ``require_stable`` (OffsetFetch v7+, KIP-447): while a
        transaction holds offsets of a partition pending, the coordinator answers
        UNSTABLE_OFFSET_COMMIT, and the fetch is tried again (with backoff, up to ``timeout_ms``)
        until the transaction ended, so the offsets read are the committed ones."""
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions or ():
            topics.setdefault(topic, []).append(partition)
        request = {"group_id": self.group_id, "require_stable": require_stable,
                   "topics": None if partitions is None else
                   [{"name": name, "partition_indexes": parts} for name, parts in topics.items()]}
        deadline_ms = self.clock.monotonic_ms() + (self.default_api_timeout_ms if timeout_ms is None else timeout_ms)
        backoff_ms = self._retry_backoff_ms
        while True:
            body = self.call("OffsetFetch", request, timeout_ms=timeout_ms)
            unstable = body.get("error_code") == _UNSTABLE_OFFSET_COMMIT or any(
                partition["error_code"] == _UNSTABLE_OFFSET_COMMIT
                for topic in body["topics"] for partition in topic["partitions"])
            if not unstable or self.clock.monotonic_ms() + backoff_ms >= deadline_ms:
                break
            logger.info("group %s: offsets pending in a transaction: fetching them again in %d ms",
                        self.group_id, backoff_ms)
            self.clock.sleep_ms(backoff_ms)
            backoff_ms = min(backoff_ms * 2, self._retry_backoff_max_ms)
        if body.get("error_code"):
            if body["error_code"] in _COORDINATOR_ERRORS:
                self._lose_coordinator()
            raise _error(f"OffsetFetch for group {self.group_id}", body["error_code"])
        found: dict[TopicPartition, tuple[int, str | None] | None] = {tp: None for tp in partitions or ()}
        for topic in body["topics"]:
            for partition in topic["partitions"]:
                if partition["error_code"]:
                    raise _error(f"OffsetFetch of {topic['name']}-{partition['partition_index']}",
                                 partition["error_code"])
                offset = partition["committed_offset"]
                found[(topic["name"], partition["partition_index"])] = \
                    None if offset < 0 else (offset, partition["metadata"])
        return found
