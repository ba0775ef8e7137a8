"""Retention: which of a log's oldest segments to delete, and why (Kafka's ``deleteOldSegments``).

This module owns the decision; ``Log.delete_old_segments`` owns the deletion. Three rules
run in Kafka's order, each over what the previous one left:

1. **log start offset** (every cleanup policy): a segment goes when the next segment starts at or
   below the log start offset (``delete_records`` moved it past the whole segment);
2. **size** (``retention.bytes`` >= 0, policy containing ``delete``): the oldest segments go while
   what remains stays at or above ``retention.bytes``, so a log never drops below the limit and may
   stay above it by less than a segment;
3. **time** (``retention.ms`` >= 0, policy containing ``delete``): a segment goes when ``now`` minus
   its largest record timestamp (the ``.log`` file's mtime when it has no timestamps) exceeds
   ``retention.ms``.

Each rule walks from the oldest segment and stops at the first that stays: retention never skips a
segment, so what remains is always a gap-free suffix. An empty active segment is never deleted; a
non-empty active segment may be (the log rolls first, so the log end offset never moves back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:  # annotations only: Log imports this module
    from .segment import LogSegment

LOG_START_OFFSET_BREACH = "log-start-offset"
SIZE_BREACH = "retention.bytes"
TIME_BREACH = "retention.ms"


@dataclass(frozen=True)
class RetentionDecision:
    """One segment that retention deletes: where it starts and ends, its size and the rule."""

    base_offset: int
    next_offset: int  # the base offset of the following segment (the log end offset for the last)
    size_bytes: int
    largest_timestamp_ms: int
    reason: str


@dataclass(frozen=True)
class RetentionResult:
    """What retention did (or, for a dry run, would do) to one log."""

    log: str
    deleted: tuple[RetentionDecision, ...]
    log_start_offset: int  # after the deletion (unchanged for a dry run)
    dry_run: bool = False

    @property
    def deleted_bytes(self) -> int:
        return sum(decision.size_bytes for decision in self.deleted)

    @property
    def deleted_records(self) -> int:
        """Offsets that became unreadable: from the old first segment to the new log start offset."""
        if not self.deleted:
            return 0
        return self.deleted[-1].next_offset - self.deleted[0].base_offset


def largest_timestamp_ms(segment: LogSegment, mtime_ms: Callable[[str], int]) -> int:
    """The segment's largest record timestamp, or its data file's mtime when it has none."""
    largest = segment.max_timestamp_so_far.timestamp_ms
    return largest if largest >= 0 else mtime_ms(segment.log_path)


def plan_retention(segments: Sequence[LogSegment], *, log_end_offset: int, log_start_offset: int,
                   delete_policy: bool, retention_bytes: int, retention_ms: int, now_ms: int,
                   mtime_ms: Callable[[str], int]) -> list[RetentionDecision]:
    """The segments (a prefix of ``segments``, oldest first) that retention deletes, with reasons.

    Pure: reads segment sizes and timestamps, changes nothing."""
    segments = list(segments)
    bounds = [segment.base_offset for segment in segments[1:]] + [log_end_offset]
    decisions: list[RetentionDecision] = []
    position = 0  # the first segment still kept

    def walk(reason: str, predicate: Callable[[int], bool]) -> None:
        nonlocal position
        while position < len(segments):
            segment = segments[position]
            last = position == len(segments) - 1
            if last and segment.size_bytes == 0:
                return  # an empty active segment stays: something must hold the log end offset
            if not predicate(position):
                return
            decisions.append(RetentionDecision(segment.base_offset, bounds[position], segment.size_bytes,
                                               segment.max_timestamp_so_far.timestamp_ms, reason))
            position += 1

    # 1. The log start offset moved past whole segments (the last segment always stays for this rule).
    walk(LOG_START_OFFSET_BREACH,
         lambda at: at < len(segments) - 1 and segments[at + 1].base_offset <= log_start_offset)
    if not delete_policy:
        return decisions
    # 2. Size: delete while what remains stays >= retention.bytes.
    if retention_bytes >= 0:
        excess = sum(segment.size_bytes for segment in segments[position:]) - retention_bytes

        def over_size(at: int) -> bool:
            nonlocal excess
            if excess - segments[at].size_bytes < 0:
                return False
            excess -= segments[at].size_bytes
            return True

        walk(SIZE_BREACH, over_size)
    # 3. Time: the newest record of the segment is older than retention.ms.
    if retention_ms >= 0:
        walk(TIME_BREACH, lambda at: now_ms - largest_timestamp_ms(segments[at], mtime_ms) > retention_ms)
    return decisions


def describe(result: RetentionResult) -> list[str]:
    """Human lines, one per deleted segment, for the CLI and the logs."""
    verb = "would delete" if result.dry_run else "deleted"
    return [f"{result.log}: {verb} segment {decision.base_offset} (offsets {decision.base_offset}.."
            f"{decision.next_offset - 1}, {decision.size_bytes} bytes) by {decision.reason}"
            for decision in result.deleted]
