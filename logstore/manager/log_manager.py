"""``LogManager``: the store. Topics of partitioned logs over one or more data dirs.

This module owns the store's front: topics (create, alter, grow, delete; two-phase: a failed or
interrupted create is rolled back, an interrupted delete finished, an interrupted grow leaves the old
count or the new one), routing appends by key, the
store-level ``append`` (``acks``), ``read``/``fetch`` (waiting reads), retention, compaction and
repair on demand, and the life cycle (``startup``, ``shutdown``). Its collaborators: ``LogDirs``
(data dirs: opening, locking, parallel loading, placing partitions, checkpoints, offline dirs,
damaged partitions, clean shutdown, status), ``BackgroundJobs`` (retention, flush and checkpoint
jobs, delayed file deletion) and ``LogCleaner`` (compaction); it wires each ``Log`` to them.

Opening a store for writing takes an exclusive ``flock`` on ``<dir>/.lock`` in every data dir (a
second writer fails at once, naming the holder's pid). ``shutdown()`` (or ``close()``) stops the
jobs, flushes and closes every log, writes the checkpoints and, per dir whose logs all closed
cleanly, the clean-shutdown marker, and releases the locks; a second call does nothing. A read-only
open takes no lock, changes no file and runs no recovery: it reads the valid prefix of every log
while another process may be writing, and its waiting reads watch the files.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from functools import partial
from typing import Any, Callable, Collection, Iterator, Mapping, Sequence, cast

from ..cleaner.log_cleaner import LogCleaner, PrebuiltMap
from ..cleaner.stats import CleanerStats
from ..clock import SYSTEM_CLOCK, Clock
from ..config import TOPIC_KEYS, LogConfig, ManagerConfig, parse_overrides
from ..errors import (BufferExhaustedError, DurabilityTimeoutError, InvalidConfigError, InvalidPartitionsError,
                      InvalidTopicError, LogStoreError, ReadOnlyError, StorageError, StoreClosedError, TopicExistsError,
                      UnknownTopicOrPartitionError)
from ..fs import OS_FILE_SYSTEM, FileSystem
from ..log.checkpoint import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from ..log.damage import LogDamage, RepairPlan
from ..log.file_records import ACTIVE_SEGMENT_DESCRIPTORS, OPEN_FILES
from ..log.log import READ_UNCOMMITTED, ColumnsResult, Log, ReadResult, check_isolation
from ..log.retention import RetentionResult
from ..log.durable_futures import DurableFutures, acquire_slot_async
from ..log.waits import (DEFAULT_DURABLE_TIMEOUT_MS, DURABLE_GRACE_S, LogWaits, check_timeout, check_wait,
                         durable_acks, read_or_wait)
from ..records.batching import AppendInfo, PreparedAppend, ProducerBatch, check_record_sequence
from ..records.decoder import Record
from ..timer.scheduler import Scheduler
from .jobs import BackgroundJobs
from .log_dirs import DirStatus, LogDirs
from .topics import (CREATING, DELETING, MURMUR2, PLACEMENT_CONFIG, READY, TopicMetadata, TopicsFile, check_placement,
                     is_internal_topic, murmur2, partition_dir_name, partition_for_key, validate_topic_name)

logger = logging.getLogger(__name__)

MAX_PARTITIONS = 10_000
# ``descriptors_needed``'s headroom: descriptors opened for a moment by rolls, flushes, checkpoints
# and retention running at once (a new segment holds 3 while made; a checkpoint or a flush 2)...
_TRANSIENT_DESCRIPTORS = 16
# ...by each cleaner thread (the cleaned segment's file, its index mappings, a spill file, an open for
# an fsync)...
_CLEANER_THREAD_DESCRIPTORS = 6
# ...and by each recovery thread (a segment being recovered, or made by a repair, with its mappings).
_RECOVERY_THREAD_DESCRIPTORS = 5


Appends = Sequence["tuple[str, Sequence[Record]] | tuple[str, Sequence[Record], int | None]"]
"""``append_many``'s argument: ``(topic, records)`` or ``(topic, records, partition)`` each."""


def _append_args(entry: Any) -> tuple[str, Sequence[Record], int | None]:
    """One ``append_many`` entry as ``(topic, records, partition)`` (TypeError for another shape)."""
    if isinstance(entry, tuple) and len(entry) in (2, 3):
        return (entry[0], entry[1], None) if len(entry) == 2 else entry
    raise TypeError(f"each append is (topic, records) or (topic, records, partition), got {entry!r}")


def _refuse_internal(topic: str) -> None:
    """Appends to an internal topic are its owner's (``__consumer_offsets``: the group coordinator,
    which writes through its logs): through the store's API they are refused, as Kafka refuses them."""
    if is_internal_topic(topic):
        raise InvalidTopicError(f"cannot append to internal topic {topic!r}: it holds the broker's own state, "
                                "written by the broker only")


@contextlib.contextmanager
def _storage_errors(doing: str) -> Iterator[None]:
    """Turn an ``OSError`` from the disk into a ``StorageError`` saying what was being done."""
    try:
        yield
    except OSError as exc:
        raise StorageError(f"{doing} failed: {exc}") from exc


