"""``NetworkClient``: the brokers of a cluster as the client sees them, and a connection to each.

What it owns:
- bootstrap: ``bootstrap_servers`` (``"host:port,host:port"``, Kafka's setting) is tried in order until
  one broker answers; its Metadata gives every broker's id and address and each partition's leader
  (``ClusterMetadata``);
- one ``BrokerConnection`` per broker, opened when first needed (``connection(node_id)``) with the
  versions it negotiated, and closed and forgotten when it fails;
- reconnect backoff (Kafka's ``reconnect.backoff.ms`` doubling up to ``reconnect.backoff.max.ms``,
  with ±20% jitter): a broker that could not be reached is not tried again before its backoff has
  passed, so a client that loops on a dead broker does not hammer it;
- metadata refresh (``refresh_metadata``), from any broker that answers.

Time is the clock's (``logstore.clock``): tests drive the backoff with a manual clock. Not
thread-safe: one owner (the producer's sender thread, a consumer, the CLI).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..clock import SYSTEM_CLOCK, Clock
from .connection import BrokerConnection
from .errors import BrokerResponseError, NetworkError

_JITTER = 0.2  # Kafka's CommonClientConfigs.RECONNECT_BACKOFF_JITTER


def parse_bootstrap_servers(servers: str | list[str] | tuple[str, ...]) -> list[tuple[str, int]]:
    """``"host:port,host:port"`` (or a list of ``host:port``) as ``(host, port)`` pairs, in order.
    IPv6 hosts are written in brackets (``[::1]:9092``)."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    addresses = []
    for item in items:
        item = item.strip() if isinstance(item, str) else item
        if not isinstance(item, str) or ":" not in item:
            raise ValueError(f"a bootstrap server is HOST:PORT, got {item!r}")
        host, _, port = item.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"a bootstrap server is HOST:PORT with a port in 1-65535, got {item!r}")
        addresses.append((host, int(port)))
    if not addresses:
        raise ValueError("bootstrap_servers names no broker")
    return addresses


@dataclass
class ClusterMetadata:
    """What the last Metadata response said: brokers by id, and each topic's partition leaders."""

    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    leaders: dict[str, dict[int, int]] = field(default_factory=dict)  # topic -> partition -> leader id
    topic_errors: dict[str, int] = field(default_factory=dict)  # topic -> Kafka error code (non-zero)
    controller_id: int = -1

    @classmethod
    def from_response(cls, body: dict) -> ClusterMetadata:
        metadata = cls(brokers={b["node_id"]: (b["host"], b["port"]) for b in body["brokers"]},
                       controller_id=body.get("controller_id", -1))
        for topic in body["topics"]:
            if topic["error_code"]:
                metadata.topic_errors[topic["name"]] = topic["error_code"]
            else:
                metadata.leaders[topic["name"]] = {p["partition_index"]: p["leader_id"] for p in topic["partitions"]}
        return metadata

    def partitions(self, topic: str) -> int | None:
        """The partition count of ``topic``, or None when the metadata has no such topic."""
        leaders = self.leaders.get(topic)
        return None if leaders is None else len(leaders)


