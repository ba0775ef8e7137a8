"""Test doubles for the file-operations seam: simulated power loss and injected I/O errors.

``SimulatedCrashFileSystem`` runs every operation for real (on a real directory) and remembers what
was made durable: for each file the size at its last ``fsync``, for each directory the entries created,
renamed or removed since its last ``fsync_dir``. ``crash(rng)`` then turns the directory into a state a
power loss could leave:

- every file keeps what was fsynced; of the bytes written since, a random prefix survives, and the
  last surviving bytes may be torn (replaced by zeros or garbage), as in ALICE's append model;
- namespace changes since the directory's last fsync may be lost: a created file may vanish, a
  rename may be undone (newest first; a file the rename replaced is back under its name);
- every descriptor and mapping the code under test held is closed (the process is gone).

Limits of the model: writes through mmap (index files) are not dropped (indexes are rebuilt after an
unclean shutdown anyway), and an overwrite in the middle of already-synced data is not torn.

``RecordingFileSystem`` runs every operation for real and records, in order, each one a power loss
could keep or undo (with the bytes written), so a test can replay the recording and enumerate the
states a power loss at any point could leave (tests/crash_states.py).

``FaultyFileSystem`` raises an ``OSError`` with a chosen errno at the N-th call of chosen operations.
Nothing in the engine imports this module.
"""

from __future__ import annotations

import errno
import os
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from .fs import FileSystem


@dataclass
class _FileState:
    synced_size: int = 0
    size: int = 0


@dataclass
class CrashReport:
    """What ``crash`` did, for test messages."""

    cut_files: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (old size, new size)
    torn_files: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)
    undone_renames: list[tuple[str, str]] = field(default_factory=list)


