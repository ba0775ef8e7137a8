"""The server's own settings, with Kafka's broker names and defaults, how a settings dict is split
between the server, its group and transaction coordinators and the store it opens, and where
``logstore serve`` takes them from.

``KafkaServer(..., config={...})`` and ``logstore --set KEY=VALUE serve`` take one dict: the keys
below configure the server, the group coordinator's keys (``logstore.group.config.GROUP_KEYS``:
``group.initial.rebalance.delay.ms``, ``offsets.retention.minutes``...) go to the group coordinator,
the transaction coordinator's (``logstore.txn.config.TXN_KEYS``: ``transaction.max.timeout.ms``...)
to the transaction coordinator, every other key goes to ``LogManager`` (which refuses keys it does not know, so a typo fails the start
instead of being ignored).

``logstore serve`` takes the same keys from three places, each overriding the one before: a Java
properties file (``--config FILE``, ``read_server_properties``: Kafka's ``server.properties`` names,
with ``listeners``, ``advertised.listeners`` and ``log.dirs`` too: ``SERVE_KEYS``), the environment
(``LOGSTORE_`` and the key upper-cased, dots as underscores, as Kafka's container images read
``KAFKA_``: ``environment_settings``), and the command line (``--set``, then the explicit options).
``check_setting`` refuses an unknown key or a bad value before anything starts, naming where it came
from; ``serve_settings`` merges the layers; ``config_reference`` is the table of every key, its
default and whether it can change at run time (docs/configuration.md is generated from it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..config import (INT_MAX, LONG_MAX, MANAGER_KEYS, PRODUCER_KEYS, LogConfig, ManagerConfig, boolean_setting,
                      describe_broker_keys, describe_manager_keys, integer_setting)
from ..errors import InvalidConfigError
from ..group.config import GROUP_KEYS, GroupConfig, describe_group_keys
from ..properties import read_properties_file
from ..txn.config import TXN_KEYS, TransactionConfig, describe_txn_keys
from .security.acls import check_principal
from .security.listeners import TLS_KEYS, TlsSettings, parse_listener


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
    "max.incremental.fetch.session.cache.slots": (
        "max_incremental_fetch_session_cache_slots", 1000, integer_setting(0, 2**31 - 1),
        "fetch sessions (KIP-227) held at once; 0 serves every fetch sessionless"),
    "min.incremental.fetch.session.eviction.ms": (
        "min_incremental_fetch_session_eviction_ms", 120000, integer_setting(0, 2**62),
        "a fetch session unused this long gives its slot to a new one; one that lived this long gives it to a "
        "bigger one"),
    "max.incremental.fetch.session.partitions": (
        "max_incremental_fetch_session_partitions", 10000, integer_setting(1, 2**31 - 1),
        "the most partitions one fetch session holds (ours); a consumer of more fetches sessionless"),
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
    # --- transactions (the coordinator's own keys: logstore.txn.config.TXN_KEYS) ---
    "transaction.state.log.num.partitions": (
        "transaction_state_log_num_partitions", 50, integer_setting(1, 10000),
        "partitions of __transaction_state when it is created (an existing topic keeps its count)"),
    "transaction.state.log.segment.bytes": (
        "transaction_state_log_segment_bytes", 104857600, integer_setting(14, 2**31 - 1),
        "the segment size of __transaction_state when it is created"),
    "transaction.partition.verification.enable": (
        "transaction_partition_verification_enable", True, boolean_setting,
        "refuse a transactional batch for a partition not added to its producer's open transaction "
        "(KIP-890), so a late retry cannot open a transaction no one ends"),
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
    max_incremental_fetch_session_cache_slots: int = 1000
    min_incremental_fetch_session_eviction_ms: int = 120000
    max_incremental_fetch_session_partitions: int = 10000
    connections_max_idle_ms: int = 600000
    num_io_threads: int = 2
    fetch_cache_bytes: int = 16 << 20
    producer_id_expiration_ms: int = 86400000
    producer_id_expiration_check_interval_ms: int = 600000
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_segment_bytes: int = 104857600
    transaction_partition_verification_enable: bool = True
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
    txn: TransactionConfig = field(default_factory=TransactionConfig)
    """The transaction coordinator's settings (``TXN_KEYS``)."""

    @classmethod
    def split(cls, settings: Mapping[str, Any] | None) -> tuple["ServerConfig", dict[str, Any]]:
        """(the server's and its coordinators' settings, the rest for the store)."""
        if settings is not None and not isinstance(settings, Mapping):
            raise TypeError(f"config must be a mapping of Kafka setting names to values, got {settings!r}")
        group, others = GroupConfig.split(settings)
        txn, others = TransactionConfig.split(others)
        own: dict[str, Any] = {"group": group, "txn": txn}
        rest: dict[str, Any] = {}
        own["tls"] = TlsSettings.from_config({key: value for key, value in others.items() if key in TLS_KEYS})
        for key, value in others.items():
            if key in TLS_KEYS:
                continue
            if key in SERVER_KEYS:
                name, _default, parse, _doc = SERVER_KEYS[key]
                own[name] = parse(key, value)
                if key in PRODUCER_KEYS:  # the store's producer state (its transactions) expires by them too
                    rest[key] = value
            elif key == "broker.id":  # Kafka's older name for node.id
                own["node_id"] = SERVER_KEYS["node.id"][2](key, value)
            else:
                rest[key] = value
        return cls(**own), rest

    def to_properties(self) -> dict[str, Any]:
        """Every server, group and transaction key with its value, by Kafka name (DescribeConfigs of
        the broker)."""
        own = {key: getattr(self, name) for key, (name, _d, _p, _doc) in SERVER_KEYS.items()}
        for key in ("sasl.enabled.mechanisms", "super.users"):
            own[key] = ("," if key.startswith("sasl") else ";").join(own[key])
        tls = self.tls
        own.update({"ssl.keystore.location": tls.keystore, "ssl.key.location": tls.key,
                    "ssl.key.password": tls.key_password, "ssl.truststore.location": tls.truststore,
                    "ssl.client.auth": tls.client_auth})
        return {**own, **self.group.to_properties(), **self.txn.to_properties()}


