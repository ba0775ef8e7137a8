"""``Consumer``: Kafka's consumer on our network layer: ``assign`` or ``subscribe`` (a consumer group),
``poll`` with fetching ahead, ``seek``, ``position``, ``commit`` (sync and async), ``committed``,
``offsets_for_times``, ``close``.

What it owns:
- configuration with Kafka's names (``group.id``, ``auto.offset.reset``, ``enable.auto.commit``,
  ``auto.commit.interval.ms``, ``fetch.min.bytes``, ``fetch.max.bytes``, ``max.partition.fetch.bytes``,
  ``fetch.max.wait.ms``, ``max.poll.records``, ``isolation.level``, ``session.timeout.ms``,
  ``heartbeat.interval.ms``, ``max.poll.interval.ms`` (the rebalance timeout),
  ``partition.assignment.strategy``, ``group.instance.id``, ``request.timeout.ms``, ``client.id``,
  ``retry.backoff.ms``, ``retry.backoff.max.ms``, ``default.api.timeout.ms``, ``metadata.max.age.ms``),
  given as a dict, or as keywords with the dots written as underscores;
- the order of a ``poll``: rejoin the group when it rebalanced (committing first with auto-commit,
  as the eager protocol revokes everything), positions for partitions without one (the group's
  committed offset, else ``auto.offset.reset``; a partition this member held before the rejoin and
  holds again keeps its own position when it is further on than the commit, so a commit not yet made
  when the coordinator was lost, a broker restart say, does not return records twice), an
  auto-commit when due, then the buffered records,
  else Fetch responses waited for up to the timeout; before it returns records, the next Fetch
  requests are sent, so the broker reads ahead while the application works (``fetcher``);
- the group (``group_member``): JoinGroup/SyncGroup, heartbeats on their own thread, LeaveGroup at
  ``close``. The member that leads asks for the subscribed topics' metadata every
  ``metadata.max.age.ms`` (Kafka's default 300000) and rejoins when a partition count changed, so
  the group rebalances and partitions added to a topic (CreatePartitions) are assigned. A coordinator that cannot be reached (a broker restarting) is tried again with
  back-off until the poll's timeout; the poll then returns no records and the next one goes on
  trying, as Kafka's does: it is never an error of ``poll``.

Records come back as ``ConsumerRecord`` (``topic, partition, offset, key, value, headers,
timestamp_ms``), the tuple the embedded consumer (``logstore.group.consumer``) returns. One thread
uses a consumer (as with Kafka's); the heartbeat thread is its own.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import Any, Iterable, Mapping, NamedTuple

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import RequestError, StoreClosedError
from ..group.consumer import ConsumerRecord
from ..group.consumer_protocol import ASSIGNORS
from .cluster import NetworkClient
from .errors import NetworkError
from .fetcher import EARLIEST, READ_COMMITTED, READ_UNCOMMITTED, Fetcher, high_watermarks
from .group_member import GroupMember, coordinator_unavailable
from .security import SECURITY_DEFAULTS, ClientSecurity

__all__ = ["Consumer", "ConsumerRecord"]

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
DEFAULTS: dict[str, Any] = {
    "bootstrap.servers": None, "client.id": "logstore-consumer", "group.id": None, "group.instance.id": None,
    "auto.offset.reset": "latest", "enable.auto.commit": True, "auto.commit.interval.ms": 5000,
    "fetch.min.bytes": 1, "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 1_048_576,
    "fetch.max.wait.ms": 500, "max.poll.records": 500, "isolation.level": "read_uncommitted",
    "session.timeout.ms": 45_000, "heartbeat.interval.ms": 3000, "max.poll.interval.ms": 300_000,
    "partition.assignment.strategy": ["range", "roundrobin"], "request.timeout.ms": 30_000,
    "retry.backoff.ms": 100, "retry.backoff.max.ms": 1000, "default.api.timeout.ms": 60_000,
    "metadata.max.age.ms": 300_000, **SECURITY_DEFAULTS}
SETTING_DOCS: dict[str, str] = {
    "bootstrap.servers": "the brokers to start from, HOST:PORT separated by commas (required)",
    "client.id": "the name the consumer gives in every request (the broker's logs and group listings show it)",
    "group.id": "the consumer group that subscribe joins and whose offsets commit writes",
    "group.instance.id": "a static member's id (Kafka's static membership): it rejoins as the same member",
    "auto.offset.reset": "where a partition without a committed offset starts: earliest, latest, or none "
                         "(NoOffsetForPartitionError)",
    "enable.auto.commit": "commit the positions from poll every auto.commit.interval.ms, and at close",
    "auto.commit.interval.ms": "how often poll commits when enable.auto.commit is on",
    "fetch.min.bytes": "the broker holds a Fetch until it has this many bytes or fetch.max.wait.ms passed",
    "fetch.max.bytes": "the most record bytes one Fetch answer carries",
    "max.partition.fetch.bytes": "the most record bytes of one partition in one Fetch answer",
    "fetch.max.wait.ms": "how long the broker holds a Fetch waiting for fetch.min.bytes",
    "max.poll.records": "the most records one poll returns",
    "isolation.level": "read_uncommitted, or read_committed: up to the last stable offset, without the "
                       "records of aborted transactions",
    "session.timeout.ms": "a member that sends no heartbeat for this long is removed from its group",
    "heartbeat.interval.ms": "how often the heartbeat thread sends one (below session.timeout.ms)",
    "max.poll.interval.ms": "the rebalance timeout given at JoinGroup: how long a rebalance waits for the "
                            "members to rejoin",
    "partition.assignment.strategy": "the assignors offered to the group, in order of preference: range, "
                                     "roundrobin",
    "request.timeout.ms": "how long a request waits for its answer before it fails",
    "retry.backoff.ms": "the first wait before a group request that failed is tried again",
    "retry.backoff.max.ms": "the longest such wait (it doubles per failure in a row)",
    "default.api.timeout.ms": "how long a call to the group coordinator that is given no timeout may take "
                              "(commit, committed)",
    "metadata.max.age.ms": "how often the group's leader asks for the subscribed topics' partition counts "
                           "(a change rebalances the group)",
}
"""What each consumer setting of ``DEFAULTS`` does (the security ones: ``security.SETTING_DOCS``);
the documentation's settings reference is generated from it."""
_ISOLATION = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}
_PROMPT_ROUNDS = 5  # join rounds in a row without back-off (the coordinator holds a JoinGroup: no busy loop)


