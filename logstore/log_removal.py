"""Removing data from a ``Log``: truncation, ``delete_records``, retention and the crash-safe
segment swap. A mixin of ``Log`` (kept apart so each module stays readable); it uses the log's
locks, segment list and fail-stop rule, and owns the order of every rename and fsync that removes
data, so that a crash at any point leaves a gap-free log:

- ``truncate_to`` removes a suffix: segments are deleted newest first, and a straddled segment is
  rewritten and swapped in (``replace_segments``);
- ``delete_records`` and retention (``delete_old_segments``) remove a prefix: the log start offset
  moves first, then segments are renamed ``.deleted`` oldest first;
- ``replace_segments`` is Kafka's ``.cleaned`` -> ``.swap`` -> final protocol, completed or undone by
  the loader after a crash.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Callable, Sequence

from .encoder import encode_batch_prefix
from .errors import OffsetOutOfRangeError
from .retention import RetentionDecision, RetentionResult, plan_retention
from .segment import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX, LogSegment

if TYPE_CHECKING:
    import threading

    from .clock import Clock
    from .config import LogConfig
    from .delayed import LogWaits
    from .fs import FileSystem


class LogRemoval:
    """Truncation, record deletion, retention and segment replacement for ``Log``."""

    # Provided by Log.
    dir_path: str
    config: LogConfig
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    on_checkpoint_needed: Callable | None
    on_truncated: Callable | None
    waits: LogWaits | None
    truncations: int
    key: object
    schedule_file_delete: Callable[[Sequence[LogSegment], int], None] | None
    _fs: FileSystem
    _clock: Clock
    _lock: threading.RLock
    _flush_lock: threading.Lock
    _segments: tuple[LogSegment, ...]
    _bases: tuple[int, ...]
    _new_segment: Callable[..., LogSegment]
    _check_writable: Callable[[], None]

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
            # A sequence count: odd while bytes are being cut, so a reader that saw torn bytes can
            # tell a truncation under way (or finished since its snapshot) from damage on disk.
            self.truncations += 1
            try:
                self._truncate_locked(offset)
            finally:
                self.truncations += 1
        if self.on_truncated is not None:
            self.on_truncated(self, offset)
        if self.waits is not None:  # reads waiting past the new end are answered (out of range) now
            self.waits.data_arrived(self.key)
        return True

    def _truncate_locked(self, offset: int) -> None:
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
                            encode_batch_prefix(straddling, offset))
            copy.recover()
            copy.flush()
        except BaseException:
            copy.delete()
            raise
        self.replace_segments([copy], [segment])
        copy.resize_indexes(self.config.segment_index_bytes)

    def replace_segments(self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment], *,
                         truncations: int | None = None, delay_delete: bool = False) -> bool:
        """Swap ``new_segments`` (complete and flushed, named ``*.cleaned``) in for ``old_segments``,
        crash-safely (Kafka's protocol, undone or completed by the loader's passes):
        1. each new segment ``.cleaned`` -> ``.swap`` (newest first), made durable;
        2. the segment list changes; each old segment -> ``.deleted``, then removed (with
           ``delay_delete``, after ``file.delete.delay.ms``, so readers holding them finish);
        3. each new segment ``.swap`` -> its final name, made durable.

        With ``truncations`` (the log's count when the caller read ``old_segments``) nothing is
        swapped, and False returned, when the log was truncated since or an old segment has left
        it (retention): the copies describe a log that no longer exists (the cleaner's abort)."""
        with self._lock:
            new_segments = sorted(new_segments, key=lambda segment: segment.base_offset)
            current = set(map(id, self._segments))
            if truncations is not None and (truncations != self.truncations
                                            or not all(id(segment) in current for segment in old_segments)):
                return False
            self._check_writable()
            old_segments = [segment for segment in old_segments if id(segment) in current]
            for segment in reversed(new_segments):
                segment.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
            self._fs.fsync_dir(self.dir_path)
            doomed = set(map(id, old_segments))
            kept = [segment for segment in self._segments if id(segment) not in doomed]
            self._set_segments(sorted(kept + new_segments, key=lambda segment: segment.base_offset))
            if delay_delete and self.schedule_file_delete is not None:
                for segment in sorted(old_segments, key=lambda segment: segment.base_offset, reverse=True):
                    segment.change_file_suffixes("", DELETED_SUFFIX)
            else:
                self._delete_segments(old_segments, durable_each=False)
            for segment in new_segments:
                segment.change_file_suffixes(SWAP_SUFFIX, "")
            self._fs.fsync_dir(self.dir_path)
        if delay_delete and self.schedule_file_delete is not None:
            self.schedule_file_delete(old_segments, self.config.file_delete_delay_ms)
        return True

    # --- for the cleaner ---------------------------------------------------------------------------

    def segments_and_truncations(self) -> tuple[tuple[LogSegment, ...], int]:
        """The segments and the truncation count read together (no truncation under way): what a
        cleaning round starts from and hands back to ``replace_segments`` to detect a change."""
        with self._lock:
            return self._segments, self.truncations

    def new_cleaned_segment(self, base_offset: int) -> LogSegment:
        """A new, empty ``<base>.log.cleaned`` segment (stale files of that name removed first)."""
        self._check_writable()
        return self._new_segment(base_offset, CLEANED_SUFFIX)

    def copy_mtime(self, source: LogSegment, target: LogSegment) -> None:
        """Give ``target``'s data file the modification time of ``source``'s: a recopied segment
        keeps its age for mtime-based retention."""
        self._fs.set_mtime_ms(target.log_path, self._fs.mtime_ms(source.log_path))

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

    # --- retention -------------------------------------------------------------------------------

    def delete_old_segments(self, *, now_ms: int | None = None, dry_run: bool = False) -> RetentionResult:
        """Apply retention (``retention`` module: log start offset, then ``retention.bytes``, then
        ``retention.ms``) and return what was deleted, or with ``dry_run`` what would be. Deleted
        segments are renamed ``.deleted`` oldest first (each rename durable, so a crash never
        leaves a gap) and removed now, or after ``file.delete.delay.ms`` through
        ``schedule_file_delete`` (the LogManager's), so readers holding them finish their reads."""
        with self._lock:
            if not dry_run:
                self._check_writable()
            now_ms = self._clock.time_ms() if now_ms is None else now_ms
            decisions = plan_retention(self._segments, log_end_offset=self.log_end_offset,
                                       log_start_offset=self.log_start_offset, delete_policy=self.config.delete,
                                       retention_bytes=self.config.retention_bytes,
                                       retention_ms=self.config.retention_ms, now_ms=now_ms,
                                       mtime_ms=self._fs.mtime_ms)
            if dry_run or not decisions:
                return RetentionResult(self.name, tuple(decisions), self.log_start_offset, dry_run)
            self._delete_prefix(decisions)
            return RetentionResult(self.name, tuple(decisions), self.log_start_offset)

    def _delete_prefix(self, decisions: Sequence[RetentionDecision]) -> None:
        doomed = list(self._segments[:len(decisions)])
        assert [segment.base_offset for segment in doomed] == [d.base_offset for d in decisions], decisions
        try:
            if len(doomed) == len(self._segments):
                self.roll()  # the active segment goes too: a new empty one holds the log end offset
            remaining = self._segments[len(doomed):]
            # The start offset moves before the segments leave the list: a reader never finds a
            # hole between the log start offset and the first segment.
            self.log_start_offset = max(self.log_start_offset, remaining[0].base_offset)
            self.recovery_point = max(self.recovery_point, min(self.log_start_offset, self.log_end_offset))
            self._set_segments(remaining)
            for segment in doomed:  # oldest first: a crash leaves a gap-free suffix
                segment.change_file_suffixes("", DELETED_SUFFIX)
                self._fs.fsync_dir(self.dir_path)
        except OSError as exc:
            raise self._fail(exc) from exc
        if self.schedule_file_delete is not None:
            self.schedule_file_delete(doomed, self.config.file_delete_delay_ms)
        else:
            for segment in doomed:
                segment.delete()
