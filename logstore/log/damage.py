"""Damaged partitions: telling a crash's torn tail from damage, and the explicit repair.

A crash can only leave a *torn tail*: a process kill tears the last batch of the last segment; a
power loss keeps a prefix of each file's unsynced writes (possibly with torn last bytes), so every
byte it loses lies at or above the recovery point. The loader cuts such a tail. Anything else is
*damage*, and the loader cuts nothing: the partition gets a ``LogDamage`` (the ``Log`` refuses
reads and writes with ``LogDamagedError``; the store lists it in its problems) until ``repair``.

This module owns the scans that decide (``segment_end``, ``valid_batch_after``, ``is_zero``), the
``LogDamage`` record, and the repair's two steps: ``plan_repair`` verifies every segment from the
first and finds the first damage (what recovery would cut), ``apply_repair`` cuts there, logged.
``Log.repair`` runs them under the log's locks and takes the segments that are left.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
from dataclasses import dataclass, field

from ..errors import CorruptRecordError, LogDamagedError
from ..fs import FileSystem
from ..records.decoder import HEADER_BYTES, MAGICS, RecordBatch, read_header
from .segment import DELETED_SUFFIX, LogSegment

logger = logging.getLogger(__name__)

_SEARCH_CHUNK_BYTES = 1 << 20
_END_CHUNK_BYTES = 16 * 1024  # from the last index entry to the end: usually one read
_MAGIC_AT = 12  # base_offset (8) and batch_length (4) come first
_MAGIC_BYTE = re.compile(b"[" + re.escape(bytes(MAGICS)) + b"]")  # any magic a reader knows (old logs)


@dataclass(frozen=True)
class LogDamage:
    """What is wrong with a partition: ``path`` (the file), ``position`` in it (None for a file
    that is missing or a checkpoint value), ``offset`` (the first offset it affects) and a
    ``description``. ``kind``: "data" (bad bytes), "hole" (offsets missing between segments) or
    "log_start_offset" (a checkpointed value that contradicts the log)."""

    kind: str
    path: str
    position: int | None
    offset: int
    description: str

    def error(self, name: str, repair_command: str) -> LogDamagedError:
        """The error a read or write of the damaged partition ``name`` raises."""
        return LogDamagedError(f"partition {name} is damaged: {self.description}; nothing was cut. "
                               f"`logstore check` shows it; `{repair_command}` cuts the log at its first damage",
                               self)


def data_damage(segment: LogSegment, position: int, offset: int, what: str) -> LogDamage:
    return LogDamage("data", segment.log_path, position, offset,
                     f"{segment.log_path}: {what} at position {position} (offset {offset})")


# --- scans ---------------------------------------------------------------------------------------


def next_offset_before(segment: LogSegment, end: int) -> int:
    """The offset after the last batch ending at or before ``end`` (headers only, from the last index
    entry; the indexes were just rebuilt from the valid prefix)."""
    next_offset = segment.base_offset
    start = min(max(segment.offset_index.lookup(2**63 - 1).position, 0), end)
    chunk_bytes = end - start if end - start <= _END_CHUNK_BYTES else HEADER_BYTES
    for _, header, _, _ in segment.scan_headers(start, end, max(chunk_bytes, HEADER_BYTES)):
        next_offset = header.next_offset
    return next_offset


def segment_end(segment: LogSegment) -> tuple[int, int]:
    """``(position, next_offset)`` after the last complete batch of ``segment``'s file, reading
    headers from its last index entry (usually one small read), or from 0 when that entry does not
    point at a batch with its offset. Raises ``CorruptRecordError`` at a damaged header."""
    end = segment.file.file_size()
    entry = segment.offset_index.lookup(2**63 - 1)
    if 0 < entry.position < end:  # a lying entry may hold any number, negative ones too
        try:
            return _scan_end(segment, entry.position, end, entry.offset)
        except CorruptRecordError:
            pass  # the index lies, or the data is damaged there: the scan from 0 tells which
    return _scan_end(segment, 0, end, None)


def _scan_end(segment: LogSegment, start: int, end: int, entry_offset: int | None) -> tuple[int, int]:
    position, next_offset = start, segment.base_offset
    # A short tail in one read; a long one (large batches) header by header.
    chunk_bytes = end - start if end - start <= _END_CHUNK_BYTES else HEADER_BYTES
    for batch_position, header, _, _ in segment.scan_headers(start, end, max(chunk_bytes, HEADER_BYTES)):
        if entry_offset is not None and batch_position == start and header.base_offset != entry_offset:
            raise CorruptRecordError(f"index entry ({entry_offset}, {start}) of {segment.log_path} is wrong")
        position, next_offset = batch_position + header.size_bytes, header.next_offset
    if entry_offset is not None and position == start:
        raise CorruptRecordError(f"no batch at index entry ({entry_offset}, {start}) of {segment.log_path}")
    return position, next_offset


def valid_batch_after(segment: LogSegment, start: int, after_offset: int, end: int) -> int | None:
    """The first position in (``start``, ``end``) where a whole, valid batch (header and body CRCs)
    with offsets after ``after_offset`` that fit the segment starts; None when there is none. Only
    positions whose magic byte is right are decoded, so a zero-filled or random tail is passed over
    quickly. Used when damage was found, never on a healthy path."""
    position = start + 1
    while position + HEADER_BYTES <= end:
        chunk = segment.file.pread(min(_SEARCH_CHUNK_BYTES, end - position), position)
        if len(chunk) < HEADER_BYTES:
            return None
        match = _MAGIC_BYTE.search(chunk, _MAGIC_AT)
        found = match.start() if match else -1
        while found >= 0 and found - _MAGIC_AT + HEADER_BYTES <= len(chunk):
            at = found - _MAGIC_AT
            candidate = position + at
            try:
                header = read_header(chunk, at, whole=False)
            except CorruptRecordError:
                header = None
            if (header is not None and header.base_offset > after_offset and segment.can_hold(header.last_offset)
                    and header.base_offset <= header.last_offset and candidate + header.size_bytes <= end):
                try:
                    RecordBatch(header, segment.file.pread(header.size_bytes, candidate)).verify("", candidate)
                    return candidate
                except CorruptRecordError:
                    pass
            match = _MAGIC_BYTE.search(chunk, found + 1)
            found = match.start() if match else -1
        position += max(len(chunk) - HEADER_BYTES, 1)
    return None


def is_zero(segment: LogSegment, start: int, end: int) -> bool:
    """Whether bytes [start, end) of the segment's file are all zero (pages a power loss never wrote)."""
    while start < end:
        chunk = segment.file.pread(min(_SEARCH_CHUNK_BYTES, end - start), start)
        if not chunk or chunk.count(0) != len(chunk):
            return bool(not chunk)
        start += len(chunk)
    return True


