"""``LogSegment``: one data file of a partition plus its offset and time indexes.

A segment with base offset 368769 lives in ``00000000000000368769.log`` (record batches, back to
back), ``00000000000000368769.index`` and ``00000000000000368769.timeindex``. The base offset is a
lower bound on the offsets inside. Only the last segment of a log (the active one) receives appends.

The data file is a ``FileRecords`` (writes at the logical size, ``pread`` or, for a writer's point
reads, a read-only mapping under the rules that keep SIGBUS away). Reading records (``read``,
``iter_record_runs``, ``iter_batch_slices``, point reads of cached batch heads) is in the base class
``SegmentReads`` (segment_reads.py), rebuilding and cutting in ``SegmentRecovery``
(segment_recovery.py); this module owns the files, appends, scans and the segment's life cycle.

Not thread-safe for writers: the owning ``Log`` serialises appends, truncation and recovery. Reads
may run concurrently with appends (they are bounded by a size snapshot taken by the caller).
"""

from __future__ import annotations

import logging
import os
from itertools import chain
from typing import Iterator

from ..clock import Clock
from ..errors import CorruptIndexError, CorruptRecordError, LogSegmentOffsetOverflowError
from ..fs import FileSystem
from ..records.decoder import HEADER_BYTES, BatchHeader, RecordBatch, read_header
from .file_records import FileRecords
from .index import OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset
from .segment_reads import PARTIAL_READ_MIN_BYTES, VERIFIED_CACHE_ENTRIES, SegmentReads
from .segment_recovery import SegmentRecovery
from .time_lookup import load_max_timestamp

logger = logging.getLogger("logstore.segment")  # its name before the subpackages (logging configs)

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


def file_prefix(base_offset: int) -> str:
    """The 20-digit zero-padded name prefix of a segment's files."""
    return f"{base_offset:020d}"


class LogSegment(SegmentReads, SegmentRecovery):
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
        next_offset = self.base_offset
        try:
            scan = self.scan_from(2**63 - 1)
        except CorruptIndexError as exc:  # the result is right either way: no repair here, only slower
            logger.warning("%s; scanning %s from its start for its next offset", exc, self.log_path)
            scan = self.scan_headers(0, chunk_bytes=_SMALL_CHUNK_BYTES)
        for _, header, _, _ in scan:
            next_offset = header.next_offset
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

    def resize_indexes(self, size_bytes: int) -> None:
        self.offset_index.resize(size_bytes)
        self.time_index.resize(size_bytes)

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

    # --- durability and files --------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the data file and both indexes."""
        self.file.flush()
        self.offset_index.flush()
        self.time_index.flush()

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
            self.file.flush()
        self.close_handlers()

    def close_handlers(self) -> None:
        """Release descriptors and mappings without writing (a failed disk, a deleted segment)."""
        self._forget_verified()
        self.offset_index.close_handlers()
        self.time_index.close_handlers()
        self.file.close()

    @property
    def closed(self) -> bool:
        return self.file.closed

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename all three files from ``old_suffix`` to ``new_suffix`` (e.g. "" to ".deleted")."""
        for holder in (self.file, self.offset_index, self.time_index):
            if not holder.path.endswith(old_suffix):
                raise ValueError(f"{holder.path} does not end with {old_suffix!r}")
            new_path = holder.path[: len(holder.path) - len(old_suffix)] + new_suffix
            if holder is self.file:
                holder.rename(new_path)
            else:
                holder.rename_to(new_path)

    def delete(self) -> None:
        """Close and remove all three files."""
        self.deleted = True
        self.close_handlers()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            if self._fs.exists(path):
                self._fs.remove(path)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size_bytes={self.size_bytes}, path={self.log_path!r})"
