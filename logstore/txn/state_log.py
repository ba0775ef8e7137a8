"""``TransactionStateLog``: the transaction coordinator's state in the ``__transaction_state`` topic.

This module owns everything the transaction coordinator keeps on disk: creating the compacted
internal topic, mapping a transactional id to its partition (Kafka's rule, so FindCoordinator and
tools that read the topic find an id where Kafka would put it), writing an id's state durably (the
append and its fsync both happen before ``append`` returns: the coordinator answers a client only
once its decision survives a power loss), writing tombstones for expired ids, and replaying the topic
at start-up: the last record of an id wins, a tombstone deletes it. Replaying the compacted topic
gives the same state, which is what compaction is for.

The topic has Kafka's settings: ``transaction.state.log.num.partitions`` (50) partitions, so an id's
partition is the one Kafka's tools compute; ``cleanup.policy=compact``; no compression (Kafka forces
``compression.type=uncompressed`` on it); ``transaction.state.log.segment.bytes`` (100 MiB) segments.
Replication settings (replication factor, ``min.insync.replicas``) mean nothing on one broker. As
``__consumer_offsets`` is, the topic is created on the first write, so a store whose server never
sees a transaction holds no 50 partitions' files open; once it exists its partition count wins (Kafka
refuses to change it after deployment: it would move ids between partitions).

A partition that cannot be replayed (damaged, missing, or holding a record that does not decode) is
*unavailable*: its ids are left out of ``load()``'s answer, listed in ``unavailable`` and refused by
``append`` (``TransactionLogUnavailableError``) until the store is repaired and reloaded. Skipping
one undecodable record, as the group coordinator does, is not safe here: an older record of the id
would win, and a transaction decided as committed could be aborted. Writing into such a partition
would let a new state hide what the damage holds, so that is refused too.
"""

from __future__ import annotations

import logging
import threading

from ..clock import Clock
from ..errors import LogStoreError, TopicExistsError
from ..manager.log_manager import LogManager
from ..records.decoder import Record
from . import formats
from .formats import TRANSACTION_STATE_TOPIC, TransactionLogValue

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_NUM_PARTITIONS", "DEFAULT_SEGMENT_BYTES", "TransactionLogUnavailableError",
           "TransactionStateLog"]

DEFAULT_NUM_PARTITIONS = formats.DEFAULT_PARTITIONS
"""Kafka's ``transaction.state.log.num.partitions`` default."""

DEFAULT_SEGMENT_BYTES = 104857600
"""Kafka's ``transaction.state.log.segment.bytes`` default (100 MiB)."""

TOPIC_CONFIG = {"cleanup.policy": "compact", "compression.type": "uncompressed"}
"""The configs Kafka forces on ``__transaction_state`` that mean something on one broker."""


class TransactionLogUnavailableError(LogStoreError):
    """The ``__transaction_state`` partition of a transactional id could not be replayed: its state is
    unknown, so it is neither reported nor overwritten. ``partition`` names it; the message says why."""

    def __init__(self, message: str, partition: int) -> None:
        super().__init__(message)
        self.partition = partition


