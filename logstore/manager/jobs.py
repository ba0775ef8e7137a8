"""The background jobs of a ``LogManager`` on its ``Scheduler`` (Kafka's LogManager tasks), and
retention on demand.

A mixin of ``LogManager``. ``startup()`` schedules, each first after ``log.initial.task.delay.ms``:

| job                           | what it does                                   | every                                            |
|-------------------------------|------------------------------------------------|--------------------------------------------------|
| `log-retention`               | ``cleanup_logs()``: retention on every log     | ``log.retention.check.interval.ms`` (300000)     |
| `log-flusher`                 | ``flush_dirty_logs()``: logs past ``flush.ms`` | ``log.flush.scheduler.interval.ms`` (never)      |
| `recovery-point-checkpoint`   | writes ``recovery-point-offset-checkpoint``    | ``log.flush.offset.checkpoint.interval.ms`` (60000) |
| `log-start-offset-checkpoint` | writes ``log-start-offset-checkpoint``         | ``log.flush.start.offset.checkpoint.interval.ms`` (60000) |

and one-shot `delete-segment-files` jobs, ``file.delete.delay.ms`` after retention renamed segments
to ``.deleted``: the files stay open until then, so a reader holding them finishes its read. Segments
still waiting at shutdown are removed then; ``.deleted`` files left by a crash are removed by the next
open. A failing job logs its error and runs again at its next time; one log's error does not stop the
job for the others.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from ..log.checkpoint import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from ..config import LONG_MAX
from ..errors import InvalidConfigError, LogStoreError
from ..log.retention import RetentionResult, describe

if TYPE_CHECKING:
    from ..clock import Clock
    from ..cleaner.log_cleaner import LogCleaner
    from ..config import ManagerConfig
    from ..log.log import Log
    from ..timer.scheduler import Scheduler
    from ..log.segment import LogSegment

logger = logging.getLogger("logstore.manager")


class ManagerJobs:
    """Scheduled retention, flush and checkpoint jobs, and delayed deletion of segment files."""

    # Provided by LogManager.
    scheduler: Scheduler
    manager_config: ManagerConfig
    cleaner: LogCleaner | None
    topic_config: Callable
    read_only: bool
    _clock: Clock
    _jobs_started: bool
    _pending_deletes: dict[int, Sequence[LogSegment]]
    _deletes_lock: threading.Lock
    logs: Callable[[], list[Log]]
    get_log: Callable[[str, int], Log]
    partitions: Callable[[str], int]
    checkpoint: Callable[..., None]
    _check_writable: Callable[[], None]

    def startup(self) -> None:
        """Start the background jobs (idempotent; the context manager calls it). A read-only store
        runs none."""
        if self.read_only or self._jobs_started:
            return
        self._check_writable()
        if not self.scheduler.is_started:
            self.scheduler.startup()
        config = self.manager_config
        delay_ms = config.initial_task_delay_ms
        jobs = [("log-retention", self._retention_job, config.retention_check_interval_ms),
                ("log-flusher", self._flush_job, config.flush_check_interval_ms),
                ("recovery-point-checkpoint", self._recovery_point_job, config.recovery_point_checkpoint_interval_ms),
                ("log-start-offset-checkpoint", self._log_start_offset_job,
                 config.log_start_offset_checkpoint_interval_ms)]
        if self.cleaner is not None and config.cleaner_enable:  # first: the retention job asks if it runs
            self.cleaner.startup()
        for name, fn, period_ms in jobs:
            if period_ms < LONG_MAX:  # Kafka's "never" (the flusher's default) schedules nothing
                self.scheduler.schedule(name, fn, delay_ms, period_ms)
        self._jobs_started = True

    def _stop_jobs(self) -> None:
        """Stop the scheduler (waiting for a job in progress), then remove the files of segments
        whose delayed deletion had not run yet. The cleaner threads stop first (a round in progress
        is aborted without swapping anything)."""
        if self.cleaner is not None:
            self.cleaner.shutdown()
        self.scheduler.shutdown()
        self._jobs_started = False
        with self._deletes_lock:
            pending, self._pending_deletes = list(self._pending_deletes.values()), {}
        for segments in pending:
            self._delete_files(segments)

    # --- the jobs --------------------------------------------------------------------------------

    def _retention_job(self) -> None:
        # Compacted logs get their retention from the cleaner threads while they run (Kafka's rule).
        skip_compacted = self.cleaner is not None and self.cleaner.running
        for result in self.cleanup_logs(skip_compacted=skip_compacted):
            for line in describe(result):
                logger.info("%s", line)

    def _flush_job(self) -> None:
        self.flush_dirty_logs()

    def _recovery_point_job(self) -> None:
        self.checkpoint((RECOVERY_POINT_CHECKPOINT,))

    def _log_start_offset_job(self) -> None:
        self.checkpoint((LOG_START_OFFSET_CHECKPOINT,))

    def cleanup_logs(self, topic: str | None = None, *, dry_run: bool = False, now_ms: int | None = None,
                     skip_compacted: bool = False) -> list[RetentionResult]:
        """Apply retention now to every log (or every partition of ``topic``); returns what was
        deleted per log (with ``dry_run``, what would be, changing nothing). A log that fails is
        reported in the log output and skipped; the others are still processed."""
        if not dry_run:
            self._check_writable()
        logs = self.logs() if topic is None else [self.get_log(topic, p) for p in range(self.partitions(topic))]
        results = []
        for log in logs:
            if log.closed or (log.failed and not dry_run) or (skip_compacted and log.config.compact):
                continue
            try:
                results.append(log.delete_old_segments(now_ms=now_ms, dry_run=dry_run))
            except LogStoreError as exc:
                if topic is not None:
                    raise
                logger.error("retention of %s failed: %s", log.name, exc)
        return results

    def flush_dirty_logs(self) -> int:
        """Flush every log not flushed for ``flush.ms``; returns how many were flushed."""
        flushed = 0
        now_ms = self._clock.time_ms()
        for log in self.logs():
            if log.read_only or log.closed or log.failed or now_ms - log.last_flush_ms < log.config.flush_ms:
                continue
            try:
                log.flush()
                flushed += 1
            except LogStoreError as exc:
                logger.error("flushing %s failed: %s", log.name, exc)
        return flushed

    # --- compaction on demand -----------------------------------------------------------------------

    def compact(self, topic: str | None = None, partition: int | None = None, *, now_ms: int | None = None,
                progress: Callable[[tuple[str, int], int], None] | None = None,
                offset_maps: Mapping[tuple[str, int], object] | None = None) -> dict[tuple[str, int], object]:
        """Compact to completion every partition of every compacted topic, or of ``topic`` (which
        must be compacted), or just ``partition`` of it: round after round whatever the dirty ratio,
        honouring ``min.compaction.lag.ms`` and ``delete.retention.ms``, then retention. Returns
        ``CleanerStats`` per partition (None where nothing was dirty). ``progress(key, bytes)``.
        ``offset_maps``: dirty sections mapped by another engine (``log_cleaner.PrebuiltMap`` per
        partition, built over ``compaction_ranges``), as the Spark compaction job does."""
        return self.cleaner.compact(self._compaction_keys(topic, partition), now_ms=now_ms, progress=progress,
                                    offset_maps=offset_maps)

    def compaction_ranges(self, topic: str | None = None, partition: int | None = None, *,
                          now_ms: int | None = None) -> dict[tuple[str, int], tuple[int, int]]:
        """Per partition that ``compact(topic, partition, now_ms=now_ms)`` would clean, its cleanable
        range ``(first dirty offset, first uncleanable offset)``."""
        return self.cleaner.cleanable_ranges(self._compaction_keys(topic, partition), now_ms)

    def compaction_estimate_bytes(self, topic: str | None = None, partition: int | None = None) -> int:
        """What ``compact(topic, partition)`` will read in one pass (a progress bar's length)."""
        return self.cleaner.estimate_bytes(self._compaction_keys(topic, partition))

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
        self.cleaner.cleaner_manager.maybe_truncate_checkpoint(log.key, offset)

    # --- delayed deletion of segment files ---------------------------------------------------------

    def _schedule_file_delete(self, segments: Sequence[LogSegment], delay_ms: int) -> None:
        """Log.schedule_file_delete: remove ``segments`` (already renamed ``.deleted``) later."""
        if not self._jobs_started or delay_ms == 0:
            self._delete_files(segments)
            return
        token = id(segments)
        with self._deletes_lock:
            self._pending_deletes[token] = segments

        def delete() -> None:
            with self._deletes_lock:
                doomed = self._pending_deletes.pop(token, None)
            if doomed is not None:
                self._delete_files(doomed)

        self.scheduler.schedule("delete-segment-files", delete, delay_ms)

    @staticmethod
    def _delete_files(segments: Sequence[LogSegment]) -> None:
        for segment in segments:
            try:
                segment.delete()
            except OSError as exc:  # the next open removes leftover .deleted files
                logger.warning("removing %s failed: %s", segment.log_path, exc)
