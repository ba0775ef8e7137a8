"""Fetch rules: which records of a batch a read returns, and the cache that makes point reads cheap.

A read asks for records from an offset, up to a log end offset, within ``max_bytes`` (key, value and
header bytes plus ``RECORD_OVERHEAD_BYTES`` per record) and ``max_records``, and always gets at least
one record when any exists (Kafka's minOneMessage). ``take_records`` applies these rules to one
batch; ``LogSegment.read`` walks the batches of a segment and ``Log.read`` the segments of a log.

``HEAD_CACHE`` keeps the header and columns of large batches that point reads touched, so a second
point read in such a batch reads only its own key and value bytes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from .decoder import RECORD_OVERHEAD_BYTES, RecordBatch, record_charge


class CachedHead(RecordBatch):
    """A partial batch in ``HEAD_CACHE``, with the ``PointHead`` that point reads built from it."""

    __slots__ = ("point",)

    def __init__(self, header, buffer, fetch) -> None:
        super().__init__(header, buffer, fetch)
        self.point = None


class _HeadCache:
    """Process-wide LRU of partial batches (header and columns) of large batches that point reads
    touched, bounded by bytes. A hit makes a point read cost two small reads (key and value).
    Keys carry the owning segment's token, which changes whenever its bytes are cut or rewritten."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple, RecordBatch] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.get = self._entries.get  # ``get(key)``: the cached batch or None (a bare dict lookup)


    def put(self, key: tuple, batch: RecordBatch) -> None:
        size = len(batch.buffer)
        with self._lock:
            if key in self._entries or size > self.max_bytes:
                return
            self._entries[key] = batch
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= len(evicted.buffer)


HEAD_CACHE = _HeadCache(64 * 1024 * 1024)


def take_records(batch: RecordBatch, start_offset: int, end_offset: int, budget: int, max_records: int,
                 records: list, need_one: bool) -> tuple[int, bool]:
    """Add to ``records`` the records of ``batch`` in [start_offset, end_offset) that fit
    ``budget`` bytes and ``max_records`` in all. Returns (bytes charged, whether a limit or the
    end offset was reached)."""
    header = batch.header
    count = batch.index_of(end_offset) if header.last_offset >= end_offset else header.record_count
    first = batch.index_of(start_offset) if header.base_offset < start_offset else 0
    if first >= count:
        return 0, count < header.record_count
    stop = min(count, first + max_records - len(records))
    if budget < RECORD_OVERHEAD_BYTES and need_one:  # a point read: exactly one record
        record = batch.record_at(first)
        records.append(record)
        return record_charge(record), True
    stop, cost = _fit(batch, first, stop, budget, need_one)
    if stop > first:
        records.extend(batch.iter_records(first, stop))
    return cost, stop < header.record_count or len(records) >= max_records or cost >= budget


def _fit(batch: RecordBatch, first: int, stop: int, budget: int, need_one: bool) -> tuple[int, int]:
    """The largest stop in [first, stop] whose records [first, stop) fit ``budget`` (at least
    first + 1 when ``need_one``), and their charged bytes."""
    cost = batch.payload_bytes(first, stop)
    if cost <= budget:
        return stop, cost
    one = batch.payload_bytes(first, first + 1)
    if one > budget:
        return (first + 1, one) if need_one else (first, 0)
    low, high = first + 1, stop - 1  # records [first, low) fit; [first, high + 1) do not
    while low < high:
        middle = (low + high + 1) // 2
        if batch.payload_bytes(first, middle) <= budget:
            low = middle
        else:
            high = middle - 1
    return low, batch.payload_bytes(first, low)