class TransactionStateLog:
    """The transactional ids' states in ``store``'s ``__transaction_state`` topic.

    ``append(id, value)`` writes one state (``None``: a tombstone) and returns once it is fsynced;
    ``load()`` replays the topic into ``{id: value}``. ``num_partitions`` and ``segment_bytes`` are
    Kafka's ``transaction.state.log.num.partitions`` and ``transaction.state.log.segment.bytes``,
    used when this creates the topic. Failures of the store (``LogStoreError``) propagate from
    ``append``: the coordinator answers the client with an error and keeps its state as before.
    Safe to call from several threads."""

    def __init__(self, store: LogManager, clock: Clock, *, num_partitions: int = DEFAULT_NUM_PARTITIONS,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        if isinstance(num_partitions, bool) or not isinstance(num_partitions, int):
            raise TypeError(f"num_partitions must be an int, got {num_partitions!r}")
        if not 1 <= num_partitions <= 10000:
            raise ValueError(f"num_partitions must be between 1 and 10000, got {num_partitions}")
        if isinstance(segment_bytes, bool) or not isinstance(segment_bytes, int):
            raise TypeError(f"segment_bytes must be an int, got {segment_bytes!r}")
        if segment_bytes < 14:
            raise ValueError(f"segment_bytes must be at least 14, got {segment_bytes}")
        self.store = store
        self.clock = clock
        self.segment_bytes = segment_bytes
        self.num_partitions = num_partitions
        self.unavailable: dict[int, str] = {}
        """Partitions the last ``load()`` could not replay -> why."""
        self._lock = threading.Lock()
        self._adopt_existing_partition_count()

    # --- the topic -------------------------------------------------------------------------------

    def _adopt_existing_partition_count(self) -> None:
        if TRANSACTION_STATE_TOPIC in self.store.topics():
            existing = self.store.partitions(TRANSACTION_STATE_TOPIC)
            if existing != self.num_partitions:
                logger.warning("%s has %d partitions; transaction.state.log.num.partitions=%d is ignored (the "
                               "count of an existing topic never changes: it would move ids between partitions)",
                               TRANSACTION_STATE_TOPIC, existing, self.num_partitions)
                self.num_partitions = existing

    def ensure_topic(self) -> None:
        """Create ``__transaction_state`` (compacted) unless it exists; ``ReadOnlyError`` in a view."""
        with self._lock:
            if TRANSACTION_STATE_TOPIC in self.store.topics():
                return
            try:
                self.store.create_topic(TRANSACTION_STATE_TOPIC, partitions=self.num_partitions,
                                        config={**TOPIC_CONFIG, "segment.bytes": self.segment_bytes})
                logger.info("created %s with %d partitions", TRANSACTION_STATE_TOPIC, self.num_partitions)
            except TopicExistsError:
                pass  # created meanwhile by another writer of this store

    def partition_for(self, transactional_id: str) -> int:
        """The partition that holds ``transactional_id``'s records (Kafka's rule)."""
        return formats.partition_for(transactional_id, self.num_partitions)

    def is_available(self, transactional_id: str) -> bool:
        """False when the last ``load()`` could not replay this id's partition: its state is unknown
        (the coordinator answers such an id with a retriable error rather than as a new id)."""
        return self.partition_for(transactional_id) not in self.unavailable

    # --- writes ----------------------------------------------------------------------------------

    def append(self, transactional_id: str, value: TransactionLogValue | None) -> None:
        """Write ``transactional_id``'s state (``None``: a tombstone, the id expired) and return once
        the record is fsynced. Raises ``TransactionLogUnavailableError`` for an id of a partition the
        last load could not replay, and the store's ``LogStoreError`` when the append or the fsync
        fails (an fsync failure also fails the partition: fail-stop)."""
        key = formats.encode_key(transactional_id)
        data = None if value is None else formats.encode_value(value)
        partition = self.partition_for(transactional_id)
        problem = self.unavailable.get(partition)
        if problem is not None:
            raise TransactionLogUnavailableError(
                f"cannot write the state of transactional id {transactional_id!r}: {problem}", partition)
        self.ensure_topic()
        log = self.store.get_log(TRANSACTION_STATE_TOPIC, partition)
        log.append([Record(key=key, value=data, timestamp_ms=self.clock.time_ms())])
        # The flush covers everything appended so far: concurrent appenders that find their record
        # already below the recovery point return without an fsync of their own.
        log.flush()

    # --- replay ----------------------------------------------------------------------------------

    def load(self) -> dict[str, TransactionLogValue]:
        """Replay every partition from its start: the last value of each id, tombstones removing.
        Partitions that cannot be replayed are left out and listed in ``unavailable`` (and in the
        store's ``problems``); records whose key has a version Kafka does not define are skipped."""
        self.unavailable.clear()
        if TRANSACTION_STATE_TOPIC not in self.store.topics():
            return {}
        self._adopt_existing_partition_count()
        states: dict[str, TransactionLogValue] = {}
        for partition in range(self.num_partitions):
            try:
                states.update(self._load_partition(partition))
            except LogStoreError as exc:
                problem = (f"{TRANSACTION_STATE_TOPIC}-{partition} cannot be loaded ({exc}): the states of its "
                           "transactional ids are unknown until the partition is repaired")
                logger.error("%s", problem)
                self.unavailable[partition] = problem
                self.store.problems.append(problem)
        if states:
            logger.info("loaded %d transactional id(s) from %s", len(states), TRANSACTION_STATE_TOPIC)
        return states

    def _load_partition(self, partition: int) -> dict[str, TransactionLogValue]:
        states: dict[str, TransactionLogValue] = {}
        log = self.store.get_log(TRANSACTION_STATE_TOPIC, partition)
        for record in log.iter_records():
            if record.key is None:
                logger.warning("%s-%d offset %d: a record without a key is skipped", TRANSACTION_STATE_TOPIC,
                               partition, record.offset)
                continue
            try:
                transactional_id = formats.decode_key(record.key)
                value = formats.decode_value(record.value)
            except formats.UnknownKeyVersionError as exc:
                logger.warning("%s-%d offset %d: skipped: %s", TRANSACTION_STATE_TOPIC, partition, record.offset,
                               exc)
                continue
            except formats.TransactionLogFormatError as exc:
                raise formats.TransactionLogFormatError(f"offset {record.offset}: {exc}") from exc
            if value is None:
                states.pop(transactional_id, None)
            else:
                states[transactional_id] = value
        return states
