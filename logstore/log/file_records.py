"""``FileRecords``: the ``.log`` file of a segment (Kafka's name): record batches back to back.

Owns the descriptor, the logical size (the bytes of complete batches; the file can be longer after a
failed or torn write, and shorter views never see past the logical size), writes at the end, reads,
truncation, fsync, and the rules of reading through a mapping.

Writes go at the logical size with ``pwrite``/``pwritev`` (through the ``FileSystem`` seam) and only
then does the logical size move, so readers inside the process never see a partial batch. Reads use
``pread``; in a writer, ``read_exact`` may read through a read-only mapping instead, which saves a
system call per point read. Touching a mapping past a truncated end of file kills the process with
SIGBUS, hence three rules: a mapping covers only bytes below the logical size when it was made (an
undone write cuts only bytes above the logical size); a mapped file is never cut (``truncate_to``
refuses; the log rewrites such a segment into a new file instead; a file once mapped counts as mapped
for good, since a reader may still hold an old mapping); read-only files, which another process may
cut, are never mapped. Closing closes the mapping: a racing reader gets ``ValueError``.

Descriptors: an existing file gives its descriptor back once its size is read (opening a store with
many segments holds none of theirs); the file of an active segment is *pinned* and keeps its descriptor
once it has one; every other file's
descriptor (and mapping, which holds a descriptor of its own before Python 3.13) is opened when first used and held in
``OPEN_FILES``, a process-wide cache bounded in descriptors (``OpenFiles``); the least recently used
file gives its descriptors back when the bound is passed, and opens them again, by name, when next
used. A descriptor is never closed while a read or write uses it: each use counts itself in and out
under the file's lock, and eviction of a file in use leaves its descriptor to be closed by the last
user (closing it under a ``pread`` would let the number be reused by another file: a wrong read).
"""

from __future__ import annotations

import os
import resource
import threading
from collections import OrderedDict

from ..errors import CorruptRecordError
from ..fs import MAPPING_HOLDS_DESCRIPTOR, FileSystem

_REMAP_MIN_BYTES = 1024 * 1024  # a growing file is mapped again once it grew by this (or a quarter)
_COPY_CHUNK_BYTES = 8 * 1024 * 1024
_MAX_OPEN_DESCRIPTORS = 1024  # the default bound never goes past this, whatever the limit


# Descriptors the active segment of a writable log may hold: its data file's, and before Python 3.13
# one per mapping (the two indexes', and the data file's that point reads make).
ACTIVE_SEGMENT_DESCRIPTORS = 1 + (3 if MAPPING_HOLDS_DESCRIPTOR else 0)


