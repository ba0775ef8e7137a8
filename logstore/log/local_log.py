"""``LocalLog``: the segments of one partition directory and every file operation that changes them
(Kafka's LocalLog beside UnifiedLog).

A ``Log`` holds one ``LocalLog`` and keeps the offsets, the locks, the fail-stop rule and the
policies; this object keeps the segment list and owns the order of every rename and fsync that adds or
removes segments, so that a crash at any point leaves a gap-free log:

- the list is published as one tuple ``(segments, base offsets)`` (``view``): a reader takes both in
  one step, never a list caught half-way through a change;
- ``roll`` starts a segment; ``truncate_to`` removes a suffix: segments are deleted newest first and a
  straddled segment is rewritten and swapped in; ``remove_prefix`` and ``remove_below`` remove a
  prefix: segments are renamed ``.deleted`` oldest first;
- ``replace_segments`` is Kafka's ``.cleaned`` -> ``.swap`` -> final protocol, completed or undone by
  the loader after a crash;
- ``read``, ``iter_batch_slices`` and ``offset_for_timestamp`` walk a view's segments.

Not thread-safe on its own: the owning ``Log`` calls every changing method under its lock and turns
an ``OSError`` into its fail-stop. Readers take a ``view`` and never block.
"""

from __future__ import annotations

import bisect
import logging
import os
from itertools import chain
from operator import itemgetter
from typing import Callable, Iterator, Sequence, TypeVar

from ..clock import Clock
from ..config import LogConfig
from ..errors import CorruptIndexError, CorruptRecordError, StorageError
from ..fs import FileSystem
from ..records.decoder import CONTROL, RECORD_OVERHEAD_BYTES, Record
from ..records.encoder import encode_batch, encode_batch_prefix
from ..records.record_builder import PAUSE_MIN_RECORDS, call_paused
from .loader import extend_valid_end, live_segment_bases, load_log
from .segment import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX, LogSegment
from .time_lookup import checked_max_timestamp, find_offset_by_timestamp
from .txn_index import TXN_INDEX_SUFFIX

logger = logging.getLogger(__name__)

_RESUME_ATTEMPTS = 8  # a scan re-planned this often in a row gives up (something is really wrong)
_REFRESH_ATTEMPTS = 20  # a read-only view lists the directory again this often while it changes
_T = TypeVar("_T")

View = tuple[tuple[LogSegment, ...], tuple[int, ...]]


def retry_while_renamed(dir_path: str, clock: Clock, read: Callable[[], _T]) -> _T:
    """``read()`` (a read-only view loading or refreshing the segments of ``dir_path``), again when a
    file it listed was renamed or removed by the writer before it was opened (retention, a
    compaction swap, a roll): the listing was stale. After a few tries, ``StorageError``."""
    for attempt in range(_REFRESH_ATTEMPTS):
        try:
            return read()
        except FileNotFoundError as exc:
            vanished = exc
            logger.debug("%s changed while a read-only view read it (%s); listing it again", dir_path, exc)
            clock.sleep_ms(min(attempt, 10))  # let the writer finish its sequence of renames
    raise StorageError(f"{dir_path} kept changing while a read-only view read it ({_REFRESH_ATTEMPTS} "
                       f"listings): {vanished}") from vanished


