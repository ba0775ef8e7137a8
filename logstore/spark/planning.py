"""Planning reads of a store for Spark (no pyspark): which partitions, which offset ranges, how many
records per micro-batch, and what happens to offsets retention already deleted.

Everything here runs on the driver (Spark's planner worker or the long-lived streaming source
process) except ``open_partition``, which a read task uses. Stores are opened read-only, so a Spark
job reads while a writer process holds the store.

* ``plan_batch``: one ``OffsetRange`` per topic-partition with data, split by ``minPartitions``
  (Kafka's rule: ranges are cut into about ``size / total × minPartitions`` equal pieces).
* ``StreamPlanner``: the streaming source's state machine. Offsets are Kafka's JSON
  ``{"topic": {"0": next_offset}}``; ``latest_offset`` caps each micro-batch at
  ``maxOffsetsPerTrigger`` split over the partitions in proportion to their backlog (exactly the
  limit in total, the remainder going to the largest fractions) and never past the
  ``Trigger.AvailableNow`` target.
* ``kafka.isolation.level=read_committed``: a partition's end ("latest") is its last stable offset
  (``bounds_of``), so a read never waits on, nor returns, a transaction still open.
* Data loss (a start offset below the log start offset: retention deleted it; or above the log end
  offset: the partition was truncated or recreated) raises ``DataLossError`` with
  ``failOnDataLoss=true`` (the default) and otherwise skips to the earliest offset still there.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Mapping

from ..errors import RequestError
from ..manager.log_manager import LogManager
from .options import EARLIEST, LATEST, SourceOptionError, SourceOptions, TopicPartition

Bounds = dict[TopicPartition, tuple[int, int]]
"""Per partition: (log start offset, end): the end is the log end offset, or under read_committed
the last stable offset (what a Kafka consumer at that isolation level sees as the end)."""


class DataLossError(RequestError):
    """Offsets a query needs are gone (retention deleted them, or the partition was truncated)."""


@dataclass(frozen=True)
class OffsetRange:
    """Records ``[start, end)`` of one topic-partition: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


# --- the store ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def open_view(options: SourceOptions, keys=()) -> Iterator[LogManager]:
    """A read-only view of the store loading only ``keys`` (none: topics metadata only)."""
    manager = LogManager(list(options.data_dirs), read_only=True, load_only=set(keys))
    try:
        yield manager
    finally:
        manager.close()


def select_partitions(options: SourceOptions, manager: LogManager) -> list[TopicPartition]:
    """The topic-partitions a query reads: every partition of the subscribed topics (or of the topics
    matching the pattern), or the assigned ones. A named topic or partition that does not exist is
    an error; a pattern may match nothing."""
    topics = manager.topics()
    if options.subscribe_pattern is not None:
        return [(topic, p) for topic in topics if options.selects(topic) for p in range(manager.partitions(topic))]
    if options.assign is not None:
        for topic, partition in options.assign:
            _check_topic(topic, topics, options)
            if partition >= manager.partitions(topic):
                raise SourceOptionError(f"option assign: topic {topic!r} has no partition {partition} "
                                        f"(partitions: 0..{manager.partitions(topic) - 1})")
        return sorted(options.assign)
    for topic in options.subscribe:
        _check_topic(topic, topics, options)
    return [(topic, p) for topic in sorted(options.subscribe) for p in range(manager.partitions(topic))]


def _check_topic(topic: str, topics: list[str], options: SourceOptions) -> None:
    if topic not in topics:
        raise SourceOptionError(f"topic {topic!r} does not exist in the store at {','.join(options.data_dirs)} "
                                f"(topics: {', '.join(topics) or 'none'})")


def bounds_of(manager: LogManager, keys, read_committed: bool = False) -> Bounds:
    """``(log start offset, end)`` of each partition, refreshed to what the writer has appended by
    now; the end is the log end offset, or with ``read_committed`` the last stable offset."""
    bounds = {}
    for key in keys:
        log = manager.get_log(*key)
        log.refresh()
        bounds[key] = (log.log_start_offset, log.last_stable_offset if read_committed else log.log_end_offset)
    return bounds


def resolve_starting(options: SourceOptions, manager: LogManager, bounds: Bounds) -> dict[TopicPartition, int]:
    """Each partition's first offset to read: by timestamp (``startingTimestamp``, else
    ``startingOffsetsByTimestamp`` for the partitions it names; through the time index), else by
    ``startingOffsets``. -2/-1 and the words become the log start/end offset. A partition with no
    record that late follows ``startingOffsetsByTimestampStrategy``."""
    def no_record(key: TopicPartition, timestamp_ms: int, log_end: int) -> int:
        if options.timestamp_strategy == "error":
            raise SourceOptionError(f"partition {key[0]}-{key[1]} has no record with timestamp >= {timestamp_ms} "
                                    "(starting timestamp); set startingOffsetsByTimestampStrategy=latest to start "
                                    "at its end")
        return log_end

    return _resolve(manager, bounds, options.starting, options.starting_timestamps, EARLIEST, "starting", no_record)


