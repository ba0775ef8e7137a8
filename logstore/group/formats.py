"""The records of the internal topic ``__consumer_offsets`` and the group-to-partition mapping.

What it owns:
- ``OFFSETS_TOPIC`` and ``partition_for``: which partition of the topic holds a group's records
  (``abs(Java String.hashCode) % partitions``, as Kafka's GroupMetadataManager computes it);
- the record keys and values, byte for byte Kafka's layouts (docs/FORMAT.md §4),
  so a dump of our topic reads like Kafka's and Kafka's tools could read ours:

  ========================  =========  ====================================================
  record                    versions   fields after the int16 version
  ========================  =========  ====================================================
  offset commit key         0, 1       group string, topic string, partition int32
  group metadata key        2          group string
  offset commit value       0          offset int64, metadata string, commitTimestamp int64
                            1          v0 + expireTimestamp int64
                            2          as v0
                            3          offset, leaderEpoch int32, metadata, commitTimestamp
  group metadata value      0..3       protocolType string, generation int32, protocol and
                                       leader nullable strings, currentStateTimestamp int64
                                       (v2+), members [memberId, groupInstanceId (v3+),
                                       clientId, clientHost, rebalanceTimeout int32 (v1+),
                                       sessionTimeout int32, subscription bytes, assignment
                                       bytes]
  ========================  =========  ====================================================

  We write key v1 / v2, offset value v3 (v1 when an expire timestamp is set: only v1 has the
  field) and group value v3, which is what Kafka 3.7 writes; we read every version above.
  A tombstone (a null value) deletes the key; the value decoders map ``None`` to ``None``;
- ``Reader`` and ``Writer``: Kafka's classic non-flexible primitive types (int16/32/64, string =
  int16 length + UTF-8, nullable string with length -1, bytes = int32 length, array = int32
  count), shared with ``consumer_protocol``, which speaks the same encoding.

Bad bytes raise ``CorruptRecordError`` saying which record, which field and what was wrong. A value
of the wrong type or range given to an encoder raises ``TypeError`` or ``ValueError`` naming the field
and the value: that is a bug in the caller, not bad data. Standard library only.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

from ..errors import CorruptRecordError

__all__ = [
    "OFFSETS_TOPIC", "GroupKey", "GroupValue", "MemberValue", "OffsetKey", "OffsetValue", "Reader", "Writer",
    "decode_group_value", "decode_key", "decode_offset_value", "encode_group_key", "encode_group_value",
    "encode_key", "encode_offset_key", "encode_offset_value", "encode_offset_value_fields", "java_string_hash",
    "offset_key_prefix", "partition_for", "coordinator_partition", "utf8",
]

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
"""The compacted internal topic that holds committed offsets and group metadata."""

DEFAULT_PARTITIONS = 50
"""Kafka's ``offsets.topic.num.partitions`` default."""

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_EXPIRE_VERSION = 1
GROUP_VALUE_VERSION = 3

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UNIT = struct.Struct(">H")
_BITS = {_INT8: 8, _INT16: 16, _INT32: 32, _INT64: 64}
_MAX_STRING_BYTES = 0x7FFF  # Kafka's strings, compact ones too, hold at most 32767 bytes
# The hot records (one per partition of every commit) packed in one call each; anything these
# cannot pack (a wrong type, a value out of range) goes through ``Writer``, which names the field.
_OFFSET_KEY_PARTITION = struct.Struct(">i")
_OFFSET_VALUE_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_STRING_LENGTH = struct.Struct(">hh")  # version (or a length) and a length


