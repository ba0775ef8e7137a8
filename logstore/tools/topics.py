"""Descriptions of a store's topics, behind ``logstore topics describe`` (the store's side of
``kafka-topics --describe``).

What it owns:
- ``describe_topic``: one topic as a dict: its effective config (with ``logstore.key.placement``,
  how its keys map to partitions, shown as the read-only config a broker's DescribeConfigs gives),
  its overrides (the placement among them where it is not the default of new topics), and per
  partition its directory, data dir, log start and end offsets, size (sum of its .log files),
  segment count and recovery point; a missing or damaged partition says so instead;
- ``describe_topics``: ``describe_topic`` of every topic, by name, internal ones left out when asked;
- ``listed_topics``: topic names without the internal ones when asked (``kafka-topics
  --exclude-internal``), for the store's and a broker's lists alike.

Errors: an unknown topic raises the store's ``UnknownTopicOrPartitionError``.
"""

from __future__ import annotations

from typing import Iterable

from ..manager.log_manager import LogManager
from ..manager.topics import MURMUR2, PLACEMENT_CONFIG, is_internal_topic
from .check import log_size_bytes


def describe_topics(store: LogManager, exclude_internal: bool = False) -> list[dict]:
    """Every topic of ``store`` described (``describe_topic``), sorted by name; internal topics
    (``__consumer_offsets``...) left out when ``exclude_internal``."""
    recovery_points = _recovery_points(store)
    return [describe_topic(store, name, recovery_points) for name in listed_topics(store.topics(), exclude_internal)]


def listed_topics(names: Iterable[str], exclude_internal: bool = False) -> list[str]:
    """``names`` sorted, without the internal topics when ``exclude_internal``."""
    return sorted(name for name in names if not (exclude_internal and is_internal_topic(name)))


def describe_topic(store: LogManager, name: str, recovery_points: dict | None = None) -> dict:
    """Topic ``name`` of ``store`` described: ``{"topic", "partition_count", "config", "overrides",
    "partitions": [...]}``. ``recovery_points``: the store's, when the caller has them already."""
    if recovery_points is None:
        recovery_points = _recovery_points(store)
    partitions = []
    for partition in range(store.partitions(name)):
        if (name, partition) in store.missing_partitions:
            partitions.append({"partition": partition, "missing": True})
            continue
        damage = store.damaged_partitions.get((name, partition))
        if damage is not None:
            partitions.append({"partition": partition, "damaged": damage.description})
            continue
        log = store.get_log(name, partition)
        partitions.append({
            "partition": partition, "dir": log.dir_path, "log_dir": store.log_dir_of(name, partition),
            "log_start_offset": log.log_start_offset, "log_end_offset": log.log_end_offset,
            "size_bytes": log_size_bytes([log]), "segments": len(log.segments),
            "recovery_point": recovery_points.get((name, partition))})
    placement = {PLACEMENT_CONFIG: store.topic_placement(name)}
    return {"topic": name, "partition_count": len(partitions),
            "config": dict(sorted({**store.topic_config(name).to_properties(), **placement}.items())),
            "overrides": dict(sorted({**store.topic_overrides(name),
                                      **(placement if placement[PLACEMENT_CONFIG] != MURMUR2 else {})}.items())),
            "partitions": partitions}


def _recovery_points(store: LogManager) -> dict:
    return {key: offset for entry in store.status() for key, offset in entry.recovery_points.items()}