def consumer_config(config: Mapping[str, Any] | None, keywords: Mapping[str, Any]) -> dict[str, Any]:
    """Kafka's consumer settings from a dict of dotted names and/or keywords with underscores."""
    merged = dict(DEFAULTS)
    for key, value in [*(config or {}).items(), *((k.replace("_", "."), v) for k, v in keywords.items())]:
        if key not in DEFAULTS:
            raise ValueError(f"unknown consumer setting {key!r} (known: {', '.join(sorted(DEFAULTS))})")
        merged[key] = value
    if not merged["bootstrap.servers"]:
        raise ValueError("bootstrap.servers is required")
    if merged["auto.offset.reset"] not in ("earliest", "latest", "none"):
        raise ValueError(f"auto.offset.reset must be earliest, latest or none, got {merged['auto.offset.reset']!r}")
    if merged["isolation.level"] not in _ISOLATION:
        raise ValueError(f"isolation.level must be read_uncommitted or read_committed, "
                         f"got {merged['isolation.level']!r}")
    for key in ("fetch.min.bytes", "fetch.max.bytes", "max.partition.fetch.bytes", "fetch.max.wait.ms",
                "max.poll.records", "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms",
                "auto.commit.interval.ms", "request.timeout.ms", "retry.backoff.ms", "retry.backoff.max.ms",
                "default.api.timeout.ms", "metadata.max.age.ms"):
        value = merged[key]
        if type(value) is not int or value < (0 if key in ("fetch.min.bytes", "fetch.max.wait.ms",
                                                             "retry.backoff.ms", "metadata.max.age.ms") else 1):
            raise ValueError(f"{key} must be a positive int, got {value!r}")
    if merged["heartbeat.interval.ms"] >= merged["session.timeout.ms"]:
        raise ValueError(f"heartbeat.interval.ms must be below session.timeout.ms, "
                         f"got {merged['heartbeat.interval.ms']!r}")
    strategy = merged["partition.assignment.strategy"]
    if isinstance(strategy, str):
        strategy = [name.strip() for name in strategy.split(",")]
    unknown = [name for name in strategy if name not in ASSIGNORS]
    if not strategy or unknown:
        raise ValueError(f"partition.assignment.strategy must name some of {sorted(ASSIGNORS)}, got {strategy!r}")
    merged["partition.assignment.strategy"] = list(strategy)
    group_id = merged["group.id"]
    if group_id is not None and (not isinstance(group_id, str) or not group_id):
        raise ValueError(f"group.id must be a non-empty str or None, got {group_id!r}")
    return merged