class LogManager:
    """A store of topics over the data dirs ``log_dirs``; use it as a context manager (which also
    starts the background jobs: ``startup()``).

    ``config`` takes store-wide settings with Kafka's broker names: topic defaults
    (``log.segment.bytes``, ``log.retention.ms``, ...; each topic's own config overrides them) and the
    store's own (``log.retention.check.interval.ms``, ``num.recovery.threads.per.data.dir``, ...).
    ``scheduler`` runs the background jobs (default: a threaded ``Scheduler`` on ``clock``; tests pass
    ``Scheduler(manual_clock, threaded=False)`` and drive it). ``load_only`` (read-only views only)
    loads just those ``(topic, partition)`` logs: a Spark task reading one partition opens one log."""

    def __init__(self, log_dirs: Sequence[str] | str, *, config: Mapping[str, Any] | None = None,
                 read_only: bool = False, clock: Clock | None = None, fs: FileSystem | None = None,
                 scheduler: Scheduler | None = None, load_only: Collection[tuple[str, int]] | None = None) -> None:
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
        if load_only is not None and not read_only:
            raise ValueError("load_only is for read-only views: a writer must load every partition")
        self.default_config = LogConfig.from_broker_properties(config or {})
        self.manager_config = ManagerConfig.from_broker_properties(config or {})
        self._clock = clock or SYSTEM_CLOCK
        self._fs = fs or OS_FILE_SYSTEM
        self.waits = LogWaits("logstore", self.manager_config.durable_max_pending_appends)
        self._lock = threading.RLock()
        self._round_robin: dict[str, Iterator[int]] = {}
        self._round_robin_starts: dict[str, int] = {}
        self.problems: list[str] = []  # what the open found wrong (the dirs and the topics add to it)
        self._close_callbacks: list[Callable[[], None]] = []
        self._closed = False
        self._dirs = LogDirs(self.log_dirs, read_only=read_only, fs=self._fs, clock=self._clock,
                             config=self.manager_config, topic_config=self.topic_config, adopt_log=self._adopt_log,
                             problems=self.problems, load_only=load_only)
        # The compaction service; its threads start with startup() (log.cleaner.enable).
        self.cleaner = None if read_only else LogCleaner(
            self.manager_config, self._clock, self._fs, lambda: dict(self._dirs.logs),
            lambda key: self._dirs.dir_of[key], lambda: list(self._dirs.live))
        self._jobs = BackgroundJobs(scheduler or Scheduler(self._clock, name="logstore-scheduler"),
                                    self.manager_config, self._clock, self.cleaner, self.logs, self.checkpoint)
        try:
            with _storage_errors("opening the store"):
                self._dirs.open()
                self._topics = TopicsFile(self._fs, self._dirs.live)  # offline dirs leave this list
                self._topics.load()
                self.problems.extend(self._topics.problems)
                self._dirs.load(self._topics)
            if not read_only:
                with _storage_errors("opening the store"):
                    self._finish_pending_topic_changes()
                    self._topics.repair()
                for topic in self.topics():
                    if not any(key[0] == topic for key in self.missing_partitions):
                        self._round_robin_cycle(topic)
                self._dirs.remember_state(self._topics.generation)
        except BaseException:
            # Leave every dir unclean: logs that were not loaded must be recovered next time.
            self._release(mark_clean=False)
            raise

    @property
    def scheduler(self) -> Scheduler:
        """The scheduler the background jobs run on."""
        return self._jobs.scheduler

    @property
    def offline_dirs(self) -> dict[str, str]:
        """The data dirs that are offline, and why."""
        return self._dirs.offline

    @property
    def damaged_partitions(self) -> dict[tuple[str, int], LogDamage]:
        """Partitions whose files hold damage no crash could leave (``LogDamage``: what and where).
        Nothing was cut: they refuse reads and writes (``LogDamagedError``) until ``repair``."""
        return {key: log.damage for key, log in sorted(self._dirs.damaged.items()) if log.damage is not None}

    def damaged_logs(self) -> list[Log]:
        """The logs of the damaged partitions (for verification: ``logstore check``)."""
        return [log for _, log in sorted(self._dirs.damaged.items())]

    @property
    def missing_partitions(self) -> list[tuple[str, int]]:
        """Partitions of known topics found in no data dir (was a dir left out?)."""
        return self._dirs.missing

    def _adopt_log(self, log: Log) -> None:
        """Connect a newly opened log to the store: checkpoints, waits and delayed file deletion."""
        log.on_checkpoint_needed = self._dirs.checkpoint_log
        log.waits = self.waits
        log.schedule_file_delete = self._jobs.schedule_file_delete
        if self.cleaner is not None:  # records appended again below the first dirty offset are dirty
            log.on_truncated = self._on_truncated

    def _finish_pending_topic_changes(self) -> None:
        """Finish what a previous session left half-done: a deletion is completed; a creation (never
        acknowledged: the process died or its rollback failed) is rolled back, so a retry of the
        same ``create_topic`` succeeds."""
        changed = False
        for name, meta in list(self._topics.topics.items()):
            if meta.state == DELETING:
                self._dirs.delete_partition_dirs(name)
                del self._topics.topics[name]
                changed = True
            elif meta.state == CREATING:
                message = (f"topic {name!r} was being created when the store last stopped (never acknowledged); "
                           "its creation is rolled back")
                logger.warning("%s", message)
                self.problems.append(message)
                self._remove_topic_files(name, meta.partitions)
                changed = True
        if changed:
            self._topics.save()
            self._dirs.missing[:] = [tp for tp in self._dirs.missing if tp not in self._dirs.logs]

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

    def topic_placement(self, topic: str) -> str:
        """How ``topic``'s keys map to partitions (``topics.PLACEMENTS``): ``murmur2`` (Kafka's, every
        topic created by this version) or ``crc32`` (a topic created before placements were recorded)."""
        return self._meta(topic).placement

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None) -> None:
        """Create ``name`` with ``partitions`` partitions and config overrides (Kafka topic keys). Its
        keys are placed by Kafka's murmur2 unless ``config`` holds ``logstore.key.placement=crc32``
        (what ``mirror`` gives a copy of a topic placed by crc32); the placement never changes after."""
        validate_topic_name(name)
        if not isinstance(partitions, int) or isinstance(partitions, bool) or not 1 <= partitions <= MAX_PARTITIONS:
            raise ValueError(f"partitions must be an int between 1 and {MAX_PARTITIONS}, got {partitions!r}")
        placement = MURMUR2
        if isinstance(config, Mapping) and PLACEMENT_CONFIG in config:  # not a LogConfig key: taken out
            placement = check_placement(config[PLACEMENT_CONFIG])
            config = {key: value for key, value in config.items() if key != PLACEMENT_CONFIG}
        overrides = {key: str(value) if not isinstance(value, str) else value
                     for key, value in parse_overrides(config or {}).items()}
        LogConfig.from_properties(overrides, self.default_config)  # cross-key checks
        with self._lock, _storage_errors(f"creating topic {name!r}"):
            self._check_writable()
            existing = self._topics.topics.get(name)
            if existing is not None and existing.state == CREATING:  # an earlier failed create, not rolled back
                self._roll_back_create(name, existing.partitions)
            if name in self._topics.topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            meta = TopicMetadata(partitions, overrides, CREATING, placement)
            self._topics.topics[name] = meta
            try:
                self._topics.save()
                self._create_partitions(name, meta)
                meta.state = READY
                self._topics.save()
            except BaseException:
                # A create either happens or leaves nothing behind (a retry must not find it half made).
                meta.state = CREATING
                try:
                    self._roll_back_create(name, partitions)
                except (OSError, LogStoreError) as exc:
                    logger.error("rolling back the failed creation of topic %r failed too (%s); the next "
                                 "writable open or create_topic rolls it back", name, exc)
                raise
            self._round_robin_cycle(name)

    def _roll_back_create(self, name: str, partitions: int) -> None:
        """Undo a creation of ``name`` that failed: close and remove its partitions, then remove it from
        the metadata, durably."""
        self._remove_topic_files(name, partitions)
        self._topics.save()
        logger.warning("rolled back the failed creation of topic %r", name)

    def _remove_topic_files(self, name: str, partitions: int) -> None:
        """Close the logs of a topic that was never acknowledged, remove its partition directories
        from every live dir and drop it from the metadata (the caller saves it)."""
        for partition in range(partitions):
            log = self._dirs.logs.pop((name, partition), None)
            if log is not None:
                log.close_handlers()  # empty and never acknowledged: nothing to flush
        self._dirs.remove_partition_dirs(name, partitions)
        del self._topics.topics[name]

    def _create_partitions(self, name: str, meta: TopicMetadata) -> None:
        for partition in range(meta.partitions):
            if (name, partition) not in self._dirs.logs and (name, partition) not in self._dirs.damaged:
                self._dirs.create_partition((name, partition))

    def create_partitions(self, name: str, total_count: int) -> None:
        """Grow topic ``name`` to ``total_count`` partitions (Kafka's CreatePartitions): the
        partitions it has keep their records and their data dir; the new ones are empty, each placed
        in the live dir holding the fewest partitions. Keys map to partitions by the new count from
        now on (``crc32(key) % partitions``, as Kafka's murmur2 does after a grow).

        ``InvalidPartitionsError`` when ``total_count`` is not above the current count (partitions
        are only ever added) or above ``MAX_PARTITIONS``; ``InvalidTopicError`` for an internal
        topic (``__consumer_offsets``: a group's partition is its id's hash modulo the count, so
        growing it would orphan every group's offsets).

        Crash-safe: the new partition directories are made and fsynced first, then ``topics.json``
        records the new count (temp + fsync + rename + dir fsync in every data dir). A crash before
        that record leaves the old count and empty directories beyond it, which the next writable
        open removes (``LogDirs``); after it, the new count with every directory in place. A failure
        here is rolled back the same way, so a retry succeeds."""
        validate_topic_name(name)
        if is_internal_topic(name):
            raise InvalidTopicError(f"topic {name!r} is internal (it holds the broker's own state): its partition "
                                    "count is fixed once created")
        if not isinstance(total_count, int) or isinstance(total_count, bool):
            raise TypeError(f"total_count must be an int, got {total_count!r}")
        with self._lock, _storage_errors(f"adding partitions to topic {name!r}"):
            self._check_writable()
            meta = self._meta(name)
            current = meta.partitions
            if total_count <= current:
                raise InvalidPartitionsError(
                    f"topic {name!r} already has {current} partition(s)" if total_count == current else
                    f"topic {name!r} has {current} partition(s); {total_count} would not be an increase")
            if total_count > MAX_PARTITIONS:
                raise InvalidPartitionsError(f"topic {name!r}: {total_count} partitions is above the limit of "
                                             f"{MAX_PARTITIONS}")
            added = range(current, total_count)
            recorded = False
            try:
                for partition in added:
                    self._dirs.create_partition((name, partition), sync=True)
                meta.partitions = total_count
                recorded = True
                self._topics.save()
            except BaseException:
                meta.partitions = current
                try:
                    if recorded:  # some copies may hold the new count: record the old one again first
                        self._topics.save()
                    self._remove_partitions(name, added)
                except (OSError, LogStoreError) as exc:
                    # Left as they are: whichever count the next open reads, the dirs it needs exist,
                    # and empty ones beyond the count are removed then.
                    logger.error("rolling back the partitions added to topic %r failed too (%s); the next "
                                 "writable open finishes it", name, exc)
                raise
            self._round_robin.pop(name, None)
            self._round_robin_starts.pop(name, None)
            self._round_robin_cycle(name)
            logger.info("topic %r grew from %d to %d partitions", name, current, total_count)

    def _remove_partitions(self, name: str, partitions: range) -> None:
        """Close and remove partitions that were never acknowledged (a failed ``create_partitions``)."""
        for partition in partitions:
            log = self._dirs.logs.pop((name, partition), None)
            if log is not None:
                log.close_handlers()  # empty and never acknowledged: nothing to flush
        self._dirs.remove_partition_dirs(name, partitions)

    def delete_topic(self, name: str, *, allow_internal: bool = False) -> None:
        """Delete ``name`` and all its data. An internal topic (``topics.INTERNAL_TOPICS``: the consumer
        groups' offsets) is refused with ``InvalidTopicError`` unless ``allow_internal``: deleting
        ``__consumer_offsets`` loses every group's committed offsets."""
        if is_internal_topic(name) and not allow_internal:
            raise InvalidTopicError(f"topic {name!r} is internal (it holds the broker's own state): deleting it "
                                    "is refused unless asked for explicitly (allow_internal=True)")
        with self._lock, _storage_errors(f"deleting topic {name!r}"):
            self._check_writable()
            meta = self._meta(name)
            meta.state = DELETING
            self._topics.save()
            keys = [(name, partition) for partition in range(meta.partitions)]
            if self.cleaner is not None:  # no cleaning round may run on a log being deleted
                for key in keys:
                    if key in self._dirs.logs:
                        self.cleaner.cleaner_manager.abort_and_pause(key)
            for key in keys:
                log = self._dirs.logs.pop(key, None) or self._dirs.damaged.pop(key, None)
                if log is not None:
                    log.close()
                    if self.cleaner is not None:
                        self.cleaner.cleaner_manager.forget(key, self._dirs.dir_of[key])
            self._dirs.delete_partition_dirs(name)
            del self._topics.topics[name]
            self._topics.save()
            self._round_robin.pop(name, None)
            self._round_robin_starts.pop(name, None)

    def alter_topic_config(self, name: str, config: Mapping[str, Any]) -> LogConfig:
        """Set config overrides of ``name`` (a value of None removes an override, restoring the
        default). Applies to the open logs at once; returns the new effective config."""
        with self._lock:
            self._check_writable()
            meta = self._meta(name)
            if not isinstance(config, Mapping):
                raise TypeError(f"config must be a mapping of Kafka keys to values, got {config!r}")
            if PLACEMENT_CONFIG in config:
                raise InvalidConfigError(f"{PLACEMENT_CONFIG} is read-only: a topic's key placement is set when it "
                                         "is created and never changes (its keys would move)")
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
                log = self._dirs.logs.get((name, partition))
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
        log = self._dirs.logs.get((topic, partition))
        if log is None:
            damaged = self._dirs.damaged.get((topic, partition))
            if damaged is not None:
                raise damaged.damaged_error()
            self._dirs.check_online(topic, partition)
            raise StorageError(f"partition {partition_dir_name(topic, partition)} is missing from the data "
                               f"dirs {self.log_dirs}: was a data dir left out?")
        return log

    def logs(self) -> list[Log]:
        """Every open log, by topic and partition."""
        logs = self._dirs.logs
        return [logs[key] for key in sorted(logs)]

    def log_dir_of(self, topic: str, partition: int) -> str:
        """The data dir holding a partition."""
        return self._dirs.dir_of[(topic, partition)]

    def append(self, topic: str, records: Sequence[Record], partition: int | None = None, *, acks: int | str = 1,
               timeout_ms: int = DEFAULT_DURABLE_TIMEOUT_MS,
               producer: ProducerBatch | None = None) -> dict[int, AppendInfo]:
        """Append to ``topic``: to ``partition`` when given, else each record to the partition of
        its key by the topic's placement (``topic_placement``: Kafka's murmur2, or crc32 for a topic
        created before placements were recorded), or round-robin for records without a key. Returns
        the append info per partition touched.

        ``acks=1`` returns once the records are written to the OS (they survive a crash of this
        process); ``acks="all"`` returns once an fsync covers them in every partition touched (they
        survive a power loss), or raises ``DurabilityTimeoutError`` after ``timeout_ms`` (the
        records stay appended and may still become durable). See ``Log.append``.

        ``producer``: the records are one producer's batch (``Log.append``'s ``producer``), for one
        partition: ``partition`` must be given (or the topic have one)."""
        durable = durable_acks(acks, timeout_ms)
        _refuse_internal(topic)
        if producer is not None:
            if partition is None and self._meta(topic).partitions != 1:
                raise ValueError(f"an append with a producer names its partition (topic {topic!r} has "
                                 f"{self._meta(topic).partitions})")
            infos = {partition or 0: self.get_log(topic, partition or 0).append(records, producer=producer)}
        else:
            infos = self._append(topic, records, partition)
        if durable:
            waiting = [(self.get_log(topic, target), info.last_offset + 1)
                       for target, info in infos.items() if info.last_offset is not None]
            for log, _ in waiting:  # one request each first: the flusher covers them in one round
                self.waits.flusher.request(log)
            for log, required_offset in waiting:
                log.wait_durable(required_offset, timeout_ms)
        return infos

    def append_future(self, topic: str, records: Sequence[Record], partition: int | None = None, *,
                      timeout_ms: int = DEFAULT_DURABLE_TIMEOUT_MS) -> Future[dict[int, AppendInfo]]:
        """``append(topic, records, partition)`` now, and a ``concurrent.futures.Future`` of its
        result (the append info per partition touched) that completes once an fsync covers the
        records in every partition, with no thread waiting: see ``Log.append_future`` (errors, the
        bound ``logstore.durable.max.pending.appends``, ``timeout_ms``, close)."""
        check_timeout("timeout_ms", timeout_ms)
        futures = self.waits.futures
        if not futures.slots.acquire(timeout_ms / 1000.0):
            raise self._buffer_exhausted(timeout_ms)
        return cast("Future[dict[int, AppendInfo]]",
                    self._watched_append(futures, ((topic, records, partition),), timeout_ms, single=True))

    async def append_async(self, topic: str, records: Sequence[Record], partition: int | None = None, *,
                           timeout_ms: int = DEFAULT_DURABLE_TIMEOUT_MS) -> dict[int, AppendInfo]:
        """``append_future`` for asyncio: appends now, then awaits the fsync without blocking the
        event loop; a full limit of outstanding futures is awaited too."""
        import asyncio  # (here: a program that never awaits an append does not load asyncio)

        check_timeout("timeout_ms", timeout_ms)
        futures = self.waits.futures
        await acquire_slot_async(futures.slots, timeout_ms, partial(self._buffer_exhausted, timeout_ms))
        infos: dict[int, AppendInfo] = await self._watched_append(futures, ((topic, records, partition),), timeout_ms,
                                                                   single=True, loop=asyncio.get_running_loop())
        return infos

    def append_many(self, appends: Appends, *, acks: int | str = 1,
                    timeout_ms: int = DEFAULT_DURABLE_TIMEOUT_MS) -> list[dict[int, AppendInfo]]:
        """Several appends in one call, each ``(topic, records)`` or ``(topic, records, partition)``
        as ``append`` takes them; returns ``append``'s result for each, in order. Every append's
        records are validated and encoded before any is written (a rejected record appends nothing
        anywhere; a disk error half-way is not undone). With ``acks="all"`` the call waits once, for
        the flush round that covers every partition touched (one fsync per log, shared with every
        other durable append of the round), not once per append; ``DurabilityTimeoutError`` after
        ``timeout_ms`` (the records stay appended). It holds no slot of
        ``logstore.durable.max.pending.appends`` (the caller's thread is the bound)."""
        durable = durable_acks(acks, timeout_ms)
        if not durable:
            return self._append_all(appends)[0]
        future = self._watched_append(self.waits.futures, appends, timeout_ms, slot=False)
        try:  # the future's own timer fails it after timeout_ms; the grace only guards against a hang
            return cast("list[dict[int, AppendInfo]]", future.result(timeout_ms / 1000.0 + DURABLE_GRACE_S))
        except FutureTimeoutError:
            raise DurabilityTimeoutError(f"appends of {len(appends)} were not fsynced within {timeout_ms} ms and "
                                         "their wait was not answered; they may still become durable", -1, -1) from None

    def _watched_append(self, futures: DurableFutures, appends: Appends, timeout_ms: int, *, single: bool = False,
                        slot: bool = True, loop: Any = None) -> Any:
        """Append ``appends`` (``append_many``'s form) and watch every partition touched: the future
        of their results (of the one append's when ``single``; an asyncio one of ``loop`` when
        given). A held ``slot`` is the future's to give back (and given back here when the append
        raises)."""
        try:
            results, targets = self._append_all(appends)
        except BaseException:
            if slot:
                futures.slots.release()
            raise
        return futures.watch(targets, results[0] if single else results, timeout_ms, slot, loop)

    def _append_all(self, appends: Appends) -> tuple[list[dict[int, AppendInfo]], list[tuple[Log, int]]]:
        """``append_many``'s writes: every append prepared first, then written; returns the results
        and, per log touched, the offset an fsync must cover (the highest appended)."""
        if not isinstance(appends, (list, tuple)):
            raise TypeError(f"appends must be a list of (topic, records[, partition]) tuples, got {appends!r}")
        if len(appends) == 1:  # one append: ``append``'s own path (the one-record short path included)
            topic, records, partition = _append_args(appends[0])
            _refuse_internal(topic)
            results = [self._append(topic, records, partition)]
            logs = [self.get_log(topic, target) for target in results[0]]
        else:
            prepared: list[tuple[str, list[tuple[int, PreparedAppend]]]] = []
            for entry in appends:
                topic, records, partition = _append_args(entry)
                _refuse_internal(topic)
                prepared.append((topic, self._prepare(topic, records, partition)))
            results = [{target: appendable.log.append_prepared(appendable) for target, appendable in groups}
                       for _topic, groups in prepared]
            logs = [self.get_log(topic, target) for topic, groups in prepared for target, _appendable in groups]
        required: dict[int, tuple[Log, int]] = {}
        for log, info in zip(logs, (info for result in results for info in result.values())):
            if info.last_offset is not None:
                known = required.get(id(log))
                if known is None or known[1] <= info.last_offset:
                    required[id(log)] = (log, info.last_offset + 1)
        return results, list(required.values())

    def _buffer_exhausted(self, timeout_ms: int) -> BufferExhaustedError:
        return BufferExhaustedError(f"nothing appended: {self.waits.futures.slots.limit} durable appends are "
                                    f"waiting for an fsync (logstore.durable.max.pending.appends) and none "
                                    f"completed within {timeout_ms} ms")

    def _append(self, topic: str, records: Sequence[Record], partition: int | None) -> dict[int, AppendInfo]:
        meta = self._meta(topic)
        if partition is not None:
            return {partition: self.get_log(topic, partition).append(records)}
        check_record_sequence(records)
        if meta.partitions == 1:
            return {0: self.get_log(topic, 0).append(records)}
        # Every partition's records are validated and encoded before any is written: a rejected
        # record appends nothing anywhere. (A disk error half-way is not undone across partitions.)
        return {target: appendable.log.append_prepared(appendable)
                for target, appendable in self._prepare(topic, records, None)}

    def _prepare(self, topic: str, records: Sequence[Record], partition: int | None) -> list[tuple[int, PreparedAppend]]:
        """``records`` validated and encoded for the partitions ``append`` would put them in, in
        partition order; nothing written."""
        meta = self._meta(topic)
        partitions, placement = meta.partitions, meta.placement
        if partition is not None:
            return [(partition, self.get_log(topic, partition).prepare(records))]
        check_record_sequence(records)
        if partitions == 1:
            return [(0, self.get_log(topic, 0).prepare(records))]
        groups: dict[int, list[Record]] = {}
        round_robin = self._round_robin_cycle(topic)
        if placement == MURMUR2:  # Kafka's partition of a key, inline: one call per record on this path
            for record in records:
                key = record.key
                target = next(round_robin) if key is None else (murmur2(key) & 0x7FFFFFFF) % partitions
                groups.setdefault(target, []).append(record)
        else:
            for record in records:
                key = record.key
                target = next(round_robin) if key is None else partition_for_key(key, partitions, placement)
                groups.setdefault(target, []).append(record)
        return [(target, self.get_log(topic, target).prepare(group)) for target, group in sorted(groups.items())]

    def validate_append(self, topic: str, records: Sequence[Record], partition: int | None = None) -> None:
        """Raise what ``append(topic, records, partition)`` would raise for bad input (an unknown
        topic or partition, wrong types, a record too large, a missing key on a compacted topic),
        without appending anything."""
        _refuse_internal(topic)
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
                    for partition in range(partitions) for log in [self._dirs.logs.get((topic, partition))]]
            start = min(ends)[1]
            self._round_robin_starts[topic] = start
            cycle = self._round_robin[topic] = itertools.cycle([*range(start, partitions), *range(start)])
        return cycle

    def read(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
             max_records: int | None = None, *, min_bytes: int = 1, max_wait_ms: int = 0,
             isolation: str = READ_UNCOMMITTED) -> list[Record]:
        """``get_log(topic, partition).read(...)``: with ``max_wait_ms`` > 0, waits for ``min_bytes``."""
        return self.get_log(topic, partition).read(offset, max_bytes, max_records, min_bytes=min_bytes,
                                                   max_wait_ms=max_wait_ms, isolation=isolation)

    def fetch_results(self, positions: Mapping[tuple[str, int], int], *, max_bytes: int = 1 << 20,
                      isolation: str = READ_UNCOMMITTED) -> dict[tuple[str, int], ReadResult]:
        """``Log.fetch`` of several partitions (no wait): the ``ReadResult`` per ``(topic, partition)``."""
        check_isolation(isolation)
        logs = {key: self.get_log(*key) for key in positions}
        if self.read_only:
            for log in logs.values():
                log.refresh()
        return {key: log.fetch(positions[key], max_bytes, isolation=isolation) for key, log in logs.items()}

    def fetch_columns(self, positions: Mapping[tuple[str, int], int], *, max_bytes: int = 1 << 20,
                      isolation: str = READ_UNCOMMITTED) -> dict[tuple[str, int], ColumnsResult]:
        """``Log.fetch_columns`` of several partitions (no wait): the records as ``ColumnBatch``es,
        without an object per record, in a ``ColumnsResult`` per ``(topic, partition)``."""
        check_isolation(isolation)
        logs = {key: self.get_log(*key) for key in positions}
        if self.read_only:
            for log in logs.values():
                log.refresh()
        return {key: log.fetch_columns(positions[key], max_bytes, isolation=isolation) for key, log in logs.items()}

    def fetch(self, positions: Mapping[tuple[str, int], int], *, max_bytes: int = 1 << 20, min_bytes: int = 1,
              max_wait_ms: int = 0, isolation: str = READ_UNCOMMITTED) -> dict[tuple[str, int], list[Record]]:
        """Read several partitions at once (Kafka's fetch): ``positions`` maps ``(topic, partition)``
        to the offset to read from; returns the records per partition (``max_bytes`` each). When
        fewer than ``min_bytes`` are found in total and ``max_wait_ms`` > 0, waits until appends to
        any of them bring ``min_bytes`` or ``max_wait_ms`` passes (no polling: the purgatory in a
        writing store, the files' change notifications in a read-only one), then reads again."""
        check_wait(min_bytes, max_wait_ms)
        check_isolation(isolation)
        logs = {key: self.get_log(*key) for key in positions}
        if self.read_only:  # a view sees what the writing process appended since only when refreshed
            for log in logs.values():
                log.refresh()

        return read_or_wait({key: (log, positions[key]) for key, log in logs.items()},
                            lambda: {key: log.read(positions[key], max_bytes, isolation=isolation)
                                     for key, log in logs.items()},
                            min_bytes, max_wait_ms, None if self.read_only else self.waits,
                            committed=isolation == "read_committed")

    def flush(self) -> None:
        """fsync every log and advance their recovery points."""
        for log in self.logs():
            if not log.read_only:
                log.flush()

    # --- retention, flushing and checkpoints -----------------------------------------------------

    def startup(self) -> None:
        """Start the background jobs (``BackgroundJobs``) and the cleaner threads; idempotent (the
        context manager calls it). A read-only store runs none."""
        if self.read_only or self._jobs.started:
            return
        self._check_writable()
        self._jobs.start()

    def expire_producers(self) -> int:
        """Run the producer-expiration job now: drop the state of producers idle for
        ``producer.id.expiration.ms`` without an open transaction; returns how many were dropped."""
        self._check_writable()
        return self._jobs.expire_producers()

    def cleanup_logs(self, topic: str | None = None, *, dry_run: bool = False, now_ms: int | None = None,
                     skip_compacted: bool = False) -> list[RetentionResult]:
        """Apply retention now to every log (or every partition of ``topic``); returns what was
        deleted per log (with ``dry_run``, what would be, changing nothing). Over every log, a log
        that fails is reported in the log output and skipped; for one topic, its error is raised."""
        if not dry_run:
            self._check_writable()
        logs = self.logs() if topic is None else [self.get_log(topic, p) for p in range(self.partitions(topic))]
        return self._jobs.apply_retention(logs, dry_run=dry_run, now_ms=now_ms, skip_compacted=skip_compacted,
                                          raise_errors=topic is not None)

    def flush_dirty_logs(self) -> int:
        """Flush every log not flushed for ``flush.ms``; returns how many were flushed."""
        return self._jobs.flush_dirty_logs()

    def checkpoint(self, which: tuple[str, ...] = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT)) -> None:
        """Write every live dir's recovery-point and log-start-offset checkpoints now. A write
        error takes that dir offline (and is raised as ``StorageError`` after the others)."""
        self._check_writable()
        self._dirs.checkpoint(which)

    def descriptors_needed(self) -> int:
        """How many file descriptors this store needs now, to be kept free of anything else (a
        server derives ``max.connections`` from the descriptor limit minus this). The sum of:

        - per open partition (damaged ones too), what its active segment holds while it is used:
          ``ACTIVE_SEGMENT_DESCRIPTORS`` (the data file's descriptor; before Python 3.13 also one
          per mapping: both indexes' and the data file's, 4 in all; from 3.13, 1). A partition
          holds none after the open until it is appended to or read, and none again once idle for
          ``log.descriptor.idle.ms``, but any may be in use at once, so each is counted. Inactive
          segments hold none of their own;
        - the bound of the process-wide cache of inactive segments' files (``OPEN_FILES``: an
          eighth of the limit by default, 16 to 1024), which reads of old data fill;
        - one ``.lock`` per online data dir;
        - headroom for what opens files for a moment while the store runs: rolls (a new segment's
          three files), flushes and checkpoints (a file and its directory), retention, the cleaner
          threads (a segment being written, a spill file) and the recovery threads (a segment being
          recovered or repaired).

        It grows with the partitions: call it again after creating topics. Descriptors that the
        caller opens (sockets, log files) are not counted."""
        with self._lock:
            partitions = len(self._dirs.logs) + len(self._dirs.damaged)
            live_dirs = len(self._dirs.live) if not self._closed else 0
        config = self.manager_config
        cleaner_threads = config.cleaner_threads if self.cleaner is not None and config.cleaner_enable else 0
        headroom = (_TRANSIENT_DESCRIPTORS + _CLEANER_THREAD_DESCRIPTORS * cleaner_threads
                    + _RECOVERY_THREAD_DESCRIPTORS * config.recovery_threads_per_data_dir * max(live_dirs, 1))
        return partitions * ACTIVE_SEGMENT_DESCRIPTORS + OPEN_FILES.bound + live_dirs + headroom

    def status(self) -> list[DirStatus]:
        """Per data dir: online or offline (and why), partitions, bytes, recovery points and log end
        offsets, and whether the previous session shut down cleanly."""
        return self._dirs.status()

    # --- repairing damage ----------------------------------------------------------------------------

    def repair(self, topic: str, partition: int | None = None, *, dry_run: bool = False) -> list[RepairPlan]:
        """Verify every segment of ``partition`` (default: every partition of ``topic``) and cut each
        log at its first damage, as recovery would have: what ``logstore repair`` runs. Logged;
        returns per partition what was (with ``dry_run``: would be) removed (``RepairPlan``). A
        damaged partition is readable and writable again afterwards."""
        with self._lock:
            self._check_writable()
            meta = self._meta(topic)
            if partition is not None and (not isinstance(partition, int) or not 0 <= partition < meta.partitions):
                raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition!r}")
            plans = []
            for number in range(meta.partitions) if partition is None else [partition]:
                key = (topic, number)
                if key not in self._dirs.damaged:
                    self.get_log(topic, number)  # raises for a partition offline or missing
                if self.cleaner is not None and not dry_run:
                    self.cleaner.cleaner_manager.abort_and_pause(key)
                try:
                    with _storage_errors(f"repairing {partition_dir_name(topic, number)}"):
                        plans.append(self._dirs.repair(key, dry_run))
                finally:
                    if self.cleaner is not None and not dry_run:
                        self.cleaner.cleaner_manager.resume(key)
            return plans

    # --- compaction on demand --------------------------------------------------------------------

    def compact(self, topic: str | None = None, partition: int | None = None, *, now_ms: int | None = None,
                progress: Callable[[tuple[str, int], int], None] | None = None,
                offset_maps: Mapping[tuple[str, int], PrebuiltMap] | None = None
                ) -> dict[tuple[str, int], CleanerStats | None]:
        """Compact to completion every partition of every compacted topic, or of ``topic`` (which
        must be compacted), or just ``partition`` of it: round after round whatever the dirty ratio,
        honouring ``min.compaction.lag.ms`` and ``delete.retention.ms``, then retention. Returns
        ``CleanerStats`` per partition (None where nothing was dirty). ``progress(key, bytes)``.
        ``offset_maps``: dirty sections mapped by another engine (``PrebuiltMap`` per partition,
        built over ``compaction_ranges``), as the Spark compaction job does."""
        keys = self._compaction_keys(topic, partition)  # first: a read-only store raises ReadOnlyError
        return self._writable_cleaner().compact(keys, now_ms=now_ms, progress=progress, offset_maps=offset_maps)

    def compaction_ranges(self, topic: str | None = None, partition: int | None = None, *,
                          now_ms: int | None = None) -> dict[tuple[str, int], tuple[int, int]]:
        """Per partition that ``compact(topic, partition, now_ms=now_ms)`` would clean, its cleanable
        range ``(first dirty offset, first uncleanable offset)``."""
        keys = self._compaction_keys(topic, partition)
        return self._writable_cleaner().cleanable_ranges(keys, now_ms)

    def compaction_estimate_bytes(self, topic: str | None = None, partition: int | None = None) -> int:
        """What ``compact(topic, partition)`` will read in one pass (a progress bar's length)."""
        keys = self._compaction_keys(topic, partition)
        return self._writable_cleaner().estimate_bytes(keys)

    def _writable_cleaner(self) -> LogCleaner:
        """The cleaner, which a writable store has (a read-only one has none: ``ReadOnlyError``)."""
        self._check_writable()
        cleaner = self.cleaner
        assert cleaner is not None, "a writable store has a cleaner"
        return cleaner

    def _compaction_keys(self, topic: str | None, partition: int | None) -> list[tuple[str, int]]:
        self._check_writable()
        if partition is not None and topic is None:
            raise ValueError(f"a partition ({partition!r}) needs its topic")
        if topic is None:
            return [log.key for log in self.logs() if log.config.compact]
        config = self.topic_config(topic)
        if not config.compact:
            raise InvalidConfigError(
                f"topic {topic!r} has cleanup.policy={config.cleanup_policy}: only compacted topics are "
                f"compacted (topics alter {topic} --config cleanup.policy=compact)")
        partitions = range(self.partitions(topic)) if partition is None else [partition]
        return [self.get_log(topic, number).key for number in partitions]

    def _on_truncated(self, log: Log, offset: int) -> None:
        if self.cleaner is not None:  # (a writable store's: only those truncate)
            self.cleaner.cleaner_manager.maybe_truncate_checkpoint(log.key, offset)

    # --- closing ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the store is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise ReadOnlyError("the store is open read-only")

    def shutdown(self) -> None:
        """Stop the background jobs, flush and close every log (answering every waiting read and
        durable append), write the checkpoints and, per dir whose logs all closed cleanly, the
        clean-shutdown marker, and release the locks. Errors in one log are collected (and raised
        at the end as a ``StorageError``) without stopping the others. A second call does nothing."""
        self.close()

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` when the store starts closing, before its logs close: the layers
        built on a store (a group coordinator) stop their work while it is still open. A callback's
        error is logged and does not stop the close."""
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {callback!r}")
        self._close_callbacks.append(callback)

    def close(self) -> None:
        """The same as ``shutdown()``."""
        if not self._closed:
            callbacks, self._close_callbacks = self._close_callbacks, []
            for callback in callbacks:
                try:
                    callback()
                except Exception:
                    logger.exception("a close callback of the store failed: %r", callback)
            self._jobs.stop()  # before closing: a job in progress finishes on an open store
        with self._lock:
            if self._closed:
                return
            self._closed = True
            failures = self._release(mark_clean=True)
        if failures:
            raise StorageError("some logs did not close cleanly: " + "; ".join(failures))

    def _release(self, mark_clean: bool) -> list[str]:
        self._jobs.stop()
        topics = getattr(self, "_topics", None)  # None when the open failed before reading them
        failures = self._dirs.close(mark_clean, None if topics is None else topics.generation)
        self.waits.shutdown()  # after the logs closed: every waiter was answered by then
        return failures

    def __enter__(self) -> "LogManager":
        try:
            self.startup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LogManager({self.log_dirs!r}, read_only={self.read_only}, topics={len(self.topics())})"
