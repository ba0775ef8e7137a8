"""Loading a partition directory at open: Kafka's ``LogLoader``, in numbered passes.

1. **Temporary files.** ``*.deleted`` files are removed. ``*.cleaned`` files (an interrupted cleaning
   or split) are removed, and so is every ``*.swap`` file whose base offset is at or above the lowest
   ``.cleaned`` base offset (a swap whose group was never completely renamed). The other ``.swap``
   files are valid: a replacement that was completely written.
2. **Obsolete originals.** For the valid swaps, every ordinary segment file whose base offset lies in
   [lowest swap base, highest swap next offset) is removed: the swap replaces it.
3. **Complete the swaps.** Each ``.swap`` file is renamed to its final name.
4. **Load segments** in base-offset order. Index files without a ``.log`` are removed, unless that
   segment must have existed (a clean shutdown, or below the recovery point): a missing segment. A
   segment whose ``.index`` is missing or fails its checks has its indexes rebuilt from the data.
   Segments below the recovery point (all, after a clean shutdown) must end with a whole batch and
   the next must start where they end.
5. **Recover** after an unclean shutdown: every batch from the recovery point on is re-verified (CRC
   and offsets) and indexed again, from the offset index entry at or below the recovery point once
   the data confirms it (else from the start of that segment; ``LogSegment.recover``); later
   segments from their start. A torn tail at or above the
   recovery point (nothing valid follows it in its file) is cut and the later segments dropped.
   Segments wholly below the log start offset hold only deleted records, maybe never fsynced: they
   are neither checked nor recovered, and are removed.
6. **Offsets.** A log whose end is below the checkpointed log start offset after a crash (and whose
   recovery point is not above that start) restarts empty at the log start offset: records below it
   were deleted. The last segment's indexes get their full capacity back.
7. **Producer state** (only where producer-state snapshots exist: ``producer_snapshot``): the newest
   intact snapshot at or below the log end offset, and a replay of the producer batches after it
   when they may exist; snapshots above the log end are removed, damaged ones reported and
   rewritten from the replay. After an unclean shutdown the replay starts at or below the recovery
   point and the aborted transactions whose markers recovery re-verified are re-derived.

Whatever else is wrong is *damage* (module ``damage``): nothing is cut and ``LoadedLog.damage`` says
what was found; the partition stays as it is until an explicit repair.

Passes 1-3 are computed as a plan first (``plan_directory``). A writer applies it; a read-only opener
only uses the plan's view of which files make up the segments, so it never changes a file, yet sees
the same segments a writer would after an interrupted swap.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Callable

from ..clock import Clock
from ..config import LogConfig
from ..errors import CorruptDataError, CorruptIndexError, CorruptRecordError
from ..fs import FileSystem
from ..records.decoder import HEADER_BYTES
from .damage import (LogDamage, data_damage, dead_segment_count, drop_segments, is_zero, missing_segment_damage,
                     next_offset_before, orphan_index_bases, remove_segments_in_order, segment_end, valid_batch_after)
from .producer_snapshot import SNAPSHOT_SUFFIX, ProducerStateLoad, load_producer_state, snapshot_offset
from .producer_state import ProducerStateTable
from .segment import (CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX,
                      TIME_INDEX_SUFFIX, LogSegment)
from .txn_index import TXN_INDEX_SUFFIX, TxnIndexEntry

logger = logging.getLogger(__name__)

_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


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
    snapshots: list[int] = field(default_factory=list)  # producer-state snapshot offsets, ascending
    txn_indexes: set[int] = field(default_factory=set)  # the segments with a ``.txnindex`` file


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
            if name.endswith(SNAPSHOT_SUFFIX):
                offset = snapshot_offset(name)
                if offset is not None:
                    plan.snapshots.append(offset)
            elif name.endswith(SNAPSHOT_SUFFIX + ".tmp") and snapshot_offset(name[:-4]) is not None:
                plan.remove.append(name)  # a snapshot write a crash interrupted (the old file, if any, stands)
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
    for base, files in swaps.items():
        # A swap whose data file already has its final name (its .log.swap was renamed, and no
        # .cleaned file lies at or below it: the whole group was durably in .swap before any old
        # file was renamed away): that final .log is the new segment's, and so is the .txnindex.swap
        # left behind. It is completed, not removed like the other indexes: they are rebuilt from
        # the log when missing, while a missing .txnindex reads as "no aborted transaction".
        txn_swap = f"{base:020d}{TXN_INDEX_SUFFIX}{SWAP_SUFFIX}"
        if base not in valid_swaps and txn_swap in files and base_log_name(base) in ordinary.get(base, ()):
            plan.remove.remove(txn_swap)
            final = txn_swap[: -len(SWAP_SUFFIX)]
            plan.rename.append((txn_swap, final))
            if final not in ordinary[base]:
                ordinary[base].append(final)
    for base, files in ordinary.items():
        if base_log_name(base) in files:
            plan.segments[base] = ""
        else:
            plan.orphan_indexes.extend(files)
    for base in valid_swaps:
        plan.segments[base] = SWAP_SUFFIX
    txn_index_names = (TXN_INDEX_SUFFIX, TXN_INDEX_SUFFIX + SWAP_SUFFIX)
    plan.txn_indexes = {base for base, files in chain(ordinary.items(), valid_swaps.items())
                        if any(name[20:] in txn_index_names for name in files)}
    plan.snapshots.sort()
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
    """The result of loading: segments in base-offset order and the offsets to start from.
    ``damage``: what makes the partition damaged (then nothing was cut: the segments are as found,
    and ``orphan_indexes`` the index files kept as the evidence of a missing segment)."""

    segments: list[LogSegment]
    log_end_offset: int
    recovery_point: int
    log_start_offset: int
    problems: list[str] = field(default_factory=list)
    damage: LogDamage | None = None
    orphan_indexes: list[str] = field(default_factory=list)
    # Pass 7: the partition's producers and open transactions (empty without snapshots), and what
    # the snapshots looked like (None for a damaged log: repair reloads it).
    producer_state: ProducerStateTable = field(default_factory=ProducerStateTable)
    producer_load: ProducerStateLoad | None = None
    snapshot_offsets: list[int] = field(default_factory=list)  # the snapshot files found (a damaged log's too)


def load_log(fs: FileSystem, clock: Clock, dir_path: str, config: LogConfig, *, recovery_point: int,
             log_start_offset: int, clean_shutdown: bool, read_only: bool = False,
             ) -> LoadedLog:
    """Run the passes over ``dir_path`` and return the loaded segments. Damage that no crash could
    have left (module ``damage``) is returned as ``LoadedLog.damage``, with nothing cut.
    """
    plan = plan_directory(fs, clock, dir_path, config)
    loaded = _load_segments(fs, clock, dir_path, config, plan, recovery_point=recovery_point,
                            log_start_offset=log_start_offset, clean_shutdown=clean_shutdown, read_only=read_only)
    loaded.snapshot_offsets = plan.snapshots
    if loaded.damage is None and loaded.segments and plan.snapshots:
        rederive = None if clean_shutdown or read_only else recovery_point
        on_aborted = None
        if rederive is not None:
            on_aborted = _rederive_txn_indexes(loaded.segments, rederive)
        loaded.producer_load = load_producer_state(
            fs, dir_path, plan.snapshots, loaded.segments, loaded.producer_state,
            log_start_offset=loaded.log_start_offset, log_end_offset=loaded.log_end_offset,
            recovery_point=rederive, read_only=read_only,
            problems=loaded.problems, on_aborted=on_aborted)
        if on_aborted is not None:
            for segment in loaded.segments:
                if segment.txn_index.present:
                    segment.txn_index.flush()
        loaded.snapshot_offsets = loaded.producer_load.snapshots
        loaded.producer_state.forget_below(loaded.log_start_offset)
    return loaded


def _rederive_txn_indexes(segments: list[LogSegment], recovery_point: int) -> Callable[[Any, int], None]:
    """After an unclean shutdown: cut every ``.txnindex`` entry whose marker is at or above the
    recovery point (a power loss may have kept the marker and lost the entry, or the reverse) and
    return pass 7's callback that writes them again from the replay, in the segment of each marker."""
    bases = [segment.base_offset for segment in segments]
    for segment in segments:
        if segment.txn_index.present and segment.read_next_offset() > recovery_point:
            segment.txn_index.truncate_to(recovery_point)

    def rederived(completed: Any, last_stable_offset: int) -> None:
        segment = segments[bisect.bisect_right(bases, completed.last_offset) - 1]
        try:
            segment.txn_index.append(TxnIndexEntry(completed.producer_id, completed.first_offset,
                                                   completed.last_offset, last_stable_offset))
        except CorruptIndexError:
            pass  # a damaged file (reported when truncated): the log rebuilds it from the data on first use
    return rederived


