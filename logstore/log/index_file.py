"""``IndexFile``: the file under an offset or time index, shared by ``OffsetIndex`` and ``TimeIndex``
(module ``index``): entries of a fixed size in a file, the mapping they are written through, lazy
reads, preallocation, trimming, truncation and flushes.

Lifecycle: while its segment is active an index file is preallocated to ``segment.index.bytes`` and
mapped read-write; on roll or close it is trimmed to its entries. Because files are trimmed, the entry
count on open comes from the file length, except that a zero-filled tail (a preallocated file that was
never trimmed: a crash, or a writer that is still running) is recognised and ignored.

Descriptors: an index holds no descriptor of its own. While written (its segment active, recovered
or truncated) it holds a writable mapping, made from a descriptor that is closed right after (a
mapping needs none; before Python 3.13 the mapping keeps a duplicate, ``fs.MAPPING_HOLDS_DESCRIPTOR``);
the rare operations that need one (growing or trimming the file, backing pages with blocks, an fsync
after a length change) open the file by name for the call. ``freeze`` keeps a copy of its trimmed
entries and drops the mapping. Opening an existing file reads its length and last entry; the entries
are read when a search needs them.

The preallocated file is sparse; each page is backed by disk blocks (``FileSystem.allocate``, a little
ahead of the entries) before it is written, since writing a page the file system cannot back kills the
process with SIGBUS while a failed allocation is an ``OSError`` (``ENOSPC``). ``reserve`` runs before
the data an entry points at is written, so a full disk fails an append before anything is written.

A read-only opener (another process, concurrently with a writer) reads the file with ``pread``, never
a mapping: the writer may trim the file while a reader looks, and touching a mapping past a shrunken
end of file kills the process with SIGBUS.
"""

from __future__ import annotations

import mmap
import struct
import threading
from array import array
from bisect import bisect_left, bisect_right
from operator import itemgetter

from ..errors import CorruptIndexError, LogSegmentOffsetOverflowError
from ..fs import FileSystem

MAX_RELATIVE_OFFSET = 2**31 - 1
_PAGE_BYTES = mmap.PAGESIZE
_ALLOCATE_AHEAD_BYTES = 64 * 1024  # backed ahead of the entries: one allocation per ~8,000 entries


class _Column:
    """A read-only Sequence over one field of the index's entries, for ``bisect``."""

    __slots__ = ("_unpack", "_buffer", "_entry_bytes", "_count")

    def __init__(self, unpack, buffer, entry_bytes: int, count: int) -> None:
        self._unpack = unpack
        self._buffer = buffer
        self._entry_bytes = entry_bytes
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, slot: int) -> int:
        return self._unpack(self._buffer, slot * self._entry_bytes)[0]


