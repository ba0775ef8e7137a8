"""What the transaction coordinator keeps per transactional id, what it asks of its collaborators,
and what it answers.

- ``TransactionMetadata``: one transactional id's state in memory: the durable part (what the last
  ``__transaction_state`` record says) plus what Kafka keeps only in memory (the epoch before the
  last bump, for a lost-response retry, and the pending transition while a record is being written).
- ``Transition``: the state a transition is writing; it becomes the metadata once durable.
- The collaborators' interfaces: ``StateLog`` (append durably, load), ``MarkerWriter`` (write commit
  or abort markers and report per partition), ``ProducerIdAllocator`` (a never-reused producer id).
- The answers: ``InitProducerIdResult``, ``TransactionDescription``, ``TransactionListing``,
  ``ListTransactionsResult``, and ``MarkerRequest`` (what the marker writer is asked to write).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple, Protocol

from .formats import TransactionLogValue, TransactionState

Partition = tuple[str, int]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767  # epochs are int16 on the wire

STATE_NAMES: dict[TransactionState, str] = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
"""Kafka's names of the states, as DescribeTransactions and ListTransactions spell them."""


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch in reserve so that a producer can always be fenced once more: an
    epoch at or above ``MAX_PRODUCER_EPOCH - 1`` is not bumped but replaced by a new producer id."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(frozen=True)
class Transition:
    """The state a transition writes to ``__transaction_state``; it replaces the metadata's durable
    fields once the record is durable. ``last_producer_epoch`` is kept in memory only (as Kafka)."""

    state: TransactionState
    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    partitions: frozenset[Partition]
    start_timestamp_ms: int
    last_update_timestamp_ms: int

    def value(self) -> TransactionLogValue:
        return TransactionLogValue(
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.timeout_ms, state=self.state, partitions=tuple(sorted(self.partitions)),
            last_update_timestamp_ms=self.last_update_timestamp_ms, start_timestamp_ms=self.start_timestamp_ms,
            previous_producer_id=self.previous_producer_id)


@dataclass
class TransactionMetadata:
    """One transactional id's state, guarded by the coordinator's lock. ``pending`` is the state a
    transition is writing (None when none is): while it is set, the id answers
    CONCURRENT_TRANSACTIONS to anything that would change it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    previous_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: frozenset[Partition] = frozenset()
    start_timestamp_ms: int = -1
    last_update_timestamp_ms: int = -1
    pending: TransactionState | None = None
    transitions: int = field(default=0)  # completed transitions, so a stale completion can tell

    @classmethod
    def from_value(cls, transactional_id: str, value: TransactionLogValue) -> "TransactionMetadata":
        return cls(transactional_id=transactional_id, producer_id=value.producer_id,
                   producer_epoch=value.producer_epoch, timeout_ms=value.transaction_timeout_ms,
                   state=TransactionState(value.state), previous_producer_id=value.previous_producer_id,
                   partitions=frozenset((topic, partition) for topic, partition in value.partitions),
                   start_timestamp_ms=value.start_timestamp_ms,
                   last_update_timestamp_ms=value.last_update_timestamp_ms)

    def transition(self, state: TransactionState, now_ms: int, **changes) -> Transition:
        """The transition to ``state`` at ``now_ms``: the current fields with ``changes`` applied."""
        fields = dict(state=state, producer_id=self.producer_id, previous_producer_id=self.previous_producer_id,
                      producer_epoch=self.producer_epoch, last_producer_epoch=self.last_producer_epoch,
                      timeout_ms=self.timeout_ms, partitions=self.partitions,
                      start_timestamp_ms=self.start_timestamp_ms, last_update_timestamp_ms=now_ms)
        fields.update(changes)
        return Transition(**fields)

    def apply(self, transition: Transition) -> None:
        """Make ``transition`` the current state (its record is durable) and clear the pending state."""
        self.state = transition.state
        self.producer_id = transition.producer_id
        self.previous_producer_id = transition.previous_producer_id
        self.producer_epoch = transition.producer_epoch
        self.last_producer_epoch = transition.last_producer_epoch
        self.timeout_ms = transition.timeout_ms
        self.partitions = transition.partitions
        self.start_timestamp_ms = transition.start_timestamp_ms
        self.last_update_timestamp_ms = transition.last_update_timestamp_ms
        self.pending = None
        self.transitions += 1


class StateLog(Protocol):
    """The ``__transaction_state`` topic as the coordinator uses it."""

    def append(self, transactional_id: str, value: TransactionLogValue | None) -> None:
        """Write ``value`` (None: a tombstone) for the id; return only once it is durable."""
        ...

    def load(self) -> dict[str, TransactionLogValue]:
        """The last value of every id the topic holds (tombstoned ids absent)."""
        ...


@dataclass(frozen=True)
class MarkerRequest:
    """Write a COMMIT (``commit``) or ABORT marker for ``producer_id``/``producer_epoch`` to each of
    ``partitions``, as the coordinator of ``coordinator_epoch``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[Partition]
    coordinator_epoch: int


MarkerDone = Callable[[Mapping[Partition, int]], None]
"""Called once per request with an error code for each partition of it (0 when written)."""


class MarkerWriter(Protocol):
    """Writes markers, possibly later and on another thread, and calls ``done`` once with an error
    code per partition (it may call it before returning)."""

    def __call__(self, request: MarkerRequest, done: MarkerDone) -> None:
        ...


class ProducerIdAllocator(Protocol):
    """Returns a producer id never returned before (by this store, ever)."""

    def __call__(self) -> int:
        ...


class InitProducerIdResult(NamedTuple):
    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionDescription(NamedTuple):
    """One entry of DescribeTransactions."""

    error_code: int
    transactional_id: str
    state: str = ""
    timeout_ms: int = 0
    start_timestamp_ms: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    topics: dict[str, list[int]] = {}


class TransactionListing(NamedTuple):
    transactional_id: str
    producer_id: int
    state: str


class ListTransactionsResult(NamedTuple):
    error_code: int
    unknown_state_filters: list[str]
    transactions: list[TransactionListing]