def _load_segments(fs: FileSystem, clock: Clock, dir_path: str, config: LogConfig, plan: DirectoryPlan, *,
                   recovery_point: int, log_start_offset: int, clean_shutdown: bool, read_only: bool) -> LoadedLog:
    """Passes 1-6."""
    problems: list[str] = []
    # Index files whose .log is gone, where that segment must have existed (a clean store, or below
    # the recovery point) may be a missing segment's: judged once the segments are open.
    suspects = {base: names for base, names in orphan_index_bases(plan.orphan_indexes).items()
                if clean_shutdown or base < recovery_point}
    plan.orphan_indexes = [name for name in plan.orphan_indexes
                           if not any(name in names for names in suspects.values())]
    # A suspect's ``.log.deleted`` is the evidence of an interrupted deletion: a writer removes it
    # only after the orphans it explains (a crash in between must not leave them unexplained).
    deleted_logs = {base: base_log_name(base) + DELETED_SUFFIX for base in suspects
                    if base_log_name(base) + DELETED_SUFFIX in plan.remove}
    plan.remove = [name for name in plan.remove if name not in deleted_logs.values()]
    if not read_only:
        _apply_plan(fs, dir_path, plan)
    segments: list[LogSegment] = []
    damage = None
    try:
        bases = sorted(plan.segments)
        # After a crash, segments wholly below the log start offset (a later one starts at or below
        # it) hold only deleted records, maybe never fsynced (deleted before a flush reached them), so
        # maybe torn: they are neither checked nor recovered, and a writer removes them. (A clean
        # close fsynced them: they stay, checked, for retention.)
        dead = 0 if clean_shutdown else dead_segment_count(bases, log_start_offset)
        # Segments that pass 5 will recover are not checked here: their indexes get rebuilt anyway.
        first_recovered = len(bases) if clean_shutdown else max(
            (slot for slot, base in enumerate(bases) if base <= recovery_point), default=0)
        first_recovered = max(first_recovered, dead)
        for slot, base in enumerate(bases):
            suffix = plan.segments[base] if read_only else ""
            segment, found = _open_segment(fs, clock, dir_path, base, config, suffix, read_only,
                                           slot >= first_recovered or slot < dead)
            segment.txn_index.present = base in plan.txn_indexes
            segments.append(segment)
            damage = damage or found
        # Offsets run on from one segment to the next, except in a compacted topic: a truncation
        # inside a cleaned segment leaves it ending below the log end offset the next roll starts at.
        gaps = config.compact
        start = log_start_offset
        evidence = _missing_segments(fs, dir_path, segments, suspects, read_only, log_start_offset, clean_shutdown,
                                     deleted_logs)
        if evidence:
            damage = damage or missing_segment_damage(dir_path, min(evidence))
        if read_only:
            try:
                return _read_only_result(segments, log_start_offset, problems, clean_shutdown, damage, gaps,
                                         recovery_point, first_recovered, dead)
            except CorruptDataError as exc:
                damage = LogDamage("data", dir_path, None, segments[0].base_offset, f"{dir_path}: {exc}")
                return _read_only_result(segments, log_start_offset, problems, False, damage, gaps,
                                         recovery_point, first_recovered, dead)
        try:
            if damage is None:
                damage = _check_ends(segments[dead:first_recovered],
                                     segments[first_recovered] if first_recovered < len(segments) else None,
                                     gaps, start)
            if damage is None and not clean_shutdown:
                segments, damage = _recover(fs, segments, first_recovered, recovery_point, problems, gaps, start)
                for segment in segments[first_recovered:]:  # an abort whose marker a crash lost goes too
                    if segment.txn_index.present:
                        segment.txn_index.truncate_to(segment.read_next_offset())
            if damage is None and segments and segments[-1].read_next_offset() < log_start_offset:
                log_end_offset = segments[-1].read_next_offset()
                # A clean store never has its end below its start; after a crash it may (the
                # unsynced records up to a delete_records were lost), but never below a recovery
                # point above the start: fsynced records are missing then.
                if clean_shutdown or recovery_point > log_start_offset:
                    damage = LogDamage("log_start_offset", dir_path, None, log_end_offset,
                                       f"the checkpointed log start offset {log_start_offset} is above the log end "
                                       f"offset {log_end_offset}: that value is refused, the log is kept")
                else:
                    # After a crash: records up to the start offset were deleted (delete_records), and
                    # the unsynced rest was lost. Nothing readable goes.
                    problems.append(f"{dir_path}: log end {log_end_offset} is below the log start offset "
                                    f"{log_start_offset} after a crash; restarting empty there")
                    logger.warning("%s", problems[-1])
                    segments = drop_segments(fs, dir_path, segments, 0)
        except CorruptDataError as exc:  # unforeseen bad bytes: this partition is damaged, not the store
            damage = LogDamage("data", dir_path, None, segments[0].base_offset if segments else log_start_offset,
                               f"{dir_path}: {exc}")
        if damage is not None:
            return _damaged_result(dir_path, segments, log_start_offset, recovery_point, problems, damage, evidence)
        if dead and len(segments) > dead:
            segments = _drop_dead_prefix(fs, dir_path, segments, dead)
        if not segments:
            segments.append(LogSegment(fs, clock, dir_path, log_start_offset, create=True,
                                       index_interval_bytes=config.index_interval_bytes,
                                       max_index_size_bytes=config.segment_index_bytes))
            fs.fsync_dir(dir_path)
        segments[-1].expand_indexes_lazily(config.segment_index_bytes)  # mapped by the first append
        log_end_offset = segments[-1].read_next_offset()
    except BaseException:
        for segment in segments:
            segment.close_handlers()
        raise
    if not clean_shutdown and recovery_point > log_end_offset:
        problems.append(f"{dir_path}: the recovery point {recovery_point} is above the log end offset "
                        f"{log_end_offset} after recovery: fsynced records below it are missing")
        logger.warning("%s", problems[-1])
    recovery_point = log_end_offset if clean_shutdown else min(recovery_point, log_end_offset)
    log_start_offset = max(log_start_offset, segments[0].base_offset)
    return LoadedLog(segments, log_end_offset, max(recovery_point, min(log_start_offset, log_end_offset)),
                     log_start_offset, problems)


