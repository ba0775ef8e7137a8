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
  --exclude-internal``), for the store's and a broker's lists alike;
- ``partition_description``, ``topic_description``: the one schema of a description, which a
  broker's (``logstore.client.admin.BrokerAdmin.describe_topic``) follows too: every field always
  present, ints as ints, config values as strings (as DescribeConfigs gives them), null where the
  source does not know it (a store has no leader; a broker gives no directories or sizes).

Errors: an unknown topic raises the store's ``UnknownTopicOrPartitionError``.
"""

from __future__ import annotations

from typing import Iterable

from ..config import config_string
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
            partitions.append(partition_description(partition, missing=True))
            continue
        damage = store.damaged_partitions.get((name, partition))
        if damage is not None:
            partitions.append(partition_description(partition, damaged=damage.description))
            continue
        log = store.get_log(name, partition)
        partitions.append(partition_description(
            partition, dir=log.dir_path, log_dir=store.log_dir_of(name, partition),
            log_start_offset=log.log_start_offset, log_end_offset=log.log_end_offset,
            size_bytes=log_size_bytes([log]), segments=len(log.segments),
            recovery_point=recovery_points.get((name, partition))))
    placement = {PLACEMENT_CONFIG: store.topic_placement(name)}
    return topic_description(name, {**store.topic_config(name).to_properties(), **placement},
                             {**store.topic_overrides(name),
                              **(placement if placement[PLACEMENT_CONFIG] != MURMUR2 else {})}, partitions)


PARTITION_FIELDS = ("partition", "leader", "log_start_offset", "log_end_offset", "dir", "log_dir", "size_bytes",
                    "segments", "recovery_point", "missing", "damaged")
"""The fields of a partition's description, in order: ``missing`` is a bool, ``damaged`` null or
what is wrong, every other one an int or a string, or null where unknown."""


def partition_description(partition: int, *, missing: bool = False, **known: object) -> dict:
    """One partition described: every field of ``PARTITION_FIELDS``, those not ``known`` null."""
    unknown = set(known) - set(PARTITION_FIELDS)
    if unknown:
        raise TypeError(f"not a field of a partition's description: {sorted(unknown)[0]!r}")
    return {field: known.get(field) for field in PARTITION_FIELDS} | {"partition": partition, "missing": missing}


def topic_description(name: str, config: dict, overrides: dict, partitions: list[dict]) -> dict:
    """``{"topic", "partition_count", "config", "overrides", "partitions"}``: config and overrides
    sorted by key, every value a string as Kafka shows it (``config_string``)."""
    return {"topic": name, "partition_count": len(partitions),
            "config": {key: config_string(value) for key, value in sorted(config.items())},
            "overrides": {key: config_string(value) for key, value in sorted(overrides.items())},
            "partitions": partitions}


def _recovery_points(store: LogManager) -> dict:
    return {key: offset for entry in store.status() for key, offset in entry.recovery_points.items()}
