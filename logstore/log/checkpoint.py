"""Checkpoint files and the clean-shutdown marker of a data dir, in Kafka's formats.

An offset checkpoint (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``cleaner-offset-checkpoint``) is UTF-8 text::

    0                  version line
    2                  number of entries
    orders 0 1200      "<topic> <partition> <offset>", one per line
    orders 1 1187

It is replaced crash-safely (temp file, fsync, rename, directory fsync), so after a crash it holds the
old or the new content, never a mix. Reading is strict: a wrong version, a malformed line or a count
that does not match raises ``CorruptCheckpointError``; the caller treats a damaged checkpoint as absent
(which only ever costs a longer recovery, never data).

The clean-shutdown marker ``.kafka_cleanshutdown`` holds a small JSON object; only its existence
matters: when present at open, the data dir was shut down cleanly and nothing needs recovery.
"""

from __future__ import annotations

import json
import os
from typing import Mapping

from ..errors import CorruptCheckpointError
from ..fs import FileSystem

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
CHECKPOINT_VERSION = 0

TopicPartition = tuple[str, int]


def format_offsets(entries: Mapping[TopicPartition, int]) -> bytes:
    """The checkpoint text for ``entries`` (sorted, so equal content gives equal bytes)."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(entries.items())]
    return ("\n".join(lines) + "\n").encode("utf-8")


def parse_offsets(data: bytes, path: str = "checkpoint") -> dict[TopicPartition, int]:
    """Parse checkpoint text; raises ``CorruptCheckpointError`` on anything malformed."""
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"{path} is not UTF-8 text") from None
    if not lines:
        return {}
    try:
        version = int(lines[0])
    except ValueError:
        raise CorruptCheckpointError(f"{path}: unreadable version line {lines[0]!r}") from None
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(f"{path}: unrecognised version {version}")
    if len(lines) == 1:
        return {}
    try:
        expected = int(lines[1])
    except ValueError:
        raise CorruptCheckpointError(f"{path}: unreadable entry count {lines[1]!r}") from None
    entries: dict[TopicPartition, int] = {}
    for line in lines[2:]:
        fields = line.split()
        if len(fields) != 3:
            raise CorruptCheckpointError(f"{path}: malformed line {line!r}")
        topic, partition, offset = fields
        try:
            entries[(topic, int(partition))] = int(offset)
        except ValueError:
            raise CorruptCheckpointError(f"{path}: malformed line {line!r}") from None
    if len(entries) != expected or len(lines) - 2 != expected:
        raise CorruptCheckpointError(f"{path}: expected {expected} entries but found {len(lines) - 2}")
    return entries


class OffsetCheckpointFile:
    """One offset checkpoint file in a data dir."""

    def __init__(self, fs: FileSystem, path: str) -> None:
        self._fs = fs
        self.path = path

    def read(self) -> dict[TopicPartition, int]:
        """The entries; empty when the file does not exist. Raises ``CorruptCheckpointError``."""
        if not self._fs.exists(self.path):
            return {}
        return parse_offsets(self._fs.read_file(self.path), self.path)

    def write(self, entries: Mapping[TopicPartition, int]) -> None:
        self._fs.write_file_atomic(self.path, format_offsets(entries))


def write_clean_shutdown_marker(fs: FileSystem, dir_path: str, now_ms: int) -> None:
    """Write the marker durably (temp, fsync, rename, dir fsync)."""
    body = json.dumps({"version": 0, "shutdown_ms": now_ms}).encode()
    fs.write_file_atomic(os.path.join(dir_path, CLEAN_SHUTDOWN_MARKER), body)


def take_clean_shutdown_marker(fs: FileSystem, dir_path: str, *, remove: bool) -> bool:
    """Whether ``dir_path`` was shut down cleanly. A writer removes the marker at once (durably),
    so a crash while the store is open is unclean at the next open."""
    path = os.path.join(dir_path, CLEAN_SHUTDOWN_MARKER)
    if not fs.exists(path):
        return False
    if remove:
        fs.remove(path)
        fs.fsync_dir(dir_path)
    return True