# --- the partition of a group ---------------------------------------------------------------------


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: ``h = 31*h + c`` over the UTF-16 code units of ``text``, with 32-bit
    signed overflow. A character outside the BMP counts as its two surrogates, as in Java."""
    if not isinstance(text, str):
        raise TypeError(f"java_string_hash needs a str, got {text!r}")
    h = 0
    # surrogatepass: a lone surrogate is a valid Java char, so it hashes rather than failing.
    for (unit,) in _UNIT.iter_unpack(text.encode("utf-16-be", "surrogatepass")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int = DEFAULT_PARTITIONS) -> int:
    """The partition of ``__consumer_offsets`` that holds ``group_id``'s records:
    ``abs(java_string_hash(group_id)) % partitions``, where abs maps -2**31 to 0 (Kafka's
    ``Utils.abs``; Java's ``Math.abs`` would leave it negative)."""
    return coordinator_partition("group_id", group_id, partitions)


def coordinator_partition(field: str, key: str, partitions: int) -> int:
    """The partition of a coordinator's topic (``__consumer_offsets``, ``__transaction_state``)
    that holds ``key``'s records, by Kafka's rule for both: ``abs(java_string_hash(key)) %
    partitions``, abs mapping -2**31 to 0. Errors name ``field``."""
    if not isinstance(key, str):
        raise TypeError(f"{field} must be a str, got {key!r}")
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise TypeError(f"partitions must be an int, got {partitions!r}")
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    h = java_string_hash(key)
    # Utils.abs is Math.abs except at -2**31, not a mask (h & 0x7FFFFFFF differs for every negative h).
    return (0 if h == -(2**31) else abs(h)) % partitions


# --- classic primitive types ----------------------------------------------------------------------


def utf8(field: str, value: object) -> bytes:
    """``value``'s UTF-8 bytes, checked as a Kafka string (a str of at most 32767 bytes); the
    ``TypeError`` or ``ValueError`` names ``field``."""
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a str, got {value!r}")
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{field} {value!r} cannot be encoded as UTF-8: {error.reason}") from None
    if len(data) > _MAX_STRING_BYTES:
        raise ValueError(f"{field} is {len(data)} bytes of UTF-8, more than a string holds ({_MAX_STRING_BYTES})")
    return data


class Writer:
    """Builds a record in Kafka's encoding: the classic one, and the flexible one's varints and
    compact strings. Every method checks its value's type and range and names ``field`` in the
    ``TypeError`` or ``ValueError`` it raises."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def _int(self, packer: struct.Struct, field: str, value) -> None:
        # bool is an int to Python, but True as an offset is always a bug.
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{field} must be an int, got {value!r}")
        bits = _BITS[packer]
        if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise ValueError(f"{field} {value} does not fit in an int{bits}")
        self._parts.append(packer.pack(value))

    def int8(self, field: str, value: int) -> None:
        """Append an int8."""
        self._int(_INT8, field, value)

    def int16(self, field: str, value: int) -> None:
        """Append a big-endian int16."""
        self._int(_INT16, field, value)

    def int32(self, field: str, value: int) -> None:
        """Append a big-endian int32."""
        self._int(_INT32, field, value)

    def int64(self, field: str, value: int) -> None:
        """Append a big-endian int64."""
        self._int(_INT64, field, value)

    def string(self, field: str, value: str | None, nullable: bool = False) -> None:
        """Append an int16 length and the UTF-8 bytes; ``None`` (length -1) only if ``nullable``."""
        if value is None and nullable:
            self._parts.append(_INT16.pack(-1))
            return
        if not isinstance(value, str):
            raise TypeError(f"{field} must be a str{' or None' if nullable else ''}, got {value!r}")
        data = utf8(field, value)
        self._parts.append(_INT16.pack(len(data)))
        self._parts.append(data)

    def compact_string(self, field: str, value: str) -> None:
        """Append a flexible version's string: an unsigned varint of length + 1, the UTF-8 bytes."""
        data = utf8(field, value)
        self.uvarint(len(data) + 1)
        self._parts.append(data)

    def uvarint(self, value: int) -> None:
        """Append an unsigned varint (a flexible version's lengths, counts and tags: ``value`` >= 0)."""
        out = bytearray()
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        self._parts.append(bytes(out))

    def raw(self, data: bytes) -> None:
        """Append ``data`` as it is (bytes already encoded)."""
        self._parts.append(data)

    def bytes_(self, field: str, value, nullable: bool = False) -> None:
        """Append an int32 length and the bytes; ``None`` (length -1) only if ``nullable``."""
        if value is None and nullable:
            self._parts.append(_INT32.pack(-1))
            return
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"{field} must be bytes{' or None' if nullable else ''}, got {value!r}")
        data = bytes(value)
        self._parts.append(_INT32.pack(len(data)))
        self._parts.append(data)

    def array(self, field: str, count: int) -> None:
        """Append the int32 element count of an array; the caller then writes the elements."""
        self._int(_INT32, field, count)

    def getvalue(self) -> bytes:
        """The bytes written so far."""
        return b"".join(self._parts)