class GroupMetadata(NamedTuple):
    """A consumer's group membership (Kafka's ``ConsumerGroupMetadata``), for a transactional
    producer's ``send_offsets_to_transaction``: a generation of -1 and an empty member id skip the
    coordinator's membership checks (a plain group id)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class Consumer:
    """Reads records from a Kafka-compatible broker (see the module docstring). Use it as a
    context manager, or call ``close()``: it commits (with auto-commit) and leaves the group."""

    def __init__(self, config: Mapping[str, Any] | None = None, *, clock: Clock = SYSTEM_CLOCK,
                 **settings: Any) -> None:
        self.config = settings = consumer_config(config, settings)
        self._clock = clock
        self._network = NetworkClient(settings["bootstrap.servers"], client_id=settings["client.id"],
                                      request_timeout_ms=settings["request.timeout.ms"], clock=clock,
                                      security=ClientSecurity.from_config(settings))
        self._fetcher = Fetcher(self._network, fetch_min_bytes=settings["fetch.min.bytes"],
                                fetch_max_bytes=settings["fetch.max.bytes"],
                                max_partition_fetch_bytes=settings["max.partition.fetch.bytes"],
                                fetch_max_wait_ms=settings["fetch.max.wait.ms"],
                                max_poll_records=settings["max.poll.records"],
                                isolation_level=_ISOLATION[settings["isolation.level"]],
                                auto_offset_reset=settings["auto.offset.reset"])
        self._member: GroupMember | None = None
        if settings["group.id"] is not None:
            self._member = GroupMember(self._network, settings["group.id"],
                                       session_timeout_ms=settings["session.timeout.ms"],
                                       rebalance_timeout_ms=settings["max.poll.interval.ms"],
                                       heartbeat_interval_ms=settings["heartbeat.interval.ms"],
                                       assignors=settings["partition.assignment.strategy"],
                                       group_instance_id=settings["group.instance.id"],
                                       client_id=settings["client.id"],
                                       request_timeout_ms=settings["request.timeout.ms"],
                                       default_api_timeout_ms=settings["default.api.timeout.ms"],
                                       retry_backoff_ms=settings["retry.backoff.ms"],
                                       retry_backoff_max_ms=settings["retry.backoff.max.ms"], clock=clock)
        self._subscription: list[str] | None = None  # subscribed topics; None: assign() or nothing yet
        # Positions of partitions held before a rejoin and given back by it, until the group's
        # commits are known: the further of the two is where this member goes on.
        self._kept_positions: dict[TopicPartition, int] = {}
        self._assigned_as = ""  # the member id the group gave the partitions held to
        self._auto_commit = bool(settings["enable.auto.commit"]) and self._member is not None
        self._next_auto_commit_ms = clock.monotonic_ms() + settings["auto.commit.interval.ms"]
        self._next_metadata_check_ms = clock.monotonic_ms() + settings["metadata.max.age.ms"]
        self._closed = False

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the consumer is closed")

    def _require_group(self, what: str) -> GroupMember:
        if self._member is None:
            raise RequestError(f"{what} needs a consumer group: set group.id")
        return self._member

    # --- what to read ----------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly ``partitions`` (``(topic, partition)`` pairs), without group membership."""
        self._check_open()
        partitions = [_check_tp(tp) for tp in partitions]
        if self._subscription is not None:
            raise RequestError("this consumer subscribed to topics: unsubscribe() before assign()")
        self._network.refresh_metadata(sorted({topic for topic, _ in partitions}))
        for topic, partition in partitions:
            count = self._network.metadata.partitions(topic)
            if count is None or partition >= count:
                raise ValueError(f"no partition {partition} of topic {topic!r} on the broker "
                                 f"(partitions: {count if count is not None else 'no such topic'})")
        self._fetcher.assign(partitions)

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the consumer group (``group.id``) for ``topics``; the group assigns the partitions
        at the next ``poll``, and again whenever it rebalances."""
        self._check_open()
        member = self._require_group("subscribe")
        if isinstance(topics, str):
            raise TypeError(f"topics must be a list of topic names, got {topics!r}")
        topics = sorted(set(topics))
        if self._subscription is None and self._fetcher.positions:
            raise RequestError("this consumer has assigned partitions: assign([]) before subscribe()")
        self._subscription = topics
        member.rejoin_needed = True

    def unsubscribe(self) -> None:
        """Leave the group and hold no partitions."""
        self._check_open()
        if self._member is not None and self._subscription is not None:
            self._commit_on_revoke()
            self._member.leave()
        self._subscription = None
        self._kept_positions = {}
        self._fetcher.assign([])

    @property
    def generation(self) -> int:
        """The group generation this consumer is a member of (-1: not a member, or no group)."""
        return self._member.generation_id if self._member is not None else -1

    def group_metadata(self) -> GroupMetadata:
        """This consumer's group membership (group id, generation, member id, instance id), for a
        transactional producer's ``send_offsets_to_transaction``: the group's coordinator then
        refuses the offsets if this member has left the group meanwhile (KIP-447)."""
        member = self._require_group("group_metadata")
        return GroupMetadata(member.group_id, member.generation_id, member.member_id, member.group_instance_id)

    def assignment(self) -> list[TopicPartition]:
        """The partitions this consumer reads now."""
        return list(self._fetcher.positions)

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning records of ``partitions`` (their positions stay) until ``resume``."""
        self._fetcher.pause(partitions, True)

    def resume(self, *partitions: TopicPartition) -> None:
        self._fetcher.pause(partitions, False)

    # --- positions -------------------------------------------------------------------------------

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """The next ``poll`` returns ``topic``/``partition`` from ``offset`` on."""
        self._check_open()
        if type(offset) is not int or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        self._fetcher.seek(_check_tp((topic, partition)), offset)
        self._kept_positions.pop((topic, partition), None)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Each of ``partitions`` (all assigned ones when none given) from its log start offset."""
        self._seek_to(partitions, "earliest")

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Each of ``partitions`` (all assigned ones when none given) from its log end offset."""
        self._seek_to(partitions, "latest")

    def _seek_to(self, partitions: Iterable[TopicPartition], strategy: str) -> None:
        self._check_open()
        chosen = list(partitions) or list(self._fetcher.positions)
        for tp in chosen:
            if tp not in self._fetcher.positions:
                raise ValueError(f"{tp!r} is not assigned to this consumer")
        self._fetcher.reset_positions(chosen, strategy)
        for tp in chosen:
            self._kept_positions.pop(tp, None)

    def position(self, topic: str, partition: int) -> int:
        """The offset of the next record ``poll`` would return for ``topic``/``partition``."""
        self._check_open()
        tp = _check_tp((topic, partition))
        if tp not in self._fetcher.positions:
            raise ValueError(f"{topic}-{partition} is not assigned to this consumer")
        if self._fetcher.positions[tp] is None:
            self._initial_positions([tp])
        return self._fetcher.positions[tp]  # type: ignore[return-value]  # set now by _initial_positions

    def _initial_positions(self, partitions: list[TopicPartition], timeout_ms: int | None = None) -> None:
        if self._member is not None:
            # read_committed: not from offsets a transaction still holds pending (Kafka's consumer
            # asks with require_stable then, KIP-447)
            stable = self._fetcher.isolation_level == READ_COMMITTED
            for tp, offset in self._member.committed(partitions, timeout_ms=timeout_ms,
                                                     require_stable=stable).items():
                kept = self._kept_positions.pop(tp, None)
                if kept is not None and (offset is None or kept > offset):
                    offset = kept
                if offset is not None:
                    self._fetcher.positions[tp] = offset
        self._fetcher.reset_positions([tp for tp in partitions if self._fetcher.positions.get(tp) is None])

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log start offset of each of ``partitions``."""
        self._check_open()
        return {tp: offset for tp, (offset, _) in
                self._fetcher.list_offsets({_check_tp(tp): EARLIEST for tp in partitions}).items()}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log end offset (high watermark) of each of ``partitions``; a ``read_committed``
        consumer's is the last stable offset, where an open transaction holds it back
        (``fetcher.high_watermarks``)."""
        self._check_open()
        starts = self.beginning_offsets(partitions)
        return high_watermarks(self._network, list(starts), starts, self._fetcher.isolation_level)

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]
                          ) -> dict[TopicPartition, tuple[int, int] | None]:
        """For each partition, ``(offset, timestamp)`` of the first record whose timestamp is at or
        after the one given, or None when there is none."""
        self._check_open()
        for tp, timestamp in timestamps.items():
            _check_tp(tp)
            if type(timestamp) is not int or timestamp < 0:
                raise ValueError(f"a timestamp is an int >= 0 (ms), got {timestamp!r} for {tp!r}")
        found = self._fetcher.list_offsets(dict(timestamps))
        return {tp: None if offset < 0 else (offset, timestamp) for tp, (offset, timestamp) in found.items()}

    # --- reading ---------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """The next records of the partitions held (at most ``max.poll.records``), waiting up to
        ``timeout_ms`` for some; an empty list when none came."""
        self._check_open()
        if type(timeout_ms) is not int or timeout_ms < 0:
            raise ValueError(f"timeout_ms must be an int >= 0, got {timeout_ms!r}")
        deadline_ms = self._clock.monotonic_ms() + timeout_ms
        if self._subscription is not None:
            self._maybe_check_metadata()
        if self._subscription is not None and not self._ensure_group(deadline_ms, self._subscription):
            return []  # not in the group yet (its coordinator is unreachable): the next poll goes on
        missing = self._fetcher.missing_positions()
        if missing:
            try:
                self._initial_positions(missing, max(deadline_ms - self._clock.monotonic_ms(), 0)
                                        if self._member is not None else None)
            except Exception as exc:
                if self._member is None or not coordinator_unavailable(exc):
                    raise
                logger.warning("consumer: the committed offsets of group %s: %s", self._member.group_id, exc)
                return []
        if self._member is not None:
            self._member.poll_commits()
        self._maybe_auto_commit()
        while True:
            records = self._fetcher.drain()
            if records:
                self._fetcher.send_fetches()  # fetch ahead while the application works
                return records
            self._fetcher.send_fetches()
            remaining_ms = deadline_ms - self._clock.monotonic_ms()
            if remaining_ms <= 0 and not self._fetcher.has_buffered():
                return []
            if not self._fetcher.positions:
                self._clock.sleep_ms(max(remaining_ms, 0))  # nothing to read: poll is a wait, as in Kafka
                return []
            if not self._fetcher.waiting:
                # No Fetch could be sent (the brokers are unreachable or backing off): wait, as a
                # response would have made it wait, instead of asking again at once (a busy loop)
                self._clock.sleep_ms(min(max(remaining_ms, 0), self.config["retry.backoff.ms"]))
                continue
            self._fetcher.wait_for_responses(max(remaining_ms, 0))
            if self._fetcher.has_buffered():
                continue
            if self._clock.monotonic_ms() >= deadline_ms:
                return []

    def _maybe_check_metadata(self) -> None:
        """Every ``metadata.max.age.ms``, the leader compares the subscribed topics' partition counts
        with those its assignment used, and rejoins (a rebalance) when one changed."""
        now_ms = self._clock.monotonic_ms()
        if now_ms < self._next_metadata_check_ms:
            return
        self._next_metadata_check_ms = now_ms + self.config["metadata.max.age.ms"]
        member = self._require_group("subscribe")  # (a subscribed consumer has one)
        try:
            if member.metadata_changed():
                member.rejoin_needed = True
        except NetworkError as exc:  # no broker answered: the next check asks again
            logger.warning("consumer: the metadata of group %s's topics: %s", member.group_id, exc)

    def _ensure_group(self, deadline_ms: int, topics: list[str]) -> bool:
        """Rejoin the group when needed; whether this member is in the group now. A round the
        coordinator asks to do again (a member id given, a rebalance started meanwhile) follows at
        once, up to ``_PROMPT_ROUNDS`` in a row; after a coordinator that cannot be reached (or more
        such rounds) the next waits, with back-off, while the poll's time (``deadline_ms``) lasts."""
        member = self._require_group("subscribe")  # (a subscribed consumer has one)
        backoff_ms = self.config["retry.backoff.ms"]
        prompt_rounds = 0
        while member.rejoin_needed:
            if prompt_rounds >= _PROMPT_ROUNDS:
                if self._clock.monotonic_ms() + backoff_ms > deadline_ms:
                    return False
                self._clock.sleep_ms(backoff_ms)
                backoff_ms = min(backoff_ms * 2, self.config["retry.backoff.max.ms"])
            self._commit_on_revoke(deadline_ms)
            held = {**self._kept_positions, **self._consumed()}
            try:
                partitions = member.join(topics, self.assignment())
            except Exception as exc:
                if not coordinator_unavailable(exc):
                    raise
                logger.warning("consumer: joining group %s: %s", member.group_id, exc)
                prompt_rounds = _PROMPT_ROUNDS
                continue
            if partitions is None:
                prompt_rounds = prompt_rounds + 1 if member.coordinator_known else _PROMPT_ROUNDS
                continue
            self._fetcher.assign(partitions)
            # Eager rebalancing: positions start again from what the group committed, except
            # that a partition this member kept (same member id: it never left the group) goes
            # on from its own position when that is further.
            same_member = bool(self._assigned_as) and self._assigned_as == member.member_id
            self._kept_positions = {tp: held[tp] for tp in partitions if same_member and tp in held}
            self._assigned_as = member.member_id
            self._fetcher.forget_positions(partitions)
        return True

    # --- offsets ---------------------------------------------------------------------------------

    def _consumed(self) -> dict[TopicPartition, int]:
        return {tp: offset for tp, offset in self._fetcher.positions.items() if offset is not None}

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None, *, timeout_ms: int | None = None) -> None:
        """Store ``offsets`` (by default the positions: every record ``poll`` returned counts as
        processed) as the group's committed offsets; returns when the coordinator has them. A
        coordinator that cannot be reached is looked for again for up to ``timeout_ms`` (default
        ``default.api.timeout.ms``; 0: one try), then its last error is raised (Kafka's
        ``commitSync(offsets, timeout)``)."""
        self._check_open()
        if timeout_ms is not None and (type(timeout_ms) is not int or timeout_ms < 0):
            raise ValueError(f"timeout_ms is an int >= 0 or None, got {timeout_ms!r}")
        member = self._require_group("commit")
        member.commit(self._consumed() if offsets is None else _check_offsets(offsets), timeout_ms=timeout_ms)

    def commit_async(self, offsets: Mapping[TopicPartition, int] | None = None) -> Future[dict[TopicPartition, int]]:
        """Like ``commit`` without waiting: the future gives the offsets once stored (or the error);
        answers are read by ``poll`` and ``close``."""
        self._check_open()
        member = self._require_group("commit_async")
        return member.commit_async(self._consumed() if offsets is None else _check_offsets(offsets))

    def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed offset of ``topic``/``partition``, or None when it has none."""
        self._check_open()
        return self._require_group("committed").committed(
            [_check_tp((topic, partition))],
            require_stable=self._fetcher.isolation_level == READ_COMMITTED)[(topic, partition)]

    def _maybe_auto_commit(self) -> None:
        if not self._auto_commit or self._clock.monotonic_ms() < self._next_auto_commit_ms:
            return
        self._next_auto_commit_ms = self._clock.monotonic_ms() + self.config["auto.commit.interval.ms"]
        consumed = self._consumed()
        if consumed and self._member is not None:  # (auto-commit is a group's)
            self._member.commit_async(consumed)

    def _commit_on_revoke(self, deadline_ms: int | None = None) -> None:
        member = self._member  # (auto-commit is a group's)
        if self._auto_commit and member is not None and self._consumed() and member.generation_id >= 0:
            timeout_ms = None if deadline_ms is None else max(deadline_ms - self._clock.monotonic_ms(), 0)
            try:
                member.commit(self._consumed(), timeout_ms=timeout_ms)
            except (NetworkError, RequestError) as exc:
                logger.warning("consumer: committing before the rebalance failed: %s", exc)

    # --- closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Commit (with auto-commit), leave the group, close the connections. Safe twice."""
        if self._closed:
            return
        try:
            if self._member is not None:
                self._member.poll_commits(wait=True)
                if self._subscription is not None:
                    self._commit_on_revoke()
                    self._member.leave()
                self._member.close()
        finally:
            self._closed = True
            self._fetcher.close()
            self._network.close()


def _check_tp(tp: object) -> TopicPartition:
    if not (isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str) and type(tp[1]) is int and tp[1] >= 0):
        raise TypeError(f"a partition is a (topic, partition) pair, got {tp!r}")
    return tp


def _check_offsets(offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    for tp, offset in offsets.items():
        _check_tp(tp)
        if type(offset) is not int or offset < 0:
            raise ValueError(f"an offset to commit is an int >= 0, got {offset!r} for {tp!r}")
    return dict(offsets)
