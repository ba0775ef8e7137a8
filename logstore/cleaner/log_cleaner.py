"""``LogCleaner``: the store's compaction service (Kafka's LogCleaner; docs/design.md §8.3).

It owns ``log.cleaner.threads`` threads (``logstore-cleaner-<i>``), each with its own ``Cleaner`` and
``OffsetMap`` (``log.cleaner.dedupe.buffer.size`` split among them), one shared ``Throttler`` and the
``LogCleanerManager``. A thread loops: clean the filthiest log (``clean_filthiest_log``), then run
retention on every idle compacted log (for ``compact`` only the log start offset rule, for
``compact,delete`` also size and time: the LogManager's retention job leaves compacted logs to the
cleaner), and sleep ``log.cleaner.backoff.ms`` when there was nothing to clean. The first round
waits ``log.initial.task.delay.ms``, as the LogManager's jobs do.

An error while cleaning a log marks that log *uncleanable* (reported in the log output and in
``uncleanable``); the cleaner and the store carry on. A round aborted because the log changed
(truncation, retention, deletion, shutdown), or stopped by a resource shortage (out of descriptors:
``errors.is_resource_shortage``), records no progress and is simply tried again later.

``compact(keys)`` is the same machinery run to completion on demand (``logstore compact``): round
after round, whatever the dirty ratio, until the first dirty offset reaches the first uncleanable one.
Tests drive everything without threads: ``clean_filthiest_log(now_ms)`` and ``compact``.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from ..errors import CleaningAbortedError, LogStoreError, is_resource_shortage
from .cleaner import Cleaner
from .cleaner_manager import LogCleanerManager
from .offset_map import OffsetMap
from .stats import CleanerStats, CleanerTotals, Throttler

if TYPE_CHECKING:
    from ..clock import Clock
    from ..config import ManagerConfig
    from ..fs import FileSystem
    from ..log.log import Log

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
ProgressCallback = Callable[[TopicPartition, int], None]


@dataclass(frozen=True)
class PrebuiltMap:
    """A log's dirty section mapped by another engine: key -> latest offset over exactly
    ``[first_dirty_offset, first_uncleanable_offset)`` (records without a key left out)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    offset_map: OffsetMap


