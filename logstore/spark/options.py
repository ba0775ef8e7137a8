"""The logstore data source's options: Spark's Kafka-source options, parsed and checked (no pyspark).

Spark hands a data source its options as strings in a case-insensitive dict (keys lower-cased), so
everything here parses strings and reports the offending option and value. The result is a frozen,
picklable ``SourceOptions`` that the planner, the stream reader and the read tasks share.

Options (names as Spark's Kafka source spells them: https://spark.apache.org/docs/latest/structured-streaming-kafka-integration.html):

* ``path`` (from ``load(path)``): the store's data dir, or several separated by commas.
* exactly one of ``subscribe`` (comma-separated topics), ``subscribePattern`` (a regex over topic
  names) or ``assign`` (JSON ``{"topicA": [0, 1]}``).
* ``startingOffsets``: ``"earliest"``, ``"latest"`` (streaming only) or JSON
  ``{"topic": {"0": 23, "1": -2}}`` with -2 = earliest, -1 = latest. Default: earliest for batch,
  latest for streaming. Partitions the JSON leaves out take the default.
* ``endingOffsets`` (batch only): ``"latest"`` or JSON with -1 = latest (-2 is not allowed).
* ``startingTimestamp`` (ms), or per partition ``startingOffsetsByTimestamp`` (JSON
  ``{"topic": {"0": ms}}``): start at the first record with timestamp >= it (through the time index).
  Precedence: startingTimestamp > startingOffsetsByTimestamp > startingOffsets. When a partition has
  no such record, ``startingOffsetsByTimestampStrategy`` decides: ``error`` (default) or ``latest``.
* ``endingTimestamp`` / ``endingOffsetsByTimestamp`` (batch only): end before the first record with
  timestamp >= it (the log end when there is none); they take precedence over ``endingOffsets``.
* ``minPartitions``, ``failOnDataLoss`` (default true), ``maxOffsetsPerTrigger`` (streaming),
  ``includeHeaders`` (default false).
* ``kafka.isolation.level``: ``read_uncommitted`` (the default, as Spark's Kafka source, whose
  consumer defaults to it) reads every record up to the log end offset, aborted transactions' records
  included; ``read_committed`` ends "latest" at the last stable offset (the first offset of a
  transaction still open) and leaves aborted transactions' records out. Transaction markers are
  never rows either way (their offsets are gaps, as in Kafka).
* ``arrow`` (logstore's own, default true): read tasks yield Arrow batches built from the batch
  columns; ``false`` yields one tuple per record (kept for comparison and as a fallback).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Mapping, Union

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
OffsetSpec = Union[str, dict]  # "earliest" | "latest" | {(topic, partition): offset, -2 or -1}

SOURCE_OPTIONS = ("path", "subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets",
                  "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
                  "endingTimestamp", "endingOffsetsByTimestamp", "minPartitions", "failOnDataLoss",
                  "maxOffsetsPerTrigger", "includeHeaders", "kafka.isolation.level", "arrow")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
TimestampSpec = Union[int, dict, None]  # one timestamp for every partition, or {(topic, partition): ms}
_KNOWN = {name.lower(): name for name in SOURCE_OPTIONS}


class SourceOptionError(ValueError):
    """An option of the logstore data source that cannot be used, with the option and its value."""


@dataclass(frozen=True)
class SourceOptions:
    """A source's parsed options (see the module docstring)."""

    data_dirs: tuple[str, ...]
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartition, ...] | None = None
    starting: OffsetSpec = "earliest"
    ending: OffsetSpec = "latest"
    starting_timestamps: TimestampSpec = None
    ending_timestamps: TimestampSpec = None
    timestamp_strategy: str = "error"
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    include_headers: bool = False
    isolation: str = "read_uncommitted"
    arrow: bool = True

    @property
    def read_committed(self) -> bool:
        return self.isolation == "read_committed"

    def selects(self, topic: str) -> bool:
        """Whether ``topic`` is one of the selected topics (by name, pattern or assignment)."""
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        if self.assign is not None:
            return any(assigned == topic for assigned, _ in self.assign)
        return topic in self.subscribe


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """Spark's options with lower-cased keys (``dict(options)`` of a CaseInsensitiveDict already is,
    a plain dict from a caller may not be)."""
    return {str(key).lower(): value for key, value in options.items()}


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Parse and check a read's options; raises ``SourceOptionError`` naming the option and value."""
    given = lower_keys(options)
    unknown = sorted(set(given) - set(_KNOWN))
    if unknown:
        raise SourceOptionError(f"unknown option {unknown[0]!r} for the logstore source "
                                f"(known: {', '.join(SOURCE_OPTIONS)})")
    data_dirs = parse_path(given.get("path"))
    chosen = [name for name in ("subscribe", "subscribepattern", "assign") if name in given]
    if len(chosen) != 1:
        raise SourceOptionError("the logstore source needs exactly one of the options subscribe, subscribePattern "
                                f"or assign; got {', '.join(_KNOWN[name] for name in chosen) or 'none'}")
    subscribe: tuple[str, ...] = ()
    pattern = assign = None
    if "subscribe" in given:
        subscribe = tuple(dict.fromkeys(name.strip() for name in given["subscribe"].split(",") if name.strip()))
        if not subscribe:
            raise SourceOptionError(f"option subscribe names no topic: {given['subscribe']!r}")
    elif "subscribepattern" in given:
        pattern = given["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SourceOptionError(f"option subscribePattern is not a valid regular expression: {pattern!r} "
                                    f"({exc})") from None
    else:
        assign = _parse_assign(given["assign"])
    default_start = "latest" if streaming else "earliest"
    starting = _parse_offsets("startingOffsets", given.get("startingoffsets", default_start), streaming)
    for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
        if name in given and streaming:
            raise SourceOptionError(f"option {_KNOWN[name]} is for batch queries only (a stream has no end)")
    ending = _parse_offsets("endingOffsets", given.get("endingoffsets", "latest"), streaming)
    strategy = given.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise SourceOptionError(f"option startingOffsetsByTimestampStrategy must be 'error' or 'latest', "
                                f"got {strategy!r}")
    isolation = str(given.get("kafka.isolation.level", "read_uncommitted")).strip().lower()
    if isolation not in ISOLATION_LEVELS:
        raise SourceOptionError(f"option kafka.isolation.level must be read_uncommitted or read_committed, "
                                f"got {given['kafka.isolation.level']!r}")
    return SourceOptions(
        data_dirs=data_dirs, subscribe=subscribe, subscribe_pattern=pattern, assign=assign, starting=starting,
        ending=ending, starting_timestamps=_parse_timestamps(given, "starting"),
        ending_timestamps=_parse_timestamps(given, "ending"), timestamp_strategy=strategy, min_partitions=_parse_int(given, "minpartitions", minimum=1),
        fail_on_data_loss=parse_bool(given, "failondataloss", True),
        max_offsets_per_trigger=_parse_int(given, "maxoffsetspertrigger", minimum=1),
        include_headers=parse_bool(given, "includeheaders", False), isolation=isolation,
        arrow=parse_bool(given, "arrow", True))


