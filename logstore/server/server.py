"""``KafkaServer``: a store served over Kafka's wire protocol, and the broker identity it keeps in
each data dir (``meta.properties``).

The server either owns its store (given data dirs, it opens a ``LogManager``, which takes the dirs'
locks and runs the background jobs and the cleaner, and closes it on stop: flush, checkpoints, the
clean-shutdown marker) or borrows one (given a ``LogManager``, so an application serves the store
it appends to itself; the application closes it). Either way it gets the store's group coordinator
(``GroupCoordinator.of``: created with the ``group.*``/``offsets.*`` settings and started, which
loads ``__consumer_offsets``, unless the process already has one for that store), starts its own
transaction coordinator (``logstore.txn``: its state replayed from ``__transaction_state``, prepared
transactions finished, its timeout and expiration scanners on the store's scheduler, its markers
written into the store's logs by ``StoreMarkerWriter``), wires the request handlers to the network
layer and answers on ``bootstrap_servers`` once ``start()`` (or ``with``) returns.

Stopping is orderly: no new connections, JoinGroups and SyncGroups parked in a rebalance have their
connections closed (as a stopping Kafka broker drops them), other requests in flight get a few
seconds to finish (a parked fetch ends at its ``max_wait_ms``, a parked produce or offset commit
when the fsync it waits for is done), then the connections close, the transaction coordinator stops (a
transaction whose markers are not all written stays prepared in ``__transaction_state``: the next
start finishes it), the producer state is written back, and an owned store's group coordinator is
shut down and the store closed. A borrowed store's
coordinator keeps running (the application's in-process consumers may share it); it stops when
that store closes (``LogManager.on_close``).

With ``metrics_listen``, an HTTP listener of its own serves the metrics (Prometheus' text format)
and the probes (``metrics``): it opens first thing in ``start()``, so ``/healthz`` answers while the
store opens and ``/readyz`` says 503 until every listener accepts, and again from the moment
``stop()`` begins; it closes last.
"""

from __future__ import annotations

import base64
import ctypes
import logging
import os
import re
import threading
import uuid
import zlib
from typing import Any, Mapping, Sequence

from ..clock import SYSTEM_CLOCK, Clock
from ..config import PRODUCER_KEYS
from ..errors import (CorruptCheckpointError, InvalidConfigError, ReadOnlyError, StorageError,
                      UnknownTopicOrPartitionError)
from ..fs import OS_FILE_SYSTEM
from ..group.coordinator import GroupCoordinator
from ..manager.log_manager import LogManager
from ..txn.coordinator import TransactionCoordinator
from ..txn.markers import StoreMarkerWriter
from ..txn.state_log import TransactionStateLog
from .extra import INSTALL_HINT, missing_extra
from .handlers.admin import AdminHandler
from .handlers.fetch import FetchHandler
from .handlers.groups import GroupHandlers
from .handlers.kafka_apis import Broker, KafkaApis
from .handlers.metadata import MetadataHandler
from .handlers.produce import ProduceHandler
from .handlers.producer_state import ProducerStateManager
from .handlers.security_admin import SecurityAdminHandler
from .handlers.txn import TxnHandlers
from .metrics import BrokerMetrics, MetricSources, MetricsServer, parse_metrics_address
from .network.descriptors import DescriptorBudget
from .network.socket_server import RAW_TOKEN_API_KEY, SocketServer, is_unix_socket_path
from .protocol.messages import API_KEYS
from .security.acl_store import AclStore
from .security.acls import Authorizer
from .security.authorization import DenialLog, RequestAuthorization
from .security.credentials import CredentialStore
from .security.listeners import PLAINTEXT, SASL_PLAINTEXT, is_loopback, parse_listeners
from .security.password_checks import PasswordChecks
from .security.sasl import AuthenticationThrottle, SaslAuthenticator, Session
from .server_config import ServerConfig
from .wire_records import FetchBatchCache

logger = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"
_CRC_PREFIX = "#crc32="
DEFAULT_LISTEN = "127.0.0.1:9092"
_DRAIN_MS = 5000


