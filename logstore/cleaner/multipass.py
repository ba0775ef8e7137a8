"""Multi-pass mapping of a dirty section whose keys do not fit the offset map: ``SurvivorBitmap`` (one
bit per offset of the recopied range) and ``KeySpill`` (the keys and offsets of the range, split by key
hash into partitions in an unnamed scratch file), and ``resolve`` (one offset-map pass per partition).

Why this design. Kafka, when the map fills, cleans up to where it filled and
starts again from there: every pass recopies the whole prefix, so k passes cost about k times a
single one (36 passes, 14× for a buffer holding a quarter of the keys). The rule that decides a
record's fate only needs the *set* of survivors: a record below the round's end survives iff it has a
key and is the latest record of that key (a record of the clean section: iff its key does not occur
in the dirty section). Keys with different hashes never decide each other's fate, so the range is
mapped one hash partition at a time, each partition small enough for the map, and the answer of
every partition lands in one survivor set; the log is then recopied once against that set.

- Partitions, not log slices: a slice's survivors depend on every later slice (O(passes × log)
  lookups), a partition's only on itself (every entry is read back once). Partitions are routed a
  batch at a time with C-level passes (``hash`` of each key into an ``array``, the partition number
  as one byte of it cut out by slicing, ``bytes.translate`` and ``compress`` per partition), so the
  first level's fan-out is kept small (<= 8) and a partition that still overflows the map is split
  again (by another byte of the hash) rather than guessing a large fan-out up front.
- A spill, not re-reads of the log: the log is read (and every batch CRC-checked) once for mapping,
  as in a single pass; the spill holds only keys and offsets (16-byte keys: 28 bytes per record,
  a fifth of the log in the benchmark). It is an unnamed temporary file (``O_TMPFILE``) in the log
  dir: never fsynced, never renamed, gone with the process, so a crash leaves nothing to recover
  and it is outside the durability contract (and the ``FileSystem`` seam, which is for files that
  outlive the process). A full disk aborts the round like a full disk while recopying.
- Bitmaps, not a sorted list of survivors: 1 bit per offset of the dirty section (1M offsets:
  125 KB) and 1 bit per record of the clean section (by ordinal: after earlier cleanings its offsets
  are sparse, its records about one per key), whatever the survivor count; they are charged to the
  dedupe buffer (the maps of the partition passes get what is left), and the recopy cuts each
  batch's survivors out of them a byte at a time.

Memory, all within ``log.cleaner.dedupe.buffer.size`` as accounted: while routing, the buffers of
pending entries (flushed to the spill at a quarter of the buffer); then the bitmaps (at most half of
the buffer: the cleaner ends the round earlier otherwise) and one partition's offset map on the rest,
plus one spilled chunk being read back (no larger than a flush). The first map, full when this starts,
is spilled and emptied before anything else is held.
"""

from __future__ import annotations

import math
import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from itertools import accumulate, chain, compress
from operator import not_
from typing import Callable, Iterable, Sequence

from .offset_map import OffsetMap

HASH_BYTES = 8  # a key's hash() is 64 bits: one byte of it per partitioning level
MAX_DEPTH = HASH_BYTES  # levels of partitioning before a round gives up on passes
FIRST_FANOUT_MAX = 8  # routing costs about 20 ns per record and partition: keep the first level small
MAX_FANOUT = 256
# A routed entry waiting to be spilled: its key object (33 bytes + its length), its offset (an int,
# 32 bytes) and a slot in two lists (16 bytes), rounded up.
PENDING_ENTRY_BYTES = 88
DIRTY, CLEAN = 0, 1
_write = os.write  # the spill's one write call (a test stands a full disk in for it)
_IS_ZERO = bytes([1] + [0] * 255)
_BIT = [1 << bit for bit in range(8)]
_BITS_OF = [tuple(bit for bit in range(8) if byte >> bit & 1) for byte in range(256)]


