"""The file-operations seam: every durability-relevant file operation of the engine goes through
one ``FileSystem`` object.

Creating, writing, allocating, fsyncing, fsyncing a directory, renaming, truncating and deleting
files all pass through here, so tests can substitute a subclass that records operations, injects ``ENOSPC``/``EIO``,
or simulates a power loss by dropping what was never fsynced (see ``logstore.testing``).

Reads (``pread``, ``mmap``) pass through here too, so the fault-injecting subclasses see them, but they
are kept as thin as possible because they sit on hot paths.

Conventions:
- ``OSError`` propagates unchanged; the layers above decide what it means (a log turns an fsync error
  into fail-stop).
- ``pwrite`` loops on short writes, so a caller either wrote everything or got an exception.
- ``write_file_atomic`` is the one way to replace a small file: temp file, fsync, rename, directory
  fsync.
- Permissions: files are created 0666 and directories 0777, less the process's umask (the user's
  choice, as every Unix tool does); a private file (``private=True``: the server's credentials and
  ACLs) is created 0600 whatever the umask, and readable by its owner only from its first byte.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import stat
import sys
from collections.abc import Callable, Sequence

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_ALLOCATE_CHUNK_BYTES = 1 << 20
_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)


def _libc_msync() -> Callable[[int, int, int], int] | None:
    """libc's ``msync`` through ctypes, which releases the GIL around the call (``mmap.flush``
    holds it while the page is written to disk, stalling every other thread of the process: the
    appenders of a group commit); None where it is not known to be safe (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).msync
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    function.restype = ctypes.c_int
    return function


_MSYNC = _libc_msync()
# Before Python 3.13 a mapping keeps a duplicate of the descriptor it was made from (for its
# ``size`` and ``resize``, which logstore never calls), one descriptor per mapping; from 3.13 on
# ``trackfd=False`` makes it hold none.
MAPPING_HOLDS_DESCRIPTOR = sys.version_info < (3, 13)
_MS_SYNC = 4  # Linux's value (mmap does not export it)


