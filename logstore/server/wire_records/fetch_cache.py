"""``FetchBatchCache``: stored batches already converted to Kafka's RecordBatch v2, shared by consumers.

Consumers near the end of a log read the same batches; converting each once (``encode_fetch_batch``)
and keeping the result in a bounded LRU makes the fetch path's cost per batch, not per consumer. The
server sizes it with ``fetch.cache.bytes``.

May import: the engine's ``records`` (the stored batch type) and this room's ``encode``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Hashable

from ...records.decoder import RecordBatch
from .encode import encode_fetch_batch

DEFAULT_CACHE_BYTES = 16 << 20  # as the server's fetch.cache.bytes


class FetchBatchCache:
    """A bounded, thread-safe LRU of encoded fetch batches: ``get_or_encode(key, batch)``.

    The caller chooses the key; it must change whenever the stored bytes could differ, so the
    handlers use ``(topic, partition, base_offset, stored crc)``: a batch rewritten by compaction
    or by a truncation and re-append has another CRC (or another base offset), and a stale entry is
    never returned; it just ages out. Batches larger than a quarter of the capacity are encoded
    but not kept (one huge batch would evict everything else). Encoding runs outside the lock, so
    two threads missing on the same key may both encode it (same result; the second insert wins),
    and a slow encode never blocks readers of other entries.

    ``hits``, ``misses`` and ``evictions`` count since creation; ``size_bytes`` is what is held."""

    def __init__(self, capacity_bytes: int = DEFAULT_CACHE_BYTES, *,
                 partition_leader_epoch: int = 0) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be >= 0, got {capacity_bytes!r}")
        self.capacity_bytes = capacity_bytes
        self.partition_leader_epoch = partition_leader_epoch
        self._entries: OrderedDict[Hashable, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.size_bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def get_or_encode(self, key: Hashable, batch: RecordBatch) -> bytes:
        """The encoded fetch batch (``encode_fetch_batch``) of ``batch``, from the cache when ``key``
        is in it."""
        with self._lock:
            encoded = self._entries.get(key)
            if encoded is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return encoded
            self.misses += 1
        encoded = encode_fetch_batch(batch, partition_leader_epoch=self.partition_leader_epoch)
        self.put(key, encoded)
        return encoded

    def get(self, key: Hashable) -> bytes | None:
        """The cached bytes for ``key`` (counted as a hit or a miss), or None."""
        with self._lock:
            encoded = self._entries.get(key)
            if encoded is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return encoded

    def put(self, key: Hashable, encoded: bytes) -> None:
        """Keep ``encoded`` under ``key`` (unless it is too large to cache), evicting the least
        recently used entries beyond the capacity."""
        size = len(encoded)
        if size * 4 > self.capacity_bytes:
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self.size_bytes -= len(previous)
            self._entries[key] = encoded
            self.size_bytes += size
            while self.size_bytes > self.capacity_bytes:
                _, evicted = self._entries.popitem(last=False)
                self.size_bytes -= len(evicted)
                self.evictions += 1

    def clear(self) -> None:
        """Drop every entry (the counters stay)."""
        with self._lock:
            self._entries.clear()
            self.size_bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __repr__(self) -> str:
        return (f"FetchBatchCache({len(self._entries)} batches, {self.size_bytes}/{self.capacity_bytes} bytes, "
                f"{self.hits} hits, {self.misses} misses)")
