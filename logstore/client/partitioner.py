"""Kafka's default partitioner for keyed records: murmur2 of the key bytes, made positive, modulo the
partition count. A key lands in the same partition as with Kafka's own producer (the Java client's
``Utils.murmur2`` and ``toPositive``), so a topic written by us and read by Kafka tools, or the
other way round, keeps each key's records in one partition and in order. The hash itself is the
store's (``logstore.manager.topics.murmur2``): one implementation for every path.

A logstore topic created before placements were recorded places keys by crc32 (``topics.PLACEMENTS``):
``partition_for_key`` takes the placement the broker reports for the topic (the topic config
``logstore.key.placement``; ``murmur2`` when the broker has no such config, as Kafka's has not).

Null keys are the producer's business (Kafka 3.3+ spreads them with its sticky, uniform partitioner:
one partition per batch), not this module's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..manager.topics import MURMUR2, PLACEMENT_CONFIG, PLACEMENTS
from ..manager.topics import murmur2 as _unsigned_murmur2
from ..manager.topics import partition_for_key as _placed

if TYPE_CHECKING:
    from .cluster import NetworkClient

logger = logging.getLogger(__name__)
_TOPIC_RESOURCE = 2


def murmur2(data: bytes) -> int:
    """The 32-bit murmur2 hash Kafka uses, as a signed int (what Java's ``Utils.murmur2`` returns)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"murmur2 hashes bytes, got {type(data).__name__}")
    h = _unsigned_murmur2(data)
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Java's ``Utils.toPositive``: the sign bit cleared (not the absolute value)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, partitions: int, placement: str = MURMUR2) -> int:
    """The partition Kafka's default partitioner gives a record with ``key`` in a topic of
    ``partitions`` partitions (``placement`` ``crc32``: the one a logstore topic placed by crc32 gives)."""
    if type(partitions) is not int or partitions < 1:
        raise ValueError(f"a topic has at least one partition, got {partitions!r}")
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"a key is bytes, got {type(key).__name__}")
    return _placed(key, partitions, placement)


def topic_placement(network: NetworkClient, topic: str) -> str:
    """The key placement of ``topic`` as the broker reports it: the config ``logstore.key.placement``
    in DescribeConfigs' answer, which a logstore broker shows for every topic (every config is asked
    for: Tansu closes the connection when given configuration keys). ``murmur2`` (Kafka's)
    when the broker has no such config (a Kafka broker), and, logged as a warning, when the answer
    is an error (a principal without DESCRIBE_CONFIGS on the topic): only a topic created by an
    earlier logstore is placed otherwise."""
    body = network.request_any("DescribeConfigs", {
        "resources": [{"resource_type": _TOPIC_RESOURCE, "resource_name": topic,
                       "configuration_keys": None}],
        "include_synonyms": False})
    for result in body.get("results") or []:
        if result["error_code"]:
            logger.warning("could not read the key placement of topic %r (error %d: %s): keys are placed by "
                           "murmur2, Kafka's default", topic, result["error_code"], result.get("error_message"))
            return MURMUR2
        for entry in result["configs"]:
            if entry["name"] == PLACEMENT_CONFIG and entry["value"] in PLACEMENTS:
                return entry["value"]
    return MURMUR2