def describe_server_keys() -> list[tuple[str, Any, str]]:
    """(key, default, description) for every server setting."""
    return [(key, default, doc) for key, (_field, default, _parse, doc) in SERVER_KEYS.items()]


# --- where `logstore serve` takes its settings from -----------------------------------------------

DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"
DEFAULT_LOG_DIRS = "./logstore-data"
SERVER_PROPERTIES_MAX_BYTES = 1 << 20
"""The largest config file read (Kafka's whole server.properties is 7 KiB)."""
ENV_PREFIX = "LOGSTORE_"
OTHER_VARIABLES = frozenset({"LOGSTORE_DIRS", "LOGSTORE_BOOTSTRAP_SERVER", "LOGSTORE_COMMAND_CONFIG"})
"""The command line's own variables, which are not settings (``LOGSTORE_DIRS`` is read as ``log.dirs``
by ``serve_settings``, colon-separated, after ``LOGSTORE_LOG_DIRS``)."""


def _list_of(parse_one):
    def parse(key: str, value: Any) -> tuple[str, ...]:
        items = [item.strip() for item in (value.split(",") if isinstance(value, str) else value)]
        items = [item for item in items if item]
        if not items:
            raise InvalidConfigError(f"{key} takes a comma-separated list, got {value!r}")
        for item in items:
            try:
                parse_one(item)
            except (TypeError, ValueError) as exc:
                raise InvalidConfigError(f"{key}: {exc}") from None
        return tuple(items)
    return parse


def _pem_only(key: str, value: Any) -> str:
    if not isinstance(value, str) or value.strip().upper() != "PEM":
        raise InvalidConfigError(f"{key} takes PEM (the only store type read; openssl converts JKS or PKCS12 to "
                                 f"PEM), got {value!r}")
    return "PEM"


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidConfigError(f"{key} takes a path, got {value!r}")
    return value.strip()


# key -> (default, parser, description): the keys `logstore serve` reads besides the server's, the
# coordinator's and the store's; they are the command's own options, not KafkaServer's settings.
SERVE_KEYS: dict[str, tuple[Any, Any, str]] = {
    "listeners": (DEFAULT_LISTENERS, _list_of(parse_listener),
                  "the listeners, PROTOCOL://HOST:PORT separated by commas (PLAINTEXT, SSL, SASL_PLAINTEXT, "
                  "SASL_SSL; one per protocol; port 0 picks a free port) (--listen)"),
    "advertised.listeners": (None, _list_of(parse_listener),
                             "the address clients are told to connect to, per listener protocol (default: the "
                             "bound one) (--advertised-listener)"),
    "log.dirs": (DEFAULT_LOG_DIRS, _list_of(str), "the store's data dirs, separated by commas (--dir)"),
    "log.dir": (None, _text, "one data dir, when log.dirs is not given"),
    "ssl.keystore.type": ("PEM", _pem_only, "the type of ssl.keystore.location: PEM only"),
    "ssl.truststore.type": ("PEM", _pem_only, "the type of ssl.truststore.location: PEM only"),
}