def _missing_segments(fs: FileSystem, dir_path: str, segments: list[LogSegment], suspects: dict[int, list[str]],
                      read_only: bool, log_start_offset: int, clean_shutdown: bool,
                      deleted_logs: dict[int, str]) -> dict[int, list[str]]:
    """The suspect orphan index files that are a missing segment's: those whose base offset no
    segment covers, above the log start offset. (Index files at a base inside a segment's offsets
    never had data of their own; those of a segment wholly below the log start offset, or before
    every segment after a crash when its ``.log.deleted`` is there (``deleted_logs``), are what a
    prefix deletion interrupted between renaming a ``.log`` and its indexes leaves. A writer
    removes them, then that ``.log.deleted``.)"""
    evidence = {}
    for base, names in suspects.items():
        before = [segment for segment in segments if segment.base_offset < base]
        after = [segment for segment in segments if segment.base_offset > base]
        try:
            inside = bool(before) and base < before[-1].read_next_offset()
        except CorruptRecordError:
            inside = False
        # Before every segment, after a crash: a prefix deletion (retention renames the oldest
        # segment's files one by one, ``.log`` first, before its new start offset is checkpointed)
        # was interrupted. A power loss keeps a prefix of the directory's renames: an index renamed
        # means its ``.log`` was too. Without that ``.log.deleted`` the segment's data is missing.
        front = not before and not clean_shutdown and base in deleted_logs
        if not inside and not front and not (after and after[0].base_offset <= log_start_offset):
            evidence[base] = names
        elif not read_only:
            for name in names + ([deleted_logs[base]] if base in deleted_logs else []):
                fs.remove(os.path.join(dir_path, name))
            logger.info("%s: removed index files without data at base %d (%s)", dir_path, base,
                        "an interrupted deletion" if front else "inside a segment, or below the log start offset")
    return evidence