class SpillExhausted(Exception):
    """A partition still overflows the map after every byte of the key hashes was used (more
    distinct keys sharing one 64-bit hash than the map holds): the round falls back to Kafka's."""


class SurvivorBitmap:
    """One bit per offset of ``[base_offset, end_offset)``: set when that record survives."""

    __slots__ = ("base_offset", "end_offset", "bits")

    def __init__(self, base_offset: int, end_offset: int) -> None:
        if end_offset < base_offset:
            raise ValueError(f"end_offset {end_offset} is below base_offset {base_offset}")
        self.base_offset = base_offset
        self.end_offset = end_offset
        self.bits = bytearray(self.bytes_for(end_offset - base_offset))

    @staticmethod
    def bytes_for(offsets: int) -> int:
        """The bitmap's size for ``offsets`` offsets."""
        return (offsets + 7) >> 3

    @property
    def memory_bytes(self) -> int:
        return len(self.bits)

    def add(self, offsets: Iterable[int]) -> None:
        """Mark ``offsets`` (all inside the range) as surviving."""
        bits, base, bit = self.bits, self.base_offset, _BIT
        for offset in offsets:
            relative = offset - base
            bits[relative >> 3] |= bit[relative & 7]

    def between(self, first: int, last: int) -> list[int]:
        """The surviving offsets in ``[first, last]`` (inside the range), ascending: zero bytes are
        skipped by ``compress`` in C, so the cost is per surviving record, not per offset."""
        base = self.base_offset
        low_byte = (first - base) >> 3
        chunk = self.bits[low_byte: ((last - base) >> 3) + 1]
        start = base + (low_byte << 3)
        bits_of = _BITS_OF
        found = [start + (index << 3) + bit for index in compress(range(len(chunk)), chunk)
                 for bit in bits_of[chunk[index]]]
        if found and (found[0] < first or found[-1] > last):  # partial bytes at either end
            found = found[bisect_left(found, first): bisect_right(found, last)]
        return found


