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
from .delayed import (DEFAULT_DURABLE_TIMEOUT_MS, DelayedProduce, FetchPosition, LogWaits, check_wait, durable_acks,
                      records_bytes, wait_for, wait_for_data)
from .errors import (CorruptIndexError, CorruptRecordError, DurabilityTimeoutError, LogFailedError, OffsetOutOfRangeError, ReadOnlyError,
                     StorageError, StoreClosedError)
from .fs import FileSystem
from .loader import extend_valid_end, live_segment_bases, load_log
from .log_removal import LogRemoval
from .batching import AppendInfo, PreparedAppend, encode_records
from .encoder import assign_base_offset
from .records import RECORD_OVERHEAD_BYTES, Record, read_header
from .segment import LogSegment

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 1 << 20
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


class Log(LogRemoval):
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
        # The key of this partition in the purgatories, and the waits (set by the LogManager; a
        # standalone log makes its own on the first wait).
        self.key = (topic, partition) if topic is not None else dir_path
        self.on_truncated: Callable[["Log", int], None] | None = None  # the cleaner lowers its checkpoint
        self.truncations = 0  # truncate_to calls so far: a read that saw torn bytes checks it
        self.waits: LogWaits | None = None
        self._own_waits = False
        # How segments deleted by retention are removed: None removes them at once; the LogManager
        # schedules the removal after file.delete.delay.ms so readers holding them finish.
        self.schedule_file_delete: Callable[[Sequence[LogSegment], int], None] | None = None
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

    def append(self, records: Sequence[Record], *, acks: int | str = 1,
               timeout_ms: int = DEFAULT_DURABLE_TIMEOUT_MS) -> AppendInfo:
        """Append ``records`` and return the offsets assigned. Records without a timestamp get the
        current time. An append larger than ``max.message.bytes`` is split into several batches
        (each batch is atomic); a single record larger than that raises ``RecordTooLargeError``.

        ``acks=1`` (the default) returns once the data is written to the OS: it survives a crash of
        this process, not a power loss. ``acks="all"`` returns only once an fsync covers the records
        (the recovery point is past them); concurrent durable appends share fsyncs. If that takes
        longer than ``timeout_ms`` it raises ``DurabilityTimeoutError``: the records are appended
        and may still become durable later."""
        durable = durable_acks(acks, timeout_ms)
        info = self.append_prepared(self.prepare(records))
        if durable and info.last_offset is not None:
            self.wait_durable(info.last_offset + 1, timeout_ms)
        return info

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
        waits = self.waits
        if waits is not None:  # after publishing the end offset, outside the lock (purgatory rule)
            waits.data_arrived(self.key)
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
                    try:
                        segment.flush()
                    except (ValueError, TypeError):  # closed underneath: by close(), or deleted
                        if self._closed or not segment.deleted:  # (retention, delete_records): no flush needed
                            raise
                if any(segment.base_offset >= old_recovery_point for segment in segments[first:]):
                    self._fs.fsync_dir(self.dir_path)  # new segment files must survive too
            except OSError as exc:
                raise self._fail(exc) from exc
            except (ValueError, TypeError) as exc:  # a segment closed underneath (the log was closed)
                raise StoreClosedError(f"log {self.name} closed during a flush") from exc
            with self._lock:
                self.recovery_point = max(self.recovery_point, min(target, self.log_end_offset))
                self.last_flush_ms = self._clock.time_ms()
            return self.recovery_point

    def wait_durable(self, required_offset: int, timeout_ms: int = DEFAULT_DURABLE_TIMEOUT_MS) -> int:
        """Block until everything below ``required_offset`` is fsynced (the recovery point covers
        it), sharing the fsync with other waiters through the group-commit flusher. Returns the
        recovery point; raises ``DurabilityTimeoutError`` after ``timeout_ms`` and ``LogFailedError``
        if the log failed meanwhile."""
        if self.recovery_point < required_offset:
            waits = self._get_waits()
            op = DelayedProduce(timeout_ms, self, required_offset)
            waits.flusher.request(self)
            wait_for(op, waits.produce, [self.key], timeout_ms)
        if self.recovery_point >= required_offset:
            return self.recovery_point
        self._check_writable()
        raise DurabilityTimeoutError(
            f"records of {self.name} below offset {required_offset} were appended but not fsynced within "
            f"{timeout_ms} ms (recovery point {self.recovery_point}); they may still become durable",
            required_offset, self.recovery_point)

    def _get_waits(self) -> LogWaits:
        if self.waits is None:
            self.waits, self._own_waits = LogWaits(self.name), True
        return self.waits

    @staticmethod
    def _bases_of(segments: Sequence[LogSegment]) -> list[int]:
        return [segment.base_offset for segment in segments]

    # --- reading ---------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int = DEFAULT_MAX_BYTES, max_records: int | None = None, *,
             min_bytes: int = 1, max_wait_ms: int = 0) -> list[Record]:
        """Records with offset >= ``offset``, in order: at least one when any exists (even if it alone
        is larger than ``max_bytes``), then as many as fit in ``max_bytes`` (key, value and header
        bytes plus a small per-record overhead) and ``max_records``. Reading at the log end offset
        returns []; below the log start offset or past the end raises ``OffsetOutOfRangeError``.

        With ``max_wait_ms`` > 0 a read that finds fewer than ``min_bytes`` waits (Kafka's fetch
        wait): it returns as soon as appends bring ``min_bytes`` (batch bytes) or after
        ``max_wait_ms``, with whatever is there then (possibly nothing)."""
        if max_wait_ms or min_bytes != 1:
            return self._read_waiting(offset, max_bytes, max_records, min_bytes, max_wait_ms)
        if (max_records == 1 or 0 <= max_bytes < RECORD_OVERHEAD_BYTES) and type(offset) is int:
            # A point read whose batch head is cached: no segment scan at all.
            if self.log_start_offset <= offset < self.log_end_offset and not self._closed:
                segments, bases = self._view
                try:
                    record = segments[bisect.bisect_right(bases, offset) - 1].read_one_cached(offset)
                except (ValueError, TypeError, OSError, CorruptRecordError):
                    record = None  # the segment changed underneath (or is damaged): the general path decides
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
            view, truncations = self._view, self.truncations
            segments, bases = view
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
                self._wait_for_truncation()
            except CorruptRecordError:
                # Bytes cut under the snapshot by a concurrent truncation look torn; damage that is
                # really on disk is still there when no truncation ran meanwhile (an even count
                # that did not move: none under way, none finished since the snapshot).
                if self._view is view and self.truncations == truncations and not truncations % 2:
                    raise
                self._wait_for_truncation()
        raise StorageError(f"log {self.name} kept changing during a read at offset {offset}")

    def _wait_for_truncation(self) -> None:
        """Block until a truncation under way has finished (it holds the log lock throughout), so
        the retry reads a settled log instead of racing the same cut again."""
        if not self.read_only:
            with self._lock:
                pass

    def _read_waiting(self, offset: int, max_bytes: int, max_records: int | None, min_bytes: int,
                      max_wait_ms: int) -> list[Record]:
        check_wait(min_bytes, max_wait_ms)
        records = self.read(offset, max_bytes, max_records)
        found = records_bytes(records)
        if max_wait_ms == 0 or found >= min_bytes or (records and max_records is not None
                                                       and len(records) >= max_records):
            return records
        wait_for_data([FetchPosition.at(self, offset, found)], min_bytes, max_wait_ms,
                      None if self.read_only else self._get_waits())
        return self.read(offset, max_bytes, max_records)

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
        return chain.from_iterable(batch.iter_records(first, stop)
                                   for batch, first, stop in self.iter_batch_slices(offset, end_offset))

    def iter_batch_slices(self, offset: int | None = None, end_offset: int | None = None) -> Iterator:
        """``(batch, first, stop)`` per batch over the same range as ``iter_records``: records
        [first, stop) of each verified ``RecordBatch`` are in range. Column-wise consumers (the Spark
        source's Arrow path) take the batch's raw columns instead of building records."""
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
        return chain.from_iterable(segments[slot].iter_batch_slices(start, stop, sizes[slot])
                                   for slot in range(first, len(segments)))

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

    # --- a read-only view ---------------------------------------------------------------------

    def refresh(self) -> bool:
        """A read-only view: take in what the writing process appended (and the segments it rolled
        or deleted) since the view was opened or last refreshed. True when anything changed; a
        writable log returns False (it knows its own state)."""
        if not self.read_only or self._closed:
            return False
        segments = self._segments
        if segments and live_segment_bases(self._fs.list_dir(self.dir_path)) == list(self._bases):
            extended = extend_valid_end(segments[-1])
            if extended is None:
                return False
            segments[-1].size_bytes, self.log_end_offset = extended
            self.recovery_point = self.log_end_offset
            return True
        loaded = load_log(self._fs, self._clock, self.dir_path, self.config, recovery_point=0,
                          log_start_offset=self.log_start_offset, clean_shutdown=False, read_only=True)
        self._set_segments(loaded.segments)
        self.log_end_offset, self.recovery_point = loaded.log_end_offset, loaded.recovery_point
        self.log_start_offset = max(self.log_start_offset, loaded.log_start_offset)
        for segment in segments:  # a read in flight on these retries on the new view
            segment.close_handlers()
        return True

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
                self._release_handlers()
        self._answer_waiters()

    def close_handlers(self) -> None:
        """Close without writing anything (an offline data dir, a view nobody will use): release
        every descriptor and mapping; waiting reads and durable appends answer. Safe twice."""
        with self._lock:
            self._release_handlers()
        self._answer_waiters()

    def _release_handlers(self) -> None:
        for segment in self._segments:
            segment.close_handlers()
        self._closed = True

    def _answer_waiters(self) -> None:
        waits = self.waits
        if waits is not None:  # outside the log's locks (the purgatory's rule)
            waits.wake_all([self.key])
            if self._own_waits:
                waits.shutdown()

    def __repr__(self) -> str:
        return (f"Log({self.name!r}, log_start_offset={self.log_start_offset}, "
                f"log_end_offset={self.log_end_offset}, recovery_point={self.recovery_point})")
