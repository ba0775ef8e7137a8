"""Checkpoint files and the clean-shutdown marker of a data dir: their formats, reading and writing.

An offset checkpoint (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``cleaner-offset-checkpoint``) maps partitions to offsets. Version 1 (what this store writes) holds
**two identical copies** of one checksummed block, so a flipped byte or a cut end (the damage a disk
or a careless hand does) leaves one good copy::

    1 38 6c1f0a3e         header: version, body length in bytes, CRC-32 (8 hex digits)
    2                     body: number of entries,
    orders 0 1200         then "<topic> <partition> <offset>", one per line, sorted
    orders 1 1187
    1 38 6c1f0a3e         the same header and body again
    2
    orders 0 1200
    orders 1 1187

The CRC is ``zlib.crc32`` of ``"<version> <length>"`` followed by the body (as ``topics.json`` and the
record batches use ``zlib.crc32``). A reader takes the first copy that verifies: the copy at the start,
else the second half of the file. Version 0 (Kafka's text format: a ``0`` line, the count, the
entries; no checksum) written by earlier versions is still read, strictly.

A file whose every copy is damaged raises ``CorruptCheckpointError`` naming the file; what that costs
depends on the file (``LogDirs``): a recovery-point checkpoint means a full recovery of its dir, a
cleaner checkpoint re-cleaning from the start, and a log-start-offset checkpoint is reported and kept
aside (never silently replaced by a guess). An empty file is damage too: no version ever wrote one.

Every file here is replaced crash-safely (``FileSystem.write_file_atomic``: temp file, fsync, rename,
directory fsync), so after a crash it holds the old or the new content, never a mix.

The clean-shutdown marker ``.kafka_cleanshutdown`` is a small JSON object with a version and a CRC
(``{"crc32": ..., "shutdown_ms": ..., "version": 1}``; version 0 had no CRC). Present and intact at
open: the dir was shut down cleanly and nothing needs recovery. Present but damaged: treated as absent
(recovery runs from the recovery points) and reported.
"""

from __future__ import annotations

import json
import logging
import os
import re
import zlib
from dataclasses import dataclass, field
from typing import Mapping

from ..errors import CorruptCheckpointError
from ..fs import FileSystem

logger = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
# The second home of a partition's log start offset, in the partition's own directory (same format,
# one entry): present only while the start is above the first segment's base offset.
PARTITION_LOG_START_OFFSET = "log-start-offset"
DAMAGED_SUFFIX = ".damaged"  # a checkpoint set aside because no copy of it could be read
CHECKPOINT_VERSION = 1
LEGACY_CHECKPOINT_VERSION = 0
MARKER_VERSION = 1

TopicPartition = tuple[str, int]

_HEADER = re.compile(rb"([0-9]+) ([0-9]{1,9}) ([0-9a-f]{8})\n")


@dataclass(frozen=True)
class CheckpointContents:
    """What ``parse_checkpoint`` read: the entries, the file's version, and a description of each
    copy that was damaged (the entries come from an intact one)."""

    entries: dict[TopicPartition, int]
    version: int
    damaged_copies: list[str] = field(default_factory=list)


def _crc(version: int, body: bytes) -> int:
    return zlib.crc32(body, zlib.crc32(f"{version} {len(body)}".encode()))


def format_offsets(entries: Mapping[TopicPartition, int]) -> bytes:
    """The checkpoint bytes for ``entries`` (sorted, so equal content gives equal bytes): two copies
    of the checksummed block."""
    lines = [str(len(entries))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(entries.items())]
    body = ("\n".join(lines) + "\n").encode("utf-8")
    copy = f"{CHECKPOINT_VERSION} {len(body)} {_crc(CHECKPOINT_VERSION, body):08x}\n".encode() + body
    return copy + copy


