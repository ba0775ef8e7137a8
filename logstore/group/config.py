"""The group coordinator's settings, with Kafka's broker names and defaults.

``GroupConfig.split(settings)`` takes the one settings dict a server or a CLI command is given and
returns the coordinator's keys parsed, and the rest (for the server and the store, which refuse
keys they do not know, so a typo still fails loudly).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..config import integer_setting
from ..errors import InvalidConfigError

INT_MAX = 2**31 - 1

# key -> (field, default, parser, description)
GROUP_KEYS: dict[str, tuple[str, Any, Any, str]] = {
    "group.min.session.timeout.ms": ("min_session_timeout_ms", 6000, integer_setting(1, INT_MAX),
                                     "the smallest session timeout a member may ask for"),
    "group.max.session.timeout.ms": ("max_session_timeout_ms", 1800000, integer_setting(1, INT_MAX),
                                     "the largest session timeout a member may ask for"),
    "group.initial.rebalance.delay.ms": ("initial_rebalance_delay_ms", 3000, integer_setting(0, INT_MAX),
                                         "how long a new group waits for more members before its first "
                                         "rebalance completes (0 in tests)"),
    "group.max.size": ("max_size", INT_MAX, integer_setting(1, INT_MAX), "members a group may have"),
    "offsets.retention.minutes": ("offsets_retention_minutes", 10080, integer_setting(1, INT_MAX),
                                  "how long committed offsets are kept once their group is empty (or "
                                  "after the commit, for groups that never had members)"),
    "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", 600000,
                                            integer_setting(1, 2**62), "how often expired offsets are removed"),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", 50, integer_setting(1, 10000),
                                     "partitions of __consumer_offsets (fixed once the topic exists)"),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", 104857600, integer_setting(14, INT_MAX),
                                    "segment size of __consumer_offsets"),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", 4096, integer_setting(0, INT_MAX),
                                  "the longest metadata string a commit may carry"),
}


@dataclass(frozen=True)
class GroupConfig:
    """The coordinator's settings (``GROUP_KEYS``), parsed."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = INT_MAX
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600000
    offsets_topic_num_partitions: int = 50
    offsets_topic_segment_bytes: int = 104857600
    offset_metadata_max_bytes: int = 4096

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def split(cls, settings: Mapping[str, Any] | None) -> tuple["GroupConfig", dict[str, Any]]:
        """(the coordinator's settings, every other key as given)."""
        if settings is not None and not isinstance(settings, Mapping):
            raise TypeError(f"config must be a mapping of Kafka setting names to values, got {settings!r}")
        own: dict[str, Any] = {}
        rest: dict[str, Any] = {}
        for key, value in (settings or {}).items():
            if key in GROUP_KEYS:
                field, _default, parse, _doc = GROUP_KEYS[key]
                own[field] = parse(key, value)
            else:
                rest[key] = value
        config = cls(**own)
        if config.min_session_timeout_ms > config.max_session_timeout_ms:
            raise InvalidConfigError(
                f"group.min.session.timeout.ms ({config.min_session_timeout_ms}) is above "
                f"group.max.session.timeout.ms ({config.max_session_timeout_ms})")
        return config, rest

    @classmethod
    def from_properties(cls, settings: Mapping[str, Any] | None) -> "GroupConfig":
        """Parse ``settings``, which must hold only group keys."""
        config, rest = cls.split(settings)
        if rest:
            raise InvalidConfigError(f"unknown group setting {sorted(rest)[0]!r}")
        return config

    def to_properties(self) -> dict[str, Any]:
        return {key: getattr(self, field) for key, (field, _d, _p, _doc) in GROUP_KEYS.items()}


def describe_group_keys() -> list[tuple[str, Any, str]]:
    """(key, default, description) for every group setting."""
    return [(key, default, doc) for key, (_field, default, _parse, doc) in GROUP_KEYS.items()]
