"""``LogSegment``: one data file of a partition plus its offset and time indexes.

A segment with base offset 368769 lives in ``00000000000000368769.log`` (record batches, back to
back), ``00000000000000368769.index`` and ``00000000000000368769.timeindex``. The base offset is a
lower bound on the offsets inside. Only the last segment of a log (the active one) receives appends.

The data file is a ``FileRecords`` (writes at the logical size, ``pread`` or, for a writer's point
reads, a read-only mapping under the rules that keep SIGBUS away). Besides the files, appends, header
scans and its life cycle, the segment owns:

- **Returning records**: ``read`` (a consumer's fetch, within a byte and a record budget),
  ``iter_record_runs`` (scans), ``iter_batch_slices`` (whole verified batches, for column-wise
  consumers) and point reads of cached batch heads (``read_one_cached``: large batches verified once
  are remembered, so later point reads into them read only a cached head, ``fetch.HEAD_CACHE``, and
  the record's own bytes). Each walks the batches from the offset index entry at or below the start
  (``scan_from``, which checks the entry against its batch), verifies every batch it uses, and
  charges a budget per batch (``fetch.take_records``). After a one-record batch the batches that
  follow in the same buffer go through ``record_builder.take_single_record_batches``, which unpacks,
  checks and builds runs of small batches with a few C-level calls and hands anything unusual back
  to the general path.
- **Rebuilding and cutting**: ``recover`` re-verifies every batch of the data file (both CRCs,
  offsets increasing and inside the segment's 32-bit range), rebuilds both indexes from what is valid
  and, when asked, cuts the invalid tail. Given the log's recovery point it resumes instead from the
  offset index entry at or below it (the bytes before were fsynced with their entries), once the
  batch there and the time index's last entry before it confirm them: after a crash only the bytes
  past the recovery point are read. One pass over large reads; new index entries are written in bulk
  at the end. ``truncate_to`` removes whole batches from an offset on. The loader decides *whether*
  bytes may be cut (a crash's torn tail may; damage may not: ``damage``); the segment only does it.

Lookups by timestamp, and the segment's largest timestamp, are ``time_lookup``'s (it sees the segment
through a narrow protocol).

Not thread-safe for writers: the owning ``Log`` serialises appends, truncation and recovery. Reads
may run concurrently with appends (they are bounded by a size snapshot taken by the caller).
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right, insort
from functools import partial
from itertools import chain
from typing import Iterator

from ..clock import Clock
from ..errors import CorruptIndexError, CorruptRecordError, LogSegmentOffsetOverflowError
from ..fs import MAPPING_HOLDS_DESCRIPTOR, FileSystem
from ..records.decoder import (COMPRESSION_MASK, CONTROL, HEADER_BYTES, LOG_OVERHEAD_BYTES, BatchHeader, Record,
                               RecordBatch, body_at, columns_bytes, read_header)
from ..records.fetch import HEAD_CACHE, CachedHead, take_records
from ..records.record_builder import NO_LIMIT, PointHead, take_single_record_batches
from .file_records import FileRecords
from .index import OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset
from .time_lookup import load_max_timestamp
from .txn_index import TXN_INDEX_SUFFIX, TransactionIndex

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_MAX_RELATIVE_OFFSET = 2**31 - 1
_MAX_SEGMENT_BYTES = 2**31 - 1
_READ_CHUNK_BYTES = 256 * 1024
_SMALL_CHUNK_BYTES = 16 * 1024
_LARGE_CHUNK_BYTES = 1024 * 1024
_RECOVERY_READ_BYTES = 1024 * 1024  # one read for many batches (a larger batch is read whole); 8 MiB measured slower: each fresh buffer costs page faults
PARTIAL_READ_MIN_BYTES = 32 * 1024  # batches at least this large may be read partially
VERIFIED_CACHE_ENTRIES = 65536
_RUN_RECORDS = 512  # the records of one-record batches ``iter_record_runs`` yields at a time
_CACHED_KEYS_MAX_BYTES = 64 * 1024  # a cached batch head keeps the keys blob up to this size


def _NO_FETCH(at_in_body: int, size_bytes: int) -> bytes:
    raise AssertionError("a batch head was asked for body bytes while being built")


def file_prefix(base_offset: int) -> str:
    """The 20-digit zero-padded name prefix of a segment's files."""
    return f"{base_offset:020d}"