def parse_path(path: str | None) -> tuple[str, ...]:
    """The data dirs of the ``path`` option (comma-separated)."""
    if path is None or not str(path).strip():
        raise SourceOptionError('logstore needs the store\'s path: .load("/path/to/store"), .save(...) or '
                                '.start(...) (several data dirs: "/dir1,/dir2")')
    dirs = tuple(part.strip() for part in str(path).split(",") if part.strip())
    if not dirs:
        raise SourceOptionError(f"option path names no data dir: {path!r}")
    return dirs


def parse_bool(given: Mapping[str, str], name: str, default: bool) -> bool:
    """A boolean option ("true"/"false", any case)."""
    if name not in given:
        return default
    text = str(given[name]).strip().lower()
    if text not in ("true", "false"):
        raise SourceOptionError(f"option {_KNOWN.get(name, name)} must be true or false, got {given[name]!r}")
    return text == "true"


def _parse_int(given: Mapping[str, str], name: str, minimum: int) -> int | None:
    if name not in given:
        return None
    try:
        value = int(str(given[name]).strip())
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise SourceOptionError(f"option {_KNOWN.get(name, name)} must be an integer >= {minimum}, "
                                f"got {given[name]!r}")
    return value


def _parse_timestamps(given: Mapping[str, str], which: str) -> TimestampSpec:
    """``<which>Timestamp`` (one ms for every partition), else ``<which>OffsetsByTimestamp`` (JSON per
    partition), else None."""
    single = _parse_int(given, f"{which}timestamp", minimum=0)
    if single is not None or f"{which}offsetsbytimestamp" not in given:
        return single
    name = _KNOWN[f"{which}offsetsbytimestamp"]
    text = given[f"{which}offsetsbytimestamp"]
    parsed = _parse_json(name, text)
    if not isinstance(parsed, dict) or not parsed or not all(isinstance(v, dict) for v in parsed.values()):
        raise SourceOptionError(f'option {name} must be JSON like {{"topic": {{"0": 1700000000000}}}}, got {text!r}')
    timestamps = {}
    for topic, partitions in parsed.items():
        for partition, timestamp in partitions.items():
            if not str(partition).isdigit() or type(timestamp) is not int or timestamp < 0:
                raise SourceOptionError(f"option {name}: {topic!r} partition {partition!r} -> {timestamp!r} is not a "
                                        "partition number and a timestamp in ms (>= 0)")
            timestamps[(topic, int(partition))] = timestamp
    return timestamps


