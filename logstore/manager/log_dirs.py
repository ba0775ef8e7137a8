"""``LogDirs``: the data dirs of a store and the partitions in them: opening and locking the dirs,
loading their partitions in parallel, placing new partitions, their checkpoints, offline dirs,
closing them cleanly, and their status.

A ``LogManager`` holds one. It owns the open logs (``logs``) and which dir holds each partition
(``dir_of``); the manager owns the topics and asks it for logs. What it does:

- **Opening**: each dir is created if missing and locked (``.lock``, an exclusive ``flock`` naming
  the holder's pid). Its clean-shutdown marker is taken (removed, so a crash while open counts as
  unclean; a damaged marker counts as unclean, and is reported) and its recovery-point and
  log-start-offset checkpoints read. Each checkpoint holds two checksummed copies, so one damaged
  copy costs nothing. A recovery-point checkpoint with no intact copy means a full recovery of that
  dir (reported). A log-start-offset checkpoint with no intact copy is reported in ``problems`` and,
  by a writer, kept aside as ``<name>.<ms>.damaged`` (which ``logstore check`` reports until it is
  removed): the offsets it held are lost, so records removed by ``delete_records`` may be back, and
  that must never become permanent without a word.
- **A second home for log start offsets**: while a partition's log start offset is above its first
  segment's base offset (only ``delete_records`` and truncation make it so), its directory also
  holds ``log-start-offset`` (same format, one entry), written *before* the dir's checkpoint and
  removed when the start falls back to the base. An open takes the larger of the intact values, so
  losing either file (or a crash between the two writes) never brings deleted records back, and
  reports when they disagree or one is damaged or missing.
- **Loading** (Kafka's ``loadLogs``): every dir's partitions are opened by a pool of
  ``num.recovery.threads.per.data.dir`` threads of its own, all dirs at once. After an unclean
  shutdown each log re-verifies only its segments from its recovery point on.
- **Offline dirs**: an I/O error while opening or loading a dir, or writing its checkpoints, takes
  that dir offline, not the store: its partitions refuse reads and writes with ``OfflineDirError``
  naming the dir and the cause, new partitions go to the other dirs, and the dir is left unclean for
  the next open. Only when every dir fails does the open fail. A resource shortage
  (``errors.is_resource_shortage``: out of descriptors or memory) is not the dir's fault and never
  takes it offline: a checkpoint fails (``ResourceShortageError``) and is written at its next run,
  and an open fails as a whole, naming the shortage.
- **Placing**: a new partition goes to the live dir holding the fewest partitions; a deleted topic's
  directories are renamed ``-delete`` (durably) and then removed. An empty partition directory beyond
  its topic's partition count (a ``create_partitions`` interrupted before the metadata recorded the
  new count) is removed by a writable open, and reported; one holding records is left alone.
- **Damaged partitions**: a log whose loader found damage no crash could leave (``Log.damage``) is
  kept apart (``damaged``), as Kafka takes a log offline: its files stay as found, it refuses reads
  and writes, the other partitions work, and its checkpointed offsets are written back unchanged
  until ``repair`` cuts it and it joins the other logs.
- **Closing**: every log is flushed and closed (a pool per dir again); a dir gets its checkpoints
  and its clean-shutdown marker only when all its logs closed cleanly (and no partition found
  damaged by a recovery remains: its next open must find that damage the same way). A dir whose
  logs and topics did not change since a clean open gets back the very marker it had (same bytes,
  same ``shutdown_ms``): a writable command that failed leaves no trace.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Collection, Iterator

from ..errors import (CorruptCheckpointError, LockedError, LogStoreError, OfflineDirError, ResourceShortageError,
                      StorageError, is_resource_shortage)
from ..log.checkpoint import (LOG_START_OFFSET_CHECKPOINT, PARTITION_LOG_START_OFFSET, RECOVERY_POINT_CHECKPOINT,
                              OffsetCheckpointFile,
                              take_clean_shutdown_marker, write_clean_shutdown_marker)
from ..log.damage import RepairPlan
from ..log.log import Log
from .topics import (DELETE_DIR_SUFFIX, DELETING, STAGING_DIR, deleted_dir_name, parse_partition_dir_name,
                     partition_dir_name)

if TYPE_CHECKING:
    from ..clock import Clock
    from ..config import LogConfig, ManagerConfig
    from ..fs import FileSystem
    from .topics import TopicsFile

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The cyclic garbage collector off while a store loads its partitions: every log adds some
    thirty long-lived objects and nothing loaded is garbage, yet each full collection walks them all
    (a quarter of the CPU of opening 5,000 partitions). Reference counting still frees what the
    loading drops; the collector is back on (if it was) when the load ends, either way."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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
    damaged: dict[tuple[str, int], str]  # damaged partitions: what is wrong (see LogDirs.damaged)


class LogDirs:
    """The data dirs ``paths`` of a store, and the partitions in them.

    ``topic_config(topic)`` gives the config a partition opens with; ``adopt_log(log)`` connects a
    newly opened log to the store's services. ``problems`` is the store's list of what it found
    wrong while opening (appended to, never replaced). ``load_only`` (read-only views): only those
    partitions are loaded."""

    def __init__(self, paths: list[str], *, read_only: bool, fs: FileSystem, clock: Clock, config: ManagerConfig,
                 topic_config: Callable[[str], LogConfig], adopt_log: Callable[[Log], None], problems: list[str],
                 load_only: Collection[tuple[str, int]] | None = None) -> None:
        self.paths = paths
        self.read_only = read_only
        self._fs = fs
        self._clock = clock
        self._config = config
        self._topic_config = topic_config
        self._adopt_log = adopt_log
        self.problems = problems
        self._load_only = None if load_only is None else frozenset(load_only)
        self.live: list[str] = []  # the dirs online, in the order given
        self.offline: dict[str, str] = {}  # dir -> why it is offline
        self.logs: dict[tuple[str, int], Log] = {}
        self.damaged: dict[tuple[str, int], Log] = {}  # logs with Log.damage set: kept apart until repaired
        self.dir_of: dict[tuple[str, int], str] = {}
        self.missing: list[tuple[str, int]] = []  # partitions of known topics found in no dir
        self.clean_shutdown: dict[str, bool] = {}  # whether the previous session ended cleanly
        self._markers: dict[str, bytes] = {}  # the intact clean-shutdown marker found at open, per dir
        self._opened_state: dict[str, tuple] = {}  # per dir, its state when the open finished
        self._locks: dict[str, int] = {}
        # What each partition's own log-start-offset file holds (None: no file; -1: unknown, so the
        # next checkpoint writes or removes it), and the dir checkpoint's entry until the log loads.
        self._partition_starts: dict[tuple[str, int], int | None] = {}
        self._dir_starts: dict[tuple[str, int], int | None] = {}

    # --- opening ---------------------------------------------------------------------------------

    def open(self) -> None:
        """Create (a writer), lock and take the clean-shutdown marker of every dir. A dir that cannot
        be opened goes offline; raises ``StorageError`` when none can (then nothing is logged: the
        error says it all)."""
        failed: dict[str, str] = {}
        for dir_path in self.paths:
            if self.read_only:
                if not self._fs.is_dir(dir_path):
                    raise StorageError(self._not_a_dir(dir_path) or f"data dir {dir_path} does not exist")
                # Only reported by status(): a read-only view recovers nothing either way.
                self._take_marker(dir_path, remove=False)
                self.live.append(dir_path)
                continue
            not_a_dir = self._not_a_dir(dir_path)
            if not_a_dir is not None:
                failed[dir_path] = not_a_dir
                continue
            try:
                self._fs.make_dirs(dir_path)
                self._take_lock(dir_path)
                self._take_marker(dir_path, remove=True)
            except OSError as exc:
                if is_resource_shortage(exc):
                    raise ResourceShortageError(f"cannot open data dir {dir_path}: {exc} (raise the descriptor "
                                                "limit, ulimit -n)") from exc
                failed[dir_path] = f"cannot open data dir {dir_path}: {exc.strerror or exc}"
                continue
            self.live.append(dir_path)
        if not self.live:
            for fd in [self._locks.pop(dir_path) for dir_path in failed if dir_path in self._locks]:
                with contextlib.suppress(OSError):
                    self._fs.unlock(fd)  # the error below is what counts
            raise StorageError("no data dir could be opened: " + "; ".join(failed.values()))
        for dir_path, reason in failed.items():
            self.mark_offline(dir_path, reason)

    def _not_a_dir(self, dir_path: str) -> str | None:
        """Why ``dir_path`` cannot be a data dir though it exists (a file, say), or None."""
        if self._fs.exists(dir_path) and not self._fs.is_dir(dir_path):
            return f"data dir {dir_path} is not a directory (a file of that name exists)"
        return None

    def _take_marker(self, dir_path: str, *, remove: bool) -> None:
        marker = take_clean_shutdown_marker(self._fs, dir_path, remove=remove)
        self.clean_shutdown[dir_path] = marker.clean
        if marker.content is not None:
            self._markers[dir_path] = marker.content
        if marker.problem is not None:
            logger.warning("%s", marker.problem)
            self.problems.append(marker.problem)

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
        checkpoint = OffsetCheckpointFile(self._fs, os.path.join(dir_path, name))
        try:
            return checkpoint.read()
        except CorruptCheckpointError as exc:
            if name != LOG_START_OFFSET_CHECKPOINT:
                message = f"{exc}; treated as absent (the dir is fully recovered)"
            else:
                # The offsets below which delete_records removed records are lost: those records may
                # be readable again. Reported, and (by a writer) the file is kept aside, so the next
                # checkpoint write cannot make the guess permanent without a word.
                message = (f"{exc}: the log start offsets of this dir are lost, so records removed by "
                           "delete_records may be readable again")
                if not self.read_only:
                    message += f"; the damaged file is kept as {checkpoint.set_aside(self._clock.time_ms())}"
            self.problems.append(message)
            logger.warning("%s", message)
            return {}

    # --- the partitions' own log-start-offset files ----------------------------------------------

    def _read_partition_start(self, key: tuple[str, int], path: str) -> int:
        """The value in ``<partition>/log-start-offset`` (0 when absent or damaged: reported, and a
        writer rewrites it at its next checkpoint)."""
        checkpoint = OffsetCheckpointFile(self._fs, os.path.join(path, PARTITION_LOG_START_OFFSET))
        try:
            contents = checkpoint.read_contents()
        except CorruptCheckpointError as exc:
            self._partition_starts[key] = -1  # unknown: rewritten (or removed) at the next checkpoint
            message = (f"{exc}: the partition's own copy of its log start offset is lost; the data dir's "
                       "log-start-offset-checkpoint is used")
            self.problems.append(message)
            logger.warning("%s", message)
            return 0
        value = None if contents is None else contents.entries.get(key)
        if contents is not None and (value is None or len(contents.entries) != 1):
            value = None
            self._partition_starts[key] = -1
            self.problems.append(f"{checkpoint.path} does not hold the log start offset of this partition; ignored")
            logger.warning("%s", self.problems[-1])
        else:
            self._partition_starts[key] = value
        return value or 0

    def _compare_starts(self, key: tuple[str, int], log: Log) -> None:
        """Report when the two homes of a loaded log's start offset disagree (both read as at least
        the first segment's base offset, since below it an entry means nothing)."""
        if not log.segments:
            return
        base = log.segments[0].base_offset
        in_dir = self._dir_starts.pop(key, None)
        own = self._partition_starts.get(key)
        if in_dir == -1:
            return
        if own == -1:
            return  # damaged: reported when read
        in_dir, own = max(in_dir or 0, base), max(own or 0, base)
        if own != in_dir:  # a missing partition file reads as the base: disagrees with a start above it
            message = (f"{log.name}: the log start offset in {PARTITION_LOG_START_OFFSET} ({own}) and in the data "
                       f"dir's {LOG_START_OFFSET_CHECKPOINT} ({in_dir}) disagree; the larger, "
                       f"{max(own, in_dir)}, is used (a crash between their writes, or a damaged or lost file)")
            self.problems.append(message)
            logger.warning("%s", message)

    def _write_partition_starts(self, logs: list[tuple[tuple[str, int], Log]]) -> None:
        """Write (or remove) the ``log-start-offset`` file of every log whose value changed. Damaged
        logs keep theirs as found."""
        for key, log in logs:
            if log.damage is not None or not log.segments:
                continue
            wanted = log.log_start_offset if log.log_start_offset > log.segments[0].base_offset else None
            if self._partition_starts.get(key, -1) == wanted:
                continue
            checkpoint = OffsetCheckpointFile(self._fs, os.path.join(log.dir_path, PARTITION_LOG_START_OFFSET))
            if wanted is None:
                checkpoint.remove()
            else:
                checkpoint.write({key: wanted})
            self._partition_starts[key] = wanted

    # --- loading ---------------------------------------------------------------------------------

    def load(self, topics: TopicsFile) -> None:
        """Open every partition of ``topics`` in every live dir: one pool of recovery threads per
        dir, all dirs at once. An ``OSError`` in a dir takes that dir offline; any other error fails
        the open."""
        with _no_cycle_collection():
            self._load(topics)

    def _load(self, topics: TopicsFile) -> None:
        pools: list[tuple[str, ThreadPoolExecutor, list]] = []
        try:
            for dir_path in list(self.live):
                try:
                    jobs = self._plan_dir(dir_path, topics)
                except OSError as exc:
                    if is_resource_shortage(exc):
                        raise ResourceShortageError(f"cannot read data dir {dir_path}: {exc}") from exc
                    self.mark_offline(dir_path, f"cannot read data dir {dir_path}: {exc.strerror or exc}")
                    continue
                pool = ThreadPoolExecutor(self._config.recovery_threads_per_data_dir,
                                          thread_name_prefix=f"log-recovery-{os.path.basename(dir_path)}")
                pools.append((dir_path, pool, [(key, pool.submit(self.open_log, *job)) for key, job in jobs]))
            for dir_path, pool, futures in pools:
                for key, future in futures:
                    try:
                        log = future.result()
                        if dir_path in self.offline:  # another partition of this dir failed
                            log.close_handlers()
                            continue
                        (self.logs if log.damage is None else self.damaged)[key] = log
                        self._compare_starts(key, log)
                    except OSError as exc:
                        if is_resource_shortage(exc):
                            raise ResourceShortageError(f"loading {partition_dir_name(*key)} in {dir_path} failed: "
                                                        f"{exc} (raise the descriptor limit, ulimit -n)") from exc
                        self.mark_offline(dir_path, f"loading {partition_dir_name(*key)} in {dir_path} failed: "
                                                     f"{exc.strerror or exc}")
                    except StorageError as exc:
                        if not isinstance(exc.__cause__, OSError) or is_resource_shortage(exc):
                            raise
                        self.mark_offline(dir_path, f"loading {partition_dir_name(*key)} failed: {exc}")
        finally:
            for _, pool, _ in pools:
                pool.shutdown(wait=True)
        if not self.live:
            raise StorageError("no data dir could be loaded: " + "; ".join(self.offline.values()))
        for name, meta in topics.topics.items():
            if meta.state != "ready":
                continue
            for partition in range(meta.partitions):
                key = (name, partition)
                if self._load_only is not None and key not in self._load_only:
                    continue
                # Not loaded: missing, unless it is (or, found in no dir, may be) on an offline dir.
                dir_path = self.dir_of.get(key)
                if (key not in self.logs and key not in self.damaged and dir_path not in self.offline
                        and (dir_path or not self.offline)):
                    self.missing.append(key)
                    self.problems.append(f"partition {partition_dir_name(name, partition)} is missing from the "
                                         f"data dirs {self.paths}: was a data dir left out?")

    def _plan_dir(self, dir_path: str, topics: TopicsFile) -> list[tuple[tuple[str, int], tuple]]:
        """The partitions of one dir to open, as ``(key, _open_log arguments)``."""
        problems_before = len(self.problems)
        recovery_points = self._read_checkpoint(dir_path, RECOVERY_POINT_CHECKPOINT)
        if len(self.problems) > problems_before and not self.read_only:
            # A damaged recovery-point checkpoint is not trusted, and neither is the clean marker
            # beside it: recover the whole dir (every recovery point is 0 now).
            self.clean_shutdown[dir_path] = False
        problems_before = len(self.problems)
        start_offsets = self._read_checkpoint(dir_path, LOG_START_OFFSET_CHECKPOINT)
        starts_lost = len(self.problems) > problems_before  # reported already: no comparison per partition
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
            meta = topics.topics.get(parsed[0]) if parsed else None
            if parsed is not None and meta is not None and meta.state != DELETING and parsed[1] >= meta.partitions:
                self._stray_partition(path, meta.partitions)
                continue
            if parsed is None or meta is None:
                self.problems.append(f"{path} is not a partition of any known topic; left alone")
                continue
            if parsed in self.dir_of:
                raise StorageError(f"partition {name} exists in two data dirs: "
                                   f"{self.dir_of[parsed]} and {dir_path}")
            self.dir_of[parsed] = dir_path
            if meta.state == DELETING:
                continue
            start = max(start_offsets.get(parsed, 0), self._read_partition_start(parsed, path))
            self._dir_starts[parsed] = -1 if starts_lost else start_offsets.get(parsed)
            jobs.append((parsed, (parsed, path, recovery_points.get(parsed, 0), start,
                                  self.clean_shutdown[dir_path])))
        return jobs

    def _stray_partition(self, path: str, count: int) -> None:
        """A directory ``<topic>-<n>`` of a known topic with ``n`` beyond its ``count`` partitions: left
        by a ``create_partitions`` that was interrupted before the topic's metadata recorded the new
        count (never acknowledged). Empty (no record in any segment), a writer removes it; holding
        records, it is no leftover of ours, so it is left alone and reported."""
        if any(name.endswith(".log") and self._fs.path_size(os.path.join(path, name)) > 0
               for name in self._fs.list_dir(path) if self._fs.is_file(os.path.join(path, name))):
            self.problems.append(f"{path} is beyond its topic's {count} partition(s) and holds records; left alone")
            return
        if self.read_only:
            self.problems.append(f"{path} is beyond its topic's {count} partition(s) (left by an interrupted "
                                 "create_partitions); the next writable open removes it")
            return
        dir_path = os.path.dirname(path)
        doomed = os.path.join(dir_path, deleted_dir_name(*parse_partition_dir_name(os.path.basename(path))))
        self._fs.rename(path, doomed)
        self._fs.fsync_dir(dir_path)
        self._remove_tree(doomed)
        message = (f"removed {path}: an empty partition beyond its topic's {count} partition(s), left by an "
                   "interrupted create_partitions (never acknowledged)")
        logger.warning("%s", message)
        self.problems.append(message)

    def open_log(self, topic_partition: tuple[str, int], path: str, recovery_point: int,
                 log_start_offset: int, clean_shutdown: bool) -> Log:
        """Open the log of a partition at ``path`` and connect it to the store (``adopt_log``)."""
        log = Log(path, self._topic_config(topic_partition[0]), fs=self._fs, clock=self._clock,
                  recovery_point=recovery_point, log_start_offset=log_start_offset,
                  clean_shutdown=clean_shutdown, read_only=self.read_only,
                  topic=topic_partition[0], partition=topic_partition[1])
        if log.damage is not None and clean_shutdown and self.read_only and self._marker_taken(path):
            log.close_handlers()
            return self.open_log(topic_partition, path, recovery_point, log_start_offset, False)
        self.problems.extend(log.load_problems)  # list.extend is atomic: safe from the pool's threads
        self._adopt_log(log)
        return log

    def _marker_taken(self, partition_path: str) -> bool:
        """Whether this view's clean-shutdown marker was since taken (a writer opened: no damage, its write)."""
        dir_path = os.path.dirname(partition_path)
        return take_clean_shutdown_marker(self._fs, dir_path, remove=False).content != self._markers.get(dir_path)

    def repair(self, topic_partition: tuple[str, int], dry_run: bool) -> RepairPlan:
        """``Log.repair`` of one partition (damaged or not); a repaired damaged log joins the others."""
        log = self.damaged.get(topic_partition) or self.logs[topic_partition]
        plan = log.repair(dry_run)
        if not dry_run and topic_partition in self.damaged:
            self.logs[topic_partition] = self.damaged.pop(topic_partition)
        return plan

    # --- placing partitions ----------------------------------------------------------------------

    def create_partition(self, topic_partition: tuple[str, int], *, sync: bool = False) -> Log:
        """Make and open a new, empty partition: in the dir that already holds its directory (a
        creation resumed after a crash), else in the live dir holding the fewest partitions. With
        ``sync``, the new directory's entries (its segment files) are fsynced too, so it is whole
        on disk before the topic's metadata names it (``make_dirs`` fsyncs the data dir's entry)."""
        dir_path = self.dir_of.get(topic_partition) or self._next_dir()
        path = os.path.join(dir_path, partition_dir_name(*topic_partition))
        self._fs.make_dirs(path)
        self.dir_of[topic_partition] = dir_path
        self._partition_starts.pop(topic_partition, None)  # a resumed creation may have left one
        log = self.logs[topic_partition] = self.open_log(topic_partition, path, 0, 0, True)
        if sync:
            self._fs.fsync_dir(path)
        return log

    def _next_dir(self) -> str:
        """The data dir holding the fewest partitions (the first listed on a tie)."""
        if not self.live:
            raise StorageError("no data dir is online: " + "; ".join(self.offline.values()))
        counts = {dir_path: 0 for dir_path in self.paths}
        for dir_path in self.dir_of.values():
            counts[dir_path] += 1
        return min(self.live, key=lambda dir_path: counts[dir_path])

    def delete_partition_dirs(self, topic: str) -> None:
        """Remove every directory of ``topic``'s partitions (their logs closed first): each is
        renamed ``<topic>-<partition>.<id>-delete`` durably, so a crash leaves it for the next open
        to remove, then removed."""
        for topic_partition, dir_path in list(self.dir_of.items()):
            if topic_partition[0] != topic:
                continue
            path = os.path.join(dir_path, partition_dir_name(*topic_partition))
            doomed = os.path.join(dir_path, deleted_dir_name(*topic_partition))
            self._fs.rename(path, doomed)
            self._fs.fsync_dir(dir_path)
            self._remove_tree(doomed)
            del self.dir_of[topic_partition]

    def remove_partition_dirs(self, topic: str, partitions: int | range) -> None:
        """Remove the directories of ``topic``'s partitions ``0..partitions-1`` (or those of a range)
        wherever a live dir has one (a failed creation may have made one it never recorded; their
        logs closed first), each renamed ``-delete`` durably first, as ``delete_partition_dirs`` does."""
        for partition in range(partitions) if isinstance(partitions, int) else partitions:
            self.dir_of.pop((topic, partition), None)
            for dir_path in self.live:
                path = os.path.join(dir_path, partition_dir_name(topic, partition))
                if self._fs.is_dir(path):
                    doomed = os.path.join(dir_path, deleted_dir_name(topic, partition))
                    self._fs.rename(path, doomed)
                    self._fs.fsync_dir(dir_path)
                    self._remove_tree(doomed)

    def _remove_tree(self, path: str) -> None:
        for name in self._fs.list_dir(path):
            child = os.path.join(path, name)
            if self._fs.is_dir(child):
                self._remove_tree(child)
            else:
                self._fs.remove(child)
        self._fs.remove_dir(path)
        self._fs.fsync_dir(os.path.dirname(path))

    # --- offline dirs ----------------------------------------------------------------------------

    def mark_offline(self, dir_path: str, reason: str) -> None:
        """Take ``dir_path`` offline: its logs are closed without writing, it leaves the live dirs,
        its lock is released, and it stays unclean (the next open recovers it)."""
        if dir_path in self.offline:
            return
        logger.error("data dir %s is offline: %s", dir_path, reason)
        self.offline[dir_path] = reason
        self.problems.append(f"data dir {dir_path} is offline: {reason}")
        if dir_path in self.live:
            self.live.remove(dir_path)
        for key in [key for key, path in self.dir_of.items() if path == dir_path]:
            for logs in (self.logs, self.damaged):
                log = logs.pop(key, None)
                if log is not None:
                    log.close_handlers()
        fd = self._locks.pop(dir_path, None)
        if fd is not None:
            try:
                self._fs.unlock(fd)
            except OSError:
                logger.warning("could not release the lock of offline dir %s", dir_path)

    def check_online(self, topic: str, partition: int) -> None:
        """Raise ``OfflineDirError`` when the partition is (or may be) on an offline dir."""
        dir_path = self.dir_of.get((topic, partition))
        if dir_path in self.offline:
            raise OfflineDirError(f"partition {partition_dir_name(topic, partition)} is on data dir {dir_path}, "
                                  f"which is offline ({self.offline[dir_path]})")
        if dir_path is None and self.offline:  # not found in any dir that could be read
            offline = "; ".join(f"{path} ({reason})" for path, reason in self.offline.items())
            raise OfflineDirError(f"partition {partition_dir_name(topic, partition)} is in no online data dir; "
                                  f"it may be on an offline one: {offline}")

    # --- checkpoints -----------------------------------------------------------------------------

    def _write_checkpoints(self, dir_path: str, which: tuple[str, ...] = (RECOVERY_POINT_CHECKPOINT,
                                                                         LOG_START_OFFSET_CHECKPOINT)) -> None:
        # A damaged log keeps the offsets it was loaded with (a refused log start offset too): its
        # next open must judge the same files by the same values.
        logs = [(key, log) for key, log in list(self.logs.items()) + list(self.damaged.items())
                if self.dir_of.get(key) == dir_path]
        if RECOVERY_POINT_CHECKPOINT in which:
            OffsetCheckpointFile(self._fs, os.path.join(dir_path, RECOVERY_POINT_CHECKPOINT)).write(
                {key: log.recovery_point for key, log in logs})
        if LOG_START_OFFSET_CHECKPOINT in which:
            # The partitions' own files first: a crash between the two writes leaves the new value
            # in one home, and the open takes the larger (a raised start stays raised; a lowered one
            # is lowered only after a truncation that left no record between the two values).
            self._write_partition_starts(logs)
            OffsetCheckpointFile(self._fs, os.path.join(dir_path, LOG_START_OFFSET_CHECKPOINT)).write(
                {key: log.log_start_offset for key, log in logs
                 if log.damage is not None or log.log_start_offset > log.segments[0].base_offset})

    def checkpoint(self, which: tuple[str, ...] = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT)) -> None:
        """Write every live dir's recovery-point and log-start-offset checkpoints now. A write
        error takes that dir offline (and is raised as ``StorageError`` after the others); a
        resource shortage does not (``ResourceShortageError``: the dir keeps its previous
        checkpoints, which stay valid, and the next call writes them)."""
        failures = []
        shortages = []
        for dir_path in list(self.live):
            try:
                self._write_checkpoints(dir_path, which)
            except OSError as exc:
                if is_resource_shortage(exc):
                    shortages.append(exc)
                else:
                    self.mark_offline(dir_path, f"writing checkpoints failed: {exc.strerror or exc}")
                failures.append(f"{dir_path}: {exc}")
        if failures:
            error = ResourceShortageError if len(shortages) == len(failures) else StorageError
            raise error("writing checkpoints failed: " + "; ".join(failures)) from (shortages or [None])[0]

    def checkpoint_log(self, log: Log) -> None:
        """``Log.on_checkpoint_needed``: persist the checkpoints of ``log``'s dir at once, so a crash
        cannot bring deleted records back, nor leave a recovery point above data that was truncated
        and written again."""
        dir_path = self.dir_of[(log.topic, log.partition)]
        try:
            self._write_checkpoints(dir_path)
        except OSError as exc:
            error = ResourceShortageError if is_resource_shortage(exc) else StorageError
            raise error(f"writing the checkpoints of {log.name} failed: {exc}") from exc

    # --- closing ---------------------------------------------------------------------------------

    def remember_state(self, topics_generation: int) -> None:
        """Note the state of every dir that had an intact clean-shutdown marker, once the open is
        done: if ``close`` finds it unchanged, the dir gets its old marker back."""
        self._opened_state = {dir_path: self._state(dir_path, topics_generation)
                              for dir_path in self._markers if dir_path in self.live}

    def _state(self, dir_path: str, topics_generation: int | None) -> tuple:
        """What a change to a dir's data changes: the topics' generation, and per log its start and
        end offsets and its segments' base offsets and sizes (an append, truncation, deletion,
        retention or compaction moves at least one)."""
        return (topics_generation, sorted(
            (key, log.log_start_offset, log.log_end_offset, [(segment.base_offset, segment.size_bytes)
                                                             for segment in log.segments])
            for key, log in list(self.logs.items()) if self.dir_of.get(key) == dir_path))

    def close(self, mark_clean: bool, topics_generation: int | None = None) -> list[str]:
        """Close every log (a pool per dir), then write each healthy dir's checkpoints and
        clean-shutdown marker (the one found at open when nothing changed: ``remember_state``), then
        release the locks. Returns the failures (never raises)."""
        failures: list[str] = []
        failed_dirs: set[str] = set(self.offline)
        unchanged = {dir_path for dir_path, state in self._opened_state.items()
                     if state == self._state(dir_path, topics_generation)}
        # Damage found by a recovery is found again only by a recovery: that dir stays unclean.
        unclean_dirs = {self.dir_of.get(key) for key in self.damaged
                        if not self.clean_shutdown.get(self.dir_of.get(key))}
        guard = threading.Lock()

        def close(key: tuple[str, int], log: Log) -> None:
            try:
                log.close()
            except (OSError, LogStoreError) as exc:
                with guard:
                    failures.append(f"{log.name}: {exc}")
                    failed_dirs.add(self.dir_of.get(key, ""))
            if log.failed:  # fail-stopped (already reported): the next open must recover its dir
                logger.warning("%s failed earlier; leaving %s unclean", log.name, self.dir_of.get(key))
                with guard:
                    failed_dirs.add(self.dir_of.get(key, ""))

        by_dir: dict[str, list] = {}
        for key, log in sorted([*self.logs.items(), *self.damaged.items()]):
            by_dir.setdefault(self.dir_of.get(key, ""), []).append((key, log))
        pools = [ThreadPoolExecutor(self._config.recovery_threads_per_data_dir) for _ in by_dir]
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
                    if dir_path not in unclean_dirs:
                        write_clean_shutdown_marker(self._fs, dir_path, self._clock.time_ms(),
                                                    self._markers.get(dir_path) if dir_path in unchanged else None)
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
        for dir_path in self.paths:
            keys = sorted(key for key, path in self.dir_of.items() if path == dir_path)
            logs = {key: self.logs.get(key) or self.damaged[key] for key in keys
                    if key in self.logs or key in self.damaged}
            if self.read_only:  # a view has no recovery point of its own: show what the writer wrote
                recovery_points = {key: offset for key, offset in self._read_checkpoint_quietly(dir_path).items()
                                   if key in logs}
            else:
                recovery_points = {key: log.recovery_point for key, log in logs.items()}
            result.append(DirStatus(
                dir_path, dir_path not in self.offline, self.offline.get(dir_path), len(keys),
                sum(log.size_bytes for log in logs.values()), self.clean_shutdown.get(dir_path, False),
                recovery_points, {key: log.log_end_offset for key, log in logs.items()},
                {key: log.damage.description for key, log in logs.items() if log.damage is not None}))
        return result
