"""``AbortedFilter``: which batches of a read_committed read belong to aborted transactions.

Built from the aborted transactions that overlap the range read (``Log.aborted_transactions``), it
is fed every batch of the range in offset order, markers included, and answers whether a data batch
is delivered. The rule is the one Kafka's consumers apply to a fetch response:

- aborted transactions wait in a min-heap by first offset; before a transactional batch (data or
  marker) is judged, every one starting at or below the batch's last offset becomes active (its
  producer joins the aborted-producers set): a read that starts at an ABORT marker activates its
  transaction there, so the marker ends it before the producer's next transaction;
- a transactional data batch of an active producer is dropped; any other data batch is delivered;
- a marker of an active producer ends that transaction: the producer leaves the set. (Kafka tests
  that the marker is an ABORT; it must be: a producer's transaction is open from its first offset to
  its next marker, so the first marker after an active aborted transaction's first offset is its
  ABORT. The marker's record need not be decoded for it.)

It exists only when the range overlaps an aborted transaction: other reads pay nothing.
"""

from __future__ import annotations

import heapq
from typing import Iterable

from ..records.decoder import CONTROL, TRANSACTIONAL, BatchHeader, RecordBatch
from .txn_index import AbortedTxn


class AbortedFilter:
    """Feed ``keep`` the batches of a read in offset order (module docstring)."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._waiting = [(txn.first_offset, txn.producer_id) for txn in aborted]
        heapq.heapify(self._waiting)
        self._active: set[int] = set()

    def keep(self, batch: RecordBatch) -> bool:
        """Whether ``batch``'s records are delivered (a marker never is; it is fed here all the same,
        as it ends its transaction)."""
        header: BatchHeader = batch.header
        attributes = header.attributes
        if not attributes & TRANSACTIONAL:
            return True
        producer = batch.producer
        producer_id = -1 if producer is None else producer.producer_id
        waiting = self._waiting
        while waiting and waiting[0][0] <= header.last_offset:  # before a marker too: a read may start at it
            self._active.add(heapq.heappop(waiting)[1])
        if attributes & CONTROL:
            self._active.discard(producer_id)
            return False
        return producer_id not in self._active
