"""``BrokerConnection``: one TCP connection to a Kafka-compatible broker, the client's network core.

What it owns:
- framing: a request goes out as one frame (``codec.encode_request``: size, header, body); responses
  come back as size-prefixed frames, cut from a receive buffer however the bytes arrive;
- correlation: each request gets the next correlation id and joins the in-flight queue; Kafka
  answers the requests of one connection in order, so a response must carry the id at the head of
  the queue, and anything else is a broken connection (closed, never guessed);
- several requests in flight (at most ``max_in_flight``): ``send`` queues one and returns its id,
  ``poll`` returns the responses that have arrived, ``request`` does both for one request;
  ``read_available`` returns what has arrived without ever waiting, and ``fileno`` lets one selector
  wait on several connections (``NetworkClient.poll``);
- timeouts: a connection that does not open within ``connect_timeout_ms``, or a request unanswered
  after ``request_timeout_ms``, closes the connection and raises (a late response must never be
  taken for a later request's);
- security: with a ``ClientSecurity`` (``security.py``), the TLS handshake right after the TCP
  connect and SASL right after ApiVersions; a TLS socket's decrypted bytes that the selector cannot
  see are read before any wait;
- versions: on connect, ApiVersions (v3, the first flexible one; v0 when the broker answers that it
  does not speak v3, as Kafka's brokers do) gives the broker's range of every API, and each API's
  version is the highest both sides speak (``versions``).

The socket is non-blocking and waited on with ``selectors``; time comes from the clock given
(``logstore.clock``), so a test can drive timeouts. Not thread-safe: one owner per connection (the
producer's sender thread, a consumer, the CLI).
"""

from __future__ import annotations

import selectors
import socket
import ssl
import struct
from collections import deque
from typing import NamedTuple

from ..clock import SYSTEM_CLOCK, Clock
from ..server.protocol.codec import API_KEYS, API_NAMES, ProtocolError, decode_response, encode_request
from ..server.protocol.errors import UNSUPPORTED_VERSION
from ..server.network.socket_server import is_unix_socket_path
from ..server.protocol.messages import APIS
from .errors import BrokerResponseError, NetworkError, NoCommonVersionError, RequestTimedOutError
from .security import ClientSecurity

_SIZE = struct.Struct(">i")
_API_VERSIONS = API_KEYS["ApiVersions"]
_API_VERSIONS_FIRST = 3  # the first flexible version: it also tells the broker our software name
_RECV_BYTES = 256 * 1024
MAX_RESPONSE_BYTES = 100 * 1024 * 1024  # a frame larger than this is a broken stream, not a response


class Response(NamedTuple):
    """A decoded response: the request's correlation id, API key and version, and its body."""

    correlation_id: int
    api_key: int
    version: int
    body: dict


class _InFlight(NamedTuple):
    correlation_id: int
    api_key: int
    version: int
    sent_ms: int


