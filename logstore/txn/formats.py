"""The records of the internal topic ``__transaction_state``, byte for byte Kafka's layouts.

What it owns:
- ``TransactionState``: the transaction states with the byte ids Kafka stores in the log;
- ``TransactionLogValue``: what the log keeps of one transactional id;
- the key and value encodings, so a dump of our topic reads like Kafka's and Kafka's tools could read
  ours. Both start with an int16 version, as ``__consumer_offsets``' records do:

  ==========  ========  =========================================================================
  record      version   fields after the int16 version
  ==========  ========  =========================================================================
  key         0         transactional id: string (int16 length + UTF-8)
  value       0         producer id int64, producer epoch int16, transaction timeout ms int32,
                        state int8, partitions: nullable array (int32 count, -1 null) of
                        {topic string, partition ids: array (int32 count) of int32},
                        last update timestamp ms int64, start timestamp ms int64
  value       1         the same fields in the flexible encoding (compact strings and arrays:
                        unsigned varint length + 1, 0 null; a tagged-field section, empty, after each
                        partitions entry), then the tagged fields in tag order: 0 previous producer
                        id int64 (default -1), 1 next producer id int64 (default -1), 2 client
                        transaction version int16 (default 0). A tagged field at its default is
                        not written.
  ==========  ========  =========================================================================

  The partitions are null for Empty (Kafka writes null there and ignores what it reads there),
  grouped by topic otherwise; we write topics and partition ids sorted, so one state has one
  encoding. We write value version 0 (what a Kafka cluster without the ``transaction.version``
  feature writes, and what Kafka 3.x tools read) unless a tagged field differs from its default:
  version 1 then, as only it can hold them. We read both; tags we do not know are skipped, as
  Kafka's readers do. A tombstone (a null value) deletes the id: ``decode_value(None)`` is ``None``.

Bad bytes raise ``TransactionLogFormatError`` (a ``CorruptRecordError``) naming the record, the field,
what was wrong and the byte position; a key of a version Kafka does not define raises its subclass
``UnknownKeyVersionError``, which a loader skips, as Kafka's does. Every count and length is checked
against the bytes left before anything is allocated for it. A value of the wrong type or range given
to an encoder raises ``TypeError`` or ``ValueError`` naming the field: a bug in the caller. Standard
library only.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from ..errors import CorruptRecordError
from ..group.formats import Reader, Writer, coordinator_partition

__all__ = [
    "KEY_VERSION", "TRANSACTION_STATE_TOPIC", "TransactionLogFormatError", "TransactionLogValue", "TransactionState",
    "UnknownKeyVersionError", "VALUE_VERSIONS", "decode_key", "decode_value", "encode_key", "encode_value",
    "partition_for",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"
"""The compacted internal topic that holds the transaction coordinator's state."""

DEFAULT_PARTITIONS = 50
"""Kafka's ``transaction.state.log.num.partitions`` default."""

KEY_VERSION = 0
VALUE_VERSIONS = (0, 1)
FLEXIBLE_VALUE_VERSION = 1

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

# The tagged fields of value version 1: tag -> (field, packer, default).
_TAG_PREVIOUS_PRODUCER_ID, _TAG_NEXT_PRODUCER_ID, _TAG_CLIENT_TRANSACTION_VERSION = 0, 1, 2
_TAGGED = {
    _TAG_PREVIOUS_PRODUCER_ID: ("previous_producer_id", _INT64, -1),
    _TAG_NEXT_PRODUCER_ID: ("next_producer_id", _INT64, -1),
    _TAG_CLIENT_TRANSACTION_VERSION: ("client_transaction_version", _INT16, 0),
}


class TransactionLogFormatError(CorruptRecordError):
    """Bytes of a ``__transaction_state`` key or value that do not decode."""


