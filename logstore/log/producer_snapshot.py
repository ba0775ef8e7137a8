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
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import CorruptSnapshotError
from ..fs import FileSystem

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