def default_max_open_descriptors() -> int:
    """The default bound of ``OPEN_FILES``: an eighth of the process's descriptor limit
    (``ulimit -n``), between 16 and 1024, leaving the rest to active segments (a few each), sockets
    and the caller (under the common 1024: 128, so a server of 200 partitions keeps room for
    connections)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _MAX_OPEN_DESCRIPTORS
    return max(16, min(_MAX_OPEN_DESCRIPTORS, soft // 8))


class OpenFiles:
    """The descriptors held by the unpinned data files of a process, bounded: ``max_descriptors``
    (None: ``default_max_open_descriptors()``, read when first needed). Least recently used first
    out, with a second chance for a file used since it was last looked at (a flag each use sets,
    so uses take no lock of this cache)."""

    def __init__(self, max_descriptors: int | None = None) -> None:
        self._lock = threading.Lock()
        self._files: OrderedDict[FileRecords, int] = OrderedDict()  # file -> descriptors counted
        self._descriptors = 0
        self.max_descriptors = max_descriptors
        self.evictions = 0

    @property
    def descriptors(self) -> int:
        """Descriptors held by the files in the cache now."""
        return self._descriptors

    def _bound(self) -> int:
        if self.max_descriptors is None:
            self.max_descriptors = default_max_open_descriptors()
        return self.max_descriptors

    @property
    def bound(self) -> int:
        """The most descriptors the cache holds (``max_descriptors``, or its default now)."""
        return self._bound()

    def admit(self, records: "FileRecords", descriptors: int) -> None:
        """``records`` (unpinned) now holds ``descriptors`` more. Evicts others past the bound
        (never ``records`` itself, nor a file whose lock the caller holds: it holds none)."""
        bound = self._bound()
        victims = []
        with self._lock:
            self._files[records] = self._files.get(records, 0) + descriptors
            self._descriptors += descriptors
            if self._descriptors > bound:
                budget = 2 * len(self._files)  # every file gets one second chance at most
                while self._descriptors > bound and budget > 1:
                    budget -= 1
                    victim, held = next(iter(self._files.items()))
                    if victim is records or victim._referenced:
                        victim._referenced = False
                        self._files.move_to_end(victim)
                        continue
                    del self._files[victim]
                    self._descriptors -= held
                    victims.append(victim)
        for victim in victims:  # outside the cache's lock: eviction takes the file's lock
            self.evictions += 1
            victim._evict()

    def forget(self, records: "FileRecords") -> None:
        """``records`` holds no descriptor counted here any more (closed, pinned or evicted)."""
        with self._lock:
            held = self._files.pop(records, None)
            if held is not None:
                self._descriptors -= held


    def _forget_all(self) -> None:
        """In a forked child: start empty with a fresh lock (the parent's files, and locks another
        thread may have held at the fork, are not the child's to close)."""
        self._lock = threading.Lock()
        self._files = OrderedDict()
        self._descriptors = 0


OPEN_FILES = OpenFiles()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=OPEN_FILES._forget_all)