class UnknownKeyVersionError(TransactionLogFormatError):
    """A key whose version Kafka does not define for this topic: a loader skips the record, as Kafka's
    does, rather than failing. ``version`` is the version read."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


class TransactionState(enum.IntEnum):
    """A transaction's state, valued by the byte id Kafka stores in ``TransactionStatus``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """What ``__transaction_state`` keeps of one transactional id: its producer id and epoch, the
    transaction timeout, the state, the partitions of the open (or finishing) transaction as sorted
    ``(topic, partition)`` pairs, when it last changed and when the transaction started (-1: none),
    and version 1's tagged fields (the producer id before an overflow bump, the next one, the
    client's transaction version). ``partitions`` is stored sorted and without duplicates (Kafka keeps
    a set), whatever iterable built it, so equal states compare equal; ``state`` may be given as its
    byte id."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    partitions: tuple[tuple[str, int], ...]
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.state, TransactionState):
            if isinstance(self.state, bool) or not isinstance(self.state, int):
                raise TypeError(f"state must be a TransactionState, got {self.state!r}")
            try:
                object.__setattr__(self, "state", TransactionState(self.state))
            except ValueError:
                raise ValueError(f"state {self.state} is not a transaction state id (0-7)") from None
        try:
            pairs = set(self.partitions)
        except TypeError:
            raise TypeError(f"partitions must be an iterable of (topic, partition) pairs, "
                            f"got {self.partitions!r}") from None
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)
                    and isinstance(pair[1], int) and not isinstance(pair[1], bool)):
                raise TypeError(f"partitions must hold (topic: str, partition: int) pairs, got {pair!r}")
        object.__setattr__(self, "partitions", tuple(sorted(pairs)))


# --- the partition of a transactional id ----------------------------------------------------------


def partition_for(transactional_id: str, partitions: int = DEFAULT_PARTITIONS) -> int:
    """The partition of ``__transaction_state`` that holds ``transactional_id``'s records:
    ``abs(java_string_hash(id)) % partitions``, where abs maps -2**31 to 0 (Kafka's ``Utils.abs``),
    the rule of Kafka's transaction state manager, so FindCoordinator and tools agree with Kafka."""
    return coordinator_partition("transactional_id", transactional_id, partitions)


# --- writing --------------------------------------------------------------------------------------


def encode_key(transactional_id: str) -> bytes:
    """The key of ``transactional_id``'s records: version 0, the id as a string."""
    writer = Writer()
    writer.int16("version", KEY_VERSION)
    writer.string("transactional_id", transactional_id)
    return writer.getvalue()


def encode_value(value: TransactionLogValue, version: int | None = None) -> bytes:
    """The value bytes of ``value``: version 0 unless a tagged field differs from its default (then
    version 1), or the ``version`` asked for. Version 0 cannot hold the tagged fields: asking for it
    with one set is a ``ValueError``, as is an Empty state with partitions (Kafka refuses it too)."""
    if not isinstance(value, TransactionLogValue):
        raise TypeError(f"value must be a TransactionLogValue, got {value!r}")
    tagged = [(tag, field, packer, getattr(value, field)) for tag, (field, packer, default) in _TAGGED.items()
              if getattr(value, field) != default]
    if version is None:
        version = FLEXIBLE_VALUE_VERSION if tagged else 0
    elif version not in VALUE_VERSIONS:
        raise ValueError(f"version must be one of {VALUE_VERSIONS}, got {version!r}")
    elif version == 0 and tagged:
        raise ValueError(f"value version 0 cannot hold {', '.join(field for _t, field, _p, _v in tagged)}: "
                         "use version 1")
    if value.state == TransactionState.EMPTY and value.partitions:
        raise ValueError(f"an Empty transaction has no partitions, got {value.partitions!r}")
    flexible = version >= FLEXIBLE_VALUE_VERSION
    writer = Writer()
    writer.int16("version", version)
    writer.int64("producer_id", value.producer_id)
    writer.int16("producer_epoch", value.producer_epoch)
    writer.int32("transaction_timeout_ms", value.transaction_timeout_ms)
    writer.int8("state", int(value.state))

    def count(field: str, items: int) -> None:  # an array's length: compact (n + 1) when flexible
        if flexible:
            writer.uvarint(items + 1)
        else:
            writer.array(field, items)

    if value.state == TransactionState.EMPTY:
        writer.raw(b"\x00" if flexible else _INT32.pack(-1))  # null
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in value.partitions:  # sorted: topics in order, each one's ids in order
            by_topic.setdefault(topic, []).append(partition)
        count("partitions", len(by_topic))
        for topic, ids in by_topic.items():
            if flexible:
                writer.compact_string("topic", topic)
            else:
                writer.string("topic", topic)
            count("partition_ids", len(ids))
            for partition in ids:
                writer.int32("partition", partition)
            if flexible:
                writer.uvarint(0)  # the entry's tagged fields: none
    writer.int64("last_update_timestamp_ms", value.last_update_timestamp_ms)
    writer.int64("start_timestamp_ms", value.start_timestamp_ms)
    if flexible:
        writer.uvarint(len(tagged))
        for tag, field, packer, field_value in tagged:  # _TAGGED is in tag order
            writer.uvarint(tag)
            writer.uvarint(packer.size)
            (writer.int64 if packer is _INT64 else writer.int16)(field, field_value)
    return writer.getvalue()