def parse_checkpoint(data: bytes, path: str = "checkpoint") -> CheckpointContents:
    """Parse checkpoint bytes of either version; raises ``CorruptCheckpointError`` (naming ``path``)
    when no copy is intact."""
    if not data:
        raise CorruptCheckpointError(f"{path} is empty (no version writes an empty checkpoint)")
    if data == b"0" or data.startswith(b"0\n"):
        return CheckpointContents(_parse_legacy(data, path), LEGACY_CHECKPOINT_VERSION)
    try:
        entries, end = _parse_copy(data, 0, path)
    except CorruptCheckpointError as first:
        half = len(data) // 2
        try:
            if len(data) % 2:
                raise CorruptCheckpointError(f"{path}: no second copy (the file has an odd length)")
            entries, end = _parse_copy(data, half, path)
            if end != len(data):
                raise CorruptCheckpointError(f"{path}: {len(data) - end} bytes after the second copy")
        except CorruptCheckpointError as second:
            raise CorruptCheckpointError(f"{path} is damaged: first copy: {_reason(first, path)}; "
                                         f"second copy: {_reason(second, path)}") from None
        return CheckpointContents(entries, CHECKPOINT_VERSION, [f"first copy: {_reason(first, path)}"])
    if data[end:] != data[:end]:
        return CheckpointContents(entries, CHECKPOINT_VERSION, ["second copy differs from the first (damaged)"])
    return CheckpointContents(entries, CHECKPOINT_VERSION)


def parse_offsets(data: bytes, path: str = "checkpoint") -> dict[TopicPartition, int]:
    """The entries of checkpoint bytes; raises ``CorruptCheckpointError`` when no copy is intact."""
    return parse_checkpoint(data, path).entries


def _reason(exc: CorruptCheckpointError, path: str) -> str:
    text = str(exc)
    return text[len(path) + 2:] if text.startswith(f"{path}: ") else text


def _parse_copy(data: bytes, start: int, path: str) -> tuple[dict[TopicPartition, int], int]:
    """One version-1 copy starting at ``start``: (entries, where the copy ends)."""
    header = _HEADER.match(data, start)
    if header is None:
        raise CorruptCheckpointError(f"{path}: unreadable header {data[start:start + 24]!r}")
    version, length = int(header.group(1)), int(header.group(2))
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(f"{path}: unrecognised version {version}")
    body = data[header.end():header.end() + length]
    if len(body) != length:
        raise CorruptCheckpointError(f"{path}: cut short ({len(body)} of {length} body bytes)")
    if _crc(version, body) != int(header.group(3), 16):
        raise CorruptCheckpointError(f"{path}: checksum mismatch")
    return _parse_body(body, path), header.end() + length


def _parse_body(body: bytes, path: str) -> dict[TopicPartition, int]:
    try:
        lines = body.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"{path} is not UTF-8 text") from None
    if lines[-1] != "":
        raise CorruptCheckpointError(f"{path}: the body does not end with a line end")
    return _parse_entries(lines[:-1], path)


def _parse_entries(lines: list[str], path: str) -> dict[TopicPartition, int]:
    """The count line and the entry lines (Kafka's layout after the version line), strictly."""
    if not lines:
        return {}
    try:
        expected = int(lines[0])
    except ValueError:
        raise CorruptCheckpointError(f"{path}: unreadable entry count {lines[0]!r}") from None
    entries: dict[TopicPartition, int] = {}
    for line in lines[1:]:
        fields = line.split()
        if len(fields) != 3:
            raise CorruptCheckpointError(f"{path}: malformed line {line!r}")
        topic, partition, offset = fields
        try:
            entries[(topic, int(partition))] = int(offset)
        except ValueError:
            raise CorruptCheckpointError(f"{path}: malformed line {line!r}") from None
    if len(entries) != expected or len(lines) - 1 != expected:
        raise CorruptCheckpointError(f"{path}: expected {expected} entries but found {len(lines) - 1}")
    return entries


def _parse_legacy(data: bytes, path: str) -> dict[TopicPartition, int]:
    """Version 0, Kafka's text format without a checksum (what older stores wrote)."""
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"{path} is not UTF-8 text") from None
    return _parse_entries(lines[1:], path)


