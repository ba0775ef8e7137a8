"""The aborted-transaction index of a segment, ``<base>.txnindex`` (docs/FORMAT.md 2.4): which
transactions were aborted, where their data starts and where their ABORT marker lies (Kafka's
``.txnindex``, plus a checksum per entry).

``TxnIndexEntry`` is one aborted transaction: its producer, the first offset of its data in the
partition, the offset of its ABORT marker, and the last stable offset just after the marker. An
entry lives in the segment that holds its marker; entries strictly increase by marker offset.

``TransactionIndex`` is the file of one segment. It is created at the segment's first aborted
transaction (a segment without one has no file and costs no descriptor), written with ``pwrite`` at
each ABORT marker and fsynced with the segment's data (``flush``). Its entries are read on first use
and kept in memory, within a process-wide bound (``LOADED``, ``MAX_LOADED_ENTRIES``): the indexes
used least recently forget theirs and read the file again when next used. Readers take no lock: a
change publishes new lists (the entries first, then their marker offsets). An entry that fails its checksum or the order is
``CorruptIndexError``: the index is derived data, and the ``Log`` rebuilds it from the log.

``collect_aborted`` answers a read_committed read: the aborted transactions whose data may lie in
``[start, upper)``.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
import zlib
from collections import OrderedDict
from typing import NamedTuple, Sequence

from ..errors import CorruptIndexError
from ..fs import FileSystem

logger = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY_STRUCT = struct.Struct("<qqqqHHI")  # pid, first, last, lso, version, reserved, crc
ENTRY_BYTES = ENTRY_STRUCT.size  # 40
_CHECKED = struct.Struct("<qqqqHH")  # the 36 bytes the crc covers
VERSION = 0
MAX_LOADED_ENTRIES = 1_000_000
"""The transaction-index entries held in memory by the whole process (about 100 MB at most)."""


class AbortedTxn(NamedTuple):
    """An aborted transaction as a fetch reports it: the producer and the first offset of its data."""

    producer_id: int
    first_offset: int


class TxnIndexEntry(NamedTuple):
    """One aborted transaction of the index (module docstring)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker
    last_stable_offset: int  # the partition's LSO just after the marker


def encode_entry(entry: TxnIndexEntry) -> bytes:
    head = _CHECKED.pack(entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset,
                         VERSION, 0)
    return head + struct.pack("<I", zlib.crc32(head))


def decode_entries(data: bytes, path: str) -> list[TxnIndexEntry]:
    """The entries of a ``.txnindex`` file's bytes; ``CorruptIndexError`` naming ``path`` and the
    entry for a length that is not a multiple of 40, a bad checksum, an unknown version, or an
    entry out of order."""
    if len(data) % ENTRY_BYTES:
        raise CorruptIndexError(f"transaction index {path} is {len(data)} bytes, not a multiple of {ENTRY_BYTES}")
    entries: list[TxnIndexEntry] = []
    previous = -1
    for number, at in enumerate(range(0, len(data), ENTRY_BYTES)):
        producer_id, first, last, lso, version, reserved, crc = ENTRY_STRUCT.unpack_from(data, at)
        if zlib.crc32(data[at : at + ENTRY_BYTES - 4]) != crc:
            raise CorruptIndexError(f"transaction index {path} entry {number} fails its checksum")
        if version != VERSION or reserved:
            raise CorruptIndexError(f"transaction index {path} entry {number} has version {version}")
        if not 0 <= first <= last or last <= previous:
            raise CorruptIndexError(f"transaction index {path} entry {number} (first offset {first}, marker "
                                    f"{last}) is out of order")
        previous = last
        entries.append(TxnIndexEntry(producer_id, first, last, lso))
    return entries


