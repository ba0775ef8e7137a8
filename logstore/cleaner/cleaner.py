"""``Cleaner``: one compaction round of one log (Kafka's Cleaner; docs/design.md §8.4).

A round gets the log's cleanable range ``[first_dirty_offset, first_uncleanable_offset)`` (chosen by
``LogCleanerManager``) and:

1. **maps** the dirty section: key -> latest offset, into the memory-bounded ``OffsetMap``, a batch at
   a time (the key column is cut out in one pass; one ``dict.update`` per batch);
1b. **in passes** when the map fills up before the end (``multipass``; Kafka would end the round
   there, and each of its rounds recopies the whole prefix again: 36 passes cost 14× one pass in the
   benchmark). The keys the map holds, the clean section's keys and the rest of the dirty section's
   are spilled, split by key hash, to an unnamed scratch file; each partition is then mapped alone
   (one ``OffsetMap`` pass, split again if it still overflows) and its survivors set in a bitmap:
   one bit per dirty offset, one per clean record (by ordinal). Keys with different hashes never
   decide each other's fate, so the bitmap holds exactly the survivors of a single pass with a big
   enough map, and the round still ends at the first uncleanable offset. Memory: the bitmaps (1M
   offsets: 125 KB) are charged to the buffer, at most half of it, the partition maps get the rest;
   a round whose bitmaps would pass that ends at an earlier segment base (the next round goes on),
   and one that cannot (or whose keys' hashes cannot be split further) is Kafka's round;
2. **groups** the segments below ``end_offset`` (clean section included: the whole prefix is recopied)
   so that each group fits one segment: ``segment.bytes``, ``segment.index.bytes`` for both indexes,
   and 32-bit relative offsets;
3. **recopies** each group into one ``<base>.log.cleaned`` segment, batch by batch, keeping a record
   when it is beyond the mapped range, or has a key and is the latest for it (offset >= the map's, or
   its bit set), and is not a tombstone whose delete horizon has passed. A batch whose records all stay is copied
   byte for byte; otherwise it is rebuilt with the same base offset, last offset, record offsets and
   timestamps, compression and timestamp type. A batch still holding a tombstone gets a delete
   horizon (now + ``delete.retention.ms``) the first time it is recopied; a later round after that
   time drops the tombstones. The last batch of each group stays (empty if need be) so that offsets
   never go backwards and every group still ends where its segments did;
4. **swaps** each group in through ``Log.replace_segments`` (``.cleaned`` -> ``.swap`` -> final), so a
   crash at any step leaves either the old or the new segments. A truncation, or retention taking an
   old segment, between the start and the swap aborts the round (``CleaningAbortedError``) with the
   ``.cleaned`` files removed.

Transactions (``transactions``): the range ends below the first unstable offset; the map skips
markers and aborted data, the recopy drops aborted data, keeps each marker while its transaction has
data in the output and then gives it a delete horizon, keeps producers' last batches (emptied), keeps
producer blocks on rebuilt batches, and gives each cleaned segment the ``.txnindex`` entries whose
ABORT marker it keeps.

Read and written bytes go through the shared ``Throttler`` (``log.cleaner.io.max.bytes.per.second``).
Per-record Python work is a few C-level passes per batch (``map(dict.get)``, ``zip``, ``compress``);
records are built only for batches that are rebuilt.
"""

from __future__ import annotations

import errno
import logging
import tempfile
from dataclasses import dataclass
from bisect import bisect_left, bisect_right
from itertools import compress
from typing import TYPE_CHECKING, Callable, Sequence

from ..errors import CleaningAbortedError, LogStoreError
from ..log.segment import LogSegment
from ..log.txn_filter import AbortedFilter
from ..records.decoder import (COMPRESSION_MASK, CONTROL, HAS_NULL_KEYS, HAS_PRODUCER, TIMESTAMP_TYPE_LOG_APPEND,
                               TRANSACTIONAL, RecordBatch)
