"""Topic configuration with Kafka's keys, defaults and validation rules (``LogConfig``).

A topic's config is a set of overrides (``{"segment.bytes": "1048576", ...}``) on top of defaults. The
defaults are Kafka's, unless the store was opened with broker-level settings, which use Kafka's
broker names (``log.segment.bytes``, ``log.retention.ms``, ...; see ``BROKER_SYNONYMS``). Values may
be given as Python values or as strings (the CLI passes strings). Unknown keys and bad values raise
``InvalidConfigError`` naming the key and the value; nothing half-applied is ever kept.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .errors import InvalidConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


def _parse_int(key: str, value: Any, minimum: int, maximum: int) -> int:
    if isinstance(value, bool):
        raise InvalidConfigError(f"invalid value {value!r} for config {key!r}: expected an integer")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise InvalidConfigError(f"invalid value {value!r} for config {key!r}: expected an integer") from None
    if not isinstance(value, int):
        raise InvalidConfigError(f"invalid value {value!r} for config {key!r}: expected an integer")
    if not minimum <= value <= maximum:
        bound = f"at least {minimum}" if maximum >= LONG_MAX else f"between {minimum} and {maximum}"
        raise InvalidConfigError(f"invalid value {value!r} for config {key!r}: must be {bound}")
    return value


def _integer(minimum: int, maximum: int = LONG_MAX) -> Callable[[str, Any], int]:
    return lambda key, value: _parse_int(key, value, minimum, maximum)


def _ratio(key: str, value: Any) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        ratio = float(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"invalid value {value!r} for config {key!r}: expected a number") from None
    if not 0.0 <= ratio <= 1.0:
        raise InvalidConfigError(f"invalid value {value!r} for config {key!r}: must be between 0 and 1")
    return ratio


def _boolean(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidConfigError(f"invalid value {value!r} for config {key!r}: expected true or false")


def integer_setting(minimum: int, maximum: int = LONG_MAX) -> Callable[[str, Any], int]:
    """The parser of an integer setting in ``minimum..maximum`` (errors name the key and value),
    for layers above that keep settings of their own (the server's)."""
    return _integer(minimum, maximum)


boolean_setting = _boolean  # the parser of a true/false setting, for layers above


def _number(key: str, value: Any) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"invalid value {value!r} for config {key!r}: expected a number") from None


def _load_factor(key: str, value: Any) -> float:
    factor = _number(key, value)
    if not 0.0 < factor <= 1.0:
        raise InvalidConfigError(f"invalid value {value!r} for config {key!r}: must be in (0, 1]")
    return factor


def _positive_rate(key: str, value: Any) -> float:
    rate = _number(key, value)
    if not rate > 0:
        raise InvalidConfigError(f"invalid value {value!r} for config {key!r}: must be > 0")
    return rate


def _cleanup_policy(key: str, value: Any) -> str:
    items = value.split(",") if isinstance(value, str) else value
    try:
        policies = [str(item).strip().lower() for item in items]
    except TypeError:
        raise InvalidConfigError(f"invalid value {value!r} for config {key!r}") from None
    if not policies or any(policy not in ("compact", "delete") for policy in policies):
        raise InvalidConfigError(
            f"invalid value {value!r} for config {key!r}: expected 'delete', 'compact' or 'compact,delete'")
    return ",".join(sorted(set(policies)))


def _choice(*choices: str) -> Callable[[str, Any], str]:
    def parse(key: str, value: Any) -> str:
        if not isinstance(value, str) or value.strip() not in choices:
            raise InvalidConfigError(
                f"invalid value {value!r} for config {key!r}: expected one of {', '.join(choices)}")
        return value.strip()
    return parse


COMPRESSION_TYPES = ("uncompressed", "producer", "gzip", "snappy", "lz4", "zstd")
"""Kafka's values of ``compression.type``."""
OPTIONAL_CODECS = ("snappy", "lz4", "zstd")
"""The codecs the standard library lacks: they come from ``COMPRESSION_MODULE`` when it is installed."""
COMPRESSION_MODULE = "cramjam"
COMPRESSION_INSTALL_HINT = "pip install 'kafka-logstore[compression]'"


def optional_codecs_available() -> bool:
    """Whether snappy, lz4 and zstd can be used (``cramjam`` is installed; not imported here)."""
    return importlib.util.find_spec(COMPRESSION_MODULE) is not None