class _LoadedIndexes:
    """The indexes holding their entries in memory, least recently used first, and their entry
    count: beyond ``max_entries`` the oldest forget theirs (``TransactionIndex.forget``), except
    those whose entries exist only in memory (a read-only view's rebuild) and the one in use."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._held: OrderedDict[TransactionIndex, int] = OrderedDict()
        self._count = 0
        self._lock = threading.Lock()

    def hold(self, index: TransactionIndex, entries: int) -> None:
        """``index`` was used and holds ``entries`` entries now (0: it holds none)."""
        evicted = []
        with self._lock:
            self._count += entries - self._held.pop(index, 0)
            if entries:
                self._held[index] = entries
            while self._count > self.max_entries and len(self._held) > 1:
                oldest, count = next(iter(self._held.items()))
                if oldest is index:
                    break
                del self._held[oldest]
                if oldest.pinned:
                    self._held[oldest] = count  # to the end: it cannot forget
                    if all(other.pinned or other is index for other in self._held):
                        break
                    continue
                self._count -= count
                evicted.append(oldest)
        for oldest in evicted:
            oldest.forget()

    @property
    def entries(self) -> int:
        return self._count


LOADED = _LoadedIndexes(MAX_LOADED_ENTRIES)


class TransactionIndex:
    """The ``.txnindex`` file at ``path`` of the segment at ``base_offset`` (module docstring).
    ``present``: whether the file exists, when the caller knows (None: looked up on first use)."""

    def __init__(self, fs: FileSystem, path: str, *, writable: bool = True, present: bool | None = None) -> None:
        self._fs = fs
        self.path = path
        self.writable = writable
        self.present = present
        self._entries: list[TxnIndexEntry] | None = None
        self._last_offsets: list[int] = []
        self._dirty = False
        self._created = False  # the file is new since the last flush: its directory entry needs an fsync too
        self.pinned = False  # entries held only in memory (a read-only view's rebuild): never forgotten

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    def load(self) -> tuple[list[TxnIndexEntry], list[int]]:
        """The entries and their marker offsets (read from the file on first use)."""
        entries = self._entries
        if entries is None:
            if self.present is not False and self._fs.exists(self.path):
                self.present = True
                entries = decode_entries(self._fs.read_file(self.path), self.path)
            else:
                self.present, entries = False, []
            self._last_offsets = [entry.last_offset for entry in entries]
            self._entries = entries
        if entries:
            LOADED.hold(self, len(entries))
        return entries, self._last_offsets

    def release(self) -> None:
        """The segment closed: drop the entries held in memory and leave the process-wide count."""
        held = bool(self._entries)
        self.pinned = False
        self._entries, self._last_offsets = None, []
        if held:  # (closing a segment that never held any costs nothing)
            LOADED.hold(self, 0)

    def forget(self) -> None:
        """Drop the entries held in memory (the file has them all): the next use reads it again."""
        if not self.pinned:
            self._entries, self._last_offsets = None, []

    @property
    def entries(self) -> list[TxnIndexEntry]:
        return self.load()[0]

    def append(self, entry: TxnIndexEntry) -> None:
        """Add ``entry`` (its marker after every other entry's): written to the OS now, fsynced by
        the next ``flush``."""
        entries, last_offsets = self.load()
        if last_offsets and entry.last_offset <= last_offsets[-1]:
            raise ValueError(f"transaction index entry {entry} is not after the last one of {self.path}")
        self._created = self._created or not self.present
        fd = self._fs.open_file(self.path, create=True)
        try:
            self._fs.pwrite(fd, encode_entry(entry), len(entries) * ENTRY_BYTES)
        finally:
            self._fs.close(fd)
        self.present, self._dirty = True, True
        entries.append(entry)  # the entry before its marker offset: lock-free readers index by the latter
        last_offsets.append(entry.last_offset)
        LOADED.hold(self, len(entries))

    def replace(self, entries: Sequence[TxnIndexEntry], write: bool = True) -> None:
        """Replace the entries (a rebuild); ``write``: the file too, atomically and durably (no
        entries: the file is removed)."""
        entries = list(entries)
        if write:
            if entries:
                self._fs.write_file_atomic(self.path, b"".join(map(encode_entry, entries)))
            elif self.present is not False and self._fs.exists(self.path):
                self._fs.remove(self.path)
            self.present, self._dirty = bool(entries), False
        self.pinned = not write and bool(entries)
        self._entries, self._last_offsets = entries, [entry.last_offset for entry in entries]
        LOADED.hold(self, len(entries))

    def copy_below(self, target: TransactionIndex, offset: int) -> None:
        """Give ``target`` (a rewritten copy of this segment) the entries whose marker is below
        ``offset``, durably; a damaged file is copied as it is (its use rebuilds it)."""
        try:
            entries = [entry for entry in self.load()[0] if entry.last_offset < offset]
        except CorruptIndexError:
            self._fs.write_file_atomic(target.path, self._fs.read_file(self.path))
            target.present, target._entries = True, None
            return
        if entries:
            target.replace(entries)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose marker is at or after ``offset``, durably. A damaged file is left
        as it is: its next use finds the damage and the ``Log`` rebuilds it from the (cut) log."""
        try:
            entries, last_offsets = self.load()
        except CorruptIndexError as exc:
            logger.warning("%s; left for a rebuild", exc)
            return
        cut = bisect.bisect_left(last_offsets, offset)
        if cut == len(entries):
            return
        fd = self._fs.open_file(self.path)
        try:
            self._fs.truncate(fd, cut * ENTRY_BYTES)
            self._fs.fsync(fd)
        finally:
            self._fs.close(fd)
        self._entries, self._last_offsets = entries[:cut], last_offsets[:cut]
        LOADED.hold(self, cut)

    def flush(self) -> None:
        """fsync what ``append`` wrote since the last flush."""
        if self._dirty:
            fd = self._fs.open_file(self.path)
            try:
                self._fs.fsync(fd)
            finally:
                self._fs.close(fd)
            if self._created:
                self._fs.fsync_dir(os.path.dirname(self.path))
            self._dirty = self._created = False

    def rename_to(self, path: str) -> None:
        """Rename the file (if there is one) to ``path``; the index is ``path``'s from now on."""
        if self.present is not False and self._fs.exists(self.path):
            self._fs.rename(self.path, path)
            self.present = True
        self.path = path

    def reload(self) -> None:
        """Forget what was read: the next use reads the file again (a read-only view, after the
        writing process may have added to it)."""
        self.present, self._entries, self._last_offsets, self.pinned = None, None, [], False
        LOADED.hold(self, 0)

    def delete(self) -> None:
        if self.present is not False and self._fs.exists(self.path):
            self._fs.remove(self.path)
        self.present, self._entries, self._last_offsets, self.pinned = False, [], [], False
        LOADED.hold(self, 0)


def collect_aborted(entries: Sequence[TxnIndexEntry], last_offsets: Sequence[int], start: int, upper: int,
                    found: list[AbortedTxn]) -> bool:
    """Add to ``found`` the entries (sorted by marker offset; ``last_offsets`` their marker offsets)
    whose marker is at or after ``start`` and whose data starts below ``upper``. Returns True when
    the search may stop: an entry's last stable offset reached ``upper``, so no later entry (here or
    in a later segment) has data below it (a transaction open at that marker starts at or after the
    LSO; one opened later starts after the marker)."""
    for slot in range(bisect.bisect_left(last_offsets, start), len(entries)):
        entry = entries[slot]
        if entry.first_offset < upper:
            found.append(AbortedTxn(entry.producer_id, entry.first_offset))
        if entry.last_stable_offset >= upper:
            return True
    return False
