"""Finding records by timestamp in a segment: the time index's entries, each confirmed by the data.

A time index entry ``(T, O)`` says that the batch ending at offset ``O`` holds the largest timestamp
``T`` of the segment so far (and that no earlier batch reached it). A lookup that skips batches on
that promise checks it first against the batch it names, as every offset index lookup is checked
(``LogSegment.scan_from``): a lying entry (a flipped byte) raises ``CorruptIndexError``, which the
``Log`` answers by rebuilding the indexes (a writer) or by scanning without them (a read-only view),
never by returning the wrong offset. One check per lookup, not per record.

A segment's largest timestamp (which decides whether a lookup skips it, and when retention deletes
it) is never taken from the time index alone: a read-only view, or a writer that did not recover the
segment, may find the index cut short or missing, and its last entry would understate the maximum.
``load_max_timestamp`` confirms the last entry by its batch and reads the headers after it — a few
for an intact index, whose final entry names (nearly) the segment's last batch.

The segment calls ``load_max_timestamp``, so this module does not import it: it works on any
``TimedSegment``, a protocol of just what the lookups use.
"""

from __future__ import annotations

import logging
from typing import Iterator, Protocol

from ..errors import CorruptIndexError
from ..records.decoder import HEADER_BYTES, BatchHeader, RecordBatch
from .index import OffsetPosition, TimeIndex, TimestampOffset

logger = logging.getLogger(__name__)


class TimedSegment(Protocol):
    """What the lookups use of a segment (``LogSegment`` is one, and calls ``load_max_timestamp``
    itself, which is why this module cannot import it): its time index, the header and batch scans
    that confirm an entry, and where a confirmed maximum is kept."""

    base_offset: int
    time_index: TimeIndex
    indexes_distrusted: bool  # a read-only view found the indexes lying: scan without them
    confirmed_max_timestamp: TimestampOffset | None  # the last time index entry once checked

    @property
    def log_path(self) -> str: ...

    @property
    def max_timestamp_so_far(self) -> TimestampOffset: ...

    def scan_headers(self, position: int = ..., end: int | None = ..., chunk_bytes: int = ...) -> Iterator[tuple]: ...

    def scan_from(self, offset: int, end: int | None = ..., chunk_bytes: int = ...,
                  entry: OffsetPosition | None = ...) -> Iterator[tuple]: ...

    def load_batch(self, position: int, header: BatchHeader, buffer: memoryview, at: int) -> RecordBatch: ...

    def translate_offset(self, offset: int, starting_position: int = ..., end: int | None = ...,
                         chunk_bytes: int = ...) -> tuple[int, BatchHeader] | None: ...


def find_offset_by_timestamp(segment: TimedSegment, timestamp_ms: int, starting_offset: int) -> tuple[int, int] | None:
    """The first record of ``segment`` with timestamp >= ``timestamp_ms`` and offset >=
    ``starting_offset``, as ``(timestamp_ms, offset)``; None when the segment has none."""
    entry = segment.time_index.lookup(timestamp_ms) if not segment.indexes_distrusted else TimestampOffset(-1, 0)
    start = max(entry.offset, starting_offset)
    # The entry (T, O) has T <= timestamp_ms (a floor entry, even in a damaged index): when it moves
    # the start, the batch ending at O must be there and have T as its max.
    check_time_entry = entry.offset > max(starting_offset, segment.base_offset)
    for batch_position, header, buffer, at in segment.scan_from(start):
        if check_time_entry and header.last_offset >= entry.offset:
            check_time_entry = False
            if header.last_offset != entry.offset or header.max_timestamp != entry.timestamp_ms:
                raise CorruptIndexError(f"time index {segment.time_index.path} entry {tuple(entry)} does not match "
                                        f"the batch ending at offset {header.last_offset}")
        if header.max_timestamp < timestamp_ms or header.last_offset < start:
            continue
        batch = segment.load_batch(batch_position, header, buffer, at)
        for record in batch.records(batch.index_of(starting_offset)):
            if record.timestamp_ms >= timestamp_ms:
                return record.timestamp_ms, record.offset
    if check_time_entry:
        raise CorruptIndexError(f"time index {segment.time_index.path} entry {tuple(entry)} names an offset past "
                                f"the batches of {segment.log_path}")
    return None


def load_max_timestamp(segment: TimedSegment) -> TimestampOffset:
    """The largest record timestamp of ``segment`` and the offset of the batch holding it (``(-1,
    base_offset)`` when none): the time index's last entry when the batch it names confirms it, raised
    by the batch headers after that batch (headers only). With no confirmed entry (none, a lying one,
    or distrusted indexes) every header is read."""
    entry, position = TimestampOffset(-1, segment.base_offset), 0
    last = entry if segment.indexes_distrusted else segment.time_index.last_entry
    if last != entry:
        try:
            found = segment.translate_offset(last.offset, chunk_bytes=HEADER_BYTES)
        except CorruptIndexError:
            found = None
        if found is not None and (found[1].last_offset, found[1].max_timestamp) == (last.offset, last.timestamp_ms):
            segment.confirmed_max_timestamp = last
            entry, position = last, found[0] + found[1].size_bytes
        else:  # checked_max_timestamp reports it; the maximum read from the headers is right anyway
            logger.warning("time index %s last entry %s does not match its batch: reading every header of %s",
                           segment.time_index.path, tuple(last), segment.log_path)
    for _, header, _, _ in segment.scan_headers(position, chunk_bytes=HEADER_BYTES):
        if header.max_timestamp > entry.timestamp_ms:
            entry = TimestampOffset(header.max_timestamp, header.last_offset)
    return entry


def checked_max_timestamp(segment: TimedSegment) -> int:
    """The segment's largest timestamp (``max_timestamp_so_far``, see ``load_max_timestamp``), its
    time index's last entry confirmed by the batch it names (a read-only view decides which segments
    to skip on it). Raises ``CorruptIndexError`` when the entry lies."""
    maximum = segment.max_timestamp_so_far
    entry = segment.time_index.last_entry if not segment.indexes_distrusted else segment.confirmed_max_timestamp
    if entry != segment.confirmed_max_timestamp and entry != (-1, segment.base_offset):
        found = segment.translate_offset(entry.offset, chunk_bytes=HEADER_BYTES)  # headers only
        if found is None or (found[1].last_offset, found[1].max_timestamp) != (entry.offset, entry.timestamp_ms):
            raise CorruptIndexError(f"time index {segment.time_index.path} last entry {tuple(entry)} does not "
                                    f"match the batch ending at that offset")
        segment.confirmed_max_timestamp = entry
    return maximum.timestamp_ms