def resolve_ending(options: SourceOptions, manager: LogManager, bounds: Bounds) -> dict[TopicPartition, int]:
    """Each partition's end offset (exclusive) for a batch query: before the first record at or after
    the ending timestamp (the log end when there is none), else by ``endingOffsets``."""
    return _resolve(manager, bounds, options.ending, options.ending_timestamps, LATEST, "ending",
                    lambda key, timestamp_ms, log_end: log_end)


def _resolve(manager: LogManager, bounds: Bounds, spec, timestamps, default: int, which: str,
             no_record) -> dict[TopicPartition, int]:
    """Per partition: the offset of its timestamp when ``timestamps`` gives one (``no_record`` decides
    when no record is that late), else what ``spec`` says (``default`` for partitions it leaves out)."""
    _check_named_partitions(spec, bounds, f"{which}Offsets")
    _check_named_partitions(timestamps, bounds, f"{which}OffsetsByTimestamp")
    offsets = {}
    for key, (log_start, log_end) in bounds.items():
        timestamp_ms = _timestamp_for(timestamps, key)
        if timestamp_ms is None:
            offsets[key] = _pick(spec, key, log_start, log_end, default)
            continue
        found = manager.get_log(*key).offset_for_timestamp(timestamp_ms)
        offsets[key] = no_record(key, timestamp_ms, log_end) if found is None else found
    return offsets


def _timestamp_for(spec, key: TopicPartition) -> int | None:
    return spec.get(key) if isinstance(spec, dict) else spec


def _pick(spec, key: TopicPartition, log_start: int, log_end: int, default: int) -> int:
    """The offset ``spec`` gives ``key``; a partition a JSON spec leaves out gets ``default``."""
    if isinstance(spec, str):
        return log_start if spec == "earliest" else log_end
    offset = spec.get(key, default)
    return log_start if offset == EARLIEST else log_end if offset == LATEST else offset


def _check_named_partitions(spec, bounds: Bounds, name: str) -> None:
    if isinstance(spec, dict):
        extra = sorted(set(spec) - set(bounds))
        if extra:
            raise SourceOptionError(f"option {name} names {extra[0][0]}-{extra[0][1]}, which the query does not "
                                    f"read (it reads {', '.join(f'{t}-{p}' for t, p in sorted(bounds)) or 'nothing'})")


def checked_start(key: TopicPartition, start: int, log_start: int, log_end: int, fail_on_data_loss: bool) -> int:
    """``start``, or the log start offset when offsets before it are gone and the query tolerates
    data loss; raises ``DataLossError`` otherwise."""
    if log_start <= start <= log_end:
        return start
    if start < log_start:
        what = (f"offsets {start}..{log_start - 1} of {key[0]}-{key[1]} were deleted (retention or "
                f"delete_records); the log now starts at {log_start}")
    else:
        what = (f"offset {start} of {key[0]}-{key[1]} is past its log end offset {log_end} (the partition was "
                "truncated or recreated)")
    if fail_on_data_loss:
        raise DataLossError(f"{what}. Set the option failOnDataLoss=false to go on from the earliest offset "
                            "still there")
    return log_start if start < log_start else min(start, log_end) if start <= log_end else log_start


def checked_range(key: TopicPartition, start: int, end: int, log_start: int, log_end: int,
                  fail_on_data_loss: bool) -> tuple[int, int]:
    """``[start, end)`` checked against the log's bounds now (``checked_start``, and an end past the
    log end offset, after a truncation, stops there when the query tolerates data loss)."""
    start = checked_start(key, start, log_start, log_end, fail_on_data_loss)
    if end > log_end:
        if fail_on_data_loss:
            raise DataLossError(f"ending offset {end} of {key[0]}-{key[1]} is past its log end offset {log_end} "
                                "(not written, or truncated). Set the option failOnDataLoss=false to stop at the log end")
        end = log_end
    return start, end


# --- batch planning ----------------------------------------------------------------------------------


