"""The transaction coordinator's settings, with Kafka's broker names and defaults.

``TransactionConfig.split(settings)`` takes the one settings dict a server is given and returns the
coordinator's keys parsed, and the rest (for the layers that refuse keys they do not know, so a typo
still fails loudly).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..config import integer_setting
from ..errors import InvalidConfigError

INT_MAX = 2**31 - 1

# key -> (field, default, parser, description)
TXN_KEYS: dict[str, tuple[str, Any, Any, str]] = {
    "transaction.max.timeout.ms": ("max_timeout_ms", 900000, integer_setting(1, INT_MAX),
                                   "the largest transaction.timeout.ms a producer may ask for; larger "
                                   "gets INVALID_TRANSACTION_TIMEOUT"),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", 604800000, integer_setting(1, INT_MAX),
                                       "how long a transactional id with no open transaction is kept after "
                                       "its last update before it is forgotten (a tombstone is written)"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "abort_timed_out_interval_ms", 10000, integer_setting(1, INT_MAX),
        "how often open transactions are checked against their timeout (and aborted when past it)"),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "remove_expired_interval_ms", 3600000, integer_setting(1, INT_MAX),
        "how often expired transactional ids are removed"),
}


@dataclass(frozen=True)
class TransactionConfig:
    """The coordinator's settings (``TXN_KEYS``), parsed."""

    max_timeout_ms: int = 900000
    transactional_id_expiration_ms: int = 604800000
    abort_timed_out_interval_ms: int = 10000
    remove_expired_interval_ms: int = 3600000

    @classmethod
    def split(cls, settings: Mapping[str, Any] | None) -> tuple["TransactionConfig", dict[str, Any]]:
        """(the coordinator's settings, every other key as given)."""
        if settings is not None and not isinstance(settings, Mapping):
            raise TypeError(f"config must be a mapping of Kafka setting names to values, got {settings!r}")
        own: dict[str, Any] = {}
        rest: dict[str, Any] = {}
        for key, value in (settings or {}).items():
            if key in TXN_KEYS:
                field, _default, parse, _doc = TXN_KEYS[key]
                own[field] = parse(key, value)
            else:
                rest[key] = value
        return cls(**own), rest

    @classmethod
    def from_properties(cls, settings: Mapping[str, Any] | None) -> "TransactionConfig":
        """Parse ``settings``, which must hold only transaction coordinator keys."""
        config, rest = cls.split(settings)
        if rest:
            raise InvalidConfigError(f"unknown transaction setting {sorted(rest)[0]!r}")
        return config

    def to_properties(self) -> dict[str, Any]:
        return {key: getattr(self, field) for key, (field, _d, _p, _doc) in TXN_KEYS.items()}


def describe_txn_keys() -> list[tuple[str, Any, str]]:
    """(key, default, description) for every transaction coordinator setting."""
    return [(key, default, doc) for key, (_field, default, _parse, doc) in TXN_KEYS.items()]