class BrokerConnection:
    """A connection to the broker at ``host``:``port``. ``connect()`` opens it and negotiates
    versions; ``request(api, body)`` sends one request and returns its response body; ``send`` and
    ``poll`` keep several in flight. Every failure closes the connection and raises a
    ``NetworkError``; a closed connection can be connected again."""

    def __init__(self, host: str, port: int, *, client_id: str = "logstore", request_timeout_ms: int = 30_000,
                 connect_timeout_ms: int = 10_000, max_in_flight: int = 5, clock: Clock = SYSTEM_CLOCK,
                 security: ClientSecurity | None = None) -> None:
        for name, value in (("port", port), ("request_timeout_ms", request_timeout_ms),
                            ("connect_timeout_ms", connect_timeout_ms), ("max_in_flight", max_in_flight)):
            if type(value) is not int or value < (0 if name == "port" else 1):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.host, self.port = host, port
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.max_in_flight = max_in_flight
        self._clock = clock
        self.security = security
        self._tls = security is not None and security.uses_tls
        self._sock: socket.socket | None = None
        self._selector: selectors.BaseSelector | None = None
        self._received = bytearray()
        self._in_flight: deque[_InFlight] = deque()
        self._next_correlation_id = 0
        self._completed: list[Response] = []  # received while waiting for room or for another response
        self.broker_versions: dict[int, tuple[int, int]] = {}  # what the broker offers, per API key
        self.versions: dict[int, int] = {}  # the version used per API key: the highest both speak
        self.close_reason: str | None = None  # why ``read_available`` found the connection closed

    def __repr__(self) -> str:
        return f"BrokerConnection({self.address}, {'connected' if self.connected else 'closed'})"

    @property
    def address(self) -> str:
        """``host:port``, or a Unix socket's path."""
        return self.host if is_unix_socket_path(self.host) else f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._sock is not None

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._in_flight)

    # --- opening and closing ---------------------------------------------------------------------

    def connect(self) -> None:
        """Open the connection and negotiate versions (ApiVersions)."""
        if self._sock is not None:
            return
        unix = is_unix_socket_path(self.host)
        try:
            if unix:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.settimeout(self.connect_timeout_ms / 1000)
                    sock.connect(self.host)
                except BaseException:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout_ms / 1000)
        except OSError as exc:
            raise NetworkError(f"cannot connect to {self.address}: {exc}") from exc
        if not unix:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls:
            sock = self.security.wrap(sock, self.host)  # blocking, within the connect timeout
        sock.setblocking(False)
        self._sock, self._selector = sock, selectors.DefaultSelector()
        self._selector.register(sock, selectors.EVENT_READ)
        self._received.clear()
        self._in_flight.clear()
        self.close_reason = None
        self._negotiate()
        if self.security is not None and self.security.uses_sasl:
            try:
                self.security.authenticate(lambda api, version, body: self._request_at(API_KEYS[api], version, body),
                                           self.versions, f"{self.address}")
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        """Close the socket; requests in flight get no response. Safe twice."""
        sock, selector, self._sock, self._selector = self._sock, self._selector, None, None
        self._in_flight.clear()
        if selector is not None:
            selector.close()
        if sock is not None:
            sock.close()

    def __enter__(self) -> BrokerConnection:
        self.connect()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _negotiate(self) -> None:
        body = {"client_software_name": "logstore", "client_software_version": "1"}
        response = self._request_at(_API_VERSIONS, _API_VERSIONS_FIRST, body)
        if response["error_code"] == UNSUPPORTED_VERSION:
            # The broker answered in v0 with its own ApiVersions range: ask again at its highest.
            offered = {entry["api_key"]: entry["max_version"] for entry in response.get("api_keys", [])}
            version = min(offered.get(_API_VERSIONS, 0), _API_VERSIONS_FIRST - 1)
            response = self._request_at(_API_VERSIONS, version, {})
        if response["error_code"]:
            self.close()
            raise BrokerResponseError(f"{self.address} refused ApiVersions (error {response['error_code']})",
                                      response["error_code"], "ApiVersions")
        self.broker_versions = {entry["api_key"]: (entry["min_version"], entry["max_version"])
                                for entry in response["api_keys"]}
        self.versions = {}
        for key, (low, high) in self.broker_versions.items():
            spec = APIS.get(key)
            if spec is not None and max(low, spec.versions[0]) <= min(high, spec.versions[1]):
                self.versions[key] = min(high, spec.versions[1])

    def _request_at(self, api_key: int, version: int, body: dict) -> dict:
        correlation_id = self._send(api_key, version, body)
        return self._wait_for(correlation_id).body

    # --- requests --------------------------------------------------------------------------------

    def version_of(self, api: str | int) -> int:
        """The negotiated version of ``api`` (a name such as ``"Metadata"``, or an API key)."""
        key = self._api_key(api)
        if key not in self.versions:
            raise NoCommonVersionError(f"{self.address} speaks no version of {API_NAMES.get(key, key)} that "
                                       f"this client speaks (broker: {self.broker_versions.get(key)}, "
                                       f"client: {APIS[key].versions if key in APIS else None})")
        return self.versions[key]

    def send(self, api: str | int, body: dict, version: int | None = None, *, expect_response: bool = True) -> int:
        """Send a request (at the negotiated version unless ``version`` is given) and return its
        correlation id; its response comes from ``poll``. Waits for room when ``max_in_flight``
        requests are unanswered (their responses are then kept for ``poll``). ``expect_response``
        False: a request the broker does not answer (Produce with ``acks=0``), not kept in flight."""
        key = self._api_key(api)
        version = self.version_of(key) if version is None else version
        return self._send(key, version, body, expect_response)

    def request(self, api: str | int, body: dict, version: int | None = None) -> dict:
        """Send one request and return its response body (after the responses before it)."""
        return self._wait_for(self.send(api, body, version)).body

    def poll(self, timeout_ms: int = 0) -> list[Response]:
        """The responses that arrived, waiting up to ``timeout_ms`` for the first one when none has."""
        responses = self._completed
        self._completed = []
        if not responses and self._in_flight:
            responses = self._receive(timeout_ms)
        return responses

    def fileno(self) -> int:
        """The socket's file descriptor (-1 when closed), so one selector can wait on several
        connections (``NetworkClient.poll``)."""
        return -1 if self._sock is None else self._sock.fileno()

    @property
    def has_responses(self) -> bool:
        """Responses already read (while a blocking ``request`` waited for its own) and not yet
        returned: a selector would not see them, so ``read_available`` should be called at once."""
        return bool(self._completed) or (self._tls and self._sock is not None and self._sock.pending() > 0)

    def timeout_at_ms(self) -> int | None:
        """The clock's time at which the oldest unanswered request times out (None: none in flight)."""
        return self._in_flight[0].sent_ms + self.request_timeout_ms if self._in_flight else None

    def read_available(self) -> list[Response]:
        """The responses that can be had without waiting: those already read, then whatever the
        socket holds now (it never blocks). A broker that closed the connection after answering
        still has its answers returned; the connection is then closed (``connected`` is False and
        ``close_reason`` says why), and the requests it left unanswered get no response. A request
        older than ``request_timeout_ms`` with nothing arrived closes the connection and raises
        ``RequestTimedOutError``; bytes that do not parse raise ``NetworkError``."""
        if self._sock is None:
            raise NetworkError(f"not connected to {self.address}")
        responses, self._completed = self._completed, []
        closed = None
        while True:
            try:
                data = self._sock.recv(_RECV_BYTES)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except OSError as exc:
                closed = f"receiving failed: {exc}"
                break
            if not data:
                closed = "the broker closed the connection"
                break
            self._received += data
            if len(data) < _RECV_BYTES and not self._tls:
                break  # the socket is drained (one more recv would only say so; TLS reads a record at a time)
        responses.extend(self._cut_frames())
        if closed is not None:
            self.close()
            self.close_reason = f"connection to {self.address} broken: {closed}"
        elif not responses and self._in_flight and self._clock.monotonic_ms() >= self.timeout_at_ms():
            head = self._in_flight[0]
            self.close()
            raise RequestTimedOutError(f"{self.address} did not answer {API_NAMES.get(head.api_key)} "
                                       f"v{head.version} within {self.request_timeout_ms} ms")
        return responses

    def _wait_for(self, correlation_id: int) -> Response:
        while True:
            for slot, response in enumerate(self._completed):
                if response.correlation_id == correlation_id:
                    return self._completed.pop(slot)
            self._completed.extend(self._receive(self.request_timeout_ms))

    def _api_key(self, api: str | int) -> int:
        if isinstance(api, str):
            if api not in API_KEYS:
                raise ValueError(f"unknown API {api!r}")
            return API_KEYS[api]
        if type(api) is not int:
            raise TypeError(f"an API is a name or a key, got {api!r}")
        return api

    def _send(self, api_key: int, version: int, body: dict, expect_response: bool = True) -> int:
        if self._sock is None:
            raise NetworkError(f"not connected to {self.address}")
        while len(self._in_flight) >= self.max_in_flight:
            self._completed.extend(self._receive(self.request_timeout_ms))
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        self._write(frame)
        if expect_response:
            self._in_flight.append(_InFlight(correlation_id, api_key, version, self._clock.monotonic_ms()))
        return correlation_id

    # --- bytes -----------------------------------------------------------------------------------

    def _write(self, frame: bytes) -> None:
        view = memoryview(frame)
        deadline_ms = self._clock.monotonic_ms() + self.request_timeout_ms
        while view:
            try:
                sent = self._sock.send(view)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                sent = 0  # TLS: retried with the same bytes, as OpenSSL requires
            except OSError as exc:
                raise self._broken(f"sending failed: {exc}") from exc
            view = view[sent:]
            if view:
                remaining_ms = deadline_ms - self._clock.monotonic_ms()
                if remaining_ms <= 0:
                    self.close()
                    raise RequestTimedOutError(f"{self.address} took no bytes for {self.request_timeout_ms} ms")
                self._selector.modify(self._sock, selectors.EVENT_WRITE)
                try:
                    self._selector.select(remaining_ms / 1000)
                finally:
                    if self._selector is not None:
                        self._selector.modify(self._sock, selectors.EVENT_READ)

    def _receive(self, timeout_ms: int) -> list[Response]:
        """Read until at least one response is complete (or ``timeout_ms`` passed with none); a
        request older than ``request_timeout_ms`` closes the connection."""
        if self._sock is None:
            raise NetworkError(f"not connected to {self.address}")
        deadline_ms = self._clock.monotonic_ms() + timeout_ms
        while True:
            responses = self._cut_frames()
            if responses:
                return responses
            now_ms = self._clock.monotonic_ms()
            if self._in_flight and now_ms - self._in_flight[0].sent_ms >= self.request_timeout_ms:
                head = self._in_flight[0]
                self.close()
                raise RequestTimedOutError(f"{self.address} did not answer {API_NAMES.get(head.api_key)} "
                                           f"v{head.version} within {self.request_timeout_ms} ms")
            if not self._in_flight:
                return []
            wait_ms = min(deadline_ms - now_ms, self._in_flight[0].sent_ms + self.request_timeout_ms - now_ms)
            tls_pending = self._tls and self._sock.pending() > 0  # decrypted already: no selector sees it
            if not tls_pending and not self._selector.select(max(wait_ms, 0) / 1000):
                if now_ms >= deadline_ms:
                    return []  # after one look at the socket: poll(0) reads what has arrived
                continue
            try:
                data = self._sock.recv(_RECV_BYTES)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                continue
            except OSError as exc:
                raise self._broken(f"receiving failed: {exc}") from exc
            if not data:
                raise self._broken("the broker closed the connection")
            self._received += data

    def _cut_frames(self) -> list[Response]:
        responses = []
        received = self._received
        at = 0
        while len(received) - at >= 4:
            (size,) = _SIZE.unpack_from(received, at)
            if not 0 <= size <= MAX_RESPONSE_BYTES:
                raise self._broken(f"a response frame of {size} bytes")
            if len(received) - at - 4 < size:
                break
            frame = bytes(received[at + 4 : at + 4 + size])
            at += 4 + size
            if not self._in_flight:
                raise self._broken("a response to no request")
            head = self._in_flight.popleft()
            try:
                correlation_id, body = decode_response(head.api_key, head.version, frame)
            except ProtocolError as exc:
                if head.api_key == _API_VERSIONS and head.version:
                    # A broker that does not speak this ApiVersions version answers in v0.
                    correlation_id, body = self._decode_v0_api_versions(frame, exc)
                else:
                    raise self._broken(f"a {API_NAMES.get(head.api_key)} v{head.version} response "
                                       f"that does not parse: {exc}") from exc
            if correlation_id != head.correlation_id:
                raise self._broken(f"response correlation id {correlation_id}, expected {head.correlation_id}")
            responses.append(Response(correlation_id, head.api_key, head.version, body))
        del received[:at]
        return responses

    def _decode_v0_api_versions(self, frame: bytes, error: ProtocolError) -> tuple[int, dict]:
        try:
            return decode_response(_API_VERSIONS, 0, frame)
        except ProtocolError:
            raise self._broken(f"an ApiVersions response that does not parse: {error}") from error

    def _broken(self, why: str) -> NetworkError:
        self.close()
        return NetworkError(f"connection to {self.address} broken: {why}")