class SimulatedCrashFileSystem(FileSystem):
    """A real file system that can forget everything that was never made durable."""

    def __init__(self) -> None:
        self._files: dict[str, _FileState] = {}
        self._fd_paths: dict[int, str] = {}
        self._maps: list = []
        self._lock_fds: set[int] = set()
        # dir -> [(op, a, b, the content b had before a rename replaced it, or None)]
        self._pending: dict[str, list[tuple[str, str, str, bytes | None]]] = {}
        self.fsyncs = 0

    # --- bookkeeping -----------------------------------------------------------------------------

    def _state(self, path: str) -> _FileState:
        state = self._files.get(path)
        if state is None:
            size = os.path.getsize(path) if os.path.exists(path) else 0
            state = self._files[path] = _FileState(size, size)
        return state

    def _note(self, dir_path: str, op: str, a: str, b: str = "", replaced: bytes | None = None) -> None:
        self._pending.setdefault(os.path.abspath(dir_path), []).append((op, a, b, replaced))

    # --- data files ------------------------------------------------------------------------------

    def open_file(self, path: str, *, create: bool = False, writable: bool = True, private: bool = False) -> int:
        path = os.path.abspath(path)
        existed = os.path.exists(path)
        fd = super().open_file(path, create=create, writable=writable, private=private)
        self._fd_paths[fd] = path
        state = self._state(path)
        if not existed:
            state.synced_size = state.size = 0
            self._note(os.path.dirname(path), "create", path)
        return fd

    def close(self, fd: int) -> None:
        if self._fd_paths.pop(fd, None) is None:
            return  # closed by ``abandon`` (the process is gone): the number may be another file's now
        super().close(fd)

    def _fd_state(self, fd: int) -> _FileState:
        path = self._fd_paths.get(fd)
        return self._state(path) if path is not None else _FileState()  # e.g. the lock file

    def pwrite(self, fd: int, data, position: int) -> None:
        super().pwrite(fd, data, position)
        state = self._fd_state(fd)
        state.size = max(state.size, position + len(data))

    def pwritev(self, fd: int, buffers: Sequence[bytes | bytearray | memoryview], position: int) -> None:
        super().pwritev(fd, buffers, position)
        state = self._fd_state(fd)
        state.size = max(state.size, position + sum(map(len, buffers)))

    def truncate(self, fd: int, size: int) -> None:
        super().truncate(fd, size)
        state = self._fd_state(fd)
        state.size = size
        state.synced_size = min(state.synced_size, size)

    def allocate(self, fd: int, offset: int, length: int) -> None:
        super().allocate(fd, offset, length)
        state = self._fd_state(fd)
        state.size = max(state.size, offset + length)

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        self.fsyncs += 1
        state = self._fd_state(fd)
        state.synced_size = state.size

    def map_file(self, fd: int, length: int, *, writable: bool):
        mapping = super().map_file(fd, length, writable=writable)
        self._maps.append(mapping)
        return mapping

    # --- namespace -------------------------------------------------------------------------------

    def fsync_dir(self, path: str) -> None:
        super().fsync_dir(path)
        self._pending.pop(os.path.abspath(path), None)

    def rename(self, source: str, target: str) -> None:
        source, target = os.path.abspath(source), os.path.abspath(target)
        # A rename over an existing file (temp + fsync + rename): until the directory is fsynced a
        # power loss may leave the old file under that name, so its content is kept for the undo.
        replaced = None
        if os.path.isfile(target):
            with open(target, "rb") as handle:
                replaced = handle.read()
        super().rename(source, target)
        self._files[target] = self._files.pop(source, None) or self._state(target)
        for fd, path in self._fd_paths.items():
            if path == source:
                self._fd_paths[fd] = target
        self._note(os.path.dirname(target), "rename", source, target, replaced)

    def remove(self, path: str) -> None:
        path = os.path.abspath(path)
        super().remove(path)
        self._files.pop(path, None)
        self._note(os.path.dirname(path), "remove", path)

    def try_lock(self, path: str) -> int | None:
        fd = super().try_lock(path)
        if fd is not None:
            self._lock_fds.add(fd)
        return fd

    def unlock(self, fd: int) -> None:
        self._lock_fds.discard(fd)
        super().unlock(fd)

    # --- the crash -------------------------------------------------------------------------------

    def abandon(self) -> None:
        """Close every descriptor, mapping and lock the code under test held (a dead process)."""
        for mapping in self._maps:
            if not mapping.closed:
                mapping.close()
        self._maps.clear()
        for fd in list(self._fd_paths) + list(self._lock_fds):
            try:
                os.close(fd)
            except OSError:
                pass  # already closed by the code under test
        self._fd_paths.clear()
        self._lock_fds.clear()

    def crash(self, rng: random.Random, *, lose_unsynced: bool = True) -> CrashReport:
        """Abandon the process and, when ``lose_unsynced``, forget what a power loss may forget.
        With ``lose_unsynced=False`` this is a process crash (kill -9): the page cache survives."""
        self.abandon()
        report = CrashReport()
        if lose_unsynced:
            self._undo_namespace(rng, report)
            for path, state in list(self._files.items()):
                if state.size > state.synced_size and os.path.exists(path):
                    self._cut(path, state, rng, report)
        self._files.clear()
        self._pending.clear()
        return report

    def _undo_namespace(self, rng: random.Random, report: CrashReport) -> None:
        for dir_path, ops in self._pending.items():
            keep = rng.randrange(len(ops) + 1)  # a random prefix of the changes reached the disk
            for op, a, b, replaced in reversed(ops[keep:]):
                # Even a file whose data was fsynced vanishes if its directory entry was not
                # (KAFKA-3968): that is what the directory fsyncs are for.
                if op == "create" and os.path.exists(a):
                    os.unlink(a)
                    self._files.pop(a, None)
                    report.vanished.append(a)
                elif op == "rename" and os.path.exists(b) and not os.path.exists(a):
                    os.rename(b, a)
                    self._files[a] = self._files.pop(b, _FileState())
                    report.undone_renames.append((a, b))
                    if replaced is not None:  # the file the rename replaced is back under its name
                        with open(b, "wb") as handle:
                            handle.write(replaced)
                        self._files[b] = _FileState(len(replaced), len(replaced))

    def _cut(self, path: str, state: _FileState, rng: random.Random, report: CrashReport) -> None:
        new_size = rng.randint(state.synced_size, state.size)
        os.truncate(path, new_size)
        report.cut_files[path] = (state.size, new_size)
        torn = min(new_size - state.synced_size, rng.choice((0, 0, 1, 7, 512, 4096)))
        if torn > 0:
            filler = bytes(torn) if rng.random() < 0.5 else rng.randbytes(torn)
            with open(path, "r+b") as handle:
                handle.seek(new_size - torn)
                handle.write(filler)
            report.torn_files.append(path)