class OffsetCheckpointFile:
    """One offset checkpoint file in a data dir."""

    def __init__(self, fs: FileSystem, path: str) -> None:
        self._fs = fs
        self.path = path

    def read_contents(self) -> CheckpointContents | None:
        """The file's contents, None when it does not exist. Raises ``CorruptCheckpointError`` when
        no copy is intact; one damaged copy is logged (the intact one is used)."""
        if not self._fs.exists(self.path):
            return None
        contents = parse_checkpoint(self._fs.read_file(self.path), self.path)
        for damage in contents.damaged_copies:
            logger.warning("%s: %s; the other copy is intact and used (rewritten at the next checkpoint)",
                           self.path, damage)
        return contents

    def read(self) -> dict[TopicPartition, int]:
        """The entries; empty when the file does not exist. Raises ``CorruptCheckpointError``."""
        contents = self.read_contents()
        return {} if contents is None else contents.entries

    def write(self, entries: Mapping[TopicPartition, int]) -> None:
        self._fs.write_file_atomic(self.path, format_offsets(entries))

    def remove(self) -> None:
        """Remove the file (if present), durably."""
        if self._fs.exists(self.path):
            self._fs.remove(self.path)
            self._fs.fsync_dir(os.path.dirname(self.path) or ".")

    def set_aside(self, now_ms: int) -> str:
        """Rename the (damaged) file to ``<name>.<now_ms>.damaged``, durably, so it is kept for
        inspection and reported until someone removes it; returns the new path."""
        target = f"{self.path}.{now_ms}{DAMAGED_SUFFIX}"
        self._fs.rename(self.path, target)
        self._fs.fsync_dir(os.path.dirname(self.path) or ".")
        return target


# --- the clean-shutdown marker ---------------------------------------------------------------------


@dataclass(frozen=True)
class CleanShutdownMarker:
    """What an open found: whether the dir was shut down cleanly, the marker's bytes (None when
    there was none) and why a present marker was not trusted (None when it was, or was absent)."""

    clean: bool
    content: bytes | None = None
    problem: str | None = None


def format_clean_shutdown_marker(now_ms: int) -> bytes:
    body = {"shutdown_ms": now_ms, "version": MARKER_VERSION}
    body["crc32"] = zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    return json.dumps(body, sort_keys=True).encode() + b"\n"


def parse_clean_shutdown_marker(data: bytes, path: str) -> int:
    """The marker's ``shutdown_ms``; raises ``CorruptCheckpointError`` when it is damaged."""
    try:
        body = json.loads(data.decode("utf-8"))
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
        version = body.get("version")
        if version == MARKER_VERSION:
            stored = body.pop("crc32")
            if zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()) != stored:
                raise ValueError("checksum mismatch")
        elif version != 0:  # version 0 (older stores) had no checksum
            raise ValueError(f"unknown version {version!r}")
        shutdown_ms = body["shutdown_ms"]
        if not isinstance(shutdown_ms, int) or isinstance(shutdown_ms, bool) or set(body) != {"shutdown_ms", "version"}:
            raise ValueError("unexpected fields")
        return shutdown_ms
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as exc:
        raise CorruptCheckpointError(f"clean-shutdown marker {path} is damaged: {exc}") from None


def write_clean_shutdown_marker(fs: FileSystem, dir_path: str, now_ms: int, content: bytes | None = None) -> None:
    """Write the marker durably (temp, fsync, rename, dir fsync): ``content`` when given (the marker
    an open found, put back unchanged by a session that changed nothing), else a new one."""
    body = content if content is not None else format_clean_shutdown_marker(now_ms)
    fs.write_file_atomic(os.path.join(dir_path, CLEAN_SHUTDOWN_MARKER), body)


def take_clean_shutdown_marker(fs: FileSystem, dir_path: str, *, remove: bool) -> CleanShutdownMarker:
    """Whether ``dir_path`` was shut down cleanly. A writer removes the marker at once (durably),
    so a crash while the store is open is unclean at the next open. A damaged marker counts as
    unclean, with the reason in ``problem``."""
    path = os.path.join(dir_path, CLEAN_SHUTDOWN_MARKER)
    if not fs.exists(path):
        return CleanShutdownMarker(False)
    content = fs.read_file(path)
    problem = None
    try:
        parse_clean_shutdown_marker(content, path)
    except CorruptCheckpointError as exc:
        problem = f"{exc}; treated as an unclean shutdown (the dir is recovered)"
    if remove:
        fs.remove(path)
        fs.fsync_dir(dir_path)
    return CleanShutdownMarker(problem is None, content if problem is None else None, problem)
