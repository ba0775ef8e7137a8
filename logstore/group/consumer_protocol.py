"""The consumer protocol: the bytes consumers exchange through the coordinator, and the assignors.

What it owns:
- ``Subscription`` and ``Assignment`` and their bytes, Kafka's ``ConsumerProtocolSubscription`` and
  ``ConsumerProtocolAssignment`` schemas in the classic encoding (``formats.Reader``/``Writer``).
  A consumer puts a subscription in JoinGroup's protocol metadata and the leader puts an assignment
  per member in SyncGroup; the coordinator treats both as opaque, except that it reads the topics of
  a "consumer" group's subscriptions (offset expiry, OffsetDelete):

  ==============  ===================================================================================
  subscription    v0: version int16, topics [string], userData nullable bytes
                  v1: + ownedPartitions [topic string, partitions [int32]] (KIP-429, cooperative)
                  v2: + generationId int32 (-1 unknown)
                  v3: + rackId nullable string (KIP-881)
  assignment      v0-v3: version int16, assignedPartitions [topic string, partitions [int32]],
                  userData nullable bytes
  ==============  ===================================================================================

  Decoding follows Kafka's forward-compatibility rule (stated in both schema files and applied by
  ``ConsumerProtocol.deserialize*``): a version above the newest we know is read with the newest
  layout, because later versions may only append fields; bytes after the fields are ignored, as
  Kafka's generated readers ignore them. Encoding at a version drops the fields it lacks, as Kafka
  does for these "ignorable" fields.
- the eager assignors every consumer client ships, Kafka's algorithms (``RangeAssignor``,
  ``RoundRobinAssignor``): ``range_assign``, ``round_robin_assign`` and ``ASSIGNORS`` by protocol
  name, for a group leader of our own (the in-process consumer). The coordinator never assigns.

Bad bytes raise ``CorruptRecordError``; values of the wrong type or range raise ``TypeError`` or
``ValueError`` naming them. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .formats import Reader, Writer

__all__ = [
    "ASSIGNORS", "Assignment", "Subscription", "decode_assignment", "decode_subscription", "encode_assignment",
    "encode_subscription", "range_assign", "round_robin_assign",
]

SUBSCRIPTION_VERSION = 3
"""The newest ConsumerProtocolSubscription version we know (a newer one is read as this one)."""

ASSIGNMENT_VERSION = 3
"""The newest ConsumerProtocolAssignment version we know (all versions share one layout)."""


def _topic_tuple(topics, field: str) -> tuple[str, ...]:
    # A str is iterable: tuple("orders") would silently subscribe to six one-letter topics.
    if isinstance(topics, (str, bytes)) or not isinstance(topics, Iterable):
        raise TypeError(f"{field} must be a list of topic names, got {topics!r}")
    return tuple(topics)


def _pair_tuple(pairs, field: str) -> tuple[tuple[str, int], ...]:
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise TypeError(f"{field} must be a list of (topic, partition), got {pairs!r}")
    result = []
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"{field} must hold (topic, partition) pairs, got {pair!r}")
        result.append(tuple(pair))
    return tuple(result)


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a consumer sends in JoinGroup: the topics it wants, opaque ``user_data`` for its assignor,
    the partitions it owns now and the generation it owned them in (cooperative rebalancing), and its
    rack. Sequences are kept as tuples (any iterable is accepted), so values compare equal whatever
    built them; ``owned_partitions`` is a flat list of ``(topic, partition)``."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[tuple[str, int], ...] = ()
    generation_id: int = -1
    rack_id: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", _topic_tuple(self.topics, "topics"))
        object.__setattr__(self, "owned_partitions", _pair_tuple(self.owned_partitions, "owned_partitions"))


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the leader gives one member in SyncGroup: ``partitions`` as a flat list of
    ``(topic, partition)`` (kept as a tuple) and opaque ``user_data``."""

    partitions: tuple[tuple[str, int], ...]
    user_data: bytes | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", _pair_tuple(self.partitions, "partitions"))


# --- bytes ----------------------------------------------------------------------------------------


def _check_version(version, newest: int, what: str) -> None:
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"{what} version must be an int, got {version!r}")
    if not 0 <= version <= newest:
        raise ValueError(f"{what} version {version} is not one we write (0-{newest})")