class OperationHookFileSystem(FileSystem):
    """A real file system that calls ``before(operation, path)`` just before every operation that
    changes files, so a test can count them, fail one, or end the process there. The operations:
    ``create`` (of a new file), ``pwrite`` (also ``pwritev``), ``truncate``, ``allocate``, ``fsync``, ``msync``,
    ``fsync_dir``, ``rename``, ``remove``, ``mkdir`` (of a new dir), ``remove_dir``, ``set_mtime``.
    ``path`` is None for operations on a descriptor. Cooperative: it can sit in front of another
    ``FileSystem`` subclass (``class X(OperationHookFileSystem, SimulatedCrashFileSystem)``)."""

    def before(self, operation: str, path: str | None) -> None:
        """Called before each operation; does nothing here."""

    def open_file(self, path: str, *, create: bool = False, writable: bool = True, private: bool = False) -> int:
        if create and writable and not os.path.exists(path):
            self.before("create", path)
        return super().open_file(path, create=create, writable=writable, private=private)

    def pwrite(self, fd, data, position):
        self.before("pwrite", None)
        super().pwrite(fd, data, position)

    def pwritev(self, fd, buffers, position):
        self.before("pwrite", None)
        super().pwritev(fd, buffers, position)

    def truncate(self, fd, size):
        self.before("truncate", None)
        super().truncate(fd, size)

    def allocate(self, fd, offset, length):
        self.before("allocate", None)
        super().allocate(fd, offset, length)

    def fsync(self, fd):
        self.before("fsync", None)
        super().fsync(fd)

    def msync(self, mapping):
        self.before("msync", None)
        super().msync(mapping)

    def fsync_dir(self, path):
        self.before("fsync_dir", path)
        super().fsync_dir(path)

    def rename(self, source, target):
        self.before("rename", source)
        super().rename(source, target)

    def remove(self, path):
        self.before("remove", path)
        super().remove(path)

    def make_dirs(self, path):
        if not os.path.isdir(path):
            self.before("mkdir", path)
        super().make_dirs(path)

    def remove_dir(self, path):
        self.before("remove_dir", path)
        super().remove_dir(path)

    def set_mtime_ms(self, path, mtime_ms):
        self.before("set_mtime", path)
        super().set_mtime_ms(path, mtime_ms)


class FaultyFileSystem(OperationHookFileSystem):
    """Raises ``OSError(errno_code)`` at the ``fail_at``-th call (1-based) of the operations named
    in ``operations`` (e.g. {"pwrite", "fsync"}; see ``OperationHookFileSystem``, plus ``open_file``
    for any open), once or, with ``persistent``, from then on."""

    def __init__(self, operations: set[str], fail_at: int, errno_code: int = errno.EIO,
                 persistent: bool = False) -> None:
        self.operations = operations
        self.fail_at = fail_at
        self.errno_code = errno_code
        self.persistent = persistent
        self.calls = 0
        self.failures = 0

    def _maybe_fail(self, operation: str) -> None:
        if operation not in self.operations:
            return
        self.calls += 1
        if self.calls == self.fail_at or (self.persistent and self.calls > self.fail_at):
            self.failures += 1
            raise OSError(self.errno_code, f"injected {errno.errorcode.get(self.errno_code, self.errno_code)} "
                                           f"in {operation}")

    def before(self, operation: str, path: str | None) -> None:
        self._maybe_fail(operation)

    def open_file(self, path, *, create=False, writable=True, private=False):
        self._maybe_fail("open_file")
        return super().open_file(path, create=create, writable=writable, private=private)