class FileSystem:
    """The operating system, seen through the operations logstore needs. Stateless and
    thread-safe; one instance is normally shared by a whole store."""

    # --- data files ----------------------------------------------------------------------------

    def open_file(self, path: str, *, create: bool = False, writable: bool = True, private: bool = False) -> int:
        """Open ``path`` and return a file descriptor. ``create`` creates it when missing (the
        caller fsyncs the directory afterwards, once, for all the files it created): 0666 less the
        umask, or 0600 when ``private``."""
        flags = (os.O_RDWR if writable else os.O_RDONLY) | _O_CLOEXEC
        if create:
            flags |= os.O_CREAT
        return os.open(path, flags, 0o600 if private else 0o666)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
        """Write all of ``data`` at ``position``, looping on short writes."""
        if type(data) is bytes:  # the common case (a small batch): one call, no view made
            written = os.pwrite(fd, data, position)
            if written == len(data):
                return
            if written <= 0:  # pragma: no cover - the kernel reports errors as exceptions
                raise OSError(errno.EIO, f"pwrite wrote {written} bytes")
            data, position = memoryview(data)[written:], position + written
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, position)
            if written <= 0:  # pragma: no cover - the kernel reports errors as exceptions
                raise OSError(errno.EIO, f"pwrite wrote {written} bytes")
            position += written
            view = view[written:]

    def pwritev(self, fd: int, buffers: Sequence[bytes | bytearray | memoryview], position: int) -> None:
        """Write the concatenation of ``buffers`` at ``position`` with as few system calls as the
        kernel allows (``IOV_MAX`` buffers each), looping on short writes."""
        views = [memoryview(buffer) for buffer in buffers if len(buffer)]
        first = 0
        while first < len(views):
            written = os.pwritev(fd, views[first : first + _IOV_MAX], position)
            if written <= 0:  # pragma: no cover - the kernel reports errors as exceptions
                raise OSError(errno.EIO, f"pwritev wrote {written} bytes")
            position += written
            while first < len(views) and written >= len(views[first]):
                written -= len(views[first])
                first += 1
            if written:
                views[first] = views[first][written:]

    def pread(self, fd: int, size: int, position: int) -> bytes:
        """Read up to ``size`` bytes at ``position`` (fewer at end of file)."""
        return os.pread(fd, size, position)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def file_size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def allocate(self, fd: int, offset: int, length: int) -> None:
        """Back bytes [``offset``, ``offset + length``) of the file with disk blocks, growing the
        file when it is shorter, so writes there (through a mapping above all) cannot run out of
        space later: a page of a mapping that the file system cannot back kills the process with
        SIGBUS when touched, while ``ENOSPC`` here is an ordinary error. A file system without
        ``fallocate`` (``EOPNOTSUPP``/``EINVAL``) gets the blocks written instead: existing bytes
        rewritten as they are, the bytes past the end as zeros (never left as an unbacked hole)."""
        try:
            os.posix_fallocate(fd, offset, length)
            return
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
        self._allocate_by_writing(fd, offset, length)

    def _allocate_by_writing(self, fd: int, offset: int, length: int) -> None:
        """``allocate`` for file systems without ``fallocate``: read each chunk and write it back,
        padded with zeros where the file ends (the caller holds no mapping of those bytes yet)."""
        position, end = offset, offset + length
        while position < end:
            size = min(_ALLOCATE_CHUNK_BYTES, end - position)
            chunk = os.pread(fd, size, position)
            self.pwrite(fd, chunk + bytes(size - len(chunk)), position)
            position += size

    def map_file(self, fd: int, length: int, *, writable: bool) -> mmap.mmap:
        """Map the first ``length`` (> 0) bytes of an open file. The mapping does not need ``fd``
        afterwards (the caller may close it); whether it holds a descriptor of its own is
        ``MAPPING_HOLDS_DESCRIPTOR``."""
        access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
        if sys.version_info >= (3, 13):  # not MAPPING_HOLDS_DESCRIPTOR, spelled so that type checkers see it
            return mmap.mmap(fd, length, access=access, trackfd=False)
        return mmap.mmap(fd, length, access=access)

    def msync(self, mapping: mmap.mmap) -> None:
        """Make a writable mapping's changes durable (msync), letting other threads run meanwhile."""
        if _MSYNC is None:
            mapping.flush()
            return
        # The view exports the mapping's buffer (a close or resize meanwhile raises instead of
        # unmapping under the call) until it is freed, right after the call.
        view = (ctypes.c_char * len(mapping)).from_buffer(mapping)
        try:
            if _MSYNC(ctypes.addressof(view), len(mapping), _MS_SYNC) != 0:
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code))
        finally:
            del view

    # --- the namespace -------------------------------------------------------------------------

    def fsync_dir(self, path: str) -> None:
        """Make creations, renames and deletions inside directory ``path`` durable."""
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, source: str, target: str) -> None:
        """Atomically rename ``source`` to ``target`` (replacing it). The caller fsyncs the dir."""
        os.replace(source, target)

    def remove(self, path: str) -> None:
        os.unlink(path)

    def make_dirs(self, path: str) -> None:
        """Create ``path`` and any missing parents, fsyncing each parent that gained an entry."""
        path = os.path.abspath(path)
        if os.path.isdir(path):
            return
        parent = os.path.dirname(path)
        if parent != path:
            self.make_dirs(parent)
        try:
            os.mkdir(path, 0o777)  # less the umask
        except FileExistsError:
            if not os.path.isdir(path):
                raise
            return
        self.fsync_dir(parent)

    def remove_dir(self, path: str) -> None:
        os.rmdir(path)

    def list_dir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def is_file(self, path: str) -> bool:
        try:
            return stat.S_ISREG(os.stat(path).st_mode)
        except FileNotFoundError:
            return False

    def permissions(self, path: str) -> int:
        """The permission bits of ``path`` (``0o600``...)."""
        return stat.S_IMODE(os.stat(path).st_mode)

    def path_size(self, path: str) -> int:
        return os.stat(path).st_size

    def mtime_ms(self, path: str) -> int:
        return os.stat(path).st_mtime_ns // 1_000_000

    def set_mtime_ms(self, path: str, mtime_ms: int) -> None:
        ns = mtime_ms * 1_000_000
        os.utime(path, ns=(ns, ns))

    # --- small whole files ---------------------------------------------------------------------

    def read_file(self, path: str) -> bytes:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
        try:
            chunks: list[bytes] = []
            position = 0
            while True:
                chunk = os.pread(fd, 1 << 20, position)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                position += len(chunk)
        finally:
            os.close(fd)

    def write_file_atomic(self, path: str, data: bytes, *, private: bool = False) -> None:
        """Replace ``path`` with ``data`` crash-safely: temp file, fsync, rename, directory fsync.
        After a crash the file holds either the old or the new content, never a mix. A ``private``
        file is written to a new temp file made 0600 (a leftover one is removed first: someone may
        hold it open), so the file that replaces ``path`` is 0600 too, whatever ``path`` was."""
        temp_path = path + ".tmp"
        if private and self.exists(temp_path):
            self.remove(temp_path)
        # ``private`` only when set: test doubles that wrap ``open_file`` without it still write the rest
        fd = self.open_file(temp_path, create=True, **({"private": True} if private else {}))
        try:
            self.truncate(fd, 0)
            self.pwrite(fd, data, 0)
            self.fsync(fd)  # 1. the bytes are durable
        finally:
            self.close(fd)
        self.rename(temp_path, path)  # 2. the name flips atomically
        self.fsync_dir(os.path.dirname(path) or ".")  # 3. the rename itself is durable

    # --- the store lock ------------------------------------------------------------------------

    def try_lock(self, path: str) -> int | None:
        """Take an exclusive ``flock`` on ``path`` (created if missing) without blocking.

        Returns the descriptor holding the lock, or None when another holder has it. ``flock``
        (not ``lockf``) because it also refuses a second open in the same process and is not
        dropped when some other descriptor of the file is closed."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o666)  # less the umask
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return fd

    def unlock(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


OS_FILE_SYSTEM = FileSystem()