def _write_topic_partitions(out: Writer, field: str, pairs: tuple[tuple[str, int], ...]) -> None:
    # The wire groups partitions by topic; topics keep the order they first appear in, partitions
    # their order (Kafka groups through a HashMap, so no reader may depend on either order).
    by_topic: dict[str, list[int]] = {}
    for topic, partition in pairs:
        if not isinstance(topic, str):
            raise TypeError(f"{field}: topic must be a str, got {topic!r}")
        by_topic.setdefault(topic, []).append(partition)
    out.array(field, len(by_topic))
    for topic, partitions in by_topic.items():
        out.string(field + " topic", topic)
        out.array(field + " partitions", len(partitions))
        for partition in partitions:
            out.int32(field + " partition", partition)


def _read_topic_partitions(reader: Reader, field: str) -> list[tuple[str, int]]:
    pairs = []
    # Each element is at least an empty topic (2 bytes) and an empty partition array (4 bytes).
    for _ in range(reader.array(field, 6)):
        topic = reader.string(field + " topic")
        pairs.extend((topic, reader.int32(field + " partition")) for _ in range(reader.array(field + " partitions", 4)))
    return pairs


def _read_version(reader: Reader) -> int:
    version = reader.int16("version")
    if version < 0:
        raise reader.fail(f"negative version {version}")
    return version


def encode_subscription(sub: Subscription, version: int = 1) -> bytes:
    """The bytes of ``sub`` at ``version`` (0-3); fields the version lacks are left out."""
    if not isinstance(sub, Subscription):
        raise TypeError(f"sub must be a Subscription, got {sub!r}")
    _check_version(version, SUBSCRIPTION_VERSION, "subscription")
    out = Writer()
    out.int16("version", version)
    out.array("topics", len(sub.topics))
    for topic in sub.topics:
        out.string("topic", topic)
    out.bytes_("user_data", sub.user_data, nullable=True)
    if version >= 1:
        _write_topic_partitions(out, "owned_partitions", sub.owned_partitions)
    if version >= 2:
        out.int32("generation_id", sub.generation_id)
    if version >= 3:
        out.string("rack_id", sub.rack_id, nullable=True)
    return out.getvalue()


def decode_subscription(data) -> Subscription:
    """Decode subscription bytes of any version; a version above 3 is read as version 3."""
    reader = Reader(data, "consumer protocol subscription")
    version = _read_version(reader)
    topics = [reader.string("topic") for _ in range(reader.array("topics", 2))]
    user_data = reader.bytes_("user_data", nullable=True)
    owned = _read_topic_partitions(reader, "owned_partitions") if version >= 1 else ()
    generation_id = reader.int32("generation_id") if version >= 2 else -1
    rack_id = reader.string("rack_id", nullable=True) if version >= 3 else None
    return Subscription(topics, user_data, owned, generation_id, rack_id)


def encode_assignment(assignment: Assignment, version: int = 1) -> bytes:
    """The bytes of ``assignment`` at ``version`` (0-3; the layout is the same, only the number differs)."""
    if not isinstance(assignment, Assignment):
        raise TypeError(f"assignment must be an Assignment, got {assignment!r}")
    _check_version(version, ASSIGNMENT_VERSION, "assignment")
    out = Writer()
    out.int16("version", version)
    _write_topic_partitions(out, "assigned_partitions", assignment.partitions)
    out.bytes_("user_data", assignment.user_data, nullable=True)
    return out.getvalue()


def decode_assignment(data) -> Assignment:
    """Decode assignment bytes of any version (newer versions are read as version 3)."""
    reader = Reader(data, "consumer protocol assignment")
    _read_version(reader)
    partitions = _read_topic_partitions(reader, "assigned_partitions")
    return Assignment(partitions, reader.bytes_("user_data", nullable=True))


# --- assignors ------------------------------------------------------------------------------------


def _java_order(text: str) -> bytes:
    # Java compares strings by UTF-16 code unit; big-endian UTF-16 bytes sort the same way. Python's
    # code point order differs only for characters above U+FFFF against U+E000-U+FFFF, but a leader of
    # ours must hand out exactly what a Java leader would.
    return text.encode("utf-16-be", "surrogatepass")