class RecordingFileSystem(FileSystem):
    """A real file system, rooted at ``root`` (an empty directory at the start), that appends every
    operation a power loss could keep or undo to ``operations``, in order, as tuples:

    - ``("mkdir", dir, name, dir_id)``, ``("create", dir, name, ino)``: a new entry in directory ``dir``;
    - ``("rename", dir, source_name, target_name)``, ``("remove", dir, name)``, ``("remove_dir", dir, name)``;
    - ``("fsync_dir", dir)``: the entries of ``dir`` are durable;
    - ``("write", ino, position, data)``, ``("truncate", ino, size)``: file contents;
    - ``("fsync", ino, snapshot)``: the contents of file ``ino`` are durable; ``snapshot`` is None, or
      for a memory-mapped file (an index) its whole content read at that moment: writes through a
      mapping bypass the seam, so they count as made at their msync/fsync (unsynced ones are lost);
    - ``("mark", payload)``: the test's own event (``mark(payload)``), e.g. an acknowledgement.

    Directories are numbered (the root is 0) and files too (``ino``): a name can change, the
    identity does not. Renames move an entry within its directory (a rename across directories
    raises ``ValueError``: the engine makes none). Thread-safe; records nothing about reads."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        if os.listdir(self.root):
            raise ValueError(f"the recording starts from an empty directory: {self.root} is not empty")
        self.operations: list[tuple] = []
        self._lock = threading.RLock()
        self._dirs: dict[str, int] = {self.root: 0}  # absolute path -> dir id
        self._inos: dict[str, int] = {}  # absolute path -> ino
        self._fd_inos: dict[int, int] = {}
        self._mapped: dict[int, int] = {}  # id(mapping) -> the ino of its file
        self._mapped_inos: set[int] = set()
        self._next_id = 1

    def mark(self, payload) -> None:
        """Record a test event at this point of the sequence."""
        with self._lock:
            self.operations.append(("mark", payload))

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _parent(self, path: str) -> tuple[int, str]:
        path = os.path.abspath(path)
        parent = self._dirs.get(os.path.dirname(path))
        if parent is None:
            raise ValueError(f"{path} is outside the recorded tree {self.root}")
        return parent, os.path.basename(path)

    # --- data files ------------------------------------------------------------------------------

    def open_file(self, path: str, *, create: bool = False, writable: bool = True, private: bool = False) -> int:
        path = os.path.abspath(path)
        with self._lock:
            existed = os.path.exists(path)
            fd = super().open_file(path, create=create, writable=writable, private=private)
            if not existed:
                parent, name = self._parent(path)
                self._inos[path] = ino = self._new_id()
                self.operations.append(("create", parent, name, ino))
            self._fd_inos[fd] = self._inos[path]
            return fd

    def close(self, fd: int) -> None:
        with self._lock:
            self._fd_inos.pop(fd, None)
            super().close(fd)

    # Descriptors this seam did not open (the store lock's, from ``try_lock``) are not recorded: the
    # lock file holds the owner's pid for messages, nothing a recovery reads.

    def pwrite(self, fd: int, data, position: int) -> None:
        with self._lock:
            super().pwrite(fd, data, position)
            if fd in self._fd_inos:
                self.operations.append(("write", self._fd_inos[fd], position, bytes(data)))

    def pwritev(self, fd: int, buffers: Sequence[bytes | bytearray | memoryview], position: int) -> None:
        with self._lock:
            super().pwritev(fd, buffers, position)
            if fd in self._fd_inos:
                self.operations.append(("write", self._fd_inos[fd], position, b"".join(bytes(b) for b in buffers)))

    def truncate(self, fd: int, size: int) -> None:
        with self._lock:
            super().truncate(fd, size)
            if fd in self._fd_inos:
                self.operations.append(("truncate", self._fd_inos[fd], size))

    def _sync(self, fd: int) -> None:
        ino = self._fd_inos.get(fd)
        if ino is None:
            return
        snapshot = os.pread(fd, os.fstat(fd).st_size, 0) if ino in self._mapped_inos else None
        self.operations.append(("fsync", ino, snapshot))

    def fsync(self, fd: int) -> None:
        with self._lock:
            super().fsync(fd)
            self._sync(fd)

    def map_file(self, fd: int, length: int, *, writable: bool):
        with self._lock:
            mapping = super().map_file(fd, length, writable=writable)
            if writable:
                # The engine may close ``fd`` once mapped (the number may then name another file).
                self._mapped[id(mapping)] = self._fd_inos[fd]
                self._mapped_inos.add(self._fd_inos[fd])
            return mapping

    def msync(self, mapping) -> None:
        with self._lock:
            super().msync(mapping)
            # The mapping covers the whole file (a new length is mapped again): its bytes are the file's.
            self.operations.append(("fsync", self._mapped[id(mapping)], bytes(mapping)))

    # --- namespace -------------------------------------------------------------------------------

    def make_dirs(self, path: str) -> None:
        path = os.path.abspath(path)
        with self._lock:
            if os.path.isdir(path):
                return
            self.make_dirs(os.path.dirname(path))
            parent, name = self._parent(path)
            os.mkdir(path, 0o755)
            self._dirs[path] = dir_id = self._new_id()
            self.operations.append(("mkdir", parent, name, dir_id))
            self.fsync_dir(os.path.dirname(path))

    def fsync_dir(self, path: str) -> None:
        with self._lock:
            super().fsync_dir(path)
            self.operations.append(("fsync_dir", self._dirs[os.path.abspath(path)]))

    def rename(self, source: str, target: str) -> None:
        source, target = os.path.abspath(source), os.path.abspath(target)
        with self._lock:
            parent, source_name = self._parent(source)
            if os.path.dirname(source) != os.path.dirname(target):
                raise ValueError(f"a rename across directories is not recorded: {source} -> {target}")
            super().rename(source, target)
            self.operations.append(("rename", parent, source_name, os.path.basename(target)))
            for table in (self._inos, self._dirs):
                moved = {path: value for path, value in table.items()
                         if path == source or path.startswith(source + os.sep)}
                for path, value in moved.items():
                    del table[path]
                    table[target + path[len(source):]] = value

    def remove(self, path: str) -> None:
        path = os.path.abspath(path)
        with self._lock:
            parent, name = self._parent(path)
            super().remove(path)
            self._inos.pop(path, None)
            self.operations.append(("remove", parent, name))

    def remove_dir(self, path: str) -> None:
        path = os.path.abspath(path)
        with self._lock:
            parent, name = self._parent(path)
            super().remove_dir(path)
            self._dirs.pop(path, None)
            self.operations.append(("remove_dir", parent, name))