class IndexFile:
    """Shared mechanics of both indexes: the file, its mapping, entries, resize, trim, truncate."""

    ENTRY_BYTES = 0
    _RESERVED_SLOTS = 1  # slots ``reserve`` backs ahead of the entries
    _ENTRY: struct.Struct
    _KEY: struct.Struct  # the field searched by ``_floor_slot``
    _KEY_CODE = "i"  # array typecode of that field
    _OFFSET: struct.Struct  # the relative-offset field, for truncation

    def __init__(self, fs: FileSystem, path: str, base_offset: int, max_index_size_bytes: int,
                 *, writable: bool = True) -> None:
        if max_index_size_bytes < self.ENTRY_BYTES:
            raise ValueError(f"max_index_size_bytes {max_index_size_bytes!r} is smaller than one entry")
        self._fs = fs
        self.path = path
        self.base_offset = base_offset
        self.max_index_size_bytes = max_index_size_bytes
        self.writable = writable
        self._buffer = None  # a writable mmap, bytes (frozen, read-only), None (empty, not read yet)
        self._length = 0  # bytes of the file (whole entries), or the length it is to have (``expand_lazily``)
        # The file's own length while ``_length`` is a promise not kept yet (``expand_lazily``): the
        # active segment of a log just opened is mapped at full size by its first write, not its open.
        self._file_length: int | None = None
        self.entries = 0
        self._changes = 0  # entries written or cut, length changes: what flush() must make durable
        self._flushed_changes = -1  # the first flush always syncs
        self._length_changes = 0  # resizes: the file's length, which only an fsync makes durable
        self._flushed_length_changes = -1
        # The searched field of every entry, copied out once: ``bisect`` then runs in C.
        self._keys = array(self._KEY_CODE)
        self._keys_lock = threading.Lock()
        self._writing = False  # the buffer is a writable mapping of the file
        self._allocated_bytes = 0  # the file's first bytes known backed by disk blocks (while mapped)
        self._closed = False
        self._load_lock = threading.Lock()  # the name, lazy reads, the descriptor vs flush and close
        self._last_raw = b""  # the last entry's bytes, read on open (no need to read all for it)
        self.damage: str | None = None  # why ``quick_check`` must fail, found while opening
        if writable:
            try:
                length = fs.path_size(path)  # one stat: an empty index (a small partition's) is not opened
            except FileNotFoundError:
                self._map_for_writing(self._rounded(max_index_size_bytes), create=True)
            else:
                self._open_lazily(length)
        elif fs.exists(path):
            self._load_read_only()
            self.entries = self._valid_entries()

    # --- sizes -----------------------------------------------------------------------------------

    def _rounded(self, size_bytes: int) -> int:
        return size_bytes // self.ENTRY_BYTES * self.ENTRY_BYTES

    @property
    def max_entries(self) -> int:
        return self._length // self.ENTRY_BYTES

    @property
    def size_bytes(self) -> int:
        """Bytes of valid entries (what the file is trimmed to)."""
        return self.entries * self.ENTRY_BYTES

    def is_full(self) -> bool:
        return self.entries >= self._length // self.ENTRY_BYTES  # max_entries, inline: checked per append

    @property
    def mapped(self) -> bool:
        """Whether the index holds a writable mapping (it is being written)."""
        return self._writing

    # --- the file: lazy reads, mappings for writing -----------------------------------------------

    def _open_lazily(self, length: int) -> None:
        """An existing file of ``length`` bytes opened by a writer: its last entry, no descriptor
        kept (an untrimmed zero tail: a binary search, one entry read per probe); an empty file is
        not opened at all."""
        if length < self.ENTRY_BYTES:
            self._length = self.entries = 0
            self._last_raw = b""
            if length:
                self.damage = f"index file {self.path} ends with a partial entry ({length} bytes)"
            return
        fd = self._fs.open_file(self.path, writable=False)
        try:
            length = self._fs.file_size(fd)  # the length now, under the descriptor the entries are read by
            self._length = self._rounded(length)
            read_slot = lambda slot: self._fs.pread(fd, self.ENTRY_BYTES, slot * self.ENTRY_BYTES)
            self.entries = count = self._length // self.ENTRY_BYTES
            last = read_slot(count - 1) if count else b""
            if count and not any(last):
                self.entries = self._valid_entries(lambda slot: not any(read_slot(slot)))
                last = read_slot(self.entries - 1) if self.entries else b""
            self._last_raw = last
        finally:
            self._fs.close(fd)
        if length % self.ENTRY_BYTES:
            self.damage = f"index file {self.path} ends with a partial entry ({length} bytes)"

    def _content(self):
        """The entries' bytes (the mapping, or a copy), read from the file when first needed."""
        buffer = self._buffer
        if buffer is None and self.entries:
            with self._load_lock:
                if self._buffer is None and self.entries:
                    if self._closed:
                        raise ValueError(f"index {self.path} is closed")
                    self._buffer = self._read_file(self.size_bytes)
                buffer = self._buffer
        return buffer

    def _read_file(self, length: int) -> bytes:
        fd = self._fs.open_file(self.path, writable=False)
        try:
            data = self._fs.pread(fd, length, 0)
        finally:
            self._fs.close(fd)
        if len(data) < length:
            raise CorruptIndexError(f"index file {self.path} shrank to {len(data)} of {length} bytes")
        return data

    def _open(self, create: bool = False) -> int:
        """A descriptor of the file for one operation (the caller closes it), opened by name under
        the lock a rename takes."""
        with self._load_lock:
            if self._closed:
                raise ValueError(f"index {self.path} is closed")
            return self._fs.open_file(self.path, create=create)

    def _map_for_writing(self, length: int, create: bool = False) -> None:
        """Open the file (creating it), map ``length`` bytes of it read-write, close it."""
        fd = self._open(create)
        try:
            self._set_length(fd, length)
        finally:
            self._fs.close(fd)
        self._writing = True

    def _writable_buffer(self):
        """The writable mapping, made first when the index holds none (``freeze`` or ``release``
        released it, or ``expand_lazily`` put it off)."""
        self._require_writable()
        if not self._writing:
            self._map_for_writing(self._length)
            if self._file_length is not None:  # the promised length is the file's now
                if self._file_length != self._length:
                    self._changes += 1
                    self._length_changes += 1
                self._file_length = None
        return self._buffer

    def expand_lazily(self, size_bytes: int) -> None:
        """``resize(size_bytes)`` when that grows the file, made by the first write instead of now:
        until then the index holds no mapping (no descriptor) and the file keeps its length, while
        ``max_entries`` and ``is_full`` answer for the new one. A log's active segment on open: a
        store of many partitions maps only those written to."""
        self._require_writable()
        length = self._rounded(size_bytes)
        if self._writing or length <= self._length:
            self.resize(size_bytes)
            return
        if self._file_length is None:
            self._file_length = self._length
        self._length = length

    def release(self) -> None:
        """Drop the writable mapping (and the descriptor it holds before Python 3.13) without
        trimming: the entries are kept as a copy and the file keeps its preallocated length, so the
        next write maps it again as it was. ``flush`` then syncs by name. An idle active segment."""
        if not self._writing:
            return
        with self._load_lock:  # not under a flush; the mapping is left to the collector (a reader)
            copy = bytes(self._buffer[: self.size_bytes]) if self._buffer is not None and self.entries else None
            self._buffer, self._writing = copy, False

    def _set_length(self, fd: int, length: int) -> None:
        """Make the file open as ``fd`` ``length`` bytes long (sparse: ``ftruncate``) and map it (no
        mapping for an empty file)."""
        assert length % self.ENTRY_BYTES == 0
        old_size = self._fs.file_size(fd)
        if length != old_size:
            self._fs.truncate(fd, length)
        # The entries' blocks exist (they were written); later slots are backed when reserved, so
        # opening or rolling a log needs no free space. The old mapping is left to the collector:
        # a reader thread may still hold it for one lookup of slots that remain inside the file.
        self._allocated_bytes = self.size_bytes
        self._buffer = self._fs.map_file(fd, length, writable=True) if length else None
        self._length = length

    def _allocate_up_to(self, needed_bytes: int) -> None:
        """Back the file's first ``needed_bytes`` (and ``_ALLOCATE_AHEAD_BYTES`` more, whole pages)
        with disk blocks unless they are: ``ENOSPC`` here, not SIGBUS at a write into the page."""
        length = self._length
        if needed_bytes <= self._allocated_bytes or not length:
            return
        end = min(length, -(-(needed_bytes + _ALLOCATE_AHEAD_BYTES) // _PAGE_BYTES) * _PAGE_BYTES)
        fd = self._open()  # once per _ALLOCATE_AHEAD_BYTES of entries: no descriptor kept for it
        try:
            self._fs.allocate(fd, self._allocated_bytes, end - self._allocated_bytes)
        finally:
            self._fs.close(fd)
        self._allocated_bytes = end

    def reserve(self) -> None:
        """Back the next entry (and a time index's final one) with disk blocks now: called before
        the data it indexes is written, so a full disk fails the append before anything is."""
        self._writable_buffer()
        self._allocate_up_to((self.entries + self._RESERVED_SLOTS) * self.ENTRY_BYTES)

    def freeze(self) -> None:
        """Stop writing (the segment is no longer active): trim, keep a copy of the entries, release
        the mapping. ``flush`` still syncs earlier changes; a write maps again."""
        if not self._writing:
            return
        self.trim_to_valid_size()
        with self._load_lock:  # not under a flush; the mapping is left to the collector (a reader)
            copy = bytes(self._buffer[: self.size_bytes]) if self._buffer is not None and self.entries else None
            self._buffer, self._writing = copy, False

    def _load_read_only(self) -> None:
        fd = self._fs.open_file(self.path, writable=False)
        try:
            data = self._fs.pread(fd, self._fs.file_size(fd), 0)
        finally:
            self._fs.close(fd)
        self._length = self._rounded(len(data))
        self._buffer = data[: self._length] if self._length else None

    def _valid_entries(self, is_empty_slot=None) -> int:
        """Entries in the file, ignoring a zero-filled tail (a never-trimmed preallocation).
        ``is_empty_slot`` probes one slot (default: in the loaded content)."""
        is_empty_slot = is_empty_slot or self._is_empty_slot
        count = self._length // self.ENTRY_BYTES
        if count == 0 or not is_empty_slot(count - 1):
            return count
        # Binary search for the first empty slot: real entries are never all-zero except possibly
        # slot 0 of a time index, which is then dropped (an index is only an accelerator).
        low, high = 0, count - 1
        while low < high:
            middle = (low + high) // 2
            if is_empty_slot(middle):
                high = middle
            else:
                low = middle + 1
        return low

    def _is_empty_slot(self, slot: int) -> bool:
        start = slot * self.ENTRY_BYTES
        return not any(self._content()[start : start + self.ENTRY_BYTES])

    # --- searching -------------------------------------------------------------------------------

    def _relative(self, offset: int) -> int:
        relative = offset - self.base_offset
        if not 0 <= relative <= MAX_RELATIVE_OFFSET:
            raise LogSegmentOffsetOverflowError(
                f"offset {offset} does not fit in the index {self.path} with base offset {self.base_offset}")
        return relative

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= MAX_RELATIVE_OFFSET

    def _column(self, field: struct.Struct, entries: int) -> _Column:
        return _Column(field.unpack_from, self._content(), self.ENTRY_BYTES, entries)

    def _floor_slot(self, key: int) -> int:
        """The largest slot whose key is <= ``key``; -1 when none."""
        entries = self.entries
        keys = self._keys
        if len(keys) < entries:
            with self._keys_lock:
                if len(keys) < entries:
                    raw = self._content()[len(keys) * self.ENTRY_BYTES : entries * self.ENTRY_BYTES]
                    keys.extend(map(itemgetter(0), self._ENTRY.iter_unpack(raw)))
        return bisect_right(keys, key, 0, entries) - 1

    def _entry(self, slot: int) -> tuple:
        if not 0 <= slot < self.entries:
            raise IndexError(f"slot {slot} is outside the {self.entries} entries of {self.path}")
        if self._buffer is None and self._last_raw and slot == self.entries - 1:
            return self._ENTRY.unpack(self._last_raw)  # the last entry, read on open: no load
        return self._ENTRY.unpack_from(self._content(), slot * self.ENTRY_BYTES)

    def _write(self, *fields) -> None:
        if self.entries >= self.max_entries:
            raise ValueError(f"attempt to append to a full index {self.path} ({self.entries} entries)")
        buffer = self._writable_buffer()
        self._allocate_up_to(self.size_bytes + self.ENTRY_BYTES)  # reserved already, but never SIGBUS
        self._ENTRY.pack_into(buffer, self.entries * self.ENTRY_BYTES, *fields)
        self._last_raw = b""
        self.entries += 1
        self._changes += 1

    def _write_packed(self, data: bytes, count: int) -> None:
        """Append ``count`` whole entries packed in ``data`` with one copy (a rebuild adds many)."""
        if self.entries + count > self.max_entries:
            raise ValueError(f"attempt to append {count} entries to the index {self.path} "
                             f"({self.entries} of {self.max_entries} entries)")
        buffer = self._writable_buffer()
        start = self.size_bytes
        self._allocate_up_to(start + len(data))
        buffer[start : start + len(data)] = data
        self._last_raw = b""
        self.entries += count
        self._changes += 1

    # --- maintenance -----------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        if self.entries == 0:
            return
        keep = bisect_left(self._column(self._OFFSET, self.entries), offset - self.base_offset)
        self._truncate_to_entries(keep)

    def truncate(self) -> None:
        """Remove every entry."""
        self._truncate_to_entries(0)

    def _truncate_to_entries(self, keep: int) -> None:
        self._require_writable()
        if keep < self.entries:
            buffer = self._writable_buffer()
            start, end = keep * self.ENTRY_BYTES, self.entries * self.ENTRY_BYTES
            buffer[start:end] = bytes(end - start)  # zero them: a reopen must not see them
            self._last_raw = b""
        self.entries = keep
        self._changes += 1
        with self._keys_lock:
            del self._keys[keep:]
        self._after_truncate()

    def _after_truncate(self) -> None:
        pass

    def resize(self, new_size_bytes: int) -> bool:
        """Set the file length to ``new_size_bytes`` rounded down to whole entries (never below the
        entries held). Returns False when nothing changed."""
        self._require_writable()
        length = max(self._rounded(new_size_bytes), self.size_bytes)
        if self._file_length is not None:  # an expansion put off (``expand_lazily``): the file's own length counts
            self._length, self._file_length = self._file_length, None
        if length == self._length:
            return False
        if self._writing:
            fd = self._open()
            try:
                self._set_length(fd, length)
            finally:
                self._fs.close(fd)
        elif length < self._length:  # a trim (an untrimmed file left by a crash): no mapping needed
            fd = self._fs.open_file(self.path)
            try:
                self._fs.truncate(fd, length)
            finally:
                self._fs.close(fd)
            with self._load_lock:
                self._buffer = self._buffer[:length] if self._buffer is not None and length else None
                self._length = length
        else:
            self._map_for_writing(length)
        self._changes += 1
        self._length_changes += 1
        return True

    def trim_to_valid_size(self) -> None:
        self.resize(self.size_bytes)

    def reset(self) -> None:
        """Drop every entry and preallocate to the maximum size again."""
        self.truncate()
        self.resize(self.max_index_size_bytes)
        self.damage = None

    def flush(self) -> None:
        """Make the entries durable: msync the mapping, and fsync the file when its length changed
        (or it has no mapping). Skipped when nothing changed: a group commit of small appends costs
        one fsync of the data file. Entries are written only through the mapping, whose blocks
        were allocated before (``_allocate_up_to``); ``msync(MS_SYNC)`` writes its pages and, on
        Linux, syncs what reading them back needs (it is an fdatasync of the range). An fsync
        after it cost one more device flush (about 150 us here) in 7 of 10 group-commit rounds."""
        if self._closed or self._changes == self._flushed_changes:
            return
        changes, length_changes = self._changes, self._length_changes
        with self._load_lock:  # ``freeze`` (a roll, under the log's lock) never drops it meanwhile
            buffer = self._buffer
            fsync = self.writable
            if self._writing:
                if buffer is not None:
                    self._fs.msync(buffer)
                fsync = buffer is None or length_changes != self._flushed_length_changes
            if fsync:  # a new length, or frozen since the changes: an fsync by name flushes them
                fd = self._fs.open_file(self.path)
                try:
                    self._fs.fsync(fd)
                finally:
                    self._fs.close(fd)
            self._flushed_length_changes = length_changes
        self._flushed_changes = changes

    def close(self) -> None:
        """Trim to the valid entries and release the file. Safe to call twice."""
        if self.writable and not self._closed:
            self.trim_to_valid_size()
        self.close_handlers()

    def close_handlers(self) -> None:
        """Release the mapping and descriptor without writing anything (a failed disk)."""
        with self._load_lock:
            self._closed = True
        buffer, self._buffer, self._writing = self._buffer, None, False
        if buffer is not None and not isinstance(buffer, bytes):
            buffer.close()

    def rename_to(self, new_path: str) -> None:
        with self._load_lock:  # a lazy load reads the file by name: never between the two steps
            if self._fs.exists(self.path):
                self._fs.rename(self.path, new_path)
            self.path = new_path

    def delete(self) -> None:
        self.close_handlers()
        if self._fs.exists(self.path):
            self._fs.remove(self.path)

    def _require_writable(self) -> None:
        if not self.writable:
            raise ValueError(f"index {self.path} is open read-only")
        if self._closed:
            raise ValueError(f"index {self.path} is closed")

    def quick_check(self, segment_size_bytes: int) -> None:
        """O(1) checks on open: whole entries, and the last entry inside the segment's data."""
        if self.damage:
            raise CorruptIndexError(self.damage)
        if self.entries:
            self._check_entry(self.entries - 1, segment_size_bytes)

    def _check_entry(self, slot: int, segment_size_bytes: int) -> None:
        raise NotImplementedError