def _parse_json(name: str, text: str):
    try:
        return json.loads(text)
    except ValueError as exc:
        raise SourceOptionError(f"option {name} is not valid JSON: {text!r} ({exc})") from None


def _parse_assign(text: str) -> tuple[TopicPartition, ...]:
    parsed = _parse_json("assign", text)
    if not isinstance(parsed, dict) or not parsed:
        raise SourceOptionError(f'option assign must be a JSON object like {{"topicA": [0, 1]}}, got {text!r}')
    assigned = []
    for topic, partitions in parsed.items():
        if (not isinstance(partitions, list) or not partitions
                or not all(type(p) is int and p >= 0 for p in partitions)):
            raise SourceOptionError(f"option assign: topic {topic!r} needs a list of partition numbers, "
                                    f"got {partitions!r}")
        assigned.extend((topic, partition) for partition in partitions)
    return tuple(dict.fromkeys(assigned))


def _parse_offsets(name: str, text: str, streaming: bool) -> OffsetSpec:
    """"earliest", "latest" or Kafka's JSON, checked for where it is used."""
    word = str(text).strip()
    starting = name == "startingOffsets"
    if word.lower() in ("earliest", "latest"):
        word = word.lower()
        if starting and word == "latest" and not streaming:
            raise SourceOptionError("option startingOffsets cannot be 'latest' for a batch query (it would read "
                                    "nothing); use 'earliest' or JSON offsets")
        if not starting and word == "earliest":
            raise SourceOptionError("option endingOffsets cannot be 'earliest'; use 'latest' or JSON offsets")
        return word
    parsed = _parse_json(name, word)
    if not isinstance(parsed, dict) or not parsed:
        raise SourceOptionError(f'option {name} must be "earliest", "latest" or JSON like {{"topic": {{"0": 23}}}}, '
                                f"got {text!r}")
    offsets: dict[TopicPartition, int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise SourceOptionError(f"option {name}: topic {topic!r} needs an object of partition -> offset, "
                                    f"got {partitions!r}")
        for partition, offset in partitions.items():
            if not str(partition).isdigit() or type(offset) is not int or offset < EARLIEST:
                raise SourceOptionError(f"option {name}: {topic!r} partition {partition!r} -> {offset!r} is not a "
                                        "partition number and an offset (>= 0, -2 = earliest, -1 = latest)")
            if starting and offset == LATEST and not streaming:
                raise SourceOptionError(f"option {name}: -1 (latest) is not allowed for a batch query "
                                        f"({topic!r} partition {partition})")
            if not starting and offset == EARLIEST:
                raise SourceOptionError(f"option {name}: -2 (earliest) is not allowed as an ending offset "
                                        f"({topic!r} partition {partition})")
            offsets[(topic, int(partition))] = offset
    return offsets


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Kafka's offset JSON ``{"topic": {"0": offset}}`` (string partition keys, as Spark checkpoints
    them), sorted so equal offsets serialise equally."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = int(offset)
    return result


def offsets_from_json(data: object) -> dict[TopicPartition, int]:
    """The inverse of ``offsets_to_json`` (also accepts the JSON text)."""
    if isinstance(data, str):
        data = json.loads(data)
    if not isinstance(data, dict):
        raise SourceOptionError(f"not a logstore stream offset: {data!r}")
    try:
        return {(topic, int(partition)): int(offset)
                for topic, partitions in data.items() for partition, offset in partitions.items()}
    except (AttributeError, TypeError, ValueError):
        raise SourceOptionError(f"not a logstore stream offset: {data!r}") from None
