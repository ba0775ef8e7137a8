"""``SegmentRecovery``: the part of ``LogSegment`` that rebuilds a segment from its data and cuts it.

``recover`` re-verifies every batch of the data file (both CRCs, offsets increasing and inside the
segment's 32-bit range), rebuilds both indexes from what is valid and, when asked, cuts the invalid
tail. Given the log's recovery point it resumes instead from the offset index entry at or below it
(the bytes before were fsynced with their entries), once the batch there and the time index's last
entry before it confirm them: after a crash only the bytes past the recovery point are read. One
pass over large reads; new index entries are written in bulk at the end. ``truncate_to`` removes whole batches from an offset on. The loader decides *whether* bytes may
be cut (a crash's torn tail may; damage may not: ``damage.py``); this class only does it.

A base class of ``LogSegment`` (it works on the segment's own files, indexes and caches), kept apart
so that each module stays about one thing. Not thread-safe: the owning ``Log`` serialises both.
"""

from __future__ import annotations

import logging

from ..errors import CorruptIndexError, CorruptRecordError
from ..records.decoder import HEADER_BYTES, LOG_OVERHEAD_BYTES
from ..records.decoder import read_header as _read_header
from .index import OffsetPosition, TimestampOffset

logger = logging.getLogger("logstore.segment")  # the segment's logger: recovery is its news

_READ_CHUNK_BYTES = 256 * 1024
_RECOVERY_READ_BYTES = 1024 * 1024  # one read for many batches (a larger batch is read whole); 8 MiB measured slower: each fresh buffer costs page faults