# --- the repair ----------------------------------------------------------------------------------


@dataclass
class RepairPlan:
    """What ``repair`` does (or did): remove the ``dead_segments`` oldest segments (wholly below the
    log start offset: deleted records awaiting retention) when one of them is damaged
    (``dead_reason``); cut segment ``slot`` at byte ``position`` (None: nothing to cut) and remove
    every later segment. ``removed_offsets`` is ``(first, end)`` of the readable offsets that go,
    ``removed_records`` the records of the valid batches found among them, ``removed_bytes`` every
    byte that goes; ``log_start_offset`` the log start offset afterwards."""

    name: str
    slot: int | None = None
    position: int = 0
    cut_offset: int = 0
    reason: str = ""
    removed_offsets: tuple[int, int] = (0, 0)
    removed_records: int = 0
    removed_bytes: int = 0
    removed_files: list[str] = field(default_factory=list)
    log_start_offset: int = 0
    start_offset_reset: bool = False
    dead_segments: int = 0
    dead_reason: str = ""
    dead_bytes: int = 0

    @property
    def changes(self) -> bool:
        return self.slot is not None or bool(self.removed_files) or self.start_offset_reset

    def describe(self, done: bool) -> str:
        """One line: what the repair did (``done``) or would do."""
        if not self.changes:
            return f"{self.name}: no damage found, nothing to repair"
        parts = []
        cut, remove = ("cut", "removed") if done else ("would cut", "would remove")
        if self.dead_segments:
            which = "the segment" if self.dead_segments == 1 else f"the {self.dead_segments} segments"
            parts.append(f"{remove} {which} wholly below the log start offset {self.log_start_offset} (deleted "
                         f"records awaiting retention; no readable record), damaged: {self.dead_reason}")
        if self.slot is not None:
            first, end = self.removed_offsets
            offsets = f"offsets {first}..{end - 1}" if end > first else "no offsets"
            parts.append(f"{cut} {self.reason}: {remove} {self.removed_bytes - self.dead_bytes} bytes, "
                         f"{self.removed_records} readable records, {offsets}")
        elif len(self.removed_files) > self.dead_segments:
            parts.append(f"{remove} {len(self.removed_files) - self.dead_segments} index files of a missing segment")
        if self.start_offset_reset:
            parts.append(f"log start offset {'set' if done else 'would be set'} to {self.log_start_offset}")
        return f"{self.name}: " + "; ".join(parts)