class KeySpill:
    """``(key, offset)`` entries (dirty or clean) split by key hash into ``fanout`` partitions and
    appended to ``fd`` in chunks; ``depth`` picks the byte of the hash that routes them. Entries
    of one partition and kind come back in the order they were added."""

    def __init__(self, fd: int, fanout: int, depth: int, budget_bytes: int) -> None:
        if not 1 <= fanout <= MAX_FANOUT or depth >= HASH_BYTES:
            raise ValueError(f"fanout must be in [1, {MAX_FANOUT}] and depth below {HASH_BYTES}: {fanout}, {depth}")
        self.fd = fd
        self.fanout = fanout
        self.depth = depth
        self.budget_bytes = max(budget_bytes, 1)
        self._select = [bytes(1 if byte % fanout == part else 0 for byte in range(256)) for part in range(fanout)]
        self._pending = [[([], []) for _ in range(fanout)] for _kind in (DIRTY, CLEAN)]
        self._pending_bytes = 0
        self._indexes: list[int] = list(range(1024))
        # Per partition: (kind, position, count, blob bytes) of each chunk, in spill order.
        self.chunks: list[list[tuple[int, int, int, int]]] = [[] for _ in range(fanout)]
        self.entries = [[0, 0] for _ in range(fanout)]  # per partition: dirty and clean entries
        self.spilled_bytes = 0

    def add(self, keys: Sequence[bytes], offsets: Sequence[int], kind: int) -> None:
        """Route ``keys[i] -> offsets[i]`` (no None key) to their partitions."""
        count = len(keys)
        if not count:
            return
        pending = self._pending[kind]
        if self.fanout == 1:
            pending[0][0].extend(keys)
            pending[0][1].extend(offsets)
        else:
            # The partition of each key is one byte of its hash, cut out of an array of the hashes
            # by slicing; each partition then takes its record indexes with ``compress`` over a
            # 0/1 mask made by ``translate`` and gathers its keys and offsets by index (all C).
            parts = array("q", map(hash, keys)).tobytes()[self.depth::HASH_BYTES]
            indexes = self._indexes
            if len(indexes) < count:
                indexes = self._indexes = list(range(count))
            key_at, offset_at = keys.__getitem__, offsets.__getitem__
            for part, select in enumerate(self._select):
                chosen = list(compress(indexes, parts.translate(select)))
                if chosen:
                    keys_part, offsets_part = pending[part]
                    keys_part.extend(map(key_at, chosen))
                    offsets_part.extend(map(offset_at, chosen))
        self._pending_bytes += PENDING_ENTRY_BYTES * count + sum(map(len, keys))
        if self._pending_bytes >= self.budget_bytes:
            self.flush()

    def flush(self) -> None:
        """Write every pending entry to the spill (one chunk per partition and kind)."""
        for kind, pending in enumerate(self._pending):
            for part, (keys, offsets) in enumerate(pending):
                if keys:
                    self._write_chunk(part, kind, keys, offsets)
                    pending[part] = ([], [])
        self._pending_bytes = 0

    def _write_chunk(self, part: int, kind: int, keys: list[bytes], offsets: list[int]) -> None:
        lengths = array("i", map(len, keys))
        blob = b"".join(keys)
        data = b"".join((lengths.tobytes(), array("q", offsets).tobytes(), blob))
        position = os.lseek(self.fd, 0, os.SEEK_END)
        view = memoryview(data)
        while view:  # a short write on a regular file means a full disk next time: loop until it says so
            view = view[_write(self.fd, view):]
        self.chunks[part].append((kind, position, len(keys), len(blob)))
        self.entries[part][kind] += len(keys)
        self.spilled_bytes += len(data)

    def read(self, chunk: tuple[int, int, int, int]) -> tuple[Sequence[bytes], array]:
        """The keys and offsets of one chunk."""
        _kind, position, count, blob_bytes = chunk
        size = 12 * count + blob_bytes
        data = os.pread(self.fd, size, position)
        if len(data) != size:
            raise OSError(f"the cleaner's spill file returned {len(data)} of {size} bytes at {position}")
        lengths = array("i")
        lengths.frombytes(data[: 4 * count])
        offsets = array("q")
        offsets.frombytes(data[4 * count: 12 * count])
        blob = data[12 * count:]
        size_0 = lengths[0]
        if lengths.count(size_0) == count:  # one key size (common): one struct call cuts them all
            keys = struct.unpack_from("<" + f"{size_0}s" * count, blob) if size_0 else (b"",) * count
            return keys, offsets
        ends = list(accumulate(lengths))
        return [blob[start:end] for start, end in zip(chain((0,), ends), ends)], offsets

    def kind_chunks(self, part: int, kind: int) -> list[tuple[int, int, int, int]]:
        return [chunk for chunk in self.chunks[part] if chunk[0] == kind]


def first_fanout(keys_mapped: int, records_mapped: int, records_left: int, keys_per_pass: int) -> int:
    """The first level's partition count: the distinct keys extrapolated from the first map's
    fill rate (an over-estimate when keys repeat), for passes of ``keys_per_pass`` keys, as a
    power of two in [2, ``FIRST_FANOUT_MAX``]. An under-estimate only costs a split of the
    partitions that overflow."""
    estimate = keys_mapped + records_left * keys_mapped / max(records_mapped, 1)
    return _power_of_two(1.25 * estimate / max(keys_per_pass, 1), FIRST_FANOUT_MAX)


def _power_of_two(wanted: float, most: int) -> int:
    return min(max(2, 1 << max(0, math.ceil(math.log2(max(wanted, 1))))), most)


class PassCounts:
    """What the partition passes did (for ``CleanerStats``)."""

    def __init__(self) -> None:
        self.passes = 0
        self.keys_mapped = 0
        self.max_utilization = 0.0
        self.spilled_bytes = 0


