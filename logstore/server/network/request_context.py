"""One connection's state and one request's context, as the network layer and the handlers share
them (``socket_server.SocketServer`` makes both).

What it owns:
- ``Connection``: a client's socket, its listener and session (who the client is), what was read and
  not yet handled, what is to be sent, and the flags of its life (muted while a handler runs, in its
  TLS handshake, closing after its last answer);
- ``RequestContext``: the decoded header, the frame, and the ways a handler finishes a request
  (``respond``, ``respond_frame``, ``no_response``, ``close``), with an optional ``amend`` the
  authorization layer sets to edit the body of the answer;
- ``Completion``: what a context needs of the server that made it (``complete``, ``complete_later``),
  so this module does not import the ``SocketServer`` that imports it.

It imports only the codec.
"""

from __future__ import annotations

import collections
import selectors
import socket
import ssl
from typing import Callable, Protocol

from ..protocol.codec import encode_response

_NO_RESPONSE = object()
RAW_TOKEN_API_KEY = -1
"""The ``api_key`` of a context that carries a bare SASL token (after a SaslHandshake v0 the client
sends its tokens size-prefixed without a request header, and expects them answered the same way)."""


class Completion(Protocol):
    """The side of ``SocketServer`` a request context finishes through."""

    def complete(self, context: "RequestContext", chunks, close_reason: str | None) -> None:
        """Queue ``chunks`` (a response frame, ``_NO_RESPONSE`` or None with ``close_reason``) as
        ``context``'s answer, in its connection's request order."""

    def complete_later(self, context: "RequestContext", chunks, delay_ms: int) -> None:
        """As ``complete``, once ``delay_ms`` have passed (the network thread holds the answer)."""


class Connection:
    """One client connection: its socket, what was read and not yet handled, what is to be sent."""

    __slots__ = ("connection_id", "sock", "peer", "inbound", "large", "filled", "expected", "ready", "outbound",
                 "busy", "closed", "last_active_ms", "requests", "events", "eof", "slots", "listener", "session", "tls",
                 "handshaking", "closing", "tls_unsent", "held", "handling", "unsent", "starved", "received",
                 "received_ms")

    def __init__(self, connection_id: int, sock: socket.socket, peer: str, now_ms: int, listener=None,
                 session=None) -> None:
        self.connection_id = connection_id
        self.sock = sock
        self.peer = peer
        self.listener = listener  # the Listener it came in on (None: the server's one plain address)
        self.session = session  # who the client is (sasl.Session), made by the server's session factory
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.handshaking = self.tls  # the TLS handshake is not done: no frames yet
        self.closing = False  # answer what is being answered, read nothing more, then close
        self.tls_unsent: bytes | None = None  # a TLS send that must be retried with the same bytes
        self.inbound = bytearray()  # read, not yet cut into frames
        self.large: bytearray | None = None  # a large frame being received into its own buffer
        self.filled = 0  # bytes of ``large`` received so far
        self.expected = 0  # the size of the large frame (``large`` grows towards it as bytes arrive)
        # the next frame, complete, waiting for its turn (reading pauses meanwhile); an int: a bad size
        self.ready: bytes | bytearray | int | None = None
        self.outbound: collections.deque = collections.deque()
        self.busy = False  # a request's handler is running: the connection is muted until it returns
        self.slots: collections.deque = collections.deque()  # requests not yet answered, in order
        self.closed = False
        self.last_active_ms = now_ms
        self.requests = 0
        self.events = selectors.EVENT_READ  # what the selector watches for (0: not registered)
        self.eof = False  # the client finished sending: its buffered requests are still handled
        # Request bytes this connection holds (read buffers, its waiting frame, frames being handled):
        # its share of queued.max.request.bytes. Kept by the network thread only.
        self.held = 0
        self.handling = 0  # of which: frames a handler has (freed when it returns)
        self.unsent = 0  # response bytes answered and not yet sent (outbound and answers waiting their turn)
        self.starved = False  # not read because queued.max.request.bytes is spent
        self.received = 0  # bytes received, ever
        self.received_ms = now_ms  # when bytes last arrived


class RequestContext:
    """One request as the handlers see it: the decoded header, the frame, and the ways to finish it.

    The body is decoded by the handler (``frame`` from ``body_offset``), so a bad body is the
    handler's to answer or refuse. Finishing twice is a bug and raises ``RuntimeError``."""

    __slots__ = ("server", "connection", "api_key", "api_version", "correlation_id", "client_id", "frame",
                 "body_offset", "received_ms", "_finished", "result", "amend", "exclusive")

    def __init__(self, server: Completion, connection: Connection, header: dict, frame: memoryview,
                 body_offset: int, received_ms: int) -> None:
        self.server = server
        self.connection = connection
        self.api_key: int = header["api_key"]
        self.api_version: int = header["api_version"]
        self.correlation_id: int = header["correlation_id"]
        self.client_id: str | None = header.get("client_id")
        self.frame = frame
        self.body_offset = body_offset
        self.received_ms = received_ms  # the server clock's monotonic ms when the frame was complete
        self._finished = False
        self.result = None  # the response chunks (or _NO_RESPONSE) once finished
        self.amend: Callable[[dict], dict] | None = None  # applied to the body by respond() (authorization)
        # Set by a handler that parks a request whose answer may be large (a fetch): the connection's
        # next request waits until this one is answered, as every request does in Kafka, so a client
        # cannot pile up big answers by pipelining.
        self.exclusive = False

    @property
    def peer(self) -> str:
        return self.connection.peer

    @property
    def session(self):
        """The connection's session (who the client is), or None on a server without one."""
        return self.connection.session

    def _finish(self) -> None:
        if self._finished:
            raise RuntimeError(f"request {self.correlation_id} of {self.peer} finished twice")
        self._finished = True

    def respond(self, body: dict, *, delay_ms: int = 0, then_close: bool = False) -> None:
        """Encode ``body`` as this request's response and send it (in request order). ``amend``,
        when set, edits ``body`` first. ``delay_ms`` holds the answer back that long (a failed
        authentication: the client waits, no thread does); ``then_close`` closes the connection once
        it is sent, and nothing more is read from it."""
        if self.amend is not None:
            body = self.amend(body)
        chunks = encode_response(self.api_key, self.api_version, self.correlation_id, body)
        self.respond_frame(chunks, delay_ms=delay_ms, then_close=then_close)

    def respond_frame(self, chunks, *, delay_ms: int = 0, then_close: bool = False) -> None:
        """Send an already encoded response frame (bytes or a list of byte chunks, size prefix
        included); ``delay_ms`` and ``then_close`` as for ``respond``."""
        self._finish()
        if then_close:
            self.connection.closing = True
        chunks = chunks if isinstance(chunks, (list, tuple)) else [chunks]
        if delay_ms > 0:
            self.server.complete_later(self, chunks, delay_ms)
        else:
            self.server.complete(self, chunks, None)

    def no_response(self) -> None:
        """Finish without a response (acks=0): the connection goes on with its next request."""
        self._finish()
        self.server.complete(self, _NO_RESPONSE, None)

    def close(self, reason: str) -> None:
        """Finish by closing the connection (one log line with ``reason``)."""
        self._finish()
        self.server.complete(self, None, reason)


__all__ = ["Completion", "Connection", "RAW_TOKEN_API_KEY", "RequestContext"]