def _compression_type(key: str, value: Any) -> str:
    name = _choice(*COMPRESSION_TYPES)(key, value)
    if name in OPTIONAL_CODECS and not optional_codecs_available():
        raise InvalidConfigError(f"invalid value {value!r} for config {key!r}: {name} needs the "
                                 f"{COMPRESSION_MODULE} package ({COMPRESSION_INSTALL_HINT})")
    return name


@dataclass(frozen=True)
class _Key:
    name: str
    field: str
    default: Any
    parse: Callable[[str, Any], Any]
    doc: str


_KEYS = [
    _Key("segment.bytes", "segment_bytes", 1 << 30, _integer(64, INT_MAX),
         "roll to a new segment when the active one would grow past this many bytes"),
    _Key("segment.ms", "segment_ms", 7 * 24 * 3600 * 1000, _integer(1),
         "roll when the active segment's records span more than this (record time)"),
    _Key("segment.index.bytes", "segment_index_bytes", 10 * 1024 * 1024, _integer(12, INT_MAX),
         "preallocated size of each active segment's .index and .timeindex files"),
    _Key("index.interval.bytes", "index_interval_bytes", 4096, _integer(0, INT_MAX),
         "bytes of data between two sparse index entries"),
    _Key("max.message.bytes", "max_message_bytes", 1048588, _integer(0, INT_MAX),
         "largest batch; larger appends are split, and a single larger record is rejected"),
    _Key("cleanup.policy", "cleanup_policy", "delete", _cleanup_policy,
         "'delete' (retention), 'compact' (keep the latest value per key) or 'compact,delete'"),
    _Key("retention.ms", "retention_ms", 7 * 24 * 3600 * 1000, _integer(-1),
         "delete segments whose newest record is older than this; -1 keeps them forever"),
    _Key("retention.bytes", "retention_bytes", -1, _integer(-LONG_MAX),
         "delete the oldest segments while the partition is larger than this; negative: no limit"),
    _Key("flush.messages", "flush_messages", LONG_MAX, _integer(1),
         "fsync once this many records are unflushed (checked on every append)"),
    _Key("flush.ms", "flush_ms", LONG_MAX, _integer(0),
         "fsync when the log has not been flushed for this long (scheduled flusher)"),
    _Key("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", 0.5, _ratio,
         "the cleaner compacts a log once its dirty fraction exceeds this"),
    _Key("delete.retention.ms", "delete_retention_ms", 24 * 3600 * 1000, _integer(0),
         "how long tombstones survive after the cleaning that first saw them"),
    _Key("min.compaction.lag.ms", "min_compaction_lag_ms", 0, _integer(0),
         "records younger than this are never compacted"),
    _Key("max.compaction.lag.ms", "max_compaction_lag_ms", LONG_MAX, _integer(1),
         "records older than this make their log eligible for compaction whatever its ratio"),
    _Key("file.delete.delay.ms", "file_delete_delay_ms", 60000, _integer(0),
         "delay between renaming a deleted segment to .deleted and removing it"),
    _Key("compression.type", "compression_type", "producer", _compression_type,
         "the codec of every stored batch: 'gzip' (zlib), 'snappy', 'lz4', 'zstd' (these three need "
         "the compression extra), 'uncompressed', or 'producer': the codec the producer sent"),
    _Key("message.timestamp.type", "message_timestamp_type", "CreateTime",
         _choice("CreateTime", "LogAppendTime"),
         "CreateTime keeps each record's timestamp; LogAppendTime stamps batches with the append time"),
    _Key("message.timestamp.difference.max.ms", "message_timestamp_difference_max_ms", LONG_MAX, _integer(0),
         "deprecated (KIP-937): the before and after limits below, where those are left at their default"),
    _Key("message.timestamp.before.max.ms", "message_timestamp_before_max_ms", LONG_MAX, _integer(0),
         "CreateTime topics refuse a record whose timestamp is more than this before the append time"),
    _Key("message.timestamp.after.max.ms", "message_timestamp_after_max_ms", LONG_MAX, _integer(0),
         "CreateTime topics refuse a record whose timestamp is more than this after the append time"),
]
TOPIC_KEYS: dict[str, _Key] = {key.name: key for key in _KEYS}