# --- reading --------------------------------------------------------------------------------------


def decode_key(data: bytes) -> str:
    """The transactional id of a ``__transaction_state`` key (version 0). Another version raises
    ``UnknownKeyVersionError``; bad bytes ``TransactionLogFormatError``."""
    reader = Reader(data, "__transaction_state key", TransactionLogFormatError)
    version = reader.int16("version")
    if version != KEY_VERSION:
        raise UnknownKeyVersionError(f"__transaction_state key: unknown key version {version}", version)
    transactional_id = reader.text("transactional_id", compact=False)
    reader.expect_end()
    return transactional_id


def decode_value(data: bytes | None) -> TransactionLogValue | None:
    """Decode a ``__transaction_state`` value of version 0 or 1; ``None`` (a tombstone) gives
    ``None``. The partitions of an Empty state are ignored (as Kafka does); a null partition list in
    any other state, an unknown state id, a known tagged field of the wrong size, tags out of order
    or bytes after the last field are refused."""
    if data is None:
        return None
    reader = Reader(data, "__transaction_state value", TransactionLogFormatError)
    version = reader.int16("version")
    if version not in VALUE_VERSIONS:
        raise reader.fail(f"unknown value version {version}")
    flexible = version >= FLEXIBLE_VALUE_VERSION
    producer_id = reader.int64("producer_id")
    producer_epoch = reader.int16("producer_epoch")
    transaction_timeout_ms = reader.int32("transaction_timeout_ms")
    status = reader.int8("state")
    try:
        state = TransactionState(status)
    except ValueError:
        raise reader.fail(f"state {status} is not a transaction state id (0-7)") from None
    # The smallest entry: an empty topic name and an empty id array (and, flexible, the tag section).
    topics = reader.count("partitions", flexible, 3 if flexible else 6, nullable=True)
    partitions: list[tuple[str, int]] = []
    if topics is None:
        if state != TransactionState.EMPTY:
            raise reader.fail(f"partitions are null in state {state.name}")
    else:
        for _ in range(topics):
            topic = reader.text("topic", flexible)
            for _ in range(reader.count("partition_ids", flexible, 4) or 0):
                partitions.append((topic, reader.int32("partition_id")))
            if flexible:
                _skip_tagged_fields(reader, "partitions entry", {})
    last_update_timestamp_ms = reader.int64("last_update_timestamp_ms")
    start_timestamp_ms = reader.int64("start_timestamp_ms")
    tagged: dict[str, int] = {}
    if flexible:
        _skip_tagged_fields(reader, "value", tagged)
    reader.expect_end()
    if state == TransactionState.EMPTY:
        partitions = []
    return TransactionLogValue(producer_id, producer_epoch, transaction_timeout_ms, state, partitions,
                               last_update_timestamp_ms, start_timestamp_ms, **tagged)


def _skip_tagged_fields(reader: Reader, where: str, known: dict[str, int]) -> None:
    """Read a tagged-field section: the fields of ``_TAGGED`` go into ``known`` (when ``known`` is the
    value's own section), any other tag is skipped by its size."""
    count = reader.uvarint(f"{where} tagged field count")
    if count * 2 > reader.remaining:  # a tag and a size, one byte each at least
        raise reader.fail(f"{where} claims {count} tagged fields, but only {reader.remaining} bytes are left")
    previous = -1
    for _ in range(count):
        tag = reader.uvarint(f"{where} tag")
        if tag <= previous:
            raise reader.fail(f"{where} tag {tag} follows tag {previous} (tags are written in ascending order)")
        previous = tag
        size = reader.uvarint(f"{where} tag {tag} size")
        if where == "value" and tag in _TAGGED:
            field, packer, _default = _TAGGED[tag]
            if size != packer.size:
                raise reader.fail(f"tagged field {field} (tag {tag}) has size {size}, not {packer.size}")
            known[field] = reader.number(packer, field)
        else:
            reader.skip(f"{where} tag {tag}", size)