def _count_valid(segment: LogSegment, start: int, after_offset: int, end: int,
                 from_start: bool = False) -> tuple[int, int]:
    """``(records, next_offset)`` of the valid batches found in [start, end) of ``segment``: from
    ``start`` (``from_start``) or the first valid batch after it, and after every damaged stretch."""
    records, next_offset = 0, after_offset + 1
    position = start if from_start else valid_batch_after(segment, start, after_offset, end)
    while position is not None:
        try:
            for batch_position, batch in segment.iter_batches(position, end):
                records += batch.header.record_count
                next_offset = batch.header.next_offset
                position = batch_position + batch.header.size_bytes
        except CorruptRecordError:
            pass
        position = valid_batch_after(segment, position, next_offset - 1, end)
    return records, next_offset


def dead_segment_count(bases: list[int], log_start_offset: int) -> int:
    """How many of the oldest segments (by sorted ``bases``) lie wholly below ``log_start_offset``
    (a later segment starts at or below it): deleted records that no reader can reach, awaiting
    retention. Never the last segment."""
    return max(bisect.bisect_right(bases, log_start_offset) - 1, 0)


def _first_damage(segments: list[LogSegment], first: int, stop: int, log_start_offset: int,
                  gaps: bool) -> tuple[int, int, int, str, bool] | None:
    """Verify ``segments[first:stop]`` in order (CRCs, offsets in order, contiguous across segments
    unless ``gaps``: a compacted topic; a hole below the log start offset is dead data): ``(slot,
    position, next_offset, reason, torn)`` of the first damage, where the valid batches of segment
    ``slot`` end at ``position`` and offset ``next_offset`` (``torn``: bad bytes follow there; else
    a hole or overlap comes after the segment), or None when none is found."""
    previous_last = -1
    for slot in range(first, stop):
        segment = segments[slot]
        file_size = segment.file.file_size()
        valid_end, next_offset = 0, segment.base_offset
        reason = ""
        try:
            for position, batch in segment.iter_batches(0, file_size):
                header = batch.header
                if header.base_offset <= previous_last or not segment.can_hold(header.last_offset):
                    raise CorruptRecordError(f"batch at position {position} has offsets {header.base_offset}.."
                                             f"{header.last_offset} after {previous_last}")
                valid_end, next_offset = position + header.size_bytes, header.next_offset
                previous_last = header.last_offset
        except CorruptRecordError as exc:
            reason = str(exc)
        if valid_end < file_size:
            reason = reason or f"an incomplete batch at position {valid_end}"
            return slot, valid_end, next_offset, f"{segment.log_path} at position {valid_end} ({reason})", True
        following = segments[slot + 1] if slot + 1 < len(segments) else None
        if following is not None and following.base_offset != next_offset and not (
                gaps and following.base_offset > next_offset) and following.base_offset > log_start_offset:
            return slot, valid_end, next_offset, (
                f"after {segment.log_path}: offsets {next_offset}..{following.base_offset - 1} are missing"
                if following.base_offset > next_offset else
                f"after {segment.log_path}: the next segment starts at {following.base_offset}, inside it"), False
    return None


def plan_repair(name: str, segments: list[LogSegment], log_start_offset: int, damage: LogDamage | None,
                orphan_indexes: list[str], gaps: bool = False) -> RepairPlan:
    """Verify every segment and plan the cut at the first damage (``_first_damage``). The segments
    wholly below the log start offset are verified on their own: damage there never cuts the
    readable records after them; it removes those dead segments, as retention would. Changes nothing."""
    plan = RepairPlan(name, removed_files=list(orphan_indexes))
    start_known = damage is None or damage.kind != "log_start_offset"  # (else the start is refused: none is dead)
    dead = dead_segment_count([s.base_offset for s in segments], log_start_offset) if start_known else 0
    found = _first_damage(segments, 0, dead, log_start_offset, gaps) if dead else None
    if found is not None:
        plan.dead_segments, plan.dead_reason = dead, found[3]
        for segment in segments[:dead]:
            plan.removed_files.append(segment.log_path)
            plan.dead_bytes += segment.file.file_size()
        plan.removed_bytes += plan.dead_bytes
    live = dead if found is not None else 0  # undamaged dead segments are verified as part of the log
    found = _first_damage(segments, live, len(segments), log_start_offset, gaps)
    end = 0
    if found is not None:
        slot, valid_end, next_offset, plan.reason, torn = found
        segment = segments[slot]
        plan.slot, plan.position, plan.cut_offset = slot, valid_end, next_offset
        end = next_offset
        if torn:
            file_size = segment.file.file_size()
            records, end = _count_valid(segment, valid_end, next_offset - 1, file_size)
            plan.removed_records += records
            end = max(end, next_offset)
            plan.removed_bytes += file_size - valid_end
        for dropped in segments[plan.slot + 1 :]:
            plan.removed_bytes += dropped.file.file_size()
            plan.removed_files.append(dropped.log_path)
            try:
                records, end_after = _count_valid(dropped, 0, dropped.base_offset - 1, dropped.file.file_size(),
                                                  from_start=True)
                plan.removed_records += records
                end = max(end, end_after)
            except CorruptRecordError:
                pass
        plan.removed_offsets = (plan.cut_offset, max(end, plan.cut_offset))
        log_end_offset = plan.cut_offset
    else:
        log_end_offset = segments[-1].read_next_offset() if segments else log_start_offset
    first_base = segments[plan.dead_segments].base_offset if segments else log_start_offset
    if not start_known:
        # The checkpointed value was refused: the log's own first offset is the start again.
        plan.log_start_offset, plan.start_offset_reset = first_base, True
    else:
        plan.log_start_offset = max(first_base, min(log_start_offset, log_end_offset))
        plan.start_offset_reset = plan.log_start_offset != log_start_offset
    return plan


