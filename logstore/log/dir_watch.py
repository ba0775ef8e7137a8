"""``DirectoryWatcher``: block until something changes in one or more partition directories.

A read-only process that tails a log (``logstore read --follow``) has to wait for another process
to append to, roll or delete segment files. This module owns that wait and nothing else: it says
*that* something changed, never *what*; the caller re-reads the log to find out.

On Linux it uses inotify through ``ctypes`` on libc (stdlib only), so an idle wait sleeps in
``select`` and costs no CPU. Where inotify is missing, refused (``inotify_init1`` fails, the
watch limit is hit) or turned off with ``use_inotify=False``, it falls back to polling a cheap
signature of each directory (its own stat plus name, size and mtime of every regular file) every
``poll_interval_ms``, sleeping in between.

Semantics shared by both modes:

- Changes are remembered between waits: ``wait`` returns ``True`` at once if anything changed since
  the previous ``wait`` returned (or since the directory was added).
- ``wait`` may return ``True`` spuriously (e.g. a file rewritten with identical content, or the
  switch from inotify to polling); callers must re-check the log, which they do anyway.
- A watched directory that disappears counts as a change. With inotify the watch then dies with
  the directory: once a ``wait`` has reported that and the directory exists again, call ``add``
  again (``add`` is idempotent, so doing this routinely is safe; polling follows the path anyway).

Thread-safety: none inside. A watcher is meant to be driven by the one thread that tails the log
(``add`` between waits, then ``wait`` again); callers sharing one across threads must serialise
every call themselves. In particular ``close`` or an ``add`` that falls back to polling must never
run during a ``wait`` in another thread: either closes the inotify fd under its ``select``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import logging
import os
import select
import struct
import threading
from typing import Iterable

from ..clock import SYSTEM_CLOCK

logger = logging.getLogger(__name__)

# Values from <sys/inotify.h> (checked against glibc's header).
IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

# IN_MOVE_SELF is included because a directory renamed away is, for a path-based reader, as gone
# as a deleted one. IN_ONLYDIR makes the kernel refuse a non-directory atomically (no TOCTOU).
WATCH_MASK = (IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM | IN_CLOSE_WRITE
              | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (name follows)
_READ_SIZE = 64 * 1024


@functools.lru_cache(maxsize=1)
def _libc():
    """libc with the inotify functions typed, or None where they do not exist (non-Linux)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_init1.restype = ctypes.c_int
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_add_watch.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def _check_path(path) -> str:
    try:
        path = os.fspath(path)
    except TypeError:
        raise TypeError(f"path must be a str or os.PathLike, got {path!r}") from None
    if not isinstance(path, str):
        raise TypeError(f"path must be a str, got {path!r}")
    if not os.path.isdir(path):
        raise ValueError(f"not a directory: {path!r}")
    return os.path.realpath(path)


def _signature(path: str):
    """A cheap fingerprint of one directory: changes when a file is created, deleted, renamed,
    appended to or rewritten. None when the directory cannot be read (e.g. it was deleted)."""
    try:
        st = os.stat(path)
        files = []
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    if entry.is_file(follow_symlinks=False):
                        fst = entry.stat(follow_symlinks=False)
                        files.append((entry.name, fst.st_size, fst.st_mtime_ns))
                except FileNotFoundError:
                    continue  # deleted while listing; the directory's mtime records that
    except OSError:
        return None
    # st_ino catches a directory deleted and recreated within one poll interval.
    return st.st_ino, st.st_mtime_ns, tuple(sorted(files))



def _now_s() -> float:
    # Real time through the clock seam: these waits are for another process's writes.
    return SYSTEM_CLOCK.monotonic_ms() / 1000.0

