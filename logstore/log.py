"""``Log``: one partition, a sequence of segments with offsets.

Offsets: ``log_start_offset`` is the first readable offset, ``log_end_offset`` the next one to be
assigned, ``recovery_point`` the first offset not known to be fsynced (everything below it survives a
power loss). ``append`` assigns offsets and writes to the active segment (the page cache: it survives a
process crash, not a power loss); ``flush`` fsyncs and only then advances the recovery point.

Concurrency: one lock serialises appends, rolls and truncation; a second serialises flushes, so an
fsync never blocks appends. Readers take no lock: they read a snapshot of the segment list and the
offsets, and data with ``pread`` bounded by a size snapshot.

Failure: an ``OSError`` from an fsync makes the log fail-stop (``LogFailedError`` on every later write
or flush; reopening recovers from what is durable). A failed write is cut back to the last complete
batch when possible, and fail-stop otherwise.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from itertools import chain
from typing import Callable, Iterator, Sequence

from .clock import Clock
from .config import LogConfig
from .errors import (CorruptIndexError, LogFailedError, OffsetOutOfRangeError, ReadOnlyError, StorageError,
                     StoreClosedError)
from .fs import FileSystem
from .loader import load_log
from .batching import AppendInfo, PreparedAppend, encode_records
from .encoder import assign_base_offset, encode_batch
from .records import COMPRESSION_MASK, RECORD_OVERHEAD_BYTES, TIMESTAMP_TYPE_LOG_APPEND, Record, read_header
from .segment import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX, LogSegment

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 1 << 20
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


class Log:
    """One partition of a topic: ``append``, ``read``, ``roll``, ``flush``, ``truncate_to`` and
    ``delete_records``. Open it through ``LogManager.get_log`` (which persists its checkpoints), or
    directly with ``Log(dir_path, config, ...)`` for a standalone partition."""

    def __init__(self, dir_path: str, config: LogConfig, *, fs: FileSystem, clock: Clock,
                 recovery_point: int = 0, log_start_offset: int = 0, clean_shutdown: bool = False,
                 read_only: bool = False, topic: str | None = None, partition: int | None = None) -> None:
        self.dir_path = dir_path
        self.config = config
        self.topic = topic
        self.partition = partition
        self.read_only = read_only
        self._fs = fs
        self._clock = clock
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._failure: BaseException | None = None
        self._closed = False
        self.on_checkpoint_needed: Callable[["Log"], None] | None = None
        loaded = load_log(fs, clock, dir_path, config, recovery_point=recovery_point,
                          log_start_offset=log_start_offset, clean_shutdown=clean_shutdown, read_only=read_only)
        self.load_problems = loaded.problems
        # The segments and their base offsets, published together as one tuple: a reader takes both
        # in one step (two attributes could be caught half-way through a change).
        self._view: tuple[tuple[LogSegment, ...], tuple[int, ...]] = ((), ())
        self._set_segments(loaded.segments)
        self.log_end_offset = loaded.log_end_offset
        self.recovery_point = loaded.recovery_point
        self.log_start_offset = loaded.log_start_offset
        self.last_flush_ms = clock.time_ms()

    # --- state -----------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return os.path.basename(self.dir_path)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """A snapshot of the segments, oldest first; the last is the active segment."""
        return self._segments

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def failed(self) -> bool:
        """True once the log went fail-stop (an fsync or undo error); only a reopen recovers it."""
        return self._failure is not None

    def _set_segments(self, segments: Sequence[LogSegment]) -> None:
        segments = tuple(segments)
        self._view = (segments, tuple(segment.base_offset for segment in segments))

    @property
    def _segments(self) -> tuple[LogSegment, ...]:
        return self._view[0]

    @property
    def _bases(self) -> tuple[int, ...]:
        return self._view[1]

    def _check_writable(self) -> None:
        if self._closed:
            raise StoreClosedError(f"log {self.name} is closed")
        if self.read_only:
            raise ReadOnlyError(f"log {self.name} is open read-only")
        if self._failure is not None:
            raise LogFailedError(f"log {self.name} failed earlier ({self._failure}); "
                                 "reopen the store to recover from what is durable") from self._failure

    def _fail(self, exc: BaseException) -> LogFailedError:
        self._failure = exc
        logger.error("log %s is now fail-stop: %s", self.name, exc)
        return LogFailedError(f"log {self.name} failed: {exc}; reopen the store to recover")

    # --- appending -------------------------------------------------------------------------------

    def append(self, records: Sequence[Record]) -> AppendInfo:
        """Append ``records`` and return the offsets assigned. Records without a timestamp get the
        current time. An append larger than ``max.message.bytes`` is split into several batches
        (each batch is atomic); a single record larger than that raises ``RecordTooLargeError``.
        Returns once the data is written to the OS (durable only after ``flush``)."""
        return self.append_prepared(self.prepare(records))

    def prepare(self, records: Sequence[Record]) -> PreparedAppend:
        """Validate and encode ``records`` for ``append_prepared`` without writing anything: raises
        what ``append`` would raise for bad input. ``LogManager.append`` prepares every partition's
        records before appending any, so a rejected record appends nothing anywhere."""
        self._check_writable()
        now_ms = self._clock.time_ms()
        return PreparedAppend(self, self._encode(records, now_ms), len(records), now_ms)

    def append_prepared(self, prepared: PreparedAppend) -> AppendInfo:
        """Append what ``prepare`` encoded (once; offsets are assigned now)."""
        if prepared.log is not self:
            raise ValueError(f"records prepared for {prepared.log.name} cannot be appended to {self.name}")
        batches, now_ms = prepared.take(), prepared.now_ms
        if not batches:
            return AppendInfo(None, None, 0, -1, 0)
        first_offset = None
        max_timestamp = -1
        with self._lock:
            self._check_writable()
            for header_bytes, parts in batches:
                header = read_header(header_bytes, 0, whole=False)
                base = self.log_end_offset
                last = base + header.last_offset_delta
                segment = self._maybe_roll(header.size_bytes, header.max_timestamp, last, now_ms)
                assign_base_offset(header_bytes, base)
                try:
                    segment.append(base, last, header.max_timestamp, [header_bytes, *parts])
                except OSError as exc:
                    self._after_write_error(segment, exc)
                self.log_end_offset = last + 1
                first_offset = base if first_offset is None else first_offset
                max_timestamp = max(max_timestamp, header.max_timestamp)
            last_offset = self.log_end_offset - 1
            if self.unflushed_messages >= self.config.flush_messages:
                self.flush()
        log_append = self.config.message_timestamp_type == "LogAppendTime"
        return AppendInfo(first_offset, last_offset, prepared.record_count, max_timestamp, len(batches),
                          now_ms if log_append else -1)

    def validate(self, records: Sequence[Record]) -> None:
        """Raise exactly what ``append(records)`` would raise for bad input (wrong types, a record
        larger than the limits, a missing key on a compacted topic), without appending anything."""
        self._encode(records, self._clock.time_ms())

    def _encode(self, records: Sequence[Record], now_ms: int) -> list[tuple[bytearray, list]]:
        return encode_records(records, self.config, now_ms, self.topic or self.name)

    def _after_write_error(self, segment: LogSegment, exc: OSError) -> None:
        try:
            segment.undo_partial_write()
        except OSError as undo_exc:
            raise self._fail(undo_exc) from exc
        raise StorageError(f"append to {segment.log_path} failed: {exc}") from exc

    def _maybe_roll(self, incoming_bytes: int, max_timestamp_ms: int, last_offset: int, now_ms: int) -> LogSegment:
        segment = self._segments[-1]
        if segment.should_roll(self.config.segment_bytes, self.config.max_segment_ms, incoming_bytes,
                               max_timestamp_ms, last_offset, now_ms):
            return self.roll()
        return segment

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (unless the active one is empty) and
        return it. The previous segment's indexes are trimmed."""
        with self._lock:
            self._check_writable()
            active = self._segments[-1]
            new_base = self.log_end_offset
            if active.base_offset == new_base and active.size_bytes:
                raise StorageError(f"cannot roll {self.name}: segment {new_base} already exists")
            if active.base_offset == new_base and not (active.offset_index.is_full() or active.time_index.is_full()):
                return active
            try:
                if active.base_offset == new_base:  # an empty segment whose index has no room left
                    self._delete_segments([active])
                    segments = list(self._segments[:-1])
                else:
                    active.on_become_inactive()
                    segments = list(self._segments)
                segment = self._new_segment(new_base)
            except OSError as exc:
                raise self._fail(exc) from exc
            segments.append(segment)
            self._set_segments(segments)
            return segment

    def _new_segment(self, base_offset: int, file_suffix: str = "") -> LogSegment:
        for suffix in (".log", ".index", ".timeindex"):  # stray files with the new names
            path = os.path.join(self.dir_path, f"{base_offset:020d}{suffix}{file_suffix}")
            if self._fs.exists(path):
                self._fs.remove(path)
        return LogSegment(self._fs, self._clock, self.dir_path, base_offset, create=True,
                          index_interval_bytes=self.config.index_interval_bytes,
                          max_index_size_bytes=self.config.segment_index_bytes, file_suffix=file_suffix)

    # --- durability ------------------------------------------------------------------------------

    def flush(self) -> int:
        """fsync everything up to the log end offset, then advance the recovery point to it.
        Returns the new recovery point. An fsync error makes the log fail-stop."""
        self._check_writable()
        with self._flush_lock:
            self._check_writable()
            with self._lock:
                target = self.log_end_offset
                old_recovery_point = self.recovery_point
                segments = self._segments
            if target <= old_recovery_point:
                return self.recovery_point
            first = max(bisect.bisect_right(self._bases_of(segments), old_recovery_point) - 1, 0)
            try:
                for segment in segments[first:]:
                    segment.flush()
                if any(segment.base_offset >= old_recovery_point for segment in segments[first:]):
                    self._fs.fsync_dir(self.dir_path)  # new segment files must survive too
            except OSError as exc:
                raise self._fail(exc) from exc
            except ValueError as exc:  # a segment closed underneath (the log was closed)
                raise StoreClosedError(f"log {self.name} closed during a flush") from exc
            with self._lock:
                self.recovery_point = max(self.recovery_point, min(target, self.log_end_offset))
                self.last_flush_ms = self._clock.time_ms()
            return self.recovery_point

    @staticmethod
    def _bases_of(segments: Sequence[LogSegment]) -> list[int]:
        return [segment.base_offset for segment in segments]

    # --- reading ---------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int = DEFAULT_MAX_BYTES, max_records: int | None = None) -> list[Record]:
        """Records with offset >= ``offset``, in order: at least one when any exists (even if it alone
        is larger than ``max_bytes``), then as many as fit in ``max_bytes`` (key, value and header
        bytes plus a small per-record overhead) and ``max_records``. Reading at the log end offset
        returns []; below the log start offset or past the end raises ``OffsetOutOfRangeError``."""
        if (max_records == 1 or 0 <= max_bytes < RECORD_OVERHEAD_BYTES) and type(offset) is int:
            # A point read whose batch head is cached: no segment scan at all.
            if self.log_start_offset <= offset < self.log_end_offset and not self._closed:
                segments, bases = self._view
                try:
                    record = segments[bisect.bisect_right(bases, offset) - 1].read_one_cached(offset)
                except (ValueError, TypeError, OSError):
                    record = None  # the segment changed underneath: the general path decides
                if record is not None and record.offset == offset:
                    return [record]
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise TypeError(f"offset must be an int, got {offset!r}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes!r}")
        if max_records is None:
            max_records = 2**62
        elif max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records!r}")
        for _attempt in range(3):
            segments, bases = self._view
            log_end_offset, log_start_offset = self.log_end_offset, self.log_start_offset
            if self._closed:
                raise StoreClosedError(f"log {self.name} is closed")
            if offset < log_start_offset or offset > log_end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range for {self.name} "
                    f"(log start offset {log_start_offset}, log end offset {log_end_offset})",
                    offset, log_start_offset, log_end_offset)
            if offset == log_end_offset:
                return []
            try:
                return self._read_segments(segments, bases, offset, log_end_offset, max_bytes, max_records)
            except CorruptIndexError as exc:
                if _attempt:
                    raise
                self._repair_indexes(segments, exc)
            except (ValueError, TypeError, OSError):
                # A segment deleted by a concurrent truncation: retry on a fresh snapshot.
                if not any(segment.deleted or segment.closed for segment in segments):
                    raise
        raise StorageError(f"log {self.name} kept changing during a read at offset {offset}")

    def _read_segments(self, segments, bases, offset: int, end_offset: int, max_bytes: int,
                       max_records: int) -> list[Record]:
        records: list[Record] = []
        charged = 0
        for slot in range(max(bisect.bisect_right(bases, offset) - 1, 0), len(segments)):
            segment = segments[slot]
            if segment.base_offset >= end_offset:
                break
            found, cost, done = segment.read(offset, max_bytes - charged, max_records - len(records),
                                             end=segment.size_bytes, min_one=not records,
                                             end_offset=end_offset)
            records.extend(found)
            charged += cost
            if done:
                break
            if found:
                offset = found[-1].offset + 1
        return records

    def iter_records(self, offset: int | None = None, end_offset: int | None = None) -> Iterator[Record]:
        """Every record from ``offset`` (default: the log start offset) up to ``end_offset``
        (default: the log end offset when called), lazily: each ``Record`` is built when the
        iterator reaches it, so a scan holds one batch of bytes and few objects at a time."""
        segments, bases = self._view
        start = self.log_start_offset if offset is None else offset
        stop = self.log_end_offset if end_offset is None else min(end_offset, self.log_end_offset)
        if start < self.log_start_offset or start > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {start} is out of range for {self.name} (log start offset "
                f"{self.log_start_offset}, log end offset {self.log_end_offset})",
                start, self.log_start_offset, self.log_end_offset)
        sizes = [segment.size_bytes for segment in segments]
        first = max(bisect.bisect_right(bases, start) - 1, 0)
        batches = (records for slot in range(first, len(segments))
                   for records in segments[slot].iter_record_batches(start, stop, sizes[slot]))
        return chain.from_iterable(batches)

    def _repair_indexes(self, segments: Sequence[LogSegment], exc: CorruptIndexError) -> None:
        """A read found an index entry that lies: rebuild that segment's indexes from its data (a
        writer) or stop using them (a read-only view, which must not write)."""
        segment = next((s for s in segments if s.offset_index.path in str(exc) or s.time_index.path in str(exc)), None)
        if segment is None:
            raise exc
        logger.warning("%s; %s", exc, "rebuilding the indexes" if not self.read_only else "scanning without them")
        if self.read_only:
            segment.distrust_indexes()
            return
        with self._lock:
            if segment.closed:
                return
            try:
                segment.recover(cut_tail=False)
                if segment is self._segments[-1]:
                    segment.resize_indexes(self.config.segment_index_bytes)
            except OSError as os_exc:
                raise self._fail(os_exc) from exc

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp_ms`` (None if there is none).
        -2 means the log start offset, -1 the log end offset."""
        if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool):
            raise TypeError(f"timestamp_ms must be an int, got {timestamp_ms!r}")
        if timestamp_ms == EARLIEST_TIMESTAMP:
            return self.log_start_offset
        if timestamp_ms == LATEST_TIMESTAMP:
            return self.log_end_offset
        if timestamp_ms < 0:
            raise ValueError(f"timestamp_ms must be >= 0 (or -1/-2), got {timestamp_ms!r}")
        start = self.log_start_offset
        segments = self._segments
        for _attempt in range(2):
            try:
                for segment in segments:
                    if segment.max_timestamp_so_far.timestamp_ms >= timestamp_ms or segment is segments[-1]:
                        found = segment.find_offset_by_timestamp(timestamp_ms, start)
                        if found is not None:
                            return found[1]
                return None
            except CorruptIndexError as exc:
                if _attempt:
                    raise
                self._repair_indexes(segments, exc)
        return None

    # --- truncation and deletion -----------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove every record with offset >= ``offset``; the log end offset becomes ``offset``.
        Returns False when there was nothing to remove. The result is durable when this returns.

        Crash-safe: segments above ``offset`` are deleted newest first (a crash leaves a shorter but
        gap-free log), and a segment whose batch straddles ``offset`` is rewritten as a copy that is
        swapped in (``replace_segments``), so a crash leaves either the old or the new segment."""
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"truncate_to needs an offset >= 0, got {offset!r}")
        with self._flush_lock, self._lock:
            self._check_writable()
            if offset >= self.log_end_offset:
                return False
            old_log_start_offset = self.log_start_offset
            try:
                if offset <= self._segments[0].base_offset:
                    self._truncate_fully_and_start_at(offset)
                else:
                    keep = bisect.bisect_right(self._bases, offset - 1)
                    target = self._segments[keep - 1]
                    removed = self._segments[keep:]
                    if removed:
                        self._set_segments(self._segments[:keep])
                        self._delete_segments(removed)
                    straddling = target.read_batch_containing(offset)
                    if straddling is not None and straddling.base_offset < offset:
                        self._rewrite_around(target, offset, straddling)
                    elif target.mapped:  # point reads map it: a rewrite, never a cut under a mapping
                        self._rewrite_around(target, offset)
                    else:
                        target.truncate_to(offset)
                        target.flush()
                self._fs.fsync_dir(self.dir_path)
            except OSError as exc:
                raise self._fail(exc) from exc
            self.log_end_offset = offset
            self.recovery_point = min(self.recovery_point, offset)
            # Persisted after the truncation: a crash in between leaves the old, higher start
            # offset (an empty log there), never deleted records becoming readable. The lowered
            # recovery point is persisted too, so data appended again below the old one is
            # re-verified after a crash.
            self.log_start_offset = min(old_log_start_offset, offset)
            if self.on_checkpoint_needed is not None:
                self.on_checkpoint_needed(self)
            return True

    def _rewrite_around(self, segment: LogSegment, offset: int, straddling=None) -> None:
        """Replace ``segment`` by a copy that ends below ``offset``: its batches before it and, when
        a batch ``straddling`` holds ``offset``, that batch's records below it (one batch with the
        same base offset, offsets and timestamps)."""
        found = segment.translate_offset(offset if straddling is None else straddling.base_offset)
        position = segment.size_bytes if found is None else found[0]
        copy = self._new_segment(segment.base_offset, CLEANED_SUFFIX)
        try:
            segment.copy_to(copy, position)
            if straddling is not None:
                copy.append(straddling.base_offset, offset - 1, straddling.max_timestamp,
                            self._kept_below(straddling, offset))
            copy.recover()
            copy.flush()
        except BaseException:
            copy.delete()
            raise
        self.replace_segments([copy], [segment])
        copy.resize_indexes(self.config.segment_index_bytes)

    @staticmethod
    def _kept_below(straddling, offset: int) -> bytearray:
        """The records of ``straddling`` below ``offset`` as one batch with its base offset and
        ending at ``offset - 1``."""
        kept = straddling.records(0, straddling.index_of(offset))
        base = straddling.base_offset
        deltas = [record.offset - base for record in kept]
        dense = len(kept) == offset - base
        batch = encode_batch(kept, offset_deltas=None if dense else deltas, last_offset_delta=offset - 1 - base,
                             compression=straddling.header.attributes & COMPRESSION_MASK,
                             log_append_time=bool(straddling.header.attributes & TIMESTAMP_TYPE_LOG_APPEND),
                             default_timestamp_ms=straddling.max_timestamp)
        assign_base_offset(batch, base)
        return batch

    def replace_segments(self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment]) -> None:
        """Swap ``new_segments`` (complete and flushed, named ``*.cleaned``) in for ``old_segments``,
        crash-safely (Kafka's protocol, undone or completed by the loader's passes):
        1. each new segment ``.cleaned`` -> ``.swap`` (newest first), made durable;
        2. the segment list changes; each old segment -> ``.deleted``, then removed;
        3. each new segment ``.swap`` -> its final name, made durable."""
        with self._lock:
            new_segments = sorted(new_segments, key=lambda segment: segment.base_offset)
            current = set(map(id, self._segments))
            old_segments = [segment for segment in old_segments if id(segment) in current]
            for segment in reversed(new_segments):
                segment.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
            self._fs.fsync_dir(self.dir_path)
            doomed = set(map(id, old_segments))
            kept = [segment for segment in self._segments if id(segment) not in doomed]
            self._set_segments(sorted(kept + new_segments, key=lambda segment: segment.base_offset))
            self._delete_segments(old_segments, durable_each=False)
            for segment in new_segments:
                segment.change_file_suffixes(SWAP_SUFFIX, "")
            self._fs.fsync_dir(self.dir_path)

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        old = self._segments
        self._set_segments([])
        self._delete_segments(old)
        self._set_segments([self._new_segment(offset)])

    def _delete_segments(self, segments: Sequence[LogSegment], durable_each: bool = True) -> None:
        """Rename to .deleted (newest first, each rename made durable before the next, so a crash
        never leaves a gap in the offsets), then remove the files. (Delayed removal, which lets
        readers holding the files finish, comes with the scheduler.)"""
        for segment in sorted(segments, key=lambda segment: segment.base_offset, reverse=True):
            segment.change_file_suffixes("", DELETED_SUFFIX)
            if durable_each:
                self._fs.fsync_dir(self.dir_path)
        for segment in segments:
            segment.delete()

    def delete_records(self, before_offset: int) -> int:
        """Make records below ``before_offset`` unreadable by advancing the log start offset, and
        delete the segments that lie wholly below it. Returns the new log start offset."""
        if not isinstance(before_offset, int) or isinstance(before_offset, bool):
            raise TypeError(f"delete_records needs an int offset, got {before_offset!r}")
        with self._lock:
            self._check_writable()
            if not self.log_start_offset <= before_offset <= self.log_end_offset:
                if before_offset < self.log_start_offset:
                    return self.log_start_offset
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {before_offset}: the log end offset of {self.name} is "
                    f"{self.log_end_offset}", before_offset, self.log_start_offset, self.log_end_offset)
            self.log_start_offset = before_offset
            self.recovery_point = max(self.recovery_point, min(before_offset, self.log_end_offset))
            if self.on_checkpoint_needed is not None:
                self.on_checkpoint_needed(self)
            deletable = [segment for segment, following in zip(self._segments, self._segments[1:])
                         if following.base_offset <= before_offset]
            if deletable:
                self._set_segments(self._segments[len(deletable):])
                try:
                    self._delete_segments(deletable)
                    self._fs.fsync_dir(self.dir_path)
                except OSError as exc:
                    raise self._fail(exc) from exc
            return self.log_start_offset

    # --- closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush (when writable and healthy) and close every segment. Safe to call twice."""
        with self._flush_lock, self._lock:
            if self._closed:
                return
            try:
                if not self.read_only and self._failure is None:
                    for segment in self._segments:
                        segment.close()
                    self._fs.fsync_dir(self.dir_path)
                    self.recovery_point = self.log_end_offset
            finally:
                for segment in self._segments:
                    segment.close_handlers()
                self._closed = True

    def __repr__(self) -> str:
        return (f"Log({self.name!r}, log_start_offset={self.log_start_offset}, "
                f"log_end_offset={self.log_end_offset}, recovery_point={self.recovery_point})")
