"""The network layer: Kafka's SocketServer and RequestChannel, in one selector thread and a pool of
request handler threads.

This module owns the sockets. One thread (``logstore-network``) accepts connections on each
listener, does the TLS handshake of those that speak TLS (without blocking: a handshake waits in the
selector like a read), reads size-prefixed frames, and writes responses; ``io_threads`` handler threads run the request handlers.
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
timeout, a reset, a failed TLS handshake) closes that connection with one log line and touches
nothing else. A response may be held back (``RequestContext.respond(delay_ms=)``: a failed
authentication) on a timer of this thread, and a connection may be closed once its last answer is
sent (``then_close``). TLS sockets have no ``sendmsg``: their answers are joined and sent in
64 KiB pieces, and what OpenSSL decrypted beyond a read is taken before the selector is asked again.

What it counts (read by the metrics endpoint, never reset): connections ``accepted``, ``refused``
at ``max.connections`` and ``evicted`` for holding the request budget, ``accept_pauses``,
``held_bytes_peak``, and per API the requests answered and their total times (``request_metrics``).

A listener whose host is an absolute path is a Unix domain socket (``is_unix_socket_path``): the
file is made 0600 before it listens and removed when the listeners close, so only its owner's
processes connect (what ``logstore.client.store_host`` shares a store's local readers through).
"""

from __future__ import annotations

import collections
import errno
import heapq
import logging
import os
import queue
import selectors
import socket
import ssl
import threading
from typing import Callable

from ...clock import SYSTEM_CLOCK, Clock
from ..protocol.codec import ProtocolError, decode_request_header
from .request_context import _NO_RESPONSE, RAW_TOKEN_API_KEY, Connection, RequestContext
from .request_metrics import RequestMetrics

def is_unix_socket_path(host: str) -> bool:
    """Whether a listener's or a broker's host is a Unix domain socket's path (absolute), not a
    host name: the server binds it, clients of this package connect to it (port 0)."""
    return isinstance(host, str) and host.startswith("/")

logger = logging.getLogger(__name__)

_SIZE = 4
_RECV_BYTES = 1 << 16
_GROW_BYTES = 8 << 20  # the most a large frame's buffer grows by at once (see _read_once)
# While queued.max.request.bytes is spent (see _relieve): how long before the biggest holders are
# closed, and how fast the one frame let through must come.
_STALL_MS = 500
_LET_THROUGH_BYTES_PER_S = 64 << 10
LARGE_FRAME_BYTES = 1 << 16
"""Frames this large are received into a buffer of their own (see the module docstring)."""
_MAX_IOV = 512  # buffers per sendmsg (the kernel's IOV_MAX is 1024)
_SELECT_TIMEOUT_S = 0.5
MAX_PARKED_PER_CONNECTION = 64  # requests handled but not yet answered, per connection
_TLS_SEND_BYTES = 1 << 16  # what one SSLSocket.send takes (it has no sendmsg: buffers are joined)
# accept() failing for want of descriptors or memory: the process is short, not the client at fault
_SHORTAGE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_BACKOFF_MS = (50, 1000)  # first and longest pause of accepting after such a failure
_PAUSE_LOG_INTERVAL_MS = 60000  # a pause of accepting is logged at most this often (a flood is one line)


