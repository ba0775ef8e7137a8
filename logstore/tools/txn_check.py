"""The transaction part of ``logstore check``: producer state replayed over a partition's batches.

Owns ``TransactionReplay``, which ``check._verify_segment`` feeds every verified batch of a
partition in log order (the same single scan that checks CRCs: no second read). It replays them
into the log's own ``ProducerStateTable``, checking each producer batch first with the table's
append checks, so what the log would have refused when it was appended is an error naming the
segment:

- a batch whose producer epoch is below the producer's epoch of an earlier batch or marker
  (INVALID_PRODUCER_EPOCH), including a transactional batch after its producer's marker with a
  higher epoch;
- a marker written by an older coordinator than the producer's last marker
  (TRANSACTION_COORDINATOR_FENCED);
- a non-transactional producer batch while that producer's transaction is open (INVALID_TXN_STATE).

A marker with no transaction open is allowed (a duplicate marker, or one whose data retention or
the cleaner removed). ``end_segment`` compares the ABORT markers that closed a transaction with
data in a segment with that segment's ``.txnindex`` entries: a missing entry, an entry naming no
ABORT marker of its producer in that segment, or one whose first offset or last stable offset
differs from the replay is an error naming the index file. The first offset and the last stable
offset are compared only where the replay knows the whole history (the log starts at offset 0 and
the topic is not compacted: the cleaner removes aborted and overwritten batches, so a transaction's
first offset can be gone); otherwise an entry's first offset must only not follow what the replay
found. ``finish`` compares the log's last stable offset, when known, with the replay's (the first
offset of the oldest transaction still open, else the log end offset).

Producer snapshots (``log/producer_snapshot.py``): the newest one at or below the log end offset
holds the producer state before its offset, which the replay (when it knows the whole history)
must equal for each producer it lists: epoch, coordinator epoch, last offset and open transaction.
A producer the replay knows may be missing from it (expired, or its batches all below the log
start), unless its transaction is open.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from ..errors import InvalidProducerEpochError, InvalidTxnStateError, TransactionCoordinatorFencedError
from ..log.producer_snapshot import ProducerSnapshot
from ..log.producer_state import ProducerEntry, ProducerStateTable
from .dump import BatchEntry, batch_producer

logger = logging.getLogger(__name__)

Report = Callable[[str, str], None]
"""Records an error: ``(path, message)``."""

_REFUSALS = {InvalidProducerEpochError: "INVALID_PRODUCER_EPOCH", InvalidTxnStateError: "INVALID_TXN_STATE",
             TransactionCoordinatorFencedError: "TRANSACTION_COORDINATOR_FENCED"}


@dataclass(frozen=True)
class ExpectedAbort:
    """An aborted transaction the replay found: what its ``.txnindex`` entry must say.
    ``last_stable_offset`` is None where the replay cannot know it."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int | None