class Reader:
    """Reads Kafka's classic (non-flexible) encoding from bytes. Every shortfall, impossible length or
    invalid UTF-8 raises ``CorruptRecordError`` naming ``what`` (the record), the field and the byte
    position."""

    __slots__ = ("_data", "_position", "_what", "_error")

    def __init__(self, data, what: str, error: type[CorruptRecordError] = CorruptRecordError):
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"{what} must be bytes, got {data!r}")
        self._data = bytes(data)
        self._position = 0
        self._what = what
        self._error = error  # another internal topic's records raise their own subclass

    def fail(self, message: str) -> CorruptRecordError:
        """The error for bad bytes at the current position (the caller raises it)."""
        return self._error(f"{self._what}: {message} (at byte {self._position} of {len(self._data)})")

    @property
    def remaining(self) -> int:
        """Bytes not yet read."""
        return len(self._data) - self._position

    def _take(self, field: str, size: int) -> bytes:
        if size > self.remaining:
            raise self.fail(f"{field} needs {size} bytes, {self.remaining} left")
        start = self._position
        self._position += size
        return self._data[start:self._position]

    def _int(self, packer: struct.Struct, field: str) -> int:
        if packer.size > self.remaining:
            raise self.fail(f"{field} needs {packer.size} bytes, {self.remaining} left")
        (value,) = packer.unpack_from(self._data, self._position)
        self._position += packer.size
        return value

    def int8(self, field: str) -> int:
        """Read an int8."""
        return self._int(_INT8, field)

    def number(self, packer: struct.Struct, field: str) -> int:
        """Read a big-endian integer of ``packer``'s size (a field whose type a table gives)."""
        return self._int(packer, field)

    def skip(self, field: str, size: int) -> None:
        """Step over ``size`` bytes (a field this reader does not know)."""
        self._take(field, size)

    def int16(self, field: str) -> int:
        """Read a big-endian int16."""
        return self._int(_INT16, field)

    def int32(self, field: str) -> int:
        """Read a big-endian int32."""
        return self._int(_INT32, field)

    def int64(self, field: str) -> int:
        """Read a big-endian int64."""
        return self._int(_INT64, field)

    def string(self, field: str, nullable: bool = False) -> str | None:
        """Read an int16-length UTF-8 string; length -1 is ``None`` only if ``nullable``."""
        length = self.int16(field + " length")
        if length < 0:
            if length == -1 and nullable:
                return None
            raise self.fail(f"{field} has length {length}")
        data = self._take(field, length)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise self.fail(f"{field} is not valid UTF-8 ({error.reason})") from None

    def bytes_(self, field: str, nullable: bool = False) -> bytes | None:
        """Read int32-length bytes; length -1 is ``None`` only if ``nullable``."""
        length = self.int32(field + " length")
        if length < 0:
            if length == -1 and nullable:
                return None
            raise self.fail(f"{field} has length {length}")
        return self._take(field, length)

    def array(self, field: str, min_element_bytes: int) -> int:
        """Read an array's int32 count. A count the remaining bytes cannot hold (each element takes at
        least ``min_element_bytes``) is refused here, before a caller loops two billion times."""
        count = self.int32(field + " count")
        if count < 0:
            raise self.fail(f"{field} has count {count}")
        if count * min_element_bytes > self.remaining:
            raise self.fail(f"{field} claims {count} elements, but only {self.remaining} bytes are left")
        return count

    # Kafka's flexible encoding (the transaction log's value version 1): unsigned varints, compact
    # strings and arrays (length + 1, 0 for null).

    def uvarint(self, field: str) -> int:
        """An unsigned varint of at most 5 bytes (an int32's, as Kafka reads them)."""
        value = shift = 0
        for _ in range(5):
            if not self.remaining:
                raise self.fail(f"{field} ends inside its varint")
            byte = self._data[self._position]
            self._position += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if value > 0xFFFFFFFF:
                    raise self.fail(f"{field} varint {value} is larger than 32 bits")
                return value
            shift += 7
        raise self.fail(f"{field} varint is longer than 5 bytes")

    def text(self, field: str, compact: bool) -> str:
        if compact:
            length = self.uvarint(field + " length") - 1
            if length < 0:
                raise self.fail(f"{field} is null")
        else:
            length = self._int(_INT16, field + " length")
            if length < 0:
                raise self.fail(f"{field} has length {length}")
        if length > _MAX_STRING_BYTES:
            raise self.fail(f"{field} has length {length}, more than a string holds ({_MAX_STRING_BYTES})")
        data = self._take(field, length)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise self.fail(f"{field} is not valid UTF-8 ({error.reason})") from None

    def count(self, field: str, compact: bool, min_element_bytes: int, nullable: bool = False) -> int | None:
        """An array's element count (``None`` for null when ``nullable``). A count the remaining bytes
        cannot hold (each element takes at least ``min_element_bytes``) is refused here, before a
        caller loops or allocates for it."""
        if compact:
            count = self.uvarint(field + " count") - 1
        else:
            count = self._int(_INT32, field + " count")
        if count < 0:
            if count == -1 and nullable:
                return None
            raise self.fail(f"{field} is null" if count == -1 else f"{field} has count {count}")
        if count * min_element_bytes > self.remaining:
            raise self.fail(f"{field} claims {count} elements, but only {self.remaining} bytes are left")
        return count

    def expect_end(self) -> None:
        """Raise unless every byte was read: our records have no trailing data, so any is damage."""
        if self.remaining:
            raise self.fail(f"{self.remaining} bytes left after the last field")