class LogSegment:
    """One segment: data file, ``OffsetIndex`` and ``TimeIndex``. Open with ``LogSegment.open``."""

    def __init__(self, fs: FileSystem, clock: Clock, dir_path: str, base_offset: int, *,
                 index_interval_bytes: int, max_index_size_bytes: int, writable: bool = True,
                 file_suffix: str = "", create: bool = False) -> None:
        self._fs = fs
        self._clock = clock
        self.dir_path = dir_path
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size_bytes = max_index_size_bytes
        self.writable = writable
        prefix = os.path.join(dir_path, file_prefix(base_offset))
        self.file = FileRecords(fs, prefix + LOG_SUFFIX + file_suffix, create=create, writable=writable)
        offset_index = None
        try:
            if self.file.size_bytes > _MAX_SEGMENT_BYTES:
                raise CorruptRecordError(f"segment {self.log_path} is larger than 2 GiB ({self.size_bytes} bytes)")
            offset_index = OffsetIndex(fs, prefix + INDEX_SUFFIX + file_suffix, base_offset,
                                       max_index_size_bytes, writable=writable)
            self.time_index = TimeIndex(fs, prefix + TIME_INDEX_SUFFIX + file_suffix, base_offset,
                                        max_index_size_bytes, writable=writable)
        except BaseException:  # release what was opened: nothing leaks when opening fails half-way
            if offset_index is not None:
                offset_index.close_handlers()
            self.file.close()
            raise
        self.offset_index = offset_index
        # The aborted transactions whose marker is here (no file until the first one; a new segment has none).
        self.txn_index = TransactionIndex(fs, prefix + TXN_INDEX_SUFFIX + file_suffix, writable=writable,
                                          present=False if create else None)
        self.created_ms = clock.time_ms()
        self._rolling_based_timestamp: int | None = None
        self._max_timestamp: TimestampOffset | None = None  # unknown until first needed
        self.bytes_since_last_index_entry = 0
        self.deleted = False
        # Positions of large batches whose CRC was verified since open: later point reads may read
        # just their columns and one record's bytes, trusting that verification (checking it again
        # would mean reading the whole batch). Cleared whenever bytes are cut or rewritten (and the
        # token, which keys this segment's entries in HEAD_CACHE, replaced). Point reads find those
        # entries by ``_cached_bases`` (base offsets, sorted) and ``_cached_positions`` (-> position).
        self._forget_verified()
        self.indexes_distrusted = False  # a read-only view found them lying: it scans instead
        self.confirmed_max_timestamp: TimestampOffset | None = None  # checked against its batch
        self.active = False  # the last segment of its log (``activate``)

    @property
    def log_path(self) -> str:
        return self.file.path

    @property
    def size_bytes(self) -> int:
        """Bytes of complete batches in the data file (its logical size)."""
        return self.file.size_bytes

    @size_bytes.setter
    def size_bytes(self, size_bytes: int) -> None:  # a read-only view bounds itself to a valid prefix
        self.file.size_bytes = size_bytes

    # --- offsets and timestamps ------------------------------------------------------------------

    @property
    def max_timestamp_so_far(self) -> TimestampOffset:
        """The largest record timestamp in the segment and the offset of the batch holding it
        (``(-1, base_offset)`` when none); loaded from the time index on first use."""
        if self._max_timestamp is None:
            self._max_timestamp = load_max_timestamp(self)
        return self._max_timestamp

    def can_hold(self, last_offset: int) -> bool:
        return 0 <= last_offset - self.base_offset <= _MAX_RELATIVE_OFFSET

    # --- appending -------------------------------------------------------------------------------

    def append(self, first_offset: int, last_offset: int, max_timestamp_ms: int, data) -> None:
        """Write one batch (``data``: bytes, or a list of buffers written with one ``pwritev``)
        whose offsets are assigned, ``first_offset``..``last_offset``, at the end.

        Raises ``LogSegmentOffsetOverflowError`` (nothing written) when ``last_offset`` does not fit
        this segment's 32-bit relative offsets. ``OSError`` propagates; the size is unchanged."""
        size = len(data) if type(data) is not list else sum(map(len, data))
        if not size:
            return
        if not 0 <= last_offset - self.base_offset <= _MAX_RELATIVE_OFFSET:
            raise LogSegmentOffsetOverflowError(
                f"offset {last_offset} does not fit in segment {self.log_path} (base {self.base_offset})")
        self._write(first_offset, last_offset, max_timestamp_ms, data, size)

    def append_unless_roll(self, offset: int, timestamp_ms: int, data: bytes, max_segment_bytes: int,
                           max_segment_ms: int, now_ms: int | None) -> bool:
        """``should_roll`` and, unless it says roll (then False, nothing written), ``append`` of the
        one-record batch ``data`` at ``offset``, in one call: the log's one-record appends, where
        such per-batch work is most of the cost. ``now_ms`` None: the clock is read if needed."""
        size = len(data)
        position = self.file.size_bytes
        if position > max_segment_bytes - size or not 0 <= offset - self.base_offset <= _MAX_RELATIVE_OFFSET:
            return False
        if position:
            first = self._rolling_based_timestamp
            if first is None:
                first = self.read_first_batch_timestamp()
            if first < 0:  # no record time to go by: the segment's age
                waited = (self._clock.time_ms() if now_ms is None else now_ms) - self.created_ms
            else:
                waited = timestamp_ms - first
            if waited > max_segment_ms:
                return False
        if self.offset_index.is_full() or self.time_index.is_full():
            return False
        self._write(offset, offset, timestamp_ms, data, size)
        return True

    def _write(self, first_offset: int, last_offset: int, max_timestamp_ms: int, data, size: int) -> None:
        # Once per append, one-record batches included: each attribute is read once, and the
        # sparse index entries cost one comparison unless ``index.interval.bytes`` was crossed.
        file = self.file
        position = file.size_bytes
        if position + size > _MAX_SEGMENT_BYTES:
            raise LogSegmentOffsetOverflowError(f"segment {self.log_path} would grow past 2 GiB")
        if position == 0:
            self._rolling_based_timestamp = max_timestamp_ms
        index_due = self.bytes_since_last_index_entry > self.index_interval_bytes
        if index_due:
            # Disk blocks for the index entries first: on a full disk nothing is written.
            self.offset_index.reserve()
            self.time_index.reserve()
        file.append(data)
        maximum = self._max_timestamp
        if maximum is None:
            maximum = self.max_timestamp_so_far
        if max_timestamp_ms > maximum[0]:
            self._max_timestamp = TimestampOffset(max_timestamp_ms, last_offset)
        if index_due:
            self.offset_index.append(first_offset, position)
            self.time_index.maybe_append(*self._max_timestamp_pair())
            self.bytes_since_last_index_entry = size
        else:
            self.bytes_since_last_index_entry += size

    def _max_timestamp_pair(self) -> tuple[int, int]:
        maximum = self.max_timestamp_so_far
        return maximum.timestamp_ms, maximum.offset

    def undo_partial_write(self) -> None:
        """After a failed write, cut anything written past the logical size."""
        self.file.undo_partial_write()

    # --- reading ---------------------------------------------------------------------------------

    def scan_headers(self, position: int = 0, end: int | None = None, chunk_bytes: int = _READ_CHUNK_BYTES,
                     buffer: memoryview = memoryview(b""), buffer_position: int = -1) -> Iterator[tuple]:
        """Yield ``(position, header, buffer, at)`` for consecutive batches from ``position`` up to
        ``end`` (default: the size), reading ``chunk_bytes`` at a time (after ``buffer``, the file's
        bytes from ``buffer_position``, when given). ``buffer[at:]`` starts the batch but may hold only
        part of it (``load_batch`` completes it). Stops quietly at an incomplete batch (one that runs
        past ``end``); raises ``CorruptRecordError`` at a damaged header."""
        end = self.size_bytes if end is None else end
        where = f" in {self.log_path}"
        buffer_position = position if buffer_position < 0 else buffer_position
        while position < end:
            at = position - buffer_position
            if len(buffer) - at < HEADER_BYTES:
                buffer = memoryview(self.file.pread(min(chunk_bytes, end - position), position))
                buffer_position, at = position, 0
            header = read_header(buffer, at, where, whole=False)
            if header is None or position + header.size_bytes > end:
                return
            yield position, header, buffer, at
            position += header.size_bytes

    def load_batch(self, position: int, header: BatchHeader, buffer: memoryview, at: int) -> RecordBatch:
        """The verified batch at ``position`` (from ``buffer`` when it holds all of it)."""
        size = header.size_bytes
        if at + size <= len(buffer):
            data = buffer[at : at + size]
        else:
            data = memoryview(self.file.pread(size, position))
            if len(data) < size:
                raise CorruptRecordError(f"batch at position {position} of {self.log_path} is cut short")
        batch = RecordBatch(header, data)
        batch.verify(f" in {self.log_path}", position)  # always: whole-batch reads are never trusted blindly
        if size >= PARTIAL_READ_MIN_BYTES:
            self._remember_verified(position)
        return batch

    def _forget_verified(self) -> None:
        self._next_offset: tuple[int, int] | None = None  # (size, read_next_offset at that size)
        self._verified: set[int] = set()
        self._token = object()
        self._cached_bases: list[int] = []
        self._cached_positions: dict[int, int] = {}

    def _remember_verified(self, position: int) -> None:
        if len(self._verified) >= VERIFIED_CACHE_ENTRIES:
            self._verified.clear()
        self._verified.add(position)

    def _index_entry(self, offset: int) -> OffsetPosition:
        """The offset index's floor entry for ``offset``, or ``(base, 0)`` when the index is
        distrusted (a read-only view that found it wrong)."""
        if self.indexes_distrusted:
            return OffsetPosition(self.base_offset, 0)
        return self.offset_index.lookup(offset)

    def scan_from(self, offset: int, end: int | None = None, chunk_bytes: int = _SMALL_CHUNK_BYTES,
                  entry: OffsetPosition | None = None):
        """``scan_headers`` from the offset index's floor entry for ``offset`` (or ``entry``), once the
        entry is confirmed by the data: the batch at its position starts at its offset. Every read
        that starts from the offset index goes through here (one check per lookup, not per record):
        a lying entry would make it skip or repeat records, so this raises ``CorruptIndexError``
        instead (the ``Log`` rebuilds the indexes, or a read-only view stops using them). A floor
        entry's offset is <= ``offset`` even in a damaged index (the binary search only moves past
        keys <= it), so a confirmed entry is a safe place to start."""
        entry = self._index_entry(offset) if entry is None else entry
        position, size = entry.position, self.size_bytes
        end = size if end is None else end
        if not position or (size > position >= end):  # the start; or past a size snapshot, appended since
            return self.scan_headers(position, end, chunk_bytes)
        lie = f"offset index {self.offset_index.path} entry {tuple(entry)}"
        if not 0 < position < size:
            raise CorruptIndexError(f"{lie} points outside the {size} bytes of {self.log_path}")
        scan = self.scan_headers(position, end, chunk_bytes)
        try:
            first = next(scan, None)
        except CorruptRecordError as exc:
            raise CorruptIndexError(f"{lie} points where no valid batch starts: {exc}") from None
        if first is None or first[1].base_offset != entry.offset:
            raise CorruptIndexError(f"{lie} does not point at a batch starting at that offset")
        return chain((first,), scan)

    def distrust_indexes(self) -> None:
        """Stop using the indexes (a read-only view cannot rebuild them): lookups scan from the start."""
        self.indexes_distrusted = True
        self._max_timestamp = None  # perhaps read from the time index: scanned when next needed
        self._forget_verified()

    def iter_batches(self, position: int = 0, end: int | None = None) -> Iterator[tuple[int, RecordBatch]]:
        """Yield ``(position, batch)`` for consecutive verified batches (see ``scan_headers``)."""
        for batch_position, header, buffer, at in self.scan_headers(position, end):
            yield batch_position, self.load_batch(batch_position, header, buffer, at)

    def translate_offset(self, offset: int, starting_position: int = 0, end: int | None = None,
                         chunk_bytes: int = _SMALL_CHUNK_BYTES) -> tuple[int, BatchHeader] | None:
        """The first batch (position, header) whose last offset is >= ``offset``, or None."""
        entry = self._index_entry(offset)
        scan = (self.scan_from(offset, end, chunk_bytes, entry) if entry.position >= starting_position
                else self.scan_headers(starting_position, end, chunk_bytes))
        for batch_position, header, _, _ in scan:
            if header.last_offset >= offset:
                return batch_position, header
        return None

    def read_next_offset(self) -> int:
        """The offset after the last batch (the base offset when empty). Reads from the last index
        entry to the end, headers only."""
        size = self.size_bytes
        known = self._next_offset
        if known is not None and known[0] == size and self.writable:  # an open asks more than once
            return known[1]
        next_offset = self.base_offset
        try:
            scan = self.scan_from(2**63 - 1)
        except CorruptIndexError as exc:  # the result is right either way: no repair here, only slower
            logger.warning("%s; scanning %s from its start for its next offset", exc, self.log_path)
            scan = self.scan_headers(0, chunk_bytes=_SMALL_CHUNK_BYTES)
        for _, header, _, _ in scan:
            next_offset = header.next_offset
        self._next_offset = (size, next_offset)
        return next_offset

    def read_header_at(self, position: int) -> BatchHeader | None:
        """The header of the batch at ``position`` (None when there is none); raises
        ``CorruptRecordError`` when it is damaged."""
        return read_header(self.file.pread(HEADER_BYTES, position), 0, whole=False)

    def read_first_batch_timestamp(self) -> int:
        """The max timestamp of the first batch (-1 when empty): the clock of time-based rolls."""
        if self._rolling_based_timestamp is None and self.size_bytes:
            for _, header, _, _ in self.scan_headers(0, chunk_bytes=HEADER_BYTES):
                self._rolling_based_timestamp = header.max_timestamp
                break
        return -1 if self._rolling_based_timestamp is None else self._rolling_based_timestamp

    # --- returning records -----------------------------------------------------------------------

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
        head_bytes = body_at(header.attributes) + columns_bytes(header)
        if at + head_bytes <= len(buffer):
            head = bytes(buffer[at : at + head_bytes])
        else:
            head = self.file.pread(head_bytes, position)
        keys_bytes = RecordBatch(header, head, _NO_FETCH).columns.blob_bytes[0]
        if keys_bytes <= _CACHED_KEYS_MAX_BYTES:  # keep the keys too: a point read then reads one value
            body = body_at(header.attributes)
            head += self._pread_body(position + body, head_bytes - body, keys_bytes)
        return self._cache_head(position, header, head)

    def _cache_head(self, position: int, header: BatchHeader, data) -> RecordBatch:
        """Cache the head (header, columns and, when small, the keys) of the verified batch at
        ``position``, cut from ``data`` (the head, or the whole batch), and return it as a partial
        batch that reads other bytes through the segment."""
        head_bytes = body_at(header.attributes) + columns_bytes(header)
        partial_batch = RecordBatch(header, bytes(data[:head_bytes]), _NO_FETCH)
        keys_bytes = partial_batch.columns.blob_bytes[0]
        if keys_bytes <= _CACHED_KEYS_MAX_BYTES and len(data) >= head_bytes + keys_bytes:
            head = bytes(data[: head_bytes + keys_bytes])
        else:
            head = partial_batch.buffer
        batch = CachedHead(header, head, partial(self._pread_body, position + body_at(header.attributes)))
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
            point = cached.point = PointHead(cached, position + body_at(cached.header.attributes),
                                             self.file.read_exact)
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
            if (header.record_count == 0 or header.attributes & CONTROL) and header.last_offset >= start_offset:
                # Verified, though it adds nothing (an empty batch, or a transaction marker, which
                # reads never return): a damaged count or attribute must not hide a batch's records.
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
                if header.record_count and not header.attributes & CONTROL:  # markers are never returned
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
                          include_empty: bool = False, control: bool = False) -> Iterator:
        """``(batch, first, stop)`` for every non-empty verified batch holding offsets in
        [start_offset, stop_offset) within the first ``end`` bytes: records [first, stop) of the
        batch are the ones in range. For column-wise consumers (Arrow) that take whole columns.
        ``include_empty``: also the batches holding offsets in range but no record in it (an empty
        batch, or a compacted one whose records in range were removed), with first == stop.
        Transaction markers come as such empty slices (``include_empty``) or not at all, unless
        ``control`` (replays that need them): then with their record."""
        for batch_position, header, buffer, at in self.scan_from(start_offset, end, _LARGE_CHUNK_BYTES):
            if header.base_offset >= stop_offset:
                return
            if header.last_offset < start_offset:
                continue
            batch = self.load_batch(batch_position, header, buffer, at)  # empty ones too (see ``read``)
            if header.record_count == 0 or (header.attributes & CONTROL and not control):
                if include_empty:
                    yield batch, 0, 0
                continue
            first = batch.index_of(start_offset) if header.base_offset < start_offset else 0
            stop = batch.index_of(stop_offset) if header.last_offset >= stop_offset else header.record_count
            if first < stop or include_empty:
                yield batch, first, max(first, stop)

    # --- rolling ---------------------------------------------------------------------------------

    def should_roll(self, max_segment_bytes: int, max_segment_ms: int, incoming_bytes: int,
                    max_timestamp_ms: int, max_offset: int, now_ms: int) -> bool:
        """Kafka's roll rule: the append would overflow ``segment.bytes``, the segment's records
        span more than ``segment.ms``, an index is full, or the offset does not fit."""
        if self.size_bytes > max_segment_bytes - incoming_bytes:
            return True
        if self.size_bytes > 0 and self._time_waited_for_roll(now_ms, max_timestamp_ms) > max_segment_ms:
            return True
        return self.offset_index.is_full() or self.time_index.is_full() or not self.can_hold(max_offset)

    def _time_waited_for_roll(self, now_ms: int, message_timestamp_ms: int) -> int:
        first = self.read_first_batch_timestamp()
        if first >= 0:
            return message_timestamp_ms - first
        return now_ms - self.created_ms

    @property
    def mapped(self) -> bool:
        """Whether point reads hold a mapping of the data file (it must not be truncated in place)."""
        return self.file.mapped

    def on_become_inactive(self) -> None:
        """Called when a newer segment takes over: final time index entry, trim both indexes."""
        self.time_index.maybe_append(*self._max_timestamp_pair(), skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        # Durable now: the recovery point may be past this segment already, so no later flush covers
        # its final entry, and a power loss would leave an index that understates its timestamps.
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def resize_indexes(self, size_bytes: int) -> None:
        self.offset_index.resize(size_bytes)
        self.time_index.resize(size_bytes)

    def expand_indexes_lazily(self, size_bytes: int) -> None:
        """``resize_indexes`` made by the first index write (``IndexFile.expand_lazily``): the active
        segment of a log being opened holds no mapping until it is written to."""
        self.offset_index.expand_lazily(size_bytes)
        self.time_index.expand_lazily(size_bytes)

    def release_descriptors(self) -> None:
        """Give back every descriptor and mapping this segment holds: the indexes' writable
        mappings (untrimmed: ``IndexFile.release``) and the data file's descriptor, pinned or not.
        Each comes back at its next use. Under the owning log's lock (an idle log, a log just opened)."""
        self.offset_index.release()
        self.time_index.release()
        self.file.release_pinned_descriptor()

    @property
    def descriptors(self) -> int:
        """Descriptors the segment holds now: its data file's, and its mappings' before Python 3.13."""
        mapped = (self.offset_index.mapped + self.time_index.mapped) if MAPPING_HOLDS_DESCRIPTOR else 0
        return self.file.descriptors + mapped

    # --- recovery and truncation -----------------------------------------------------------------

    def copy_to(self, target: "LogSegment", end_position: int) -> None:
        """Copy bytes [0, ``end_position``) into the empty segment ``target`` (whose indexes the
        caller rebuilds with ``target.recover()``)."""
        self.file.copy_to(target.file, end_position)

    def read_batch_containing(self, offset: int) -> RecordBatch | None:
        """The verified batch holding ``offset`` (or the first one after it); None past the end."""
        for batch_position, header, buffer, at in self.scan_from(offset):
            if header.last_offset >= offset:
                return self.load_batch(batch_position, header, buffer, at)
        return None

    def recover(self, cut_tail: bool = True, recovery_point: int | None = None, keep_capacity: bool = False) -> int:
        """Re-verify every batch (CRC, offsets), rebuild both indexes, cut an invalid tail.
        Returns the number of invalid bytes at the tail (cut when ``cut_tail``). A torn or corrupt
        tail is logged, never raised. With ``cut_tail=False`` only the indexes are rebuilt (a lying
        index found by a read: the data stays as it is, damage there stays reported by reads).

        ``recovery_point``: the log's recovery point (every batch below it was fsynced, with the
        index entries made for it). Recovery then resumes from the offset index entry at or below it
        (``_resume_point``: once that entry and the last time index entry before it are confirmed by
        the data; otherwise it starts from the segment's start): the bytes before that entry are
        treated as those of a segment below the recovery point, and only the bytes from there on are
        re-verified and re-indexed. ``keep_capacity``: leave the indexes at full size and mapped (the
        segment becomes the active one: trimming them now would only be undone)."""
        self._forget_verified()
        file_size = self.file.file_size()
        resumed = None if recovery_point is None else self._resume_point(recovery_point, file_size)
        if resumed is None:
            self.indexes_distrusted = False
            self.offset_index.reset()
            self.time_index.reset()
            self._max_timestamp = TimestampOffset(-1, self.base_offset)
            start, previous_last_offset = 0, self.base_offset - 1
        else:
            entry, self._max_timestamp = resumed
            start, previous_last_offset = entry.position, entry.offset - 1
        valid_bytes, last_index_entry = self._verify_and_index(start, file_size, previous_last_offset,
                                                               resumed is not None)
        if resumed is not None and valid_bytes == start:
            # Not even the batch at the entry is valid (damage below the recovery point): the entry
            # would point past the valid bytes. Everything again from the start, which names the damage.
            return self.recover(cut_tail, None, keep_capacity)
        truncated = file_size - valid_bytes
        if truncated and cut_tail:
            logger.warning("recovery cut %d bytes from the tail of %s", truncated, self.log_path)
            self.file.truncate_to(valid_bytes)
        self.bytes_since_last_index_entry = valid_bytes - last_index_entry if valid_bytes else 0
        self._rolling_based_timestamp = None
        self.time_index.maybe_append(*self._max_timestamp_pair(), skip_full_check=True)
        if not keep_capacity:
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()
        if not self.active and not keep_capacity:  # recovering many segments must not hold their index descriptors
            self.offset_index.freeze()
            self.time_index.freeze()
        return truncated

    def _verify_and_index(self, position: int, file_size: int, previous_last_offset: int,
                          resumed: bool) -> tuple[int, int]:
        """Verify the batches from ``position`` on (``load_batch``: both CRCs and the columns, as every
        read does; offsets increasing and inside the segment's range), reading a megabyte at a
        time, and add an index entry every ``index_interval_bytes``. ``resumed``: ``position`` holds
        the last offset index entry already; its time index entry is made again (it was cut with the
        entries after it). Returns ``(valid_bytes, position of the last offset index entry)``; stops
        (logged) at the first invalid or incomplete batch."""
        offset_index, time_index = self.offset_index, self.time_index
        interval = self.index_interval_bytes
        where = f" in {self.log_path}"
        header_at, load_batch, pread, can_hold = read_header, self.load_batch, self.file.pread, self.can_hold
        maximum_ms, maximum_offset = self._max_timestamp
        last_index_entry = position if resumed else 0
        # New entries are collected and written in bulk at the end, as ``append`` and ``maybe_append``
        # would have added them one by one (the same fullness rules).
        offsets: list[int] = []
        positions: list[int] = []
        times: list[int] = []
        time_offsets: list[int] = []
        offset_room = offset_index.max_entries - offset_index.entries
        time_room = time_index.max_entries - 1 - time_index.entries  # ``TimeIndex.is_full`` keeps a slot free
        last_time_ms = time_index.last_entry.timestamp_ms
        buffer = memoryview(b"")
        buffer_position = position
        valid_bytes = position
        try:
            while position < file_size:
                at = position - buffer_position
                if len(buffer) - at < HEADER_BYTES:
                    buffer = memoryview(pread(min(_RECOVERY_READ_BYTES, file_size - position), position))
                    buffer_position, at = position, 0
                header = header_at(buffer, at, where, False)
                if header is None:
                    break  # fewer bytes than a header: an incomplete batch
                size = LOG_OVERHEAD_BYTES + header.batch_length
                if position + size > file_size:
                    break
                if at + size > len(buffer):  # the batch runs past the buffer: read on from its start
                    buffer = memoryview(pread(min(max(_RECOVERY_READ_BYTES, size), file_size - position), position))
                    buffer_position, at = position, 0
                load_batch(position, header, buffer, at)
                base_offset = header.base_offset
                last_offset = base_offset + header.last_offset_delta
                if base_offset <= previous_last_offset or not can_hold(last_offset):
                    raise CorruptRecordError(
                        f"batch at position {position} of {self.log_path} has offsets "
                        f"{base_offset}..{last_offset} after {previous_last_offset}")
                if header.max_timestamp > maximum_ms:
                    maximum_ms, maximum_offset = header.max_timestamp, last_offset
                # A rebuilt index can need more entries than the appends made (their byte count
                # restarts after a truncation): when full it stays sparser, never fails.
                new_entry = position - last_index_entry > interval and len(offsets) < offset_room
                if new_entry or (resumed and position == last_index_entry):  # or the kept entry's time entry
                    if len(times) >= time_room:
                        new_entry = False
                    elif maximum_ms > last_time_ms:
                        times.append(maximum_ms)
                        time_offsets.append(maximum_offset)
                        last_time_ms = maximum_ms
                    if new_entry:
                        offsets.append(base_offset)
                        positions.append(position)
                        last_index_entry = position
                valid_bytes = position + size
                previous_last_offset = last_offset
                position = valid_bytes
        except CorruptRecordError as exc:
            logger.warning("recovery of %s stops at position %d: %s", self.log_path, valid_bytes, exc)
        offset_index.append_all(offsets, positions)
        time_index.append_all(times, time_offsets)
        self._max_timestamp = TimestampOffset(maximum_ms, maximum_offset)
        return valid_bytes, last_index_entry

    def _resume_point(self, recovery_point: int, file_size: int) -> tuple[OffsetPosition, TimestampOffset] | None:
        """Where recovery may resume: ``(entry, max timestamp before it)`` for the offset index's
        floor entry for ``recovery_point - 1`` (a batch starting below the recovery point: fsynced,
        with its entry and the time index entries before it), with both indexes cut after it. None
        (nothing cut: recovery starts from the segment's start) when there is no such entry, or
        when it, or the time index's last entry before it, is not confirmed by the data: a lying
        entry is never a starting point (as in ``scan_from``)."""
        offset_index, time_index = self.offset_index, self.time_index
        if recovery_point - 1 <= self.base_offset or offset_index.damage or time_index.damage:
            return None
        entry = offset_index.lookup_in_place(recovery_point - 1)
        if not (entry.offset > self.base_offset and 0 < entry.position < file_size):
            return None
        try:
            header = self.read_header_at(entry.position)
        except CorruptRecordError:
            return None
        if header is None or header.base_offset != entry.offset:
            return None
        offset_index.truncate_to(entry.offset + 1)
        if not offset_index.entries or offset_index.entry(offset_index.entries - 1) != entry:
            return None  # an index out of order: the cut did not end at the entry
        time_index.truncate_to(entry.offset)
        maximum = self._max_timestamp_before(entry)
        if maximum is None:
            return None
        self.indexes_distrusted = False
        self.resize_indexes(self.max_index_size_bytes)  # room for the entries the scan adds
        return entry, maximum

    def _max_timestamp_before(self, entry: OffsetPosition) -> TimestampOffset | None:
        """The largest timestamp of the batches before ``entry``'s position, and the offset of the
        batch holding it: the time index's last entry (cut below ``entry``), once confirmed by the
        batch it names, raised by the headers of the batches after that batch. Entries cut with
        ``entry``'s may have named one of those. None when the time index entry lies."""
        last = self.time_index.last_entry
        start = OffsetPosition(self.base_offset, 0)
        confirmed = not self.time_index.entries
        if not confirmed:
            if last.timestamp_ms < 0:
                return None  # no real entry holds a negative timestamp
            start = self.offset_index.lookup_in_place(last.offset)
        maximum = last
        try:
            for _, header, _, _ in self.scan_from(start.offset, entry.position, _READ_CHUNK_BYTES, start):
                if not confirmed and header.last_offset >= last.offset:
                    if (header.max_timestamp, header.last_offset) != tuple(last):
                        return None
                    confirmed = True
                if header.max_timestamp > maximum.timestamp_ms:
                    maximum = TimestampOffset(header.max_timestamp, header.base_offset + header.last_offset_delta)
        except (CorruptIndexError, CorruptRecordError):
            return None
        return maximum if confirmed else None

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding offsets >= ``offset`` (whole batches). Returns bytes removed.
        The indexes are resized to full capacity: this segment is, or becomes, the active one.
        Never called on a mapped segment (a mapping past the cut would fault)."""
        found = self.translate_offset(offset)
        self._forget_verified()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.resize_indexes(self.max_index_size_bytes)
        removed = 0
        if found is not None:
            position = found[0]
            removed = self.size_bytes - position
            self.file.truncate_to(position)
        if self.size_bytes == 0:
            self.created_ms = self._clock.time_ms()
        self._rolling_based_timestamp = None
        self.bytes_since_last_index_entry = 0
        # Recompute the max timestamp from the surviving time index entry and the batches after it.
        maximum = self.time_index.last_entry
        for _, header, _, _ in self.scan_from(maximum.offset, chunk_bytes=_READ_CHUNK_BYTES):
            if header.max_timestamp > maximum.timestamp_ms:
                maximum = TimestampOffset(header.max_timestamp, header.last_offset)
        self._max_timestamp = maximum
        return removed

    # --- durability and files --------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the data file, both indexes and the transaction index (when written to)."""
        self.file.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Final time index entry, trimmed indexes, data fsynced, files closed. Safe twice."""
        if self.file.closed:
            return
        if self.writable:
            time_entries = self.time_index.entries
            # Unloaded, the maximum adds nothing to the index it would be read from (and loading
            # it reads the data: a clean close stays cheap). An inactive segment's index was trimmed
            # at its roll: full, it takes no entry (a cut one understates, and lookups read past it).
            maximum = self._max_timestamp
            if (maximum is not None and maximum.timestamp_ms >= 0
                    and self.time_index.entries < self.time_index.max_entries):
                self.time_index.maybe_append(*self._max_timestamp_pair(), skip_full_check=True)
            # The clean marker says nothing needs recovering: what close writes is made durable too.
            if self.offset_index.resize(self.offset_index.size_bytes):
                self.offset_index.flush()
            if self.time_index.resize(self.time_index.size_bytes) or self.time_index.entries != time_entries:
                self.time_index.flush()
            self.offset_index.close()
            self.time_index.close()
            self.txn_index.flush()
            self.file.flush()
        self.close_handlers()

    def close_handlers(self) -> None:
        """Release descriptors and mappings without writing (a failed disk, a deleted segment)."""
        self._forget_verified()
        self.offset_index.close_handlers()
        self.time_index.close_handlers()
        self.txn_index.release()
        self.file.close()

    @property
    def closed(self) -> bool:
        return self.file.closed

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename all three files (and the transaction index, when there is one) from ``old_suffix``
        to ``new_suffix`` (e.g. "" to ".deleted")."""
        for holder in (self.file, self.offset_index, self.time_index, self.txn_index):
            if not holder.path.endswith(old_suffix):
                raise ValueError(f"{holder.path} does not end with {old_suffix!r}")
            new_path = holder.path[: len(holder.path) - len(old_suffix)] + new_suffix
            if holder is self.file:
                holder.rename(new_path)
            else:
                holder.rename_to(new_path)

    def delete(self) -> None:
        """Close and remove all three files (and the transaction index)."""
        self.deleted = True
        self.close_handlers()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            if self._fs.exists(path):
                self._fs.remove(path)
        self.txn_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size_bytes={self.size_bytes}, path={self.log_path!r})"
