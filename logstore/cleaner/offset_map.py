"""``OffsetMap``: the cleaner's memory-bounded map from a record key to the latest offset holding it
(Kafka's SkimpyOffsetMap; docs/design.md §8.4), built for Python speed.

Kafka keeps 24-byte entries (an MD5 digest and an offset) in one byte array and probes it per record.
In Python a probe loop per record costs microseconds, so this map is a ``dict`` from the key bytes
themselves to the offset, filled a batch at a time with one ``dict.update`` (C). The bound is kept by
accounting instead of by layout: each new key is charged ``ENTRY_OVERHEAD_BYTES`` (a dict slot, an
``int`` and a ``bytes`` header, measured on CPython 3.11) plus its length, and the map is *full* once
the charge would pass ``memory_bytes × load_factor`` (``log.cleaner.dedupe.buffer.size`` and
``log.cleaner.io.buffer.load.factor``). So the memory really used stays near the configured buffer,
whatever the key sizes. Keys are compared exactly, so two keys can never be merged by a hash
collision (Kafka accepts that risk with MD5).

A full map ends a cleaning round early: the cleaner cleans up to ``latest_offset`` and the next round
continues from there (several passes, never a failure).
"""

from __future__ import annotations

from itertools import islice, repeat
from typing import Sequence

# Measured on CPython 3.11 with tracemalloc: 1M 16-byte keys put into a dict with int offsets grow
# it by 74 bytes per entry (the dict's table and the int), and each key is a bytes object of 33 bytes
# plus its length, which the map keeps alive.
ENTRY_OVERHEAD_BYTES = 107


class OffsetMap:
    """Key bytes -> latest offset, bounded by ``memory_bytes × load_factor`` of accounted memory."""

    def __init__(self, memory_bytes: int, load_factor: float = 0.9) -> None:
        if not isinstance(memory_bytes, int) or isinstance(memory_bytes, bool) or memory_bytes < ENTRY_OVERHEAD_BYTES:
            raise ValueError(f"memory_bytes must be an int >= {ENTRY_OVERHEAD_BYTES}, got {memory_bytes!r}")
        if not isinstance(load_factor, (int, float)) or isinstance(load_factor, bool) or not 0 < load_factor <= 1:
            raise ValueError(f"load_factor must be a number in (0, 1], got {load_factor!r}")
        self.memory_bytes = memory_bytes
        self.load_factor = float(load_factor)
        self.capacity_bytes = int(memory_bytes * self.load_factor)
        self._offsets: dict[bytes, int] = {}
        self.used_bytes = 0
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    def __contains__(self, key: bytes) -> bool:
        return key in self._offsets

    @property
    def utilization(self) -> float:
        """The share of the accounted capacity in use (Kafka's ``utilization``)."""
        return self.used_bytes / self.capacity_bytes if self.capacity_bytes else 1.0

    def get(self, key: bytes) -> int:
        """The latest offset put for ``key``; -1 when it was never put."""
        return self._offsets.get(key, -1)

    def latest_offsets(self, keys: Sequence[bytes | None]) -> list[int]:
        """``get`` for every key of a batch in one C-level pass (-1 where absent or None)."""
        return list(map(self._offsets.get, keys, repeat(-1)))

    def offsets(self):
        """Every offset the map holds (a view, in insertion order)."""
        return self._offsets.values()

    def keys_and_offsets(self) -> tuple[list[bytes], list[int]]:
        """Every key and its offset, as two lists in insertion order."""
        return list(self._offsets), list(self._offsets.values())

    def sorted_offsets(self) -> list[int]:
        """Every offset the map holds, ascending: after mapping a range, the records of that range
        that are the latest of their key (the cleaner's survivors), found by ``bisect``."""
        return sorted(self._offsets.values())

    def put(self, key: bytes, offset: int) -> bool:
        """Record that ``key`` was written at ``offset`` (offsets must not decrease). False, changing
        nothing, when ``key`` is new and the map is full."""
        offsets = self._offsets
        if key not in offsets:
            charge = ENTRY_OVERHEAD_BYTES + len(key)
            if self.used_bytes + charge > self.capacity_bytes:
                return False
            self.used_bytes += charge
        offsets[key] = offset
        self.latest_offset = offset
        return True

    def put_batch(self, keys: Sequence[bytes | None], offsets: Sequence[int]) -> int:
        """Put ``keys[i] -> offsets[i]`` in order (a ``None`` key, which compaction drops, is
        skipped) and return how many entries were taken: all of them, or, when the map fills up,
        the prefix before the first new key that did not fit. One ``dict.update`` when they all fit."""
        offsets_map = self._offsets
        count = len(keys)
        if count == 0:
            return 0
        present = [key for key in keys if key is not None]
        if len(present) == count:
            pairs = zip(keys, offsets)
        else:
            pairs = ((key, offset) for key, offset in zip(keys, offsets) if key is not None)
        # Worst case every key is new: if even that fits, no per-key check is needed.
        worst = ENTRY_OVERHEAD_BYTES * len(present) + sum(map(len, present))
        if self.used_bytes + worst <= self.capacity_bytes:
            before = len(offsets_map)
            offsets_map.update(pairs)
            added = len(offsets_map) - before
            if added == len(present):
                self.used_bytes += worst
            else:  # some keys were already there (or repeated): charge only the new ones, exactly
                self.used_bytes += ENTRY_OVERHEAD_BYTES * added + self._new_key_bytes(added)
            self.latest_offset = offsets[count - 1]
            return count
        for taken, (key, offset) in enumerate(zip(keys, offsets)):
            if key is not None and not self.put(key, offset):
                return taken
            self.latest_offset = offset
        return count

    def _new_key_bytes(self, added: int) -> int:
        # A dict keeps insertion order: the keys this batch added are its last ``added`` keys.
        return sum(map(len, islice(reversed(self._offsets), added)))

    def update_latest_offset(self, offset: int) -> None:
        """Mark everything up to ``offset`` as mapped (Kafka: skips offset gaps at segment ends)."""
        self.latest_offset = offset

    def clear(self, reserved_bytes: int = 0) -> None:
        """Empty the map for the next cleaning round (or pass). ``reserved_bytes`` of the accounted
        capacity are set aside for something else that lives from the buffer meanwhile (the
        multi-pass survivor bitmap); 0 gives the whole capacity back."""
        self._offsets.clear()
        self.used_bytes = 0
        self.latest_offset = -1
        self.capacity_bytes = max(int(self.memory_bytes * self.load_factor) - reserved_bytes, 0)

    def __repr__(self) -> str:
        return (f"OffsetMap(keys={len(self)}, utilization={self.utilization:.2f}, "
                f"latest_offset={self.latest_offset})")