# --- keys -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetKey:
    """The key of an offset commit record: one committed offset of one partition for one group."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    """The key of a group metadata record."""

    group: str


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    """The offset commit key, version 1 (identical to version 0, the version Kafka writes)."""
    if type(partition) is int and -0x80000000 <= partition <= 0x7FFFFFFF:
        prefix = offset_key_prefix(group, topic, checked=False)
        if prefix is not None:
            return prefix + _OFFSET_KEY_PARTITION.pack(partition)
    out = Writer()  # says what is wrong
    out.int16("version", OFFSET_KEY_VERSION)
    out.string("group", group)
    out.string("topic", topic)
    out.int32("partition", partition)
    return out.getvalue()


def offset_key_prefix(group: str, topic: str, *, checked: bool = True) -> bytes | None:
    """The bytes every offset key of ``group`` and ``topic`` starts with: the key of a partition is
    this prefix and the partition as a big-endian int32 (what a commit of several partitions of a
    topic encodes once). A group or topic that cannot be encoded raises what ``encode_offset_key``
    raises (None with ``checked=False``)."""
    try:
        if type(group) is str and type(topic) is str:
            group_bytes, topic_bytes = group.encode("utf-8"), topic.encode("utf-8")
            if len(group_bytes) <= 0x7FFF and len(topic_bytes) <= 0x7FFF:
                return b"".join((_STRING_LENGTH.pack(OFFSET_KEY_VERSION, len(group_bytes)), group_bytes,
                                 _INT16.pack(len(topic_bytes)), topic_bytes))
    except UnicodeEncodeError:
        pass
    if not checked:
        return None
    encode_offset_key(group, topic, 0)  # raises, naming the field
    raise AssertionError("unreachable: encode_offset_key accepted what offset_key_prefix refused")


def encode_group_key(group: str) -> bytes:
    """The group metadata key, version 2."""
    out = Writer()
    out.int16("version", GROUP_KEY_VERSION)
    out.string("group", group)
    return out.getvalue()


def encode_key(key: OffsetKey | GroupKey) -> bytes:
    """``encode_offset_key`` or ``encode_group_key`` for a decoded key (the inverse of ``decode_key``)."""
    if isinstance(key, OffsetKey):
        return encode_offset_key(key.group, key.topic, key.partition)
    if isinstance(key, GroupKey):
        return encode_group_key(key.group)
    raise TypeError(f"key must be an OffsetKey or a GroupKey, got {key!r}")


_warned_key_versions: set[int] = set()


def decode_key(data) -> OffsetKey | GroupKey | None:
    """Decode a record key of ``__consumer_offsets``. Versions 0 and 1 are offset keys, 2 a group key.
    Versions 3 and above are the record types of Kafka's new (KIP-848) coordinator: like Kafka's
    classic loader we return ``None`` so the caller skips the record, and warn once per version."""
    reader = Reader(data, "__consumer_offsets key")
    version = reader.int16("version")
    if version in (0, 1):
        key = OffsetKey(reader.string("group"), reader.string("topic"), reader.int32("partition"))
    elif version == GROUP_KEY_VERSION:
        key = GroupKey(reader.string("group"))
    elif version > GROUP_KEY_VERSION:
        if version not in _warned_key_versions:
            _warned_key_versions.add(version)
            logger.warning("skipping __consumer_offsets records with key version %d (not a classic group record)",
                           version)
        return None
    else:
        raise reader.fail(f"negative key version {version}")
    reader.expect_end()
    return key


# --- offset commit value --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetValue:
    """A committed offset: the next offset the group will consume, the leader epoch of the record before
    it (-1 unknown), the client's metadata string, when it was committed and, for commits made with an
    explicit retention (OffsetCommit v1-v4), when it expires (``None`` otherwise)."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int | None = None