def _check_assignor_input(subscriptions, partitions_per_topic, instance_ids) -> None:
    if not isinstance(subscriptions, Mapping):
        raise TypeError(f"subscriptions must map member ids to Subscription, got {subscriptions!r}")
    for member_id, sub in subscriptions.items():
        if not isinstance(member_id, str) or not isinstance(sub, Subscription):
            raise TypeError(f"subscriptions must map member ids to Subscription, got {member_id!r}: {sub!r}")
    if not isinstance(partitions_per_topic, Mapping):
        raise TypeError(f"partitions_per_topic must map topics to counts, got {partitions_per_topic!r}")
    for topic, count in partitions_per_topic.items():
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"partitions_per_topic[{topic!r}] must be an int, got {count!r}")
        if count < 0:
            raise ValueError(f"partitions_per_topic[{topic!r}] is negative: {count}")
    if instance_ids is not None and not isinstance(instance_ids, Mapping):
        raise TypeError(f"instance_ids must map member ids to group instance ids, got {instance_ids!r}")


def _member_sort_key(instance_ids: Mapping[str, str | None] | None):
    """Kafka's ``MemberInfo`` order: static members (with a group.instance.id) first, by instance id,
    so a restarted static member (new member id, same instance id) gets its partitions back; then
    dynamic members by member id."""
    def key(member_id: str):
        instance_id = instance_ids.get(member_id) if instance_ids else None
        if instance_id is not None:
            return (0, _java_order(instance_id), _java_order(member_id))
        return (1, _java_order(member_id), b"")
    return key


def _partition_sort_key(pair: tuple[str, int]):
    return (_java_order(pair[0]), pair[1])


def range_assign(subscriptions: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int], *,
                 instance_ids: Mapping[str, str | None] | None = None) -> dict[str, list[tuple[str, int]]]:
    """Kafka's range assignor. Topic by topic, the members subscribed to it are sorted (see
    ``instance_ids``) and its partitions split into contiguous ranges in that order; the first
    ``partitions % members`` members get one extra. Topics missing from ``partitions_per_topic`` are
    skipped (no metadata), as Kafka does.

    ``instance_ids`` optionally maps member ids to group instance ids: static members then sort
    first, by instance id, as in Kafka. Every member is in the result, each list sorted by
    (topic, partition)."""
    _check_assignor_input(subscriptions, partitions_per_topic, instance_ids)
    order = _member_sort_key(instance_ids)
    assignment: dict[str, list[tuple[str, int]]] = {member_id: [] for member_id in subscriptions}
    subscribers: dict[str, list[str]] = {}
    for member_id, sub in subscriptions.items():
        for topic in set(sub.topics):  # a topic named twice is still one subscription
            subscribers.setdefault(topic, []).append(member_id)
    for topic, members in subscribers.items():
        count = partitions_per_topic.get(topic)
        if count is None:
            continue
        members.sort(key=order)
        per_member, extra = divmod(count, len(members))
        for i, member_id in enumerate(members):
            start = per_member * i + min(i, extra)
            length = per_member + (1 if i < extra else 0)
            assignment[member_id].extend((topic, partition) for partition in range(start, start + length))
    for partitions in assignment.values():
        partitions.sort(key=_partition_sort_key)
    return assignment


def round_robin_assign(subscriptions: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int], *,
                       instance_ids: Mapping[str, str | None] | None = None) -> dict[str, list[tuple[str, int]]]:
    """Kafka's round-robin assignor. Every partition of every subscribed topic, sorted by (topic,
    partition), goes to the next member in a circle of the sorted members (see ``range_assign`` for
    the order and ``instance_ids``), skipping members not subscribed to its topic. With identical
    subscriptions the members' counts differ by at most one. Every member is in the result."""
    _check_assignor_input(subscriptions, partitions_per_topic, instance_ids)
    members = sorted(subscriptions, key=_member_sort_key(instance_ids))
    subscribed = {member_id: frozenset(subscriptions[member_id].topics) for member_id in members}
    topics = sorted({topic for topics in subscribed.values() for topic in topics if topic in partitions_per_topic},
                    key=_java_order)
    assignment: dict[str, list[tuple[str, int]]] = {member_id: [] for member_id in subscriptions}
    cursor = 0
    for topic in topics:
        for partition in range(partitions_per_topic[topic]):
            # Terminates: the topic came from some member's subscription.
            while topic not in subscribed[members[cursor]]:
                cursor = (cursor + 1) % len(members)
            assignment[members[cursor]].append((topic, partition))
            cursor = (cursor + 1) % len(members)
    return assignment


ASSIGNORS = {"range": range_assign, "roundrobin": round_robin_assign}
"""The assignors by the protocol name consumers put in JoinGroup."""
