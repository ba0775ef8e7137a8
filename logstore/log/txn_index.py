"""The aborted-transaction index: which transactions were aborted, where their data starts and where
their ABORT marker lies (Kafka's ``.txnindex``).

``TxnIndexEntry`` is one aborted transaction: its producer, the first offset of its data in the
partition, the offset of its ABORT marker, and the last stable offset just after the marker. Entries
are kept in the order of their markers. ``collect_aborted`` answers a read_committed read: the
aborted transactions whose data may lie in ``[start, upper)``.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple, Sequence


class AbortedTxn(NamedTuple):
    """An aborted transaction as a fetch reports it: the producer and the first offset of its data."""

    producer_id: int
    first_offset: int


class TxnIndexEntry(NamedTuple):
    """One aborted transaction of the index (module docstring)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker
    last_stable_offset: int  # the partition's LSO just after the marker

    @property
    def aborted(self) -> AbortedTxn:
        return AbortedTxn(self.producer_id, self.first_offset)


def collect_aborted(entries: Sequence[TxnIndexEntry], last_offsets: Sequence[int], start: int, upper: int,
                    found: list[AbortedTxn]) -> bool:
    """Add to ``found`` the entries (sorted by marker offset; ``last_offsets`` their marker offsets)
    whose marker is at or after ``start`` and whose data starts below ``upper``. Returns True when
    the search may stop: an entry's last stable offset reached ``upper``, so no later entry (here or
    in a later segment) has data below it."""
    for slot in range(bisect.bisect_left(last_offsets, start), len(entries)):
        entry = entries[slot]
        if entry.first_offset < upper:
            found.append(AbortedTxn(entry.producer_id, entry.first_offset))
        if entry.last_stable_offset >= upper:
            return True
    return False
