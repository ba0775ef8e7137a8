"""The server's metrics in Prometheus' text format (version 0.0.4), and its health and readiness
probes, on an HTTP listener of their own (``logstore serve --metrics-listen``).

What it owns:
- ``parse_metrics_address``: ``PORT``, ``:PORT``, ``HOST:PORT`` or ``[V6]:PORT`` (no host:
  127.0.0.1, loopback);
- ``BrokerMetrics``: renders the metrics at scrape time from the objects that keep them
  (``MetricSources``): the per-topic counts of the handlers, the per-API request times of the
  network thread, the network's counters, the purgatories, the logs, the group coordinator, SASL,
  and the process itself (``process_metrics``, from ``/proc/self`` where there is one). Nothing is
  computed between scrapes: a scrape walks the partitions and the groups once;
- ``MetricsServer``: the HTTP listener (the standard library's ``ThreadingHTTPServer``), bounded so a
  hostile client costs little: at most ``max_handlers`` requests at once (more are closed unread),
  a request (line and headers) of at most ``max_request_bytes`` read within ``timeout_ms`` (else
  431 or 408 and the connection closed), one request per connection (HTTP/1.0), no body read.
  Paths: ``/metrics``, ``/healthz`` (200 while the process answers HTTP), ``/readyz`` (200 when the
  owner says it is ready, else 503 with the one-line reason), anything else 404.

The names follow Prometheus' conventions (``_total`` counters, base units: bytes, seconds) under
the prefix ``logstore_``; each says which of Kafka's MBeans it stands for (``KAFKA_NAMES``; README
"Metrics and health probes").

May import: ``network`` (the request times' buckets), ``protocol`` (API names), ``security`` (what
loopback is), the layers below the server and the standard library; the handlers' and the group
coordinator's objects are read, never imported at run time.
"""

from __future__ import annotations

import http.server
import logging
import os
import socket
import socketserver
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import LogStoreError
from .network.request_metrics import BUCKETS_MS
from .protocol.messages import API_NAMES
from .security.listeners import is_loopback

if TYPE_CHECKING:
    from ..group.coordinator import GroupCoordinator
    from ..manager.log_manager import LogManager
    from .handlers.topic_metrics import BrokerTopicMetrics
    from .network.socket_server import SocketServer
    from .security.sasl import SaslAuthenticator

logger = logging.getLogger(__name__)

DEFAULT_METRICS_HOST = "127.0.0.1"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_HANDLERS = 4
MAX_REQUEST_BYTES = 8192
TIMEOUT_MS = 5000
GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")

KAFKA_NAMES = {
    "logstore_topic_bytes_in_total": "kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=*",
    "logstore_topic_messages_in_total": "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=*",
    "logstore_topic_bytes_out_total": "kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec,topic=*",
    "logstore_requests_total": "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*",
    "logstore_request_total_time_seconds": "kafka.network:type=RequestMetrics,name=TotalTimeMs,request=*",
    "logstore_purgatory_size": "kafka.server:type=DelayedOperationPurgatory,name=PurgatorySize,delayedOperation=*",
    "logstore_purgatory_delayed_operations":
        "kafka.server:type=DelayedOperationPurgatory,name=NumDelayedOperations,delayedOperation=*",
    "logstore_partitions": "kafka.server:type=ReplicaManager,name=PartitionCount",
    "logstore_log_size_bytes": "kafka.log:type=Log,name=Size,topic=*,partition=*",
    "logstore_log_start_offset": "kafka.log:type=Log,name=LogStartOffset,topic=*,partition=*",
    "logstore_log_end_offset": "kafka.log:type=Log,name=LogEndOffset,topic=*,partition=*",
    "logstore_log_segments": "kafka.log:type=Log,name=NumLogSegments,topic=*,partition=*",
    "logstore_offline_log_dirs": "kafka.log:type=LogManager,name=OfflineLogDirectoryCount",
    "logstore_groups": "kafka.server:type=group-coordinator-metrics,name=classic-group-count,state=*",
    "logstore_group_members": None,
    "logstore_group_rebalances_total": "kafka.server:type=group-coordinator-metrics,name=group-rebalance-count",
    "logstore_authentications_failed_total":
        "kafka.server:type=socket-server-metrics,name=failed-authentication-total (summed over listeners)",
    "logstore_authentications_succeeded_total":
        "kafka.server:type=socket-server-metrics,name=successful-authentication-total (summed over listeners)",
    "logstore_authentications_refused_total": None,
    "logstore_connections": "kafka.server:type=socket-server-metrics,name=connection-count,listener=*",
    "logstore_connections_accepted_total":
        "kafka.server:type=socket-server-metrics,name=connection-creation-total (summed over listeners)",
    "logstore_connections_refused_total": None,
    "logstore_connections_evicted_total": None,
    "logstore_accept_pauses_total": None,
    "logstore_request_queue_bytes": "kafka.network:type=SocketServer,name=MemoryPoolUsed",
    "logstore_request_queue_bytes_peak": None,
}
"""Each metric and the Kafka MBean it stands for (None: logstore's own)."""


