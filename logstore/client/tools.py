"""What the command line does against a broker (``logstore --bootstrap-server``): appending records
with the producer and reading them with the consumer, in the shapes the store's own commands use,
so the output is the same whichever the command talks to.

What it owns:
- ``append_chunks``: records sent chunk by chunk (a chunk: consecutive records for one partition, or
  for partitioning by key), each chunk acknowledged before the next is sent, reported per partition
  as ``AppendSummary`` (first and last offset, count), as ``LogManager.append`` reports them;
- ``read_chunks``: the records of a topic from where the caller says (an offset, the beginning, a
  time, or a consumer group's committed offsets) as ``(partition, [Record])`` chunks, up to the end
  offsets found at the start, or on and on with ``follow``. With a group and no partition it is a
  member of the group (``subscribe``), as kafka-console-consumer is: readers of the same group split
  the partitions, and a rebalance moves them between readers; with a partition (or a start of its
  own) it reads without joining (as ``logstore read --group`` does on a store). Either way it commits
  the position after each chunk the caller took, before it reads on, so what was printed is what is
  committed (and a rebalance, which happens only while reading on, finds nothing printed and not
  committed). A broker restarting is ridden: the reader
  keeps its positions (nothing is read twice), and a commit waits for the coordinator up to
  ``default.api.timeout.ms``; when following, a commit that still could not be made is kept and
  made at the next turn, and one left when reading ends is reported (those records would be read
  again). ``from_end`` starts each partition that many offsets before its end (0: only new records);
- ``partition_offsets``: ``logstore offsets`` (Kafka's ``kafka-get-offsets``): ListOffsets at a time,
  the log start, the log end or the largest timestamp, per partition of the topics a name or a
  regular expression names, as the store's ``logstore.tools.offsets`` gives them;
- ``delete_records``: DeleteRecords at each partition's leader (Kafka's ``kafka-delete-records``);
- ``api_versions``: per broker, each API's version range and the version this client speaks with it
  (Kafka's ``kafka-broker-api-versions``), from the ApiVersions answer every connection starts with;
- ``acl_documents``, ``user_documents``: ACLs and SCRAM users as ``logstore acls``/``users --format
  json`` print them, the same whether they come from a store's files or a broker's admin APIs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from ..records.decoder import Record
from ..server.protocol import errors as kafka_errors
from ..server.protocol.messages import APIS
from ..tools.offsets import (MAX_TIMESTAMP, PartitionOffset, check_deletable, match_topics, select_partitions,
                             topic_counts)
from .admin import BrokerAdmin, BrokerGroupAdmin
from .consumer import Consumer
from .errors import BrokerResponseError, NetworkError
from .fetcher import list_offsets
from .group_member import coordinator_unavailable
from .producer import Producer
from .security import ClientSecurity

logger = logging.getLogger(__name__)

_POLL_MS = 500
# How long a reader's commits look for a coordinator that cannot be reached. While following, a
# commit that fails is made at the next turn, so one try is enough and the reading goes on; the
# last commit, when the reading ends (often on Ctrl-C), waits a little, then is reported as not
# made (default.api.timeout.ms, a minute, would keep a user's Ctrl-C waiting that long).
_FOLLOW_COMMIT_TIMEOUT_MS = 0
_LAST_COMMIT_TIMEOUT_MS = 5_000
MAX_TIMESTAMP_VERSION = 7  # ListOffsets' first version that knows max-timestamp (KIP-734)


@dataclass(frozen=True)
class AppendSummary:
    """What one chunk put in one partition (the shape of ``LogManager.append``'s ``AppendInfo``)."""

    first_offset: int
    last_offset: int
    record_count: int


def append_chunks(bootstrap_servers: str, topic: str, chunks: Iterable[tuple[int | None, Sequence[Record]]], *,
                  acks: str = "1", timeout_ms: int = 30_000, client_config: dict | None = None
                  ) -> Iterator[dict[int, AppendSummary]]:
    """Send each ``(partition or None, records)`` chunk and yield, once the broker acknowledged it,
    what it put in each partition. ``acks`` is ``"1"`` or ``"all"``; ``client_config`` the client
    settings of ``--command-config`` (security)."""
    with Producer(client_config, bootstrap_servers=bootstrap_servers, acks=acks, linger_ms=0, client_id="logstore-cli",
                  request_timeout_ms=max(timeout_ms, 1000)) as producer:
        for partition, records in chunks:
            futures = [producer.send(topic, record.value, key=record.key, headers=record.headers,
                                     partition=partition, timestamp_ms=record.timestamp_ms) for record in records]
            producer.flush(timeout_ms / 1000 + 30)
            placed: dict[int, list[int]] = {}
            for future in futures:
                metadata = future.result(0)
                placed.setdefault(metadata.partition, []).append(metadata.offset)
            yield {p: AppendSummary(min(offsets), max(offsets), len(offsets)) for p, offsets in placed.items()}


def read_chunks(bootstrap_servers: str, topic: str, *, partition: int | None = None, offset: int | None = None,
                from_timestamp_ms: int | None = None, from_end: int | None = None, follow: bool = False,
                group: str | None = None, max_records: int | None = None, client_config: dict | None = None,
                stop_when: Callable[[], bool] | None = None) -> Iterator[tuple[int, list[Record]]]:
    """``(partition, records)`` chunks of ``topic`` (or its ``partition``) from ``offset`` (needs
    ``partition``), the first record at or after ``from_timestamp_ms``, ``from_end`` offsets before
    each partition's end (not below its start), the group's committed offsets, or else the log
    start; up to the end found at the start, unless ``follow``. With
    ``group``, a chunk is committed when the caller comes back for the next one; close the
    iterator (``contextlib.closing``) to learn of a commit that could not be made. A group member
    also ends (after committing what was taken) at the first turn ``stop_when()`` is true."""
    if group is not None and partition is None and offset is None and from_timestamp_ms is None and from_end is None:
        yield from _read_as_member(bootstrap_servers, topic, group, follow=follow, max_records=max_records,
                                   client_config=client_config, stop_when=stop_when)
        return
    remaining = max_records if max_records is not None else -1
    with BrokerGroupAdmin.connect(bootstrap_servers, client_id="logstore-cli",
                                  security=ClientSecurity.from_config(client_config or {})) as groups, \
            Consumer(client_config, bootstrap_servers=bootstrap_servers, client_id="logstore-cli", enable_auto_commit=False,
                     auto_offset_reset="earliest") as consumer:
        admin: BrokerAdmin = groups.admin
        partitions = [partition] if partition is not None else list(range(admin.partitions(topic)))
        if partition is not None and partition >= admin.partitions(topic):
            raise ValueError(f"topic {topic!r} has no partition {partition}")
        consumer.assign([(topic, p) for p in partitions])
        if group is not None:
            starts = {start.partition: start.offset for start in groups.start_positions(group, topic, partitions)}
        elif offset is not None:
            starts = {partition: offset}
        elif from_end is not None:
            begins = consumer.beginning_offsets([(topic, p) for p in partitions])
            ends = consumer.end_offsets([(topic, p) for p in partitions])
            starts = {p: max(begins[(topic, p)], ends[(topic, p)] - from_end) for p in partitions}
        elif from_timestamp_ms is not None:
            found = consumer.offsets_for_times({(topic, p): from_timestamp_ms for p in partitions})
            ends = consumer.end_offsets([(topic, p) for p in partitions])
            starts = {p: ends[(topic, p)] if found[(topic, p)] is None else found[(topic, p)][0] for p in partitions}
        else:
            starts = {p: start for (_, p), start in consumer.beginning_offsets([(topic, p) for p in partitions]).items()}
        for p, start in starts.items():
            consumer.seek(topic, p, start)
        ends = {p: end for (_, p), end in consumer.end_offsets([(topic, p) for p in partitions]).items()}
        commits = None if group is None else _ReaderCommits(
            group, topic, follow, lambda offsets, timeout_ms: groups.commit(
                group, offsets, doing="reading as the group", timeout_ms=timeout_ms))
        try:
            while remaining != 0:
                if commits is not None:
                    commits.commit()
                if not follow and all(consumer.position(topic, p) >= ends[p] for p in partitions):
                    return
                records = consumer.poll(_POLL_MS)
                for p, chunk in _by_partition(records):
                    if remaining > 0:
                        chunk = chunk[:remaining]
                        remaining -= len(chunk)
                    if not chunk:
                        continue
                    yield p, chunk
                    if commits is not None:  # the caller printed the chunk: commit past it
                        commits.taken(p, chunk[-1].offset + 1)
                    if remaining == 0:
                        return
        finally:
            if commits is not None:
                commits.finish()


def _by_partition(records) -> list[tuple[int, list[Record]]]:
    """A poll's consumer records as ``(partition, [Record])`` chunks, by partition."""
    by_partition: dict[int, list[Record]] = {}
    for record in records:
        by_partition.setdefault(record.partition, []).append(
            Record(record.key, record.value, record.headers, record.timestamp_ms, record.offset))
    return sorted(by_partition.items())


class _ReaderCommits:
    """The offsets a reader of a group has handed out and not committed yet, and their commits:
    one each time the caller comes back for the next chunk. While following, a commit the
    coordinator cannot take is kept for the next turn after one try (said once per outage, so the
    reading goes on); the last one, when the reading ends, waits a little for the coordinator and
    is reported, naming the offsets, when it cannot be made, since those records will be read again."""

    def __init__(self, group: str, topic: str, follow: bool,
                 send: Callable[[dict[tuple[str, int], int], int | None], None]) -> None:
        self.group, self.topic, self.follow = group, topic, follow
        self._send = send  # send(offsets, timeout_ms): commits them, or raises
        self.uncommitted: dict[int, int] = {}  # partition -> the offset after the last record taken
        self._kept = False  # commits are being kept for a coordinator that cannot be reached
        self._raised = False  # a commit failed for good: its error is the caller's already

    def taken(self, partition: int, next_offset: int) -> None:
        """The caller is done with the records before ``next_offset``: commit past them."""
        self.uncommitted[partition] = next_offset
        self.commit()

    def commit(self) -> None:
        if not self.uncommitted:
            return
        offsets = {(self.topic, p): offset for p, offset in self.uncommitted.items()}
        try:
            self._send(offsets, _FOLLOW_COMMIT_TIMEOUT_MS if self.follow else None)
        except Exception as exc:
            if not coordinator_unavailable(exc):
                self._raised = True
                raise  # a refusal (a group with members, no access): its own error says it
            if not self.follow:  # the reading ends here: those records will be read again
                self._raised = True
                raise _not_committed(self.group, self.topic, self.uncommitted, exc) from exc
            log = logger.info if self._kept else logger.warning
            log("group %s: committing %s later: %s", self.group, self.uncommitted, exc)
            self._kept = True
            return
        if self._kept:
            logger.info("group %s: committed %s: the coordinator is back", self.group, self.uncommitted)
        self._kept = False
        self.uncommitted.clear()

    def finish(self) -> None:
        """The last commit, when the reading ends; a second Ctrl-C gives it up (reported too)."""
        if not self.uncommitted or self._raised:
            return
        offsets = {(self.topic, p): offset for p, offset in self.uncommitted.items()}
        try:
            self._send(offsets, _LAST_COMMIT_TIMEOUT_MS)
        except (Exception, KeyboardInterrupt) as exc:
            raise _not_committed(self.group, self.topic, self.uncommitted, exc) from exc
        self.uncommitted.clear()


def _not_committed(group: str, topic: str, uncommitted: dict[int, int], exc: BaseException) -> NetworkError:
    """The error for offsets still not committed when reading ends: those records will be read again."""
    reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else exc
    return NetworkError(f"group {group}: the offsets after the records printed ("
                        f"{', '.join(f'{topic}-{p}: {o}' for p, o in sorted(uncommitted.items()))}) "
                        f"could not be committed, so they will be read again: {reason}")


def _read_as_member(bootstrap_servers: str, topic: str, group: str, *, follow: bool, max_records: int | None,
                    client_config: dict | None, stop_when: Callable[[], bool] | None = None
                    ) -> Iterator[tuple[int, list[Record]]]:
    """``read_chunks`` as a member of ``group``: the partitions the group assigns, from its committed
    offsets (the log start where it has none). Without ``follow`` it stops once every partition it
    holds is read up to the end it had when the partition was assigned (or at once when the group
    gives it none)."""
    remaining = max_records if max_records is not None else -1
    with Consumer(client_config, bootstrap_servers=bootstrap_servers, client_id="logstore-cli", group_id=group,
                  enable_auto_commit=False, auto_offset_reset="earliest") as consumer:
        consumer.subscribe([topic])
        ends: dict[int, int] = {}  # partition -> its end offset when first assigned (without follow)
        commits = _ReaderCommits(group, topic, follow,
                                 lambda offsets, timeout_ms: consumer.commit(offsets, timeout_ms=timeout_ms))
        try:
            while remaining != 0:
                commits.commit()
                if stop_when is not None and stop_when():
                    return
                records = consumer.poll(_POLL_MS)
                held = sorted(p for t, p in consumer.assignment() if t == topic)
                if not follow:
                    new = [p for p in held if p not in ends]
                    if new:
                        ends.update({p: end for (_, p), end in consumer.end_offsets([(topic, p) for p in new]).items()})
                    if not records and consumer.generation >= 0 and all(
                            consumer.position(topic, p) >= ends[p] for p in held):
                        return
                for p, chunk in _by_partition(records):
                    if remaining > 0:
                        chunk = chunk[:remaining]
                        remaining -= len(chunk)
                    if not chunk:
                        continue
                    yield p, chunk
                    commits.taken(p, chunk[-1].offset + 1)
                    if remaining == 0:
                        return
        finally:
            commits.finish()


# --- offsets, deleting records, API versions -----------------------------------------------------


def partition_offsets(admin: BrokerAdmin, topic: str | None, timestamp: int,
                      partitions: Sequence[int] | None = None, exclude_internal: bool = False) -> list[PartitionOffset]:
    """The offset ``timestamp`` (``logstore.tools.offsets.parse_time``: -2 the log start, -1 the
    end, -3 the first record with the largest timestamp, else a time in ms) names in each
    partition of the topics ``topic`` names (a name or a regular expression,
    ``logstore.tools.offsets.match_topics``; default: every topic), by ListOffsets at each leader,
    as Kafka's ``kafka-get-offsets`` asks for it. -3 with a leader below ListOffsets v7 (Kafka 3.0)
    raises ``BrokerResponseError`` UNSUPPORTED_VERSION before anything is asked."""
    counts = topic_counts(match_topics(topic, admin.topics(), exclude_internal), admin.partitions)
    chosen = select_partitions(counts, partitions)
    if timestamp == MAX_TIMESTAMP and chosen:
        _require_max_timestamp(admin, chosen)
    found = list_offsets(admin.network, {tp: timestamp for tp in chosen}) if chosen else {}
    # -1 answers a time after every record's timestamp, and -3 in a partition without records
    return [PartitionOffset(name, p, None if found[(name, p)][0] < 0 else found[(name, p)][0])
            for name, p in chosen]


def _require_max_timestamp(admin: BrokerAdmin, chosen: Sequence[tuple[str, int]]) -> None:
    """Refuse max-timestamp with a leader below ListOffsets v7, as Kafka's admin client does: such
    a broker does not know -3 and could take it for a time."""
    network = admin.network
    network.refresh_metadata(sorted({name for name, _ in chosen}))
    for node_id in sorted({network.leader_for(name, p) for name, p in chosen}):
        connection = network.connection(node_id)
        version = connection.version_of("ListOffsets")
        if version < MAX_TIMESTAMP_VERSION:
            name = kafka_errors.NAMES[kafka_errors.UNSUPPORTED_VERSION]
            raise BrokerResponseError(f"{connection.host}:{connection.port} speaks ListOffsets up to v{version}: "
                                      f"max-timestamp needs v{MAX_TIMESTAMP_VERSION} (Kafka 3.0 or later): {name}",
                                      kafka_errors.UNSUPPORTED_VERSION, name)


def delete_records(admin: BrokerAdmin, wanted: Mapping[tuple[str, int], int], timeout_ms: int = 30_000
                   ) -> dict[tuple[str, int], int]:
    """DeleteRecords below each offset of ``wanted`` (-1: the high watermark), at each partition's
    leader; returns each partition's low watermark (log start offset) afterwards. A partition the
    broker refuses raises ``BrokerResponseError`` naming it and Kafka's error."""
    check_deletable(wanted)
    for topic in sorted({topic for topic, _ in wanted}):
        count = admin.partitions(topic)  # an unknown topic fails here, naming it
        missing = sorted(p for t, p in wanted if t == topic and p >= count)
        if missing:
            raise ValueError(f"topic {topic!r} has no partition {missing[0]} (partitions: 0..{count - 1})")
    network = admin.network
    network.refresh_metadata(sorted({topic for topic, _ in wanted}))
    by_leader: dict[int, dict[str, list]] = {}
    for (topic, p), offset in sorted(wanted.items()):
        by_leader.setdefault(network.leader_for(topic, p), {}).setdefault(topic, []).append(
            {"partition_index": p, "offset": offset})
    low_watermarks: dict[tuple[str, int], int] = {}
    for leader, topics in by_leader.items():
        body = network.connection(leader).request("DeleteRecords", {
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
            "timeout_ms": timeout_ms})
        for topic in body["topics"]:
            for result in topic["partitions"]:
                code = result["error_code"]
                if code:
                    name = kafka_errors.NAMES.get(code, f"error {code}")
                    raise BrokerResponseError(f"deleting records of {topic['name']}-{result['partition_index']}: "
                                              f"{name}", code, name)
                low_watermarks[(topic["name"], result["partition_index"])] = result["low_watermark"]
    missing = sorted(set(wanted) - set(low_watermarks))
    if missing:
        raise NetworkError(f"DeleteRecords answered nothing for {missing[0][0]}-{missing[0][1]}")
    return low_watermarks


@dataclass(frozen=True)
class ApiVersionRow:
    """One API of one broker: the broker's range (None: it does not speak it), this client's range
    (None: unknown to it) and the version the two would speak (None: no common one)."""

    api_key: int
    name: str
    broker: tuple[int, int] | None
    client: tuple[int, int] | None
    usable: int | None


@dataclass(frozen=True)
class BrokerApiVersions:
    """What one broker of the cluster offers."""

    node_id: int
    host: str
    port: int
    rack: str | None
    apis: list[ApiVersionRow]


def api_versions(admin: BrokerAdmin) -> list[BrokerApiVersions]:
    """For every broker of the cluster (by node id): each API it or this client knows, its range on
    both sides and the version a request of this client uses with it."""
    network = admin.network
    body = network.request_any("Metadata", {"topics": [], "allow_auto_topic_creation": False})
    network.refresh_metadata([])
    brokers = []
    for broker in sorted(body["brokers"], key=lambda entry: entry["node_id"]):
        connection = network.connection(broker["node_id"])
        offered = connection.broker_versions
        rows = []
        for key in sorted(set(offered) | set(APIS)):
            spec = APIS.get(key)
            rows.append(ApiVersionRow(key, spec.name if spec else "UNKNOWN", offered.get(key),
                                      spec.versions if spec else None, connection.versions.get(key)))
        brokers.append(BrokerApiVersions(broker["node_id"], broker["host"], broker["port"], broker.get("rack"), rows))
    return brokers


ACL_FIELDS = ("resource_type", "pattern_type", "resource_name", "principal", "host", "operation", "permission")
"""The fields of an ACL in JSON, Kafka's names for the values (``AclBinding.row``'s order)."""


def acl_documents(bindings: Iterable) -> list[dict[str, str]]:
    """Each ``AclBinding`` as ``{"resource_type", "pattern_type", "resource_name", "principal",
    "host", "operation", "permission"}``, every value a string in Kafka's words (Topic, LITERAL,
    Read, ALLOW...)."""
    return [dict(zip(ACL_FIELDS, binding.row())) for binding in bindings]


def user_documents(users: Iterable[tuple[str, str, int]], max_iterations: int) -> list[dict]:
    """Each SCRAM credential ``(user, mechanism, iterations)`` as ``{"user", "mechanism",
    "iterations", "usable"}``; ``usable`` is false for one of more than ``max_iterations``
    iterations, which a login refuses."""
    return [{"user": user, "mechanism": mechanism, "iterations": iterations, "usable": iterations <= max_iterations}
            for user, mechanism, iterations in users]