class SocketServer:
    """Accepts connections on ``host:port`` (0 picks a free port), or on each of ``listeners``
    (objects with ``host``, ``port`` and ``ssl_context``: ``listeners.Listener``), and feeds their
    requests to ``dispatch`` on ``io_threads`` handler threads. A listener with an ``ssl_context``
    speaks TLS: its connections do the handshake first, without blocking the network thread.
    ``new_session(listener, peer)``, when given, makes each connection's session (who the client
    is; ``RequestContext.session``). Limits use Kafka's names: ``max_request_bytes``
    (``socket.request.max.bytes``), ``max_connections`` (``max.connections``), ``idle_ms``
    (``connections.max.idle.ms``), ``queued_max_request_bytes`` (``queued.max.request.bytes``: request
    bytes held at once, over all connections) and ``max_unauthenticated_request_bytes``
    (``sasl.server.max.receive.size``: the largest frame of a connection whose session is not
    authenticated yet); ``max_unsent_response_bytes`` (ours) is how many answered bytes a connection
    may leave unread before its next request waits. ``on_fatal(exc)`` is called when a thread of
    the server dies (the owner stops the process: a server without its network thread answers
    nothing and must not hold the store)."""

    def __init__(self, host: str | None, port: int | None, dispatch: Callable[[RequestContext], None], *,
                 max_request_bytes: int = 104857600, max_connections: int = 2**31 - 1, idle_ms: int = 600000,
                 io_threads: int = 2, clock: Clock | None = None, name: str = "logstore", listeners=None,
                 new_session: Callable | None = None, queued_max_request_bytes: int = 104857600,
                 max_unauthenticated_request_bytes: int = 524288, max_unsent_response_bytes: int = 1 << 20,
                 on_fatal: Callable[[BaseException], None] | None = None) -> None:
        self.dispatch = dispatch
        self.max_request_bytes = max_request_bytes
        self.max_connections = max_connections
        self.idle_ms = idle_ms
        self.queued_max_request_bytes = queued_max_request_bytes
        # Frames of LARGE_FRAME_BYTES or more may fill the budget only up to this: the rest is kept
        # for small requests (metadata, heartbeats, commits, fetches), so big frames half received
        # (a client that stalls, an attacker) cannot stop the small traffic of everyone else.
        self._large_limit = queued_max_request_bytes - max(queued_max_request_bytes // 8, 2 * _RECV_BYTES)
        self.max_unauthenticated_request_bytes = max_unauthenticated_request_bytes
        self.max_unsent_response_bytes = max_unsent_response_bytes
        self._on_fatal = on_fatal
        self._clock = clock or SYSTEM_CLOCK
        self._name = name
        self._new_session = new_session
        self._listeners: dict[socket.socket, object] = {}  # listening socket -> its listener (None: plain)
        self._unix_paths: list[str] = []  # the Unix socket files bound: removed when the listeners close
        self.ports: list[int] = []
        try:
            for listener in (listeners if listeners is not None else [None]):
                bind_host, bind_port = (host, port) if listener is None else (listener.host, listener.port)
                self.ports.append(self._bind(bind_host, bind_port, listener))
        except OSError:
            for sock in self._listeners:
                sock.close()
            self._remove_unix_paths()
            raise
        self.host = host if listeners is None else listeners[0].host
        self.port: int = self.ports[0]
        self._delayed: list = []  # heap of (due_ms, sequence, context, chunks): answers held back
        self._delayed_lock = threading.Lock()
        self._delayed_sequence = 0
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
        self.request_metrics = RequestMetrics()  # per-API counts and total times (the network thread's)
        # queued.max.request.bytes: the request bytes all connections hold, the connections not read
        # while it is spent, and the one let through meanwhile so that a frame can always complete
        self.held_bytes = 0
        self.held_bytes_peak = 0
        self._starved: list[Connection] = []
        self._privileged: Connection | None = None
        self._privileged_ms = 0  # when it was let through, and what it had received then
        self._privileged_received = 0
        self.evicted = 0  # connections closed for holding the budget with a stalled frame
        self._spent_since_ms: float | None = None  # since when queued.max.request.bytes is spent
        self._progress_ms = 0  # when a frame was last handed to a handler
        # accepting paused: at max.connections (until one closes) or short of descriptors (a while)
        self._listening: set[socket.socket] = set()  # the listening sockets the selector watches
        self._accept_resume_ms: float | None = None
        self._accept_backoff_ms = 0
        self.accept_pauses = 0
        self._accept_logged_ms: float | None = None
        self._accept_pauses_logged = 0
        self.failure: BaseException | None = None  # what killed a thread of the server
        self._threads: list[threading.Thread] = []
        self._io_threads = io_threads
        self._started = False

    def _bind(self, host: str, port: int, listener) -> int:
        """Listen on ``host``:``port``, or on a Unix domain socket when ``host`` is a path (which must
        not exist: only its owner may connect, the file made 0600 before it listens, so it needs no
        authentication; its port is 0)."""
        unix = is_unix_socket_path(host)
        family = socket.AF_UNIX if unix else socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            if unix:
                sock.bind(host)
                self._unix_paths.append(host)
                # Before listen() nobody can connect; the directory should be private too (not
                # umask: it is the whole process's, and the store's threads create files meanwhile).
                os.chmod(host, 0o600)
            else:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._listeners[sock] = listener
        return 0 if unix else sock.getsockname()[1]

    # --- life cycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the network thread and the handler threads."""
        if self._started:
            return
        self._started = True
        self._watch_listeners(True)
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
        for sock in (*self._listeners, self._wake_r, self._wake_w):
            try:
                sock.close()
            except OSError:
                pass

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    @property
    def accepting(self) -> bool:
        """Started, listening and not stopping (nor stopped by a dead thread): new clients are
        accepted (or wait in the backlog while ``max.connections`` is reached)."""
        return self._started and self._accepting and not self._stopping and self.failure is None

    def connections_by_listener(self) -> dict[str, int]:
        """The connections open now per listener name (its protocol; ``PLAINTEXT`` for the plain
        address of a server without listeners)."""
        counts: dict[str, int] = {}
        for connection in list(self._connections.values()):
            name = getattr(connection.listener, "protocol", "PLAINTEXT")
            counts[name] = counts.get(name, 0) + 1
        return counts

    def busy_connections(self) -> int:
        """Connections with a request in flight (being handled, or parked in a purgatory)."""
        return sum(1 for connection in list(self._connections.values()) if connection.busy or connection.slots)

    # --- called from any thread --------------------------------------------------------------------

    def complete(self, context: RequestContext, chunks, close_reason: str | None) -> None:
        """A request finished: send ``chunks`` (``_NO_RESPONSE``: none) in its turn, or close."""
        self._completions.append((context, chunks, close_reason))
        self._wake()

    def complete_later(self, context: RequestContext, chunks, delay_ms: int) -> None:
        """As ``complete``, ``delay_ms`` from now (the network thread keeps the timer: no thread waits)."""
        with self._delayed_lock:
            self._delayed_sequence += 1
            heapq.heappush(self._delayed, (self._clock.monotonic_ms() + delay_ms, self._delayed_sequence, context,
                                           chunks))
        self._wake()

    def _release_delayed(self) -> float:
        """Move the answers whose time came to the completions; the seconds until the next one."""
        if not self._delayed:
            return _SELECT_TIMEOUT_S
        # Stopping: held answers (failed authentications) go now, so they do not hold up the drain
        now_ms = self._clock.monotonic_ms() if self._accepting else float("inf")
        with self._delayed_lock:
            while self._delayed and self._delayed[0][0] <= now_ms:
                _due, _sequence, context, chunks = heapq.heappop(self._delayed)
                self._completions.append((context, chunks, None))
            if not self._delayed:
                return _SELECT_TIMEOUT_S
            return min(_SELECT_TIMEOUT_S, max(0.0, (self._delayed[0][0] - now_ms) / 1000))

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (the loop will wake anyway) or closed (stopping)

    # --- the handler threads -----------------------------------------------------------------------

    def _handle_requests(self) -> None:
        try:
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
        except BaseException as exc:  # a dead handler thread: fewer threads, then none, serve nothing
            self._fatal(exc)
            raise

    def _fatal(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        if self._stopping:
            return
        logger.critical("%s died (%s: %s): the server stops", threading.current_thread().name,
                        type(exc).__name__, exc, exc_info=exc)
        if self._on_fatal is not None:
            self._on_fatal(exc)

    # --- the network thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            timeout_s = _SELECT_TIMEOUT_S
            while not self._stopping:
                events = self._selector.select(timeout_s)
                for key, mask in events:
                    target = key.fileobj
                    if target in self._listeners:
                        self._accept(target)
                    elif target is self._wake_r:
                        self._drain_wakeups()
                    else:
                        connection = key.data
                        if connection.handshaking:
                            self._handshake(connection)
                            continue
                        if mask & selectors.EVENT_WRITE:
                            self._write(connection)
                        if mask & selectors.EVENT_READ and not connection.closed:
                            self._read(connection)
                timeout_s = self._release_delayed()
                self._finish_completions()
                if not self._accepting:
                    self._watch_listeners(False)
                    for sock in [sock for sock in self._listeners if sock.fileno() >= 0]:
                        sock.close()
                    self._remove_unix_paths()
                else:
                    timeout_s = min(timeout_s, self._maybe_resume_accepting())
                if self._starved:
                    self._relieve()
                self._close_idle()
        except BaseException as exc:
            self._fatal(exc)
        finally:
            for connection in list(self._connections.values()):
                self._close(connection, None)
            self._selector.close()

    def _remove_unix_paths(self) -> None:
        for path in self._unix_paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                logger.warning("could not remove the socket file %s: %s", path, exc)
        self._unix_paths.clear()

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _watch_listeners(self, watch: bool) -> None:
        for sock in self._listeners:
            if watch and sock not in self._listening and sock.fileno() >= 0:
                self._selector.register(sock, selectors.EVENT_READ, None)
                self._listening.add(sock)
            elif not watch and sock in self._listening:
                self._selector.unregister(sock)
                self._listening.discard(sock)

    def _pause_accepting(self, why: str, resume_ms: float | None) -> None:
        """Stop watching the listeners: new clients wait in the kernel's backlog (as Kafka's acceptor
        waits for a connection slot) instead of being accepted and dropped in a loop. Logged once
        per episode, not per attempt."""
        if self._listening:
            self._watch_listeners(False)
            self.accept_pauses += 1
            now_ms = self._clock.monotonic_ms()
            if self._accept_logged_ms is None or now_ms - self._accept_logged_ms >= _PAUSE_LOG_INTERVAL_MS:
                earlier = self.accept_pauses - self._accept_pauses_logged - 1
                logger.warning("not accepting connections: %s%s", why,
                               f" ({earlier} more pauses since the last line)" if earlier > 0 else "")
                self._accept_logged_ms, self._accept_pauses_logged = now_ms, self.accept_pauses
        self._accept_resume_ms = resume_ms

    def _maybe_resume_accepting(self) -> float:
        """Watch the listeners again when the pause is over; the seconds until it may be."""
        if self._listening or not self._started:
            return _SELECT_TIMEOUT_S
        resume_ms = self._accept_resume_ms
        if resume_ms is None:  # paused at max.connections: until one closes
            if len(self._connections) < self.max_connections:
                self._watch_listeners(True)
            return _SELECT_TIMEOUT_S
        now_ms = self._clock.monotonic_ms()
        if now_ms < resume_ms:
            return min(_SELECT_TIMEOUT_S, (resume_ms - now_ms) / 1000)
        self._accept_resume_ms = None
        self._watch_listeners(True)
        return _SELECT_TIMEOUT_S

    def _accept(self, listening: socket.socket) -> None:
        listener = self._listeners[listening]
        while True:
            if len(self._connections) >= self.max_connections:
                self.refused += 1
                self._pause_accepting(f"max.connections ({self.max_connections}) reached; new clients wait until "
                                      "a connection closes", None)
                return
            try:
                sock, address = listening.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _SHORTAGE_ERRNOS:
                    # Out of descriptors (or kernel memory): the pending client stays in the backlog.
                    # Retrying at once would spin; the store's own files need the descriptors more.
                    backoff_ms = min(_ACCEPT_BACKOFF_MS[1], max(_ACCEPT_BACKOFF_MS[0], self._accept_backoff_ms * 2))
                    self._accept_backoff_ms = backoff_ms
                    self._pause_accepting(f"{exc.strerror or exc} (accepting again in {backoff_ms} ms, backing "
                                          f"off to {_ACCEPT_BACKOFF_MS[1]} ms; lower max.connections or raise "
                                          "the descriptor limit, ulimit -n)", self._clock.monotonic_ms() + backoff_ms)
                    return
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue  # that client gave up (or a firewall refused it) before we took it
                logger.warning("accepting a connection failed: %s", exc)
                return
            self._accept_backoff_ms = 0
            sock.setblocking(False)
            if sock.family == socket.AF_UNIX:
                peer = f"localhost:{self._next_id + 1}"  # no address: the connection's number tells them apart
            else:
                peer = f"{address[0]}:{address[1]}"
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            context = getattr(listener, "ssl_context", None)
            if context is not None:
                try:
                    sock = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except (ssl.SSLError, OSError) as exc:
                    logger.warning("refusing %s: TLS setup failed: %s", peer, exc)
                    sock.close()
                    continue
            self._next_id += 1
            session = self._new_session(listener, peer) if self._new_session is not None else None
            connection = Connection(self._next_id, sock, peer, self._clock.monotonic_ms(), listener, session)
            self._connections[connection.connection_id] = connection
            self._selector.register(sock, selectors.EVENT_READ, connection)
            self.accepted += 1
            if connection.handshaking:
                self._handshake(connection)  # the client's hello may be here already

    def _handshake(self, connection: Connection) -> None:
        """Go on with a TLS handshake; when it is done, tell the session what certificate the client
        showed and start reading frames."""
        try:
            connection.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._set_events(connection, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._set_events(connection, selectors.EVENT_WRITE)
            return
        except (ssl.SSLError, OSError) as exc:
            # A client without a trusted certificate, a plaintext client on a TLS port, a scanner.
            reason = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or exc
            self._close(connection, f"TLS handshake failed: {reason}")
            return
        connection.handshaking = False
        connection.last_active_ms = self._clock.monotonic_ms()
        if connection.session is not None:
            connection.session.tls_established(connection.sock.getpeercert())
        self._update_events(connection)
        if connection.sock.pending():
            self._read(connection)

    def _read(self, connection: Connection) -> None:
        try:
            self._read_once(connection)
            # TLS: what the SSL object decrypted beyond this read is invisible to the selector; take it now.
            while connection.tls and not connection.closed and not connection.eof and connection.sock.pending():
                self._read_once(connection)
        except MemoryError:
            # The process is at its memory limit (RLIMIT_AS, a container's cap): this connection's
            # frame does not fit now. Dropping it frees its buffers; the server goes on.
            self._close(connection, "out of memory receiving its request")

    def _read_once(self, connection: Connection) -> None:
        privileged = self._privileged is connection
        if not privileged and not self._may_read(connection):
            self._update_events(connection)  # spent by the connections read before it in this round
            return
        large = connection.large
        try:
            if large is not None:
                if connection.filled == len(large):
                    # The buffer grows with what arrives (doubling, by at most _GROW_BYTES, up to the
                    # declared size, and within what is left of queued.max.request.bytes), so a
                    # client that declares a big frame and sends little costs little.
                    grow = min(connection.expected - len(large), len(large), _GROW_BYTES)
                    if not privileged:
                        grow = min(grow, max(_RECV_BYTES, self._large_limit - self.held_bytes))
                    large.extend(bytes(grow))
                    self._hold(connection, grow)
                with memoryview(large) as view:
                    received = connection.sock.recv_into(view[connection.filled:])
                data = None
            else:
                data = connection.sock.recv(_RECV_BYTES)
                received = len(data)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except ssl.SSLEOFError:
            received = 0  # the client closed without TLS's close_notify: an end like any other
        except ConnectionResetError:
            # A client that closed with answers still unread (a consumer closed during its long poll):
            # routine, so no warning (Kafka notes such a disconnection at debug level only).
            logger.debug("the connection from %s was reset by the client", connection.peer)
            self._close(connection, None)
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
        connection.last_active_ms = connection.received_ms = self._clock.monotonic_ms()
        connection.received += received
        if large is not None:
            connection.filled += received
            if connection.filled == connection.expected:
                connection.ready, connection.large = large, None
                if self._privileged is connection:
                    self._privileged = None
        else:
            connection.inbound += data
            self._hold(connection, received)
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
        if size < 0 or size > self._frame_limit(connection):
            connection.ready = size
            return
        end = _SIZE + size
        if len(inbound) >= end:
            with memoryview(inbound) as view:
                connection.ready = bytes(view[_SIZE:end])
            del inbound[:end]
            self._hold(connection, -_SIZE)
            if self._privileged is connection:
                self._privileged = None
        elif size >= LARGE_FRAME_BYTES:
            arrived = len(inbound) - _SIZE
            # Not the declared size at once: what arrived, doubled (see _read_once).
            large = bytearray(min(size, max(LARGE_FRAME_BYTES, 2 * arrived)))
            with memoryview(inbound) as view:
                large[:arrived] = view[_SIZE:]
            connection.large, connection.filled, connection.expected = large, arrived, size
            self._hold(connection, len(large) - len(inbound))
            inbound.clear()

    def _frame_limit(self, connection: Connection) -> int:
        """The largest frame ``connection`` may send now: socket.request.max.bytes, and before its
        session is authenticated sasl.server.max.receive.size (Kafka's 512 KiB), so that a client
        without credentials cannot make the server hold big buffers."""
        session = connection.session
        if session is not None and not session.authenticated:
            return min(self.max_request_bytes, self.max_unauthenticated_request_bytes)
        return self.max_request_bytes

    # --- queued.max.request.bytes ------------------------------------------------------------------

    def _may_read(self, connection: Connection) -> bool:
        """Whether queued.max.request.bytes leaves room to read ``connection`` (see _large_limit)."""
        privileged = self._privileged
        if privileged is connection:
            return True
        if connection.large is not None:
            return self.held_bytes < self._large_limit
        # The frame let through may take the server past the budget (by one frame, see _relieve):
        # small requests are not held back for it.
        return self.held_bytes - (privileged.held if privileged is not None else 0) < self.queued_max_request_bytes

    def _hold(self, connection: Connection, delta: int) -> None:
        connection.held += delta
        self.held_bytes += delta
        if self.held_bytes > self.held_bytes_peak:
            self.held_bytes_peak = self.held_bytes
        if delta < 0 and self._starved and self.held_bytes < self.queued_max_request_bytes:
            self._feed_starved()

    def _feed_starved(self) -> None:
        """The budget is no longer spent: read every connection that waited for it."""
        starved, self._starved = self._starved, []
        for connection in starved:
            connection.starved = False
            self._update_events(connection)

    def _relieve(self) -> None:
        """While the budget for large frames (queued.max.request.bytes less the share kept for small
        requests) is spent, make sure it is spent only for a while:
        - when no handler has a frame (none will be freed soon), one connection with a frame half
          received, the one that sent last, is let through (a frame larger than the budget can
          complete; the server never waits on itself), as long as it sends at least
          ``_LET_THROUGH_BYTES_PER_S`` in every ``_STALL_MS`` (a slowloris is closed);
        - once it has been spent for ``_STALL_MS`` with no frame completing, the
          connections holding the most of it in frames no handler has (half received, or waiting
          for a client that does not read its answers) are closed until it is not: whoever holds
          the server's request memory and does not let it go pays, not every other client. A frame
          let through that comes at its rate is progress too: while it comes, the budget is not
          stuck, and the connections that hold the rest wait for it (the server stopped reading
          them; they are not the ones that stall). A slow client's frame may take more than
          ``_STALL_MS``; a loaded host's, too.
        Memory stays under the budget plus one frame."""
        budget, limit = self.queued_max_request_bytes, self._large_limit
        if self.held_bytes < limit:
            self._spent_since_ms = None
            self._feed_starved()
            return
        if self._privileged is not None and any(connection.large is None for connection in self._starved):
            self._feed_starved()  # small requests may be read beside the frame let through (_may_read)
        now_ms = self._clock.monotonic_ms()
        if self._spent_since_ms is None:
            self._spent_since_ms = now_ms
        elif self._spent_since_ms < self._progress_ms:
            self._spent_since_ms = self._progress_ms  # a frame completed: spent, but not stuck
        privileged = self._privileged
        if privileged is not None:
            # Judged over windows of _STALL_MS: a burst then silence (or a trickle) does not pass.
            elapsed_ms = now_ms - self._privileged_ms
            if elapsed_ms >= _STALL_MS:
                if privileged.received - self._privileged_received < elapsed_ms * _LET_THROUGH_BYTES_PER_S / 1000:
                    self.evicted += 1
                    self._close(privileged, f"its request came too slowly while queued.max.request.bytes ({budget}) "
                                            "was spent")
                else:
                    self._privileged_ms, self._privileged_received = now_ms, privileged.received
                    self._spent_since_ms = now_ms  # its frame comes: the budget is spent, not stuck
        if now_ms - self._spent_since_ms >= _STALL_MS:
            holders = sorted((connection for connection in self._connections.values()
                              if connection is not self._privileged and connection.held > connection.handling),
                             key=lambda connection: connection.held - connection.handling, reverse=True)
            for connection in holders:
                if self.held_bytes < limit:
                    break
                self.evicted += 1
                self._close(connection, f"it held {connection.held - connection.handling} request bytes while "
                                        f"queued.max.request.bytes ({budget}) was spent for {_STALL_MS} ms")
            self._spent_since_ms = now_ms
            if self.held_bytes < limit:
                return
        if self._privileged is None and not any(connection.handling for connection in self._connections.values()):
            # (not while a handler has a frame: it frees it soon, and one frame past the budget at a time)
            candidates = [connection for connection in self._starved
                          if not connection.closed and (connection.large is not None or connection.inbound)]
            if candidates:
                chosen = max(candidates, key=lambda connection: connection.received_ms)
                self._privileged, self._privileged_ms, self._privileged_received = chosen, now_ms, chosen.received
                self._spent_since_ms = now_ms  # the holders wait for its first window (see above)
                chosen.starved = False
                self._starved.remove(chosen)
                self._update_events(chosen)
    def _next_request(self, connection: Connection) -> None:
        """Hand the next complete frame of an unmuted connection to the handlers. A connection
        whose client leaves answers unread (more than ``max_unsent_response_bytes``), or that waits
        for an exclusive request's answer, is not handed on: its frame waits, so it is not read
        either, and the client waits in TCP flow control."""
        if connection.busy or connection.closed or len(connection.slots) >= MAX_PARKED_PER_CONNECTION:
            return
        if connection.unsent > self.max_unsent_response_bytes:
            return
        if connection.slots and any(context.exclusive for context in connection.slots):
            return
        if connection.closing:
            if not connection.slots and not connection.outbound:
                self._close(connection, None)
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
            limit = self._frame_limit(connection)
            setting = ("socket.request.max.bytes" if limit == self.max_request_bytes
                       else "sasl.server.max.receive.size, before authentication")
            self._close(connection, f"a frame of {frame} bytes ({setting} is {limit})")
            return
        self._cut_frame(connection)  # the next one, if it is here already: reading waits for its turn
        self._update_events(connection)
        frame = memoryview(frame)
        if connection.session is not None and connection.session.raw_tokens:
            header, body_offset = {"api_key": RAW_TOKEN_API_KEY, "api_version": 0, "correlation_id": 0}, 0
        else:
            try:
                header, body_offset = decode_request_header(frame)
            except ProtocolError as exc:
                self._close(connection, f"a malformed request header: {exc}")
                return
        connection.busy = True
        self._progress_ms = self._clock.monotonic_ms()  # a frame completed (see _relieve)
        connection.handling += len(frame)
        connection.requests += 1
        context = RequestContext(self, connection, header, frame, body_offset, self._clock.monotonic_ms())
        connection.slots.append(context)
        self._requests.put(context)

    def _finish_completions(self) -> None:
        completions = self._completions
        now_ms = None
        while completions:
            context, chunks, close_reason = completions.popleft()
            connection = context.connection
            if chunks is not None or close_reason is not None:  # answered (or closed): its total time
                if now_ms is None:
                    now_ms = self._clock.monotonic_ms()
                if context.api_key >= 0:  # not a bare SASL token (no request header, no API)
                    self.request_metrics.record(context.api_key, now_ms - context.received_ms)
            if connection.closed:
                continue
            if close_reason is not None:
                self._close(connection, close_reason)
                continue
            if chunks is None:  # the handler returned: its frame's bytes are no longer held
                connection.busy = False
                connection.handling -= len(context.frame)
                self._hold(connection, -len(context.frame))
            else:
                context.result = chunks
                if chunks is not _NO_RESPONSE:
                    connection.unsent += sum(len(chunk) for chunk in chunks)
                slots = connection.slots
                while slots and slots[0].result is not None:  # answers leave in request order
                    done = slots.popleft().result
                    if done is not _NO_RESPONSE:
                        # an empty chunk would never leave (a send of 0 bytes takes nothing): the
                        # write loop would spin on it
                        connection.outbound.extend(chunk for chunk in done if len(chunk))
                if connection.outbound:
                    self._write(connection)
            self._next_request(connection)

    def _write(self, connection: Connection) -> None:
        outbound = connection.outbound
        while outbound and not connection.closed:
            try:
                if connection.tls:
                    sent = self._send_tls(connection)
                else:
                    sent = connection.sock.sendmsg([outbound[index] for index in range(min(len(outbound), _MAX_IOV))])
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                break
            except OSError as exc:
                if connection.eof:
                    connection.unsent -= sum(len(chunk) for chunk in outbound)
                    outbound.clear()  # the client is gone: drop its answers, still handle what it sent
                    connection.tls_unsent = None
                    break
                self._close(connection, f"write failed: {exc}")
                return
            connection.unsent -= sent
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
            if connection.closing and not outbound and not connection.slots:
                self._close(connection, None)
            elif (connection.eof and not outbound and not connection.busy and not connection.slots
                    and connection.ready is None and connection.large is None and len(connection.inbound) < _SIZE):
                self._close(connection, None)
            elif connection.ready is not None and connection.unsent <= self.max_unsent_response_bytes:
                self._next_request(connection)  # it waited for its client to read

    @staticmethod
    def _send_tls(connection: Connection) -> int:
        """One ``SSLSocket.send`` of the head of ``outbound`` (joined: TLS has no sendmsg); the bytes
        it took. A send that must be retried is retried with the same bytes, as OpenSSL requires."""
        data = connection.tls_unsent
        if data is None:
            outbound, parts, size = connection.outbound, [], 0
            for chunk in outbound:
                parts.append(chunk)
                size += len(chunk)
                if size >= _TLS_SEND_BYTES:
                    break
            data = parts[0] if len(parts) == 1 else b"".join(parts)
        connection.tls_unsent = data
        sent = connection.sock.send(data)
        connection.tls_unsent = None if sent >= len(data) else memoryview(data)[sent:]
        return sent

    def _update_events(self, connection: Connection) -> None:
        """Watch for reads until the client's EOF while no complete frame waits for its turn, and for
        writes while responses wait to be sent."""
        if connection.closed:
            return
        reading = not connection.eof and connection.ready is None and not connection.closing
        if reading and not self._may_read(connection):
            reading = False  # queued.max.request.bytes is spent: read again when it is not (_hold, _relieve)
            if not connection.starved:
                connection.starved = True
                self._starved.append(connection)
        events = (selectors.EVENT_READ if reading else 0) | (selectors.EVENT_WRITE if connection.outbound else 0)
        self._set_events(connection, events)

    def _set_events(self, connection: Connection, events: int) -> None:
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
        connection.large = connection.ready = None
        connection.inbound = bytearray()
        connection.outbound.clear()
        connection.unsent = 0
        if self._privileged is connection:
            self._privileged = None
        if connection.starved:
            connection.starved = False
            self._starved.remove(connection)
        self._hold(connection, -connection.held)
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


__all__ = ["Connection", "RAW_TOKEN_API_KEY", "RequestContext", "SocketServer", "is_unix_socket_path"]