def encode_offset_value(value: OffsetValue) -> bytes:
    """Version 3, or version 1 when ``expire_timestamp_ms`` is set (the only version with that field,
    as Kafka chooses; v1 has no leader epoch, so it reads back as -1). A ``None`` metadata is written
    as "" (Kafka's ``NoMetadata``: the field is not nullable)."""
    if not isinstance(value, OffsetValue):
        raise TypeError(f"value must be an OffsetValue, got {value!r}")
    return encode_offset_value_fields(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms,
                                      value.expire_timestamp_ms)


def encode_offset_value_fields(offset: int, leader_epoch: int, metadata: str | None, commit_timestamp_ms: int,
                               expire_timestamp_ms: int | None) -> bytes:
    """``encode_offset_value`` of an ``OffsetValue`` with these fields, without building one (a
    commit encodes one value per partition)."""
    if metadata is None:
        metadata = ""
    if expire_timestamp_ms is None and type(metadata) is str and type(offset) is int \
            and type(leader_epoch) is int and type(commit_timestamp_ms) is int:
        try:
            data = metadata.encode("utf-8")
            if len(data) <= 0x7FFF:
                return b"".join((_OFFSET_VALUE_HEAD.pack(OFFSET_VALUE_VERSION, offset, leader_epoch, len(data)),
                                 data, _INT64.pack(commit_timestamp_ms)))
        except (UnicodeEncodeError, struct.error):
            pass  # Writer below says what is wrong
    out = Writer()
    if expire_timestamp_ms is not None:
        out.int16("version", OFFSET_VALUE_EXPIRE_VERSION)
        out.int64("offset", offset)
        out.string("metadata", metadata)
        out.int64("commit_timestamp_ms", commit_timestamp_ms)
        out.int64("expire_timestamp_ms", expire_timestamp_ms)
    else:
        out.int16("version", OFFSET_VALUE_VERSION)
        out.int64("offset", offset)
        out.int32("leader_epoch", leader_epoch)
        out.string("metadata", metadata)
        out.int64("commit_timestamp_ms", commit_timestamp_ms)
    return out.getvalue()


def decode_offset_value(data) -> OffsetValue | None:
    """Decode an offset commit value of any version 0-3; ``None`` (a tombstone) gives ``None``."""
    if data is None:
        return None
    reader = Reader(data, "offset commit value")
    version = reader.int16("version")
    if not 0 <= version <= OFFSET_VALUE_VERSION:
        raise reader.fail(f"unknown offset commit value version {version}")
    offset = reader.int64("offset")
    leader_epoch = reader.int32("leader_epoch") if version >= 3 else -1
    metadata = reader.string("metadata")
    commit_timestamp_ms = reader.int64("commit_timestamp")
    expire_timestamp_ms = reader.int64("expire_timestamp") if version == 1 else None
    reader.expect_end()
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp_ms, expire_timestamp_ms)