class SegmentRecovery:
    """``recover`` and ``truncate_to`` of a ``LogSegment`` (which supplies the attributes used)."""

    def recover(self, cut_tail: bool = True, recovery_point: int | None = None, keep_capacity: bool = False) -> int:
        """Re-verify every batch (CRC, offsets), rebuild both indexes, cut an invalid tail.
        Returns the number of invalid bytes at the tail (cut when ``cut_tail``). A torn or corrupt
        tail is logged, never raised. With ``cut_tail=False`` only the indexes are rebuilt (a lying
        index found by a read: the data stays as it is, damage there stays reported by reads).

        ``recovery_point``: the log's recovery point (every batch below it was fsynced, with the
        index entries made for it). Recovery then resumes from the offset index entry at or below it
        (``_resume_point``: once that entry and the last time index entry before it are confirmed by
        the data; otherwise it starts from the segment's start): the bytes before that entry are
        treated as those of a segment below the recovery point, and only the bytes from there on are
        re-verified and re-indexed. ``keep_capacity``: leave the indexes at full size and mapped (the
        segment becomes the active one: trimming them now would only be undone)."""
        self._forget_verified()
        file_size = self.file.file_size()
        resumed = None if recovery_point is None else self._resume_point(recovery_point, file_size)
        if resumed is None:
            self.indexes_distrusted = False
            self.offset_index.reset()
            self.time_index.reset()
            self._max_timestamp = TimestampOffset(-1, self.base_offset)
            start, previous_last_offset = 0, self.base_offset - 1
        else:
            entry, self._max_timestamp = resumed
            start, previous_last_offset = entry.position, entry.offset - 1
        valid_bytes, last_index_entry = self._verify_and_index(start, file_size, previous_last_offset,
                                                               resumed is not None)
        if resumed is not None and valid_bytes == start:
            # Not even the batch at the entry is valid (damage below the recovery point): the entry
            # would point past the valid bytes. Everything again from the start, which names the damage.
            return self.recover(cut_tail, None, keep_capacity)
        truncated = file_size - valid_bytes
        if truncated and cut_tail:
            logger.warning("recovery cut %d bytes from the tail of %s", truncated, self.log_path)
            self.file.truncate_to(valid_bytes)
        self.bytes_since_last_index_entry = valid_bytes - last_index_entry if valid_bytes else 0
        self._rolling_based_timestamp = None
        self.time_index.maybe_append(*self._max_timestamp_pair(), skip_full_check=True)
        if not keep_capacity:
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()
        if not self.active and not keep_capacity:  # recovering many segments must not hold their index descriptors
            self.offset_index.freeze()
            self.time_index.freeze()
        return truncated

    def _verify_and_index(self, position: int, file_size: int, previous_last_offset: int,
                          resumed: bool) -> tuple[int, int]:
        """Verify the batches from ``position`` on (``load_batch``: both CRCs and the columns, as every
        read does; offsets increasing and inside the segment's range), reading a megabyte at a
        time, and add an index entry every ``index_interval_bytes``. ``resumed``: ``position`` holds
        the last offset index entry already; its time index entry is made again (it was cut with the
        entries after it). Returns ``(valid_bytes, position of the last offset index entry)``; stops
        (logged) at the first invalid or incomplete batch."""
        offset_index, time_index = self.offset_index, self.time_index
        interval = self.index_interval_bytes
        where = f" in {self.log_path}"
        read_header, load_batch, pread, can_hold = _read_header, self.load_batch, self.file.pread, self.can_hold
        maximum_ms, maximum_offset = self._max_timestamp
        last_index_entry = position if resumed else 0
        # New entries are collected and written in bulk at the end, as ``append`` and ``maybe_append``
        # would have added them one by one (the same fullness rules).
        offsets: list[int] = []
        positions: list[int] = []
        times: list[int] = []
        time_offsets: list[int] = []
        offset_room = offset_index.max_entries - offset_index.entries
        time_room = time_index.max_entries - 1 - time_index.entries  # ``TimeIndex.is_full`` keeps a slot free
        last_time_ms = time_index.last_entry.timestamp_ms
        buffer = memoryview(b"")
        buffer_position = position
        valid_bytes = position
        try:
            while position < file_size:
                at = position - buffer_position
                if len(buffer) - at < HEADER_BYTES:
                    buffer = memoryview(pread(min(_RECOVERY_READ_BYTES, file_size - position), position))
                    buffer_position, at = position, 0
                header = read_header(buffer, at, where, False)
                if header is None:
                    break  # fewer bytes than a header: an incomplete batch
                size = LOG_OVERHEAD_BYTES + header.batch_length
                if position + size > file_size:
                    break
                if at + size > len(buffer):  # the batch runs past the buffer: read on from its start
                    buffer = memoryview(pread(min(max(_RECOVERY_READ_BYTES, size), file_size - position), position))
                    buffer_position, at = position, 0
                load_batch(position, header, buffer, at)
                base_offset = header.base_offset
                last_offset = base_offset + header.last_offset_delta
                if base_offset <= previous_last_offset or not can_hold(last_offset):
                    raise CorruptRecordError(
                        f"batch at position {position} of {self.log_path} has offsets "
                        f"{base_offset}..{last_offset} after {previous_last_offset}")
                if header.max_timestamp > maximum_ms:
                    maximum_ms, maximum_offset = header.max_timestamp, last_offset
                # A rebuilt index can need more entries than the appends made (their byte count
                # restarts after a truncation): when full it stays sparser, never fails.
                new_entry = position - last_index_entry > interval and len(offsets) < offset_room
                if new_entry or (resumed and position == last_index_entry):  # or the kept entry's time entry
                    if len(times) >= time_room:
                        new_entry = False
                    elif maximum_ms > last_time_ms:
                        times.append(maximum_ms)
                        time_offsets.append(maximum_offset)
                        last_time_ms = maximum_ms
                    if new_entry:
                        offsets.append(base_offset)
                        positions.append(position)
                        last_index_entry = position
                valid_bytes = position + size
                previous_last_offset = last_offset
                position = valid_bytes
        except CorruptRecordError as exc:
            logger.warning("recovery of %s stops at position %d: %s", self.log_path, valid_bytes, exc)
        offset_index.append_all(offsets, positions)
        time_index.append_all(times, time_offsets)
        self._max_timestamp = TimestampOffset(maximum_ms, maximum_offset)
        return valid_bytes, last_index_entry

    def _resume_point(self, recovery_point: int, file_size: int) -> tuple[OffsetPosition, TimestampOffset] | None:
        """Where recovery may resume: ``(entry, max timestamp before it)`` for the offset index's
        floor entry for ``recovery_point - 1`` (a batch starting below the recovery point: fsynced,
        with its entry and the time index entries before it), with both indexes cut after it. None
        (nothing cut: recovery starts from the segment's start) when there is no such entry, or
        when it, or the time index's last entry before it, is not confirmed by the data: a lying
        entry is never a starting point (as in ``scan_from``)."""
        offset_index, time_index = self.offset_index, self.time_index
        if recovery_point - 1 <= self.base_offset or offset_index.damage or time_index.damage:
            return None
        entry = offset_index.lookup_in_place(recovery_point - 1)
        if not (entry.offset > self.base_offset and 0 < entry.position < file_size):
            return None
        try:
            header = self.read_header_at(entry.position)
        except CorruptRecordError:
            return None
        if header is None or header.base_offset != entry.offset:
            return None
        offset_index.truncate_to(entry.offset + 1)
        if not offset_index.entries or offset_index.entry(offset_index.entries - 1) != entry:
            return None  # an index out of order: the cut did not end at the entry
        time_index.truncate_to(entry.offset)
        maximum = self._max_timestamp_before(entry)
        if maximum is None:
            return None
        self.indexes_distrusted = False
        self.resize_indexes(self.max_index_size_bytes)  # room for the entries the scan adds
        return entry, maximum

    def _max_timestamp_before(self, entry: OffsetPosition) -> TimestampOffset | None:
        """The largest timestamp of the batches before ``entry``'s position, and the offset of the
        batch holding it: the time index's last entry (cut below ``entry``), once confirmed by the
        batch it names, raised by the headers of the batches after that batch. Entries cut with
        ``entry``'s may have named one of those. None when the time index entry lies."""
        last = self.time_index.last_entry
        start = OffsetPosition(self.base_offset, 0)
        confirmed = not self.time_index.entries
        if not confirmed:
            if last.timestamp_ms < 0:
                return None  # no real entry holds a negative timestamp
            start = self.offset_index.lookup_in_place(last.offset)
        maximum = last
        try:
            for _, header, _, _ in self.scan_from(start.offset, entry.position, _READ_CHUNK_BYTES, start):
                if not confirmed and header.last_offset >= last.offset:
                    if (header.max_timestamp, header.last_offset) != tuple(last):
                        return None
                    confirmed = True
                if header.max_timestamp > maximum.timestamp_ms:
                    maximum = TimestampOffset(header.max_timestamp, header.base_offset + header.last_offset_delta)
        except (CorruptIndexError, CorruptRecordError):
            return None
        return maximum if confirmed else None

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding offsets >= ``offset`` (whole batches). Returns bytes removed.
        The indexes are resized to full capacity: this segment is, or becomes, the active one.
        Never called on a mapped segment (a mapping past the cut would fault)."""
        found = self.translate_offset(offset)
        self._forget_verified()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.resize_indexes(self.max_index_size_bytes)
        removed = 0
        if found is not None:
            position = found[0]
            removed = self.size_bytes - position
            self.file.truncate_to(position)
        if self.size_bytes == 0:
            self.created_ms = self._clock.time_ms()
        self._rolling_based_timestamp = None
        self.bytes_since_last_index_entry = 0
        # Recompute the max timestamp from the surviving time index entry and the batches after it.
        maximum = self.time_index.last_entry
        for _, header, _, _ in self.scan_from(maximum.offset, chunk_bytes=_READ_CHUNK_BYTES):
            if header.max_timestamp > maximum.timestamp_ms:
                maximum = TimestampOffset(header.max_timestamp, header.last_offset)
        self._max_timestamp = maximum
        return removed