class LocalLog:
    """The segment list of the partition directory ``dir_path`` and the file operations on it.
    ``config`` is the owning log's (it replaces it when the topic's config changes)."""

    def __init__(self, dir_path: str, config: LogConfig, fs: FileSystem, clock: Clock,
                 segments: Sequence[LogSegment]) -> None:
        self.dir_path = dir_path
        self.config = config
        self._fs = fs
        self._clock = clock
        self.view: View = ((), ())
        self.set_segments(segments)
        for segment in segments[:-1]:  # the loader read their heads: no descriptor kept for them
            segment.file.release_descriptor()
        if segments and segments[-1].writable:
            # Nor for the active one: a store of many partitions holds descriptors only for those in
            # use (the first append or read opens the file again, the first index write maps the index).
            segments[-1].release_descriptors()

    # --- the list --------------------------------------------------------------------------------

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self.view[0]

    @property
    def bases(self) -> tuple[int, ...]:
        return self.view[1]

    def set_segments(self, segments: Sequence[LogSegment]) -> None:
        """Publish ``segments``. The last one is active (it keeps its descriptors); the others
        release theirs to the bounded cache (``LogSegment.deactivate``)."""
        segments = tuple(segments)
        self.view = (segments, tuple(segment.base_offset for segment in segments))
        for segment in segments[:-1]:
            if not segment.closed and (segment.active or segment.offset_index.mapped or segment.time_index.mapped):
                # No longer the last: the final time index entry, then the indexes keep their
                # entries in memory and no descriptor, the data file's goes to ``OPEN_FILES``.
                segment.active = False
                if segment.writable:
                    segment.on_become_inactive()
                segment.offset_index.freeze()
                segment.time_index.freeze()
                segment.file.unpin()
        if segments and not segments[-1].active:
            segments[-1].active = True  # the active segment keeps its data file's descriptor
            segments[-1].file.pin()

    def new_segment(self, base_offset: int, file_suffix: str = "") -> LogSegment:
        """A new, empty segment file set at ``base_offset`` (stale files of those names removed).
        When making it fails (a full disk), the files it created are removed again."""
        paths = [os.path.join(self.dir_path, f"{base_offset:020d}{suffix}{file_suffix}")
                 for suffix in (".log", ".index", ".timeindex", TXN_INDEX_SUFFIX)]
        for path in paths:
            if self._fs.exists(path):
                self._fs.remove(path)
        try:
            return LogSegment(self._fs, self._clock, self.dir_path, base_offset, create=True,
                              index_interval_bytes=self.config.index_interval_bytes,
                              max_index_size_bytes=self.config.segment_index_bytes, file_suffix=file_suffix)
        except OSError as exc:
            logger.warning("could not create segment %s: %s; removing what was made", paths[0], exc)
            for path in paths:
                if self._fs.exists(path):
                    self._fs.remove(path)
            raise

    def roll(self, new_base: int) -> LogSegment:
        """Make a new active segment at ``new_base`` (the log end offset). An empty active segment at
        that base is kept, unless its indexes are full (then it is replaced); the previous active
        segment's indexes get their final entry, are trimmed and fsynced first; when making the new
        segment fails (``OSError``, e.g. a full disk) the old one stays the active segment."""
        active = self.segments[-1]
        if active.base_offset == new_base and not (active.offset_index.is_full() or active.time_index.is_full()):
            return active
        if active.base_offset == new_base:  # an empty segment whose index has no room left
            self.delete_segments([active])
            segments = list(self.segments[:-1])
            segment = self.new_segment(new_base)
        else:
            try:
                # The final time index entry is durable before a newer segment can exist: once one
                # does, the recovery point may pass this segment and no recovery would look at it again.
                active.on_become_inactive()
                segment = self.new_segment(new_base)
            except BaseException:
                active.resize_indexes(self.config.segment_index_bytes)  # it stays the active one
                raise
            segments = list(self.segments)
        segments.append(segment)
        self.set_segments(segments)
        return segment

    def flush_from(self, view: View, recovery_point: int, log_closed: Callable[[], bool]) -> None:
        """fsync the segments of ``view`` from the one holding ``recovery_point`` on, and the
        directory when any of them is new since then. A segment that was closed underneath because
        it was deleted (retention, ``delete_records``) needs no flush; any other closed segment
        raises ``ValueError`` (the log was closed)."""
        segments, bases = view
        first = max(bisect.bisect_right(bases, recovery_point) - 1, 0)
        for segment in segments[first:]:
            try:
                segment.flush()
            except (ValueError, TypeError):
                if log_closed() or not segment.deleted:
                    raise
        if any(segment.base_offset >= recovery_point for segment in segments[first:]):
            self._fs.fsync_dir(self.dir_path)  # new segment files must survive too

    def repair_indexes(self, segments: Sequence[LogSegment], exc: CorruptIndexError, read_only: bool) -> str:
        """A read found an entry of one of ``segments``' indexes that lies (``exc`` names the file):
        rebuild that segment's indexes from its data (a writer) or stop using them (a read-only
        view, which must not write). Returns what was done, as logged. Raises ``exc`` when no
        segment owns that index."""
        segment = next((s for s in segments if s.offset_index.path in str(exc) or s.time_index.path in str(exc)), None)
        if segment is None:
            raise exc
        done = f"{exc}; {'scanning without its indexes' if read_only else 'rebuilt its indexes from the data'}"
        logger.warning("%s", done)
        if read_only:
            segment.distrust_indexes()
        elif not segment.closed:
            segment.recover(cut_tail=False)
            if segment is self.segments[-1]:
                segment.resize_indexes(self.config.segment_index_bytes)
        return done

    # --- reading a view --------------------------------------------------------------------------

    @staticmethod
    def read(view: View, offset: int, end_offset: int, max_bytes: int, max_records: int) -> list[Record]:
        """Records of ``view`` from ``offset`` below ``end_offset``: at least one when any exists,
        then as many as fit ``max_bytes`` and ``max_records`` (a read that may return many is built
        with the garbage collector paused: ``record_builder.call_paused``)."""
        if max_records >= PAUSE_MIN_RECORDS and max_bytes >= PAUSE_MIN_RECORDS * RECORD_OVERHEAD_BYTES:
            return call_paused(LocalLog._read, view, offset, end_offset, max_bytes, max_records)
        return LocalLog._read(view, offset, end_offset, max_bytes, max_records)

    @staticmethod
    def _read(view: View, offset: int, end_offset: int, max_bytes: int, max_records: int) -> list[Record]:
        segments, bases = view
        records: list[Record] = []
        charged = 0
        for slot in range(max(bisect.bisect_right(bases, offset) - 1, 0), len(segments)):
            segment = segments[slot]
            if segment.base_offset >= end_offset:
                break
            found, cost, done = segment.read(offset, max_bytes - charged, max_records - len(records),
                                             end=segment.size_bytes, min_one=not records, end_offset=end_offset)
            records.extend(found)
            charged += cost
            if done:
                break
            if found:
                offset = found[-1].offset + 1
        return records

    def read_one_cached(self, offset: int) -> Record | None:
        """The record at ``offset`` when its batch's head is cached (a point read with no segment
        scan), else None: the general read path decides."""
        segments, bases = self.view
        try:
            record = segments[bisect.bisect_right(bases, offset) - 1].read_one_cached(offset)
        except (ValueError, TypeError, OSError, CorruptRecordError):
            return None  # the segment changed underneath, or is damaged
        return record if record is not None and record.offset == offset else None

    @staticmethod
    def iter_batch_slices(view: View, start: int, stop: int, include_empty: bool = False,
                          control: bool = False) -> Iterator:
        """``(batch, first, stop)`` per verified batch of ``view`` holding offsets in [start, stop)
        (``include_empty``: those without a record in range too; ``control``: markers with their
        record, see ``LogSegment.iter_batch_slices``)."""
        segments, bases = view
        sizes = [segment.size_bytes for segment in segments]
        first = max(bisect.bisect_right(bases, start) - 1, 0)
        return chain.from_iterable(segments[slot].iter_batch_slices(start, stop, sizes[slot], include_empty, control)
                                   for slot in range(first, len(segments)))

    @staticmethod
    def skip_unreadable(view: View, offset: int, end_offset: int) -> int:
        """The first offset at or after ``offset`` (at most ``end_offset``) of a batch a read would
        return records of: transaction markers and empty batches in between are passed (each
        verified first: a damaged attribute must not hide records). Reads that end just before
        markers tell their readers to go on after them, so no reader stalls at a marker."""
        segments, bases = view
        for slot in range(max(bisect.bisect_right(bases, offset) - 1, 0), len(segments)):
            segment = segments[slot]
            if segment.base_offset >= end_offset:
                break
            for position, header, buffer, at in segment.scan_from(offset, segment.size_bytes):
                if header.last_offset < offset:
                    continue
                if header.base_offset >= end_offset:
                    return min(offset, end_offset)
                if header.record_count and not header.attributes & CONTROL:
                    return offset
                segment.load_batch(position, header, buffer, at)
                offset = header.last_offset + 1
        return min(offset, end_offset)

    @staticmethod
    def iter_batch_slices_resuming(view: View, get_view: Callable[[], View], start: int, stop: int,
                                   include_empty: bool,
                                   recover: Callable[[Sequence[LogSegment], Exception, int], None],
                                   control: bool = False) -> Iterator:
        """``iter_batch_slices`` of ``view`` that survives what a lazy scan meets on the way: on an
        error it calls ``recover(segments of the view, error, offset)`` (which rebuilds a lying
        index, re-reads a changed segment list, or raises) and goes on from the first offset not
        yet yielded, on the view then current (``get_view()``): no slice twice, none skipped."""
        return LocalLog._resuming(view, get_view, start, recover,
                                  lambda view, start: LocalLog.iter_batch_slices(view, start, stop, include_empty,
                                                                                 control),
                                  lambda batch_slice: batch_slice[0].header.last_offset + 1)

    @staticmethod
    def iter_records_resuming(view: View, get_view: Callable[[], View], start: int, stop: int,
                              recover: Callable[[Sequence[LogSegment], Exception, int], None]) -> Iterator:
        """Iterables of the records of ``view`` with offsets in [start, stop), in order, resuming as
        ``iter_batch_slices_resuming`` does (``LogSegment.iter_record_runs`` per segment)."""
        def runs(view: View, start: int) -> Iterator:
            segments, bases = view
            sizes = [segment.size_bytes for segment in segments]
            first = max(bisect.bisect_right(bases, start) - 1, 0)
            return chain.from_iterable(segments[slot].iter_record_runs(start, stop, sizes[slot])
                                       for slot in range(first, len(segments)))

        return map(itemgetter(0), LocalLog._resuming(view, get_view, start, recover, runs, itemgetter(1)))

    @staticmethod
    def _resuming(view: View, get_view: Callable[[], View], start: int,
                  recover: Callable[[Sequence[LogSegment], Exception, int], None],
                  scan: Callable[[View, int], Iterator], next_start: Callable[[tuple], int]) -> Iterator:
        for attempt in range(_RESUME_ATTEMPTS):
            view = get_view() if attempt else view
            try:
                for item in scan(view, start):
                    yield item
                    start = next_start(item)
                return
            except (CorruptIndexError, ValueError, TypeError, OSError) as exc:
                recover(view[0], exc, start)
        raise StorageError(f"the segments kept changing during a scan from offset {start}")

    @staticmethod
    def offset_for_timestamp(segments: Sequence[LogSegment], timestamp_ms: int, start: int) -> int | None:
        """The first offset >= ``start`` whose timestamp is >= ``timestamp_ms``, through the time
        indexes of the segments that can hold it."""
        for segment in segments:
            if segment is segments[-1] or checked_max_timestamp(segment) >= timestamp_ms:
                found = find_offset_by_timestamp(segment, timestamp_ms, start)
                if found is not None:
                    return found[1]
        return None

    def refresh(self, log_start_offset: int) -> tuple[int, int, int, tuple[LogSegment, ...]] | None:
        """A read-only view: take in what the writing process changed in the files. None when
        nothing did; else ``(log end offset, recovery point, log start offset, replaced segments)``.
        The same files grown extend the active segment's valid prefix; any other change (a roll,
        a deletion) reloads the directory, and the replaced segments are for the caller to close
        once its offsets have moved.

        The writer renames and removes files meanwhile (retention, a compaction swap, a roll): a
        file listed a moment ago and gone when opened means the listing is stale, so it is read
        again (a few times, then ``StorageError``: never a raw ``OSError``)."""
        return retry_while_renamed(self.dir_path, self._clock, lambda: self._refresh_once(log_start_offset))

    def _refresh_once(self, log_start_offset: int) -> tuple[int, int, int, tuple[LogSegment, ...]] | None:
        segments, bases = self.view
        if segments and live_segment_bases(self._fs.list_dir(self.dir_path)) == list(bases):
            extended = extend_valid_end(segments[-1])
            if extended is None:
                return None
            segments[-1].size_bytes = extended[0]
            return extended[1], extended[1], log_start_offset, ()
        loaded = load_log(self._fs, self._clock, self.dir_path, self.config, recovery_point=0,
                          log_start_offset=log_start_offset, clean_shutdown=False, read_only=True)
        self.set_segments(loaded.segments)
        return loaded.log_end_offset, loaded.recovery_point, loaded.log_start_offset, segments

    # --- removing a suffix -----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset`` from the files, durably: segments above it
        deleted newest first (a crash leaves a shorter but gap-free log), a segment whose batch
        straddles it rewritten and swapped in (a crash leaves the old or the new segment)."""
        if offset < self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
        else:
            # At the first segment's base that segment stays (emptied): while a segment starts there,
            # the files say where the log starts (the checkpoints leave such a start out), and a
            # crash in between must not leave a directory without segments.
            keep = max(bisect.bisect_right(self.bases, offset - 1), 1)
            target = self.segments[keep - 1]
            removed = self.segments[keep:]
            if removed:
                self.set_segments(self.segments[:keep])
                self.delete_segments(removed)
            straddling = target.read_batch_containing(offset)
            if straddling is not None and straddling.base_offset < offset:
                self._rewrite_around(target, offset, straddling)
            elif target.mapped:  # point reads map it: a rewrite, never a cut under a mapping
                self._rewrite_around(target, offset)
            else:
                target.truncate_to(offset)
                target.flush()
                if offset == target.base_offset:
                    target.txn_index.replace([])  # emptied: no transaction index file, as a new segment
            self._fill_to(offset)
        self._fs.fsync_dir(self.dir_path)

    def _fill_to(self, offset: int) -> None:
        """When the last segment now ends below ``offset`` (the cut fell where compaction had removed
        whole batches), append an empty batch that carries its offsets up to ``offset - 1``: the files
        then say where the log ends, and a gap between segments is never a legitimate one."""
        last = self.segments[-1]
        end = last.read_next_offset()
        if end < offset:
            last.append(end, offset - 1, -1, encode_batch([], last_offset_delta=offset - 1 - end, base_offset=end))
            last.flush()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Replace every segment by an empty one at ``offset``, below the first segment's base. The
        new segment exists, durably, before the old ones go: a crash in between leaves a directory
        whose first segment says where the log starts, and whose missing offsets lie above the
        recovery point the caller lowered (recovery drops the old segments then)."""
        old = self.segments
        segment = self.new_segment(offset)
        self._fs.fsync_dir(self.dir_path)
        self.set_segments([segment])
        self.delete_segments(old)

    def _rewrite_around(self, segment: LogSegment, offset: int, straddling=None) -> None:
        """Replace ``segment`` by a copy that ends below ``offset``: its batches before it and, when
        a batch ``straddling`` holds ``offset``, that batch's records below it (one batch with the
        same base offset, offsets and timestamps)."""
        found = segment.translate_offset(offset if straddling is None else straddling.base_offset)
        position = segment.size_bytes if found is None else found[0]
        copy = self.new_segment(segment.base_offset, CLEANED_SUFFIX)
        try:
            segment.copy_to(copy, position)
            segment.txn_index.copy_below(copy.txn_index, offset)
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

    # --- removing a prefix -----------------------------------------------------------------------

    def remove_prefix(self, count: int) -> list[LogSegment]:
        """Take the ``count`` oldest segments out of the list and rename their files ``.deleted``,
        oldest first, each rename durable (a crash leaves a gap-free suffix). Returns them: the
        caller removes their files, now or later. The caller moves the log start offset first."""
        doomed = list(self.segments[:count])
        self.set_segments(self.segments[count:])
        for segment in doomed:
            segment.change_file_suffixes("", DELETED_SUFFIX)
            self._fs.fsync_dir(self.dir_path)
        return doomed

    def remove_below(self, offset: int) -> None:
        """Delete the segments that lie wholly below ``offset`` (the next segment starts at or below
        it), durably."""
        deletable = [segment for segment, following in zip(self.segments, self.segments[1:])
                     if following.base_offset <= offset]
        if deletable:
            self.set_segments(self.segments[len(deletable):])
            self.delete_segments(deletable)
            self._fs.fsync_dir(self.dir_path)

    def delete_segments(self, segments: Sequence[LogSegment], durable_each: bool = True) -> None:
        """Rename to .deleted (newest first, each rename made durable before the next, so a crash
        never leaves a gap in the offsets), then remove the files."""
        for segment in sorted(segments, key=lambda segment: segment.base_offset, reverse=True):
            segment.change_file_suffixes("", DELETED_SUFFIX)
            if durable_each:
                self._fs.fsync_dir(self.dir_path)
        for segment in segments:
            segment.delete()

    # --- the segment swap ------------------------------------------------------------------------

    def replace_segments(self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment], *,
                         keep_deleted: bool = False) -> list[LogSegment]:
        """Swap ``new_segments`` (complete and flushed, named ``*.cleaned``) in for those of
        ``old_segments`` still in the list, crash-safely:
        1. each new segment ``.cleaned`` -> ``.swap`` (newest first), made durable;
        2. the list changes; each old segment -> ``.deleted``, then removed (with ``keep_deleted``,
           left for the caller to remove later, so readers holding them finish);
        3. each new segment ``.swap`` -> its final name, made durable.
        Returns the old segments that were swapped out."""
        new_segments = sorted(new_segments, key=lambda segment: segment.base_offset)
        current = set(map(id, self.segments))
        old_segments = [segment for segment in old_segments if id(segment) in current]
        for segment in reversed(new_segments):
            segment.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        self._fs.fsync_dir(self.dir_path)
        doomed = set(map(id, old_segments))
        kept = [segment for segment in self.segments if id(segment) not in doomed]
        self.set_segments(sorted(kept + new_segments, key=lambda segment: segment.base_offset))
        if keep_deleted:
            for segment in sorted(old_segments, key=lambda segment: segment.base_offset, reverse=True):
                segment.change_file_suffixes("", DELETED_SUFFIX)
        else:
            self.delete_segments(old_segments, durable_each=False)
        for segment in new_segments:
            segment.change_file_suffixes(SWAP_SUFFIX, "")
        self._fs.fsync_dir(self.dir_path)
        return old_segments

    def holds_all(self, segments: Sequence[LogSegment]) -> bool:
        """Whether every one of ``segments`` is still in the list (retention may have taken some)."""
        current = set(map(id, self.segments))
        return all(id(segment) in current for segment in segments)

    def copy_mtime(self, source: LogSegment, target: LogSegment) -> None:
        """Give ``target``'s data file the modification time of ``source``'s."""
        self._fs.set_mtime_ms(target.log_path, self._fs.mtime_ms(source.log_path))

    # --- closing ---------------------------------------------------------------------------------

    def close_segments(self) -> None:
        """Close every segment (trimming the active one's indexes) and fsync the directory."""
        for segment in self.segments:
            segment.close()
        self._fs.fsync_dir(self.dir_path)

    def release_handlers(self) -> None:
        """Release every descriptor and mapping, writing nothing."""
        for segment in self.segments:
            segment.close_handlers()