class TransactionReplay:
    """Producer state of one partition replayed batch by batch (see the module docstring).
    ``exact``: the replay sees the partition's whole history (it starts at offset 0, the topic is
    not compacted), so first offsets and last stable offsets are compared exactly. ``snapshot``:
    ``(path, snapshot)`` to compare with the state before its offset."""

    def __init__(self, report: Report, exact: bool, snapshot: tuple[str, ProducerSnapshot] | None = None) -> None:
        self._report = report
        self.exact = exact
        self.table = ProducerStateTable()
        self.next_offset = 0  # the offset after the last batch seen: the log end offset so far
        self._aborts: list[ExpectedAbort] = []  # found in the current segment
        self._markers: dict[int, int] = {}  # ABORT marker offset -> producer id, in the current segment
        self._snapshot = snapshot if exact else None
        self._at_snapshot: dict[int, ProducerEntry] | None = None  # the state before the snapshot's offset

    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the offset after the last batch."""
        first = self.table.pending_first_unstable()
        return self.next_offset if first is None else first

    def batch(self, path: str, entry: BatchEntry) -> None:
        """Replay one verified batch of the segment ``path``."""
        header = entry.header
        if self._snapshot is not None and self._at_snapshot is None and header.base_offset >= self._snapshot[1].offset:
            self._at_snapshot = {state.producer_id: state for state in self.table.entries()}
        self.next_offset = max(self.next_offset, header.last_offset + 1)
        producer, marker = batch_producer(entry)
        if producer is None:
            return
        pid = producer.producer_id
        try:
            if marker is None:
                self.table.check_data(pid, producer.producer_epoch, producer.transactional)
            else:
                self.table.check_marker(pid, producer.producer_epoch, marker.coordinator_epoch)
        except tuple(_REFUSALS) as exc:
            kind = ("a COMMIT marker" if marker.commit else "an ABORT marker") if marker is not None else \
                "a transactional batch" if producer.transactional else "a non-transactional batch"
            self._report(path, f"batch at position {entry.position} (offsets {header.base_offset}.."
                               f"{header.last_offset}): {kind} the log refuses ({_REFUSALS[type(exc)]}): {exc}")
            return  # the log would not have appended it: it changes nothing
        completed = self.table.on_batch(header, producer, marker)
        if marker is not None and not marker.commit:
            self._markers[header.base_offset] = pid
        if completed is not None and completed.aborted:
            self._aborts.append(ExpectedAbort(pid, completed.first_offset, completed.last_offset,
                                              self.last_stable_offset() if self.exact else None))

    def end_segment(self, index_path: str, entries: list[tuple[int, int, int, int]] | None) -> None:
        """Compare the segment's ``.txnindex`` entries ``(producer_id, first_offset, last_offset,
        last_stable_offset)`` (``[]``: no index file; None: nothing to compare, a damaged file) with
        the aborted transactions replayed in it."""
        expected = {abort.last_offset: abort for abort in self._aborts}
        markers, self._aborts, self._markers = self._markers, [], {}
        if entries is None:
            return
        found: set[int] = set()
        for slot, (pid, first, last, stable) in enumerate(entries):
            entry = f"entry {slot} (producer {pid}, offsets {first}..{last}, last stable offset {stable})"
            if markers.get(last) != pid:
                self._report(index_path, f"{entry} names no ABORT marker of producer {pid} at offset {last} "
                                         "in this segment")
                continue
            found.add(last)
            abort = expected.get(last)
            if abort is None:
                continue  # the marker closed nothing the replay saw: its data is gone (retention, cleaner)
            if first != abort.first_offset if self.exact else first > abort.first_offset:
                self._report(index_path, f"{entry}: the transaction's first offset in the log is "
                                         f"{abort.first_offset}")
            if abort.last_stable_offset is not None and stable != abort.last_stable_offset:
                self._report(index_path, f"{entry}: the last stable offset after the marker is "
                                         f"{abort.last_stable_offset}")
        for last, abort in sorted(expected.items()):
            if last not in found:
                self._report(index_path, f"no entry for the transaction of producer {abort.producer_id} aborted "
                                         f"by the marker at offset {last} (first offset {abort.first_offset}): "
                                         "read_committed readers would see its records")

    def finish(self, dir_path: str, log_last_stable_offset: int, log_end_offset: int) -> None:
        """Compare the newest snapshot and the log's last stable offset with the replay's. The log's
        are compared only when the scan ended at its log end offset (a writer may have appended
        after the log was opened: then its numbers are older than the scan)."""
        if self._snapshot is not None:
            self._check_snapshot(*self._snapshot)
        if not self.exact or self.next_offset != log_end_offset:
            return
        replayed = self.last_stable_offset()
        if log_last_stable_offset != replayed:
            open_ones = sorted((first, pid) for pid, first in self.table.open_transactions().items())
            self._report(dir_path, f"the log's last stable offset {log_last_stable_offset} is not the replay's "
                                   f"{replayed} (open transactions by first offset and producer: "
                                   f"{open_ones or 'none'})")

    def _check_snapshot(self, path: str, snapshot: ProducerSnapshot) -> None:
        replayed = self._at_snapshot
        if replayed is None:  # no batch at or after its offset: the state at the end
            replayed = {state.producer_id: state for state in self.table.entries()}
        listed = {entry.producer_id: entry for entry in snapshot.entries}
        for pid, entry in sorted(listed.items()):
            state = replayed.get(pid)
            if state is None:
                self._report(path, f"producer {pid} (epoch {entry.epoch}) has no batch or marker before offset "
                                   f"{snapshot.offset} in the log")
                continue
            found = (entry.epoch, entry.coordinator_epoch, entry.last_offset, entry.txn_first_offset)
            expected = (state.epoch, state.coordinator_epoch, state.last_offset, state.txn_first_offset)
            if found != expected:
                self._report(path, f"producer {pid}: (epoch, coordinator epoch, last offset, open transaction's "
                                   f"first offset) is {found}, the log's batches before offset {snapshot.offset} "
                                   f"say {expected}")
        for pid, state in sorted(replayed.items()):
            if pid not in listed and state.txn_first_offset >= 0:
                self._report(path, f"producer {pid}'s transaction open from offset {state.txn_first_offset} is "
                                   "missing: a load would not know it is open (read_committed readers would read "
                                   "past it)")
