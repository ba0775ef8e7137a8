"""The read side of ``Log``: lock-free reads of a snapshot, and how they survive what changes under them.

Readers take no lock: they read a snapshot of the segment list (``LocalLog.view``) and of the offsets,
and data with ``pread`` bounded by a size snapshot. What can change underneath, and what a read does:

- a concurrent truncation cuts (and rewrites) bytes of the snapshot: the read waits for it to finish
  and retries on a fresh snapshot (``truncations`` tells it from damage on disk);
- retention or a compaction swap deletes or closes a segment of the snapshot: retry on the new list
  (``OffsetOutOfRangeError`` when the offset itself is gone);
- a read-only view's files are renamed or removed by the writing process: ``refresh`` re-reads the
  directory (``LocalLog.retry_while_renamed``) and the read retries;
- an index entry lies (a flipped byte): ``CorruptIndexError`` from the segment's checked lookup; a
  writable log rebuilds that segment's indexes, a read-only view scans without them, and the read
  retries (the lazy scans resume after the last batch they yielded).

``LogReads`` is a base of ``Log`` and uses its state: ``_local``, ``_lock``, ``_closed``,
``read_only``, ``log_start_offset``, ``log_end_offset``, ``recovery_point``, ``truncations``,
``key``, ``name``, ``load_problems``, ``_fail`` and ``_get_waits``.
"""

from __future__ import annotations

from itertools import chain
from typing import Iterator, Sequence

from ..errors import (CorruptIndexError, CorruptRecordError, OffsetOutOfRangeError, StorageError,
                      StoreClosedError)
from ..records.decoder import RECORD_OVERHEAD_BYTES, Record
from .local_log import LocalLog
from .segment import LogSegment
from .waits import check_wait, read_or_wait

DEFAULT_MAX_BYTES = 1 << 20
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


