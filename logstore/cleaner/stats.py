"""What the cleaner measures and how it paces itself: ``CleanerStats`` (one round of one log),
``CleanerTotals`` (everything since the store opened) and ``Throttler`` (Kafka's cleaner I/O
throttle; docs/design.md §8.3).

The statistics are plain counters filled by ``Cleaner`` as it reads and writes; ``LogCleaner`` keeps
the last round's and adds every round into the totals, so the API (``LogCleaner.stats``,
``LogCleaner.last_stats``) and ``logstore compact`` report the same numbers.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..clock import Clock


@dataclass
class CleanerStats:
    """One cleaning round (or, summed by ``merge``, several rounds) of one log."""

    log: str
    start_ms: int = 0
    end_ms: int = 0
    first_dirty_offset: int = 0
    end_offset: int = 0  # the new first dirty offset: everything below it is clean
    bytes_read: int = 0  # while mapping and while recopying
    bytes_written: int = 0
    records_read: int = 0  # while recopying
    records_kept: int = 0
    records_dropped: int = 0  # superseded, without a key, or tombstones past their horizon
    tombstones_removed: int = 0
    markers_removed: int = 0  # transaction markers whose data was gone and whose delete horizon had passed
    keys_mapped: int = 0
    map_utilization: float = 0.0
    groups: int = 0
    passes: int = 1
    size_bytes_before: int = 0
    size_bytes_after: int = 0

    @property
    def duration_ms(self) -> int:
        return self.end_ms - self.start_ms

    def merge(self, later: "CleanerStats") -> "CleanerStats":
        """These stats followed by a later round of the same log (for a clean to completion)."""
        merged = CleanerStats(self.log, self.start_ms, later.end_ms, self.first_dirty_offset, later.end_offset)
        for name in ("bytes_read", "bytes_written", "records_read", "records_dropped", "tombstones_removed",
                     "markers_removed", "groups", "passes"):
            setattr(merged, name, getattr(self, name) + getattr(later, name))
        merged.records_kept = later.records_kept  # the last round recopied everything below its end
        merged.keys_mapped = max(self.keys_mapped, later.keys_mapped)
        merged.map_utilization = max(self.map_utilization, later.map_utilization)
        merged.size_bytes_before, merged.size_bytes_after = self.size_bytes_before, later.size_bytes_after
        return merged

    def as_dict(self) -> dict:
        result = asdict(self)
        result["duration_ms"] = self.duration_ms
        return result


@dataclass
class CleanerTotals:
    """Cumulative counters of every round since the store opened (thread-safe through ``add``)."""

    rounds: int = 0  # map passes: a round that maps its dirty section in N passes counts N (as N Kafka rounds would)
    aborted_rounds: int = 0
    failed_rounds: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_dropped: int = 0
    tombstones_removed: int = 0
    duration_ms: int = 0
    max_map_utilization: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, stats: CleanerStats) -> None:
        with self._lock:
            self.rounds += stats.passes
            self.bytes_read += stats.bytes_read
            self.bytes_written += stats.bytes_written
            self.records_dropped += stats.records_dropped
            self.tombstones_removed += stats.tombstones_removed
            self.duration_ms += stats.duration_ms
            self.max_map_utilization = max(self.max_map_utilization, stats.map_utilization)

    def count_abort(self, failed: bool = False) -> None:
        with self._lock:
            if failed:
                self.failed_rounds += 1
            else:
                self.aborted_rounds += 1

    def as_dict(self) -> dict:
        with self._lock:
            return {item.name: getattr(self, item.name) for item in fields(self) if not item.name.startswith("_")}


class Throttler:
    """Keeps the observed rate of ``maybe_throttle(n)`` calls at or under ``max_bytes_per_second``,
    shared by all cleaner threads: every ``check_interval_ms`` it compares the bytes seen with the
    time passed and sleeps off any excess (on the given clock, so tests drive it with a manual one).
    An infinite rate never sleeps and costs one comparison."""

    def __init__(self, clock: Clock, max_bytes_per_second: float = float("inf"),
                 check_interval_ms: int = 300) -> None:
        if not max_bytes_per_second > 0:
            raise ValueError(f"max_bytes_per_second must be > 0, got {max_bytes_per_second!r}")
        self._clock = clock
        self.max_bytes_per_second = max_bytes_per_second
        self.check_interval_ms = check_interval_ms
        self._lock = threading.Lock()
        self._period_start_ms = clock.monotonic_ms()
        self._observed = 0
        self.slept_ms = 0

    def maybe_throttle(self, size_bytes: int) -> None:
        if self.max_bytes_per_second == float("inf"):
            return
        sleep_ms = 0
        with self._lock:
            self._observed += size_bytes
            now_ms = self._clock.monotonic_ms()
            elapsed_ms = now_ms - self._period_start_ms
            if elapsed_ms < self.check_interval_ms:
                return
            rate = self._observed * 1000.0 / max(elapsed_ms, 1)
            if rate > self.max_bytes_per_second:
                sleep_ms = round(self._observed * 1000.0 / self.max_bytes_per_second - elapsed_ms)
            self._observed = 0
            self._period_start_ms = now_ms + max(sleep_ms, 0)
        if sleep_ms > 0:
            self.slept_ms += sleep_ms
            self._clock.sleep_ms(sleep_ms)


def describe(stats: CleanerStats | None, log_name: str) -> str:
    """One line summing up the compaction of one log, as ``logstore compact`` prints it."""
    if stats is None:
        return f"{log_name}: nothing to compact (no dirty segment below the active one)"
    before, after = stats.size_bytes_before, stats.size_bytes_after
    change = f" ({(after - before) * 100 / before:+.1f}%)" if before else ""
    passes = f"{stats.passes} pass{'es' if stats.passes != 1 else ''}"
    # After a clean to completion the cleaned section holds one record per key, so records kept are
    # also the keys kept.
    return (f"{log_name}: {before} -> {after} bytes{change}, {stats.records_kept} records kept "
            f"(one per key), {stats.records_dropped} dropped, {stats.tombstones_removed} tombstones removed, "
            f"{passes}, {stats.duration_ms} ms, offsets below {stats.end_offset} clean")