class DirectoryWatcher:
    """Waits until something changes in any of the watched directories.

    ``paths`` are directories to watch from the start (more can be added with ``add``).
    ``poll_interval_ms`` is the period of the polling fallback; ``use_inotify=False`` forces
    polling. Use as a context manager or call ``close``. See the module docstring for semantics.
    """

    def __init__(self, paths: Iterable[str], *, poll_interval_ms: int = 100, use_inotify: bool = True) -> None:
        if isinstance(poll_interval_ms, bool) or not isinstance(poll_interval_ms, int):
            raise TypeError(f"poll_interval_ms must be an int, got {poll_interval_ms!r}")
        if poll_interval_ms <= 0:
            raise ValueError(f"poll_interval_ms must be positive, got {poll_interval_ms!r}")
        if isinstance(paths, (str, bytes)):
            # A lone string would otherwise be watched character by character.
            raise TypeError(f"paths must be an iterable of paths, not a single path: {paths!r}")
        checked = [_check_path(p) for p in paths]  # validate all before acquiring an fd
        self._poll_interval = poll_interval_ms / 1000.0
        self._closed = False
        self._pending = False  # a change seen while switching modes, reported by the next wait
        self._paths: set[str] = set()
        self._wds: dict[int, str] = {}  # inotify watch descriptor -> path
        self._baseline: dict[str, object] = {}  # polling mode: signature at the last wait
        self._sleeper = threading.Event()  # never set; its wait() is a plain sleep with a timeout
        self._fd = -1
        if use_inotify:
            self._fd = self._init_inotify()
        try:
            for path in checked:
                self.add(path)
        except BaseException:
            self.close()  # do not leak the inotify fd when a directory vanished since the check
            raise

    @staticmethod
    def _init_inotify() -> int:
        libc = _libc()
        if libc is None:
            logger.debug("inotify unavailable on this platform; polling directories instead")
            return -1
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            logger.debug("inotify_init1 failed (%s); polling directories instead", OSError(err, os.strerror(err)))
            return -1
        return fd

    @property
    def uses_inotify(self) -> bool:
        """True while changes are detected by inotify, False when polling."""
        return self._fd >= 0

    def add(self, path: str) -> None:
        """Watch one more directory. Adding a directory already watched does nothing."""
        self._check_open()
        path = _check_path(path)
        if path in self._paths:
            return
        if self._fd >= 0:
            wd = _libc().inotify_add_watch(self._fd, os.fsencode(path), WATCH_MASK)
            if wd >= 0:
                self._wds[wd] = path
                self._paths.add(path)
                return
            err = ctypes.get_errno()
            if err in (errno.ENOENT, errno.ENOTDIR):
                raise ValueError(f"not a directory: {path!r}")
            # ENOSPC (watch limit), ENOMEM, EACCES...: polling still works, it only costs more.
            logger.debug("inotify_add_watch(%r) failed (%s); polling directories instead",
                         path, OSError(err, os.strerror(err)))
            self._switch_to_polling()
        self._paths.add(path)
        self._baseline[path] = _signature(path)

    def _switch_to_polling(self) -> None:
        # Baselines first, then drain: a change in between is reported twice (harmless, spurious
        # wakeups are allowed) rather than lost.
        self._baseline = {p: _signature(p) for p in self._paths}
        if self._drain():
            self._pending = True
        os.close(self._fd)
        self._fd = -1
        self._wds.clear()

    def wait(self, timeout_ms: int) -> bool:
        """Block until a watched directory changes or ``timeout_ms`` milliseconds pass.

        Returns True when a change was seen (pending events are consumed, so the next wait
        blocks again), False on timeout. ``wait(0)`` checks without blocking.
        """
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int):
            raise TypeError(f"timeout_ms must be an int, got {timeout_ms!r}")
        if timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms!r}")
        self._check_open()
        deadline = _now_s() + timeout_ms / 1000.0
        if self._pending:
            self._pending = False
            return True
        if self._fd >= 0:
            return self._wait_inotify(deadline)
        return self._wait_polling(deadline)

    def _wait_inotify(self, deadline: float) -> bool:
        while True:
            remaining = max(0.0, deadline - _now_s())
            # poll, not select: a store's descriptor may be past FD_SETSIZE (1024) in a process
            # with many partitions open; poll retries on EINTR with the remaining time (PEP 475).
            poller = select.poll()
            poller.register(self._fd, select.POLLIN)
            ready = poller.poll(remaining * 1000)
            if ready and self._drain():
                return True
            if _now_s() >= deadline:
                return False
            # Readable but nothing to read (should not happen): go back to sleep, not spin.

    def _drain(self) -> int:
        """Read every queued event without blocking; return how many there were."""
        count = 0
        while True:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return count
            if not data:
                return count
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _cookie, name_len = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size + name_len
                count += 1
                if mask & IN_IGNORED:
                    # The watch is gone (directory deleted or unmounted): forget it so a later
                    # add() of a recreated directory installs a fresh watch.
                    path = self._wds.pop(wd, None)
                    if path is not None:
                        self._paths.discard(path)

    def _wait_polling(self, deadline: float) -> bool:
        while True:
            changed = False
            for path in self._paths:
                current = _signature(path)
                if current != self._baseline.get(path):
                    self._baseline[path] = current
                    changed = True  # keep going: update every baseline, report once
            if changed:
                return True
            remaining = deadline - _now_s()
            if remaining <= 0:
                return False
            self._sleeper.wait(min(self._poll_interval, remaining))

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("DirectoryWatcher is closed")

    def close(self) -> None:
        """Release the inotify descriptor. Calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._wds.clear()
        self._paths.clear()
        self._baseline.clear()

    def __enter__(self) -> DirectoryWatcher:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