from ..records.encoder import assign_base_offset, encode_batch
from .multipass import CLEAN, DIRTY, KeySpill, PassCounts, SpillExhausted, SurvivorBitmap, first_fanout, resolve
from .offset_map import OffsetMap
from .stats import CleanerStats, Throttler
from .transactions import DROP, KEEP, TxnRecopy

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..clock import Clock
    from ..log.log import Log

_INT_MAX = 2**31 - 1
_OFFSET_INDEX_ENTRY_BYTES = 8
_TIME_INDEX_ENTRY_BYTES = 12
_SCAN_CHUNK_BYTES = 256 * 1024  # what LogSegment.iter_batches reads at a time


@dataclass(frozen=True)
class LogToClean:
    """A log chosen for cleaning and its cleanable range (docs/design.md §8.3)."""

    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


class Cleaner:
    """Cleans one log at a time with its own ``OffsetMap`` (one per cleaner thread)."""

    def __init__(self, offset_map: OffsetMap, throttler: Throttler, clock: Clock, *,
                 check_abort: Callable[[Log], bool] | None = None) -> None:
        self.offset_map = offset_map
        self.throttler = throttler
        self._clock = clock
        self._check_abort = check_abort or (lambda log: False)
        self._first_dirty = 0
        self._survivors: list[int] = []
        self._bitmap: SurvivorBitmap | None = None  # a multi-pass round's survivors: dirty offsets,
        self._clean_bitmap: SurvivorBitmap | None = None  # clean records by ordinal,
        self._clean_ordinal = 0  # and the ordinal the recopy has reached
        self._map = offset_map  # the map of the round under way (``clean(offset_map=...)`` may pass another)
        self._txn: TxnRecopy | None = None  # the round's transactional bookkeeping (``transactions``)

    # --- one round -------------------------------------------------------------------------------

    def clean(self, to_clean: LogToClean, progress: Callable[[int], None] | None = None, *,
              offset_map: OffsetMap | None = None) -> CleanerStats:
        """Run one round over ``to_clean`` and return its statistics; ``stats.end_offset`` is the
        new first dirty offset (the cleaner checkpoint). ``progress(bytes)`` is called as bytes are
        read. Raises ``CleaningAbortedError`` when the log changed underneath (nothing swapped for
        the group in progress; groups already swapped stay, they are complete and correct).

        ``offset_map``, when given, is the whole dirty section already mapped by another engine (the
        Spark compaction job): key -> latest offset over exactly [first dirty, first uncleanable).
        The mapping step is skipped and the round covers the whole range; everything else (grouping,
        recopying, tombstones, the swap) is this same code, so both engines give the same result."""
        log = to_clean.log
        stats = CleanerStats(log.name, start_ms=self._clock.time_ms())
        self._bitmap = self._clean_bitmap = None
        stats.first_dirty_offset = to_clean.first_dirty_offset
        stats.size_bytes_before = log.size_bytes
        segments, truncations = log.segments_and_truncations()
        now_ms = stats.start_ms
        if offset_map is not None and log.aborted_transactions(to_clean.first_dirty_offset,
                                                               to_clean.first_uncleanable_offset):
            # A map built by another engine from the records may hold aborted records' offsets (a
            # read_uncommitted scan): an aborted record must never shadow a committed value.
            logger.info("cleaning %s: aborted transactions in its dirty section; mapping it here", log.name)
            offset_map = None
        if offset_map is not None:
            self._map = offset_map
            end_offset = max(to_clean.first_uncleanable_offset, to_clean.first_dirty_offset)
            offset_map.update_latest_offset(end_offset - 1)
        else:
            self._map = self.offset_map
            try:
                end_offset = self.build_offset_map(log, segments, to_clean.first_dirty_offset,
                                                   to_clean.first_uncleanable_offset, stats, progress, truncations)
                if end_offset < to_clean.first_uncleanable_offset:  # the map is full: go on in passes
                    end_offset = self._map_in_passes(log, segments, to_clean, end_offset, stats, progress,
                                                     truncations)
            except (ValueError, TypeError, OSError):
                self._check(log, truncations)  # a segment deleted under the round by a truncation: an abort
                raise
        stats.end_offset = end_offset
        self._first_dirty = to_clean.first_dirty_offset
        if self._bitmap is None:
            # The offsets the map holds, sorted once: in the dirty section they are exactly the survivors.
            self._survivors = self._map.sorted_offsets()
            stats.keys_mapped = len(self._map)
            stats.map_utilization = self._map.utilization
        delete_horizon_ms = now_ms + log.config.delete_retention_ms
        cleanable = [segment for segment in segments[:-1] if segment.base_offset < end_offset]
        if cleanable:
            # Everything recopied lies below the first unstable offset: decided. The aborted
            # transactions of the whole recopied prefix, and the producers' last batches.
            upper = segments[len(cleanable)].base_offset
            self._txn = TxnRecopy(log.aborted_transactions(segments[0].base_offset, upper),
                                  [entry.last_offset for entry in log.producer_state.entries()], now_ms)
        try:
            for group in group_segments_by_size(cleanable, log.config.segment_bytes,
                                                log.config.segment_index_bytes, end_offset):
                self._check(log, truncations)
                self.clean_segments(log, group, truncations, now_ms, delete_horizon_ms, stats, progress)
            if self._clean_bitmap is not None and self._clean_ordinal != self._clean_bitmap.end_offset:
                raise LogStoreError(f"cleaning {log.name}: the recopy met {self._clean_ordinal} records below offset "
                                    f"{self._first_dirty}, the mapping {self._clean_bitmap.end_offset}")
        finally:  # the buffer's memory goes back before the next round
            self._bitmap, self._clean_bitmap, self._survivors = None, None, []
            if self._txn is not None:
                stats.markers_removed = self._txn.markers_removed
                self._txn = None
        stats.size_bytes_after = log.size_bytes
        stats.end_ms = self._clock.time_ms()
        return stats

    def _check(self, log: Log, truncations: int | None) -> None:
        """Abort when the log was truncated since ``truncations`` was read (None: not checked), was
        closed or failed, or its cleaning was cancelled."""
        if ((truncations is not None and log.truncations != truncations) or log.closed or log.failed
                or self._check_abort(log)):
            raise CleaningAbortedError(f"cleaning of {log.name} was aborted (the log was truncated, closed "
                                       "or its cleaning cancelled)")

    # --- 1. the offset map -----------------------------------------------------------------------

    def build_offset_map(self, log: Log, segments: Sequence[LogSegment], start: int, end: int,
                         stats: CleanerStats, progress: Callable[[int], None] | None = None,
                         truncations: int | None = None) -> int:
        """Map keys -> latest offsets over ``[start, end)`` until the map is full; returns the end
        offset of the mapped range (the last mapped offset + 1)."""
        offset_map = self.offset_map
        offset_map.clear()
        offset_map.update_latest_offset(start - 1)
        for keys, offsets, last_offset, _null_keys in self._key_batches(log, segments, start, end, stats, progress,
                                                                          truncations):
            if keys:
                taken = offset_map.put_batch(keys, offsets)
                if taken < len(keys):  # full: this round ends at the last key that fitted
                    if taken == 0 and offset_map.latest_offset < start:
                        raise LogStoreError(
                            f"the cleaner's offset map ({offset_map.memory_bytes} bytes) cannot hold one key "
                            f"of {log.name} at offset {offsets[0]}: raise log.cleaner.dedupe.buffer.size")
                    if taken:
                        offset_map.update_latest_offset(offsets[taken - 1])
                    return offset_map.latest_offset + 1
            offset_map.update_latest_offset(last_offset)
        return max(offset_map.latest_offset + 1, start)

    def _key_batches(self, log: Log, segments: Sequence[LogSegment], start: int, end: int, stats: CleanerStats,
                     progress: Callable[[int], None] | None, truncations: int | None):
        """Yield ``(keys, offsets, last_offset, null_keys)`` for every batch holding offsets in
        ``[start, end)``, its keys and offsets cut to that range (``null_keys``: some keys may be
        None), then ``((), (), next_start - 1, False)`` at the end of each segment (offset gaps at
        segment ends count as mapped). Every batch read is CRC-checked and counted as read. Markers
        and aborted data yield no keys (an aborted record never shadows a committed value)."""
        aborted_filter: AbortedFilter | None = None
        next_bases = [segment.base_offset for segment in segments[1:]] + [2**63 - 1]
        chosen = [segment for segment, next_base in zip(segments, next_bases)
                  if segment.base_offset < end and next_base > start]
        for slot, segment in enumerate(chosen):
            next_start = chosen[slot + 1].base_offset if slot + 1 < len(chosen) else end
            # From the offset index's entry for start, checked against its batch (CorruptIndexError
            # when it lies: a skipped batch would leave its keys out of the map).
            scan = segment.scan_from(start, chunk_bytes=_SCAN_CHUNK_BYTES) if segment.base_offset <= start else \
                segment.scan_headers(0, chunk_bytes=_SCAN_CHUNK_BYTES)
            for batch_position, header, buffer, at in scan:
                batch = segment.load_batch(batch_position, header, buffer, at)
                if header.base_offset >= end:
                    break
                self.throttler.maybe_throttle(header.size_bytes)
                stats.bytes_read += header.size_bytes
                if progress is not None:
                    progress(header.size_bytes)
                if header.last_offset < start:
                    continue
                if header.attributes & TRANSACTIONAL:  # (one bit test per batch for other logs)
                    if aborted_filter is None:
                        aborted_filter = AbortedFilter(log.aborted_transactions(start, end))
                    if not aborted_filter.keep(batch):  # a marker, or aborted data
                        yield (), (), min(header.last_offset, end - 1), False
                        continue
                keys = offsets = ()
                if header.record_count:
                    keys, offsets = batch.keys(), batch.offsets()
                    if header.base_offset < start:
                        first = batch.index_of(start)
                        keys, offsets = keys[first:], offsets[first:]
                    if header.last_offset >= end:  # a range ending inside a batch (the clean section's end)
                        stop = len(offsets) - (header.last_offset - end + 1) if type(offsets) is range else \
                            bisect_left(offsets, end)
                        keys, offsets = keys[:stop], offsets[:stop]
                yield keys, offsets, min(header.last_offset, end - 1), bool(header.attributes & HAS_NULL_KEYS)
            self._check(log, truncations)
            yield (), (), next_start - 1, False

    # --- 1b. mapping in passes -------------------------------------------------------------------

    def _map_in_passes(self, log: Log, segments: Sequence[LogSegment], to_clean: LogToClean, mapped_end: int,
                       stats: CleanerStats, progress: Callable[[int], None] | None, truncations: int | None) -> int:
        """The map filled up at ``mapped_end``: route what it holds, the clean section and the rest
        of the dirty section into a hash-partitioned spill, map it one partition at a time into
        the survivor bitmaps (``multipass``) and return the round's end: the first uncleanable
        offset, or the last segment base whose bitmaps fit half the buffer. When none past
        ``mapped_end`` does, the round is Kafka's: it ends where the map filled.

        Two bitmaps: the dirty section's by offset (its offsets are dense: records as appended),
        the clean section's by record ordinal (its offsets are sparse after earlier cleanings, its
        records about one per key): the n-th record below the first dirty offset, counted in log
        order by this scan and again by the recopy."""
        offset_map = self.offset_map
        first_dirty, first_uncleanable = to_clean.first_dirty_offset, to_clean.first_uncleanable_offset
        capacity = offset_map.capacity_bytes
        fanout = first_fanout(len(offset_map), mapped_end - first_dirty, first_uncleanable - mapped_end,
                              len(offset_map) // 2)
        first_utilization = offset_map.utilization
        counts = PassCounts()
        try:
            with tempfile.TemporaryFile(dir=log.dir_path, prefix=".cleaner-spill-") as scratch:
                spill = KeySpill(scratch.fileno(), fanout, 0, capacity // 4)
                keys, offsets = offset_map.keys_and_offsets()
                offset_map.clear()
                spill.add(keys, offsets, DIRTY)
                del keys, offsets
                clean_records = 0
                for keys, _offsets, _last, null_keys in self._key_batches(
                        log, segments, segments[0].base_offset, first_dirty, stats, progress, truncations):
                    ordinals = range(clean_records, clean_records + len(keys))
                    clean_records += len(keys)
                    keys, ordinals = _keyed(keys, ordinals, null_keys)
                    spill.add(keys, ordinals, CLEAN)
                end = _multi_pass_end(segments, first_dirty, clean_records, mapped_end, first_uncleanable, capacity)
                if end is None:
                    raise SpillExhausted("the survivor bitmap of the clean section would pass half the buffer")
                for keys, offsets, _last, null_keys in self._key_batches(log, segments, mapped_end, end, stats,
                                                                           progress, truncations):
                    spill.add(*_keyed(keys, offsets, null_keys), DIRTY)
                bitmap, clean_bitmap = SurvivorBitmap(first_dirty, end), SurvivorBitmap(0, clean_records)
                reserved = bitmap.memory_bytes + clean_bitmap.memory_bytes
                resolve(spill, offset_map, reserved, bitmap, clean_bitmap, counts,
                        lambda: self._check(log, truncations))
        except SpillExhausted as exc:
            logger.warning("cleaning %s in passes stopped (%s); this round ends where the map filled", log.name, exc)
            return self.build_offset_map(log, segments, first_dirty, first_uncleanable, stats, progress, truncations)
        except OSError as exc:
            if _no_space(exc):
                raise _aborted_by(exc, log) from exc
            raise
        offset_map.clear()
        offset_map.update_latest_offset(end - 1)
        self._bitmap, self._clean_bitmap, self._clean_ordinal = bitmap, clean_bitmap, 0
        stats.passes = 1 + counts.passes
        stats.keys_mapped = counts.keys_mapped
        stats.map_utilization = max(first_utilization, counts.max_utilization)
        return end

    def _kept_by_bitmaps(self, header, offsets: Sequence[int], mapped_up_to: int) -> list[int]:
        """The indexes of the records of a batch that survive, from the bitmaps of a round mapped in
        passes (records below the first dirty offset by ordinal, the others by offset)."""
        base, last, count, first_dirty = header.base_offset, header.last_offset, header.record_count, self._first_dirty
        clean = count if last < first_dirty else 0 if base >= first_dirty else bisect_left(offsets, first_dirty)
        kept = []
        if clean:
            start = self._clean_ordinal
            self._clean_ordinal += clean
            kept = [ordinal - start for ordinal in self._clean_bitmap.between(start, start + clean - 1)]
        if clean < count:
            low, high = max(base, first_dirty), min(last, mapped_up_to)
            kept_offsets = self._bitmap.between(low, high) if low <= high else []
            if last > mapped_up_to:  # the round ended inside this batch: the rest stays
                kept_offsets += [offset for offset in offsets if offset > mapped_up_to]
            if type(offsets) is range:
                kept += [offset - base for offset in kept_offsets]
            else:
                kept += [bisect_left(offsets, offset) for offset in kept_offsets]
        return kept

    # --- 3. recopying a group ----------------------------------------------------------------------

    def clean_segments(self, log: Log, group: Sequence[LogSegment], truncations: int, now_ms: int,
                       delete_horizon_ms: int, stats: CleanerStats,
                       progress: Callable[[int], None] | None = None) -> None:
        """Recopy ``group`` into one ``.cleaned`` segment and swap it in. A full disk aborts the
        round (``CleaningAbortedError``, logged): the copy is removed, the old segments stay."""
        try:
            cleaned = log.new_cleaned_segment(group[0].base_offset)
        except OSError as exc:
            if _no_space(exc):
                raise _aborted_by(exc, log) from exc
            raise
        try:
            for slot, source in enumerate(group):
                last_source = slot == len(group) - 1
                try:
                    self._clean_into(source, cleaned, last_source, now_ms, delete_horizon_ms, stats, progress)
                except (ValueError, TypeError, OSError):
                    if source.deleted:  # deleted under the round (truncation, retention): an abort
                        raise CleaningAbortedError(f"cleaning of {log.name} was aborted: {source.log_path} "
                                                   "was deleted during the round") from None
                    self._check(log, truncations)
                    raise
                self._check(log, truncations)
            if self._txn is not None:
                self._write_txn_index(group, cleaned)
            cleaned.on_become_inactive()
            cleaned.flush()
            log.copy_mtime(group[-1], cleaned)
            if not log.replace_segments([cleaned], group, truncations=truncations, delay_delete=True):
                raise CleaningAbortedError(f"cleaning of {log.name} was aborted: the log changed during the swap")
        except BaseException as exc:
            cleaned.delete()
            if _no_space(exc):
                raise _aborted_by(exc, log) from exc
            raise
        stats.groups += 1

    def _write_txn_index(self, group: Sequence[LogSegment], cleaned: LogSegment) -> None:
        """Give the cleaned segment the aborted-transaction entries of ``group`` whose ABORT marker
        it still holds (``<base>.txnindex.cleaned``, written atomically; it follows the segment
        through the swap). An entry whose marker went goes with it: no reader may be told of an
        aborted transaction whose marker would not end it."""
        written = set(self._txn.markers_written)
        self._txn.markers_written.clear()
        if written:
            entries = [entry for source in group for entry in source.txn_index.entries if entry.last_offset in written]
            if entries:
                cleaned.txn_index.replace(entries)

    def _clean_into(self, source: LogSegment, cleaned: LogSegment, last_source: bool, now_ms: int,
                    delete_horizon_ms: int, stats: CleanerStats, progress: Callable[[int], None] | None) -> None:
        mapped_up_to = self._map.latest_offset
        pending: tuple[RecordBatch, int] | None = None  # the previous batch, written once we know it is not the last
        for _position, batch in source.iter_batches(0):
            header = batch.header
            size = header.size_bytes
            self.throttler.maybe_throttle(size)
            stats.bytes_read += size
            stats.records_read += header.record_count
            if progress is not None:
                progress(size)
            if pending is not None:
                self._write(cleaned, *pending, False, now_ms, delete_horizon_ms, stats)
            pending = (batch, mapped_up_to)
        if pending is not None:
            self._write(cleaned, *pending, last_source, now_ms, delete_horizon_ms, stats)

    def _write(self, cleaned: LogSegment, batch: RecordBatch, mapped_up_to: int, keep_empty: bool, now_ms: int,
               delete_horizon_ms: int, stats: CleanerStats, aborted: bool | None = None) -> bool:
        """Filter ``batch`` and append what survives (or an empty batch when ``keep_empty``).
        ``aborted``: whether it is aborted data (none of its records survive), None when not judged
        yet. Returns whether a batch was appended."""
        header = batch.header
        if aborted is None and header.attributes & HAS_PRODUCER and self._txn is not None:
            return self._write_producer_batch(cleaned, batch, mapped_up_to, keep_empty, now_ms, delete_horizon_ms,
                                             stats)
        count = header.record_count
        base = header.base_offset
        if (base > mapped_up_to and not aborted) or count == 0:
            if count or keep_empty:  # beyond the mapped range, or already empty: as it is
                self._append(cleaned, base, header.last_offset, header.max_timestamp, batch.buffer, stats)
                stats.records_kept += count
                return True
            return False
        offsets = batch.offsets()
        if aborted:
            kept_indexes = []
        elif self._bitmap is not None:  # a round mapped in passes: the survivors of the whole range
            kept_indexes = self._kept_by_bitmaps(header, offsets, mapped_up_to)
        elif base >= self._first_dirty and header.last_offset <= mapped_up_to:
            # Wholly in the mapped dirty section: a record stays exactly when the map holds its
            # offset, so the survivors are a slice of the map's sorted offsets (no per-record lookup).
            survivors = self._survivors
            low = bisect_left(survivors, base)
            kept_offsets = survivors[low:bisect_right(survivors, header.last_offset, low)]
            if type(offsets) is range:
                kept_indexes = [offset - base for offset in kept_offsets]
            else:
                kept_indexes = [bisect_left(offsets, offset) for offset in kept_offsets]
        else:
            keys = batch.keys()
            keep = list(map(int.__ge__, offsets, self._map.latest_offsets(keys)))
            if header.attributes & HAS_NULL_KEYS:  # records without a key are dropped (they cannot be compacted)
                keep = [k and key is not None for k, key in zip(keep, keys)]
            if header.last_offset > mapped_up_to:  # the map ended inside this batch: the rest stays as it is
                keep = [k or offset > mapped_up_to for k, offset in zip(keep, offsets)]
            kept_indexes = list(compress(range(count), keep))
        nulls = batch.null_values()
        horizon = header.delete_horizon_ms
        tombstones_removed = 0
        if nulls is not None:
            if 0 <= horizon <= now_ms:  # the horizon passed: tombstones go (those in the mapped range)
                before = len(kept_indexes)
                kept_indexes = [index for index in kept_indexes if not (nulls[index] and offsets[index] <= mapped_up_to)]
                tombstones_removed = before - len(kept_indexes)
            elif horizon < 0 and any(nulls[index] for index in kept_indexes):
                horizon = delete_horizon_ms  # first recopied with a tombstone: its horizon starts now
        kept = len(kept_indexes)
        stats.records_kept += kept
        stats.tombstones_removed += tombstones_removed
        stats.records_dropped += count - kept
        if kept == count and horizon == header.delete_horizon_ms:
            self._append(cleaned, base, header.last_offset, header.max_timestamp, batch.buffer, stats)
            return True
        if not kept and not keep_empty:
            return False
        if kept * 4 < count:
            records = [batch.record_at(index) for index in kept_indexes]
        else:
            keep = [False] * count
            for index in kept_indexes:
                keep[index] = True
            records = list(compress(batch.iter_records(), keep))
        self._rebuild(cleaned, batch, records, horizon if any(record.value is None for record in records) else -1,
                      stats)
        return True

    def _write_producer_batch(self, cleaned: LogSegment, batch: RecordBatch, mapped_up_to: int, keep_empty: bool,
                              now_ms: int, delete_horizon_ms: int, stats: CleanerStats) -> bool:
        """``_write`` for a batch with a producer block: a transaction's data or marker, or a
        producer's batch outside a transaction (``transactions`` says what stays)."""
        txn = self._txn
        header = batch.header
        attributes = header.attributes
        if attributes & CONTROL:
            action = txn.marker(batch, keep_empty)
            if action == DROP:
                stats.records_dropped += 1
                return False
            stats.records_kept += 1
            if action == KEEP:
                self._append(cleaned, header.base_offset, header.last_offset, header.max_timestamp, batch.buffer,
                             stats)
            else:  # no data of its transaction is left: it goes once the horizon has passed
                self._rebuild(cleaned, batch, [batch.record_at(0)], delete_horizon_ms, stats)
            txn.markers_written.append(header.base_offset)
            return True
        keep_empty = keep_empty or txn.is_producer_last(header.last_offset)  # the producer's epoch survives
        if not attributes & TRANSACTIONAL:
            return self._write(cleaned, batch, mapped_up_to, keep_empty, now_ms, delete_horizon_ms, stats, False)
        written = self._write(cleaned, batch, mapped_up_to, keep_empty, now_ms, delete_horizon_ms, stats,
                              txn.data_aborted(batch))
        if written:  # (even emptied: a replay must still find the marker that closes it)
            txn.data_written(batch.producer.producer_id)
        return written

    def _rebuild(self, cleaned: LogSegment, batch: RecordBatch, records: list, delete_horizon_ms: int,
                 stats: CleanerStats) -> None:
        """Append ``batch`` rebuilt with only ``records`` (its base and last offsets, record offsets
        and timestamps, compression, timestamp type and producer block kept)."""
        header = batch.header
        base = header.base_offset
        attributes = header.attributes
        log_append_time = bool(attributes & TIMESTAMP_TYPE_LOG_APPEND)
        producer = batch.producer if attributes & HAS_PRODUCER else None
        control = attributes & CONTROL  # one record at delta 0: no offset deltas (the format's rule)
        data = encode_batch(records, offset_deltas=None if control else [record.offset - base for record in records],
                            last_offset_delta=header.last_offset_delta, compression=attributes & COMPRESSION_MASK,
                            log_append_time=log_append_time,
                            default_timestamp_ms=header.max_timestamp if log_append_time or not records else -1,
                            delete_horizon_ms=delete_horizon_ms,
                            producer=None if producer is None else tuple(producer[:3]),
                            transactional=producer is not None and producer.transactional,
                            control=bool(control))
        assign_base_offset(data, base)
        max_timestamp = max((record.timestamp_ms for record in records), default=header.max_timestamp)
        self._append(cleaned, base, header.last_offset, max(max_timestamp, -1) if not log_append_time
                     else header.max_timestamp, data, stats)

    def _append(self, cleaned: LogSegment, first_offset: int, last_offset: int, max_timestamp_ms: int, data,
                stats: CleanerStats) -> None:
        cleaned.append(first_offset, last_offset, max_timestamp_ms, data)
        stats.bytes_written += len(data)
        self.throttler.maybe_throttle(len(data))


# --- 2. grouping -----------------------------------------------------------------------------------


def _no_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _aborted_by(exc: OSError, log: Log) -> CleaningAbortedError:
    """What a full disk (``ENOSPC``, a quota) during a group raises: an aborted round, logged,
    dropped and retried later (the log is not marked uncleanable)."""
    logger.warning("cleaning of %s was aborted: %s; its segments stay as they were", log.name, exc)
    return CleaningAbortedError(f"cleaning of {log.name} was aborted: {exc}; its segments stay as they were")


def _multi_pass_end(segments: Sequence[LogSegment], first_dirty: int, clean_records: int, mapped_end: int,
                    first_uncleanable: int, capacity_bytes: int) -> int | None:
    """Where a round mapped in passes ends: ``first_uncleanable`` when the bitmaps (one bit per
    clean record, one per offset from ``first_dirty``) take at most half of the map's capacity;
    else the last segment base past ``mapped_end`` within that bound; None when there is none."""
    limit = first_dirty + (capacity_bytes // 2 - SurvivorBitmap.bytes_for(clean_records)) * 8
    if first_uncleanable <= limit:
        return first_uncleanable
    fitting = [segment.base_offset for segment in segments if mapped_end < segment.base_offset <= limit]
    return fitting[-1] if fitting else None


def _keyed(keys: Sequence[bytes | None], offsets: Sequence[int], null_keys: bool) -> tuple[Sequence, Sequence]:
    """The keys and offsets of the records that have a key (the others never survive)."""
    if not null_keys:
        return keys, offsets
    present = [key is not None for key in keys]
    return list(compress(keys, present)), list(compress(offsets, present))


def group_segments_by_size(segments: Sequence[LogSegment], max_bytes: int, max_index_bytes: int,
                           first_uncleanable_offset: int) -> list[list[LogSegment]]:
    """Greedy groups of consecutive segments, each to become one cleaned segment: a group takes the
    next segment while the sum of log sizes stays <= ``max_bytes``, each index's bytes stay <=
    ``max_index_bytes`` and the group's offsets fit 32-bit relative offsets (docs/design.md §8.4). A
    group always takes at least one segment."""
    groups = []
    remaining = list(segments)
    while remaining:
        group = [remaining.pop(0)]
        log_bytes = group[0].size_bytes
        index_entries = group[0].offset_index.entries
        time_entries = group[0].time_index.entries
        while remaining:
            following = remaining[0]
            last_offset = (remaining[1].base_offset - 1 if len(remaining) > 1 else first_uncleanable_offset - 1)
            if (log_bytes + following.size_bytes > max_bytes
                    or (index_entries + following.offset_index.entries) * _OFFSET_INDEX_ENTRY_BYTES > max_index_bytes
                    or (time_entries + following.time_index.entries) * _TIME_INDEX_ENTRY_BYTES > max_index_bytes
                    or (following.size_bytes and last_offset - group[0].base_offset > _INT_MAX)):
                break
            group.append(remaining.pop(0))
            log_bytes += following.size_bytes
            index_entries += following.offset_index.entries
            time_entries += following.time_index.entries
        groups.append(group)
    return groups