class FileRecords:
    """One ``.log`` file. Not thread-safe for writers (the owning log serialises them); reads may
    run concurrently with appends."""

    def __init__(self, fs: FileSystem, path: str, *, create: bool, writable: bool,
                 open_files: OpenFiles | None = None) -> None:
        self._fs = fs
        self.path = path
        self.writable = writable
        self._open_files = OPEN_FILES if open_files is None else open_files
        self._lock = threading.Lock()  # guards the descriptor, the users count and the name
        self._users = 0  # reads and writes using the descriptor now
        self._retired: list[int] = []  # evicted while in use: closed by the last user
        self._pinned = False
        self._referenced = True
        self._closed = False
        self._fd: int | None = fs.open_file(path, create=create and writable, writable=writable)
        try:
            self.size_bytes = fs.file_size(self._fd)
        except BaseException:
            fs.close(self._fd)
            raise
        self._pread = fs.pread
        # ``os.pwrite`` itself when the seam's is the plain one (a test's FileSystem keeps its own)
        self._os_pwrite = os.pwrite if type(fs).pwrite is FileSystem.pwrite else None
        self._map = None  # a read-only mapping of [0, _mapped_bytes) (writer only)
        self._mapped_bytes = 0
        self._ever_mapped = False
        if create:
            self._open_files.admit(self, 1)  # a new file is written next (and pinned, mostly)
        else:
            # An existing file (a store being opened: most are inactive segments) keeps no
            # descriptor: the first use opens it again, so opening a store holds one per partition.
            fd, self._fd = self._fd, None
            fs.close(fd)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def mapped(self) -> bool:
        """Whether reads hold, or held, a mapping of the file (it must then never be cut: a reader
        may still be slicing an old one); a closed file holds none."""
        return self._ever_mapped and not self._closed

    @property
    def descriptors(self) -> int:
        """Descriptors this file holds now (its own and its mapping's)."""
        return (self._fd is not None) + (self._map is not None and MAPPING_HOLDS_DESCRIPTOR)

    # --- the descriptor: pinned, or cached and reopened -------------------------------------------

    def pin(self) -> None:
        """Keep the descriptor for good (the active segment's file): out of the cache."""
        with self._lock:
            self._pinned = True
        self._open_files.forget(self)

    def unpin(self) -> None:
        """Give the descriptors to the bounded cache (the segment is no longer active)."""
        with self._lock:
            if not self._pinned:
                return
            self._pinned = False
            held = 0 if self._closed else self.descriptors
        if held:
            self._open_files.admit(self, held)

    def _acquire(self) -> int:
        """The descriptor, opened again when evicted, counted in use until ``_release``."""
        opened = False
        with self._lock:
            fd = self._fd
            if fd is None:
                if self._closed:
                    raise ValueError(f"{self.path} is closed")
                fd = self._fd = self._fs.open_file(self.path, writable=self.writable)
                opened = not self._pinned
            self._users += 1
        self._referenced = True
        if opened:
            self._open_files.admit(self, 1)
        return fd

    def _release(self) -> None:
        lock = self._lock
        lock.acquire()  # not ``with``: this runs once per append and read, and costs half as much
        try:
            self._users -= 1
            if self._users or not self._retired:
                return
            retired, self._retired = self._retired, []
        finally:
            lock.release()
        for fd in retired:
            self._fs.close(fd)

    def release_descriptor(self) -> None:
        """Give the descriptor and the mapping back now, unless pinned (the next use opens the file
        again): the inactive segments of a log that was just opened, whose headers the loader read."""
        self._open_files.forget(self)
        self._evict()

    def take_referenced(self) -> bool:
        """Whether a read or an unpinned write used the descriptor since the last call (which clears
        it). The pinned append path does not say so: the log's end offset does."""
        referenced, self._referenced = self._referenced, False
        return referenced

    def release_pinned_descriptor(self) -> None:
        """``release_descriptor`` for the pinned file of an active segment whose log is idle (or
        was just opened): the next use opens the file again and keeps it, still pinned. The caller
        holds the owning log's lock, which every writer holds: the pinned append path uses the
        descriptor without counting itself in."""
        if self._pinned:
            self._evict(pinned_too=True)
        else:
            self.release_descriptor()

    def _evict(self, pinned_too: bool = False) -> None:
        """Give back the descriptor and the mapping (the cache is over its bound). A descriptor in
        use is closed by its last user; the mapping by the collector once no reader holds it."""
        with self._lock:
            if (self._pinned and not pinned_too) or self._closed:
                return
            self._map = None
            fd, self._fd = self._fd, None
            if fd is None:
                return
            if self._users:
                self._retired.append(fd)
                return
        self._fs.close(fd)

    # --- writing ---------------------------------------------------------------------------------

    def append(self, data) -> int:
        """Write ``data`` (bytes, or a list of buffers written with one ``pwritev``) at the logical
        size, then move the size past it. Returns the position written at. ``OSError`` propagates
        with the size unchanged (``undo_partial_write`` cuts what was written)."""
        position = self.size_bytes
        fd = self._fd
        if self._pinned and fd is not None and type(data) is bytes:
            # The active segment's file, one buffer (a one-record append, where this is most of the
            # cost): a pinned descriptor is never evicted, and it is closed only under the owning
            # log's lock, which every writer holds, so this write needs no use count.
            os_pwrite = self._os_pwrite
            written = 0 if os_pwrite is None else os_pwrite(fd, data, position)
            if written != len(data):  # a FileSystem of its own, or a short write: the seam's loop
                self._fs.pwrite(fd, data[written:], position + written)
            self.size_bytes = position + len(data)
            return position
        lock = self._lock
        lock.acquire()  # ``_acquire`` inline for the common case (an open descriptor): once per append
        try:
            fd = self._fd
            if fd is not None:
                self._users += 1
        finally:
            lock.release()
        if fd is None:
            fd = self._acquire()
        else:
            self._referenced = True
        try:
            if type(data) is list:
                self._fs.pwritev(fd, data, position)
                self.size_bytes = position + sum(map(len, data))
            else:
                self._fs.pwrite(fd, data, position)
                self.size_bytes = position + len(data)
        finally:
            lock.acquire()  # ``_release`` inline for the common case (nothing retired meanwhile)
            try:
                retired = self._users == 1 and bool(self._retired)
                if not retired:
                    self._users -= 1
            finally:
                lock.release()
            if retired:
                self._release()  # the last user closes the descriptors retired meanwhile
        return position

    def undo_partial_write(self) -> None:
        """After a failed write, cut anything written past the logical size (never below a mapping,
        which covers at most the logical size)."""
        self._call(self._fs.truncate, self.size_bytes)

    def truncate_to(self, size_bytes: int) -> None:
        """Cut the file to ``size_bytes``. Refused for a mapped file: a reader could fault."""
        if self._ever_mapped:
            raise AssertionError(f"{self.path} is mapped: it must not be cut in place")
        self._call(self._fs.truncate, size_bytes)
        self.size_bytes = size_bytes

    def flush(self) -> None:
        self._call(self._fs.fsync)

    def _call(self, operation, *args):
        """``operation(fd, *args)`` with the descriptor held in use."""
        fd = self._acquire()
        try:
            return operation(fd, *args)
        finally:
            self._release()

    # --- reading ---------------------------------------------------------------------------------

    def pread(self, size_bytes: int, position: int) -> bytes:
        """Up to ``size_bytes`` at ``position`` (fewer at the end of the file)."""
        fd = self._acquire()
        try:
            return self._pread(fd, size_bytes, position)
        finally:
            self._release()

    def read_exact(self, size_bytes: int, position: int) -> bytes:
        """Exactly ``size_bytes`` at ``position``, through the mapping when one may be used."""
        if self._closed:
            raise ValueError(f"{self.path} is closed")
        mapping = self._map
        if mapping is None or position + size_bytes > self._mapped_bytes:
            mapping = self._map_for_reading(position + size_bytes)
        data = mapping[position : position + size_bytes] if mapping is not None else self.pread(size_bytes, position)
        if len(data) != size_bytes:
            raise CorruptRecordError(f"{self.path} ended inside a batch at position {position}")
        return data

    def _map_for_reading(self, needed_bytes: int):
        """The mapping to read bytes below ``needed_bytes`` from, (re)made to cover the logical size
        when that has grown enough since the last one; None to read with ``pread`` instead."""
        size = self.size_bytes
        if not self.writable or needed_bytes > size:
            return None
        mapping = self._map
        if mapping is not None and size - self._mapped_bytes < max(_REMAP_MIN_BYTES, self._mapped_bytes // 4):
            return None  # a growing file: not worth mapping again for a little more yet
        fd = self._acquire()
        try:
            # The old mapping is left to the collector: a reader thread may still be slicing it.
            mapping = self._fs.map_file(fd, size, writable=False)
            with self._lock:
                if self._fd is None or self._closed:  # evicted or closed meanwhile: read this once
                    return mapping
                counted = self._map is None and not self._pinned and MAPPING_HOLDS_DESCRIPTOR
                self._map, self._mapped_bytes, self._ever_mapped = mapping, size, True
        finally:
            self._release()
        if counted:
            self._open_files.admit(self, 1)
        return mapping

    def file_size(self) -> int:
        """The file's current length (may exceed the logical size: another process writing, or a
        torn tail not yet recovered)."""
        return self._call(self._fs.file_size)

    def copy_to(self, target: "FileRecords", end_position: int) -> None:
        """Copy bytes [0, ``end_position``) into the empty ``target``."""
        position = 0
        while position < end_position:
            chunk = self.pread(min(_COPY_CHUNK_BYTES, end_position - position), position)
            if not chunk:
                raise CorruptRecordError(f"{self.path} ended at {position} while copying {end_position} bytes")
            target.append(chunk)
            position += len(chunk)

    # --- the file itself -------------------------------------------------------------------------

    def rename(self, new_path: str) -> None:
        with self._lock:  # a reopen goes by name: never between the rename and the new name
            self._fs.rename(self.path, new_path)
            self.path = new_path

    def close(self) -> None:
        """Release the mapping and the descriptor (closed by the last user when in use). Safe twice."""
        with self._lock:
            self._closed = True
            mapping, self._map = self._map, None
            fd, self._fd = self._fd, None
            if fd is not None and self._users:
                self._retired.append(fd)
                fd = None
        self._open_files.forget(self)
        if mapping is not None:
            mapping.close()
        if fd is not None:
            self._fs.close(fd)
