"""The network layer: Kafka's SocketServer and RequestChannel, in one selector thread and a pool of
request handler threads.

This module owns the sockets. One thread (``logstore-network``) accepts connections, reads
size-prefixed frames, and writes responses; ``io_threads`` handler threads run the request handlers.
It knows nothing of the APIs: a frame is handed to ``dispatch(context)``, which must finish the
request exactly once with ``context.respond(body)``, ``context.respond_frame(chunks)``,
``context.no_response()`` (acks=0 produce) or ``context.close(reason)``, now or later (a request
parked in a purgatory finishes on the thread that completes it).

Ordering: a connection's requests are handled one at a time, in order (the connection is *muted*
while its request's handler runs), and its responses go out in request order. A request whose
handler parked it in a purgatory (a fetch waiting for data, an ``acks=-1`` produce waiting for its
fsync) no longer mutes the connection: the requests behind it are handled meanwhile (so pipelined
durable produces share one fsync), and their responses wait behind its own in the connection's
response slots (at most ``MAX_PARKED_PER_CONNECTION``). A parked request holds back only its own
connection.

Reading: a connection is read until one complete frame waits for its turn, then not until that frame
is handed on (Kafka mutes a channel the same way), so a client that pipelines faster than its
requests are handled waits in TCP flow control instead of in this process's memory. Small frames are
cut out of a read buffer; a frame of ``LARGE_FRAME_BYTES`` or more (a produce) is received straight
into a buffer of its own size (``recv_into``), which the handlers then read in place: no growing
buffer, no copy of the frame. Everything that goes wrong with one
connection (a frame over ``socket.request.max.bytes``, a malformed header, an unknown API, an idle
timeout, a reset) closes that connection with one log line and touches nothing else.
"""

from __future__ import annotations

import collections
import logging
import queue
import selectors
import socket
import threading
from typing import Callable

from ..clock import SYSTEM_CLOCK, Clock
from .codec import ProtocolError, decode_request_header, encode_response

logger = logging.getLogger("logstore.server.network")

_SIZE = 4
_RECV_BYTES = 1 << 16
LARGE_FRAME_BYTES = 1 << 16
"""Frames this large are received into a buffer of their own (see the module docstring)."""
_MAX_IOV = 512  # buffers per sendmsg (the kernel's IOV_MAX is 1024)
_SELECT_TIMEOUT_S = 0.5
MAX_PARKED_PER_CONNECTION = 64  # requests handled but not yet answered, per connection
_NO_RESPONSE = object()


class Connection:
    """One client connection: its socket, what was read and not yet handled, what is to be sent."""

    __slots__ = ("connection_id", "sock", "peer", "inbound", "large", "filled", "ready", "outbound", "busy", "closed",
                 "last_active_ms", "requests", "events", "eof", "slots")

    def __init__(self, connection_id: int, sock: socket.socket, peer: str, now_ms: int) -> None:
        self.connection_id = connection_id
        self.sock = sock
        self.peer = peer
        self.inbound = bytearray()  # read, not yet cut into frames
        self.large: bytearray | None = None  # a large frame being received into its own buffer
        self.filled = 0  # bytes of ``large`` received so far
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


class RequestContext:
    """One request as the handlers see it: the decoded header, the frame, and the ways to finish it.

    The body is decoded by the handler (``frame`` from ``body_offset``), so a bad body is the
    handler's to answer or refuse. Finishing twice is a bug and raises ``RuntimeError``."""

    __slots__ = ("server", "connection", "api_key", "api_version", "correlation_id", "client_id", "frame",
                 "body_offset", "received_ms", "_finished", "result")

    def __init__(self, server: "SocketServer", connection: Connection, header: dict, frame: memoryview,
                 body_offset: int, received_ms: int) -> None:
        self.server = server
        self.connection = connection
        self.api_key: int = header["api_key"]
        self.api_version: int = header["api_version"]
        self.correlation_id: int = header["correlation_id"]
        self.client_id: str | None = header.get("client_id")
        self.frame = frame
        self.body_offset = body_offset
        self.received_ms = received_ms
        self._finished = False
        self.result = None  # the response chunks (or _NO_RESPONSE) once finished

    @property
    def peer(self) -> str:
        return self.connection.peer

    def _finish(self) -> None:
        if self._finished:
            raise RuntimeError(f"request {self.correlation_id} of {self.peer} finished twice")
        self._finished = True

    def respond(self, body: dict) -> None:
        """Encode ``body`` as this request's response and send it (in request order)."""
        chunks = encode_response(self.api_key, self.api_version, self.correlation_id, body)
        self.respond_frame(chunks)

    def respond_frame(self, chunks) -> None:
        """Send an already encoded response frame (bytes or a list of byte chunks, size prefix included)."""
        self._finish()
        self.server.complete(self, chunks if isinstance(chunks, (list, tuple)) else [chunks], None)

    def no_response(self) -> None:
        """Finish without a response (acks=0): the connection goes on with its next request."""
        self._finish()
        self.server.complete(self, _NO_RESPONSE, None)

    def close(self, reason: str) -> None:
        """Finish by closing the connection (one log line with ``reason``)."""
        self._finish()
        self.server.complete(self, None, reason)


