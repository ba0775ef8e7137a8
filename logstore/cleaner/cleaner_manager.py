"""``LogCleanerManager``: which log the cleaner works on next, what of it is cleanable, where each
log's clean section ends, and the per-log states that keep cleaning apart from truncation, deletion
and retention (Kafka's LogCleanerManager; docs/design.md §8.3).

- **Checkpoints**: each data dir has a ``cleaner-offset-checkpoint`` (the checkpoint text format,
  replaced crash-safely) holding every compacted log's *first dirty offset*: everything below it has
  been cleaned. A value below the log start offset or beyond the log end offset is reset to the log
  start offset (and written back at once). A damaged file is treated as absent: logs are cleaned
  from their start again, which costs time, never data.
- **Cleanable range**: from the first dirty offset up to the *first uncleanable offset*: the base of
  the active segment (never cleaned), or earlier, the base of the first dirty segment holding a record
  newer than ``min.compaction.lag.ms``, or earlier still, the base of the segment holding the log's
  first unstable offset (an open transaction's data, and everything after it, is never compacted: a
  round only sees decided transactions). A log whose oldest dirty record is older than
  ``max.compaction.lag.ms`` must be cleaned whatever its ratio.
- **Choice**: among compacted logs that are idle and not marked uncleanable, the one with the highest
  cleanable ratio = dirty bytes / (clean + dirty bytes) strictly above ``min.cleanable.dirty.ratio``
  (or forced by the max lag).
- **States**: absent (idle), ``in-progress``, ``aborted`` (asked to stop; the round notices between
  batches) and ``paused`` (n nested pauses). ``abort_and_pause`` waits until a round in progress has
  stopped, so truncation, deletion or a forced compaction never race a round.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from typing import TYPE_CHECKING, Callable, Iterable

from ..errors import CorruptCheckpointError
from ..log.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from .cleaner import LogToClean

if TYPE_CHECKING:
    from ..fs import FileSystem
    from ..log.log import Log

logger = logging.getLogger(__name__)

IN_PROGRESS = "in-progress"
ABORTED = "aborted"
PAUSED = "paused"

TopicPartition = tuple[str, int]


class LogCleanerManager:
    """Cleaner checkpoints, the choice of the filthiest log and the per-log cleaning states."""

    def __init__(self, fs: FileSystem, logs: Callable[[], dict[TopicPartition, Log]],
                 dir_of: Callable[[TopicPartition], str], live_dirs: Callable[[], list[str]]) -> None:
        self._fs = fs
        self._logs = logs
        self._dir_of = dir_of
        self._live_dirs = live_dirs
        self._lock = threading.Condition()
        self._states: dict[TopicPartition, str] = {}
        self._pauses: dict[TopicPartition, int] = {}
        self.uncleanable: dict[TopicPartition, str] = {}  # partition -> the error that made it so

    # --- checkpoints -----------------------------------------------------------------------------

    def _checkpoint_file(self, dir_path: str) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(self._fs, os.path.join(dir_path, CLEANER_OFFSET_CHECKPOINT))

    def read_checkpoints(self) -> dict[TopicPartition, int]:
        """Every live dir's first dirty offsets (a damaged file counts as empty, and is reported)."""
        offsets: dict[TopicPartition, int] = {}
        for dir_path in self._live_dirs():
            try:
                offsets.update(self._checkpoint_file(dir_path).read())
            except CorruptCheckpointError as exc:
                logger.warning("ignoring a damaged cleaner checkpoint (its logs are cleaned from the start): %s", exc)
        return offsets

    def update_checkpoint(self, dir_path: str, updates: dict[TopicPartition, int | None]) -> None:
        """Rewrite ``dir_path``'s cleaner checkpoint with ``updates`` applied (None removes an entry),
        keeping only partitions that still live in that dir."""
        with self._lock:
            checkpoint = self._checkpoint_file(dir_path)
            try:
                offsets = checkpoint.read()
            except CorruptCheckpointError:
                offsets = {}
            for key, offset in updates.items():
                if offset is None:
                    offsets.pop(key, None)
                else:
                    offsets[key] = offset
            logs = self._logs()
            offsets = {key: offset for key, offset in offsets.items()
                       if key in logs and self._dir_of(key) == dir_path}
            checkpoint.write(offsets)

    def maybe_truncate_checkpoint(self, key: TopicPartition, offset: int) -> None:
        """After a truncation to ``offset``: lower the log's first dirty offset to it if it was
        higher (records appended again there are dirty), never raise it."""
        dir_path = self._dir_of(key)
        try:
            current = self._checkpoint_file(dir_path).read().get(key)
        except CorruptCheckpointError:
            return
        if current is not None and current > offset:
            self.update_checkpoint(dir_path, {key: offset})

    # --- the cleanable range -----------------------------------------------------------------------

    @staticmethod
    def cleanable_offsets(log: Log, checkpoint: int | None, now_ms: int) -> tuple[int, int, bool]:
        """``(first_dirty_offset, first_uncleanable_offset, reset)`` of ``log``; ``reset`` when the
        checkpoint was out of range and the log start offset is used instead."""
        start = log.log_start_offset
        if checkpoint is None:
            first_dirty, reset = start, False
        elif checkpoint < start or checkpoint > log.log_end_offset:
            first_dirty, reset = start, True
        else:
            first_dirty, reset = checkpoint, False
        segments = log.segments
        first_uncleanable = segments[-1].base_offset  # the active segment is never cleaned
        lag_ms = log.config.min_compaction_lag_ms
        if lag_ms > 0:
            for segment, following in zip(segments, segments[1:]):
                if following.base_offset <= first_dirty:
                    continue  # wholly clean
                if segment.max_timestamp_so_far.timestamp_ms > now_ms - lag_ms:
                    first_uncleanable = min(first_uncleanable, segment.base_offset)
                    break
        first_unstable = log.first_unstable_offset
        if first_unstable is not None and first_unstable < first_uncleanable:
            holding = bisect.bisect_right([segment.base_offset for segment in segments], first_unstable) - 1
            first_uncleanable = segments[max(holding, 0)].base_offset
        return first_dirty, max(first_uncleanable, first_dirty), reset

    @staticmethod
    def max_compaction_delay_ms(log: Log, first_dirty: int, first_uncleanable: int, now_ms: int) -> int:
        """How long past ``max.compaction.lag.ms`` the oldest dirty record is (0 when it is not)."""
        lag_ms = log.config.max_compaction_lag_ms
        segments = log.segments
        earliest = min((segment.read_first_batch_timestamp() for segment, following in zip(segments, segments[1:])
                        if following.base_offset > first_dirty and segment.base_offset < first_uncleanable
                        and segment.read_first_batch_timestamp() > 0), default=None)
        if earliest is None or earliest >= now_ms - lag_ms:
            return 0
        return (now_ms - lag_ms) - earliest

    @staticmethod
    def log_to_clean(log: Log, first_dirty: int, first_uncleanable: int, need_now: bool = False) -> LogToClean:
        """Sizes of the clean and cleanable sections (a segment holding ``first_dirty`` counts in both)."""
        segments = log.segments
        bounds = list(zip(segments, [segment.base_offset for segment in segments[1:]] + [2**63 - 1]))
        clean_bytes = sum(segment.size_bytes for segment, _ in bounds if segment.base_offset < first_dirty)
        cleanable_bytes = sum(segment.size_bytes for segment, next_base in bounds
                              if next_base > first_dirty and segment.base_offset < first_uncleanable)
        return LogToClean(log, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, need_now)

    # --- choosing ----------------------------------------------------------------------------------

    def grab_filthiest_log(self, now_ms: int) -> LogToClean | None:
        """The compacted log most worth cleaning now, marked in progress; None when none is."""
        with self._lock:
            checkpoints = self.read_checkpoints()
            resets: dict[str, dict[TopicPartition, int]] = {}
            best: LogToClean | None = None
            best_key = None
            for key, log in self._logs().items():
                if not self._cleanable_now(key, log):
                    continue
                first_dirty, first_uncleanable, reset = self.cleanable_offsets(log, checkpoints.get(key), now_ms)
                if reset:
                    resets.setdefault(self._dir_of(key), {})[key] = first_dirty
                delay_ms = self.max_compaction_delay_ms(log, first_dirty, first_uncleanable, now_ms)
                candidate = self.log_to_clean(log, first_dirty, first_uncleanable, delay_ms > 0)
                if candidate.total_bytes == 0:
                    continue
                if not ((candidate.need_compaction_now and candidate.cleanable_bytes > 0)
                        or candidate.cleanable_ratio > log.config.min_cleanable_dirty_ratio):
                    continue
                if best is None or candidate.cleanable_ratio > best.cleanable_ratio:
                    best, best_key = candidate, key
            for dir_path, updates in resets.items():
                self.update_checkpoint(dir_path, updates)
            if best_key is not None:
                self._states[best_key] = IN_PROGRESS
            return best

    def _cleanable_now(self, key: TopicPartition, log: Log) -> bool:
        return (log.config.compact and key not in self._states and key not in self.uncleanable
                and not (log.closed or log.failed or log.read_only))

    def grab_for_compaction(self, key: TopicPartition, now_ms: int) -> LogToClean:
        """``key``'s whole cleanable range whatever its ratio (``logstore compact``), marked in
        progress; waits for a round already in progress on it to finish first."""
        with self._lock:
            while self._states.get(key) in (IN_PROGRESS, ABORTED):
                self._lock.wait()
            if self._states.get(key) == PAUSED:
                raise RuntimeError(f"cleaning of {key[0]}-{key[1]} is paused")
            log = self._logs()[key]
            checkpoint = self.read_checkpoints().get(key)
            first_dirty, first_uncleanable, reset = self.cleanable_offsets(log, checkpoint, now_ms)
            if reset:
                self.update_checkpoint(self._dir_of(key), {key: first_dirty})
            self._states[key] = IN_PROGRESS
            return self.log_to_clean(log, first_dirty, first_uncleanable, True)

    def grab_for_retention(self) -> list[TopicPartition]:
        """Compacted logs that are idle and cleanable, marked in progress for the cleaner's retention."""
        with self._lock:
            keys = [key for key, log in self._logs().items() if self._cleanable_now(key, log)]
            for key in keys:
                self._states[key] = IN_PROGRESS
            return keys

    # --- states ------------------------------------------------------------------------------------

    def state(self, key: TopicPartition) -> str | None:
        with self._lock:
            return self._states.get(key)

    def is_aborted(self, key: TopicPartition) -> bool:
        return self._states.get(key) == ABORTED

    def done_cleaning(self, key: TopicPartition, end_offset: int | None, truncations: int | None = None) -> None:
        """A round on ``key`` ended: record ``end_offset`` (None: no progress) and make it idle, or
        paused when an abort was asked for meanwhile. ``truncations`` is the log's count when the
        round started: after a truncation since, the end offset may describe records that are gone,
        so none is recorded (the truncation lowered the checkpoint itself, under this same lock)."""
        with self._lock:
            state = self._states.get(key)
            log = self._logs().get(key)
            if truncations is not None and (log is None or log.truncations != truncations):
                end_offset = None
            if state == IN_PROGRESS:
                del self._states[key]
                if end_offset is not None and log is not None:
                    self.update_checkpoint(self._dir_of(key), {key: end_offset})
            elif state == ABORTED:
                self._states[key] = PAUSED
                self._pauses[key] = 1
            else:
                raise RuntimeError(f"cleaning of {key[0]}-{key[1]} ended in state {state!r}")
            self._lock.notify_all()

    def done_deleting(self, keys: Iterable[TopicPartition]) -> None:
        """The cleaner's retention of ``keys`` ended."""
        for key in keys:
            self.done_cleaning(key, None)

    def abort_and_pause(self, key: TopicPartition) -> None:
        """Stop any round on ``key`` (waiting until it has stopped) and keep it from being cleaned
        until ``resume``; pauses nest."""
        with self._lock:
            state = self._states.get(key)
            if state is None:
                self._states[key] = PAUSED
                self._pauses[key] = 1
            elif state == PAUSED:
                self._pauses[key] += 1
            elif state == IN_PROGRESS:
                self._states[key] = ABORTED
                while self._states.get(key) == ABORTED:
                    self._lock.wait()
                # done_cleaning turned the abort into one pause: ours
            else:  # aborted by another caller: wait for the round to stop, then add our pause
                while self._states.get(key) == ABORTED:
                    self._lock.wait()
                self._pauses[key] = self._pauses.get(key, 0) + 1
                self._states[key] = PAUSED

    def resume(self, key: TopicPartition) -> None:
        """Undo one ``abort_and_pause``."""
        with self._lock:
            if self._states.get(key) != PAUSED:
                raise RuntimeError(f"cleaning of {key[0]}-{key[1]} is not paused (state {self._states.get(key)!r})")
            self._pauses[key] -= 1
            if self._pauses[key] == 0:
                del self._states[key], self._pauses[key]
            self._lock.notify_all()

    def abort_cleaning(self, key: TopicPartition) -> None:
        """Stop any round on ``key`` and leave it idle."""
        self.abort_and_pause(key)
        self.resume(key)

    def uncleanable_logs(self) -> dict[TopicPartition, str]:
        """A copy of the uncleanable logs and why (safe while cleaner threads change them)."""
        with self._lock:
            return dict(self.uncleanable)

    def mark_uncleanable(self, key: TopicPartition, reason: str) -> None:
        with self._lock:
            self.uncleanable[key] = reason

    def forget(self, key: TopicPartition, dir_path: str) -> None:
        """``key`` was deleted: drop its checkpoint entry, state and uncleanable mark."""
        with self._lock:
            self.uncleanable.pop(key, None)
            self._states.pop(key, None)
            self._pauses.pop(key, None)
            self.update_checkpoint(dir_path, {key: None})
            self._lock.notify_all()