def parse_metrics_address(text: str) -> tuple[str, int]:
    """``(host, port)`` of ``PORT``, ``:PORT``, ``HOST:PORT`` or ``[V6]:PORT`` (no host: 127.0.0.1).
    Raises ``ValueError`` naming the value."""
    if not isinstance(text, str):
        raise TypeError(f"the metrics address must be a str, got {text!r}")
    value = text.strip()
    if value.startswith("["):
        host, closing, rest = value[1:].partition("]")
        port = rest[1:] if closing and rest.startswith(":") else ""
    elif ":" in value:
        host, _, port = value.rpartition(":")
        if ":" in host:
            port = ""  # an IPv6 address takes brackets: [::1]:9100
    else:
        host, port = "", value
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"the metrics address {text!r} is not [HOST:]PORT (a port 0-65535, 0 picks a free one; "
                         "an IPv6 host in brackets)")
    return host or DEFAULT_METRICS_HOST, int(port)


def beyond_loopback_warning(host: str, port: int) -> str | None:
    """What is logged when the metrics listen beyond loopback (allowed: a Prometheus on another
    machine scrapes them), None on loopback: as for a PLAINTEXT listener, no authentication, no TLS."""
    if is_loopback(host):
        return None
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return (f"metrics and probes on {where} beyond loopback, with no authentication and no TLS: anyone who "
            "can reach it reads the topic names, the group counts and the traffic figures")


@dataclass
class MetricSources:
    """What the metrics are read from; a part not there yet (before start) is None and left out."""

    store: "LogManager | None" = None
    network: "SocketServer | None" = None
    topic_metrics: "BrokerTopicMetrics | None" = None
    coordinator: "GroupCoordinator | None" = None
    sasl: "SaslAuthenticator | None" = None