BROKER_SYNONYMS: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "compression.type": "compression.type",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.difference.max.ms": "message.timestamp.difference.max.ms",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
}
# Kafka's coarser broker units, converted to the millisecond setting they stand for.
_BROKER_UNITS: dict[str, tuple[str, int]] = {
    "log.roll.hours": ("segment.ms", 3600 * 1000),
    "log.retention.minutes": ("retention.ms", 60 * 1000),
    "log.retention.hours": ("retention.ms", 3600 * 1000),
}


@dataclass(frozen=True)
class LogConfig:
    """The effective configuration of one topic (all partitions share it). Build it with
    ``LogConfig.from_properties``; fields mirror Kafka's keys in snake_case."""

    segment_bytes: int = TOPIC_KEYS["segment.bytes"].default
    segment_ms: int = TOPIC_KEYS["segment.ms"].default
    segment_index_bytes: int = TOPIC_KEYS["segment.index.bytes"].default
    index_interval_bytes: int = TOPIC_KEYS["index.interval.bytes"].default
    max_message_bytes: int = TOPIC_KEYS["max.message.bytes"].default
    cleanup_policy: str = TOPIC_KEYS["cleanup.policy"].default
    retention_ms: int = TOPIC_KEYS["retention.ms"].default
    retention_bytes: int = TOPIC_KEYS["retention.bytes"].default
    flush_messages: int = TOPIC_KEYS["flush.messages"].default
    flush_ms: int = TOPIC_KEYS["flush.ms"].default
    min_cleanable_dirty_ratio: float = TOPIC_KEYS["min.cleanable.dirty.ratio"].default
    delete_retention_ms: int = TOPIC_KEYS["delete.retention.ms"].default
    min_compaction_lag_ms: int = TOPIC_KEYS["min.compaction.lag.ms"].default
    max_compaction_lag_ms: int = TOPIC_KEYS["max.compaction.lag.ms"].default
    file_delete_delay_ms: int = TOPIC_KEYS["file.delete.delay.ms"].default
    compression_type: str = TOPIC_KEYS["compression.type"].default
    message_timestamp_type: str = TOPIC_KEYS["message.timestamp.type"].default
    message_timestamp_difference_max_ms: int = TOPIC_KEYS["message.timestamp.difference.max.ms"].default
    message_timestamp_before_max_ms: int = TOPIC_KEYS["message.timestamp.before.max.ms"].default
    message_timestamp_after_max_ms: int = TOPIC_KEYS["message.timestamp.after.max.ms"].default

    def __post_init__(self) -> None:
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(
                f"min.compaction.lag.ms ({self.min_compaction_lag_ms}) must not exceed "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})")

    @classmethod
    def from_properties(cls, overrides: Mapping[str, Any] | None = None,
                        defaults: "LogConfig | None" = None) -> "LogConfig":
        """Validate ``overrides`` (Kafka topic keys) and apply them on top of ``defaults``."""
        changes = {TOPIC_KEYS[key].field: value for key, value in parse_overrides(overrides or {}).items()}
        return dataclasses.replace(defaults or cls(), **changes)

    @classmethod
    def from_broker_properties(cls, settings: Mapping[str, Any]) -> "LogConfig":
        """Topic defaults from broker-level settings (``log.segment.bytes`` and the like)."""
        overrides: dict[str, Any] = {}
        for key, value in settings.items():
            if key in BROKER_SYNONYMS:
                topic_key = BROKER_SYNONYMS[key]
                overrides[topic_key] = TOPIC_KEYS[topic_key].parse(key, value)  # errors name ``key``
            elif key not in _BROKER_UNITS and key not in MANAGER_KEYS and key not in PRODUCER_KEYS:
                raise InvalidConfigError(f"unknown store setting {key!r}")
        # Kafka's precedence: the millisecond key, then minutes, then hours.
        for key, (topic_key, unit_ms) in _BROKER_UNITS.items():
            if key in settings and topic_key not in overrides:
                amount = _parse_int(key, settings[key], -1, LONG_MAX // unit_ms)
                overrides[topic_key] = amount * unit_ms if amount >= 0 else -1
        return cls.from_properties(overrides)

    def to_properties(self) -> dict[str, Any]:
        """Every key with its effective value, by Kafka name."""
        return {key.name: getattr(self, key.field) for key in _KEYS}

    @property
    def timestamp_bounds_ms(self) -> tuple[int, int] | None:
        """How far before and after the append time a record's timestamp may be on a CreateTime
        topic (Kafka's rule: ``message.timestamp.before/after.max.ms``, each falling back to the
        deprecated ``message.timestamp.difference.max.ms`` while at its default); None when
        unlimited."""
        if self.message_timestamp_type != "CreateTime":
            return None
        before = self.message_timestamp_before_max_ms
        after = self.message_timestamp_after_max_ms
        before = self.message_timestamp_difference_max_ms if before == LONG_MAX else before
        after = self.message_timestamp_difference_max_ms if after == LONG_MAX else after
        return None if before == after == LONG_MAX else (before, after)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def max_segment_ms(self) -> int:
        """segment.ms, capped by max.compaction.lag.ms for compacted topics (as in Kafka)."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms


def parse_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Validate topic-level overrides; returns them parsed (by Kafka key). Raises on the first bad
    key or value."""
    if not isinstance(overrides, Mapping):
        raise TypeError(f"config must be a mapping of Kafka keys to values, got {overrides!r}")
    parsed = {}
    for key, value in overrides.items():
        spec = TOPIC_KEYS.get(key)
        if spec is None:
            known = ", ".join(sorted(TOPIC_KEYS))
            raise InvalidConfigError(f"unknown topic config {key!r} (known: {known})")
        parsed[key] = spec.parse(key, value)
    return parsed


def config_string(value: Any) -> str | None:
    """A config value as Kafka shows it (DescribeConfigs, kafka-configs): a string, booleans in
    lower case; None stays None (no value)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    """Parse ``KEY=VALUE`` strings (CLI ``--config``/``--set``) into a dict; raises on a malformed
    pair."""
    result = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidConfigError(f"expected KEY=VALUE, got {pair!r}")
        result[key.strip()] = value.strip()
    return result


def describe_keys() -> list[tuple[str, Any, str]]:
    """(key, default, description) for every topic key, for help texts and docs."""
    return [(key.name, key.default, key.doc) for key in _KEYS]


def describe_broker_keys() -> list[tuple[str, Any, str, str]]:
    """(broker key, default, description, topic key) for every broker-level topic default
    (``BROKER_SYNONYMS`` and Kafka's hour and minute forms), for docs."""
    rows = [(key, TOPIC_KEYS[topic].default, TOPIC_KEYS[topic].doc, topic) for key, topic in BROKER_SYNONYMS.items()]
    for key, (topic, unit_ms) in _BROKER_UNITS.items():
        unit = "hours" if unit_ms == 3600 * 1000 else "minutes"
        rows.append((key, None, f"{topic} in {unit}, when no finer form of it is given", topic))
    return rows


# --- store-wide (LogManager) settings ----------------------------------------------------------------

_MANAGER_KEYS = [
    _Key("log.retention.check.interval.ms", "retention_check_interval_ms", 300000, _integer(1),
         "how often the retention job deletes expired segments"),
    _Key("log.flush.scheduler.interval.ms", "flush_check_interval_ms", LONG_MAX, _integer(1),
         "how often the flusher looks for logs past flush.ms"),
    _Key("log.flush.offset.checkpoint.interval.ms", "recovery_point_checkpoint_interval_ms", 60000, _integer(1),
         "how often the recovery points are written to recovery-point-offset-checkpoint"),
    _Key("log.flush.start.offset.checkpoint.interval.ms", "log_start_offset_checkpoint_interval_ms", 60000,
         _integer(1), "how often the log start offsets are written to log-start-offset-checkpoint"),
    _Key("log.initial.task.delay.ms", "initial_task_delay_ms", 30000, _integer(0),
         "delay before the first run of each background job after startup"),
    _Key("log.descriptor.idle.ms", "descriptor_idle_ms", 300000, _integer(1),
         "how often the active segments of logs not appended to or read since the previous run give "
         "back their descriptors and index mappings (reopened at the next use); a log idles between "
         "one and two intervals before it holds none (logstore's own: Kafka keeps them open)"),
    _Key("num.recovery.threads.per.data.dir", "recovery_threads_per_data_dir", 1, _integer(1, 256),
         "threads per data dir that load (and recover) its partitions at open and close them at shutdown"),
    _Key("log.cleaner.enable", "cleaner_enable", True, _boolean,
         "run the LogCleaner threads (compaction and the retention of compacted topics)"),
    _Key("log.cleaner.threads", "cleaner_threads", 1, _integer(0, 64), "cleaner threads"),
    _Key("log.cleaner.dedupe.buffer.size", "cleaner_dedupe_buffer_bytes", 128 * 1024 * 1024,
         _integer(4096), "memory of the cleaners' key -> offset maps, shared among the threads"),
    _Key("log.cleaner.io.buffer.load.factor", "cleaner_load_factor", 0.9, _load_factor,
         "how full a cleaner's map may get before a cleaning round stops mapping"),
    _Key("log.cleaner.io.max.bytes.per.second", "cleaner_max_bytes_per_second", float("inf"), _positive_rate,
         "throttle on the cleaners' read and write I/O (bytes per second)"),
    _Key("log.cleaner.backoff.ms", "cleaner_backoff_ms", 15000, _integer(0),
         "how long a cleaner thread sleeps when no log needs cleaning"),
    _Key("logstore.durable.max.pending.appends", "durable_max_pending_appends", 10000, _integer(1, INT_MAX),
         "durable appends returning a future (append_future, append_async) waiting for an fsync at once; "
         "a further one waits for a free slot, at most its timeout_ms (about 2 KB each: the records are "
         "already in the log)"),
]
MANAGER_KEYS: dict[str, _Key] = {key.name: key for key in _MANAGER_KEYS}
# Store settings the Kafka-protocol server lists among its own (its producer journal expires by them
# too: server_config.SERVER_KEYS documents them): a store reads them from its settings all the same.
PRODUCER_KEYS: dict[str, _Key] = {key.name: key for key in [
    _Key("producer.id.expiration.ms", "producer_id_expiration_ms", 86400000, _integer(1),
         "how long a partition keeps an idle producer's state (epoch, last offset) after its last batch; "
         "never while the producer's transaction is open there"),
    _Key("producer.id.expiration.check.interval.ms", "producer_id_expiration_check_interval_ms", 600000,
         _integer(1), "how often the producer-expiration job drops idle producers' state"),
]}


@dataclass(frozen=True)
class ManagerConfig:
    """Store-wide settings of a ``LogManager`` (Kafka's broker names): the background jobs' intervals
    and the recovery threads. Build it with ``ManagerConfig.from_broker_properties``."""

    retention_check_interval_ms: int = MANAGER_KEYS["log.retention.check.interval.ms"].default
    flush_check_interval_ms: int = MANAGER_KEYS["log.flush.scheduler.interval.ms"].default
    recovery_point_checkpoint_interval_ms: int = MANAGER_KEYS["log.flush.offset.checkpoint.interval.ms"].default
    log_start_offset_checkpoint_interval_ms: int = \
        MANAGER_KEYS["log.flush.start.offset.checkpoint.interval.ms"].default
    initial_task_delay_ms: int = MANAGER_KEYS["log.initial.task.delay.ms"].default
    descriptor_idle_ms: int = MANAGER_KEYS["log.descriptor.idle.ms"].default
    recovery_threads_per_data_dir: int = MANAGER_KEYS["num.recovery.threads.per.data.dir"].default
    cleaner_enable: bool = MANAGER_KEYS["log.cleaner.enable"].default
    cleaner_threads: int = MANAGER_KEYS["log.cleaner.threads"].default
    cleaner_dedupe_buffer_bytes: int = MANAGER_KEYS["log.cleaner.dedupe.buffer.size"].default
    cleaner_load_factor: float = MANAGER_KEYS["log.cleaner.io.buffer.load.factor"].default
    cleaner_max_bytes_per_second: float = MANAGER_KEYS["log.cleaner.io.max.bytes.per.second"].default
    cleaner_backoff_ms: int = MANAGER_KEYS["log.cleaner.backoff.ms"].default
    durable_max_pending_appends: int = MANAGER_KEYS["logstore.durable.max.pending.appends"].default
    producer_id_expiration_ms: int = PRODUCER_KEYS["producer.id.expiration.ms"].default
    producer_id_expiration_check_interval_ms: int = PRODUCER_KEYS["producer.id.expiration.check.interval.ms"].default

    @classmethod
    def from_broker_properties(cls, settings: Mapping[str, Any]) -> "ManagerConfig":
        """The store-wide keys of ``settings`` (topic defaults in it are ``LogConfig``'s business)."""
        keys = {**MANAGER_KEYS, **PRODUCER_KEYS}
        return cls(**{keys[key].field: keys[key].parse(key, value) for key, value in settings.items() if key in keys})


def describe_manager_keys() -> list[tuple[str, Any, str]]:
    """(key, default, description) for every store-wide key."""
    return [(key.name, key.default, key.doc) for key in _MANAGER_KEYS]
