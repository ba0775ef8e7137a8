"""Topics: name rules, partition directory names, the key partitioner, and the topic metadata file.

Topic names follow Kafka's rule (letters, digits, '.', '_' and '-'; 1 to 249 characters; not '.' or
'..'), so a topic name can never reach outside a data dir. A partition lives in the directory
``<topic>-<partition>`` directly inside one of the data dirs.

``topics.json`` holds every topic's partition count, config overrides and state, with a version and a
CRC. A copy lives in every data dir, and each file holds the object twice (so one damaged byte is
survived even with one data dir); each write replaces all copies crash-safely with a higher
``generation``, and a reader takes the newest intact copy, so a crash between two copies is harmless. Creating
and deleting a topic are two-phase: the metadata first records the topic as ``creating`` or
``deleting``, the directories change, then the metadata records the result; an open that finds an
unfinished step finishes it.

Internal topics (``INTERNAL_TOPICS``) hold a broker's own state: ``__consumer_offsets`` the consumer
groups' committed offsets (written by ``logstore.group`` only), ``__transaction_state`` reserved for
a transaction coordinator. Appending to one through the store's API is refused, and deleting one
needs ``allow_internal=True``; the server refuses both to clients whatever their ACLs.

Each topic has one key placement, recorded with it in ``topics.json`` (``placement``) and shown as
the read-only topic config ``logstore.key.placement``; every path that places a keyed record (the
store's ``append``, the CLI, the client's producer, the Spark writer, ``mirror``) uses it, so a key
is always in one partition of its topic:

- ``murmur2`` (every topic created by this version): Kafka's default partitioner,
  ``toPositive(murmur2(key)) % partitions`` as Kafka's Java producer, kafka-python, aiokafka and
  kafkajs compute it (librdkafka with ``partitioner=murmur2_random``);
- ``crc32``: ``zlib.crc32(key) % partitions``, what earlier versions used for every topic (a
  ``topics.json`` of version 1 or 2 has no placement: its topics are ``crc32``), kept so that no key
  of an existing topic moves. Only this engine's own paths know it: Kafka's clients place by murmur2.

``murmur2`` is pure Python (the engine uses the standard library only), written for the append path:
about a microsecond for a 16-byte key, where ``zlib.crc32`` takes 50 ns.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from ..errors import CorruptCheckpointError, InvalidTopicError
from ..fs import FileSystem

logger = logging.getLogger(__name__)

TOPICS_FILE = "topics.json"
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_METADATA_VERSION = 3  # two copies of the object in one file; each topic records its key placement
_TWO_COPY_VERSIONS = (2, _METADATA_VERSION)  # version 2: no placement (its topics are crc32); still read
_LEGACY_METADATA_VERSION = 1  # one copy, no placement (earlier versions); still read
READY, CREATING, DELETING = "ready", "creating", "deleting"
DELETE_DIR_SUFFIX = "-delete"
STAGING_DIR = ".staging"  # a data dir's area for writers' staged records (logstore.spark.sink); no partition
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
"""Topics that hold the broker's own state (Kafka's ``Topic.isInternal``): the consumer groups' offsets,
and the transaction coordinator's log (its name reserved)."""


def is_internal_topic(name: str) -> bool:
    """Whether ``name`` is one of ``INTERNAL_TOPICS``."""
    return name in INTERNAL_TOPICS


def validate_topic_name(name: Any) -> str:
    """Return ``name`` if it is a legal topic name; raise ``InvalidTopicError`` otherwise."""
    if not isinstance(name, str):
        raise InvalidTopicError(f"a topic name must be a string, got {name!r}")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if not _TOPIC_NAME.fullmatch(name):
        raise InvalidTopicError(f"illegal topic name {name!r}: use 1 to 249 letters, digits, '.', '_' or '-'")
    return name


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def deleted_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>.<32 hex>-delete``: where a partition dir goes while it is deleted. The
    topic part is shortened (as Kafka does) so the name fits the 255-byte limit of a file name."""
    suffix = f"-{partition}.{os.urandom(16).hex()}{DELETE_DIR_SUFFIX}"
    return topic[: 255 - len(suffix)] + suffix


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` for a partition directory name, None for anything else."""
    topic, dash, number = name.rpartition("-")
    if not dash or not topic or not number.isdigit() or not _TOPIC_NAME.fullmatch(topic):
        return None
    return topic, int(number)


