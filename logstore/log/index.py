"""The sparse per-segment indexes: ``OffsetIndex`` (offset -> byte position) and ``TimeIndex``
(timestamp -> offset), as in Kafka.

An ``OffsetIndex`` file is an array of 8-byte entries ``(relative_offset int32, position int32)``,
a ``TimeIndex`` file an array of 12-byte entries ``(timestamp int64, relative_offset int32)``, both
little-endian, ``relative_offset = offset - base_offset``. An offset index entry ``(O, P)`` says "the
batch starting at byte P of the segment's .log file has base offset O" (Kafka records the batch's
last offset instead; our base offsets are exact, so a floor lookup lands on the batch holding the
target rather than the one before it). A time index entry ``(T, O)`` says "the largest timestamp in
the segment up to the batch ending at offset O is T". Entries are added sparsely (every
``index.interval.bytes`` of data), keys strictly increase, and lookups are floor searches (largest
entry <= target) by binary search.

The file under each index (its mapping, lazy reads, preallocation, trimming, truncation and
flushes) is ``index_file.IndexFile``; this module owns the two entry formats, their lookups and checks,
and their appends (one at a time while appending, in bulk while rebuilding).
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Sequence
from operator import le, lt
from typing import NamedTuple

from ..errors import CorruptIndexError
from .index_file import MAX_RELATIVE_OFFSET, IndexFile


class OffsetPosition(NamedTuple):
    """An offset (logical record number) and a position (byte in a segment's .log file)."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A timestamp in milliseconds and the offset it belongs to."""

    timestamp_ms: int
    offset: int


_new_tuple = tuple.__new__  # builds a NamedTuple in C (its __new__ is Python code)


class OffsetIndex(IndexFile):
    """Maps offsets to byte positions of batches in a segment's .log file (8-byte entries)."""

    ENTRY_BYTES = 8
    _ENTRY = struct.Struct("<ii")
    _KEY = struct.Struct("<i")
    _OFFSET = _KEY

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or the base offset when empty."""
        if self.entries == 0:
            return self.base_offset
        return self.base_offset + self._entry(self.entries - 1)[0]

    def append(self, offset: int, position: int) -> None:
        """Add the entry ``(offset, position)``: the batch at ``position`` starts at ``offset``.
        Offsets must strictly increase."""
        relative = self._relative(offset)
        if self.entries and offset <= self.last_offset:
            raise ValueError(f"attempt to append offset {offset} to position {self.entries} no larger "
                             f"than the last offset appended ({self.last_offset}) to {self.path}")
        self._write(relative, position)

    def append_all(self, offsets: Sequence[int], positions: Sequence[int]) -> None:
        """``append`` of every ``(offsets[i], positions[i])`` in one write (a rebuild adds many)."""
        count = len(offsets)
        if count != len(positions):
            raise ValueError(f"{count} offsets but {len(positions)} positions for the index {self.path}")
        if not count:
            return
        relatives = [offset - self.base_offset for offset in offsets]
        if not 0 <= relatives[0] <= relatives[-1] <= MAX_RELATIVE_OFFSET:
            self._relative(offsets[0] if relatives[0] < 0 else offsets[-1])  # raises, naming the offset
        if (self.entries and offsets[0] <= self.last_offset) or not all(map(lt, relatives, relatives[1:])):
            raise ValueError(f"offsets appended to {self.path} must increase past {self.last_offset}: "
                             f"{offsets[0]}..{offsets[-1]}")
        entries = [0] * (2 * count)
        entries[0::2], entries[1::2] = relatives, positions
        self._write_packed(struct.pack(f"<{2 * count}i", *entries), count)

    def lookup_in_place(self, target_offset: int) -> OffsetPosition:
        """``lookup`` by a binary search over the entries where they are, without copying out the
        searched column first (that costs a pass over every entry): for a single lookup."""
        slot = bisect_right(self._column(self._KEY, self.entries), target_offset - self.base_offset) - 1
        return self.entry(slot) if slot >= 0 else OffsetPosition(self.base_offset, 0)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The largest entry with offset <= ``target_offset``; ``(base_offset, 0)`` if none."""
        slot = self._floor_slot(target_offset - self.base_offset)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(slot)

    def floor_entry(self, target_offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the largest entry <= ``target_offset``, ``(base_offset, 0)``
        if none: ``lookup`` as a plain tuple, for the point-read path."""
        base = self.base_offset
        entries = self.entries
        if len(self._keys) < entries:
            slot = self._floor_slot(target_offset - base)
        else:
            slot = bisect_right(self._keys, target_offset - base, 0, entries) - 1
        if slot < 0:
            return base, 0
        relative, position = self._ENTRY.unpack_from(self._content(), slot * 8)
        return base + relative, position

    def lookup_position(self, target_offset: int) -> int:
        """``lookup(target_offset).position``, without building the pair (the read path)."""
        slot = self._floor_slot(target_offset - self.base_offset)
        return 0 if slot < 0 else self._ENTRY.unpack_from(self._content(), slot * 8)[1]

    def entry(self, slot: int) -> OffsetPosition:
        relative, position = self._entry(slot)
        return _new_tuple(OffsetPosition, (self.base_offset + relative, position))

    def _check_entry(self, slot: int, segment_size_bytes: int) -> None:
        entry = self.entry(slot)
        if entry.offset <= self.base_offset or not 0 < entry.position < max(segment_size_bytes, 1):
            raise CorruptIndexError(f"offset index {self.path} entry {slot} {tuple(entry)} is impossible "
                                    f"for a segment of {segment_size_bytes} bytes at base offset {self.base_offset}")

    def sanity_check(self, segment_size_bytes: int) -> None:
        """Full check: every entry inside the data, offsets and positions strictly increasing."""
        self.quick_check(segment_size_bytes)
        previous = OffsetPosition(self.base_offset, 0)
        for slot in range(self.entries):
            entry = self.entry(slot)
            if entry.offset <= previous.offset or entry.position <= previous.position:
                raise CorruptIndexError(f"offset index {self.path} entry {slot} {tuple(entry)} does not "
                                        f"increase over {tuple(previous)}")
            self._check_entry(slot, segment_size_bytes)
            previous = entry


class TimeIndex(IndexFile):
    """Maps timestamps to offsets (12-byte entries). The last slot is kept free for the entry
    written when the segment stops being active."""

    ENTRY_BYTES = 12
    _RESERVED_SLOTS = 2  # the next entry and the final one written on roll or close
    _ENTRY = struct.Struct("<qi")
    _KEY = struct.Struct("<q")
    _KEY_CODE = "q"
    _OFFSET = struct.Struct("<8xi")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._last_entry = self._read_last_entry()

    def _read_last_entry(self) -> TimestampOffset:
        if self.entries == 0:
            return TimestampOffset(-1, self.base_offset)
        return self.entry(self.entries - 1)

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base_offset)`` when empty."""
        return self._last_entry

    def is_full(self) -> bool:
        return self.entries >= self._length // self.ENTRY_BYTES - 1  # max_entries - 1, inline (per append)

    def maybe_append(self, timestamp_ms: int, offset: int, skip_full_check: bool = False) -> None:
        """Add ``(timestamp_ms, offset)`` if the timestamp is larger than the last entry's."""
        if not skip_full_check and self.is_full():
            raise ValueError(f"attempt to append to a full time index {self.path} ({self.entries} entries)")
        last = self._last_entry
        if self.entries and offset < last.offset:
            raise ValueError(f"attempt to append offset {offset} before the last offset {last.offset} "
                             f"of time index {self.path}")
        if timestamp_ms > last.timestamp_ms:
            self._write(timestamp_ms, self._relative(offset))
            self._last_entry = TimestampOffset(timestamp_ms, offset)

    def append_all(self, timestamps_ms: Sequence[int], offsets: Sequence[int]) -> None:
        """Add every ``(timestamps_ms[i], offsets[i])`` in one write (a rebuild adds many): each
        timestamp larger than the one before (the last entry's first), offsets never decreasing."""
        count = len(timestamps_ms)
        if count != len(offsets):
            raise ValueError(f"{count} timestamps but {len(offsets)} offsets for the time index {self.path}")
        if not count:
            return
        last = self._last_entry
        relatives = [self._relative(offsets[0])] + [offset - self.base_offset for offset in offsets[1:]]
        if relatives[-1] > MAX_RELATIVE_OFFSET:
            self._relative(offsets[-1])  # raises, naming the offset
        if (timestamps_ms[0] <= last.timestamp_ms or (self.entries and offsets[0] < last.offset)
                or not all(map(lt, timestamps_ms, timestamps_ms[1:])) or not all(map(le, relatives, relatives[1:]))):
            raise ValueError(f"entries appended to the time index {self.path} must increase past {tuple(last)}")
        entries = [0] * (2 * count)
        entries[0::2], entries[1::2] = timestamps_ms, relatives
        self._write_packed(struct.pack("<" + "qi" * count, *entries), count)
        self._last_entry = TimestampOffset(timestamps_ms[-1], offsets[-1])

    def lookup(self, target_timestamp_ms: int) -> TimestampOffset:
        """The largest entry with timestamp <= target; ``(-1, base_offset)`` if none."""
        slot = self._floor_slot(target_timestamp_ms)
        if slot < 0:
            return TimestampOffset(-1, self.base_offset)
        return self.entry(slot)

    def entry(self, slot: int) -> TimestampOffset:
        timestamp_ms, relative = self._entry(slot)
        return _new_tuple(TimestampOffset, (timestamp_ms, self.base_offset + relative))

    def _after_truncate(self) -> None:
        self._last_entry = self._read_last_entry()

    def _check_entry(self, slot: int, segment_size_bytes: int) -> None:
        entry = self.entry(slot)
        if entry.offset < self.base_offset:
            raise CorruptIndexError(f"time index {self.path} entry {slot} {tuple(entry)} is below the "
                                    f"base offset {self.base_offset}")

    def sanity_check(self, segment_size_bytes: int) -> None:
        """Full check: timestamps strictly increase, offsets never decrease."""
        self.quick_check(segment_size_bytes)
        previous = None
        for slot in range(self.entries):
            entry = self.entry(slot)
            if previous is not None and (entry.timestamp_ms <= previous.timestamp_ms
                                         or entry.offset < previous.offset):
                raise CorruptIndexError(f"time index {self.path} entry {slot} {tuple(entry)} does not "
                                        f"increase over {tuple(previous)}")
            self._check_entry(slot, segment_size_bytes)
            previous = entry

