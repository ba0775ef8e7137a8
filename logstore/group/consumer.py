"""``Consumer``: a group consumer for applications that embed a store (no network).

This module owns the client side of the group protocol run in-process: joining through the same
``GroupCoordinator`` the server uses (so an embedded consumer and a Kafka client in one group share
its partitions and its committed offsets), computing the assignment with the range or round-robin
assignor when it leads, heartbeats on a background thread (a REBALANCE_IN_PROGRESS makes the next
``poll`` rejoin), positions per partition (from the committed offset, else ``auto_offset_reset``),
``poll`` over the store's waiting fetch, and ``commit``/``committed``/``seek``/``close``.

It follows Kafka's consumer: the protocol type is ``consumer`` and the metadata and assignments are
ConsumerProtocol bytes, so ``logstore groups describe`` and Kafka's tools see what it holds.

``isolation_level`` is Kafka's consumer setting: ``read_uncommitted`` (the default) returns every
record up to the log end offset, aborted transactions' records included; ``read_committed`` stops
at the last stable offset (the first offset of a transaction still open) and leaves aborted
transactions' records out, and a ``latest`` reset starts there. Transaction markers are never
returned either way: positions move past them (to each read's ``next_offset``), so a committed
position may point just after a marker, as in Kafka.

The member that leads remembers the partition counts its assignment used; every ``poll`` compares
them with the store's (a lookup, no I/O) and rejoins when a topic grew (``create_partitions``), so
the group rebalances and the new partitions are assigned, as Kafka's leader does on a metadata change.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from ..errors import LogStoreError, OffsetOutOfRangeError, RequestError
from ..manager.log_manager import LogManager
from ..tools.reading import fetch_results
from . import errors
from .consumer_protocol import ASSIGNORS, Assignment, Subscription, decode_assignment, decode_subscription, \
    encode_assignment, encode_subscription
from .coordinator import GroupCoordinator
from .results import JoinMember, JoinResult, OffsetCommit, SyncResult

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_REJOIN_ERRORS = {errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION, errors.REBALANCE_IN_PROGRESS,
                  errors.FENCED_INSTANCE_ID}


class GroupRequestError(RequestError):
    """A group request the coordinator refused: ``error_code`` is Kafka's code."""

    def __init__(self, what: str, error_code: int) -> None:
        super().__init__(f"{what}: {errors.name_of(error_code)} ({error_code})")
        self.error_code = error_code