class LogReads:
    """``read``, ``iter_records``, ``iter_batch_slices``, ``offset_for_timestamp`` and a read-only
    view's ``refresh``, for ``Log``."""

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
                record = self._local.read_one_cached(offset)
                if record is not None:
                    return [record]
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise TypeError(f"offset must be an int, got {offset!r}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes!r}")
        if max_records is None:
            max_records = 2**62
        elif max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records!r}")
        repaired = False
        for _attempt in range(3):
            view, truncations = self._local.view, self.truncations
            segments = view[0]
            log_end_offset, log_start_offset = self.log_end_offset, self.log_start_offset
            if self._closed:
                raise StoreClosedError(f"log {self.name} is closed")
            if offset < log_start_offset or offset > log_end_offset:
                raise self._out_of_range(offset, log_start_offset, log_end_offset)
            if offset == log_end_offset:
                return []
            try:
                return LocalLog.read(view, offset, log_end_offset, max_bytes, max_records)
            except (ValueError, TypeError, OSError) as exc:
                self._segment_lost(segments, exc)
            except (CorruptIndexError, CorruptRecordError) as exc:
                # Bytes cut (and perhaps written again) under the snapshot by a concurrent truncation
                # look torn, or make an index entry look wrong; damage that is really on disk is still
                # there when no truncation ran meanwhile (an even count that did not move: none under
                # way, none finished since the snapshot). A lying index is rebuilt once, then retried.
                if self._local.view is not view or self.truncations != truncations or truncations % 2:
                    self._wait_for_truncation()
                elif isinstance(exc, CorruptIndexError) and not repaired:
                    repaired = True
                    self._repair_indexes(segments, exc)
                else:
                    raise
        raise StorageError(f"log {self.name} kept changing during a read at offset {offset}")

    def _out_of_range(self, offset: int, log_start_offset: int, log_end_offset: int) -> OffsetOutOfRangeError:
        return OffsetOutOfRangeError(f"offset {offset} is out of range for {self.name} (log start offset "
                                     f"{log_start_offset}, log end offset {log_end_offset})",
                                     offset, log_start_offset, log_end_offset)

    def _segment_lost(self, segments: Sequence[LogSegment], exc: Exception) -> None:
        """A read failed on a segment of its snapshot ``segments``: when one was deleted or closed
        under it (retention, a truncation, a compaction swap, a read-only view's refresh), or
        its file is gone (a read-only view: the writer removed it), re-read the segment list for
        a retry; any other error is raised."""
        if self.read_only and isinstance(exc, FileNotFoundError):
            self.refresh()
        elif any(segment.deleted or segment.closed for segment in segments):
            self._wait_for_truncation()
        else:
            raise exc

    def _wait_for_truncation(self) -> None:
        """Block until a truncation under way has finished (it holds the log lock throughout), so
        the retry reads a settled log instead of racing the same cut again."""
        if not self.read_only:
            with self._lock:
                pass

    def _read_waiting(self, offset: int, max_bytes: int, max_records: int | None, min_bytes: int,
                      max_wait_ms: int) -> list[Record]:
        check_wait(min_bytes, max_wait_ms)
        key = self.key
        found = read_or_wait({key: (self, offset)}, lambda: {key: self.read(offset, max_bytes, max_records)},
                             min_bytes, max_wait_ms, None if self.read_only else self._get_waits(),
                             None if max_records is None else lambda found: len(found[key]) >= max_records)
        return found[key]

    def iter_records(self, offset: int | None = None, end_offset: int | None = None) -> Iterator[Record]:
        """Every record from ``offset`` (default: the log start offset) up to ``end_offset``
        (default: the log end offset when called), lazily: each ``Record`` is built when the
        iterator reaches it, so a scan holds one batch of bytes and few objects at a time."""
        view = self._local.view  # the snapshot, taken now: a scan created before retention reads it all
        start, stop = self._scan_range(offset, end_offset)
        return chain.from_iterable(LocalLog.iter_records_resuming(view, lambda: self._local.view, start, stop,
                                                                  self._resume_scan))

    def iter_batch_slices(self, offset: int | None = None, end_offset: int | None = None, *, include_empty=False) -> Iterator:
        """``(batch, first, stop)`` per batch over the same range as ``iter_records``: records
        [first, stop) of each verified ``RecordBatch`` are in range (Spark's Arrow path takes its raw
        columns). ``include_empty``: also batches with offsets but no record in range (first == stop)."""
        view = self._local.view  # the snapshot, taken now: a scan created before retention reads it all
        start, stop = self._scan_range(offset, end_offset)
        return LocalLog.iter_batch_slices_resuming(view, lambda: self._local.view, start, stop,
                                                   include_empty, self._resume_scan)

    def _scan_range(self, offset: int | None, end_offset: int | None) -> tuple[int, int]:
        start = self.log_start_offset if offset is None else offset
        stop = self.log_end_offset if end_offset is None else min(end_offset, self.log_end_offset)
        if start < self.log_start_offset or start > self.log_end_offset:
            raise self._out_of_range(start, self.log_start_offset, self.log_end_offset)
        return start, stop

    def _resume_scan(self, segments: Sequence[LogSegment], exc: Exception, offset: int) -> None:
        """A lazy scan failed at ``offset`` (nothing from it on yielded yet): repair what it met, so
        it goes on there on the current segments; ``OffsetOutOfRangeError`` when retention removed
        that offset meanwhile, the error itself when it is real."""
        if self._closed:
            raise StoreClosedError(f"log {self.name} is closed") from exc
        if isinstance(exc, CorruptIndexError):
            self._repair_indexes(segments, exc)
        else:
            self._segment_lost(segments, exc)
        if offset < self.log_start_offset:
            raise self._out_of_range(offset, self.log_start_offset, self.log_end_offset) from exc

    def _repair_indexes(self, segments: Sequence[LogSegment], exc: CorruptIndexError) -> None:
        """A read found an index entry that lies: ``LocalLog.repair_indexes`` (logged and recorded
        in ``load_problems``)."""
        with self._lock:
            try:
                self.load_problems.append(self._local.repair_indexes(segments, exc, self.read_only))
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
        segments = self._local.segments
        for _attempt in range(2):
            try:
                return LocalLog.offset_for_timestamp(segments, timestamp_ms, start)
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
        changed = self._local.refresh(self.log_start_offset)
        if changed is None:
            return False
        self.log_end_offset, self.recovery_point, log_start_offset, replaced = changed
        self.log_start_offset = max(self.log_start_offset, log_start_offset)
        for segment in replaced:  # a read in flight on these retries on the new view
            segment.close_handlers()
        return True