def _damaged_result(dir_path: str, segments: list[LogSegment], log_start_offset: int, recovery_point: int,
                    problems: list[str], damage: LogDamage, evidence: dict[int, list[str]]) -> LoadedLog:
    """A damaged partition: its files as found. Its recovery point and log start offset stay the
    checkpointed ones (written back to the checkpoints until a repair); its end is the damage."""
    problems.append(f"partition {os.path.basename(dir_path)} is damaged: {damage.description}; "
                    "nothing was cut (logstore repair cuts it)")
    logger.error("%s", problems[-1])
    return LoadedLog(segments, damage.offset, recovery_point, log_start_offset, problems, damage,
                     [os.path.join(dir_path, name) for names in evidence.values() for name in names])


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
                  suffix: str, read_only: bool, skip_checks: bool) -> tuple[LogSegment, LogDamage | None]:
    """Open one segment; unless ``skip_checks`` (read-only, or recovered by pass 5), check its
    indexes and rebuild them from the data when they fail. Invalid bytes found meanwhile are damage
    (this segment lies below the recovery point, or the store shut down cleanly): nothing is cut,
    and the ``LogDamage`` returned beside the segment says what was found."""
    index_path = os.path.join(dir_path, f"{base:020d}{INDEX_SUFFIX}{suffix}")
    time_index_path = os.path.join(dir_path, f"{base:020d}{TIME_INDEX_SUFFIX}{suffix}")
    index_missing = not fs.exists(index_path) or not fs.exists(time_index_path)
    segment = LogSegment(fs, clock, dir_path, base, index_interval_bytes=config.index_interval_bytes,
                         max_index_size_bytes=config.segment_index_bytes, writable=not read_only,
                         file_suffix=suffix)
    if read_only or skip_checks:
        return segment, None
    try:
        if index_missing:
            raise CorruptIndexError(f"an index file of {segment.log_path} is missing")
        check_indexes(segment)
    except CorruptDataError as exc:
        logger.warning("%s; rebuilding the indexes of %s", exc, segment.log_path)
        invalid_bytes = segment.recover(cut_tail=False)
        if invalid_bytes:
            valid_end = segment.file.file_size() - invalid_bytes
            return segment, data_damage(segment, valid_end, next_offset_before(segment, valid_end),
                                        f"{invalid_bytes} bytes that are not valid batches")
    return segment, None


