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
- metadata refresh (``refresh_metadata``), from any broker that answers;
- ``poll``: one selector waiting on every connection that has requests in flight, returning the
  responses that arrived per connection and the connections that broke or timed out (Kafka's
  ``NetworkClient.poll`` over its ``Selector``), and ``wakeup`` to end a wait from another thread.

Time is the clock's (``logstore.clock``): tests drive the backoff with a manual clock. Not
thread-safe: one owner (the producer's sender thread, a consumer, the CLI).
"""

from __future__ import annotations

import random
import selectors
import socket
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Sequence

from ..clock import SYSTEM_CLOCK, Clock
from ..server.network.socket_server import is_unix_socket_path
from .connection import BrokerConnection, Response
from .errors import BrokerResponseError, NetworkError
from .security import ClientSecurity

_JITTER = 0.2  # Kafka's CommonClientConfigs.RECONNECT_BACKOFF_JITTER


BootstrapServers = str | Sequence[str | tuple[str, int]]
"""Where a client starts: ``"host:port,host:port"``, or a list of ``host:port`` (or ``(host, port)``)."""


def parse_bootstrap_servers(servers: str | list[str] | tuple[str, ...]) -> list[tuple[str, int]]:
    """``"host:port,host:port"`` (or a list of ``host:port``) as ``(host, port)`` pairs, in order.
    IPv6 hosts are written in brackets (``[::1]:9092``); an absolute path is a logstore server's Unix
    socket (port 0); a ``(host, port)`` pair is taken as it is."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    addresses = []
    for item in items:
        if isinstance(item, tuple) and len(item) == 2:  # already parsed (host, port)
            addresses.append(item)
            continue
        item = item.strip() if isinstance(item, str) else item
        if isinstance(item, str) and is_unix_socket_path(item):
            addresses.append((item, 0))
            continue
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


class PollResult(NamedTuple):
    """What one ``NetworkClient.poll`` found: the responses that arrived, per connection (in the
    order of its requests), and the connections that broke, with why (their unanswered requests
    will never be answered)."""

    responses: dict[BrokerConnection, list[Response]]
    broken: dict[BrokerConnection, NetworkError]


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

    def __init__(self, bootstrap_servers: BootstrapServers, *, client_id: str = "logstore",
                 request_timeout_ms: int = 30_000,
                 connect_timeout_ms: int = 10_000, max_in_flight: int = 5, reconnect_backoff_ms: int = 50,
                 reconnect_backoff_max_ms: int = 1000, clock: Clock = SYSTEM_CLOCK,
                 rng: random.Random | None = None, security: ClientSecurity | None = None) -> None:
        self.bootstrap = parse_bootstrap_servers(bootstrap_servers)
        if type(reconnect_backoff_ms) is not int or reconnect_backoff_ms < 0:
            raise ValueError(f"reconnect_backoff_ms must be an int >= 0, got {reconnect_backoff_ms!r}")
        if type(reconnect_backoff_max_ms) is not int or reconnect_backoff_max_ms < reconnect_backoff_ms:
            raise ValueError(f"reconnect_backoff_max_ms must be an int >= reconnect_backoff_ms, "
                             f"got {reconnect_backoff_max_ms!r}")
        self._settings = {"client_id": client_id, "request_timeout_ms": request_timeout_ms,
                          "connect_timeout_ms": connect_timeout_ms, "max_in_flight": max_in_flight, "clock": clock,
                          "security": security}  # a client.security.ClientSecurity, or None: PLAINTEXT
        self.security = security
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self._clock = clock
        self._rng = rng or random.Random()
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._failures: dict[tuple[str, int], tuple[int, int]] = {}  # address -> (failures in a row, retry at ms)
        self.metadata = ClusterMetadata()
        self.connect_attempts = 0  # connections tried so far (backoff skips are not attempts)
        # ``poll``'s selector (made at its first use) and the connections registered in it, with the
        # descriptor each had then (a reconnected address is a new connection, a new descriptor);
        # the socket pair lets another thread end a wait at once (``wakeup``)
        self._selector: selectors.BaseSelector | None = None
        self._registered: dict[BrokerConnection, int] = {}
        self._wakeup_pair: tuple[socket.socket, socket.socket] | None = None
        self._wakeup_pending = False

    def close(self) -> None:
        """Close every connection. Safe twice."""
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
        if self._selector is not None:
            self._selector.close()
            self._selector = None
            self._registered.clear()
        if self._wakeup_pair is not None:
            for end in self._wakeup_pair:
                end.close()
            self._wakeup_pair = None

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

    # --- polling ---------------------------------------------------------------------------------

    def poll(self, timeout_ms: int, connections: Iterable[BrokerConnection] | None = None) -> PollResult:
        """Wait up to ``timeout_ms`` on one selector for any of ``connections`` (None: every open
        connection of this client) to have something to read, and return what arrived on each and
        which broke. Returns at once when a connection already holds responses or is closed, and
        early on ``wakeup()``. A connection whose oldest request passed ``request_timeout_ms``
        is closed and reported broken (``RequestTimedOutError``), so one silent broker never holds
        up the others' responses."""
        if type(timeout_ms) is not int or timeout_ms < 0:
            raise ValueError(f"timeout_ms must be an int >= 0, got {timeout_ms!r}")
        watched = list(self._connections.values() if connections is None else dict.fromkeys(connections))
        result = PollResult({}, {})
        selector = self._poll_selector(watched)
        deadline_ms = self._clock.monotonic_ms() + timeout_ms
        for connection in watched:
            if not connection.connected:
                result.broken[connection] = NetworkError(connection.close_reason or f"{connection!r} is closed")
            elif connection.has_responses:
                self._read(connection, result)
            timeout_at_ms = connection.timeout_at_ms()
            if timeout_at_ms is not None:
                deadline_ms = min(deadline_ms, timeout_at_ms)
        wait_ms = 0 if result.responses or result.broken else max(0, deadline_ms - self._clock.monotonic_ms())
        for key, _ in selector.select(wait_ms / 1000):
            if key.data is None:
                self._drain_wakeups()
            elif key.fileobj.connected and key.fileobj not in result.broken:
                self._read(key.fileobj, result)
        now_ms = self._clock.monotonic_ms()
        for connection in watched:  # the silent ones: past their request timeout?
            timeout_at_ms = connection.timeout_at_ms()
            if (connection.connected and timeout_at_ms is not None and now_ms >= timeout_at_ms
                    and connection not in result.responses):
                self._read(connection, result)
        return result

    def wakeup(self) -> None:
        """End a ``poll`` under way in another thread at once (or the next one, if none is)."""
        pair = self._wakeup_pair
        if pair is not None and not self._wakeup_pending:
            # One byte per wait is enough; the flag is cleared before the byte is read, so a wakeup
            # that finds it set is seen by the round after that read
            self._wakeup_pending = True
            try:
                pair[1].send(b"\0")
            except (BlockingIOError, OSError):
                pass  # a wakeup is pending already (the pair's buffer is full), or closed meanwhile

    def _read(self, connection: BrokerConnection, result: PollResult) -> None:
        try:
            responses = connection.read_available()
        except NetworkError as exc:
            result.broken[connection] = exc
            return
        if responses:
            result.responses.setdefault(connection, []).extend(responses)
        if not connection.connected:  # it answered, then hung up: the rest are unanswered
            result.broken[connection] = NetworkError(connection.close_reason or f"{connection!r} closed")

    def _poll_selector(self, watched: list[BrokerConnection]) -> selectors.BaseSelector:
        """The selector, holding exactly the open ones of ``watched`` (and the wakeup socket)."""
        if self._selector is None:
            self._selector = selectors.DefaultSelector()
            self._wakeup_pair = socket.socketpair()
            for end in self._wakeup_pair:
                end.setblocking(False)
            self._selector.register(self._wakeup_pair[0], selectors.EVENT_READ, None)
        wanted = {connection: connection.fileno() for connection in watched if connection.connected}
        # Unregister first: a closed connection's descriptor may be reused by a new connection's.
        for connection, fd in list(self._registered.items()):
            if wanted.get(connection) != fd:
                self._selector.unregister(fd)  # by descriptor: the connection's own may be -1 by now
                del self._registered[connection]
        for connection, fd in wanted.items():
            if connection not in self._registered:
                self._selector.register(connection, selectors.EVENT_READ, connection)
                self._registered[connection] = fd
        return self._selector

    def _drain_wakeups(self) -> None:
        self._wakeup_pending = False
        try:
            while self._wakeup_pair[0].recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

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