def resolve(spill: KeySpill, offset_map: OffsetMap, reserved_bytes: int, bitmap: SurvivorBitmap,
            clean_bitmap: SurvivorBitmap, counts: PassCounts, check: Callable[[], None] = lambda: None) -> None:
    """One map pass per partition of ``spill``; the surviving dirty offsets of each go into
    ``bitmap``, the surviving clean entries (record ordinals) into ``clean_bitmap``. A partition
    that overflows the map is split again by the next byte of the hashes."""
    spill.flush()
    counts.spilled_bytes += spill.spilled_bytes
    for part in range(spill.fanout):
        if not spill.chunks[part]:
            continue
        check()
        counts.passes += 1
        taken = _one_pass(spill, part, offset_map, reserved_bytes, bitmap, clean_bitmap)
        if taken is None:
            counts.keys_mapped += len(offset_map)
            counts.max_utilization = max(counts.max_utilization, offset_map.utilization)
            continue
        if spill.depth + 1 >= MAX_DEPTH:
            raise SpillExhausted(f"{len(offset_map)} keys of one hash partition fill the map")
        # Split this partition by the next byte of the hashes, into as many parts as its distinct
        # keys need: counted (roughly) when they are few, else extrapolated from where the map filled.
        keys_per_pass = max(len(offset_map), 1)
        offset_map.clear(reserved_bytes)  # its memory goes to the split's routing buffers
        distinct = _distinct_keys(spill, part)
        wanted = 1.25 * (spill.entries[part][DIRTY] / max(taken, 1) if distinct is None else distinct / keys_per_pass)
        sub = KeySpill(spill.fd, _power_of_two(wanted, MAX_FANOUT), spill.depth + 1, spill.budget_bytes)
        for chunk in spill.chunks[part]:
            keys, offsets = spill.read(chunk)
            sub.add(keys, offsets, chunk[0])
        resolve(sub, offset_map, reserved_bytes, bitmap, clean_bitmap, counts, check)
    offset_map.clear(reserved_bytes)


def _distinct_keys(spill: KeySpill, part: int) -> float | None:
    """The distinct dirty keys of a partition, roughly, by linear counting: how many of the 256
    values the next byte of their hashes takes, among all keys (good to ~900 keys) and among the
    1/256 whose byte after that is 0 (good to ~230,000). C-level, two sets of at most 256 small
    ints. None when both saturate."""
    depth = spill.depth
    seen: set[int] = set()
    sampled: set[int] = set()
    for chunk in spill.kind_chunks(part, DIRTY):
        keys, _offsets = spill.read(chunk)
        hashes = array("q", map(hash, keys)).tobytes()
        following = hashes[depth + 1::HASH_BYTES]
        seen.update(following)
        if depth + 2 < HASH_BYTES:
            sampled.update(compress(following, hashes[depth + 2::HASH_BYTES].translate(_IS_ZERO)))
    for values, scale in ((seen, 1), (sampled, 256)):
        empty = 256 - len(values)
        if empty >= 8:
            return -256 * math.log(empty / 256) * scale
    return None


def _one_pass(spill: KeySpill, part: int, offset_map: OffsetMap, reserved_bytes: int,
              bitmap: SurvivorBitmap, clean_bitmap: SurvivorBitmap) -> int | None:
    """Map partition ``part`` and add its survivors to ``bitmap``; None when done, else the dirty
    entries taken before the map filled up."""
    offset_map.clear(reserved_bytes)
    taken_total = 0
    for chunk in spill.kind_chunks(part, DIRTY):
        keys, offsets = spill.read(chunk)
        taken = offset_map.put_batch(keys, offsets)
        taken_total += taken
        if taken < len(keys):
            return taken_total
    bitmap.add(offset_map.offsets())
    contains = offset_map.__contains__
    for chunk in spill.kind_chunks(part, CLEAN):  # a clean record stays iff its key is not dirty
        keys, ordinals = spill.read(chunk)
        clean_bitmap.add(compress(ordinals, map(not_, map(contains, keys))))
    return None
