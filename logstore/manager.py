"""``LogManager``: the store. Topics of partitioned logs over one or more data dirs.

Opening a store for writing takes an exclusive ``flock`` on ``<dir>/.lock`` in every data dir (a second
writer fails at once, naming the holder's pid), removes each dir's clean-shutdown marker (so a crash
while open counts as unclean), reads the recovery-point and log-start-offset checkpoints (a damaged
one is treated as absent: a longer recovery, never lost data), finishes any half-done topic creation or
deletion, and loads every partition: after an unclean shutdown only segments from each log's recovery
point on are re-verified.

``close()`` flushes and closes every log, writes the checkpoints, writes the clean-shutdown marker of
each dir whose logs all closed cleanly, and releases the locks. A second ``close()`` does nothing; an
error in one log does not stop the others from closing.

A read-only open (``read_only=True``) takes no lock, changes no file and runs no recovery: it reads the
valid prefix of every log while another process may be writing.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
from typing import Any, Iterator, Mapping, Sequence

from .checkpoint import (LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile,
                         take_clean_shutdown_marker, write_clean_shutdown_marker)
from .clock import SYSTEM_CLOCK, Clock
from .config import TOPIC_KEYS, LogConfig, parse_overrides
from .errors import (CorruptCheckpointError, InvalidConfigError, LockedError, LogStoreError, ReadOnlyError, StorageError,
                     StoreClosedError, TopicExistsError, UnknownTopicOrPartitionError)
from .fs import OS_FILE_SYSTEM, FileSystem
from .log import AppendInfo, Log
from .records import Record
from .topics import (CREATING, DELETE_DIR_SUFFIX, DELETING, READY, TopicMetadata, TopicsFile, deleted_dir_name,
                     parse_partition_dir_name, partition_dir_name, partition_for_key, validate_topic_name)

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"
MAX_PARTITIONS = 10_000


@contextlib.contextmanager
def _storage_errors(doing: str) -> Iterator[None]:
    """Turn an ``OSError`` from the disk into a ``StorageError`` saying what was being done."""
    try:
        yield
    except OSError as exc:
        raise StorageError(f"{doing} failed: {exc}") from exc


class LogManager:
    """A store of topics over the data dirs ``log_dirs``; use it as a context manager.

    ``config`` takes store-wide defaults with Kafka's broker names (``log.segment.bytes``,
    ``log.retention.ms``, ...); each topic's own config overrides them."""

    def __init__(self, log_dirs: Sequence[str] | str, *, config: Mapping[str, Any] | None = None,
                 read_only: bool = False, clock: Clock | None = None, fs: FileSystem | None = None) -> None:
        if isinstance(log_dirs, (str, os.PathLike)):
            log_dirs = [log_dirs]
        if not log_dirs:
            raise ValueError("a store needs at least one data dir")
        self.log_dirs = [os.path.abspath(os.fspath(path)) for path in log_dirs]
        real = [os.path.realpath(path) for path in self.log_dirs]
        duplicates = sorted({path for path in real if real.count(path) > 1})
        if duplicates:
            raise ValueError(f"data dir listed twice: {duplicates[0]}")
        self.read_only = read_only
        self.default_config = LogConfig.from_broker_properties(config or {})
        self._clock = clock or SYSTEM_CLOCK
        self._fs = fs or OS_FILE_SYSTEM
        self._lock = threading.RLock()
        self._locks: dict[str, int] = {}
        self._logs: dict[tuple[str, int], Log] = {}
        self._log_dir_of: dict[tuple[str, int], str] = {}
        self._round_robin: dict[str, Iterator[int]] = {}
        self._round_robin_starts: dict[str, int] = {}
        self._clean_shutdown: dict[str, bool] = {}
        self.problems: list[str] = []
        self.missing_partitions: list[tuple[str, int]] = []
        self._closed = False
        try:
            with _storage_errors("opening the store"):
                self._open_dirs()
                self._topics = TopicsFile(self._fs, self.log_dirs)
                self._topics.load()
                self.problems.extend(self._topics.problems)
                self._load_logs()
            if not read_only:
                with _storage_errors("opening the store"):
                    self._finish_pending_topic_changes()
                    self._topics.repair()
                for topic in self.topics():
                    if not any(key[0] == topic for key in self.missing_partitions):
                        self._round_robin_cycle(topic)
        except BaseException:
            # Leave every dir unclean: logs that were not loaded must be recovered next time.
            self._release(mark_clean=False)
            raise

    # --- opening ---------------------------------------------------------------------------------

    def _open_dirs(self) -> None:
        for dir_path in self.log_dirs:
            if self.read_only:
                if not self._fs.is_dir(dir_path):
                    raise StorageError(f"data dir {dir_path} does not exist")
                self._clean_shutdown[dir_path] = False
                continue
            try:
                self._fs.make_dirs(dir_path)
            except OSError as exc:
                raise StorageError(f"cannot create data dir {dir_path}: {exc.strerror or exc}") from exc
            self._take_lock(dir_path)
        for dir_path in self.log_dirs if not self.read_only else ():
            self._clean_shutdown[dir_path] = take_clean_shutdown_marker(self._fs, dir_path, remove=True)

    def _take_lock(self, dir_path: str) -> None:
        path = os.path.join(dir_path, LOCK_FILE)
        try:
            fd = self._fs.try_lock(path)
        except OSError as exc:
            raise StorageError(f"cannot lock data dir {dir_path}: {exc.strerror or exc}") from exc
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

    def _load_logs(self) -> None:
        for dir_path in self.log_dirs:
            recovery_points = self._read_checkpoint(dir_path, RECOVERY_POINT_CHECKPOINT)
            start_offsets = self._read_checkpoint(dir_path, LOG_START_OFFSET_CHECKPOINT)
            for name in self._fs.list_dir(dir_path):
                path = os.path.join(dir_path, name)
                if not self._fs.is_dir(path):
                    continue
                if name.endswith(DELETE_DIR_SUFFIX):
                    if not self.read_only:
                        self._remove_tree(path)
                    continue
                parsed = parse_partition_dir_name(name)
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
                self._logs[parsed] = self._open_log(parsed, path, recovery_points.get(parsed, 0),
                                                    start_offsets.get(parsed, 0), self._clean_shutdown[dir_path])
        for name, meta in self._topics.topics.items():
            if meta.state != READY:
                continue
            for partition in range(meta.partitions):
                if (name, partition) not in self._logs:
                    self.missing_partitions.append((name, partition))
                    self.problems.append(f"partition {partition_dir_name(name, partition)} is missing from the "
                                         f"data dirs {self.log_dirs}: was a data dir left out?")

    def _open_log(self, topic_partition: tuple[str, int], path: str, recovery_point: int,
                  log_start_offset: int, clean_shutdown: bool) -> Log:
        log = Log(path, self.topic_config(topic_partition[0]), fs=self._fs, clock=self._clock,
                  recovery_point=recovery_point, log_start_offset=log_start_offset,
                  clean_shutdown=clean_shutdown, read_only=self.read_only,
                  topic=topic_partition[0], partition=topic_partition[1])
        self.problems.extend(log.load_problems)
        log.on_checkpoint_needed = self._on_checkpoint_needed
        return log

    def _finish_pending_topic_changes(self) -> None:
        changed = False
        for name, meta in list(self._topics.topics.items()):
            if meta.state == DELETING:
                self._delete_partition_dirs(name)
                del self._topics.topics[name]
                changed = True
            elif meta.state == CREATING:
                self._create_partitions(name, meta)
                meta.state = READY
                changed = True
        if changed:
            self._topics.save()
            self.missing_partitions = [tp for tp in self.missing_partitions if tp not in self._logs]

    # --- topics ----------------------------------------------------------------------------------

    def topics(self) -> list[str]:
        """Names of the topics, sorted."""
        return sorted(name for name, meta in self._topics.topics.items() if meta.state == READY)

    def _meta(self, topic: str) -> TopicMetadata:
        meta = self._topics.topics.get(topic)
        if meta is None or meta.state != READY:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
        return meta

    def partitions(self, topic: str) -> int:
        return self._meta(topic).partitions

    def topic_config(self, topic: str) -> LogConfig:
        """The effective config of ``topic`` (store defaults plus the topic's overrides)."""
        meta = self._topics.topics.get(topic)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
        return LogConfig.from_properties(meta.config, self.default_config)

    def topic_overrides(self, topic: str) -> dict[str, str]:
        return dict(self._meta(topic).config)

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None) -> None:
        """Create ``name`` with ``partitions`` partitions and config overrides (Kafka topic keys)."""
        validate_topic_name(name)
        if not isinstance(partitions, int) or isinstance(partitions, bool) or not 1 <= partitions <= MAX_PARTITIONS:
            raise ValueError(f"partitions must be an int between 1 and {MAX_PARTITIONS}, got {partitions!r}")
        overrides = {key: str(value) if not isinstance(value, str) else value
                     for key, value in parse_overrides(config or {}).items()}
        LogConfig.from_properties(overrides, self.default_config)  # cross-key checks
        with self._lock, _storage_errors(f"creating topic {name!r}"):
            self._check_writable()
            if name in self._topics.topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            meta = TopicMetadata(partitions, overrides, CREATING)
            self._topics.topics[name] = meta
            self._topics.save()
            self._create_partitions(name, meta)
            meta.state = READY
            self._topics.save()
            self._round_robin_cycle(name)

    def _create_partitions(self, name: str, meta: TopicMetadata) -> None:
        for partition in range(meta.partitions):
            topic_partition = (name, partition)
            if topic_partition in self._logs:
                continue
            dir_path = self._log_dir_of.get(topic_partition) or self._next_log_dir()
            path = os.path.join(dir_path, partition_dir_name(name, partition))
            self._fs.make_dirs(path)
            self._log_dir_of[topic_partition] = dir_path
            self._logs[topic_partition] = self._open_log(topic_partition, path, 0, 0, True)

    def _next_log_dir(self) -> str:
        """The data dir holding the fewest partitions (the first listed on a tie)."""
        counts = {dir_path: 0 for dir_path in self.log_dirs}
        for dir_path in self._log_dir_of.values():
            counts[dir_path] += 1
        return min(self.log_dirs, key=lambda dir_path: counts[dir_path])

    def delete_topic(self, name: str) -> None:
        """Delete ``name`` and all its data."""
        with self._lock, _storage_errors(f"deleting topic {name!r}"):
            self._check_writable()
            meta = self._meta(name)
            meta.state = DELETING
            self._topics.save()
            for partition in range(meta.partitions):
                log = self._logs.pop((name, partition), None)
                if log is not None:
                    log.close()
            self._delete_partition_dirs(name)
            del self._topics.topics[name]
            self._topics.save()
            self._round_robin.pop(name, None)
            self._round_robin_starts.pop(name, None)

    def _delete_partition_dirs(self, name: str) -> None:
        for topic_partition, dir_path in list(self._log_dir_of.items()):
            if topic_partition[0] != name:
                continue
            path = os.path.join(dir_path, partition_dir_name(*topic_partition))
            doomed = os.path.join(dir_path, deleted_dir_name(*topic_partition))
            self._fs.rename(path, doomed)
            self._fs.fsync_dir(dir_path)
            self._remove_tree(doomed)
            del self._log_dir_of[topic_partition]

    def _remove_tree(self, path: str) -> None:
        for name in self._fs.list_dir(path):
            child = os.path.join(path, name)
            if self._fs.is_dir(child):
                self._remove_tree(child)
            else:
                self._fs.remove(child)
        self._fs.remove_dir(path)
        self._fs.fsync_dir(os.path.dirname(path))

    def alter_topic_config(self, name: str, config: Mapping[str, Any]) -> LogConfig:
        """Set config overrides of ``name`` (a value of None removes an override, restoring the
        default). Applies to the open logs at once; returns the new effective config."""
        with self._lock:
            self._check_writable()
            meta = self._meta(name)
            if not isinstance(config, Mapping):
                raise TypeError(f"config must be a mapping of Kafka keys to values, got {config!r}")
            removals = [key for key, value in config.items() if value is None]
            for key in removals:
                if key not in TOPIC_KEYS:
                    raise InvalidConfigError(f"unknown topic config {key!r}")
            updates = {key: str(value) if not isinstance(value, str) else value
                       for key, value in parse_overrides({k: v for k, v in config.items() if v is not None}).items()}
            overrides = {key: value for key, value in meta.config.items() if key not in removals}
            overrides.update(updates)
            new_config = LogConfig.from_properties(overrides, self.default_config)
            meta.config = overrides
            with _storage_errors(f"altering topic {name!r}"):
                self._topics.save()
            for partition in range(meta.partitions):
                log = self._logs.get((name, partition))
                if log is not None:
                    log.config = new_config
            return new_config

    # --- logs ------------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log:
        """The ``Log`` of one partition."""
        self._check_open()
        meta = self._meta(topic)
        if not isinstance(partition, int) or not 0 <= partition < meta.partitions:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition!r} "
                                               f"(partitions: 0..{meta.partitions - 1})")
        log = self._logs.get((topic, partition))
        if log is None:
            raise StorageError(f"partition {partition_dir_name(topic, partition)} is missing from the data "
                               f"dirs {self.log_dirs}: was a data dir left out?")
        return log

    def logs(self) -> list[Log]:
        """Every open log, by topic and partition."""
        return [self._logs[key] for key in sorted(self._logs)]

    def log_dir_of(self, topic: str, partition: int) -> str:
        """The data dir holding a partition."""
        return self._log_dir_of[(topic, partition)]

    def append(self, topic: str, records: Sequence[Record], partition: int | None = None) -> dict[int, AppendInfo]:
        """Append to ``topic``: to ``partition`` when given, else each record to the partition of
        its key (``crc32(key) % partitions``), or round-robin for records without a key. Returns
        the append info per partition touched."""
        partitions = self.partitions(topic)
        if partition is not None:
            return {partition: self.get_log(topic, partition).append(records)}
        if isinstance(records, (Record, bytes, str)) or not isinstance(records, Sequence):
            raise TypeError(f"append takes a sequence of Record, got {type(records).__name__}")
        if partitions == 1:
            return {0: self.get_log(topic, 0).append(records)}
        groups: dict[int, list[Record]] = {}
        round_robin = self._round_robin_cycle(topic)
        for record in records:
            key = record.key
            target = next(round_robin) if key is None else partition_for_key(key, partitions)
            groups.setdefault(target, []).append(record)
        # Every partition's records are validated and encoded before any is written: a rejected
        # record appends nothing anywhere. (A disk error half-way is not undone across partitions.)
        prepared = [(target, self.get_log(topic, target).prepare(group)) for target, group in sorted(groups.items())]
        return {target: appendable.log.append_prepared(appendable) for target, appendable in prepared}

    def validate_append(self, topic: str, records: Sequence[Record], partition: int | None = None) -> None:
        """Raise what ``append(topic, records, partition)`` would raise for bad input (an unknown
        topic or partition, wrong types, a record too large, a missing key on a compacted topic),
        without appending anything."""
        self.get_log(topic, 0 if partition is None else partition).validate(records)

    def round_robin_start(self, topic: str) -> int:
        """The partition where this store's round-robin of keyless records for ``topic`` started:
        the one with the smallest log end offset when the store was opened (or the topic created),
        the lowest number on a tie. So keyless records from many short-lived processes even out
        instead of piling into partition 0."""
        self._round_robin_cycle(topic)
        return self._round_robin_starts[topic]

    def _round_robin_cycle(self, topic: str) -> Iterator[int]:
        cycle = self._round_robin.get(topic)
        if cycle is None:
            partitions = self.partitions(topic)
            ends = [(log.log_end_offset if log is not None else 2**63, partition)
                    for partition in range(partitions) for log in [self._logs.get((topic, partition))]]
            start = min(ends)[1]
            self._round_robin_starts[topic] = start
            cycle = self._round_robin[topic] = itertools.cycle([*range(start, partitions), *range(start)])
        return cycle

    def read(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
             max_records: int | None = None) -> list[Record]:
        """``get_log(topic, partition).read(offset, max_bytes, max_records)``."""
        return self.get_log(topic, partition).read(offset, max_bytes, max_records)

    def flush(self) -> None:
        """fsync every log and advance their recovery points."""
        for log in self.logs():
            if not log.read_only:
                log.flush()

    def checkpoint(self) -> None:
        """Write every dir's recovery-point and log-start-offset checkpoints now."""
        self._check_writable()
        for dir_path in self.log_dirs:
            self._write_checkpoints(dir_path)

    def _write_checkpoints(self, dir_path: str) -> None:
        logs = [(key, log) for key, log in self._logs.items() if self._log_dir_of.get(key) == dir_path]
        OffsetCheckpointFile(self._fs, os.path.join(dir_path, RECOVERY_POINT_CHECKPOINT)).write(
            {key: log.recovery_point for key, log in logs})
        OffsetCheckpointFile(self._fs, os.path.join(dir_path, LOG_START_OFFSET_CHECKPOINT)).write(
            {key: log.log_start_offset for key, log in logs if log.log_start_offset > log.segments[0].base_offset})

    def _on_checkpoint_needed(self, log: Log) -> None:
        # Persist at once: a crash must not bring deleted records back, nor leave a recovery point
        # above data that was truncated and written again.
        with _storage_errors(f"writing the checkpoints of {log.name}"):
            self._write_checkpoints(self._log_dir_of[(log.topic, log.partition)])

    # --- closing ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the store is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise ReadOnlyError("the store is open read-only")

    def close(self) -> None:
        """Flush and close every log, write checkpoints and clean-shutdown markers, release the
        locks. Errors in one log are collected (and re-raised at the end as a ``StorageError``)
        without stopping the others."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            failures = self._release(mark_clean=True)
        if failures:
            raise StorageError("some logs did not close cleanly: " + "; ".join(failures))

    def _release(self, mark_clean: bool) -> list[str]:
        failures: list[str] = []
        failed_dirs: set[str] = set()
        for key, log in sorted(self._logs.items()):
            try:
                log.close()
            except (OSError, LogStoreError) as exc:
                failures.append(f"{log.name}: {exc}")
                failed_dirs.add(self._log_dir_of.get(key, ""))
            if log.failed:  # fail-stopped (already reported): the next open must recover its dir
                logger.warning("%s failed earlier; leaving %s unclean", log.name, self._log_dir_of.get(key))
                failed_dirs.add(self._log_dir_of.get(key, ""))
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

    def __enter__(self) -> "LogManager":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LogManager({self.log_dirs!r}, read_only={self.read_only}, topics={len(self.topics())})"
