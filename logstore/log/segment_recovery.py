"""``SegmentRecovery``: the part of ``LogSegment`` that rebuilds a segment from its data and cuts it.

``recover`` re-verifies every batch of the data file (both CRCs, offsets increasing and inside the
segment's 32-bit range), rebuilds both indexes from what is valid and, when asked, cuts the invalid
tail; ``truncate_to`` removes whole batches from an offset on. The loader decides *whether* bytes may
be cut (a crash's torn tail may; damage may not: ``damage.py``); this class only does it.

A base class of ``LogSegment`` (it works on the segment's own files, indexes and caches), kept apart
so that each module stays about one thing. Not thread-safe: the owning ``Log`` serialises both.
"""

from __future__ import annotations

import logging

from ..errors import CorruptRecordError
from .index import TimestampOffset

logger = logging.getLogger("logstore.segment")  # the segment's logger: recovery is its news

_READ_CHUNK_BYTES = 256 * 1024


class SegmentRecovery:
    """``recover`` and ``truncate_to`` of a ``LogSegment`` (which supplies the attributes used)."""

    def recover(self, cut_tail: bool = True) -> int:
        """Re-verify every batch (CRC, offsets), rebuild both indexes, cut an invalid tail.
        Returns the number of invalid bytes at the tail (cut when ``cut_tail``). A torn or corrupt
        tail is logged, never raised. With ``cut_tail=False`` only the indexes are rebuilt (a lying
        index found by a read: the data stays as it is, damage there stays reported by reads)."""
        self.indexes_distrusted = False
        self.offset_index.reset()
        self.time_index.reset()
        self._forget_verified()
        self._max_timestamp = TimestampOffset(-1, self.base_offset)
        file_size = self.file.file_size()
        valid_bytes = 0
        last_index_entry = 0
        previous_last_offset = self.base_offset - 1
        try:
            for position, batch in self.iter_batches(0, file_size):
                header = batch.header
                if header.base_offset <= previous_last_offset or not self.can_hold(header.last_offset):
                    raise CorruptRecordError(
                        f"batch at position {position} of {self.log_path} has offsets "
                        f"{header.base_offset}..{header.last_offset} after {previous_last_offset}")
                if header.max_timestamp > self._max_timestamp.timestamp_ms:
                    self._max_timestamp = TimestampOffset(header.max_timestamp, header.last_offset)
                # A rebuilt index can need more entries than the appends made (their byte count
                # restarts after a truncation): when full it stays sparser, never fails.
                if position - last_index_entry > self.index_interval_bytes and not (
                        self.offset_index.is_full() or self.time_index.is_full()):
                    self.offset_index.append(header.base_offset, position)
                    self.time_index.maybe_append(*self._max_timestamp_pair())
                    last_index_entry = position
                valid_bytes = position + header.size_bytes
                previous_last_offset = header.last_offset
        except CorruptRecordError as exc:
            logger.warning("recovery of %s stops at position %d: %s", self.log_path, valid_bytes, exc)
        truncated = file_size - valid_bytes
        if truncated and cut_tail:
            logger.warning("recovery cut %d bytes from the tail of %s", truncated, self.log_path)
            self.file.truncate_to(valid_bytes)
        self.bytes_since_last_index_entry = valid_bytes - last_index_entry if valid_bytes else 0
        self._rolling_based_timestamp = None
        self.time_index.maybe_append(*self._max_timestamp_pair(), skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        if not self.active:  # recovering many segments must not hold their index descriptors
            self.offset_index.freeze()
            self.time_index.freeze()
        return truncated

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