def apply_repair(fs: FileSystem, dir_path: str, segments: list[LogSegment], plan: RepairPlan) -> list[LogSegment]:
    """Cut ``segments`` as ``plan`` says, durably (later segments renamed ``.deleted`` newest first,
    each rename durable, then removed; the damaged segment cut and its indexes rebuilt; stray index
    files removed). Returns the segments left; logs what was removed."""
    kept = list(segments)
    if plan.dead_segments:  # oldest first, as retention removes them: a crash leaves a gap-free rest
        remove_segments_in_order(fs, dir_path, kept[:plan.dead_segments])
        kept = kept[plan.dead_segments:]
    if plan.slot is not None:
        kept = drop_segments(fs, dir_path, kept, plan.slot - plan.dead_segments + 1)
        target = kept[-1]
        if target.mapped:  # point reads map it: never cut under a mapping; cut through a fresh handle
            fresh = LogSegment(fs, target._clock, dir_path, target.base_offset,
                               index_interval_bytes=target.index_interval_bytes,
                               max_index_size_bytes=target.max_index_size_bytes)
            target.close_handlers()  # a read in flight on it retries on the new list
            kept[-1] = target = fresh
        if target.file.file_size() > plan.position:
            target.file.truncate_to(plan.position)
        target.recover()
        target.txn_index.truncate_to(target.read_next_offset())  # aborts whose marker was cut go too
        target.flush()
    for path in plan.removed_files:
        if path.endswith((".index", ".timeindex")) and fs.exists(path):
            fs.remove(path)
    fs.fsync_dir(dir_path)
    logger.warning("repair: %s", plan.describe(done=True))
    return kept


def drop_segments(fs: FileSystem, dir_path: str, segments: list[LogSegment], keep: int) -> list[LogSegment]:
    """Remove the segments from slot ``keep`` on: renamed ``.deleted`` newest first, each rename made
    durable (a crash leaves a gap-free prefix), then removed. Returns the segments kept."""
    remove_segments_in_order(fs, dir_path, list(reversed(segments[keep:])))
    return segments[:keep]


def remove_segments_in_order(fs: FileSystem, dir_path: str, doomed: list[LogSegment]) -> None:
    """Rename each of ``doomed`` (its log and indexes) ``.deleted`` in the order given, each rename
    made durable before the next (so a crash leaves the segments not yet renamed, with no gap
    among them when the order runs from one end of the log), then remove the renamed files."""
    for segment in doomed:
        segment.close_handlers()
        for path in (segment.log_path, segment.offset_index.path, segment.time_index.path, segment.txn_index.path):
            if fs.exists(path):
                fs.rename(path, path + DELETED_SUFFIX)
        fs.fsync_dir(dir_path)
    for segment in doomed:
        for path in (segment.log_path, segment.offset_index.path, segment.time_index.path, segment.txn_index.path):
            if fs.exists(path + DELETED_SUFFIX):
                fs.remove(path + DELETED_SUFFIX)


def orphan_index_bases(names: list[str]) -> dict[int, list[str]]:
    """Base offsets of the plan's orphan index files (names), with their names."""
    bases: dict[int, list[str]] = {}
    for name in names:
        prefix = name.partition(".")[0]
        if prefix.isdigit():
            bases.setdefault(int(prefix), []).append(name)
    return bases


def missing_segment_damage(dir_path: str, base: int) -> LogDamage:
    path = os.path.join(dir_path, f"{base:020d}.log")
    return LogDamage("hole", path, None, base, f"segment file {path} is missing (its index files remain)")
