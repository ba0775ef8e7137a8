"""Loading a partition directory at open: Kafka's ``LogLoader``, in numbered passes.

1. **Temporary files.** ``*.deleted`` files are removed. ``*.cleaned`` files (an interrupted cleaning
   or split) are removed, and so is every ``*.swap`` file whose base offset is at or above the lowest
   ``.cleaned`` base offset (a swap whose group was never completely renamed). The other ``.swap``
   files are valid: a replacement that was completely written.
2. **Obsolete originals.** For the valid swaps, every ordinary segment file whose base offset lies in
   [lowest swap base, highest swap next offset) is removed: the swap replaces it.
3. **Complete the swaps.** Each ``.swap`` file is renamed to its final name.
4. **Load segments** in base-offset order. Index files without a ``.log`` are removed. A segment whose
   ``.index`` is missing or fails its checks has its indexes rebuilt from the data.
5. **Recover** after an unclean shutdown: every segment from the one holding the recovery point on is
   re-verified batch by batch (CRC and offsets) and its indexes rebuilt; at the first segment whose
   tail had to be cut, all later segments are dropped (their offsets would follow a gap).
6. **Offsets.** A log whose end is below the checkpointed log start offset lost its files: it restarts
   empty at the log start offset. The last segment's indexes get their full capacity back.

Passes 1-3 are computed as a plan first (``plan_directory``). A writer applies it; a read-only opener
only uses the plan's view of which files make up the segments, so it never changes a file, yet sees
the same segments a writer would after an interrupted swap.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from ..clock import Clock
from ..config import LogConfig
from ..errors import CorruptDataError, CorruptIndexError, CorruptRecordError
from ..fs import FileSystem
from ..records.decoder import HEADER_BYTES
from .segment import (CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX,
                      TIME_INDEX_SUFFIX, LogSegment)

logger = logging.getLogger("logstore.loader")  # its name before the subpackages (logging configs)

_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)


def _split_name(name: str) -> tuple[int, str, str] | None:
    """``(base_offset, kind, status)`` of a segment file name, e.g. ``(0, ".log", ".swap")``."""
    prefix, dot, rest = name.partition(".")
    if not dot or len(prefix) != 20 or not prefix.isdigit():
        return None
    rest = "." + rest
    for kind in _SEGMENT_SUFFIXES:
        if rest == kind:
            return int(prefix), kind, ""
        if rest.startswith(kind + ".") and rest[len(kind):] in (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX):
            return int(prefix), kind, rest[len(kind):]
    return None


def live_segment_bases(names: list[str]) -> list[int]:
    """The base offsets of the live segments (``.log`` files without a status suffix) among ``names``."""
    return sorted(parsed[0] for parsed in map(_split_name, names)
                  if parsed is not None and parsed[1:] == (LOG_SUFFIX, ""))


@dataclass
class DirectoryPlan:
    """What passes 1-3 would do, and the resulting segment files (base offset -> file suffix,
    "" normally, ".swap" for a read-only view of an uncompleted swap)."""

    remove: list[str] = field(default_factory=list)
    rename: list[tuple[str, str]] = field(default_factory=list)
    segments: dict[int, str] = field(default_factory=dict)
    orphan_indexes: list[str] = field(default_factory=list)


def plan_directory(fs: FileSystem, clock: Clock, dir_path: str, config: LogConfig) -> DirectoryPlan:
    """Passes 1-3 as a plan; changes nothing."""
    plan = DirectoryPlan()
    names = fs.list_dir(dir_path)
    parsed = {name: _split_name(name) for name in names}
    cleaned_bases = [info[0] for info in parsed.values() if info and info[2] == CLEANED_SUFFIX]
    min_cleaned = min(cleaned_bases, default=None)
    swaps: dict[int, list[str]] = {}
    ordinary: dict[int, list[str]] = {}
    for name, info in parsed.items():
        if info is None:
            continue
        base, _kind, status = info
        if status in (DELETED_SUFFIX, CLEANED_SUFFIX):
            plan.remove.append(name)
        elif status == SWAP_SUFFIX:
            if min_cleaned is not None and base >= min_cleaned:
                plan.remove.append(name)  # part of a group that was never completely swapped
            else:
                swaps.setdefault(base, []).append(name)
        else:
            ordinary.setdefault(base, []).append(name)
    valid_swaps = {base: files for base, files in swaps.items() if base_log_name(base) + SWAP_SUFFIX in files}
    for base, files in swaps.items():
        if base not in valid_swaps:
            plan.remove.extend(files)  # a swap without its data file replaces nothing
    if valid_swaps:
        low = min(valid_swaps)
        high = max(_next_offset_of_swap(fs, clock, dir_path, base, config) for base in valid_swaps)
        for base in list(ordinary):
            if low <= base < high:
                plan.remove.extend(ordinary.pop(base))
        for base, files in valid_swaps.items():
            for name in files:
                plan.rename.append((name, name[: -len(SWAP_SUFFIX)]))
            ordinary.pop(base, None)
    for base, files in ordinary.items():
        if base_log_name(base) in files:
            plan.segments[base] = ""
        else:
            plan.orphan_indexes.extend(files)
    for base in valid_swaps:
        plan.segments[base] = SWAP_SUFFIX
    return plan


def base_log_name(base_offset: int) -> str:
    return f"{base_offset:020d}{LOG_SUFFIX}"


def _next_offset_of_swap(fs: FileSystem, clock: Clock, dir_path: str, base: int, config: LogConfig) -> int:
    segment = LogSegment(fs, clock, dir_path, base, index_interval_bytes=config.index_interval_bytes,
                         max_index_size_bytes=config.segment_index_bytes, writable=False, file_suffix=SWAP_SUFFIX)
    try:
        return segment.read_next_offset()
    finally:
        segment.close_handlers()


@dataclass
class LoadedLog:
    """The result of loading: segments in base-offset order and the offsets to start from."""

    segments: list[LogSegment]
    log_end_offset: int
    recovery_point: int
    log_start_offset: int
    problems: list[str] = field(default_factory=list)


def load_log(fs: FileSystem, clock: Clock, dir_path: str, config: LogConfig, *, recovery_point: int,
             log_start_offset: int, clean_shutdown: bool, read_only: bool = False) -> LoadedLog:
    """Run the passes over ``dir_path`` and return the loaded segments."""
    plan = plan_directory(fs, clock, dir_path, config)
    problems: list[str] = []
    if not read_only:
        _apply_plan(fs, dir_path, plan)
    segments = []
    try:
        bases = sorted(plan.segments)
        # Segments that pass 5 will recover are not checked here: their indexes get rebuilt anyway.
        first_recovered = len(bases) if clean_shutdown else max(
            (slot for slot, base in enumerate(bases) if base <= recovery_point), default=0)
        for slot, base in enumerate(bases):
            suffix = plan.segments[base] if read_only else ""
            segments.append(_open_segment(fs, clock, dir_path, base, config, suffix, read_only,
                                          slot >= first_recovered, problems))
        if read_only:
            return _read_only_result(segments, log_start_offset, problems)
        if not clean_shutdown:
            _recover(fs, segments, recovery_point, problems)
        if segments and segments[-1].read_next_offset() < log_start_offset:
            problems.append(f"{dir_path}: log end is below the log start offset {log_start_offset}; "
                            "its segments were lost, restarting empty there")
            for segment in segments:
                segment.delete()
            segments = []
        if not segments:
            segments.append(LogSegment(fs, clock, dir_path, log_start_offset, create=True,
                                       index_interval_bytes=config.index_interval_bytes,
                                       max_index_size_bytes=config.segment_index_bytes))
            fs.fsync_dir(dir_path)
        segments[-1].resize_indexes(config.segment_index_bytes)
        log_end_offset = segments[-1].read_next_offset()
    except BaseException:
        for segment in segments:
            segment.close_handlers()
        raise
    recovery_point = log_end_offset if clean_shutdown else min(recovery_point, log_end_offset)
    log_start_offset = max(log_start_offset, segments[0].base_offset)
    return LoadedLog(segments, log_end_offset, max(recovery_point, min(log_start_offset, log_end_offset)),
                     log_start_offset, problems)


def _apply_plan(fs: FileSystem, dir_path: str, plan: DirectoryPlan) -> None:
    changed = False
    # Invalid .swap files go first, durably: until they are gone, the .cleaned files below them are
    # what marks them invalid (removing those first, then crashing, would complete an aborted swap).
    swaps = [name for name in plan.remove if name.endswith(SWAP_SUFFIX)]
    for name in swaps:
        fs.remove(os.path.join(dir_path, name))
    if swaps:
        fs.fsync_dir(dir_path)
    for name in [name for name in plan.remove if not name.endswith(SWAP_SUFFIX)] + plan.orphan_indexes:
        fs.remove(os.path.join(dir_path, name))
        changed = True
    changed = changed or bool(swaps)
    # Originals are gone (durably, below) before the swaps take their names.
    if changed and plan.rename:
        fs.fsync_dir(dir_path)
    for source, target in plan.rename:
        fs.rename(os.path.join(dir_path, source), os.path.join(dir_path, target))
        changed = True
    if changed:
        fs.fsync_dir(dir_path)
        logger.info("%s: removed %d temporary or obsolete files, completed %d swapped files",
                    dir_path, len(plan.remove) + len(plan.orphan_indexes), len(plan.rename))


def _open_segment(fs: FileSystem, clock: Clock, dir_path: str, base: int, config: LogConfig,
                  suffix: str, read_only: bool, skip_checks: bool, problems: list[str]) -> LogSegment:
    index_path = os.path.join(dir_path, f"{base:020d}{INDEX_SUFFIX}{suffix}")
    time_index_path = os.path.join(dir_path, f"{base:020d}{TIME_INDEX_SUFFIX}{suffix}")
    index_missing = not fs.exists(index_path) or not fs.exists(time_index_path)
    segment = LogSegment(fs, clock, dir_path, base, index_interval_bytes=config.index_interval_bytes,
                         max_index_size_bytes=config.segment_index_bytes, writable=not read_only,
                         file_suffix=suffix)
    if read_only or skip_checks:
        return segment
    try:
        if index_missing:
            raise CorruptIndexError(f"an index file of {segment.log_path} is missing")
        check_indexes(segment)
    except CorruptDataError as exc:
        logger.warning("%s; rebuilding the indexes of %s", exc, segment.log_path)
        truncated = segment.recover()
        if truncated:
            problems.append(f"{segment.log_path}: {truncated} damaged bytes cut at position "
                            f"{segment.size_bytes} while rebuilding its indexes")
    return segment


def _recover(fs: FileSystem, segments: list[LogSegment], recovery_point: int, problems: list[str]) -> None:
    """Pass 5: re-verify every segment from the one holding the recovery point on."""
    first = 0
    for position, segment in enumerate(segments):
        if segment.base_offset <= recovery_point:
            first = position
    for position in range(first, len(segments)):
        segment = segments[position]
        truncated = segment.recover()
        if truncated:
            later = segments[position + 1 :]
            problems.append(f"{segment.log_path}: cut a torn or corrupt tail of {truncated} bytes"
                            + (f", dropped {len(later)} later segments" if later else ""))
            for dropped in later:
                dropped.delete()
            del segments[position + 1 :]
            if later:
                fs.fsync_dir(segment.dir_path)
            return


def _read_only_result(segments: list[LogSegment], log_start_offset: int, problems: list[str]) -> LoadedLog:
    """A read-only view: the valid prefix of the last segment bounds what can be read."""
    if not segments:
        return LoadedLog([], log_start_offset, log_start_offset, log_start_offset, problems)
    last = segments[-1]
    last.size_bytes, log_end_offset = read_valid_end(last)
    log_start_offset = max(log_start_offset, segments[0].base_offset)
    return LoadedLog(segments, log_end_offset, log_end_offset, min(log_start_offset, log_end_offset), problems)


def check_indexes(segment: LogSegment) -> None:
    """Cheap sanity checks of a segment's indexes on open (a few small reads, whatever the size):
    whole entries, the last offset index entry points at a batch starting at its offset, the last
    time index entry matches the batch ending at its offset, and a segment holding timestamps has
    time index entries. Raises ``CorruptIndexError``; the caller rebuilds. Entries in the middle are
    checked when a read uses them (``LogSegment._scan_from_entry``, ``find_offset_by_timestamp``)."""
    offset_index, time_index = segment.offset_index, segment.time_index
    offset_index.quick_check(segment.size_bytes)
    time_index.quick_check(segment.size_bytes)
    if offset_index.entries:
        last = offset_index.entry(offset_index.entries - 1)
        header = segment.read_header_at(last.position)
        if header is None or header.base_offset != last.offset:
            raise CorruptIndexError(f"offset index {offset_index.path} entry {tuple(last)} does not point at a "
                                    "batch starting at that offset")
    last_time = time_index.last_entry
    if last_time.timestamp_ms >= 0:
        found = segment.translate_offset(last_time.offset, chunk_bytes=HEADER_BYTES)  # headers only
        if found is None or (found[1].last_offset, found[1].max_timestamp) != (last_time.offset, last_time.timestamp_ms):
            raise CorruptIndexError(f"time index {time_index.path} last entry {tuple(last_time)} does not match "
                                    "the batch ending at that offset")
    elif segment.size_bytes and segment.read_first_batch_timestamp() >= 0:
        raise CorruptIndexError(f"time index {time_index.path} is empty but the segment holds timestamps")


def read_valid_end(segment: LogSegment) -> tuple[int, int]:
    """``(position, next_offset)`` after the last valid batch of ``segment``, verifying CRCs from
    its last index entry to the current end of file and stopping quietly at an incomplete or damaged
    batch. For read-only views of a segment that another process may be writing (or left torn)."""
    end = segment.file.file_size()
    last_entry = segment.offset_index.lookup(2**63 - 1).position
    for start in dict.fromkeys((last_entry if 0 <= last_entry < end else 0, 0)):  # the entry may lie
        valid_end, next_offset = start, None
        try:
            for position, batch in segment.iter_batches(start, end):
                valid_end, next_offset = position + batch.size_bytes, batch.next_offset
        except CorruptRecordError as exc:
            logger.info("read-only view of %s stops at position %d: %s", segment.log_path, valid_end, exc)
        if next_offset is not None:
            return valid_end, next_offset
    return 0, segment.base_offset


def extend_valid_end(segment: LogSegment) -> tuple[int, int] | None:
    """For a read-only view of a segment another process appends to: ``(position, next_offset)``
    after the last valid batch past the view's current end, or None when nothing new is complete."""
    start, end = segment.size_bytes, segment.file.file_size()
    if end <= start:
        return None
    valid_end, next_offset = start, None
    try:
        for position, batch in segment.iter_batches(start, end):
            valid_end, next_offset = position + batch.size_bytes, batch.next_offset
    except CorruptRecordError as exc:  # a batch being written right now: stop before it
        logger.debug("read-only view of %s stops at position %d: %s", segment.log_path, valid_end, exc)
    return None if next_offset is None else (valid_end, next_offset)