def _check_ends(segments: list[LogSegment], following: LogSegment | None, gaps: bool,
                log_start_offset: int) -> LogDamage | None:
    """The segments not recovered by pass 5 (all of them after a clean shutdown) lie below the
    recovery point: each must end with a whole batch and the next segment must start where it
    ends. Headers only, from the last index entry (a few small reads per segment): damage inside a
    batch is found by the reads that reach it, and by ``logstore check``."""
    for slot, segment in enumerate(segments):
        try:
            position, next_offset = segment_end(segment)
        except CorruptRecordError as exc:
            position, next_offset = _valid_prefix_end(segment)
            what = re.sub(r" at position \d+", "", str(exc).replace(f" in {segment.log_path}", ""))
            return data_damage(segment, position, next_offset, what)
        file_size = segment.file.file_size()
        if position != file_size:
            return data_damage(segment, position, next_offset, f"{file_size - position} bytes of an incomplete batch "
                               f"(a torn tail, where no crash could have torn one)")
        after = segments[slot + 1] if slot + 1 < len(segments) else following
        hole = _hole(segment, next_offset, after, gaps, log_start_offset)
        if hole is not None:
            return hole
    return None


def _hole(segment: LogSegment, next_offset: int, following: LogSegment | None, gaps: bool,
          log_start_offset: int) -> LogDamage | None:
    """The damage when ``following`` does not start where ``segment`` ends (``gaps``: a compacted
    topic, where only an overlap is damage). Below the log start offset nothing is damage: a prefix
    deletion (``delete_records``, retention) interrupted by a crash leaves holes in dead data."""
    if following is None or following.base_offset == next_offset or following.base_offset <= log_start_offset:
        return None
    if gaps and following.base_offset > next_offset:
        return None
    if following.base_offset > next_offset:
        what = f"offsets {next_offset}..{following.base_offset - 1} are missing before {following.log_path}"
    else:
        what = f"{following.log_path} starts at {following.base_offset}, inside the previous segment"
    return LogDamage("hole", segment.log_path, segment.file.file_size(), next_offset,
                     f"{segment.log_path} ends at offset {next_offset}: {what}")


