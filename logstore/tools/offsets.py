"""Offsets of a store's partitions, behind ``logstore offsets`` and ``logstore delete-records`` (the
store's side of Kafka's ``kafka-get-offsets`` and ``kafka-delete-records``).

What it owns:
- ``parse_time``: the ``--time`` of ``kafka-get-offsets`` (``earliest``, ``latest``,
  ``max-timestamp``, ms since the epoch, Kafka's -1/-2/-3, or an ISO 8601 date and time) as
  ListOffsets' timestamp;
- ``match_topics``: ``kafka-get-offsets``' ``--topic``, a regular expression matching whole topic
  names, where a topic of exactly that name wins;
- ``partition_offsets``: per partition of the topics asked for, the offset ``--time`` names (the log
  start, the log end, the first record with the largest timestamp - KIP-734 -, or the first record
  whose timestamp is at or after a time; None when there is no such record), as ``PartitionOffset``
  rows in Kafka's order (topic, then partition);
- ``parse_offset_json``: the ``--offset-json-file`` of ``kafka-delete-records``
  (``{"partitions": [{"topic", "partition", "offset"}], "version": 1}``) as ``{(topic, partition): offset}``;
- ``delete_records``: each partition's records below an offset made unreadable (``Log.delete_records``:
  the log start offset moves up, segments wholly below it are deleted); -1 means the log end offset,
  as in Kafka. An internal topic is refused, as Kafka's brokers refuse it.

Errors: a bad value raises ``ValueError`` naming it; an unknown topic or partition the store's
``LogStoreError``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from ..clock import parse_iso_ms
from ..manager.log_manager import LogManager
from ..manager.topics import is_internal_topic

EARLIEST, LATEST = -2, -1  # Kafka's ListOffsets timestamps for the log start and end
MAX_TIMESTAMP = -3  # KIP-734: the record with the largest timestamp (ListOffsets v7+)
TIME_NAMES = {"earliest": EARLIEST, "latest": LATEST, "max-timestamp": MAX_TIMESTAMP}
HIGH_WATERMARK = -1  # delete-records' offset for "everything" (Kafka's)
MAX_OFFSET_JSON_BYTES = 1 << 20  # an offset file is a short list: a bigger one is a mistake
_LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]+")  # the characters of Kafka's topic names


@dataclass(frozen=True)
class PartitionOffset:
    """One row of ``logstore offsets``: None for a time after every record's timestamp, or for
    max-timestamp in a partition without records (Kafka answers -1 there)."""

    topic: str
    partition: int
    offset: int | None


def parse_time(text: str) -> int:
    """``--time``: ``earliest`` (-2), ``latest`` (-1), ``max-timestamp`` (-3), ms since the epoch
    (-1, -2 and -3 as Kafka's tool takes them), or an ISO 8601 date and time
    (``logstore.clock.parse_iso_ms``: local time unless it names its offset, as every time of the
    command line)."""
    word = text.strip().lower()
    if word in TIME_NAMES:
        return TIME_NAMES[word]
    try:
        number = int(word)
    except ValueError:
        pass
    else:
        if number < MAX_TIMESTAMP:
            raise ValueError(f"--time {text!r}: a time in ms must be >= 0 (or -1 latest, -2 earliest, "
                             "-3 max-timestamp)")
        return number
    try:
        return parse_iso_ms(text)
    except ValueError as exc:
        if "before 1970" in str(exc):
            raise ValueError(f"--time {exc}") from None
        raise ValueError(f"--time {text!r} is not earliest, latest, max-timestamp, ms since the epoch or an "
                         "ISO 8601 date and time (2024-05-01T12:00:00Z)") from None


def select_partitions(counts: Mapping[str, int], partitions: Sequence[int] | None) -> list[tuple[str, int]]:
    """``(topic, partition)`` for each topic of ``counts`` (its partition count), sorted, keeping
    only ``partitions`` when given; a partition no topic has is an error naming it."""
    chosen = []
    for topic in sorted(counts):
        numbers = range(counts[topic]) if partitions is None else [p for p in partitions if p < counts[topic]]
        chosen.extend((topic, p) for p in numbers)
    if partitions is not None:
        missing = sorted(set(partitions) - {p for _, p in chosen})
        if missing:
            raise ValueError(f"no partition {missing[0]} in {', '.join(sorted(counts)) or 'no topic'}")
    return chosen


def topic_counts(topics: Iterable[str], partition_count) -> dict[str, int]:
    """``{topic: partition count}`` through ``partition_count(topic)``."""
    return {topic: partition_count(topic) for topic in topics}


def match_topics(pattern: str | None, names: Sequence[str], exclude_internal: bool = False) -> list[str]:
    """The topics ``kafka-get-offsets --topic PATTERN`` asks for, of the existing ``names``: every
    one without a pattern; the topic named exactly ``pattern`` when there is one (a name wins over
    the expression it also is); else those the regular expression matches whole, sorted. Internal
    topics are left out when asked, except one named exactly. A pattern that matches nothing is
    returned as the name it may be (the lookup then says that topic does not exist), unless it
    cannot be a topic's name, which is an error naming it."""
    if pattern is not None and pattern in names:
        return [pattern]
    if pattern is None:
        chosen = list(names)
    else:
        try:
            expression = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"topic {pattern!r} does not exist, and it is not a regular expression either "
                             f"({exc})") from None
        chosen = [name for name in names if expression.fullmatch(name)]
    chosen = sorted(name for name in chosen if not (exclude_internal and is_internal_topic(name)))
    if pattern is not None and not chosen:
        if _LEGAL_TOPIC.fullmatch(pattern):  # may be a name: the lookup reports the unknown topic
            return [pattern]
        raise ValueError(f"no topic matches the regular expression {pattern!r}")
    return chosen