class SocketServer:
    """Accepts connections on ``host:port`` (0 picks a free port) and feeds their requests to
    ``dispatch`` on ``io_threads`` handler threads. Limits use Kafka's names: ``max_request_bytes``
    (``socket.request.max.bytes``), ``max_connections`` (``max.connections``) and ``idle_ms``
    (``connections.max.idle.ms``)."""

    def __init__(self, host: str, port: int, dispatch: Callable[[RequestContext], None], *,
                 max_request_bytes: int = 104857600, max_connections: int = 2**31 - 1, idle_ms: int = 600000,
                 io_threads: int = 2, clock: Clock | None = None, name: str = "logstore") -> None:
        self.host = host
        self.dispatch = dispatch
        self.max_request_bytes = max_request_bytes
        self.max_connections = max_connections
        self.idle_ms = idle_ms
        self._clock = clock or SYSTEM_CLOCK
        self._name = name
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind((host, port))
            self._listener.listen(128)
        except OSError:
            self._listener.close()
            raise
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._completions: collections.deque = collections.deque()
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._connections: dict[int, Connection] = {}
        self._next_id = 0
        self._stopping = False
        self._accepting = True
        self.accepted = 0
        self.refused = 0
        self._threads: list[threading.Thread] = []
        self._io_threads = io_threads
        self._started = False

    # --- life cycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the network thread and the handler threads."""
        if self._started:
            return
        self._started = True
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        network = threading.Thread(target=self._run, name=f"{self._name}-network", daemon=True)
        self._threads.append(network)
        for index in range(self._io_threads):
            self._threads.append(threading.Thread(target=self._handle_requests, name=f"{self._name}-handler-{index}",
                                                  daemon=True))
        for thread in self._threads:
            thread.start()

    def stop_accepting(self) -> None:
        """Close the listening socket: new clients are refused, connected ones are still served."""
        self._accepting = False
        self._wake()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Close every connection and stop the threads. Requests still parked elsewhere finish into
        closed connections (their answers are dropped). Idempotent."""
        self._stopping = True
        self._accepting = False
        self._wake()
        for _ in range(self._io_threads):
            self._requests.put(None)
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout_s)
        self._threads = []
        for sock in (self._listener, self._wake_r, self._wake_w):
            try:
                sock.close()
            except OSError:
                pass

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def busy_connections(self) -> int:
        """Connections with a request in flight (being handled, or parked in a purgatory)."""
        return sum(1 for connection in list(self._connections.values()) if connection.busy or connection.slots)

    # --- called from any thread --------------------------------------------------------------------

    def complete(self, context: RequestContext, chunks, close_reason: str | None) -> None:
        """A request finished: send ``chunks`` (``_NO_RESPONSE``: none) in its turn, or close."""
        self._completions.append((context, chunks, close_reason))
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (the loop will wake anyway) or closed (stopping)

    # --- the handler threads -----------------------------------------------------------------------

    def _handle_requests(self) -> None:
        while True:
            context = self._requests.get()
            if context is None:
                return
            try:
                self.dispatch(context)
            except Exception:
                logger.exception("request %s (api %d v%d) from %s failed; closing the connection",
                                 context.correlation_id, context.api_key, context.api_version, context.peer)
                if not context._finished:
                    context.close("the request handler failed")
            # The handler returned (the request answered, or parked): the connection may go on.
            self._completions.append((context, None, None))
            self._wake()

    # --- the network thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping:
                events = self._selector.select(_SELECT_TIMEOUT_S)
                for key, mask in events:
                    target = key.fileobj
                    if target is self._listener:
                        self._accept()
                    elif target is self._wake_r:
                        self._drain_wakeups()
                    else:
                        connection = key.data
                        if mask & selectors.EVENT_WRITE:
                            self._write(connection)
                        if mask & selectors.EVENT_READ and not connection.closed:
                            self._read(connection)
                self._finish_completions()
                if not self._accepting and self._listener.fileno() >= 0:
                    self._selector.unregister(self._listener)
                    self._listener.close()
                self._close_idle()
        except Exception:
            logger.exception("the network thread failed; closing every connection")
        finally:
            for connection in list(self._connections.values()):
                self._close(connection, None)
            self._selector.close()

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _accept(self) -> None:
        while True:
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                logger.warning("accepting a connection failed: %s", exc)
                return
            peer = f"{address[0]}:{address[1]}"
            if len(self._connections) >= self.max_connections:
                self.refused += 1
                logger.warning("refusing %s: max.connections (%d) reached", peer, self.max_connections)
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._next_id += 1
            connection = Connection(self._next_id, sock, peer, self._clock.monotonic_ms())
            self._connections[connection.connection_id] = connection
            self._selector.register(sock, selectors.EVENT_READ, connection)
            self.accepted += 1

    def _read(self, connection: Connection) -> None:
        large = connection.large
        try:
            if large is not None:
                with memoryview(large) as view:
                    received = connection.sock.recv_into(view[connection.filled:])
                data = None
            else:
                data = connection.sock.recv(_RECV_BYTES)
                received = len(data)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(connection, f"read failed: {exc}")
            return
        if not received:
            # The client closed its side. Requests it sent before (acks=0 produces, say) may still be
            # buffered behind a busy one: handle them all, then close (Kafka does the same).
            connection.eof = True
            self._update_events(connection)
            self._next_request(connection)
            return
        connection.last_active_ms = self._clock.monotonic_ms()
        if large is not None:
            connection.filled += received
            if connection.filled == len(large):
                connection.ready, connection.large = large, None
        else:
            connection.inbound += data
            if connection.ready is None:
                self._cut_frame(connection)
        self._next_request(connection)
        self._update_events(connection)

    def _cut_frame(self, connection: Connection) -> None:
        """Make the next frame ``ready`` if ``inbound`` holds all of it; start receiving a large one
        into its own buffer. A bad size becomes ``ready`` as an int (the connection closes when it
        comes to it, after the requests before it)."""
        inbound = connection.inbound
        if connection.ready is not None or connection.large is not None or len(inbound) < _SIZE:
            return
        size = int.from_bytes(inbound[:_SIZE], "big", signed=True)
        if size < 0 or size > self.max_request_bytes:
            connection.ready = size
            return
        end = _SIZE + size
        if len(inbound) >= end:
            with memoryview(inbound) as view:
                connection.ready = bytes(view[_SIZE:end])
            del inbound[:end]
        elif size >= LARGE_FRAME_BYTES:
            large = bytearray(size)
            with memoryview(inbound) as view:
                large[:len(inbound) - _SIZE] = view[_SIZE:]
            connection.large, connection.filled = large, len(inbound) - _SIZE
            inbound.clear()

    def _next_request(self, connection: Connection) -> None:
        """Hand the next complete frame of an unmuted connection to the handlers."""
        if connection.busy or connection.closed or len(connection.slots) >= MAX_PARKED_PER_CONNECTION:
            return
        if connection.ready is None:
            self._cut_frame(connection)
        frame = connection.ready
        if frame is None:
            if connection.eof and connection.large is None and len(connection.inbound) < _SIZE:
                if not connection.outbound and not connection.slots:
                    self._close(connection, None)  # the client closed and everything it sent is answered
            elif connection.eof:
                self._close(connection, "the client closed in the middle of a frame")
            return
        connection.ready = None
        if type(frame) is int:
            self._close(connection, f"a frame of {frame} bytes (socket.request.max.bytes is "
                                    f"{self.max_request_bytes})")
            return
        self._cut_frame(connection)  # the next one, if it is here already: reading waits for its turn
        self._update_events(connection)
        frame = memoryview(frame)
        try:
            header, body_offset = decode_request_header(frame)
        except ProtocolError as exc:
            self._close(connection, f"a malformed request header: {exc}")
            return
        connection.busy = True
        connection.requests += 1
        context = RequestContext(self, connection, header, frame, body_offset, self._clock.time_ms())
        connection.slots.append(context)
        self._requests.put(context)

    def _finish_completions(self) -> None:
        completions = self._completions
        while completions:
            context, chunks, close_reason = completions.popleft()
            connection = context.connection
            if connection.closed:
                continue
            if close_reason is not None:
                self._close(connection, close_reason)
                continue
            if chunks is None:  # the handler returned
                connection.busy = False
            else:
                context.result = chunks
                slots = connection.slots
                while slots and slots[0].result is not None:  # answers leave in request order
                    done = slots.popleft().result
                    if done is not _NO_RESPONSE:
                        connection.outbound.extend(done)
                if connection.outbound:
                    self._write(connection)
            self._next_request(connection)

    def _write(self, connection: Connection) -> None:
        outbound = connection.outbound
        while outbound and not connection.closed:
            buffers = [outbound[index] for index in range(min(len(outbound), _MAX_IOV))]
            try:
                sent = connection.sock.sendmsg(buffers)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if connection.eof:
                    outbound.clear()  # the client is gone: drop its answers, still handle what it sent
                    break
                self._close(connection, f"write failed: {exc}")
                return
            while sent:
                head = outbound[0]
                if sent >= len(head):
                    sent -= len(head)
                    outbound.popleft()
                else:
                    outbound[0] = memoryview(head)[sent:]
                    sent = 0
        connection.last_active_ms = self._clock.monotonic_ms()
        if not connection.closed:
            self._update_events(connection)
            if (connection.eof and not outbound and not connection.busy and not connection.slots
                    and connection.ready is None and connection.large is None and len(connection.inbound) < _SIZE):
                self._close(connection, None)

    def _update_events(self, connection: Connection) -> None:
        """Watch for reads until the client's EOF while no complete frame waits for its turn, and for
        writes while responses wait to be sent."""
        if connection.closed:
            return
        reading = not connection.eof and connection.ready is None
        events = (selectors.EVENT_READ if reading else 0) | (selectors.EVENT_WRITE if connection.outbound else 0)
        if events == connection.events:
            return
        if connection.events == 0:
            self._selector.register(connection.sock, events, connection)
        elif events == 0:
            self._selector.unregister(connection.sock)
        else:
            self._selector.modify(connection.sock, events, connection)
        connection.events = events

    def _close_idle(self) -> None:
        if not self._connections:
            return
        now_ms = self._clock.monotonic_ms()
        for connection in list(self._connections.values()):
            if not connection.busy and not connection.slots and now_ms - connection.last_active_ms > self.idle_ms:
                self._close(connection, f"idle for more than connections.max.idle.ms ({self.idle_ms} ms)")

    def _close(self, connection: Connection, reason: str | None) -> None:
        if connection.closed:
            return
        connection.closed = True
        if reason is not None:
            logger.warning("closing the connection from %s: %s", connection.peer, reason)
        self._connections.pop(connection.connection_id, None)
        if connection.events:
            try:
                self._selector.unregister(connection.sock)
            except (KeyError, ValueError):
                pass
            connection.events = 0
        try:
            connection.sock.close()
        except OSError:
            pass


def parse_host_port(text: str, default_port: int = 9092) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6; a bare HOST takes ``default_port``) as (host, port);
    ``ValueError`` naming the text when it is not one."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    value = text.split("://", 1)[1] if "://" in text else text
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        host, port_text = value.split(":")
    elif ":" in value:
        raise ValueError(f"expected HOST:PORT (an IPv6 host in brackets), got {text!r}")
    else:
        host, port_text = value, ""
    try:
        port = int(port_text) if port_text else default_port
    except ValueError:
        raise ValueError(f"expected HOST:PORT with a numeric port, got {text!r}") from None
    if not host or not 0 <= port <= 65535:
        raise ValueError(f"expected HOST:PORT with a port in 0..65535, got {text!r}")
    return host, port


__all__ = ["Connection", "RequestContext", "SocketServer", "parse_host_port"]