def _valid_prefix_end(segment: LogSegment) -> tuple[int, int]:
    """``(position, next_offset)`` after the valid batches at the start of ``segment`` (to name damage)."""
    position, next_offset = 0, segment.base_offset
    try:
        for batch_position, batch in segment.iter_batches(0, segment.file.file_size()):
            position, next_offset = batch_position + batch.header.size_bytes, batch.header.next_offset
    except CorruptRecordError:
        pass
    return position, next_offset


def _recover(fs: FileSystem, segments: list[LogSegment], first: int, recovery_point: int,
             problems: list[str], gaps: bool, log_start_offset: int) -> tuple[list[LogSegment], LogDamage | None]:
    """Pass 5: re-verify every segment from the one holding the recovery point on (that one from its
    index entry at or below the recovery point, when the data confirms that entry). A torn tail (no
    valid batch follows it in its file, or only zeros lie between; at or above the recovery point)
    is cut, and the later segments, all above the recovery point, are dropped: a power loss lost
    that file's unsynced tail. Any other invalid bytes, or a hole below the recovery point, are
    damage: nothing is cut."""
    for slot in range(first, len(segments)):
        segment = segments[slot]
        file_size = segment.file.file_size()
        # From the index entry at or below the recovery point: the bytes before it were fsynced.
        # Every segment's indexes are trimmed, the active one's too: it grows again at its first
        # write (``expand_indexes_lazily``), so a recovered partition holds no mapping, and its
        # files are those a clean open would leave (a second recovery changes nothing).
        invalid_bytes = segment.recover(cut_tail=False, recovery_point=recovery_point)
        valid_end = file_size - invalid_bytes
        next_offset = next_offset_before(segment, valid_end)
        later = segments[slot + 1 :]
        if invalid_bytes:
            follows = valid_batch_after(segment, valid_end, next_offset - 1, file_size)
            torn = follows is None or is_zero(segment, valid_end, follows)
            # Records below the log start offset are deleted: only [start, recovery point) must survive.
            if not torn or max(next_offset, log_start_offset) < recovery_point:
                what = ("invalid bytes followed by valid batches" if not torn else
                        f"invalid bytes below the recovery point {recovery_point}")
                return segments, data_damage(segment, valid_end, next_offset, f"{invalid_bytes} {what}")
            segment.file.truncate_to(valid_end)
            problems.append(f"{segment.log_path}: cut a torn tail of {invalid_bytes} bytes at position {valid_end} "
                            f"(offset {next_offset}, at or above the recovery point {recovery_point})"
                            + (f", dropped {len(later)} later segments" if later else ""))
            logger.warning("%s", problems[-1])
            return drop_segments(fs, segment.dir_path, segments, slot + 1), None
        # Above the recovery point a gap is a power loss's (a file lost its unsynced tail while a later
        # one kept its pages), even in a compacted topic: a truncation fills its gaps (``_fill_to``).
        hole = _hole(segment, next_offset, later[0] if later else None, False, log_start_offset)
        if hole is not None:
            below = max(next_offset, log_start_offset) < recovery_point
            if below and gaps and later[0].base_offset > next_offset:
                continue  # fsynced: a compacted topic's gap, from a truncation by an older version
            if below or later[0].base_offset < next_offset:
                return segments, hole
            problems.append(f"{segment.log_path}: offsets from {next_offset} are missing (above the recovery point "
                            f"{recovery_point}: not fsynced); dropped the {len(later)} later segments")
            logger.warning("%s", problems[-1])
            return drop_segments(fs, segment.dir_path, segments, slot + 1), None
    return segments, None


def _drop_dead_prefix(fs: FileSystem, dir_path: str, segments: list[LogSegment], count: int) -> list[LogSegment]:
    """Remove the ``count`` oldest segments (wholly below the log start offset): renamed ``.deleted``
    oldest first, each rename made durable (a crash leaves a gap-free suffix), then removed, as
    retention would. Returns the segments kept."""
    remove_segments_in_order(fs, dir_path, segments[:count])
    logger.info("%s: removed %d segments below the log start offset %d", dir_path, count,
                segments[count].base_offset)
    return segments[count:]


