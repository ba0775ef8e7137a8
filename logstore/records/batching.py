"""Turning the records of one append into the batches a log accepts: validation against the
topic's config (a key on every record of a compacted topic, ``max.message.bytes``,
``segment.bytes``), encoding with the topic's compression and timestamp type, and splitting an
append larger than ``max.message.bytes`` into several batches. Also the two values an append hands
back: ``PreparedAppend`` (encoded, not yet written) and ``AppendInfo`` (what was written).
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Sequence

from ..config import LogConfig
from ..errors import InvalidRecordError, RecordTooLargeError
from .decoder import COMPRESSION_GZIP, COMPRESSION_NONE, HEADER_BYTES, RECORD_OVERHEAD_BYTES, Record
from .encoder import encode_batch_parts


@dataclass(frozen=True)
class AppendInfo:
    """What an append did: the offsets assigned (None when nothing was appended)."""

    first_offset: int | None
    last_offset: int | None
    record_count: int
    max_timestamp_ms: int
    batches: int
    log_append_time_ms: int = -1


def encode_records(records: Sequence[Record], config: LogConfig, now_ms: int, name: str) -> list[tuple[bytearray, list]]:
    """Validate ``records`` for a log with ``config`` and encode them into ``(header, parts)``
    batches of at most ``max.message.bytes`` (and ``segment.bytes``). Raises ``TypeError`` for a
    wrong input type, ``InvalidRecordError`` for a missing key on a compacted topic and
    ``RecordTooLargeError`` for a single record that fits no batch."""
    if isinstance(records, (Record, bytes, str)) or not isinstance(records, Sequence):
        raise TypeError(f"append takes a sequence of Record, got {type(records).__name__}")
    if not records:
        return []
    if config.compact and None in map(itemgetter(0), records):
        raise InvalidRecordError(f"compacted topic {name} requires a key on every record")
    compression = COMPRESSION_GZIP if config.compression_type == "gzip" else COMPRESSION_NONE
    log_append = config.message_timestamp_type == "LogAppendTime"
    limit = min(config.max_message_bytes, config.segment_bytes)

    def encode(group: Sequence[Record]) -> list[tuple[bytearray, list]]:
        header, parts = encode_batch_parts(group, default_timestamp_ms=now_ms, compression=compression,
                                           log_append_time=log_append)
        size = len(header) + sum(map(len, parts))
        if size <= limit:
            return [(header, parts)]
        if len(group) == 1:
            setting = "max.message.bytes" if limit == config.max_message_bytes else "segment.bytes"
            raise RecordTooLargeError(f"a record of {size - HEADER_BYTES} bytes is larger than "
                                      f"{setting}={limit} of {name}")
        return [part for group_part in _split(group, limit) for part in encode(group_part)]

    return encode(records)


class PreparedAppend:
    """Records validated and encoded by ``Log.prepare``, waiting for ``Log.append_prepared``."""

    def __init__(self, log: Any, batches: list[tuple[bytearray, list]], record_count: int, now_ms: int) -> None:
        self.log = log
        self._batches: list | None = batches
        self.record_count = record_count
        self.now_ms = now_ms

    def take(self) -> list[tuple[bytearray, list]]:
        """The batches, once: a prepared append cannot be appended twice."""
        if self._batches is None:
            raise ValueError("these prepared records were appended already")
        batches, self._batches = self._batches, None
        return batches


def _split(records: Sequence[Record], limit: int) -> list[Sequence[Record]]:
    """Split ``records`` into groups whose estimated batch size stays within ``limit``."""
    budget = max(limit - HEADER_BYTES, 1)
    groups = []
    start = 0
    total = 0
    for position, record in enumerate(records):
        size = (RECORD_OVERHEAD_BYTES + len(record.key or b"") + len(record.value or b"")
                + sum(8 + len(key.encode()) + len(value or b"") for key, value in record.headers))
        if total + size > budget and position > start:
            groups.append(records[start:position])
            start, total = position, 0
        total += size
    groups.append(records[start:])
    if len(groups) == 1:  # the estimate fit but the encoding did not: halve
        middle = len(records) // 2
        groups = [records[:middle], records[middle:]]
    return groups