class Exposition:
    """Prometheus' text format 0.0.4 being written: a family's ``# HELP`` and ``# TYPE`` lines, then
    its samples."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> "Exposition":
        self.lines.append(f"# HELP {name} {help_text.replace(chr(92), chr(92) * 2).replace(chr(10), ' ')}")
        self.lines.append(f"# TYPE {name} {kind}")
        return self

    def sample(self, name: str, value: int | float, labels: dict[str, Any] | None = None) -> "Exposition":
        if labels:
            inside = ",".join(f'{key}="{_escape(str(label))}"' for key, label in labels.items())
            self.lines.append(f"{name}{{{inside}}} {_number(value)}")
        else:
            self.lines.append(f"{name} {_number(value)}")
        return self

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


class BrokerMetrics:
    """Renders the metrics of what ``sources()`` returns, at each scrape."""

    def __init__(self, sources: Callable[[], MetricSources]) -> None:
        self._sources = sources

    def render(self) -> str:
        sources = self._sources()
        out = Exposition()
        if sources.topic_metrics is not None:
            self._topics(out, sources.topic_metrics, sources.store)
        if sources.network is not None:
            self._requests(out, sources.network)
            self._network(out, sources.network)
        if sources.store is not None:
            self._purgatories(out, sources.store, sources.coordinator)
            self._logs(out, sources.store)
        if sources.coordinator is not None:
            self._groups(out, sources.coordinator)
        if sources.sasl is not None:
            sasl = sources.sasl
            out.family("logstore_authentications_failed_total", "counter",
                       "SASL authentications that failed (wrong password, unknown user)")
            out.sample("logstore_authentications_failed_total", sasl.failures)
            out.family("logstore_authentications_succeeded_total", "counter", "SASL authentications that succeeded")
            out.sample("logstore_authentications_succeeded_total", sasl.successes)
            out.family("logstore_authentications_refused_total", "counter",
                       "SASL attempts closed unchecked (too many pending from one host, or no check room)")
            out.sample("logstore_authentications_refused_total", sasl.refused)
        process_metrics(out)
        return out.text()

    @staticmethod
    def _topics(out: Exposition, topic_metrics: "BrokerTopicMetrics", store: "LogManager | None") -> None:
        if store is not None:
            try:
                topic_metrics.retain(set(store.topics()))
            except LogStoreError:
                pass  # the store is closing: the counts stay until the next scrape
        counts = sorted(topic_metrics.snapshot().items())
        for name, attribute, help_text in (
                ("logstore_topic_bytes_in_total", "bytes_in", "Record batch bytes produced to the topic"),
                ("logstore_topic_messages_in_total", "messages_in", "Records produced to the topic"),
                ("logstore_topic_bytes_out_total", "bytes_out", "Record batch bytes sent to fetchers of the topic")):
            out.family(name, "counter", help_text)
            for topic, topic_counts in counts:
                out.sample(name, getattr(topic_counts, attribute), {"topic": topic})

    @staticmethod
    def _requests(out: Exposition, network: "SocketServer") -> None:
        times = sorted((API_NAMES.get(api_key, str(api_key)), figures)
                       for api_key, figures in network.request_metrics.snapshot().items())
        out.family("logstore_requests_total", "counter", "Requests answered (or closed), per API")
        for name, figures in times:
            out.sample("logstore_requests_total", figures.count, {"request": name})
        histogram = "logstore_request_total_time_seconds"
        out.family(histogram, "histogram",
                   "Time from a request's arrival to its answer (queue, handling and purgatory), per API")
        for name, figures in times:
            cumulative = 0
            for bound_ms, count in zip(BUCKETS_MS, figures.buckets):
                cumulative += count
                out.sample(f"{histogram}_bucket", cumulative, {"request": name, "le": _number(bound_ms / 1000)})
            total = cumulative + figures.buckets[-1]
            out.sample(f"{histogram}_bucket", total, {"request": name, "le": "+Inf"})
            out.sample(f"{histogram}_sum", figures.sum_ms / 1000, {"request": name})
            out.sample(f"{histogram}_count", total, {"request": name})

    @staticmethod
    def _network(out: Exposition, network: "SocketServer") -> None:
        out.family("logstore_connections", "gauge", "Client connections open, per listener")
        for listener, count in sorted(network.connections_by_listener().items()):
            out.sample("logstore_connections", count, {"listener": listener})
        for name, value, help_text in (
                ("logstore_connections_accepted_total", network.accepted, "Client connections accepted"),
                ("logstore_connections_refused_total", network.refused,
                 "Times accepting paused at max.connections (clients wait in the listen backlog)"),
                ("logstore_connections_evicted_total", network.evicted,
                 "Connections closed for holding queued.max.request.bytes with a stalled frame"),
                ("logstore_accept_pauses_total", network.accept_pauses,
                 "Times accepting paused (max.connections reached, or out of descriptors)")):
            out.family(name, "counter", help_text)
            out.sample(name, value)
        out.family("logstore_request_queue_bytes", "gauge",
                   "Request bytes held now, of queued.max.request.bytes (all connections)")
        out.sample("logstore_request_queue_bytes", network.held_bytes)
        out.family("logstore_request_queue_bytes_peak", "gauge", "The most request bytes ever held at once")
        out.sample("logstore_request_queue_bytes_peak", network.held_bytes_peak)

    @staticmethod
    def _purgatories(out: Exposition, store: "LogManager", coordinator: "GroupCoordinator | None") -> None:
        sizes = dict(store.waits.purgatory_sizes())
        if coordinator is not None:
            for name, purgatory in (("Rebalance", coordinator.rebalance_purgatory),
                                    ("Heartbeat", coordinator.heartbeat_purgatory)):
                sizes[name] = (purgatory.watched(), purgatory.delayed())
        out.family("logstore_purgatory_size", "gauge",
                   "Requests watched in each purgatory (an operation counts per key it waits on)")
        for name, (watched, _delayed) in sorted(sizes.items()):
            out.sample("logstore_purgatory_size", watched, {"operation": name})
        out.family("logstore_purgatory_delayed_operations", "gauge", "Operations waiting in each purgatory's timer")
        for name, (_watched, delayed) in sorted(sizes.items()):
            out.sample("logstore_purgatory_delayed_operations", delayed, {"operation": name})

    @staticmethod
    def _logs(out: Exposition, store: "LogManager") -> None:
        rows = []
        for log in store.logs():
            try:
                rows.append(({"topic": log.topic, "partition": log.partition}, log.size_bytes, log.log_start_offset,
                             log.log_end_offset, len(log.segments)))
            except (LogStoreError, OSError):
                continue  # closed or deleted meanwhile
        out.family("logstore_partitions", "gauge", "Partitions open (internal topics included)")
        out.sample("logstore_partitions", len(rows))
        out.family("logstore_offline_log_dirs", "gauge", "Data dirs taken offline by a disk failure")
        out.sample("logstore_offline_log_dirs", len(store.offline_dirs))
        for index, (name, help_text) in enumerate((
                ("logstore_log_size_bytes", "Bytes of the partition's segments"),
                ("logstore_log_start_offset", "The partition's first offset"),
                ("logstore_log_end_offset", "The offset the partition's next record gets"),
                ("logstore_log_segments", "Segments of the partition")), start=1):
            out.family(name, "gauge", help_text)
            for row in rows:
                out.sample(name, row[index], row[0])

    @staticmethod
    def _groups(out: Exposition, coordinator: "GroupCoordinator") -> None:
        groups = dict.fromkeys(GROUP_STATES, 0)
        members = dict.fromkeys(GROUP_STATES, 0)
        with coordinator.lock:
            for group in coordinator.groups.values():
                groups[group.state] = groups.get(group.state, 0) + 1
                members[group.state] = members.get(group.state, 0) + len(group.members)
            rebalances = coordinator.rebalances
        out.family("logstore_groups", "gauge", "Consumer groups, per state")
        for state, count in groups.items():
            out.sample("logstore_groups", count, {"state": state})
        out.family("logstore_group_members", "gauge", "Members of the consumer groups in each state")
        for state, count in members.items():
            out.sample("logstore_group_members", count, {"state": state})
        out.family("logstore_group_rebalances_total", "counter", "Consumer group rebalances started")
        out.sample("logstore_group_rebalances_total", rebalances)


def process_metrics(out: Exposition, proc: str = "/proc/self") -> None:
    """Prometheus' standard ``process_`` metrics of this process: from ``proc`` (Linux), else what
    the standard library knows (CPU time and Python's threads)."""
    try:
        with open(f"{proc}/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        fields = None
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    if fields is not None and len(fields) > 22:
        # fields[0] is the state (field 3 of proc(5)): field N is fields[N - 3]
        cpu_s = (int(fields[11]) + int(fields[12])) / ticks
        threads = int(fields[17])
        virtual, resident = int(fields[20]), int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        boot_s = _boot_time()
        start_s = None if boot_s is None else boot_s + int(fields[19]) / ticks
    else:
        times = os.times()
        cpu_s, threads, virtual, resident, start_s = times.user + times.system, threading.active_count(), None, None, None
    out.family("process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds")
    out.sample("process_cpu_seconds_total", cpu_s)
    if resident is not None:
        out.family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes")
        out.sample("process_resident_memory_bytes", resident)
        out.family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes")
        out.sample("process_virtual_memory_bytes", virtual)
    if start_s is not None:
        out.family("process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch, in seconds")
        out.sample("process_start_time_seconds", start_s)
    out.family("process_threads", "gauge", "Threads of the process")
    out.sample("process_threads", threads)
    try:
        open_fds = len(os.listdir(f"{proc}/fd"))
    except OSError:
        open_fds = None
    if open_fds is not None:
        out.family("process_open_fds", "gauge", "Open file descriptors")
        out.sample("process_open_fds", open_fds)
    max_fds = _max_fds(proc)
    if max_fds is not None:
        out.family("process_max_fds", "gauge", "The limit of open file descriptors (the soft RLIMIT_NOFILE)")
        out.sample("process_max_fds", max_fds)


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", "rb") as file:
            for line in file:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _max_fds(proc: str) -> int | None:
    try:
        with open(f"{proc}/limits", "rb") as file:
            for line in file:
                if line.startswith(b"Max open files"):
                    soft = line.split()[3]
                    return int(soft) if soft.isdigit() else None
    except (OSError, IndexError):
        pass
    return None


# --- the HTTP listener ---------------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


class _RequestReader:
    """The request's bytes, read from the socket at most ``budget`` bytes and until ``deadline_ms``
    (each receive waits at most what is left): what ``BaseHTTPRequestHandler`` reads the request
    line and the headers with. Past either, ``_Refused``."""

    def __init__(self, sock: socket.socket, budget: int, deadline_ms: int, clock: Clock) -> None:
        self._sock = sock
        self._budget = budget
        self._deadline_ms = deadline_ms
        self._clock = clock
        self._buffer = b""
        self._eof = False

    def _fill(self) -> None:
        if len(self._buffer) >= self._budget:
            raise _Refused(431, "Request Header Fields Too Large",
                           f"the request is larger than {self._budget} bytes")
        left_ms = self._deadline_ms - self._clock.monotonic_ms()
        if left_ms <= 0:
            raise _Refused(408, "Request Timeout", "the request did not arrive in time")
        self._sock.settimeout(left_ms / 1000)
        try:
            chunk = self._sock.recv(min(4096, self._budget - len(self._buffer)))
        except TimeoutError:
            raise _Refused(408, "Request Timeout", "the request did not arrive in time") from None
        if not chunk:
            self._eof = True
        self._buffer += chunk

    def readline(self, limit: int = -1) -> bytes:
        while b"\n" not in self._buffer and not self._eof:
            self._fill()
        end = self._buffer.find(b"\n") + 1 or len(self._buffer)
        if limit >= 0:
            end = min(end, limit)
        line, self._buffer = self._buffer[:end], self._buffer[end:]
        return line

    def read(self, size: int = -1) -> bytes:  # a body is never read; for completeness
        data, self._buffer = (self._buffer, b"") if size < 0 else (self._buffer[:size], self._buffer[size:])
        return data

    def close(self) -> None:
        self._buffer = b""


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "logstore-metrics"
    sys_version = ""
    protocol_version = "HTTP/1.0"  # one request per connection
    server: "_HttpServer"

    def setup(self) -> None:
        owner = self.server.owner
        self.timeout = owner.timeout_ms / 1000  # each send waits at most this
        super().setup()
        self.rfile.close()  # its buffered reads would wait without a deadline; the socket stays open
        self.rfile = _RequestReader(self.connection, owner.max_request_bytes,
                                    owner.clock.monotonic_ms() + owner.timeout_ms, owner.clock)

    def handle(self) -> None:
        try:
            self.handle_one_request()
        except _Refused as refused:
            self.connection.settimeout(self.timeout)
            body = (refused.message + "\n").encode()
            self.wfile.write(f"HTTP/1.0 {refused.status} {refused.reason}\r\nContent-Type: text/plain; "
                             f"charset=utf-8\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                             + body)
        except OSError:
            pass  # the client went away

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        self.connection.settimeout(self.timeout)
        owner = self.server.owner
        path = self.path.split("?", 1)[0]
        content_type = "text/plain; charset=utf-8"
        if path == "/metrics":
            try:
                status, text, content_type = 200, owner.metrics(), CONTENT_TYPE
            except Exception as exc:  # a scrape must not take the listener down; say why once
                logger.exception("rendering the metrics failed")
                status, text = 500, f"rendering the metrics failed: {type(exc).__name__}: {exc}\n"
        elif path == "/healthz":
            status, text = 200, "ok\n"
        elif path == "/readyz":
            reason = owner.readiness()
            status, text = (200, "ready\n") if reason is None else (503, " ".join(str(reason).split()) + "\n")
        else:
            status, text = 404, "not found: the paths are /metrics, /healthz and /readyz\n"
        data = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # not to stderr: the server's log, quietly
        logger.debug("%s %s", self.address_string(), format % args)


class _HttpServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stopping does not wait for a slow client
    request_queue_size = 16

    def __init__(self, owner: "MetricsServer", address: tuple[str, int]) -> None:
        self.owner = owner
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._slots = threading.BoundedSemaphore(owner.max_handlers)
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # Not HTTPServer's own: it asks the resolver for the host's name (socket.getfqdn), a DNS wait
        # at start for a name nothing here uses.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[0], self.server_address[1]

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.owner.rejected += 1
            self.shutdown_request(request)  # every handler busy: closed unread (a scraper retries)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        logger.warning("the metrics request from %s failed", client_address[0], exc_info=True)


class MetricsServer:
    """The metrics and probes listener on ``host``:``port`` (0 picks a free one). ``metrics()`` gives
    the ``/metrics`` text, ``readiness()`` None when ready, else the reason ``/readyz`` answers 503
    with. ``start()`` binds and serves on a thread of its own; ``stop()`` closes (idempotent)."""

    def __init__(self, host: str, port: int, metrics: Callable[[], str], readiness: Callable[[], str | None], *,
                 max_handlers: int = MAX_HANDLERS, max_request_bytes: int = MAX_REQUEST_BYTES,
                 timeout_ms: int = TIMEOUT_MS, clock: Clock | None = None) -> None:
        for name, value in (("max_handlers", max_handlers), ("max_request_bytes", max_request_bytes),
                            ("timeout_ms", timeout_ms)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.host, self.port = host, port
        self.metrics, self.readiness = metrics, readiness
        self.max_handlers, self.max_request_bytes, self.timeout_ms = max_handlers, max_request_bytes, timeout_ms
        self.clock = clock or SYSTEM_CLOCK
        self.rejected = 0  # connections closed unread because every handler was busy
        self._http: _HttpServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "MetricsServer":
        if self._http is not None:
            return self
        self._http = _HttpServer(self, (self.host, self.port))
        self.port = self._http.server_address[1]
        warning = beyond_loopback_warning(self.host, self.port)
        if warning is not None:
            logger.warning("%s", warning)
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="logstore-metrics", daemon=True)
        self._thread.start()
        logger.info("metrics on http://%s/metrics", self.address)
        return self

    @property
    def address(self) -> str:
        """``host:port`` bound (``[v6]:port`` for an IPv6 host)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def stop(self) -> None:
        http_server, self._http = self._http, None
        if http_server is None:
            return
        http_server.shutdown()
        http_server.server_close()
        if self._thread is not None:
            self._thread.join(5)


__all__ = ["BrokerMetrics", "CONTENT_TYPE", "beyond_loopback_warning", "Exposition", "KAFKA_NAMES", "MetricSources", "MetricsServer",
           "parse_metrics_address", "process_metrics"]