# key -> (default, description) of the TLS listeners' settings (read by TlsSettings.from_config)
TLS_KEY_DOCS: dict[str, tuple[Any, str]] = {
    "ssl.keystore.location": (None, "the TLS listeners' PEM certificate chain, with the key unless "
                                    "ssl.key.location (--ssl-cert)"),
    "ssl.key.location": (None, "the certificate's private key, in a PEM file of its own (--ssl-key)"),
    "ssl.key.password": (None, "the private key's password (never shown by DescribeConfigs; keep it out of "
                               "the command line: the file or $LOGSTORE_SSL_KEY_PASSWORD)"),
    "ssl.truststore.location": (None, "PEM CAs that client certificates must chain to (--ssl-ca)"),
    "ssl.client.auth": ("none", "ask TLS clients for a certificate: none, requested or required "
                                "(--ssl-client-auth)"),
    "ssl.enabled.protocols": ("TLSv1.2,TLSv1.3", "the TLS versions accepted: TLSv1.2 and TLSv1.3 "
                                                 "(the lowest given is the minimum)"),
}
_BROKER_KEYS = {key: (default, doc, topic) for key, default, doc, topic in describe_broker_keys()}


def known_keys() -> frozenset[str]:
    """Every key ``logstore serve`` reads from a file, the environment or ``--set``."""
    return frozenset({*SERVE_KEYS, *SERVER_KEYS, "broker.id", *TLS_KEYS, *GROUP_KEYS, *TXN_KEYS, *_BROKER_KEYS, *MANAGER_KEYS})