def _read_only_result(segments: list[LogSegment], log_start_offset: int, problems: list[str],
                      clean_shutdown: bool, damage: LogDamage | None, gaps: bool, recovery_point: int,
                      first_recovered: int, dead: int = 0) -> LoadedLog:
    """A read-only view: the valid prefix of the last segment bounds what can be read, when a writer
    may be appending to it (or crashed). A cleanly shut-down store has no torn tail: its segments
    must end with whole batches, contiguous, or the view is of a damaged partition. After an unclean
    shutdown the segments below the recovery point are checked so too, and the view of those above
    it ends where a writer's recovery would cut (``_bound_view``): never a hole in what it reads."""
    if not segments:
        return LoadedLog([], log_start_offset, log_start_offset, log_start_offset, problems, damage)
    if clean_shutdown and damage is None:
        damage = _check_ends(segments[dead:-1], segments[-1], gaps, log_start_offset)
    elif damage is None:
        first_recovered = min(first_recovered, len(segments) - 1)
        damage = _check_ends(segments[dead:first_recovered], segments[first_recovered], gaps, log_start_offset)
        if damage is None:
            segments, damage = _bound_view(segments, first_recovered, recovery_point, problems, log_start_offset,
                                           gaps)
    last = segments[-1]
    last.size_bytes, log_end_offset = read_valid_end(last)
    if clean_shutdown and damage is None and last.size_bytes != last.file.file_size():
        damage = data_damage(last, last.size_bytes, log_end_offset, f"{last.file.file_size() - last.size_bytes} "
                             "bytes that are not valid batches (the store shut down cleanly: not a torn tail)")
    if clean_shutdown and damage is None and log_end_offset < log_start_offset:
        damage = LogDamage("log_start_offset", last.dir_path, None, log_end_offset,
                           f"the checkpointed log start offset {log_start_offset} is above the log end offset "
                           f"{log_end_offset}: that value is refused")
    if damage is not None:
        problems.append(f"partition {os.path.basename(last.dir_path)} is damaged: {damage.description}")
        return LoadedLog(segments, log_end_offset, log_end_offset, log_start_offset, problems, damage)
    log_start_offset = max(log_start_offset, segments[0].base_offset)
    return LoadedLog(segments, log_end_offset, log_end_offset, min(log_start_offset, log_end_offset), problems)


def _bound_view(segments: list[LogSegment], first: int, recovery_point: int, problems: list[str],
                log_start_offset: int, gaps: bool) -> tuple[list[LogSegment], LogDamage | None]:
    """Pass 5 as a read-only view sees it (it cannot cut, nor rebuild indexes): each segment from
    ``first`` on but the last ends with a valid batch (CRCs from its last index entry) and the next
    starts there. Where a writer would cut a torn tail or a gap above the recovery point and drop the
    later segments, the view ends there (reported in ``problems``); what a writer would call damage
    is returned as such. Damage further inside a batch is reported by the reads that reach it."""
    for slot in range(first, len(segments) - 1):
        segment, following = segments[slot], segments[slot + 1]
        file_size = segment.file.file_size()
        valid_end, next_offset = read_valid_end(segment)
        below = max(next_offset, log_start_offset) < recovery_point
        if valid_end != file_size:
            follows = valid_batch_after(segment, valid_end, next_offset - 1, file_size)
            if (follows is not None and not is_zero(segment, valid_end, follows)) or below:
                what = ("invalid bytes followed by valid batches" if not below else
                        f"invalid bytes below the recovery point {recovery_point}")
                return segments, data_damage(segment, valid_end, next_offset, f"{file_size - valid_end} {what}")
            what = f"a torn tail of {file_size - valid_end} bytes at position {valid_end}"
        else:
            hole = _hole(segment, next_offset, following, False, log_start_offset)
            if hole is None or (below and gaps and following.base_offset > next_offset):
                continue  # contiguous; or a compacted topic's fsynced gap (see ``_recover``)
            if below or following.base_offset < next_offset:
                return segments, hole
            what = f"offsets from {next_offset} are missing (above the recovery point {recovery_point})"
        problems.append(f"{segment.log_path}: {what}; the read-only view ends at offset {next_offset}, where a "
                        f"writer's recovery cuts (dropping the {len(segments) - slot - 1} later segments)")
        logger.warning("%s", problems[-1])
        for later in segments[slot + 1 :]:
            later.close_handlers()
        return segments[: slot + 1], None
    return segments, None


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