class LogCleaner:
    """Background compaction of the compacted logs of one store."""

    def __init__(self, config: ManagerConfig, clock: Clock, fs: FileSystem,
                 logs: Callable[[], dict[TopicPartition, Log]], dir_of: Callable[[TopicPartition], str],
                 live_dirs: Callable[[], list[str]]) -> None:
        self.config = config
        self._clock = clock
        self.cleaner_manager = LogCleanerManager(fs, logs, dir_of, live_dirs)
        self._logs = logs
        self.throttler = Throttler(clock, config.cleaner_max_bytes_per_second)
        self.totals = CleanerTotals()
        self.last_stats: dict[TopicPartition, CleanerStats] = {}
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._idle_cleaner: Cleaner | None = None

    def new_cleaner(self, memory_bytes: int | None = None) -> Cleaner:
        """A ``Cleaner`` with its own map (a thread's share of the dedupe buffer by default)."""
        if memory_bytes is None:
            memory_bytes = self.config.cleaner_dedupe_buffer_bytes // max(self.config.cleaner_threads, 1)
        return Cleaner(OffsetMap(memory_bytes, self.config.cleaner_load_factor), self.throttler, self._clock,
                       check_abort=self._should_abort)

    def _should_abort(self, log: Log) -> bool:
        return self._stop.is_set() or self.cleaner_manager.is_aborted(log.key)

    # --- threads -----------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return bool(self._threads)

    def startup(self) -> None:
        """Start the cleaner threads (no-op when already running or ``log.cleaner.threads`` is 0)."""
        if self._threads or self.config.cleaner_threads == 0:
            return
        self._stop.clear()
        for index in range(self.config.cleaner_threads):
            thread = threading.Thread(target=self._run, args=(self.new_cleaner(),), daemon=True,
                                      name=f"logstore-cleaner-{index}")
            self._threads.append(thread)
            thread.start()

    def shutdown(self) -> None:
        """Stop the threads: a round in progress is aborted at its next batch (nothing half-done is
        swapped in), then the threads are joined."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._threads = []

    def _run(self, cleaner: Cleaner) -> None:
        # Like the LogManager's jobs, the first round waits log.initial.task.delay.ms: opening a
        # store (and a test driving a manual clock) is not raced by compaction.
        self._stop.wait(self.config.initial_task_delay_ms / 1000)
        while not self._stop.is_set():
            try:
                cleaned = self.clean_filthiest_log(cleaner=cleaner) is not None
                self.run_retention()
            except Exception:  # noqa: BLE001 - a bug must not silently end the thread
                logger.exception("the cleaner thread %s hit an unexpected error", threading.current_thread().name)
                cleaned = False
            if not cleaned:
                self._stop.wait(self.config.cleaner_backoff_ms / 1000)

    # --- one round -----------------------------------------------------------------------------------

    def clean_filthiest_log(self, now_ms: int | None = None, cleaner: Cleaner | None = None) -> CleanerStats | None:
        """Clean the log that most needs it (one round); None when no log does. Errors are handled
        as the background threads do: an aborted round is dropped, a failing log marked uncleanable."""
        now_ms = self._clock.time_ms() if now_ms is None else now_ms
        to_clean = self.cleaner_manager.grab_filthiest_log(now_ms)
        if to_clean is None:
            return None
        cleaner = cleaner or self._default_cleaner()
        key = to_clean.log.key
        truncations = to_clean.log.truncations
        try:
            stats = cleaner.clean(to_clean)
        except CleaningAbortedError as exc:
            logger.info("%s", exc)
            self.totals.count_abort()
            self.cleaner_manager.done_cleaning(key, None)
            return None
        except (LogStoreError, OSError, ValueError) as exc:
            if is_resource_shortage(exc):  # not the log's fault: an aborted round, retried later
                logger.warning("cleaning of %s was aborted: %s; its segments stay as they were", to_clean.log.name, exc)
                self.totals.count_abort()
                self.cleaner_manager.done_cleaning(key, None)
                return None
            self._mark_uncleanable(key, to_clean.log, exc)
            self.cleaner_manager.done_cleaning(key, None)
            return None
        self._record(key, stats)
        self.cleaner_manager.done_cleaning(key, stats.end_offset, truncations)
        return stats

    def _default_cleaner(self) -> Cleaner:
        if self._idle_cleaner is None:
            self._idle_cleaner = self.new_cleaner()
        return self._idle_cleaner

    def _mark_uncleanable(self, key: TopicPartition, log: Log, exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}"
        logger.error("cleaning %s failed; it is marked uncleanable until the store reopens: %s", log.name, reason)
        self.totals.count_abort(failed=True)
        self.cleaner_manager.mark_uncleanable(key, reason)

    def _record(self, key: TopicPartition, stats: CleanerStats) -> None:
        self.totals.add(stats)
        self.last_stats[key] = stats
        logger.info("cleaned %s up to offset %d: %d -> %d bytes, %d records dropped, %.1f%% of the map used, %d ms",
                    stats.log, stats.end_offset, stats.size_bytes_before, stats.size_bytes_after,
                    stats.records_dropped, stats.map_utilization * 100, stats.duration_ms)

    # --- retention of compacted logs -----------------------------------------------------------------

    def run_retention(self, now_ms: int | None = None) -> int:
        """Retention on every idle compacted log (the LogManager's job skips them while the cleaner
        runs); returns the number of segments deleted. A failing log is marked uncleanable."""
        keys = self.cleaner_manager.grab_for_retention()
        logs = self._logs()
        deleted = 0
        try:
            for key in keys:
                log = logs.get(key)
                if log is None or log.closed or log.failed:
                    continue
                try:
                    deleted += len(log.delete_old_segments(now_ms=now_ms).deleted)
                except LogStoreError as exc:
                    self._mark_uncleanable(key, log, exc)
        finally:
            self.cleaner_manager.done_deleting(keys)
        return deleted

    # --- to completion -------------------------------------------------------------------------------

    def compact(self, keys: Iterable[TopicPartition], *, now_ms: int | None = None,
                progress: ProgressCallback | None = None, memory_bytes: int | None = None,
                retention: bool = True, offset_maps: Mapping[TopicPartition, PrebuiltMap] | None = None,
                ) -> dict[TopicPartition, CleanerStats | None]:
        """Clean each log in ``keys`` to completion, whatever its dirty ratio (honouring every other
        config), then apply its retention. Returns per log the summed statistics of its rounds
        (None when there was nothing to clean). ``progress(key, bytes)`` is told of bytes read.
        Errors propagate (a ``CleaningAbortedError`` when the log changed underneath).

        ``offset_maps`` gives, per log, a dirty section mapped by another engine (``PrebuiltMap``,
        from ``cleanable_ranges``): that log is cleaned in one round with it. A log whose cleanable
        range moved since the map was built raises ``CleaningAbortedError``."""
        cleaner = self.new_cleaner(memory_bytes) if memory_bytes is not None else self._default_cleaner()
        results: dict[TopicPartition, CleanerStats | None] = {}
        for key in keys:
            prebuilt = None if offset_maps is None else offset_maps.get(key)
            results[key] = self._compact_one(key, cleaner, now_ms, progress, prebuilt)
            if retention:
                log = self._logs()[key]
                log.delete_old_segments(now_ms=now_ms)
        return results

    def _compact_one(self, key: TopicPartition, cleaner: Cleaner, now_ms: int | None,
                     progress: ProgressCallback | None, prebuilt: PrebuiltMap | None = None) -> CleanerStats | None:
        total: CleanerStats | None = None
        on_bytes = None if progress is None else (lambda size: progress(key, size))
        while True:
            now = self._clock.time_ms() if now_ms is None else now_ms
            to_clean = self.cleaner_manager.grab_for_compaction(key, now)
            truncations = to_clean.log.truncations
            end_offset = None
            try:
                if to_clean.first_dirty_offset >= to_clean.first_uncleanable_offset:
                    return total
                offset_map = None
                if prebuilt is not None:
                    if (prebuilt.first_dirty_offset, prebuilt.first_uncleanable_offset) != (
                            to_clean.first_dirty_offset, to_clean.first_uncleanable_offset):
                        raise CleaningAbortedError(
                            f"cleaning of {to_clean.log.name} was aborted: its cleanable range is now "
                            f"[{to_clean.first_dirty_offset}, {to_clean.first_uncleanable_offset}), the offset map "
                            f"was built for [{prebuilt.first_dirty_offset}, {prebuilt.first_uncleanable_offset})")
                    offset_map, prebuilt = prebuilt.offset_map, None
                stats = cleaner.clean(to_clean, on_bytes, offset_map=offset_map)
                end_offset = stats.end_offset
            finally:
                self.cleaner_manager.done_cleaning(key, end_offset, truncations)
            self._record(key, stats)
            total = stats if total is None else total.merge(stats)
            if stats.end_offset >= to_clean.first_uncleanable_offset:
                return total

    def cleanable_ranges(self, keys: Iterable[TopicPartition], now_ms: int | None = None,
                         ) -> dict[TopicPartition, tuple[int, int]]:
        """Per log with anything to clean, its cleanable range ``(first dirty, first uncleanable)``
        at ``now_ms``: what another engine must map to build a ``PrebuiltMap``."""
        now = self._clock.time_ms() if now_ms is None else now_ms
        checkpoints = self.cleaner_manager.read_checkpoints()
        logs = self._logs()
        ranges = {}
        for key in keys:
            first_dirty, first_uncleanable, _ = self.cleaner_manager.cleanable_offsets(logs[key], checkpoints.get(key),
                                                                                         now)
            if first_dirty < first_uncleanable:
                ranges[key] = (first_dirty, first_uncleanable)
        return ranges

    def estimate_bytes(self, keys: Iterable[TopicPartition], now_ms: int | None = None) -> int:
        """Bytes a one-pass ``compact(keys)`` would read (map the dirty section, recopy up to its
        end): the length of a progress bar."""
        logs = self._logs()
        total = 0
        for key, (first_dirty, first_uncleanable) in self.cleanable_ranges(keys, now_ms).items():
            sizes = self.cleaner_manager.log_to_clean(logs[key], first_dirty, first_uncleanable)
            total += sizes.cleanable_bytes + sizes.clean_bytes + sizes.cleanable_bytes
        return total

    def stats(self) -> dict:
        """Cumulative statistics since the store opened, and the uncleanable logs with their errors."""
        result = self.totals.as_dict()
        result["uncleanable"] = {f"{topic}-{partition}": reason
                                 for (topic, partition), reason in self.cleaner_manager.uncleanable_logs().items()}
        return result
