"""``GroupAdmin``: Kafka's ``kafka-consumer-groups`` tool over one store, as plain data.

This module owns what ``logstore groups`` and ``logstore read --group`` compute; the CLI only parses
and formats. It covers:
- listing groups, and describing one: its state, generation and protocol; its members with their
  client id, host and partitions (a "consumer" group's assignment bytes decoded with the consumer
  protocol); and, per partition the group has committed or is assigned, the committed offset, the
  log end offset and the lag;
- offset resets planned and executed (Kafka's ``--to-earliest``, ``--to-latest``, ``--to-offset``,
  ``--to-datetime``, ``--shift-by``; an offset outside a log is moved to its nearest end, as
  Kafka's tool does), and group deletion;
- the positions and commits of a reader that reads as a group without joining it.

Every commit is a generation -1 commit through the coordinator, Kafka's admin path: the coordinator
accepts one only while the group has no members (Empty, or unknown), so an admin never moves
offsets under a running consumer. We check that first, so a refusal is a clear NON_EMPTY_GROUP
before anything is read or printed rather than the coordinator's UNKNOWN_MEMBER_ID after.

A ``GroupAdmin`` runs its own ``GroupCoordinator(threaded=False)``: synchronous writes, no timers,
no retention job. It sees a snapshot of the groups as ``__consumer_offsets`` held them when it
started. The members of a group are those of its last group record: a consumer that stopped without
leaving (killed, or a static member) stays listed until its session expires under a coordinator
that runs timers (an in-process ``Consumer``'s, or a server's). Kafka's tool shows the same until
sessions expire. On a read-only view (a store another process holds) listing, describing and
planning work; every write needs the store to itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..clock import parse_iso_ms
from ..errors import LogStoreError, RequestError, UnknownTopicOrPartitionError
from ..manager.log_manager import LogManager
from . import errors
from .config import GroupConfig
from .consumer import GroupRequestError
from .consumer_protocol import decode_assignment
from .coordinator import GroupCoordinator
from .formats import OFFSETS_TOPIC
from .metadata import DEAD, EMPTY
from .results import GroupOverview, GroupSummary, OffsetCommit

TopicPartition = tuple[str, int]

RESET_MODES = ("to-earliest", "to-latest", "to-offset", "to-datetime", "shift-by")
"""The ways ``plan_reset`` computes a new offset (Kafka's option names)."""


@dataclass(frozen=True)
class MemberDescription:
    """A member as ``describe`` shows it. ``partitions`` is None when the assignment is not
    consumer-protocol bytes (another protocol type, or bytes that do not decode)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    partitions: list[TopicPartition] | None
    assignment_bytes: int


@dataclass(frozen=True)
class PartitionLag:
    """One partition of a group: its committed offset (None: none), the log end offset (None: the
    partition is gone or offline), ``lag`` (None when either is unknown) and the member assigned it."""

    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int | None
    lag: int | None
    member_id: str | None


@dataclass(frozen=True)
class GroupDescription:
    """A group as ``describe`` shows it."""

    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    generation_id: int
    leader_id: str
    members: list[MemberDescription]
    partitions: list[PartitionLag]


@dataclass(frozen=True)
class ResetEntry:
    """One line of a reset plan: the committed offset now (None: none) and the one to commit."""

    topic: str
    partition: int
    current_offset: int | None
    new_offset: int


@dataclass(frozen=True)
class StartPosition:
    """Where a reader of a group starts in one partition, and the group's committed offset there."""

    partition: int
    offset: int
    committed_offset: int | None


def parse_topic_partitions(spec: str) -> tuple[str, list[int] | None]:
    """``"T"`` (every partition) or ``"T:0,2"`` (those), as Kafka's tool takes ``--topic``."""
    topic, sep, listed = spec.partition(":")
    if not topic:
        raise ValueError(f"expected TOPIC or TOPIC:P,P..., got {spec!r}")
    if not sep:
        return topic, None
    try:
        partitions = sorted({int(part) for part in listed.split(",")})
    except ValueError:
        raise ValueError(f"expected TOPIC:P,P... with partition numbers, got {spec!r}") from None
    if any(partition < 0 for partition in partitions):
        raise ValueError(f"partition numbers are >= 0, got {spec!r}")
    return topic, partitions


def parse_datetime_ms(text: str) -> int:
    """An ISO 8601 date, or date and time (``2024-05-01T12:00:00``, ``...T12:00:00.250+02:00``,
    ``...Z``) in ms since the epoch (``logstore.clock.parse_iso_ms``). Without a zone it is local
    time, as Kafka's tool reads it."""
    return parse_iso_ms(text)


class GroupAdmin:
    """The groups of ``store`` for an administrator; use it as a context manager (or ``open``).
    It runs a coordinator of its own, so it refuses a store whose groups a coordinator of this
    process already serves (``GroupCoordinator.of``, its consumers')."""

    def __init__(self, store: LogManager, *, config: GroupConfig | Mapping[str, Any] | None = None,
                 owns_store: bool = False) -> None:
        self.store = store
        self.config = config if isinstance(config, GroupConfig) else GroupConfig.from_properties(config)
        self._owns_store = owns_store
        self._coordinator: GroupCoordinator | None = None

    @classmethod
    def open(cls, dirs: Sequence[str], settings: Mapping[str, Any] | None = None, *,
             read_only: bool) -> "GroupAdmin":
        """Open the store in ``dirs`` with ``settings`` (the group keys taken out for the
        coordinator, the rest for the store, which refuses keys it does not know). A writable open
        fails with ``LockedError`` while another process holds the store."""
        config, store_settings = GroupConfig.split(settings)
        store = LogManager(list(dirs), config=store_settings, read_only=read_only)
        try:
            store.startup()
        except BaseException:
            store.close()
            raise
        return cls(store, config=config, owns_store=True)

    @property
    def coordinator(self) -> GroupCoordinator:
        """The coordinator, started on first use (its first write creates ``__consumer_offsets``)."""
        if self._coordinator is None:
            if GroupCoordinator.running(self.store) is not None:
                # Two coordinators over one store would each keep their own groups and write over
                # each other's records: the consumers' coordinator is the one to ask.
                raise RequestError("this store's groups are served by a running coordinator in this process "
                                   "(its consumers'): use that GroupCoordinator, not a GroupAdmin")
            self._coordinator = GroupCoordinator(self.store, config=self.config, threaded=False)
            self._coordinator.startup()
        return self._coordinator

    def close(self) -> None:
        """Stop the coordinator, and close the store if ``open`` opened it."""
        if self._coordinator is not None:
            self._coordinator.shutdown()
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> "GroupAdmin":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- reading ---------------------------------------------------------------------------------

    def list_groups(self) -> list[GroupOverview]:
        """Every group, by group id: (group id, protocol type, "" for none, state)."""
        error, groups = self.coordinator.list_groups()
        if error != errors.NONE:
            raise GroupRequestError("listing the groups", error)
        return sorted(groups, key=lambda group: group.group_id)

    def describe_group(self, group_id: str) -> GroupDescription:
        """State, protocol, members and per-partition lag of ``group_id`` (GROUP_ID_NOT_FOUND for
        a group that does not exist)."""
        summary = self._summary(group_id)
        if summary.error_code != errors.NONE:
            raise GroupRequestError(f"describing group {group_id!r}", summary.error_code)
        if summary.state == DEAD:
            raise GroupRequestError(f"group {group_id!r} does not exist", errors.GROUP_ID_NOT_FOUND)
        members = []
        owner: dict[TopicPartition, str] = {}
        for member in summary.members:
            partitions = self._assigned(summary.protocol_type, member.assignment)
            for key in partitions or ():
                owner[key] = member.member_id
            members.append(MemberDescription(member.member_id, member.group_instance_id, member.client_id,
                                             member.client_host, partitions, len(member.assignment)))
        committed = self.committed(group_id)
        partitions = []
        for topic, partition in sorted(set(committed) | set(owner)):
            offset = committed.get((topic, partition))
            end = self._log_end_offset(topic, partition)
            lag = end - offset if end is not None and offset is not None else None
            partitions.append(PartitionLag(topic, partition, offset, end, lag, owner.get((topic, partition))))
        return GroupDescription(summary.group_id, summary.state, summary.protocol_type, summary.protocol_name,
                                summary.generation_id, summary.leader_id, members, partitions)

    @staticmethod
    def _assigned(protocol_type: str, assignment: bytes) -> list[TopicPartition] | None:
        if protocol_type != "consumer":
            return None  # another protocol's bytes (Kafka Connect, streams...): opaque to us
        if not assignment:
            return []  # not synced yet, or the leader gave it nothing
        try:
            return sorted(decode_assignment(assignment).partitions)
        except (LogStoreError, ValueError, TypeError):
            return None  # a client's bytes that are not ConsumerProtocol: shown as opaque

    # --- the primitives a broker-backed admin replaces (logstore.client.admin) ----------------------

    def _summary(self, group_id: str):
        """The group as DescribeGroups describes it (``results.GroupSummary``)."""
        return self.coordinator.describe_group(group_id)

    def _partition_count(self, topic: str) -> int:
        return self.store.partitions(topic)  # an unknown topic fails here, naming it

    def _log_offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """``(log start offset, log end offset)`` of a partition."""
        log = self.store.get_log(topic, partition)
        return log.log_start_offset, log.log_end_offset

    def _offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        return self.store.get_log(topic, partition).offset_for_timestamp(timestamp_ms)

    def _log_end_offset(self, topic: str, partition: int) -> int | None:
        try:
            return self._log_offsets(topic, partition)[1]
        except LogStoreError:
            return None  # the topic was deleted, or the partition is offline

    def committed(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                  ) -> dict[TopicPartition, int]:
        """The group's committed offsets (of ``partitions`` only, when given; empty for a group
        that does not exist)."""
        return {key: offset for key, (offset, _) in self.committed_entries(group_id, partitions).items()}

    def committed_entries(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                          ) -> dict[TopicPartition, tuple[int, str | None]]:
        """The group's committed offsets with the metadata string committed beside each (of
        ``partitions`` only, when given)."""
        error, offsets = self.coordinator.fetch_offsets(group_id, None)
        if error != errors.NONE:
            raise GroupRequestError(f"fetching the offsets of group {group_id!r}", error)
        wanted = None if partitions is None else set(partitions)
        return {key: (value.offset, value.metadata) for key, value in offsets.items()
                if value is not None and (wanted is None or key in wanted)}

    def require_no_members(self, group_id: str, doing: str, summary: GroupSummary | None = None) -> None:
        """Raise NON_EMPTY_GROUP unless ``group_id`` is Empty or does not exist: a generation -1
        commit is refused while a group has members (their positions are theirs to commit).
        ``doing`` completes "stop its consumers before ...", e.g. "resetting its offsets";
        ``summary`` is the group's when the caller has just described it."""
        if summary is None:
            summary = self._summary(group_id)
        if summary.error_code != errors.NONE:
            raise GroupRequestError(f"describing group {group_id!r}", summary.error_code)
        if summary.state not in (EMPTY, DEAD):
            count = len(summary.members)
            raise GroupRequestError(f"group {group_id!r} has {count} member{'s' if count != 1 else ''} (state "
                                    f"{summary.state}): stop its consumers before {doing}", errors.NON_EMPTY_GROUP)

    # --- resets ----------------------------------------------------------------------------------

    def plan_reset(self, group_id: str, topics: Mapping[str, Iterable[int] | None], mode: str,
                   value: int | None = None) -> list[ResetEntry]:
        """The offsets a reset would commit, per partition of ``topics`` (topic -> partitions, None
        for all). ``mode`` is one of ``RESET_MODES``; ``value`` is the offset, the timestamp (ms) or
        the shift. ``to-offset`` and ``shift-by`` are moved into [log start, log end]; ``to-datetime``
        takes the first offset at or after the time (the log end if none); ``shift-by`` needs a
        committed offset. Refused (NON_EMPTY_GROUP) while the group has members, as Kafka's is."""
        if mode not in RESET_MODES:
            raise ValueError(f"mode must be one of {', '.join(RESET_MODES)}, got {mode!r}")
        if (value is None) != (mode in ("to-earliest", "to-latest")):
            raise ValueError(f"{mode} {'takes no value' if value is not None else 'needs a value'}")
        if not topics:
            raise ValueError("name at least one topic to reset")
        # Bad topics and partitions fail first, before the coordinator starts.
        keys = [(topic, partition) for topic, wanted in sorted(topics.items())
                for partition in self._partitions(topic, wanted)]
        self.require_no_members(group_id, "resetting its offsets")
        committed = self.committed(group_id, keys)
        plan = []
        for topic, partition in keys:
            start, end = self._log_offsets(topic, partition)
            current = committed.get((topic, partition))
            if mode == "to-earliest":
                target = start
            elif mode == "to-latest":
                target = end
            elif mode == "to-offset":
                target = value
            elif mode == "to-datetime":
                found = self._offset_for_timestamp(topic, partition, value)
                target = end if found is None else found
            else:
                if current is None:  # Kafka's tool refuses too: a shift from nothing is a guess
                    raise RequestError(f"cannot shift {topic}-{partition}: group {group_id!r} has no "
                                       f"committed offset there")
                target = current + value
            plan.append(ResetEntry(topic, partition, current, min(max(target, start), end)))
        return plan

    def _partitions(self, topic: str, wanted: Iterable[int] | None) -> list[int]:
        count = self._partition_count(topic)
        partitions = list(range(count)) if wanted is None else sorted(set(wanted))
        for partition in partitions:
            if not 0 <= partition < count:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has no partition {partition} (partitions: 0..{count - 1})")
        return partitions

    def execute_reset(self, group_id: str, plan: Sequence[ResetEntry]) -> None:
        """Commit a plan's new offsets (a generation -1 commit, durable before this returns)."""
        self.commit(group_id, {(entry.topic, entry.partition): entry.new_offset for entry in plan},
                    doing="resetting its offsets")

    def delete_group(self, group_id: str) -> None:
        """Delete an Empty group and its offsets (tombstones in ``__consumer_offsets``); raises
        NON_EMPTY_GROUP for a group with members, GROUP_ID_NOT_FOUND for an unknown one."""
        if OFFSETS_TOPIC not in self.store.topics():
            # No group ever committed here: answer without creating the topic's 50 partitions.
            raise GroupRequestError(f"cannot delete group {group_id!r}: it does not exist", errors.GROUP_ID_NOT_FOUND)
        error = self.coordinator.delete_groups([group_id])[group_id]
        if error == errors.NON_EMPTY_GROUP:
            raise GroupRequestError(f"cannot delete group {group_id!r}: it has members (stop its consumers first)",
                                    error)
        if error == errors.GROUP_ID_NOT_FOUND:
            raise GroupRequestError(f"cannot delete group {group_id!r}: it does not exist", error)
        if error != errors.NONE:
            raise GroupRequestError(f"deleting group {group_id!r}", error)

    def remove_members(self, group_id: str, member_ids: Sequence[str] = ()) -> list[str]:
        """Remove members of a group (all of them when ``member_ids`` is empty) as a LeaveGroup does:
        a static member by its instance id, the others by member id. Meant for a stopped store,
        where the members of the last group record are consumers that stopped without leaving
        (killed, or static) and no coordinator runs to time their sessions out. Returns the member
        ids removed; an unknown member id raises UNKNOWN_MEMBER_ID and removes nothing."""
        summary = self.coordinator.describe_group(group_id)
        if summary.state == DEAD:
            raise GroupRequestError(f"group {group_id!r} does not exist", errors.GROUP_ID_NOT_FOUND)
        known = {member.member_id: member.group_instance_id for member in summary.members}
        chosen = list(member_ids) or list(known)
        unknown = [member_id for member_id in chosen if member_id not in known]
        if unknown:
            raise GroupRequestError(f"group {group_id!r} has no member {unknown[0]!r}", errors.UNKNOWN_MEMBER_ID)
        requests = [("", known[member_id]) if known[member_id] is not None else (member_id, None)
                    for member_id in chosen]
        error, results = self.coordinator.leave_group(group_id, requests)
        failed = [code for code in results if code != errors.NONE]
        if error != errors.NONE or failed:
            raise GroupRequestError(f"removing members of group {group_id!r}", error or failed[0])
        return chosen

    # --- reading as a group ----------------------------------------------------------------------

    def start_positions(self, group_id: str, topic: str, partitions: Iterable[int] | None = None
                        ) -> list[StartPosition]:
        """Where a reader of ``group_id`` starts in each partition of ``topic`` (or ``partitions``):
        the committed offset, or the log start where there is none or the committed offset is no
        longer in the log (a consumer's ``auto.offset.reset=earliest``). Refused (NON_EMPTY_GROUP)
        while the group has members: the reader would commit behind their backs."""
        partitions = self._partitions(topic, partitions)
        self.require_no_members(group_id, "reading as the group")
        committed = self.committed(group_id, [(topic, partition) for partition in partitions])
        positions = []
        for partition in partitions:
            start, end = self._log_offsets(topic, partition)
            offset = committed.get((topic, partition))
            in_log = offset is not None and start <= offset <= end
            positions.append(StartPosition(partition, offset if in_log else start, offset))
        return positions

    def commit(self, group_id: str, offsets: Mapping[TopicPartition, int], *, doing: str | None = None,
               metadata: Mapping[TopicPartition, str] | None = None) -> None:
        """Commit ``offsets`` for ``group_id`` with generation -1 (the admin path), durably. Refused
        (NON_EMPTY_GROUP) while the group has members; any partition the coordinator refuses
        raises ``GroupRequestError`` naming it."""
        if not offsets:
            return
        doing = doing or "committing its offsets"
        self.require_no_members(group_id, doing)
        answers: list[dict[TopicPartition, int]] = []
        commits = {key: OffsetCommit(offset, metadata=(metadata or {}).get(key, "")) for key, offset in offsets.items()}
        self.coordinator.commit_offsets(group_id, -1, "", commits, callback=answers.append)
        # threaded=False: the write and its fsync happened before commit_offsets returned.
        assert len(answers) == 1, "a synchronous coordinator answers a commit at once"
        failed = sorted((key, error) for key, error in answers[0].items() if error != errors.NONE)
        if failed:
            (topic, partition), error = failed[0]
            if error == errors.UNKNOWN_MEMBER_ID:  # the coordinator's word for "the group has members"
                error = errors.NON_EMPTY_GROUP
            raise GroupRequestError(f"group {group_id!r} refused the commit of {topic}-{partition}", error)
