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
refuses; the log rewrites such a segment into a new file instead); read-only files, which another
process may cut, are never mapped. Closing closes the mapping: a racing reader gets ``ValueError``.
"""

from __future__ import annotations

from ..errors import CorruptRecordError
from ..fs import FileSystem

_REMAP_MIN_BYTES = 1024 * 1024  # a growing file is mapped again once it grew by this (or a quarter)
_COPY_CHUNK_BYTES = 8 * 1024 * 1024


class FileRecords:
    """One ``.log`` file. Not thread-safe for writers (the owning log serialises them); reads may
    run concurrently with appends."""

    def __init__(self, fs: FileSystem, path: str, *, create: bool, writable: bool) -> None:
        self._fs = fs
        self.path = path
        self.writable = writable
        self._fd: int | None = fs.open_file(path, create=create and writable, writable=writable)
        try:
            self.size_bytes = fs.file_size(self._fd)
        except BaseException:
            fs.close(self._fd)
            raise
        self._pread = fs.pread
        self._map = None  # a read-only mapping of [0, _mapped_bytes) (writer only)
        self._mapped_bytes = 0

    @property
    def closed(self) -> bool:
        return self._fd is None

    @property
    def mapped(self) -> bool:
        """Whether reads hold a mapping of the file (it must then never be cut)."""
        return self._map is not None

    def _descriptor(self) -> int:
        fd = self._fd
        if fd is None:
            raise ValueError(f"{self.path} is closed")
        return fd

    # --- writing ---------------------------------------------------------------------------------

    def append(self, data) -> int:
        """Write ``data`` (bytes, or a list of buffers written with one ``pwritev``) at the logical
        size, then move the size past it. Returns the position written at. ``OSError`` propagates
        with the size unchanged (``undo_partial_write`` cuts what was written)."""
        position = self.size_bytes
        if isinstance(data, list):
            self._fs.pwritev(self._descriptor(), data, position)
            self.size_bytes = position + sum(map(len, data))
        else:
            self._fs.pwrite(self._descriptor(), data, position)
            self.size_bytes = position + len(data)
        return position

    def undo_partial_write(self) -> None:
        """After a failed write, cut anything written past the logical size (never below a mapping,
        which covers at most the logical size)."""
        self._fs.truncate(self._descriptor(), self.size_bytes)

    def truncate_to(self, size_bytes: int) -> None:
        """Cut the file to ``size_bytes``. Refused for a mapped file: a reader could fault."""
        if self._map is not None:
            raise AssertionError(f"{self.path} is mapped: it must not be cut in place")
        self._fs.truncate(self._descriptor(), size_bytes)
        self.size_bytes = size_bytes

    def flush(self) -> None:
        self._fs.fsync(self._descriptor())

    # --- reading ---------------------------------------------------------------------------------

    def pread(self, size_bytes: int, position: int) -> bytes:
        """Up to ``size_bytes`` at ``position`` (fewer at the end of the file)."""
        return self._fs.pread(self._descriptor(), size_bytes, position)

    def read_exact(self, size_bytes: int, position: int) -> bytes:
        """Exactly ``size_bytes`` at ``position``, through the mapping when one may be used."""
        fd = self._descriptor()
        mapping = self._map
        if mapping is None or position + size_bytes > self._mapped_bytes:
            mapping = self._map_for_reading(fd, position + size_bytes)
        data = mapping[position : position + size_bytes] if mapping is not None else self._pread(fd, size_bytes, position)
        if len(data) != size_bytes:
            raise CorruptRecordError(f"{self.path} ended inside a batch at position {position}")
        return data

    def _map_for_reading(self, fd: int, needed_bytes: int):
        """The mapping to read bytes below ``needed_bytes`` from, (re)made to cover the logical size
        when that has grown enough since the last one; None to read with ``pread`` instead."""
        size = self.size_bytes
        if not self.writable or needed_bytes > size:
            return None
        if self._map is not None and size - self._mapped_bytes < max(_REMAP_MIN_BYTES, self._mapped_bytes // 4):
            return None  # a growing file: not worth mapping again for a little more yet
        # The old mapping is left to the collector: a reader thread may still be slicing it.
        self._map = self._fs.map_file(fd, size, writable=False)
        self._mapped_bytes = size
        return self._map

    def file_size(self) -> int:
        """The file's current length (may exceed the logical size: another process writing, or a
        torn tail not yet recovered)."""
        return self._fs.file_size(self._descriptor())

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
        self._fs.rename(self.path, new_path)
        self.path = new_path

    def close(self) -> None:
        """Release the mapping and the descriptor. Safe twice."""
        mapping, self._map = self._map, None
        if mapping is not None:
            mapping.close()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._fs.close(fd)