class NetworkClient:
    """Connections to the brokers of one cluster, found from ``bootstrap_servers``."""

    def __init__(self, bootstrap_servers, *, client_id: str = "logstore", request_timeout_ms: int = 30_000,
                 connect_timeout_ms: int = 10_000, max_in_flight: int = 5, reconnect_backoff_ms: int = 50,
                 reconnect_backoff_max_ms: int = 1000, clock: Clock = SYSTEM_CLOCK,
                 rng: random.Random | None = None) -> None:
        self.bootstrap = parse_bootstrap_servers(bootstrap_servers)
        if type(reconnect_backoff_ms) is not int or reconnect_backoff_ms < 0:
            raise ValueError(f"reconnect_backoff_ms must be an int >= 0, got {reconnect_backoff_ms!r}")
        if type(reconnect_backoff_max_ms) is not int or reconnect_backoff_max_ms < reconnect_backoff_ms:
            raise ValueError(f"reconnect_backoff_max_ms must be an int >= reconnect_backoff_ms, "
                             f"got {reconnect_backoff_max_ms!r}")
        self._settings = {"client_id": client_id, "request_timeout_ms": request_timeout_ms,
                          "connect_timeout_ms": connect_timeout_ms, "max_in_flight": max_in_flight, "clock": clock}
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self._clock = clock
        self._rng = rng or random.Random()
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._failures: dict[tuple[str, int], tuple[int, int]] = {}  # address -> (failures in a row, retry at ms)
        self.metadata = ClusterMetadata()
        self.connect_attempts = 0  # connections tried so far (backoff skips are not attempts)

    def close(self) -> None:
        """Close every connection. Safe twice."""
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def __enter__(self) -> NetworkClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- connections -----------------------------------------------------------------------------

    def connection_to(self, host: str, port: int) -> BrokerConnection:
        """A connected ``BrokerConnection`` to ``host:port``: the open one, or a new one unless
        that address is backing off after a failure (then ``NetworkError`` says for how long)."""
        address = (host, port)
        connection = self._connections.get(address)
        if connection is not None and connection.connected:
            return connection
        failures, retry_at_ms = self._failures.get(address, (0, 0))
        now_ms = self._clock.monotonic_ms()
        if now_ms < retry_at_ms:
            raise NetworkError(f"{host}:{port} is backing off after {failures} failed attempt(s): "
                               f"next attempt in {retry_at_ms - now_ms} ms")
        connection = BrokerConnection(host, port, **self._settings)
        self.connect_attempts += 1
        try:
            connection.connect()
        except NetworkError:
            self._failed(address, failures + 1)
            self._connections.pop(address, None)
            raise
        self._failures.pop(address, None)
        self._connections[address] = connection
        return connection

    def connection(self, node_id: int) -> BrokerConnection:
        """A connection to broker ``node_id`` of the metadata."""
        if node_id not in self.metadata.brokers:
            raise NetworkError(f"no broker {node_id} in the cluster metadata (brokers: {sorted(self.metadata.brokers)})")
        return self.connection_to(*self.metadata.brokers[node_id])

    def backoff_ms(self, failures: int) -> int:
        """The wait after ``failures`` failed attempts in a row: doubling from
        ``reconnect_backoff_ms`` up to ``reconnect_backoff_max_ms``, then ±20% jitter."""
        if failures < 1 or self.reconnect_backoff_ms == 0:
            return 0
        base = min(self.reconnect_backoff_ms * 2 ** min(failures - 1, 30), self.reconnect_backoff_max_ms)
        return int(base * self._rng.uniform(1 - _JITTER, 1 + _JITTER))

    def _failed(self, address: tuple[str, int], failures: int) -> None:
        self._failures[address] = (failures, self._clock.monotonic_ms() + self.backoff_ms(failures))

    # --- metadata --------------------------------------------------------------------------------

    def refresh_metadata(self, topics: list[str] | None = None, *, allow_auto_topic_creation: bool = False
                         ) -> ClusterMetadata:
        """Ask a broker for the metadata of ``topics`` (None: every topic): the known brokers first,
        then the bootstrap addresses, each in turn until one answers. A broker that creates topics
        on demand does so for unknown ``topics`` only with ``allow_auto_topic_creation`` (Kafka's
        producers ask for it, its consumers do not)."""
        body = self.request_any("Metadata", {
            "topics": None if topics is None else [{"name": name} for name in topics],
            "allow_auto_topic_creation": allow_auto_topic_creation})
        self.metadata = ClusterMetadata.from_response(body)
        return self.metadata

    def request_any(self, api: str, body: dict) -> dict:
        """``body`` sent to the known brokers first, then the bootstrap addresses, each in turn until
        one answers: its response body. ``NetworkError`` naming every address when none does."""
        errors = []
        for address in dict.fromkeys([*self.metadata.brokers.values(), *self.bootstrap]):  # each once, in order
            try:
                return self.connection_to(*address).request(api, body)
            except (NetworkError, BrokerResponseError) as exc:  # unreachable, or refused our ApiVersions
                errors.append(f"{address[0]}:{address[1]}: {exc}")
        raise NetworkError(f"no broker answered {api}: " + "; ".join(errors))

    def leader_for(self, topic: str, partition: int) -> int:
        """The leader's node id for ``topic``/``partition`` in the current metadata."""
        leaders = self.metadata.leaders.get(topic)
        if leaders is None or partition not in leaders:
            raise NetworkError(f"no leader known for {topic}-{partition}: refresh the metadata")
        return leaders[partition]
