"""Kafka's default partitioner for keyed records: murmur2 of the key bytes, made positive, modulo the
partition count. A key lands in the same partition as with Kafka's own producer (the Java client's
``Utils.murmur2`` and ``toPositive``), so a topic written by us and read by Kafka tools, or the
other way round, keeps each key's records in one partition and in order.

Null keys are the producer's business (Kafka 3.3+ spreads them with its sticky, uniform partitioner:
one partition per batch), not this module's.
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """The 32-bit murmur2 hash Kafka uses, as a signed int (what Java's ``Utils.murmur2`` returns)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"murmur2 hashes bytes, got {type(data).__name__}")
    data = bytes(data)
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):  # little-endian 32-bit words, as Java reads them
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Java's ``Utils.toPositive``: the sign bit cleared (not the absolute value)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a record with ``key`` in a topic of
    ``partitions`` partitions."""
    if type(partitions) is not int or partitions < 1:
        raise ValueError(f"a topic has at least one partition, got {partitions!r}")
    return to_positive(murmur2(key)) % partitions