MURMUR2, CRC32 = "murmur2", "crc32"
PLACEMENTS = (MURMUR2, CRC32)
"""The key placements a topic can have: ``murmur2`` (Kafka's default, every new topic) or ``crc32``
(topics created before placements were recorded)."""
PLACEMENT_CONFIG = "logstore.key.placement"
"""The read-only topic config that shows a topic's placement (``topics describe``, DescribeConfigs);
CreateTopics and ``create_topic`` take it, nothing alters it."""
_WORDS = [struct.Struct(f"<{count}I").unpack_from for count in range(65)]
"""Little-endian 32-bit word readers for keys of up to 256 bytes, made once (a longer key builds its own)."""


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data`` (seed 0x9747b28c), as an unsigned int: Java's
    ``Utils.murmur2(data) & 0xffffffff``. Written for the append path: the words read in one call,
    the constants inline, one mask per step (about a microsecond for a 16-byte key)."""
    length = len(data)
    h = 0x9747B28C ^ length
    count = length >> 2
    if count:
        for k in (_WORDS[count](data) if count <= 64 else struct.unpack_from(f"<{count}I", data)):
            k = (k * 0x5BD1E995) & 0xFFFFFFFF
            h = ((h * 0x5BD1E995) ^ (k ^ (k >> 24)) * 0x5BD1E995) & 0xFFFFFFFF
    rest = length & 3
    if rest:
        whole = length - rest
        if rest == 3:
            h ^= data[whole + 2] << 16
        if rest >= 2:
            h ^= data[whole + 1] << 8
        h = ((h ^ data[whole]) * 0x5BD1E995) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * 0x5BD1E995) & 0xFFFFFFFF
    return h ^ (h >> 15)


def partition_for_key(key: bytes, partitions: int, placement: str = MURMUR2) -> int:
    """The partition of ``key`` in a topic of ``partitions`` partitions placed by ``placement``:
    ``toPositive(murmur2(key)) % partitions`` (Kafka's) or ``crc32(key) % partitions``."""
    if placement == MURMUR2:
        return (murmur2(key) & 0x7FFFFFFF) % partitions
    if placement == CRC32:
        return zlib.crc32(key) % partitions
    raise ValueError(f"unknown key placement {placement!r}: use one of {', '.join(PLACEMENTS)}")


def check_placement(placement: Any) -> str:
    """``placement`` if it is one of ``PLACEMENTS``; ``ValueError`` naming it otherwise."""
    if placement not in PLACEMENTS:
        raise ValueError(f"{PLACEMENT_CONFIG} must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    return placement


@dataclass
class TopicMetadata:
    """One topic's entry in ``topics.json``."""

    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    state: str = READY
    placement: str = MURMUR2  # how keys map to partitions (PLACEMENTS); fixed for the topic's life


class TopicsFile:
    """The replicated ``topics.json``: ``load`` the newest intact copy, ``save`` to every dir."""

    def __init__(self, fs: FileSystem, dir_paths: list[str]) -> None:
        self._fs = fs
        self._dir_paths = dir_paths
        self.generation = 0
        self.topics: dict[str, TopicMetadata] = {}
        self.stale_dirs: list[str] = []  # dirs whose copy is missing, damaged or older
        self.problems: list[str] = []

    def load(self) -> None:
        copies: dict[str, tuple[int, dict]] = {}
        damaged: set[str] = set()
        for dir_path in self._dir_paths:
            path = os.path.join(dir_path, TOPICS_FILE)
            if not self._fs.exists(path):
                continue
            try:
                generation, topics, damage = parse_topics_file(self._fs.read_file(path), path)
            except CorruptCheckpointError as exc:
                self.problems.append(str(exc))
                continue
            copies[dir_path] = (generation, topics)
            if damage is not None:
                logger.warning("%s: %s; the intact copy is used (rewritten by the next writable open)", path, damage)
                damaged.add(dir_path)
        if not copies:
            if self.problems:
                raise CorruptCheckpointError("every copy of the topic metadata is damaged: "
                                             + "; ".join(self.problems))
            self.stale_dirs = list(self._dir_paths)
            return
        self.generation, topics = max(copies.values(), key=lambda copy: copy[0])
        self.topics = {name: TopicMetadata(entry["partitions"], dict(entry["config"]), entry["state"],
                                            entry["placement"])
                       for name, entry in topics.items()}
        self.stale_dirs = [dir_path for dir_path in self._dir_paths
                           if copies.get(dir_path, (-1,))[0] != self.generation or dir_path in damaged]

    def save(self) -> None:
        """Write the current topics to every dir with the next generation."""
        self.generation += 1
        data = _format(self.generation, self.topics)
        for dir_path in self._dir_paths:
            self._fs.write_file_atomic(os.path.join(dir_path, TOPICS_FILE), data)
        self.stale_dirs = []

    def repair(self) -> None:
        """Rewrite the copies that are missing, damaged or older than the newest one."""
        if self.stale_dirs and (self.topics or self.generation):
            data = _format(self.generation, self.topics)
            for dir_path in self.stale_dirs:
                self._fs.write_file_atomic(os.path.join(dir_path, TOPICS_FILE), data)
        self.stale_dirs = []


def _body(generation: int, topics: dict[str, TopicMetadata]) -> dict:
    return {"version": _METADATA_VERSION, "generation": generation,
            "topics": {name: {"partitions": meta.partitions, "config": meta.config, "state": meta.state,
                              "placement": meta.placement}
                       for name, meta in sorted(topics.items())}}


def _format(generation: int, topics: dict[str, TopicMetadata]) -> bytes:
    """Two identical copies of the checksummed JSON object, so one damaged byte leaves one intact."""
    body = _body(generation, topics)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    body["crc32"] = zlib.crc32(canonical)
    copy = (json.dumps(body, sort_keys=True, indent=2) + "\n").encode()
    return copy + copy


def parse_topics_file(data: bytes, path: str) -> tuple[int, dict, str | None]:
    """``(generation, topics, damage)`` of a ``topics.json``: ``damage`` describes a damaged copy
    when the other one was used. Raises ``CorruptCheckpointError`` naming ``path`` when no copy is
    intact. Versions 1 (one copy per file) and 2 (no placements: every topic's is ``crc32``) of
    earlier versions are still read. ``topics`` maps each name to its entry, ``placement`` filled in."""
    half = len(data) // 2
    if data[:half] == data[half:] and data:
        return (*_parse_copy(data[:half], path, _TWO_COPY_VERSIONS), None)
    failures = []
    candidates = [("the file", data, (_LEGACY_METADATA_VERSION,))]  # a version-1 file is one copy
    try:  # the first copy ends where its JSON object does
        text = data.decode("utf-8", "surrogateescape")
        _, end = json.JSONDecoder().raw_decode(text)
        candidates.append(("first copy", text[:end].encode("utf-8", "surrogateescape"), _TWO_COPY_VERSIONS))
    except (ValueError, RecursionError) as exc:
        failures.append(f"first copy: {exc}")
    candidates.append(("second copy", data[half:], _TWO_COPY_VERSIONS))
    for label, candidate, versions in candidates:
        try:
            generation, topics = _parse_copy(candidate, path, versions)
        except CorruptCheckpointError as exc:
            failures.append(f"{label}: {str(exc).split(' is damaged: ', 1)[-1]}")
            continue
        if label == "the file":
            return generation, topics, None
        copy_failures = [failure for failure in failures if not failure.startswith("the file")]
        return generation, topics, "; ".join(copy_failures) or "the second copy differs from the first"
    raise CorruptCheckpointError(f"topic metadata {path} is damaged: " + "; ".join(failures[1:]))


def _parse_copy(data: bytes, path: str, versions: tuple[int, ...]) -> tuple[int, dict]:
    try:
        body = json.loads(data.decode("utf-8"))
        stored_crc = body.pop("crc32")
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        if zlib.crc32(canonical) != stored_crc:
            raise ValueError("checksum mismatch")
        if body["version"] not in versions:
            raise ValueError(f"unknown version {body['version']!r}")
        topics = body["topics"]
        for name, entry in topics.items():
            validate_topic_name(name)
            if (not isinstance(entry["partitions"], int) or entry["partitions"] < 1
                    or entry["state"] not in (READY, CREATING, DELETING) or not isinstance(entry["config"], dict)):
                raise ValueError(f"bad entry for topic {name!r}")
            if body["version"] < _METADATA_VERSION:
                entry["placement"] = CRC32  # placed by crc32 before placements were recorded: kept
            elif entry["placement"] not in PLACEMENTS:
                raise ValueError(f"unknown key placement {entry['placement']!r} of topic {name!r}")
        return int(body["generation"]), topics
    except (ValueError, KeyError, TypeError, AttributeError, InvalidTopicError, RecursionError) as exc:
        raise CorruptCheckpointError(f"topic metadata {path} is damaged: {exc}") from None