def use_one_malloc_arena() -> bool:
    """Have glibc's malloc serve every thread from one arena. ``logstore serve`` calls this before
    the server starts its threads: the process is the server's (an application that embeds
    ``KafkaServer`` keeps its own allocator settings).

    Why: glibc gives each thread that allocates its own arena, and memory freed in an arena stays
    with the process; the server's handler and network threads each make and drop request-sized
    buffers (1 MiB frames and batches) many times a second, so each arena keeps its own high-water
    mark. Contention on one arena is small here: the threads allocate holding the GIL. Measured with
    ``logstore perf serve --sizes 1m``: RSS after the run ~80 -> ~68 MB, produce CPU per record the
    same. (A fixed 128 KiB mmap threshold, so that large buffers go back to the OS at once, gave
    ~55 MB but doubled the produce CPU per record: a page fault per 4 KiB of every buffer.)
    Returns whether it was applied (False where the C library has no ``mallopt``, e.g. macOS)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    m_arena_max = -8  # from glibc's malloc.h
    return bool(mallopt(m_arena_max, 1))


def new_cluster_id() -> str:
    """A cluster id as Kafka makes them: a random UUID in 22 characters of URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


def format_meta_properties(cluster_id: str, node_id: int) -> bytes:
    """A meta.properties as Kafka keeps it, ending with a ``#crc32=`` comment line: ``zlib.crc32`` of
    every byte before it (a comment, so Kafka's own tools read the file as before)."""
    text = f"#Written by logstore serve\nversion=1\ncluster.id={cluster_id}\nnode.id={node_id}\n".encode("utf-8")
    return text + f"{_CRC_PREFIX}{zlib.crc32(text):08x}\n".encode()


def read_meta_properties(dir_path: str) -> dict[str, str] | None:
    """The ``key=value`` lines of a data dir's meta.properties (None when it has none). Raises
    ``CorruptCheckpointError`` naming the file when its checksum does not match (files written before
    the checksum, without one, are read as they are)."""
    path = os.path.join(dir_path, META_PROPERTIES)
    if not os.path.exists(path):
        return None
    data = OS_FILE_SYSTEM.read_file(path)
    body, found, crc = data.rstrip(b"\n").rpartition(b"\n" + _CRC_PREFIX.encode())
    if found and (not re.fullmatch(rb"[0-9a-f]{8}", crc) or zlib.crc32(body + b"\n") != int(crc, 16)):
        raise CorruptCheckpointError(f"{path} is damaged (checksum mismatch): the broker identity cannot be "
                                     "trusted; restore the file or move it away to make a new identity")
    properties = {}
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"{path} is damaged: not UTF-8 text") from None
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            properties[key.strip()] = value.strip()
    return properties


def broker_identity(log_dirs: Sequence[str], node_id: int | None) -> tuple[int, str]:
    """(node id, cluster id) from the data dirs' meta.properties, created in each dir that has none.
    Dirs that disagree, or a configured ``node.id`` that differs from the stored one, are refused:
    they belong to another broker (Kafka refuses to start the same way)."""
    found = {path: read_meta_properties(path) for path in log_dirs}
    cluster_ids = {props.get("cluster.id") for props in found.values() if props}
    node_ids = {props.get("node.id") for props in found.values() if props}
    if len(cluster_ids) > 1 or len(node_ids) > 1:
        raise InvalidConfigError(f"the data dirs belong to different brokers or clusters: "
                                 f"{ {path: props for path, props in found.items() if props} }")
    cluster_id = cluster_ids.pop() if cluster_ids else new_cluster_id()
    stored_node = node_ids.pop() if node_ids else None
    if stored_node is not None:
        if node_id is not None and str(node_id) != stored_node:
            raise InvalidConfigError(f"node.id {node_id} differs from node.id={stored_node} in the data dirs' "
                                     f"{META_PROPERTIES}")
        node_id = int(stored_node)
    elif node_id is None:
        node_id = 0
    for path, props in found.items():
        if props is None:
            OS_FILE_SYSTEM.write_file_atomic(os.path.join(path, META_PROPERTIES),
                                             format_meta_properties(cluster_id, node_id))
    return node_id, cluster_id


def _address(host: str, port: int) -> str:
    return host if is_unix_socket_path(host) else f"{host}:{port}"