def check_setting(key: str, value: Any) -> None:
    """``InvalidConfigError`` naming ``key`` when it is not a setting ``logstore serve`` reads, or
    ``value`` is not one it takes; the same parsers as the server, coordinator and store use."""
    if key in SERVE_KEYS:
        SERVE_KEYS[key][1](key, value)
    elif key in SERVER_KEYS or key == "broker.id":
        SERVER_KEYS["node.id" if key == "broker.id" else key][2](key, value)
    elif key in GROUP_KEYS:
        GROUP_KEYS[key][2](key, value)
    elif key in TXN_KEYS:
        TXN_KEYS[key][2](key, value)
    elif key in TLS_KEYS:
        if key.endswith(".location"):
            _text(key, value)
        TlsSettings.from_config({key: value})
    elif key in _BROKER_KEYS:
        LogConfig.from_broker_properties({key: value})
    elif key in MANAGER_KEYS:
        ManagerConfig.from_broker_properties({key: value})
    else:
        import difflib  # only for a misspelt key: serve's start-up does not pay for it

        close = difflib.get_close_matches(key, known_keys(), n=1)
        raise InvalidConfigError(f"unknown setting {key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))


def read_server_properties(path: str) -> dict[str, str]:
    """The settings of the config file ``path`` (``--config``), a Java properties file of Kafka's key
    names; ``InvalidConfigError`` naming the file and line of an unknown key or a bad value (never the
    value of a password), ``NotARegularFileError``/``ValueError`` when it is no small regular file."""
    settings: dict[str, str] = {}
    for key, value, line in read_properties_file(path, SERVER_PROPERTIES_MAX_BYTES, "the config file"):
        try:
            check_setting(key, value)
        except InvalidConfigError as exc:
            raise InvalidConfigError(f"{path} line {line}: {exc}") from None
        settings[key] = value.strip()
    return settings


def env_variable(key: str) -> str:
    """The environment variable of setting ``key``: ``log.retention.ms`` -> ``LOGSTORE_LOG_RETENTION_MS``."""
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


def environment_settings(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """(the settings of ``environ``'s ``LOGSTORE_<KEY>`` variables, one warning per ``LOGSTORE_``
    variable that looks like a setting and names none). A variable looks like a setting when its first
    word is the first word of one (``LOGSTORE_LOG_RETENTION_MSS``: ``log``); the others
    (``LOGSTORE_REQUIRE_TOOLS``, the command line's own) are not read. Only warned, not refused: an
    environment carries variables its server's operator did not set, and Kafka's images pass unknown
    ones on for the broker to warn about. ``InvalidConfigError`` naming the variable for a bad value."""
    by_variable = {env_variable(key): key for key in known_keys()}
    families = {key.split(".")[0].upper() for key in known_keys()}
    settings: dict[str, str] = {}
    warnings: list[str] = []
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX) or variable in OTHER_VARIABLES:
            continue
        key = by_variable.get(variable)
        if key is None:
            if variable[len(ENV_PREFIX):].split("_")[0] in families:
                import difflib  # only for a misspelt variable

                close = difflib.get_close_matches(variable, by_variable, n=1)
                warnings.append(f"${variable} is not a setting: ignored" + (f" (did you mean ${close[0]}?)"
                                                                            if close else ""))
            continue
        try:
            check_setting(key, environ[variable])
        except InvalidConfigError as exc:
            raise InvalidConfigError(f"${variable}: {exc}") from None
        settings[key] = environ[variable].strip()
    if "log.dirs" not in settings and "log.dir" not in settings and environ.get("LOGSTORE_DIRS"):
        dirs = [path for path in environ["LOGSTORE_DIRS"].split(":") if path]
        if dirs:
            settings["log.dirs"] = ",".join(dirs)
    return settings, warnings


@dataclass(frozen=True)
class ServeSettings:
    """What ``logstore serve`` starts: the data dirs, the listeners, the advertised ones (None: the
    bound ones) and the settings dict given to ``KafkaServer``."""

    dirs: tuple[str, ...]
    listeners: tuple[str, ...]
    advertised_listeners: tuple[str, ...] | None
    config: dict[str, str]

    @classmethod
    def merge(cls, layers: Iterable[Mapping[str, Any]]) -> "ServeSettings":
        """The settings of ``layers``, each overriding the ones before (file, environment, ``--set``,
        explicit options); in each, ``log.dirs`` wins over ``log.dir`` (Kafka's rule)."""
        merged: dict[str, Any] = {}
        for layer in layers:
            layer = dict(layer)
            if "log.dir" in layer:
                single = layer.pop("log.dir")
                layer.setdefault("log.dirs", single)
            merged.update(layer)
        dirs = SERVE_KEYS["log.dirs"][1]("log.dirs", merged.pop("log.dirs", DEFAULT_LOG_DIRS))
        listeners = SERVE_KEYS["listeners"][1]("listeners", merged.pop("listeners", DEFAULT_LISTENERS))
        advertised = merged.pop("advertised.listeners", None)
        for key in ("ssl.keystore.type", "ssl.truststore.type"):
            merged.pop(key, None)  # checked: PEM, the only kind the TLS settings read
        return cls(dirs, listeners, None if advertised is None else
                   SERVE_KEYS["advertised.listeners"][1]("advertised.listeners", advertised), merged)


def _shown(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ("," if all(item.isupper() for item in value) else ";").join(value)
    if value == float("inf"):
        return "unlimited"
    if value == LONG_MAX:
        return "9223372036854775807 (no limit)"
    if value == INT_MAX:
        return "2147483647 (no limit)"
    return str(value)


def config_reference() -> list[tuple[str, list[tuple[str, str, str, str]]]]:
    """The reference of every key ``logstore serve`` reads, in sections: (title, rows of (key,
    default, whether and how it changes at run time, description)). Nothing changes in a running
    server: IncrementalAlterConfigs of the broker refuses these keys ("Cannot update these configs
    dynamically"); a topic default has a topic config that ``topics alter`` changes for one topic."""
    fixed = "no"
    sections = [
        ("Listeners and data dirs (`logstore serve`'s own)",
         [(key, _shown(default), fixed, doc) for key, (default, _parse, doc) in SERVE_KEYS.items()]),
        ("Server", [(key, _shown(default), fixed, doc) for key, (_f, default, _p, doc) in SERVER_KEYS.items()
                    if not key.startswith("transaction.")]
         + [("broker.id", "", fixed, "Kafka's older name for node.id")]),
        ("TLS listeners", [(key, _shown(default), fixed, doc) for key, (default, doc) in TLS_KEY_DOCS.items()]),
        ("Consumer groups", [(key, _shown(default), fixed, doc) for key, default, doc in describe_group_keys()]),
        ("Transactions", [(key, _shown(default), fixed, doc) for key, default, doc in describe_txn_keys()]
         + [(key, _shown(default), fixed, doc) for key, (_f, default, _p, doc) in SERVER_KEYS.items()
            if key.startswith("transaction.")]),
        ("Topic defaults (the store)", [(key, _shown(default), f"per topic: {topic}", doc)
                                        for key, (default, doc, topic) in _BROKER_KEYS.items()]),
        ("Store-wide jobs (the store)", [(key, _shown(default), fixed, doc)
                                         for key, default, doc in describe_manager_keys()]),
    ]
    return sections


def config_reference_markdown() -> str:
    """``config_reference`` as the Markdown tables of docs/configuration.md (``logstore serve
    --print-config`` prints it)."""
    out: list[str] = []
    for title, rows in config_reference():
        out += [f"### {title}", "", "| Key | Default | Changes at run time | Environment variable | Description |",
                "| --- | --- | --- | --- | --- |"]
        out += [f"| `{key}` | {f'`{default}`' if default else ''} | {dynamic} | `{env_variable(key)}` | "
                f"{doc.replace('|', '/')} |" for key, default, dynamic, doc in rows]
        out.append("")
    return "\n".join(out)
