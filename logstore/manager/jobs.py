"""``BackgroundJobs``: the jobs a store runs on its ``Scheduler`` (Kafka's LogManager tasks), the
retention and flush passes they make over the logs, and the delayed removal of deleted segment files.

A ``LogManager`` holds one and starts it in ``startup()``; ``start`` schedules, each first after
``log.initial.task.delay.ms``:

| job                           | what it does                                   | every                                            |
|-------------------------------|------------------------------------------------|--------------------------------------------------|
| `log-retention`               | ``apply_retention``: on every log              | ``log.retention.check.interval.ms`` (300000)     |
| `log-flusher`                 | ``flush_dirty_logs()``: logs past ``flush.ms`` | ``log.flush.scheduler.interval.ms`` (never)      |
| `recovery-point-checkpoint`   | writes ``recovery-point-offset-checkpoint``    | ``log.flush.offset.checkpoint.interval.ms`` (60000) |
| `log-start-offset-checkpoint` | writes ``log-start-offset-checkpoint``         | ``log.flush.start.offset.checkpoint.interval.ms`` (60000) |
| `producer-expiration`         | ``expire_producers()``: idle producers' state  | ``producer.id.expiration.check.interval.ms`` (600000) |
| `log-descriptor-release`      | ``release_idle_descriptors()``: idle logs'     | ``log.descriptor.idle.ms`` (300000)              |

and one-shot `delete-segment-files` jobs, ``file.delete.delay.ms`` after retention renamed segments
to ``.deleted``: the files stay open until then, so a reader holding them finishes its read. Segments
still waiting at shutdown are removed then; ``.deleted`` files left by a crash are removed by the next
open. A failing job logs its error and runs again at its next time; one log's error does not stop the
job for the others. A resource shortage (out of descriptors: ``errors.is_resource_shortage``) is logged
once, as a warning, when a job first meets it, and once more when the job succeeds again: a flood of
connections must not turn into a flood of log lines.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable, Sequence

from ..config import LONG_MAX
from ..errors import LogStoreError, is_resource_shortage
from ..log.checkpoint import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from ..log.retention import RetentionResult, describe

if TYPE_CHECKING:
    from ..cleaner.log_cleaner import LogCleaner
    from ..clock import Clock
    from ..config import ManagerConfig
    from ..log.log import Log
    from ..log.segment import LogSegment
    from ..timer.scheduler import Scheduler

logger = logging.getLogger(__name__)


class BackgroundJobs:
    """Scheduled retention, flush and checkpoint jobs of a store, and delayed deletion of segment
    files. ``logs()`` lists the store's open logs; ``checkpoint(which)`` writes its checkpoints."""

    def __init__(self, scheduler: Scheduler, config: ManagerConfig, clock: Clock, cleaner: LogCleaner | None,
                 logs: Callable[[], list[Log]], checkpoint: Callable[[tuple[str, ...]], None]) -> None:
        self.scheduler = scheduler
        self._config = config
        self._clock = clock
        self._cleaner = cleaner
        self._logs = logs
        self._checkpoint = checkpoint
        self.started = False
        self._pending_deletes: dict[int, Sequence[LogSegment]] = {}
        self._deletes_lock = threading.Lock()
        self._short_of: set[str] = set()  # the jobs whose last run met a resource shortage (logged)
        self._short_lock = threading.Lock()

    def start(self) -> None:
        """Start the scheduler (unless it runs already) and the cleaner threads
        (``log.cleaner.enable``), and schedule the jobs."""
        if not self.scheduler.is_started:
            self.scheduler.startup()
        config = self._config
        delay_ms = config.initial_task_delay_ms
        jobs = [("log-retention", self._retention_job, config.retention_check_interval_ms),
                ("log-flusher", self._flush_job, config.flush_check_interval_ms),
                ("recovery-point-checkpoint", self._recovery_point_job, config.recovery_point_checkpoint_interval_ms),
                ("log-start-offset-checkpoint", self._log_start_offset_job,
                 config.log_start_offset_checkpoint_interval_ms),
                ("producer-expiration", self.expire_producers, config.producer_id_expiration_check_interval_ms),
                ("log-descriptor-release", self.release_idle_descriptors, config.descriptor_idle_ms)]
        if self._cleaner is not None and config.cleaner_enable:  # first: the retention job asks if it runs
            self._cleaner.startup()
        for name, fn, period_ms in jobs:
            if period_ms < LONG_MAX:  # Kafka's "never" (the flusher's default) schedules nothing
                self.scheduler.schedule(name, fn, delay_ms, period_ms)
        self.started = True

    def stop(self) -> None:
        """Stop the scheduler (waiting for a job in progress), then remove the files of segments
        whose delayed deletion had not run yet. The cleaner threads stop first (a round in progress
        is aborted without swapping anything)."""
        if self._cleaner is not None:
            self._cleaner.shutdown()
        self.scheduler.shutdown()
        self.started = False
        with self._deletes_lock:
            pending, self._pending_deletes = list(self._pending_deletes.values()), {}
        for segments in pending:
            self._delete_files(segments)

    # --- the jobs --------------------------------------------------------------------------------

    def _retention_job(self) -> None:
        # Compacted logs get their retention from the cleaner threads while they run (Kafka's rule).
        skip_compacted = self._cleaner is not None and self._cleaner.running
        for result in self.apply_retention(self._logs(), skip_compacted=skip_compacted):
            for line in describe(result):
                logger.info("%s", line)

    def _flush_job(self) -> None:
        self.flush_dirty_logs()

    def _recovery_point_job(self) -> None:
        self._checkpoint_job("recovery-point-checkpoint", (RECOVERY_POINT_CHECKPOINT,))

    def _log_start_offset_job(self) -> None:
        self._checkpoint_job("log-start-offset-checkpoint", (LOG_START_OFFSET_CHECKPOINT,))

    def _checkpoint_job(self, job: str, which: tuple[str, ...]) -> None:
        try:
            self._checkpoint(which)
        except LogStoreError as exc:
            if not is_resource_shortage(exc):
                raise  # the scheduler logs it (a dir that went offline said so already)
            self._note_shortage(job, exc)
            return
        self._note_recovered(job)

    def _note_shortage(self, job: str, exc: BaseException) -> None:
        """Log a job's resource shortage the first time it meets one (it retries at its next run)."""
        with self._short_lock:
            first = job not in self._short_of
            self._short_of.add(job)
        if first:
            logger.warning("%s: %s; retried at each run, logged again only once it succeeds", job, exc)

    def _note_recovered(self, job: str) -> None:
        with self._short_lock:
            if job not in self._short_of:
                return
            self._short_of.discard(job)
        logger.warning("%s: succeeded again after a resource shortage", job)

    def apply_retention(self, logs: Sequence[Log], *, dry_run: bool = False, now_ms: int | None = None,
                        skip_compacted: bool = False, raise_errors: bool = False) -> list[RetentionResult]:
        """Apply retention now to ``logs``; returns what was deleted per log (with ``dry_run``, what
        would be, changing nothing). A log that fails is reported in the log output and skipped (the
        others are still processed), or with ``raise_errors`` raised."""
        results = []
        for log in logs:
            if log.closed or (log.failed and not dry_run) or (skip_compacted and log.config.compact):
                continue
            try:
                results.append(log.delete_old_segments(now_ms=now_ms, dry_run=dry_run))
            except LogStoreError as exc:
                if raise_errors:
                    raise
                if is_resource_shortage(exc):  # nothing deleted, or files the next open removes
                    self._note_shortage("log-retention", exc)
                    continue
                logger.error("retention of %s failed: %s", log.name, exc)
        return results

    def flush_dirty_logs(self) -> int:
        """Flush every log not flushed for ``flush.ms``; returns how many were flushed."""
        flushed = 0
        short = False
        now_ms = self._clock.time_ms()
        for log in self._logs():
            if log.read_only or log.closed or log.failed or now_ms - log.last_flush_ms < log.config.flush_ms:
                continue
            try:
                log.flush()
                flushed += 1
            except LogStoreError as exc:
                if is_resource_shortage(exc):  # the log stays writable: flushed at the next run
                    self._note_shortage("log-flusher", exc)
                    short = True
                    continue
                logger.error("flushing %s failed: %s", log.name, exc)
        if flushed and not short:
            self._note_recovered("log-flusher")
        return flushed

    def expire_producers(self) -> int:
        """Drop, in every writable log, the state of producers idle for ``producer.id.expiration.ms``
        that hold no open transaction there (``Log.expire_producers``); returns how many were dropped."""
        now_ms = self._clock.time_ms()
        dropped = 0
        for log in self._logs():
            if log.writable_now():
                dropped += len(log.expire_producers(now_ms, self._config.producer_id_expiration_ms))
        return dropped

    def release_idle_descriptors(self) -> int:
        """The active segments of logs unused since the previous run give back their descriptors and
        mappings (``Log.release_idle_descriptors``); returns how many descriptors that freed."""
        released = 0
        for log in self._logs():
            try:
                released += log.release_idle_descriptors()
            except (LogStoreError, OSError) as exc:  # one log's trouble does not stop the others
                logger.warning("releasing the descriptors of %s failed: %s", log.name, exc)
        return released

    # --- delayed deletion of segment files ---------------------------------------------------------

    def schedule_file_delete(self, segments: Sequence[LogSegment], delay_ms: int) -> None:
        """``Log.schedule_file_delete``: remove ``segments`` (already renamed ``.deleted``) after
        ``delay_ms``, or at once when the jobs are not running."""
        if not self.started or delay_ms == 0:
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
