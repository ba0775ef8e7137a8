"""The data dirs of a ``LogManager``: opening and locking them, loading their partitions in parallel,
their checkpoints, offline dirs, closing them cleanly, and their status.

A mixin of ``LogManager`` (kept apart so each module stays readable). What it owns:

- **Opening**: each dir is created if missing and locked (``.lock``, an exclusive ``flock`` naming
  the holder's pid). Its clean-shutdown marker is taken (removed, so a crash while open counts as
  unclean) and its recovery-point and log-start-offset checkpoints read; a damaged checkpoint is
  treated as absent, which means a full recovery of that dir, never trusted offsets.
- **Loading** (Kafka's ``loadLogs``): every dir's partitions are opened by a pool of
  ``num.recovery.threads.per.data.dir`` threads of its own, all dirs at once. After an unclean
  shutdown each log re-verifies only its segments from its recovery point on.
- **Offline dirs**: an I/O error while opening or loading a dir takes that dir offline, not the
  store: its partitions refuse reads and writes with ``OfflineDirError`` naming the dir and the
  cause, new partitions go to the other dirs, and the dir is left unclean for the next open. Only
  when every dir fails does the open fail.
- **Closing**: every log is flushed and closed (a pool per dir again); a dir gets its checkpoints
  and its clean-shutdown marker only when all its logs closed cleanly.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..log.checkpoint import (LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile,
                         take_clean_shutdown_marker, write_clean_shutdown_marker)
from ..errors import CorruptCheckpointError, LockedError, LogStoreError, OfflineDirError, StorageError
from ..log.log import Log
from .topics import DELETE_DIR_SUFFIX, DELETING, STAGING_DIR, parse_partition_dir_name, partition_dir_name

if TYPE_CHECKING:
    from ..clock import Clock
    from ..config import LogConfig, ManagerConfig
    from ..fs import FileSystem
    from .topics import TopicsFile

logger = logging.getLogger("logstore.manager")

LOCK_FILE = ".lock"


@dataclass(frozen=True)
class DirStatus:
    """One data dir as ``LogManager.status()`` reports it."""

    path: str
    online: bool
    offline_reason: str | None
    partitions: int
    size_bytes: int
    clean_shutdown: bool  # whether the previous session ended with a clean shutdown
    recovery_points: dict[tuple[str, int], int]
    log_end_offsets: dict[tuple[str, int], int]


class ManagerDirs:
    """Opening, loading, checkpointing and closing the data dirs of a ``LogManager``."""

    # Provided by LogManager.
    log_dirs: list[str]
    read_only: bool
    manager_config: ManagerConfig
    problems: list[str]
    missing_partitions: list[tuple[str, int]]
    _fs: FileSystem
    _clock: Clock
    _topics: TopicsFile
    _logs: dict[tuple[str, int], Log]
    _log_dir_of: dict[tuple[str, int], str]
    _locks: dict[str, int]
    _clean_shutdown: dict[str, bool]
    _live_dirs: list[str]
    offline_dirs: dict[str, str]
    topic_config: Callable[[str], LogConfig]
    _adopt_log: Callable[[Log], None]

    # --- opening ---------------------------------------------------------------------------------

    def _open_dirs(self) -> None:
        for dir_path in self.log_dirs:
            if self.read_only:
                if not self._fs.is_dir(dir_path):
                    raise StorageError(f"data dir {dir_path} does not exist")
                # Only reported by status(): a read-only view recovers nothing either way.
                self._clean_shutdown[dir_path] = take_clean_shutdown_marker(self._fs, dir_path, remove=False)
                self._live_dirs.append(dir_path)
                continue
            try:
                self._fs.make_dirs(dir_path)
                self._take_lock(dir_path)
                self._clean_shutdown[dir_path] = take_clean_shutdown_marker(self._fs, dir_path, remove=True)
            except OSError as exc:
                self._mark_offline(dir_path, f"cannot open data dir {dir_path}: {exc.strerror or exc}")
                continue
            self._live_dirs.append(dir_path)
        if not self._live_dirs:
            raise StorageError("no data dir could be opened: " + "; ".join(self.offline_dirs.values()))

    def _take_lock(self, dir_path: str) -> None:
        path = os.path.join(dir_path, LOCK_FILE)
        fd = self._fs.try_lock(path)
        if fd is None:
            holder = ""
            try:
                pid = self._fs.read_file(path).decode().strip()
                holder = f" by process {pid}" if pid.isdigit() else ""
            except (OSError, UnicodeDecodeError):
                pass  # the pid is only a courtesy for the message
            raise LockedError(f"data dir {dir_path} is locked{holder}: another process is using this store "
                              "(read-only commands still work)")
        self._locks[dir_path] = fd
        self._fs.truncate(fd, 0)
        self._fs.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    def _read_checkpoint(self, dir_path: str, name: str) -> dict[tuple[str, int], int]:
        try:
            return OffsetCheckpointFile(self._fs, os.path.join(dir_path, name)).read()
        except CorruptCheckpointError as exc:
            self.problems.append(f"{exc}; treated as absent")
            logger.warning("%s; treated as absent", exc)
            return {}

    # --- loading ---------------------------------------------------------------------------------

    def _load_logs(self) -> None:
        """Open every partition of every live dir: one pool of recovery threads per dir, all dirs
        at once. An ``OSError`` in a dir takes that dir offline; any other error fails the open."""
        pools: list[tuple[str, ThreadPoolExecutor, list]] = []
        try:
            for dir_path in list(self._live_dirs):
                try:
                    jobs = self._plan_dir(dir_path)
                except OSError as exc:
                    self._mark_offline(dir_path, f"cannot read data dir {dir_path}: {exc.strerror or exc}")
                    continue
                pool = ThreadPoolExecutor(self.manager_config.recovery_threads_per_data_dir,
                                          thread_name_prefix=f"log-recovery-{os.path.basename(dir_path)}")
                pools.append((dir_path, pool, [(key, pool.submit(self._open_log, *job)) for key, job in jobs]))
            for dir_path, pool, futures in pools:
                for key, future in futures:
                    try:
                        log = future.result()
                        if dir_path in self.offline_dirs:  # another partition of this dir failed
                            log.close_handlers()
                            continue
                        self._logs[key] = log
                    except OSError as exc:
                        self._mark_offline(dir_path, f"loading {partition_dir_name(*key)} in {dir_path} failed: "
                                                     f"{exc.strerror or exc}")
                    except StorageError as exc:
                        if not isinstance(exc.__cause__, OSError):
                            raise
                        self._mark_offline(dir_path, f"loading {partition_dir_name(*key)} failed: {exc}")
        finally:
            for _, pool, _ in pools:
                pool.shutdown(wait=True)
        if not self._live_dirs:
            raise StorageError("no data dir could be loaded: " + "; ".join(self.offline_dirs.values()))
        for name, meta in self._topics.topics.items():
            if meta.state != "ready":
                continue
            for partition in range(meta.partitions):
                key = (name, partition)
                if self._load_only is not None and key not in self._load_only:
                    continue
                # Not loaded: missing, unless it is (or, found in no dir, may be) on an offline dir.
                dir_path = self._log_dir_of.get(key)
                if key not in self._logs and dir_path not in self.offline_dirs and (dir_path or not self.offline_dirs):
                    self.missing_partitions.append(key)
                    self.problems.append(f"partition {partition_dir_name(name, partition)} is missing from the "
                                         f"data dirs {self.log_dirs}: was a data dir left out?")

    def _plan_dir(self, dir_path: str) -> list[tuple[tuple[str, int], tuple]]:
        """The partitions of one dir to open, as ``(key, _open_log arguments)``."""
        problems_before = len(self.problems)
        recovery_points = self._read_checkpoint(dir_path, RECOVERY_POINT_CHECKPOINT)
        if len(self.problems) > problems_before and not self.read_only:
            # A damaged recovery-point checkpoint is not trusted, and neither is the clean marker
            # beside it: recover the whole dir (every recovery point is 0 now).
            self._clean_shutdown[dir_path] = False
        start_offsets = self._read_checkpoint(dir_path, LOG_START_OFFSET_CHECKPOINT)
        jobs = []
        for name in self._fs.list_dir(dir_path):
            path = os.path.join(dir_path, name)
            if name == STAGING_DIR or not self._fs.is_dir(path):
                continue  # staged records of writers (logstore.spark.sink) are theirs, not a partition
            if name.endswith(DELETE_DIR_SUFFIX):
                if not self.read_only:
                    self._remove_tree(path)
                continue
            parsed = parse_partition_dir_name(name)
            if parsed is not None and self._load_only is not None and parsed not in self._load_only:
                continue
            meta = self._topics.topics.get(parsed[0]) if parsed else None
            if parsed is None or meta is None or parsed[1] >= meta.partitions:
                self.problems.append(f"{path} is not a partition of any known topic; left alone")
                continue
            if parsed in self._log_dir_of:
                raise StorageError(f"partition {name} exists in two data dirs: "
                                   f"{self._log_dir_of[parsed]} and {dir_path}")
            self._log_dir_of[parsed] = dir_path
            if meta.state == DELETING:
                continue
            jobs.append((parsed, (parsed, path, recovery_points.get(parsed, 0), start_offsets.get(parsed, 0),
                                  self._clean_shutdown[dir_path])))
        return jobs

    def _open_log(self, topic_partition: tuple[str, int], path: str, recovery_point: int,
                  log_start_offset: int, clean_shutdown: bool) -> Log:
        log = Log(path, self.topic_config(topic_partition[0]), fs=self._fs, clock=self._clock,
                  recovery_point=recovery_point, log_start_offset=log_start_offset,
                  clean_shutdown=clean_shutdown, read_only=self.read_only,
                  topic=topic_partition[0], partition=topic_partition[1])
        self.problems.extend(log.load_problems)  # list.extend is atomic: safe from the pool's threads
        self._adopt_log(log)
        return log

    # --- offline dirs ----------------------------------------------------------------------------

    def _mark_offline(self, dir_path: str, reason: str) -> None:
        """Take ``dir_path`` offline: its logs are closed without writing, it leaves the live dirs,
        its lock is released, and it stays unclean (the next open recovers it)."""
        if dir_path in self.offline_dirs:
            return
        logger.error("data dir %s is offline: %s", dir_path, reason)
        self.offline_dirs[dir_path] = reason
        self.problems.append(f"data dir {dir_path} is offline: {reason}")
        if dir_path in self._live_dirs:
            self._live_dirs.remove(dir_path)
        for key in [key for key, path in self._log_dir_of.items() if path == dir_path]:
            log = self._logs.pop(key, None)
            if log is not None:
                log.close_handlers()
        fd = self._locks.pop(dir_path, None)
        if fd is not None:
            try:
                self._fs.unlock(fd)
            except OSError:
                logger.warning("could not release the lock of offline dir %s", dir_path)

    def _check_dir_online(self, topic: str, partition: int) -> None:
        dir_path = self._log_dir_of.get((topic, partition))
        if dir_path in self.offline_dirs:
            raise OfflineDirError(f"partition {partition_dir_name(topic, partition)} is on data dir {dir_path}, "
                                  f"which is offline ({self.offline_dirs[dir_path]})")
        if dir_path is None and self.offline_dirs:  # not found in any dir that could be read
            offline = "; ".join(f"{path} ({reason})" for path, reason in self.offline_dirs.items())
            raise OfflineDirError(f"partition {partition_dir_name(topic, partition)} is in no online data dir; "
                                  f"it may be on an offline one: {offline}")

    # --- checkpoints -----------------------------------------------------------------------------

    def _write_checkpoints(self, dir_path: str, which: tuple[str, ...] = (RECOVERY_POINT_CHECKPOINT,
                                                                         LOG_START_OFFSET_CHECKPOINT)) -> None:
        logs = [(key, log) for key, log in list(self._logs.items()) if self._log_dir_of.get(key) == dir_path]
        if RECOVERY_POINT_CHECKPOINT in which:
            OffsetCheckpointFile(self._fs, os.path.join(dir_path, RECOVERY_POINT_CHECKPOINT)).write(
                {key: log.recovery_point for key, log in logs})
        if LOG_START_OFFSET_CHECKPOINT in which:
            OffsetCheckpointFile(self._fs, os.path.join(dir_path, LOG_START_OFFSET_CHECKPOINT)).write(
                {key: log.log_start_offset for key, log in logs if log.log_start_offset > log.segments[0].base_offset})

    def checkpoint(self, which: tuple[str, ...] = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT)) -> None:
        """Write every live dir's recovery-point and log-start-offset checkpoints now. A write
        error takes that dir offline (and is raised as ``StorageError`` after the others)."""
        self._check_writable()
        failures = []
        for dir_path in list(self._live_dirs):
            try:
                self._write_checkpoints(dir_path, which)
            except OSError as exc:
                self._mark_offline(dir_path, f"writing checkpoints failed: {exc.strerror or exc}")
                failures.append(f"{dir_path}: {exc}")
        if failures:
            raise StorageError("writing checkpoints failed: " + "; ".join(failures))

    def _on_checkpoint_needed(self, log: Log) -> None:
        # Persist at once: a crash must not bring deleted records back, nor leave a recovery point
        # above data that was truncated and written again.
        dir_path = self._log_dir_of[(log.topic, log.partition)]
        try:
            self._write_checkpoints(dir_path)
        except OSError as exc:
            raise StorageError(f"writing the checkpoints of {log.name} failed: {exc}") from exc

    # --- closing ---------------------------------------------------------------------------------

    def _close_logs(self, mark_clean: bool) -> list[str]:
        """Close every log (a pool per dir), then write each healthy dir's checkpoints and
        clean-shutdown marker, then release the locks. Returns the failures (never raises)."""
        failures: list[str] = []
        failed_dirs: set[str] = set(self.offline_dirs)
        guard = threading.Lock()

        def close(key: tuple[str, int], log: Log) -> None:
            try:
                log.close()
            except (OSError, LogStoreError) as exc:
                with guard:
                    failures.append(f"{log.name}: {exc}")
                    failed_dirs.add(self._log_dir_of.get(key, ""))
            if log.failed:  # fail-stopped (already reported): the next open must recover its dir
                logger.warning("%s failed earlier; leaving %s unclean", log.name, self._log_dir_of.get(key))
                with guard:
                    failed_dirs.add(self._log_dir_of.get(key, ""))

        by_dir: dict[str, list] = {}
        for key, log in sorted(self._logs.items()):
            by_dir.setdefault(self._log_dir_of.get(key, ""), []).append((key, log))
        pools = [ThreadPoolExecutor(self.manager_config.recovery_threads_per_data_dir) for _ in by_dir]
        try:
            futures = [pool.submit(close, key, log) for pool, logs in zip(pools, by_dir.values()) for key, log in logs]
            for future in futures:
                future.result()
        finally:
            for pool in pools:
                pool.shutdown(wait=True)
        for dir_path in list(self._locks):
            try:
                if mark_clean and dir_path not in failed_dirs:
                    self._write_checkpoints(dir_path)
                    write_clean_shutdown_marker(self._fs, dir_path, self._clock.time_ms())
            except OSError as exc:
                failures.append(f"{dir_path}: {exc}")
            finally:
                self._fs.unlock(self._locks.pop(dir_path))
        return failures

    # --- status ----------------------------------------------------------------------------------

    def _read_checkpoint_quietly(self, dir_path: str) -> dict[tuple[str, int], int]:
        try:
            return OffsetCheckpointFile(self._fs, os.path.join(dir_path, RECOVERY_POINT_CHECKPOINT)).read()
        except (OSError, CorruptCheckpointError):
            return {}

    def status(self) -> list[DirStatus]:
        """Per data dir: online or offline (and why), partitions, bytes, recovery points and log end
        offsets, and whether the previous session shut down cleanly."""
        result = []
        for dir_path in self.log_dirs:
            keys = sorted(key for key, path in self._log_dir_of.items() if path == dir_path)
            logs = {key: self._logs[key] for key in keys if key in self._logs}
            if self.read_only:  # a view has no recovery point of its own: show what the writer wrote
                recovery_points = {key: offset for key, offset in self._read_checkpoint_quietly(dir_path).items()
                                   if key in logs}
            else:
                recovery_points = {key: log.recovery_point for key, log in logs.items()}
            result.append(DirStatus(
                dir_path, dir_path not in self.offline_dirs, self.offline_dirs.get(dir_path), len(keys),
                sum(log.size_bytes for log in logs.values()), self._clean_shutdown.get(dir_path, False),
                recovery_points, {key: log.log_end_offset for key, log in logs.items()}))
        return result
