"""``SegmentReads``: the part of ``LogSegment`` that returns records: ``read`` (a consumer's fetch,
within a byte and a record budget), ``iter_record_runs`` (scans), ``iter_batch_slices`` (whole
verified batches, for column-wise consumers), and the point reads of cached batch heads
(``read_one_cached``: large batches verified once are remembered, so later point reads into them read
only a cached head, ``fetch.HEAD_CACHE``, and the record's own bytes).

Each walks the batches from the offset index entry at or below the start (``scan_from``, which
checks the entry against its batch), verifies every batch it uses, and charges a budget per batch
(``fetch.take_records``). After a one-record batch the batches that follow in the same buffer go
through ``record_builder.take_single_record_batches``, which unpacks, checks and builds runs of
small batches with a few C-level calls and hands anything unusual back to the general path.

A base class of ``LogSegment`` (it works on the segment's data file, indexes and caches), kept apart
so that each module stays about one thing. Reads may run concurrently with appends (bounded by the
size snapshot ``end``).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from functools import partial
from typing import Iterator

from ..errors import CorruptIndexError
from ..records.decoder import COMPRESSION_MASK, HEADER_BYTES, BatchHeader, Record, RecordBatch, columns_bytes
from ..records.fetch import HEAD_CACHE, CachedHead, take_records
from ..records.record_builder import NO_LIMIT, PointHead, take_single_record_batches

_SMALL_CHUNK_BYTES = 16 * 1024
_LARGE_CHUNK_BYTES = 1024 * 1024
PARTIAL_READ_MIN_BYTES = 32 * 1024  # batches at least this large may be read partially
VERIFIED_CACHE_ENTRIES = 65536
_RUN_RECORDS = 512  # the records of one-record batches ``iter_record_runs`` yields at a time
_CACHED_KEYS_MAX_BYTES = 64 * 1024  # a cached batch head keeps the keys blob up to this size


def _NO_FETCH(at_in_body: int, size_bytes: int) -> bytes:
    raise AssertionError("a batch head was asked for body bytes while being built")


class SegmentReads:
    """``read``, ``iter_record_runs`` and ``iter_batch_slices`` of a ``LogSegment`` (which supplies
    ``scan_from``, ``scan_headers``, ``load_batch``, its file, indexes and caches)."""

    def _batch_for_read(self, position: int, header: BatchHeader, buffer: memoryview, at: int,
                        wanted_bytes: int) -> RecordBatch:
        """The batch at ``position``, partially when only a little of a large, uncompressed batch
        whose CRC was verified earlier in this process is wanted: then only its columns and the
        wanted key, value and header bytes are read."""
        size = header.size_bytes
        if (at + size <= len(buffer) or size < PARTIAL_READ_MIN_BYTES or wanted_bytes * 4 >= size
                or header.attributes & COMPRESSION_MASK):
            return self.load_batch(position, header, buffer, at)
        cached = HEAD_CACHE.get((self._token, position))
        if cached is not None:
            return cached
        if position not in self._verified:
            # The first point read into this batch reads and verifies all of it; its head (header,
            # columns and small keys) goes to the cache from those bytes, for the next point reads.
            batch = self.load_batch(position, header, buffer, at)
            self._cache_head(position, header, batch.buffer)
            return batch
        head_bytes = HEADER_BYTES + columns_bytes(header)
        if at + head_bytes <= len(buffer):
            head = bytes(buffer[at : at + head_bytes])
        else:
            head = self.file.pread(head_bytes, position)
        keys_bytes = RecordBatch(header, head, _NO_FETCH).columns.blob_bytes[0]
        if keys_bytes <= _CACHED_KEYS_MAX_BYTES:  # keep the keys too: a point read then reads one value
            head += self._pread_body(position + HEADER_BYTES, head_bytes - HEADER_BYTES, keys_bytes)
        return self._cache_head(position, header, head)

    def _cache_head(self, position: int, header: BatchHeader, data) -> RecordBatch:
        """Cache the head (header, columns and, when small, the keys) of the verified batch at
        ``position``, cut from ``data`` (the head, or the whole batch), and return it as a partial
        batch that reads other bytes through the segment."""
        head_bytes = HEADER_BYTES + columns_bytes(header)
        partial_batch = RecordBatch(header, bytes(data[:head_bytes]), _NO_FETCH)
        keys_bytes = partial_batch.columns.blob_bytes[0]
        if keys_bytes <= _CACHED_KEYS_MAX_BYTES and len(data) >= head_bytes + keys_bytes:
            head = bytes(data[: head_bytes + keys_bytes])
        else:
            head = partial_batch.buffer
        batch = CachedHead(header, head, partial(self._pread_body, position + HEADER_BYTES))
        HEAD_CACHE.put((self._token, position), batch)
        if len(self._cached_positions) >= VERIFIED_CACHE_ENTRIES:
            self._cached_bases.clear()
            self._cached_positions.clear()
        if header.base_offset not in self._cached_positions:
            self._cached_positions[header.base_offset] = position  # before the base: readers bisect the bases
            insort(self._cached_bases, header.base_offset)
        return batch

    def _pread_body(self, body_position: int, at_in_body: int, size_bytes: int) -> bytes:
        """Bytes of a batch body, read through the segment's current file (never a remembered
        descriptor, which a closed segment may have handed to another file)."""
        return self.file.read_exact(size_bytes, body_position + at_in_body)

    def read_one_cached(self, offset: int) -> Record | None:
        """The record at ``offset`` when the head of its batch is cached from an earlier point read
        (the fast path of ``Log.read`` for one record); None when the general path must run. The
        batch is found among the cached ones by its base offset (a verified header's, so no index
        entry needs confirming): the last cached batch starting at or below ``offset`` holds it, or
        none does."""
        bases = self._cached_bases
        slot = bisect_right(bases, offset) - 1
        if slot < 0 or self.indexes_distrusted:
            return None
        position = self._cached_positions.get(bases[slot])
        cached = HEAD_CACHE.get((self._token, position))
        if cached is None:
            return None
        point = cached.point
        if point is None:
            point = cached.point = PointHead(cached, position + HEADER_BYTES, self.file.read_exact)
        return point.record(offset)

    def read(self, start_offset: int, max_bytes: int, max_records: int, end: int | None = None,
             min_one: bool = True, end_offset: int = 2**63 - 1) -> tuple[list[Record], int, bool]:
        """Records with ``start_offset`` <= offset < ``end_offset`` from this segment, within
        ``max_bytes`` of charged bytes and ``max_records`` records (at least one when ``min_one``
        and any exists). Returns the records, the bytes charged, and whether the read is complete (a
        limit was reached, so the caller must not continue into the next segment). ``end`` bounds
        the bytes read (a size snapshot); ``end_offset`` is the log end offset the reader saw, so a
        batch an append has written but not yet published is never returned."""
        end = self.size_bytes if end is None else end
        entry = self._index_entry(start_offset)
        position = entry.position
        records: list[Record] = []
        charged = 0
        cached = HEAD_CACHE.get((self._token, position))
        if cached is not None and cached.header.base_offset != entry.offset and position:
            raise CorruptIndexError(f"offset index {self.offset_index.path} entry {tuple(entry)} does not point "
                                    f"at a batch starting at that offset")
        if cached is not None and cached.header.base_offset <= start_offset <= cached.header.last_offset:
            # A point read in a batch read before: no header scan, no column read.
            charged, done = take_records(cached, start_offset, end_offset, max_bytes, max_records, records, min_one)
            if done:
                return records, charged, True
            position += cached.header.size_bytes
        # What the read may want: one record (``max_records=1``, a point read however it is asked)
        # wants a small read and a cached head, whatever ``max_bytes`` allows.
        wanted_bytes = max_bytes if max_records > 1 else 0
        chunk_bytes = min(max(2 * wanted_bytes, _SMALL_CHUNK_BYTES), _LARGE_CHUNK_BYTES)
        scan = self.scan_from(start_offset, end, chunk_bytes, entry) if position == entry.position else \
            self.scan_headers(position, end, chunk_bytes)
        while True:
            item = next(scan, None)
            if item is None:
                return records, charged, False
            batch_position, header, buffer, at = item
            if header.base_offset >= end_offset:
                return records, charged, True
            if header.record_count == 0 and header.last_offset >= start_offset:
                # Verified, though it adds nothing: a damaged count must not hide a batch's records.
                self.load_batch(batch_position, header, buffer, at)
            elif header.last_offset >= start_offset:
                batch = self._batch_for_read(batch_position, header, buffer, at, wanted_bytes - charged)
                cost, done = take_records(batch, start_offset, end_offset, max_bytes - charged, max_records,
                                          records, min_one and not records)
                charged += cost
                if done:
                    return records, charged, True
            if header.record_count > 1:  # else the one-record batches that follow, in the fast loop
                continue
            run_at, limit = at + header.size_bytes, min(len(buffer), end - batch_position + at)
            following, cost, done = take_single_record_batches(buffer.obj, run_at, limit, start_offset, end_offset,
                                                               max_bytes - charged, max_records - len(records),
                                                               records, min_one and not records)
            charged += cost
            if done:
                return records, charged, True
            if following != run_at:  # go on in the same buffer, as the scan would have
                scan = self.scan_headers(following + batch_position - at, end, chunk_bytes, buffer, batch_position - at)

    def iter_record_runs(self, start_offset: int, stop_offset: int, end: int | None = None) -> Iterator:
        """``(records, next_offset)`` for the records with offsets in [start_offset, stop_offset) within
        the first ``end`` bytes: ``records`` iterates ``Record`` (lazily built for a large batch, at once
        for one-record batches), ``next_offset`` follows the batches it covers (a resumed scan's start)."""
        end = self.size_bytes if end is None else end
        scan = self.scan_from(start_offset, end, _LARGE_CHUNK_BYTES)
        while True:
            item = next(scan, None)
            if item is None:
                return
            batch_position, header, buffer, at = item
            if header.base_offset >= stop_offset:
                return
            if header.last_offset >= start_offset:
                batch = self.load_batch(batch_position, header, buffer, at)  # empty ones too (see ``read``)
                if header.record_count:
                    first = batch.index_of(start_offset) if header.base_offset < start_offset else 0
                    stop = batch.index_of(stop_offset) if header.last_offset >= stop_offset else header.record_count
                    if first < stop:
                        yield batch.iter_records(first, stop), header.next_offset
            if header.record_count > 1:
                continue
            run_at, limit = at + header.size_bytes, min(len(buffer), end - batch_position + at)
            following = run_at
            while True:
                # Runs of at most _RUN_RECORDS: a consumer drops one run before the next is built, so
                # the records alive at once stay below the collector's young-generation threshold
                # (700 allocations) and no collection runs; a whole buffer's run (thousands of
                # records) set off collections that traversed every long-lived object again.
                records: list[Record] = []
                following, _, done = take_single_record_batches(buffer.obj, following, limit, start_offset,
                                                                stop_offset, NO_LIMIT, _RUN_RECORDS, records, False)
                if records:
                    yield records, records[-1].offset + 1
                if not done or len(records) < _RUN_RECORDS:
                    break
            if done:
                return
            if following != run_at:
                scan = self.scan_headers(batch_position - at + following, end, _LARGE_CHUNK_BYTES, buffer,
                                         batch_position - at)

    def iter_batch_slices(self, start_offset: int, stop_offset: int, end: int | None = None,
                          include_empty: bool = False) -> Iterator:
        """``(batch, first, stop)`` for every non-empty verified batch holding offsets in
        [start_offset, stop_offset) within the first ``end`` bytes: records [first, stop) of the
        batch are the ones in range. For column-wise consumers (Arrow) that take whole columns.
        ``include_empty``: also the batches holding offsets in range but no record in it (an empty
        batch, or a compacted one whose records in range were removed), with first == stop."""
        for batch_position, header, buffer, at in self.scan_from(start_offset, end, _LARGE_CHUNK_BYTES):
            if header.base_offset >= stop_offset:
                return
            if header.last_offset < start_offset:
                continue
            batch = self.load_batch(batch_position, header, buffer, at)  # empty ones too (see ``read``)
            if header.record_count == 0:
                if include_empty:
                    yield batch, 0, 0
                continue
            first = batch.index_of(start_offset) if header.base_offset < start_offset else 0
            stop = batch.index_of(stop_offset) if header.last_offset >= stop_offset else header.record_count
            if first < stop or include_empty:
                yield batch, first, max(first, stop)