# --- group metadata value -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberValue:
    """One member as a group metadata record keeps it: ``subscription`` is its metadata for the
    group's chosen protocol, ``assignment`` what the leader gave it (b"" before SyncGroup)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    """A group's metadata: ``protocol_type`` "" stands for none (a group that only commits offsets),
    ``protocol`` and ``leader`` are ``None`` for an empty group, ``current_state_timestamp_ms`` -1 is
    unknown. ``members`` is kept as a tuple (any iterable of ``MemberValue`` is accepted), so values
    compare equal whatever sequence built them."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberValue, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", tuple(self.members))


def encode_group_value(value: GroupValue) -> bytes:
    """Version 3 (Kafka's choice since 2.3). A ``None`` protocol type is written as "" (the field is
    not nullable; Kafka writes ``protocolType.getOrElse("")``)."""
    if not isinstance(value, GroupValue):
        raise TypeError(f"value must be a GroupValue, got {value!r}")
    out = Writer()
    out.int16("version", GROUP_VALUE_VERSION)
    out.string("protocol_type", "" if value.protocol_type is None else value.protocol_type)
    out.int32("generation", value.generation)
    out.string("protocol", value.protocol, nullable=True)
    out.string("leader", value.leader, nullable=True)
    out.int64("current_state_timestamp_ms", value.current_state_timestamp_ms)
    out.array("members", len(value.members))
    for member in value.members:
        if not isinstance(member, MemberValue):
            raise TypeError(f"members must hold MemberValue, got {member!r}")
        out.string("member_id", member.member_id)
        out.string("group_instance_id", member.group_instance_id, nullable=True)
        out.string("client_id", member.client_id)
        out.string("client_host", member.client_host)
        out.int32("rebalance_timeout_ms", member.rebalance_timeout_ms)
        out.int32("session_timeout_ms", member.session_timeout_ms)
        out.bytes_("subscription", member.subscription)
        out.bytes_("assignment", member.assignment)
    return out.getvalue()


def decode_group_value(data) -> GroupValue | None:
    """Decode a group metadata value of any version 0-3; ``None`` (a tombstone) gives ``None``.
    Fields older versions lack take Kafka's defaults: the rebalance timeout (v0) is the session
    timeout, the state timestamp (v0, v1) -1, the group instance id (v0-v2) ``None``."""
    if data is None:
        return None
    reader = Reader(data, "group metadata value")
    version = reader.int16("version")
    if not 0 <= version <= GROUP_VALUE_VERSION:
        raise reader.fail(f"unknown group metadata value version {version}")
    protocol_type = reader.string("protocol_type")
    generation = reader.int32("generation")
    protocol = reader.string("protocol", nullable=True)
    leader = reader.string("leader", nullable=True)
    current_state_timestamp_ms = reader.int64("current_state_timestamp") if version >= 2 else -1
    # The smallest member: three empty strings, the session timeout, two empty byte strings, plus
    # the instance id (v3) and rebalance timeout (v1+) when the version has them.
    min_member = 3 * 2 + 4 + 2 * 4 + (2 if version >= 3 else 0) + (4 if version >= 1 else 0)
    members = []
    for _ in range(reader.array("members", min_member)):
        member_id = reader.string("member_id")
        group_instance_id = reader.string("group_instance_id", nullable=True) if version >= 3 else None
        client_id = reader.string("client_id")
        client_host = reader.string("client_host")
        rebalance_timeout_ms = reader.int32("rebalance_timeout") if version >= 1 else None
        session_timeout_ms = reader.int32("session_timeout")
        if rebalance_timeout_ms is None:
            rebalance_timeout_ms = session_timeout_ms
        subscription = reader.bytes_("subscription")
        assignment = reader.bytes_("assignment")
        members.append(MemberValue(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                                   session_timeout_ms, subscription, assignment))
    reader.expect_end()
    return GroupValue(protocol_type, generation, protocol, leader, current_state_timestamp_ms, members)