class ConsumerRecord(NamedTuple):
    """A record as ``poll`` returns it: where it came from, and the record's fields."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]
    timestamp_ms: int


class Consumer:
    """A member of ``group_id`` reading ``topics`` of ``store``; use it as a context manager.

    ``poll()`` joins (or rejoins) the group when needed and returns the next records of the
    partitions this member holds; ``commit()`` stores the positions durably. Settings take Kafka's
    consumer names in snake case (``session_timeout_ms``, ``auto_offset_reset``, ...)."""

    def __init__(self, store: LogManager, group_id: str, topics: Iterable[str] = (), *,
                 coordinator: GroupCoordinator | None = None, client_id: str = "logstore-consumer",
                 group_instance_id: str | None = None, session_timeout_ms: int = 10000,
                 rebalance_timeout_ms: int = 60000, heartbeat_interval_ms: int = 3000,
                 assignors: Sequence[str] = ("range", "roundrobin"), auto_offset_reset: str = "earliest",
                 max_poll_records: int = 500, fetch_max_bytes: int = 1 << 20,
                 isolation_level: str = "read_uncommitted",
                 coordinator_config: Mapping[str, Any] | None = None) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise ValueError(f"group_id must be a non-empty str, got {group_id!r}")
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto_offset_reset must be earliest, latest or none, got {auto_offset_reset!r}")
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"isolation_level must be read_uncommitted or read_committed, got {isolation_level!r}")
        unknown = [name for name in assignors if name not in ASSIGNORS]
        if not assignors or unknown:
            raise ValueError(f"assignors must name some of {sorted(ASSIGNORS)}, got {list(assignors)!r}")
        if heartbeat_interval_ms <= 0 or heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError(f"heartbeat_interval_ms must be in (0, session_timeout_ms), got {heartbeat_interval_ms!r}")
        self.store = store
        self.group_id = group_id
        self.coordinator = coordinator or GroupCoordinator.of(store, coordinator_config)
        self.client_id = client_id
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.assignors = list(assignors)
        self.auto_offset_reset = auto_offset_reset
        self.max_poll_records = max_poll_records
        self.fetch_max_bytes = fetch_max_bytes
        self.isolation_level = isolation_level
        self.member_id = ""
        self.generation_id = -1
        self._topics: list[str] = []
        self._assignment: list[TopicPartition] = []
        self._assigned_counts: dict[str, int] | None = None  # as leader: the counts its assignment used
        self._positions: dict[TopicPartition, int] = {}
        self._rejoin_needed = True
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self._closed = False
        if topics:
            self.subscribe(topics)

    # --- subscription and membership --------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Follow ``topics`` (replacing the previous subscription); the next ``poll`` rejoins."""
        topics = sorted(set(topics))
        for topic in topics:
            self.store.partitions(topic)  # an unknown topic fails here, naming it
        with self._lock:
            self._topics = topics
            self._rejoin_needed = True

    def assignment(self) -> list[TopicPartition]:
        """The partitions this member holds in the current generation."""
        return list(self._assignment)

    def _call(self, request: Callable[..., None], *args: Any, **kwargs: Any) -> Any:
        """Run a callback-style coordinator request and wait for its answer."""
        answered = threading.Event()
        box: list[Any] = []

        def callback(result: Any) -> None:
            box.append(result)
            answered.set()

        request(*args, callback=callback, **kwargs)
        if not answered.wait(self.rebalance_timeout_ms / 1000.0 + 10.0):
            raise GroupRequestError(f"group {self.group_id}: no answer to {request.__name__}", errors.REQUEST_TIMED_OUT)
        return box[-1]

    def _ensure_active(self) -> None:
        for _attempt in range(20):
            if not self._rejoin_needed:
                return
            self._join_and_sync()
        raise GroupRequestError(f"group {self.group_id}: could not join after 20 attempts", errors.REBALANCE_IN_PROGRESS)

    def _join_and_sync(self) -> None:
        subscription = encode_subscription(Subscription(tuple(self._topics), owned_partitions=tuple(self._assignment)))
        join: JoinResult = self._call(
            self.coordinator.join_group, self.group_id, self.member_id, protocol_type="consumer",
            protocols=[(name, subscription) for name in self.assignors], session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms, group_instance_id=self.group_instance_id,
            client_id=self.client_id, client_host="in-process", require_known_member_id=True)
        if join.error_code == errors.MEMBER_ID_REQUIRED:
            self.member_id = join.member_id
            return
        if join.error_code in (errors.UNKNOWN_MEMBER_ID, errors.FENCED_INSTANCE_ID):
            self.member_id = ""
            return
        if join.error_code != errors.NONE:
            raise GroupRequestError(f"joining group {self.group_id}", join.error_code)
        self.member_id, self.generation_id = join.member_id, join.generation_id
        assignments: dict[str, bytes] = {}
        self._assigned_counts = None
        if join.leader_id == self.member_id and join.members:
            assignments = self._assign(join.protocol_name or self.assignors[0], join.members)
        sync: SyncResult = self._call(self.coordinator.sync_group, self.group_id, self.generation_id,
                                      self.member_id, assignments=assignments,
                                      group_instance_id=self.group_instance_id)
        if sync.error_code in _REJOIN_ERRORS:
            if sync.error_code in (errors.UNKNOWN_MEMBER_ID, errors.FENCED_INSTANCE_ID):
                self.member_id = ""
            return
        if sync.error_code != errors.NONE:
            raise GroupRequestError(f"syncing group {self.group_id}", sync.error_code)
        partitions = sorted(decode_assignment(sync.assignment).partitions) if sync.assignment else []
        with self._lock:
            self._assignment = partitions
            self._positions = {key: offset for key, offset in self._positions.items() if key in partitions}
            self._rejoin_needed = False
        logger.info("group %s: member %s holds %s in generation %d", self.group_id, self.member_id, partitions,
                    self.generation_id)
        self._start_heartbeats()

    def _assign(self, protocol: str, members: Sequence[JoinMember]) -> dict[str, bytes]:
        subscriptions = {member.member_id: decode_subscription(member.metadata) for member in members}
        topics = {topic for subscription in subscriptions.values() for topic in subscription.topics}
        partitions_per_topic: dict[str, int] = {}
        for topic in topics:
            try:
                partitions_per_topic[topic] = self.store.partitions(topic)
            except LogStoreError:
                pass  # deleted meanwhile: nothing to assign from it
        instance_ids = {member.member_id: member.group_instance_id for member in members}
        plan = ASSIGNORS[protocol](subscriptions, partitions_per_topic, instance_ids=instance_ids)
        self._assigned_counts = partitions_per_topic
        return {member_id: encode_assignment(Assignment(tuple(partitions))) for member_id, partitions in plan.items()}

    def _partition_counts_changed(self) -> bool:
        """As leader: whether a topic's partition count differs from the one the assignment used."""
        counts = self._assigned_counts
        if counts is None:
            return False
        for topic, count in counts.items():
            try:
                if self.store.partitions(topic) != count:
                    return True
            except LogStoreError:
                return True  # deleted meanwhile: assign again without it
        return False

    def _start_heartbeats(self) -> None:
        if self._heartbeat_thread is None or not self._heartbeat_thread.is_alive():
            self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                                      name=f"logstore-consumer-heartbeat-{self.group_id}")
            self._heartbeat_thread.start()

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_interval_ms / 1000.0):
            if not self.member_id or self.generation_id < 0:
                continue
            error = self.coordinator.heartbeat(self.group_id, self.generation_id, self.member_id,
                                               self.group_instance_id)
            if error != errors.NONE:
                with self._lock:
                    self._rejoin_needed = True
                    if error in (errors.UNKNOWN_MEMBER_ID, errors.FENCED_INSTANCE_ID):
                        self.member_id = ""

    # --- reading ----------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """The next records of the held partitions (waiting up to ``timeout_ms`` for some)."""
        if self._closed:
            raise RequestError("the consumer is closed")
        if not self._rejoin_needed and self._partition_counts_changed():
            logger.info("group %s: a subscribed topic's partition count changed: the leader rejoins", self.group_id)
            with self._lock:
                self._rejoin_needed = True
        self._ensure_active()
        positions = self._fetch_positions()
        if not positions:
            self._stop.wait(min(timeout_ms, self.heartbeat_interval_ms) / 1000.0)
            return []
        fetched = fetch_results(self.store, positions, max_bytes=self.fetch_max_bytes, max_wait_ms=max(0, timeout_ms),
                                isolation=self.isolation_level)
        out: list[ConsumerRecord] = []
        with self._lock:
            for (topic, partition), result in sorted(fetched.items()):
                if self._positions.get((topic, partition)) != positions[(topic, partition)]:
                    continue  # revoked or sought meanwhile
                room = self.max_poll_records - len(out)
                records = result.records
                for record in records[:room]:  # (read records: their offset and timestamp are not None)
                    out.append(ConsumerRecord(topic, partition, record.offset,  # type: ignore[arg-type]
                                              record.key, record.value, record.headers,
                                              record.timestamp_ms))  # type: ignore[arg-type]
                if len(records) > room:  # the rest comes with the next poll
                    self._positions[(topic, partition)] = records[room].offset  # type: ignore[assignment]
                else:  # past the records and any markers or aborted data that ended the read
                    self._positions[(topic, partition)] = result.next_offset
                if len(out) >= self.max_poll_records:
                    break
        return out

    def _fetch_positions(self) -> dict[TopicPartition, int]:
        with self._lock:
            missing = [key for key in self._assignment if key not in self._positions]
        if missing:
            error, committed = self.coordinator.fetch_offsets(self.group_id, missing)
            if error != errors.NONE:
                raise GroupRequestError(f"fetching the offsets of group {self.group_id}", error)
            for key in missing:
                value = committed.get(key)
                log = self.store.get_log(*key)
                if value is not None and log.log_start_offset <= value.offset <= log.log_end_offset:
                    position = value.offset
                elif self.auto_offset_reset == "earliest":
                    position = log.log_start_offset
                elif self.auto_offset_reset == "latest":
                    position = log.last_stable_offset if self.isolation_level == "read_committed" \
                        else log.log_end_offset
                else:
                    raise OffsetOutOfRangeError(
                        f"{key[0]}-{key[1]}: no committed offset for group {self.group_id}" if value is None else
                        f"{key[0]}-{key[1]}: the committed offset {value.offset} of group {self.group_id} is out of "
                        f"range [{log.log_start_offset}, {log.log_end_offset}]",
                        -1 if value is None else value.offset, log.log_start_offset, log.log_end_offset)
                with self._lock:
                    self._positions.setdefault(key, position)
        with self._lock:
            return dict(self._positions)

    def position(self, topic: str, partition: int) -> int:
        """The offset of the next record ``poll`` returns from this partition."""
        return self._fetch_positions()[(topic, partition)]

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read ``topic``-``partition`` from ``offset`` on (a held partition only)."""
        with self._lock:
            if (topic, partition) not in self._assignment:
                raise ValueError(f"{topic}-{partition} is not assigned to this consumer: {self._assignment}")
            self._positions[(topic, partition)] = offset

    # --- offsets ------------------------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (default: the current positions) durably; raises ``GroupRequestError``
        (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, ...) when the group refused, after which the
        next ``poll`` rejoins."""
        with self._lock:
            offsets = dict(self._positions if offsets is None else offsets)
        if not offsets:
            return
        results = self._call(self.coordinator.commit_offsets, self.group_id, self.generation_id, self.member_id,
                             {key: OffsetCommit(offset) for key, offset in offsets.items()},
                             group_instance_id=self.group_instance_id)
        failed = {key: error for key, error in results.items() if error != errors.NONE}
        if failed:
            if set(failed.values()) & _REJOIN_ERRORS:
                with self._lock:
                    self._rejoin_needed = True
            key, error = sorted(failed.items())[0]
            raise GroupRequestError(f"committing {key[0]}-{key[1]} for group {self.group_id}", error)

    def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed offset of ``topic``-``partition`` (None if none)."""
        error, committed = self.coordinator.fetch_offsets(self.group_id, [(topic, partition)])
        if error != errors.NONE:
            raise GroupRequestError(f"fetching the offsets of group {self.group_id}", error)
        value = committed.get((topic, partition))
        return None if value is None else value.offset

    # --- closing ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop heartbeating and leave the group (a static member stays until its session ends, as
        Kafka's do, so a restart within the session timeout causes no rebalance)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._heartbeat_thread is not None and self._heartbeat_thread is not threading.current_thread():
            self._heartbeat_thread.join(5.0)
        if self.member_id and self.group_instance_id is None and self.coordinator.active:
            self.coordinator.leave_group(self.group_id, [(self.member_id, None)])

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
