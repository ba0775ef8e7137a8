"""The server's own settings, with Kafka's broker names and defaults, and how a settings dict is split
between the server, its group coordinator and the store it opens.

``KafkaServer(..., config={...})`` and ``logstore --set KEY=VALUE serve`` take one dict: the keys
below configure the server, the group coordinator's keys (``logstore.group.config.GROUP_KEYS``:
``group.initial.rebalance.delay.ms``, ``offsets.retention.minutes``...) go to the coordinator, every
other key goes to ``LogManager`` (which refuses keys it does not know, so a typo fails the start
instead of being ignored).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..config import boolean_setting, integer_setting
from ..errors import InvalidConfigError
from ..group.config import GroupConfig
from .security.acls import check_principal
from .security.listeners import TLS_KEYS, TlsSettings


def _mechanisms(key: str, value: Any) -> tuple[str, ...]:
    from .security.sasl import SUPPORTED_MECHANISMS
    names = tuple(name.strip().upper() for name in (value.split(",") if isinstance(value, str) else value) if name.strip())
    unknown = [name for name in names if name not in SUPPORTED_MECHANISMS]
    if unknown or not names:
        raise InvalidConfigError(f"{key} takes a comma-separated list of {', '.join(SUPPORTED_MECHANISMS)}, "
                                 f"got {value!r}")
    return names


def _principals(key: str, value: Any) -> tuple[str, ...]:
    names = tuple(name.strip() for name in (value.split(";") if isinstance(value, str) else value) if name.strip())
    for name in names:
        try:
            check_principal(name)  # the ACLs' own rule for a principal
        except ValueError:
            raise InvalidConfigError(f"{key} takes principals like User:alice separated by ';', got {name!r}") from None
    return names


def _optional_boolean(key: str, value: Any) -> bool | None:
    return None if value is None or value == "" else boolean_setting(key, value)


def _optional_integer(lowest: int, highest: int):
    parse = integer_setting(lowest, highest)
    return lambda key, value: None if value is None or value == "" else parse(key, value)


SENSITIVE_KEYS = frozenset({"ssl.key.password"})
"""Settings whose values are never shown (DescribeConfigs answers them as sensitive, with no value)."""

# key -> (field, default, parser, description)
SERVER_KEYS: dict[str, tuple[str, Any, Any, str]] = {
    "node.id": ("node_id", None, integer_setting(0, 2**31 - 1),
                "this broker's node id (default: the one in meta.properties, else 0)"),
    "auto.create.topics.enable": ("auto_create_topics_enable", True, boolean_setting,
                                  "create a topic when a client's Metadata request names an unknown one"),
    "num.partitions": ("num_partitions", 1, integer_setting(1, 10000), "partitions of an auto-created topic"),
    "default.replication.factor": ("default_replication_factor", 1, integer_setting(1, 1),
                                   "replication factor of new topics (one broker: always 1)"),
    "socket.request.max.bytes": ("socket_request_max_bytes", 104857600, integer_setting(1024, 2**31 - 1),
                                 "the largest request frame accepted; a larger one closes the connection"),
    "max.connections": ("max_connections", None, _optional_integer(1, 2**31 - 1),
                        "connections accepted at once; more wait in the listen backlog (default: what the "
                        "descriptor limit leaves after the store's own descriptors)"),
    "queued.max.request.bytes": ("queued_max_request_bytes", 104857600, integer_setting(1 << 20, 2**62),
                                 "request bytes held at once over all connections; while spent, sockets are "
                                 "not read (one frame half received may still complete)"),
    "sasl.server.max.receive.size": ("sasl_server_max_receive_size", 524288, integer_setting(1024, 2**31 - 1),
                                     "the largest frame of a SASL connection before it is authenticated"),
    "queued.max.response.bytes": ("queued_max_response_bytes", 1 << 20, integer_setting(0, 2**62),
                                  "answered bytes a connection may leave unread before its next request "
                                  "waits (ours: Kafka answers one request per connection at a time)"),
    "max.request.partition.size.limit": ("max_request_partition_size_limit", 2000, integer_setting(1, 2**31 - 1),
                                         "the most partitions one DescribeTopicPartitions answer lists (a "
                                         "cursor continues the listing)"),
    "fetch.max.bytes": ("fetch_max_bytes", 57671680, integer_setting(1024, 2**31 - 1),
                        "the most record bytes one Fetch answer carries, whatever the client asks"),
    "connections.max.idle.ms": ("connections_max_idle_ms", 600000, integer_setting(1, 2**62),
                                "a connection idle this long is closed"),
    "num.io.threads": ("num_io_threads", 2, integer_setting(1, 64), "request handler threads"),
    # 16 MiB: the latest ~150k records of 100 bytes, what consumers near the end of a log share; a
    # server's RSS after `logstore perf serve --sizes 1m` is ~67 MB with it, ~112 MB with 64 MiB.
    "fetch.cache.bytes": ("fetch_cache_bytes", 16 << 20, integer_setting(0, 2**62),
                          "memory for fetched batches already converted to Kafka's format"),
    "producer.id.expiration.ms": ("producer_id_expiration_ms", 86400000, integer_setting(1, 2**62),
                                  "an idempotent producer's state on a partition is dropped this long after its last "
                                  "batch there"),
    "producer.id.expiration.check.interval.ms": ("producer_id_expiration_check_interval_ms", 600000,
                                                 integer_setting(1, 2**62),
                                                 "how often the producers are checked for expiry"),
    # --- security ---
    "allow.plaintext.remote": ("allow_plaintext_remote", False, boolean_setting,
                               "allow a PLAINTEXT listener on an address other than loopback (ours: Kafka has no guard)"),
    "sasl.enabled.mechanisms": ("sasl_enabled_mechanisms", ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), _mechanisms,
                                "the SASL mechanisms SASL listeners accept"),
    "connection.failed.authentication.delay.ms": (
        "connection_failed_authentication_delay_ms", 100, integer_setting(0, 60000),
        "how long a failed authentication's answer is held (doubled per recent failure of the host, to 2 s)"),
    "sasl.max.pending.per.host": (
        "sasl_max_pending_per_host", 4, integer_setting(1, 1000),
        "authentications of one host being checked or with a failure's answer held (ours); more are closed unchecked"),
    "sasl.password.check.threads": ("sasl_password_check_threads", 1, integer_setting(1, 64),
                                    "threads that check PLAIN passwords (PBKDF2), off the request handler threads (ours)"),
    "sasl.password.check.max.queued": (
        "sasl_password_check_max_queued", 64, integer_setting(1, 100000),
        "PLAIN password checks waiting or running, all hosts together (ours); more are closed unchecked"),
    "authorizer.enable": ("authorizer_enable", None, _optional_boolean,
                          "enforce ACLs (default: when any listener is not PLAINTEXT)"),
    "super.users": ("super_users", (), _principals, "principals allowed everything, e.g. User:admin;User:ops"),
    "allow.everyone.if.no.acl.found": ("allow_everyone_if_no_acl_found", False, boolean_setting,
                                       "allow a request on a resource that no ACL names"),
}


@dataclass(frozen=True)
class ServerConfig:
    """The server's settings (``SERVER_KEYS``), parsed, and its group coordinator's (``group``)."""

    node_id: int | None = None
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    socket_request_max_bytes: int = 104857600
    max_connections: int | None = None
    queued_max_request_bytes: int = 104857600
    sasl_server_max_receive_size: int = 524288
    queued_max_response_bytes: int = 1 << 20
    max_request_partition_size_limit: int = 2000
    fetch_max_bytes: int = 57671680
    connections_max_idle_ms: int = 600000
    num_io_threads: int = 2
    fetch_cache_bytes: int = 16 << 20
    producer_id_expiration_ms: int = 86400000
    producer_id_expiration_check_interval_ms: int = 600000
    allow_plaintext_remote: bool = False
    sasl_enabled_mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    connection_failed_authentication_delay_ms: int = 100
    sasl_max_pending_per_host: int = 4
    sasl_password_check_threads: int = 1
    sasl_password_check_max_queued: int = 64
    authorizer_enable: bool | None = None
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    tls: TlsSettings = field(default_factory=TlsSettings)
    """The ``ssl.*`` settings of the TLS listeners (``listeners.TLS_KEYS``)."""
    group: GroupConfig = field(default_factory=GroupConfig)
    """The group coordinator's settings (``GROUP_KEYS``), given to ``GroupCoordinator.of``."""

    @classmethod
    def split(cls, settings: Mapping[str, Any] | None) -> tuple["ServerConfig", dict[str, Any]]:
        """(the server's and its coordinator's settings, the rest for the store)."""
        if settings is not None and not isinstance(settings, Mapping):
            raise TypeError(f"config must be a mapping of Kafka setting names to values, got {settings!r}")
        group, others = GroupConfig.split(settings)
        own: dict[str, Any] = {"group": group}
        rest: dict[str, Any] = {}
        own["tls"] = TlsSettings.from_config({key: value for key, value in others.items() if key in TLS_KEYS})
        for key, value in others.items():
            if key in TLS_KEYS:
                continue
            if key in SERVER_KEYS:
                name, _default, parse, _doc = SERVER_KEYS[key]
                own[name] = parse(key, value)
            elif key == "broker.id":  # Kafka's older name for node.id
                own["node_id"] = SERVER_KEYS["node.id"][2](key, value)
            else:
                rest[key] = value
        return cls(**own), rest

    def to_properties(self) -> dict[str, Any]:
        """Every server and group key with its value, by Kafka name (DescribeConfigs of the broker)."""
        own = {key: getattr(self, name) for key, (name, _d, _p, _doc) in SERVER_KEYS.items()}
        for key in ("sasl.enabled.mechanisms", "super.users"):
            own[key] = ("," if key.startswith("sasl") else ";").join(own[key])
        tls = self.tls
        own.update({"ssl.keystore.location": tls.keystore, "ssl.key.location": tls.key,
                    "ssl.key.password": tls.key_password, "ssl.truststore.location": tls.truststore,
                    "ssl.client.auth": tls.client_auth})
        return {**own, **self.group.to_properties()}


def describe_server_keys() -> list[tuple[str, Any, str]]:
    """(key, default, description) for every server setting."""
    return [(key, default, doc) for key, (_field, default, _parse, doc) in SERVER_KEYS.items()]
