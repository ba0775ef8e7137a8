"""``ProducerStateTable``: what one partition knows about the producers that appended to it, and the
transactions they hold open there (Kafka's ProducerStateManager, without sequences: the server's
journal keeps those).

Per producer id: its epoch, the coordinator epoch of its last marker, the offset and timestamp of its
last batch, and the first offset of its open transaction (-1: none). The open transactions also sit in
a min-heap by first offset with lazy deletion (an entry is stale once its producer's open transaction
starts elsewhere or is closed), so the first unstable offset, which bounds the last stable offset, is
found in O(log n) however many transactions complete.

The rules an append must pass (``check_data``, ``check_marker``) are Kafka's:

- a batch whose epoch is lower than the known one: ``InvalidProducerEpochError``;
- a non-transactional producer batch while the producer's transaction is open: ``InvalidTxnStateError``;
- a marker with a lower epoch: ``InvalidProducerEpochError``; with a lower coordinator epoch:
  ``TransactionCoordinatorFencedError``; a higher epoch is allowed (a timeout or fencing abort
  installs the new epoch through its marker).

Applying (``on_data``, ``on_marker``, or ``on_batch`` for a replay of batches read back) never checks:
what is in the log is the truth. A transactional batch without an open transaction opens one at its
base offset; a marker closes the open one and returns its ``CompletedTxn`` (None when the producer had
no open transaction: a duplicate marker, or one for a transaction without data here).

Not thread-safe: the owning ``Log`` changes it under its lock. Readers take no lock and read only
``first_unstable_offset``, an attribute the ``Log`` publishes in the order that keeps them from seeing
undecided data (see ``Log``). A replay (recovery, a truncation) builds a fresh table and feeds it the
batches in log order through ``on_batch``.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Iterator, NamedTuple

from ..errors import InvalidProducerEpochError, InvalidTxnStateError, TransactionCoordinatorFencedError
from ..records.control import Marker
from ..records.decoder import BatchHeader, ProducerFields

NO_OFFSET = -1


class ProducerEntry(NamedTuple):
    """One producer as the partition knows it (DescribeProducers shows these fields)."""

    producer_id: int
    epoch: int
    coordinator_epoch: int
    last_offset: int
    last_timestamp_ms: int
    txn_first_offset: int  # the first offset of its open transaction here, or -1


class CompletedTxn(NamedTuple):
    """A transaction a marker closed that had data in this partition: from ``first_offset`` to the
    marker at ``last_offset``; ``aborted`` when the marker was an ABORT."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class ProducerStateTable:
    """The producers of one partition and their open transactions (module docstring)."""

    def __init__(self) -> None:
        self._entries: dict[int, ProducerEntry] = {}
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self._heap: list[tuple[int, int]] = []  # (first offset, producer id); stale ones popped lazily
        # The smallest first offset of an open transaction, or None: what readers read (no lock).
        self.first_unstable_offset: int | None = None
        # Whether a producer batch was ever fed to this table: a log that never saw one has no marker
        # or transaction to skip, and its reads pay nothing for them.
        self.seen_producer_batches = False

    # --- queries ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def entries(self) -> Iterator[ProducerEntry]:
        """Every known producer, by producer id."""
        return iter(sorted(self._entries.values()))

    def open_transaction(self, producer_id: int) -> int | None:
        """The first offset of ``producer_id``'s open transaction here, or None."""
        return self._ongoing.get(producer_id)

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of every open transaction (a copy)."""
        return dict(self._ongoing)

    # --- the checks ------------------------------------------------------------------------------

    def check_data(self, producer_id: int, producer_epoch: int, transactional: bool) -> None:
        """Raise what appending a data batch of this producer must be refused with."""
        entry = self._entries.get(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {producer_epoch} is older than its current epoch {entry.epoch}")
        if not transactional and producer_id in self._ongoing:
            raise InvalidTxnStateError(
                f"producer {producer_id} appends outside its transaction while the transaction is open "
                f"(from offset {self._ongoing[producer_id]})")

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Raise what appending a marker of this producer must be refused with."""
        entry = self._entries.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} has epoch {producer_epoch}, older than its current "
                f"epoch {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} comes from coordinator epoch {coordinator_epoch}, older "
                f"than {entry.coordinator_epoch}")

    # --- applying --------------------------------------------------------------------------------

    def on_data(self, producer_id: int, producer_epoch: int, transactional: bool, first_offset: int,
                last_offset: int, timestamp_ms: int, publish: bool = True) -> None:
        """A data batch of this producer holding ``[first_offset, last_offset]`` was appended. A
        transactional one opens a transaction at ``first_offset`` unless one is open; ``publish``:
        move ``first_unstable_offset`` now (else the caller calls ``publish_first_unstable``)."""
        self.seen_producer_batches = True
        entry = self._entries.get(producer_id)
        coordinator_epoch = -1 if entry is None else entry.coordinator_epoch
        txn_first = NO_OFFSET
        if transactional:
            txn_first = self._ongoing.get(producer_id, NO_OFFSET)
            if txn_first == NO_OFFSET:
                txn_first = first_offset
                self._ongoing[producer_id] = first_offset
                heapq.heappush(self._heap, (first_offset, producer_id))
                if publish:
                    self.publish_first_unstable()
        elif entry is not None:
            txn_first = entry.txn_first_offset if producer_id in self._ongoing else NO_OFFSET
        if entry is not None and producer_epoch < entry.epoch:  # a replay keeps the newest epoch
            producer_epoch = entry.epoch
        self._entries[producer_id] = ProducerEntry(producer_id, producer_epoch, coordinator_epoch, last_offset,
                                                   timestamp_ms, txn_first)

    def on_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                  offset: int, timestamp_ms: int, publish: bool = True) -> CompletedTxn | None:
        """A marker of this producer was appended at ``offset``: its open transaction (if any) is
        closed and returned as a ``CompletedTxn``; the producer's epochs become the marker's.
        ``publish``: move ``first_unstable_offset`` now (else the caller calls
        ``publish_first_unstable``, after publishing what must be visible first)."""
        self.seen_producer_batches = True
        entry = self._entries.get(producer_id)
        if entry is not None:
            producer_epoch = max(producer_epoch, entry.epoch)
            coordinator_epoch = max(coordinator_epoch, entry.coordinator_epoch)
        first = self._ongoing.pop(producer_id, None)
        self._entries[producer_id] = ProducerEntry(producer_id, producer_epoch, coordinator_epoch, offset,
                                                   timestamp_ms, NO_OFFSET)
        if first is None:
            return None
        if publish:
            self.publish_first_unstable()
        return CompletedTxn(producer_id, first, offset, not commit)

    def on_batch(self, header: BatchHeader, producer: ProducerFields | None, marker: Marker | None) -> \
            CompletedTxn | None:
        """Replay one batch read back from the log (recovery, a truncation), in log order: batches
        without a producer block change nothing."""
        if producer is None:
            return None
        if marker is not None:
            return self.on_marker(producer.producer_id, producer.producer_epoch, marker.coordinator_epoch,
                                  marker.commit, header.base_offset, header.max_timestamp)
        self.on_data(producer.producer_id, producer.producer_epoch, producer.transactional, header.base_offset,
                     header.last_offset, header.max_timestamp)
        return None

    def publish_first_unstable(self) -> None:
        """Set ``first_unstable_offset`` (what readers see) to ``pending_first_unstable()``."""
        self.first_unstable_offset = self.pending_first_unstable()

    def pending_first_unstable(self) -> int | None:
        """The first offset of the oldest open transaction as of the last change, published or
        not (stale heap entries are dropped on the way)."""
        heap, ongoing = self._heap, self._ongoing
        while heap and ongoing.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    # --- forgetting ------------------------------------------------------------------------------

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Drop the producers idle for ``expiration_ms`` or longer (by their last batch's timestamp)
        that hold no open transaction (Kafka's producer.id.expiration.ms); returns their ids."""
        expired = [pid for pid, entry in self._entries.items()
                   if pid not in self._ongoing and now_ms - entry.last_timestamp_ms >= expiration_ms]
        for pid in expired:
            del self._entries[pid]
        return expired

    def forget_below(self, log_start_offset: int) -> None:
        """After the log start offset moved (retention, ``delete_records``): forget the producers
        whose last batch is gone and that hold no open transaction."""
        doomed = [pid for pid, entry in self._entries.items()
                  if entry.last_offset < log_start_offset and pid not in self._ongoing]
        for pid in doomed:
            del self._entries[pid]

    def load(self, entries: Iterable[ProducerEntry]) -> None:
        """Replace the table's contents with ``entries`` (a snapshot's), their open transactions
        included."""
        self._entries = {entry.producer_id: entry for entry in entries}
        self._ongoing = {entry.producer_id: entry.txn_first_offset for entry in self._entries.values()
                         if entry.txn_first_offset >= 0}
        self._heap = sorted((first, pid) for pid, first in self._ongoing.items())
        self.seen_producer_batches = self.seen_producer_batches or bool(self._entries)
        self.publish_first_unstable()
