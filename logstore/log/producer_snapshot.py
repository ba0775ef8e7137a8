"""Producer-state snapshot files of a partition: their format, reading, writing and listing
(docs/FORMAT.md 3.8).

A snapshot ``<20-digit offset>.snapshot`` in the partition directory holds the producer state
*before* that offset: one entry per producer (epoch, coordinator epoch, last offset, last
timestamp, first offset of its open transaction or -1). Little-endian, like the segment files::

    version uint16 (1) | flags uint16 | count int32
    count x (producer_id int64 | epoch int16 | pad uint16 (0) | coordinator_epoch int32 |
             last_offset int64 | last_timestamp_ms int64 | txn_first_offset int64)    40 bytes each
    crc uint32                                 zlib.crc32 of every byte before it

Entries are sorted by producer id, strictly. Flag bit 0, ``PRODUCER_BATCHES_FOLLOW``, says that
producer batches (transactional data or markers) may follow the snapshot's offset in the log, so a
load replays ``[offset, log end)`` on top of it; a snapshot without it is exact at its offset (the
state at a roll or a clean close). Snapshots exist only in partitions where a producer batch was
ever appended: no snapshot means no producer state.

Every file is written whole with ``FileSystem.write_file_atomic`` (temp file, fsync, rename,
directory fsync): after a crash a snapshot is complete or absent, so a damaged one is damage (a
disk, a careless hand), raised as ``CorruptSnapshotError`` naming the file; the owner then falls
back to an older snapshot and replays more. Pure functions but for the ``fs`` ones.

Loading (``load_producer_state``): the state of a partition is its newest intact snapshot at or
below the log end offset, plus a replay of the producer batches after it when they may exist. A
snapshot with the flag is always a safe starting point (it only asks for a replay); one without
is exact. Snapshots above the log end are removed (recovery or a truncation cut what they
describe); a damaged one is reported, and a writer rewrites it from the replay (flagged), so the
rule "every producer batch has a flagged snapshot at or below it, with no flag-clear snapshot in
between" holds again. After an unclean shutdown the replay starts at or below the recovery point,
so the aborted transactions of the recovered range can be re-derived (``on_aborted``).
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ..errors import CorruptIndexError, CorruptSnapshotError
from ..fs import FileSystem
from ..records.control import Marker, decode_marker
from ..records.decoder import HAS_PRODUCER, BatchHeader, ProducerFields

if TYPE_CHECKING:
    from .segment import LogSegment

logger = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
PRODUCER_BATCHES_FOLLOW = 0x1
_KNOWN_FLAGS = PRODUCER_BATCHES_FOLLOW
_HEADER = struct.Struct("<HHi")
_ENTRY = struct.Struct("<qhHiqqq")
_CRC = struct.Struct("<I")
HEADER_BYTES = _HEADER.size  # 8
ENTRY_BYTES = _ENTRY.size  # 40
CRC_BYTES = _CRC.size  # 4
_INT64_MAX = 2**63 - 1


class SnapshotEntry(NamedTuple):
    """One producer's state in a snapshot (the fields of the log's producer entry, same order)."""

    producer_id: int
    epoch: int
    coordinator_epoch: int
    last_offset: int
    last_timestamp_ms: int
    txn_first_offset: int  # -1: no open transaction


@dataclass(frozen=True)
class ProducerSnapshot:
    """A decoded snapshot: the offset it was taken at (from its name), whether producer batches
    may follow it, and its entries sorted by producer id."""

    offset: int
    batches_follow: bool
    entries: tuple[SnapshotEntry, ...]


def snapshot_file_name(offset: int) -> str:
    """``00000000000000000042.snapshot`` for offset 42."""
    if type(offset) is not int or not 0 <= offset <= _INT64_MAX:
        raise ValueError(f"snapshot offset must be a non-negative int64, got {offset!r}")
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offset(name: str) -> int | None:
    """The offset of a snapshot file name, or None when ``name`` is not one (a ``.tmp`` leftover,
    a segment file...)."""
    if len(name) != 20 + len(SNAPSHOT_SUFFIX) or not name.endswith(SNAPSHOT_SUFFIX):
        return None
    prefix = name[:20]
    return int(prefix) if prefix.isdigit() and prefix.isascii() else None


def snapshot_offsets(names: Iterable[str]) -> list[int]:
    """The offsets of the snapshot files among ``names``, ascending."""
    return sorted(offset for offset in map(snapshot_offset, names) if offset is not None)


def _check_entry(entry: SnapshotEntry, offset: int) -> str | None:
    """Why ``entry`` cannot be in a snapshot taken at ``offset``, or None."""
    pid, epoch, coordinator_epoch, last_offset, _timestamp, txn_first = entry
    if not 0 <= pid <= _INT64_MAX:
        return f"producer id {pid} is not a non-negative int64"
    if not 0 <= epoch < 2**15:
        return f"producer {pid}: epoch {epoch} is not a non-negative int16"
    if not -1 <= coordinator_epoch < 2**31:
        return f"producer {pid}: coordinator epoch {coordinator_epoch} is not -1 or a non-negative int32"
    if not 0 <= last_offset < offset:
        return f"producer {pid}: last offset {last_offset} is not in [0, {offset})"
    if txn_first != -1 and not 0 <= txn_first <= last_offset:
        return f"producer {pid}: open transaction first offset {txn_first} is not -1 or in [0, {last_offset}]"
    return None


def encode_snapshot(offset: int, entries: Iterable[SnapshotEntry | tuple[int, int, int, int, int, int]], *,
                    batches_follow: bool) -> bytes:
    """The bytes of the snapshot at ``offset`` of ``entries`` (any order; sorted here). Raises
    ValueError naming an entry that no log could hold (out of range, a duplicate producer id)."""
    snapshot_file_name(offset)  # checks the offset
    ordered = sorted((SnapshotEntry(*entry) for entry in entries), key=lambda entry: entry.producer_id)
    parts = [_HEADER.pack(SNAPSHOT_VERSION, PRODUCER_BATCHES_FOLLOW if batches_follow else 0, len(ordered))]
    previous = -1
    for entry in ordered:
        if any(type(value) is not int for value in entry):
            raise TypeError(f"snapshot entry fields must be ints, got {entry!r}")
        problem = _check_entry(entry, offset)
        if problem is None and entry.producer_id == previous:
            problem = f"producer id {previous} appears twice"
        if problem is not None:
            raise ValueError(f"snapshot at offset {offset}: {problem}")
        if not -2**63 <= entry.last_timestamp_ms <= _INT64_MAX:
            raise ValueError(f"snapshot at offset {offset}: producer {entry.producer_id}: last timestamp "
                             f"{entry.last_timestamp_ms} is not an int64")
        previous = entry.producer_id
        pid, epoch, coordinator_epoch, last_offset, timestamp, txn_first = entry
        parts.append(_ENTRY.pack(pid, epoch, 0, coordinator_epoch, last_offset, timestamp, txn_first))
    body = b"".join(parts)
    return body + _CRC.pack(zlib.crc32(body))


def decode_snapshot(data: bytes, *, offset: int, path: str) -> ProducerSnapshot:
    """The snapshot ``data`` holds, taken at ``offset`` (its file name's). Raises
    ``CorruptSnapshotError`` naming ``path`` for a short or long file, a CRC mismatch, an unknown
    version or flag, or an entry out of range or order."""
    def corrupt(what: str) -> CorruptSnapshotError:
        return CorruptSnapshotError(f"producer snapshot {path}: {what}")

    if len(data) < HEADER_BYTES + CRC_BYTES:
        raise corrupt(f"{len(data)} bytes, shorter than a header and a CRC")
    (stored_crc,) = _CRC.unpack_from(data, len(data) - CRC_BYTES)
    if zlib.crc32(memoryview(data)[: len(data) - CRC_BYTES]) != stored_crc:
        raise corrupt("CRC mismatch")
    version, flags, count = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise corrupt(f"unknown version {version}")
    if flags & ~_KNOWN_FLAGS:
        raise corrupt(f"unknown flags {flags:#06x}")
    if count < 0 or len(data) != HEADER_BYTES + count * ENTRY_BYTES + CRC_BYTES:
        raise corrupt(f"{len(data)} bytes do not hold the {count} entries the header announces")
    entries = []
    previous = -1
    for slot in range(count):
        pid, epoch, pad, coordinator_epoch, last_offset, timestamp, txn_first = _ENTRY.unpack_from(
            data, HEADER_BYTES + slot * ENTRY_BYTES)
        entry = SnapshotEntry(pid, epoch, coordinator_epoch, last_offset, timestamp, txn_first)
        problem = _check_entry(entry, offset)
        if problem is None and pad:
            problem = f"producer {pid}: padding {pad} is not zero"
        if problem is None and pid <= previous:
            problem = f"producer id {pid} does not follow {previous} (entries are sorted, each once)"
        if problem is not None:
            raise corrupt(f"entry {slot}: {problem}")
        previous = pid
        entries.append(entry)
    return ProducerSnapshot(offset, bool(flags & PRODUCER_BATCHES_FOLLOW), tuple(entries))


def write_snapshot(fs: FileSystem, dir_path: str, offset: int,
                   entries: Iterable[SnapshotEntry | tuple[int, int, int, int, int, int]], *,
                   batches_follow: bool) -> str:
    """Write (or replace) the snapshot at ``offset`` durably and return its path."""
    data = encode_snapshot(offset, entries, batches_follow=batches_follow)
    path = os.path.join(dir_path, snapshot_file_name(offset))
    fs.write_file_atomic(path, data)
    return path


def read_snapshot(fs: FileSystem, dir_path: str, offset: int) -> ProducerSnapshot:
    """Read and decode the snapshot at ``offset`` (``OSError`` when it cannot be read,
    ``CorruptSnapshotError`` when it is damaged)."""
    path = os.path.join(dir_path, snapshot_file_name(offset))
    return decode_snapshot(fs.read_file(path), offset=offset, path=path)


def list_snapshots(fs: FileSystem, dir_path: str) -> list[int]:
    """The offsets of the snapshots in ``dir_path``, ascending."""
    return snapshot_offsets(fs.list_dir(dir_path))


def delete_snapshots(fs: FileSystem, dir_path: str, offsets: Iterable[int]) -> int:
    """Remove the snapshots at ``offsets`` (missing ones are skipped) and fsync the directory once
    if any went; returns how many were removed. Removal order does not matter: the loader takes
    the newest intact snapshot at or below the log end, whichever survive a crash."""
    removed = 0
    for offset in offsets:
        try:
            fs.remove(os.path.join(dir_path, snapshot_file_name(offset)))
        except FileNotFoundError:
            continue
        removed += 1
    if removed:
        fs.fsync_dir(dir_path)
    return removed


# --- loading: the newest intact snapshot, and a replay after it ------------------------------------


class ReplayTable(Protocol):
    """What loading needs of a producer-state table (the log's ``ProducerStateTable``)."""

    def load(self, entries: Iterable[Any]) -> None: ...

    def entries(self) -> Iterator[Any]: ...

    def on_batch(self, header: BatchHeader, producer: ProducerFields | None, marker: Marker | None) -> Any: ...


@dataclass
class ProducerStateLoad:
    """What ``load_producer_state`` found: the offsets of the snapshots kept (ascending) and
    whether the newest one is flagged (what the log's writing rules start from), how many producer
    batches were replayed and from which offset (None: no replay)."""

    snapshots: list[int]
    newest_flagged: bool
    replayed_from: int | None = None
    replayed_batches: int = 0


def iter_producer_batches(segments: Sequence["LogSegment"], start: int,
                          stop: int) -> Iterator[tuple[BatchHeader, ProducerFields, Marker | None]]:
    """``(header, producer, marker)`` for every batch with a producer block whose offsets lie in
    ``[start, stop)``, in log order (``marker`` for a control batch). Headers are scanned; only the
    producer batches are read whole and verified (a replay never trusts an unverified block)."""
    bases = [segment.base_offset for segment in segments]
    first = max(bisect.bisect_right(bases, start) - 1, 0)
    for segment in segments[first:]:
        if segment.base_offset >= stop:
            return
        scan = segment.scan_headers(0)
        if segment.base_offset < start:  # from the offset index's entry at or below ``start``
            try:
                scan = segment.scan_from(start)
            except CorruptIndexError:  # a lying entry: from the segment's start
                pass
        for position, header, buffer, at in scan:
            if header.base_offset >= stop:
                return
            if not header.attributes & HAS_PRODUCER or header.base_offset + header.last_offset_delta < start:
                continue
            batch = segment.load_batch(position, header, buffer, at)
            producer = batch.producer
            if producer is None:  # a magic 1/2 batch cannot carry the bit: _Columns refused it
                continue
            marker = None
            if producer.control:
                record = batch.record_at(0)
                marker = decode_marker(record.key, record.value)
            yield header, producer, marker


def load_producer_state(fs: FileSystem, dir_path: str, snapshot_offsets: Sequence[int],
                        segments: Sequence["LogSegment"], table: ReplayTable, *, log_start_offset: int,
                        log_end_offset: int, recovery_point: int | None, read_only: bool, problems: list[str],
                        on_aborted: Callable[[Any, int], None] | None = None) -> ProducerStateLoad:
    """Fill ``table`` with the partition's producer state at ``log_end_offset`` (module
    docstring). ``snapshot_offsets``: the snapshot files found (no file: nothing is read, the table
    stays empty). ``recovery_point``: after an unclean shutdown, the offset from which recovery
    re-verified the log; the replay then starts at or below it and calls ``on_aborted(completed,
    last_stable_offset)`` (the LSO just after the marker) for every aborted transaction whose
    marker lies at or above it (the caller re-derives the ``.txnindex`` there). A ``read_only`` caller writes and removes nothing."""
    offsets = sorted(snapshot_offsets)
    if not offsets:
        return ProducerStateLoad([], False)
    above = [offset for offset in offsets if offset > log_end_offset]
    if above and not read_only:
        delete_snapshots(fs, dir_path, above)
        logger.info("%s: removed %d producer snapshots above the log end offset %d", dir_path, len(above),
                    log_end_offset)
    offsets = [offset for offset in offsets if offset <= log_end_offset]
    limit = log_end_offset if recovery_point is None else min(recovery_point, log_end_offset)
    # Newest first, decode until the starting point (the newest intact one at or below ``limit``).
    decoded: dict[int, ProducerSnapshot | None] = {}
    base: ProducerSnapshot | None = None
    for offset in reversed(offsets):
        try:
            decoded[offset] = snapshot = read_snapshot(fs, dir_path, offset)
        except (CorruptSnapshotError, OSError) as exc:
            if isinstance(exc, FileNotFoundError) and read_only:
                continue  # the writer removed it meanwhile
            decoded[offset] = None
            problems.append(f"{exc}; " + ("ignored" if read_only else "rebuilt from the log"))
            logger.warning("%s", problems[-1])
            continue
        if offset <= limit:
            base = snapshot
            break
    if base is None:
        # Nothing intact at or below ``limit``. With no damage met, the oldest intact snapshot has
        # no producer batch below it (retention keeps the newest one at or below the log start):
        # the state there is exact. Otherwise the replay starts from an empty state at the start.
        intact = [snapshot for offset, snapshot in sorted(decoded.items()) if snapshot is not None]
        if intact and all(snapshot is not None for offset, snapshot in decoded.items() if offset < intact[0].offset):
            base = intact[0]
    start = log_start_offset if base is None else base.offset
    if base is not None:
        table.load(base.entries)
    damaged = sorted(offset for offset, snapshot in decoded.items() if snapshot is None)
    newest = max(decoded, default=None)
    kept = [offset for offset in offsets if offset not in damaged or not read_only]
    # Producer batches may follow ``start`` only where some snapshot at or above it is flagged (or
    # damaged: unknown). Else the state at ``start`` is the state at the log end.
    replay = any(snapshot is None or snapshot.batches_follow for offset, snapshot in decoded.items()
                 if offset >= start)
    if not replay:
        return ProducerStateLoad(kept, bool(newest is not None and decoded[newest] and
                                            decoded[newest].batches_follow))  # type: ignore[union-attr]
    rewrite = [offset for offset in damaged if offset >= start] if not read_only else []
    count = 0
    for header, producer, marker in iter_producer_batches(segments, start, log_end_offset):
        while rewrite and rewrite[0] <= header.base_offset:
            write_snapshot(fs, dir_path, rewrite.pop(0), table.entries(), batches_follow=True)
        completed = table.on_batch(header, producer, marker)
        count += 1
        if (completed is not None and on_aborted is not None and recovery_point is not None
                and completed.aborted and header.base_offset >= recovery_point):
            first_unstable = getattr(table, "first_unstable_offset", None)
            on_aborted(completed, header.base_offset + 1 if first_unstable is None else first_unstable)
    for offset in rewrite:
        write_snapshot(fs, dir_path, offset, table.entries(), batches_follow=True)
    if damaged and not read_only:
        logger.warning("%s: rewrote %d damaged producer snapshots from a replay of the log", dir_path,
                       len(damaged))
    # The newest kept snapshot after rewrites: a rewritten one is flagged.
    newest_flagged = newest is not None and (decoded[newest] is None or decoded[newest].batches_follow)  # type: ignore[union-attr]
    return ProducerStateLoad(kept, newest_flagged, start, count)


# --- the writing rules, for the log ------------------------------------------------------------------


class ProducerSnapshots:
    """A writable log's snapshot files and the rules that write and remove them (module docstring
    and docs/FORMAT.md 3.8); the ``Log`` calls it under its lock. Keeps the offsets of the files in
    memory (from the load), so no rule lists the directory. A partition that never sees a producer
    batch never writes a file: every rule but ``before_producer_batch`` does nothing until one exists."""

    def __init__(self, fs: FileSystem, dir_path: str, offsets: Sequence[int], newest_flagged: bool) -> None:
        self._fs = fs
        self.dir_path = dir_path
        self.offsets = sorted(offsets)
        self.newest_flagged = bool(offsets) and newest_flagged

    def _write(self, offset: int, table: ReplayTable, batches_follow: bool) -> None:
        write_snapshot(self._fs, self.dir_path, offset, table.entries(), batches_follow=batches_follow)
        if offset not in self.offsets:
            bisect.insort(self.offsets, offset)
        if offset == self.offsets[-1]:
            self.newest_flagged = batches_follow

    def before_producer_batch(self, offset: int, table: ReplayTable) -> None:
        """Rule 1: before a producer batch (data or marker) is written at ``offset``: unless the
        newest snapshot is flagged already, a flagged one at ``offset`` (durable when this returns;
        an ``OSError`` means the batch must not be written)."""
        if not self.newest_flagged:
            self._write(offset, table, True)

    def on_roll(self, new_base: int, table: ReplayTable) -> None:
        """Rule 2: a new segment starts at ``new_base``: the exact state there (flag clear), when
        there is any state or the newest snapshot asks for a replay."""
        if self.newest_flagged or len(table):  # type: ignore[arg-type]
            self._write(new_base, table, False)

    def on_close(self, log_end_offset: int, table: ReplayTable) -> None:
        """Rule 2: a clean close: the exact state at the log end, unless the newest snapshot is exact
        already (nothing was appended for a producer since it: a no-op open leaves no trace)."""
        if self.newest_flagged:
            self._write(log_end_offset, table, False)

    def on_log_start_moved(self, log_start_offset: int) -> None:
        """Rule 4 (retention, ``delete_records``): keep the newest snapshot at or below the log
        start offset, remove the older ones."""
        below = bisect.bisect_right(self.offsets, log_start_offset)
        if below > 1:
            doomed, self.offsets = self.offsets[: below - 1], self.offsets[below - 1 :]
            delete_snapshots(self._fs, self.dir_path, doomed)

    def reload(self, segments: Sequence["LogSegment"], table: ReplayTable, *, log_start_offset: int,
               log_end_offset: int, problems: list[str]) -> ProducerStateLoad:
        """Rule 4 (a truncation to ``log_end_offset``, a repair): the snapshots above the new end go
        and ``table`` (a fresh one) gets the state at the end, as at load."""
        loaded = load_producer_state(self._fs, self.dir_path, self.offsets, segments, table,
                                     log_start_offset=log_start_offset, log_end_offset=log_end_offset,
                                     recovery_point=None, read_only=False, problems=problems)
        self.offsets, self.newest_flagged = loaded.snapshots, loaded.newest_flagged
        return loaded