def partition_offsets(store: LogManager, topic: str | None, timestamp: int,
                      partitions: Sequence[int] | None = None, exclude_internal: bool = False) -> list[PartitionOffset]:
    """The offset ``timestamp`` (``parse_time``) names in each partition of the topics ``topic`` (a
    name or a regular expression, ``match_topics``; default: every topic) names."""
    counts = topic_counts(match_topics(topic, store.topics(), exclude_internal), store.partitions)
    rows = []
    for name, partition in select_partitions(counts, partitions):
        log = store.get_log(name, partition)
        if timestamp == MAX_TIMESTAMP:
            found = log.max_timestamp_offset()
            offset = None if found is None else found[1]
        else:
            offset = log.offset_for_timestamp(timestamp)
        rows.append(PartitionOffset(name, partition, offset))
    return rows


def parse_offset_json(text: str | bytes) -> dict[tuple[str, int], int]:
    """Kafka's delete-records file: ``{"partitions": [{"topic": T, "partition": P, "offset": O}],
    "version": 1}``."""
    if len(text) > MAX_OFFSET_JSON_BYTES:
        raise ValueError(f"the offset JSON file is larger than {MAX_OFFSET_JSON_BYTES} bytes")
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"the offset JSON file is not valid JSON: {exc}") from None
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError('the offset JSON file needs {"partitions": [{"topic": T, "partition": P, "offset": O}, ...]}')
    wanted: dict[tuple[str, int], int] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) or \
                not _is_int(entry.get("partition")) or entry["partition"] < 0 or not _is_int(entry.get("offset")) \
                or entry["offset"] < HIGH_WATERMARK:
            raise ValueError(f"the offset JSON file has a bad entry {entry!r}: it needs a topic, a partition >= 0 "
                             "and an offset >= -1")
        key = (entry["topic"], entry["partition"])
        if key in wanted:
            raise ValueError(f"the offset JSON file names {key[0]}-{key[1]} twice")
        wanted[key] = entry["offset"]
    return wanted


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_deletable(wanted: Mapping[tuple[str, int], int]) -> None:
    """Refuse an internal topic (its records are the broker's own state) and an offset below -1."""
    for (topic, partition), offset in wanted.items():
        if is_internal_topic(topic):
            raise ValueError(f"{topic} is an internal topic: its records cannot be deleted")
        if not _is_int(offset) or offset < HIGH_WATERMARK:
            raise ValueError(f"{topic}-{partition}: offset must be >= 0 (or -1, the log end), got {offset!r}")


def delete_records(store: LogManager, wanted: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """Delete the records below each offset of ``wanted`` (-1: the log end offset); returns each
    partition's log start offset afterwards (Kafka's low watermark). Every partition is checked
    to exist and every offset to be within its log before anything is deleted."""
    check_deletable(wanted)
    logs = {}
    for (topic, partition), offset in sorted(wanted.items()):
        log = logs[(topic, partition)] = store.get_log(topic, partition)
        if offset > log.log_end_offset:
            raise ValueError(f"{topic}-{partition}: cannot delete records before {offset}: its log end offset is "
                             f"{log.log_end_offset}")
    return {tp: log.delete_records(log.log_end_offset if wanted[tp] == HIGH_WATERMARK else wanted[tp])
            for tp, log in logs.items()}
