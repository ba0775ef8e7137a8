"""``TxnRecopy``: what one compaction round decides about transactional batches (Kafka's cleaner
rules for transactions; docs/design.md §8.4).

A round only sees decided transactions: its cleanable range ends at the base of the segment holding
the log's first unstable offset (``LogCleanerManager.cleanable_offsets``), so every transactional
batch it reads belongs to a transaction whose marker is in the log. The recopy walks the whole prefix
in log order and feeds every transactional batch (data and markers) here:

- **aborted data** goes whatever its keys: the aborted transactions of the recopied range
  (``Log.aborted_transactions``) drive the ``AbortedFilter`` a read_committed read uses, so the
  cleaner and the readers agree on what was aborted (the offset map skips the same batches: an
  aborted record never shadows a committed value);
- **a marker stays** while any data batch of its transaction was written to the output (a replay of
  the log, at recovery or after a truncation, must find the marker that closes the transaction, or it
  would find the transaction open and the last stable offset stuck). Once none is, the marker is
  rewritten with a delete horizon (now + ``delete.retention.ms``), as a tombstone is, and a round at
  or after that time drops it;
- **the last batch of each producer** the log still knows (``Log.producer_state``) stays, emptied of
  its records if need be (a marker stays whole: a control batch holds exactly one record), so the
  producer's epoch survives compaction and a restart.

The offsets of the markers written to the output are kept per group, so the cleaned segment's
aborted-transaction index holds exactly the entries whose ABORT marker survives.
"""

from __future__ import annotations

from typing import Iterable

from ..log.txn_filter import AbortedFilter
from ..log.txn_index import AbortedTxn
from ..records.decoder import RecordBatch

KEEP = 0  # a marker stays as it is
SET_HORIZON = 1  # a marker is rewritten with the round's delete horizon
DROP = 2  # a marker goes


class TxnRecopy:
    """The transactional bookkeeping of one round's recopy (module docstring). Fed every
    transactional batch of the recopy in log order."""

    def __init__(self, aborted: Iterable[AbortedTxn], producer_last_offsets: Iterable[int], now_ms: int) -> None:
        self._filter = AbortedFilter(aborted)
        self._producer_last = frozenset(producer_last_offsets)
        self._now_ms = now_ms
        self._data_written: set[int] = set()  # producers with a data batch of their current transaction written
        self.markers_written: list[int] = []  # the offsets of the markers written, in order (per group: reset)
        self.markers_removed = 0

    def is_producer_last(self, last_offset: int) -> bool:
        """Whether the batch ending at ``last_offset`` is the last batch of a producer the log knows."""
        return last_offset in self._producer_last

    def data_aborted(self, batch: RecordBatch) -> bool:
        """Whether the transactional data batch ``batch`` belongs to an aborted transaction."""
        return not self._filter.keep(batch)

    def data_written(self, producer_id: int) -> None:
        """A data batch (even emptied) of ``producer_id``'s transaction was written to the output."""
        self._data_written.add(producer_id)

    def marker(self, batch: RecordBatch, keep_anyway: bool) -> int:
        """What happens to the marker ``batch``: ``KEEP``, ``SET_HORIZON`` or ``DROP``.
        ``keep_anyway``: it must stay (the last batch of its group); it stays as it is then."""
        self._filter.keep(batch)  # ends its producer's aborted transaction, if any
        producer = batch.producer
        producer_id = -1 if producer is None else producer.producer_id
        header = batch.header
        if producer_id in self._data_written:  # its transaction still has data in the output
            self._data_written.discard(producer_id)
            return KEEP
        if keep_anyway or header.last_offset in self._producer_last:
            return KEEP
        horizon = header.delete_horizon_ms
        if horizon < 0:
            return SET_HORIZON
        if horizon <= self._now_ms:
            self.markers_removed += 1
            return DROP
        return KEEP