def plan_ranges(starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int], bounds: Bounds,
                fail_on_data_loss: bool) -> list[OffsetRange]:
    """One range per partition with records to read, checked against the log's bounds."""
    ranges = []
    for key in sorted(ends):
        log_start, log_end = bounds[key]
        start, end = checked_range(key, starts.get(key, log_start), ends[key], log_start, log_end, fail_on_data_loss)
        if start > end:
            raise SourceOptionError(f"{key[0]}-{key[1]}: the starting offset {start} is after the ending offset {end}")
        if end > start:
            ranges.append(OffsetRange(key[0], key[1], start, end))
    return ranges


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Cut ranges so there are about ``min_partitions`` tasks: each range into
    ``max(round(size / total × min_partitions), 1)`` nearly equal pieces (Kafka's rule)."""
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    result = []
    for r in ranges:
        parts = min(max(round(r.size / total * min_partitions), 1), r.size)
        for index in range(parts):
            start = r.start + r.size * index // parts
            end = r.start + r.size * (index + 1) // parts
            result.append(OffsetRange(r.topic, r.partition, start, end))
    return result


def plan_batch(options: SourceOptions) -> list[OffsetRange]:
    """The tasks of a batch read, resolved against the store as it is now."""
    with open_view(options) as catalog:
        keys = select_partitions(options, catalog)
    with open_view(options, keys) as manager:
        bounds = bounds_of(manager, keys, options.read_committed)
        starts = resolve_starting(options, manager, bounds)
        ends = resolve_ending(options, manager, bounds)
    return split_ranges(plan_ranges(starts, ends, bounds, options.fail_on_data_loss), options.min_partitions)


# --- streaming ----------------------------------------------------------------------------------------


def rate_limit(starts: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_records: int | None) -> dict[TopicPartition, int]:
    """The end offsets of the next micro-batch: ``latest``, or with ``max_records`` at most that many
    records in all, shared in proportion to each partition's backlog (largest remainders get the
    rounding), so a backlog of N records takes ceil(N / max_records) micro-batches."""
    backlog = {key: max(latest[key] - starts.get(key, latest[key]), 0) for key in latest}
    total = sum(backlog.values())
    if max_records is None or total <= max_records:
        return dict(latest)
    shares = {key: max_records * size / total for key, size in backlog.items()}
    taken = {key: int(share) for key, share in shares.items()}
    left = max_records - sum(taken.values())
    for key in sorted(shares, key=lambda k: (taken[k] - shares[k], k))[:left]:
        taken[key] += 1
    return {key: starts.get(key, latest[key]) + taken[key] for key in latest}


class StreamPlanner:
    """The streaming source's offsets (runs in Spark's long-lived source process on the driver).
    Partitions that appear later (a new topic matching the pattern) start at their log start."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow

    def _bounds(self) -> tuple[Bounds, LogManager]:
        with open_view(self.options) as catalog:
            keys = select_partitions(self.options, catalog)
        manager = LogManager(list(self.options.data_dirs), read_only=True, load_only=set(keys))
        return bounds_of(manager, keys, self.options.read_committed), manager

    def initial_offset(self) -> dict[TopicPartition, int]:
        """Where a new query starts (``startingOffsets``/``startingTimestamp``; default latest)."""
        bounds, manager = self._bounds()
        try:
            return resolve_starting(self.options, manager, bounds)
        finally:
            manager.close()

    def latest_available(self) -> Bounds:
        """Each selected partition's bounds now."""
        bounds, manager = self._bounds()
        manager.close()
        return bounds

    def prepare_available_now(self) -> None:
        """Fix the end of an ``availableNow`` query: what exists now."""
        self.target = {key: log_end for key, (_, log_end) in self.latest_available().items()}

    def latest_offset(self, start: Mapping[TopicPartition, int], max_records: int | None) -> dict[TopicPartition, int]:
        """The end of the next micro-batch from ``start``: equal to ``start`` when nothing is new. A
        partition new since ``start`` counts from its log start offset; one that went away keeps its
        offset; none goes backwards."""
        bounds = self.latest_available()
        latest = {key: log_end for key, (_, log_end) in bounds.items()}
        if self.target is not None:
            latest = {key: min(offset, self.target.get(key, bounds[key][0])) for key, offset in latest.items()}
        starts = {key: start.get(key, bounds[key][0]) for key in latest}
        ends = rate_limit(starts, latest, max_records)
        for key, offset in start.items():
            ends[key] = max(ends.get(key, offset), offset)
        return ends

    def partitions(self, start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> list[OffsetRange]:
        """The tasks of the micro-batch ``(start, end]``; a partition new since ``start`` starts at its
        log start offset. Data loss is checked here, against the logs as they are now."""
        moved = {key: offset for key, offset in end.items() if offset > start.get(key, -1)}
        if not moved:
            return []
        with open_view(self.options, moved) as manager:
            bounds = bounds_of(manager, moved, self.options.read_committed)
        ranges = []
        for key, end_offset in sorted(moved.items()):
            log_start, log_end = bounds[key]
            first, end_offset = checked_range(key, start.get(key, log_start), end_offset, log_start, log_end,
                                              self.options.fail_on_data_loss)
            if end_offset > first:
                ranges.append(OffsetRange(key[0], key[1], first, end_offset))
        return split_ranges(ranges, self.options.min_partitions)