class KafkaServer:
    """Serves a store to Kafka clients. ``store_or_dirs`` is a writable ``LogManager`` (borrowed) or
    data dirs (the server opens and owns the store, with ``config``'s store settings). ``listen`` is
    one listener or several, ``PROTOCOL://HOST:PORT`` with Kafka's protocol names (``PLAINTEXT``,
    ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``; a bare ``HOST:PORT`` is ``PLAINTEXT``; port 0 picks a
    free one); ``advertised_listener`` the addresses clients are told to connect to, matched by
    protocol (default: the bound ones). ``config`` takes the server's settings
    (``server_config.SERVER_KEYS``, the ``ssl.*`` keys of the TLS listeners) and, for an owned store,
    the store's. ``metrics_listen`` (``[HOST:]PORT``, no host: 127.0.0.1; default: none) opens the
    metrics and probes listener (``/metrics``, ``/healthz``, ``/readyz``).

    Use it as a context manager, or ``start()`` and ``stop()``::

        with KafkaServer(store, listen="127.0.0.1:0") as server:
            producer = KafkaProducer(bootstrap_servers=server.bootstrap_servers)
    """

    def __init__(self, store_or_dirs: LogManager | Sequence[str] | str, *, listen: str | Sequence[str] = DEFAULT_LISTEN,
                 advertised_listener: str | Sequence[str] | None = None, config: Mapping[str, Any] | None = None,
                 clock: Clock | None = None, metrics_listen: str | None = None) -> None:
        if missing_extra():
            raise ImportError(f"the Kafka protocol server needs {', '.join(missing_extra())}: {INSTALL_HINT}")
        self.config, self._store_config = ServerConfig.split(config)
        if isinstance(store_or_dirs, LogManager):
            if store_or_dirs.read_only:
                raise ReadOnlyError("a server needs a writable store; this one was opened read_only")
            if set(self._store_config) - set(PRODUCER_KEYS):
                raise InvalidConfigError(f"store settings {sorted(self._store_config)} belong to the LogManager "
                                         "passed in (give them to it), not to the server")
            self.store: LogManager | None = store_or_dirs
            self._dirs = None
        elif isinstance(store_or_dirs, (str, os.PathLike, list, tuple)):
            self.store = None
            self._dirs = [store_or_dirs] if isinstance(store_or_dirs, (str, os.PathLike)) else list(store_or_dirs)
        else:
            raise TypeError(f"KafkaServer serves a LogManager or data dirs, got {store_or_dirs!r}")
        self.owns_store = self._dirs is not None
        try:
            self.listeners = parse_listeners(listen, advertised_listener, tls=self.config.tls,
                                             allow_plaintext_remote=self.config.allow_plaintext_remote)
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from None
        self.listen_host, self.listen_port = self.listeners[0].host, self.listeners[0].port
        self.credentials: CredentialStore | None = None
        self.sasl: SaslAuthenticator | None = None
        self.authorizer: Authorizer | None = None
        enforce = self.config.authorizer_enable
        # Safe default: ACLs are enforced as soon as the server is reachable other than by loopback
        # PLAINTEXT (Kafka needs an authorizer configured; forgetting it there opens everything).
        self.enforces_acls = (any(listener.protocol != PLAINTEXT for listener in self.listeners)
                              if enforce is None else enforce)
        self._clock = clock or SYSTEM_CLOCK
        self.node_id: int | None = None
        self.cluster_id: str | None = None
        self.host: str | None = None
        self.port: int | None = None
        self.endpoints: dict[str, tuple[str, int]] = {}
        self.broker: Broker | None = None
        self.apis: KafkaApis | None = None
        self._network: SocketServer | None = None
        self._producers: ProducerStateManager | None = None
        self.coordinator: GroupCoordinator | None = None
        self.txn_coordinator: TransactionCoordinator | None = None
        self._groups: GroupHandlers | None = None
        self._started = False
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self.failure: BaseException | None = None  # what killed a thread of the server (it then stops)
        self.descriptors: DescriptorBudget | None = None  # the descriptor limit and what it leaves
        self._metrics_address: tuple[str, int] | None = None
        if metrics_listen is not None:
            try:
                self._metrics_address = parse_metrics_address(metrics_listen)
            except ValueError as exc:
                raise InvalidConfigError(str(exc)) from None
        self.metrics = BrokerMetrics(self._metric_sources)
        self.metrics_server: MetricsServer | None = None
        self._serving = False  # every listener accepts (set when start() is done)
        self._stopping = False

    # --- life cycle ------------------------------------------------------------------------------

    def start(self) -> "KafkaServer":
        """Open the store (if owned), load the broker's state and start answering. Returns self."""
        if self._started:
            return self
        self._started = True
        try:
            if self._metrics_address is not None:
                host, port = self._metrics_address
                self.metrics_server = MetricsServer(host, port, self.metrics.render, self.readiness,
                                                    clock=self._clock).start()
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        if self.store is None:
            self.store = LogManager(self._dirs, config=self._store_config, clock=self._clock)
            self.store.startup()
        store = self.store
        live_dirs = [path for path in store.log_dirs if path not in store.offline_dirs]
        if not live_dirs:
            raise StorageError("every data dir is offline: nothing to serve")
        # Asked before broker_identity creates it: a server that ran here before left its journal.
        served_before = os.path.exists(os.path.join(live_dirs[0], META_PROPERTIES))
        self.node_id, self.cluster_id = broker_identity(live_dirs, self.config.node_id)
        self._producers = ProducerStateManager(
            live_dirs[0], clock=self._clock, expiration_ms=self.config.producer_id_expiration_ms,
            check_interval_ms=self.config.producer_id_expiration_check_interval_ms)
        self._producers.load(self._log_end_offset, served_before=served_before)
        store.problems.extend(self._producers.problems)  # damaged journal lines: reported with the store's
        # Started (``__consumer_offsets`` created and replayed) before the server listens, so that no
        # group request finds it loading.
        self.coordinator = coordinator = GroupCoordinator.of(store, config=self.config.group, clock=self._clock)
        if coordinator.config != self.config.group:
            logger.warning("the store's group coordinator was started before this server, with other group "
                           "settings; the server's group.*/offsets.* settings are not applied")
        self.txn_coordinator = self._start_txn_coordinator(store, coordinator)
        self.credentials = CredentialStore(live_dirs[0])
        if self.enforces_acls:
            self.authorizer = Authorizer(AclStore(live_dirs[0]), self.config.super_users,
                                         self.config.allow_everyone_if_no_acl_found)
        self.sasl = SaslAuthenticator(
            self.credentials.lookup, self.config.sasl_enabled_mechanisms, clock=self._clock,
            throttle=AuthenticationThrottle(self.config.connection_failed_authentication_delay_ms, clock=self._clock,
                                            max_pending=self.config.sasl_max_pending_per_host),
            checks=PasswordChecks(self.config.sasl_password_check_threads, self.config.sasl_password_check_max_queued,
                                  name="logstore-server-password-check"))
        # The metrics listener counts as listeners: its socket and one connection per handler thread.
        metrics_sockets = 0 if self.metrics_server is None else 1 + self.metrics_server.max_handlers
        self.descriptors = descriptors = DescriptorBudget.of(store.descriptors_needed(),
                                                             len(self.listeners) + metrics_sockets,
                                                             self.config.max_connections)
        if descriptors.warning:
            logger.warning("%s", descriptors.warning)
        logger.info("%s", descriptors)
        network = SocketServer(None, None, self._dispatch, listeners=self.listeners,
                               max_request_bytes=self.config.socket_request_max_bytes,
                               max_connections=descriptors.max_connections,
                               idle_ms=self.config.connections_max_idle_ms, io_threads=self.config.num_io_threads,
                               clock=self._clock, name="logstore-server",
                               new_session=lambda listener, peer: Session(listener.protocol, peer),
                               queued_max_request_bytes=self.config.queued_max_request_bytes,
                               max_unauthenticated_request_bytes=self.config.sasl_server_max_receive_size,
                               max_unsent_response_bytes=self.config.queued_max_response_bytes,
                               on_fatal=self._fatal)
        self._network = network
        endpoints = {}
        for listener, bound_port in zip(self.listeners, network.ports):
            host = listener.advertised_host or listener.host
            if host in ("0.0.0.0", "::", ""):
                host = "127.0.0.1"  # a wildcard is no address to connect to; --advertised-listener names one
            port = listener.advertised_port or bound_port
            endpoints[listener.protocol] = (host, port)
        self.endpoints = endpoints
        self.host, self.port = endpoints[self.listeners[0].protocol]
        self.broker = Broker(store, self.node_id, self.cluster_id, self.host, self.port, self.config,
                             self._producers, FetchBatchCache(self.config.fetch_cache_bytes), self._clock,
                             endpoints=endpoints, txn_coordinator=self.txn_coordinator)
        self.apis = apis = KafkaApis(self.broker)
        produce, fetch, admin = ProduceHandler(self.broker), FetchHandler(self.broker), AdminHandler(self.broker)
        self.fetch_sessions = fetch.sessions  # the fetch sessions (KIP-227), for tests and metrics
        metadata = MetadataHandler(self.broker)
        apis.register(API_KEYS["Metadata"], metadata.metadata)
        apis.register(API_KEYS["DescribeCluster"], metadata.describe_cluster)
        apis.register(API_KEYS["DescribeTopicPartitions"], metadata.describe_topic_partitions)
        apis.register(API_KEYS["Produce"], produce.handle)
        apis.register(API_KEYS["InitProducerId"], produce.init_producer_id)
        apis.register(API_KEYS["Fetch"], fetch.fetch)
        apis.register(API_KEYS["ListOffsets"], fetch.list_offsets)
        apis.register(API_KEYS["OffsetForLeaderEpoch"], fetch.offset_for_leader_epoch)
        apis.register(API_KEYS["CreateTopics"], admin.create_topics)
        apis.register(API_KEYS["DeleteTopics"], admin.delete_topics)
        apis.register(API_KEYS["DescribeConfigs"], admin.describe_configs)
        apis.register(API_KEYS["AlterConfigs"], admin.alter_configs)
        apis.register(API_KEYS["IncrementalAlterConfigs"], admin.incremental_alter_configs)
        apis.register(API_KEYS["DeleteRecords"], admin.delete_records)
        apis.register(API_KEYS["CreatePartitions"], admin.create_partitions)
        self._groups = GroupHandlers(self.broker, coordinator)
        self._groups.register(apis)
        TxnHandlers(self.broker, self.txn_coordinator, self._groups, produce).register(apis)
        apis.register(API_KEYS["SaslHandshake"], self.sasl.handshake)
        apis.register(API_KEYS["SaslAuthenticate"], self.sasl.authenticate)
        SecurityAdminHandler(self.authorizer, self.credentials).register(apis)
        if self.authorizer is not None:
            apis.authorization = RequestAuthorization(self.authorizer, on_denied=DenialLog(self._clock).denied)
            fetch.authorization = apis.authorization  # a fetch session's partitions are checked on every fetch
        network.start()
        for listener, bound_port in zip(self.listeners, network.ports):
            if listener.protocol == PLAINTEXT and not is_loopback(listener.host) and not is_unix_socket_path(listener.host):
                logger.warning("listening on %s:%d without authentication or TLS (allow.plaintext.remote): anyone "
                               "who can reach it can read, write and delete every topic", listener.host, bound_port)
            elif (listener.protocol == SASL_PLAINTEXT and not is_loopback(listener.host)
                  and "PLAIN" in self.config.sasl_enabled_mechanisms):
                logger.warning("SASL PLAIN on %s:%d without TLS: passwords cross the network in the clear; use "
                               "SASL_SSL or SCRAM", listener.host, bound_port)
            logger.info("listening on %s://%s (node %d, cluster %s)", listener.protocol,
                        _address(listener.host, bound_port), self.node_id, self.cluster_id)
        self._serving = True

    def _start_txn_coordinator(self, store: LogManager, groups: GroupCoordinator) -> TransactionCoordinator:
        """The transaction coordinator of this server, started: ``__transaction_state`` replayed,
        prepared transactions being finished, the scanners scheduled (before the server listens, so
        no transactional request finds it loading). Producer ids come from the server's journal,
        which never hands one out twice, idempotent and transactional producers alike."""
        config = self.config
        clock = self._clock
        state_log = TransactionStateLog(store, clock, num_partitions=config.transaction_state_log_num_partitions,
                                        segment_bytes=config.transaction_state_log_segment_bytes)
        markers = StoreMarkerWriter(store, clock, store.scheduler, groups)
        txn = TransactionCoordinator(state_log, markers, clock, store.scheduler, self._producers.new_producer_id,
                                     config.txn, offsets_topic_num_partitions=groups.storage.num_partitions)
        txn.startup()
        return txn

    def _fatal(self, exc: BaseException) -> None:
        """A thread of the server died (the network layer logged it): stop everything, on a thread
        of its own (the dying one may be the one ``stop`` waits for), so the store is closed and its
        lock released; ``failure`` says why, and ``logstore serve`` exits non-zero."""
        if self.failure is not None:
            return
        self.failure = exc
        threading.Thread(target=self.stop, name="logstore-server-fail-stop", daemon=True).start()

    def fail_stop_on_thread_death(self) -> None:
        """Make any thread of this process that dies of an uncaught exception stop the server (the
        process is the server's: ``logstore serve`` calls this). Threads that catch their own errors
        (the store's scheduler logs a failed job and goes on) are not affected."""
        previous = threading.excepthook

        def hook(args) -> None:
            previous(args)
            if args.exc_type is not SystemExit and args.exc_value is not None:
                logger.critical("thread %s died: the server stops", getattr(args.thread, "name", "?"))
                self._fatal(args.exc_value)

        threading.excepthook = hook

    def _dispatch(self, context) -> None:
        if context.api_key == RAW_TOKEN_API_KEY:
            self.sasl.raw_token(context)
        elif self.sasl.admits(context):
            self.apis.handle(context)

    def _log_end_offset(self, topic: str, partition: int) -> int | None:
        try:
            return self.store.get_log(topic, partition).log_end_offset
        except (UnknownTopicOrPartitionError, StorageError):
            return None  # deleted, or its dir offline: its producers' batches are not in a log we serve

    def readiness(self) -> str | None:
        """None when the server is ready (started, its store open and every listener accepting), else
        why not, in one line (what ``/readyz`` answers 503 with)."""
        if self.failure is not None:
            return f"stopping: a thread of the server died ({type(self.failure).__name__}: {self.failure})"
        if self._stopped.is_set():
            return "stopped"
        if self._stopping:
            return "stopping"
        if not self._started:
            return "not started"
        if not self._serving:
            return "starting: opening the store and the listeners"
        network = self._network
        if network is None or not network.accepting:
            return "the listeners are not accepting"
        return None

    @property
    def metrics_address(self) -> str | None:
        """``host:port`` of the metrics listener (the real port when 0 was asked for); None without one."""
        return None if self.metrics_server is None else self.metrics_server.address

    def _metric_sources(self) -> MetricSources:
        return MetricSources(store=self.store, network=self._network,
                             topic_metrics=None if self.broker is None else self.broker.topic_metrics,
                             coordinator=self.coordinator, sasl=self.sasl)

    @property
    def bound_address(self) -> tuple[str, int]:
        """The address the (first) listener listens on (the real port when 0 was asked for)."""
        if self._network is None:
            raise RuntimeError("the server is not started")
        return self.listen_host, self._network.port

    @property
    def bound_ports(self) -> list[int]:
        """The port each of ``listeners`` listens on, in order."""
        if self._network is None:
            raise RuntimeError("the server is not started")
        return list(self._network.ports)

    @property
    def connection_count(self) -> int:
        """The client connections open now (0 before start and after stop)."""
        return 0 if self._network is None else self._network.connection_count

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for a client's ``bootstrap.servers``: the first listener's advertised address
        (a Unix socket listener's: its path)."""
        if self._network is None:
            raise RuntimeError("the server is not started")
        return _address(self.host, self.port)

    def bootstrap_for(self, protocol: str) -> str:
        """``host:port`` of the listener with security protocol ``protocol`` (``KeyError`` naming it
        when there is none)."""
        if self._network is None:
            raise RuntimeError("the server is not started")
        if protocol not in self.endpoints:
            raise KeyError(f"no {protocol} listener (listeners: {', '.join(self.endpoints)})")
        host, port = self.endpoints[protocol]
        return _address(host, port)

    def stop(self) -> None:
        """Stop answering and release what the server owns (see the module docstring). Idempotent."""
        with self._stop_lock:  # the fail-stop thread and the owner may both stop: once, and both wait
            if not self._stopped.is_set():
                self._stop()

    def _stop(self) -> None:
        self._stopping = True  # /readyz: 503 from now on
        network = self._network
        if network is not None:
            network.stop_accepting()
            if self._groups is not None:
                self._groups.close()  # a parked JoinGroup could otherwise hold the drain until its end
            deadline_ms = self._clock.monotonic_ms() + _DRAIN_MS
            while self._clock.monotonic_ms() < deadline_ms and network.busy_connections():
                self._clock.sleep_ms(10)
            network.stop()
        if self.sasl is not None:
            self.sasl.close()  # after the network: the drain above waited for the checks in flight
        if self.txn_coordinator is not None:
            self.txn_coordinator.shutdown()  # its scanners and marker retries run on the store's scheduler
        if self.owns_store and self.coordinator is not None:
            self.coordinator.shutdown()  # before the store closes: its commits and timers use it
        if self._producers is not None:
            try:
                self._producers.close()
            except OSError as exc:
                logger.error("writing the producer state back failed: %s", exc)
        if self.owns_store and self.store is not None:
            self.store.close()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        self._stopped.set()
        logger.info("stopped")

    close = stop

    def wait_stopped(self, timeout_s: float | None = None) -> bool:
        """Block until ``stop()`` has finished (True) or ``timeout_s`` passed (False)."""
        return self._stopped.wait(timeout_s)

    def __enter__(self) -> "KafkaServer":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"{self.host}:{self.port}" if self._network is not None else "not started"
        return f"KafkaServer({where}, node {self.node_id}, cluster {self.cluster_id})"
