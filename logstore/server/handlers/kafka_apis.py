"""The request dispatcher (Kafka's KafkaApis), ApiVersions (the dispatcher's own registry, advertised),
and ``Broker``, what every handler shares.

``KafkaApis.handle`` runs on a handler thread for every request the network layer reads: it answers
the ApiVersions special cases, closes the connection for an API or version we do not speak (as Kafka
does), decodes the body and calls the API's handler. Handlers are registered per API key
(``register``), so Metadata (``metadata``), the data APIs (``produce``, ``fetch``), the admin APIs
(``admin``, ``security_admin``), the consumer-group APIs (``groups``) and the transaction APIs
(``txn``) plug in without this module knowing them. An API that has a table
but is never served nor advertised can be given a fixed error answer instead (``refuse``: KIP-848's
ConsumerGroupHeartbeat gets UNSUPPORTED_VERSION, as from a Kafka with that protocol off).

``Broker`` is what every handler shares: the store, who this broker is (node id, cluster id, the
advertised address), the server's settings, the producer state, the fetch cache, the per-topic
counts (``topic_metrics``) and the transaction coordinator (``txn_coordinator``: the produce path
asks it whether a transactional batch's partition is in its producer's transaction).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from ...clock import Clock
from ...manager.log_manager import LogManager
from ..network.request_context import RequestContext
from ..protocol import errors
from ..protocol.codec import ProtocolError, api_versions_fallback_response, decode_request
from ..protocol.messages import API_KEYS, API_NAMES, APIS, SUPPORTED_VERSIONS
from ..server_config import ServerConfig
from .producer_state import ProducerStateManager
from .topic_metrics import BrokerTopicMetrics

logger = logging.getLogger(__name__)

API_VERSIONS = API_KEYS["ApiVersions"]
LEADER_EPOCH = 0  # one broker that never changes leadership: a constant epoch

Handler = Callable[[RequestContext, dict], None]


@dataclass
class Broker:
    """What the request handlers share."""

    store: LogManager
    node_id: int
    cluster_id: str
    host: str
    port: int
    config: ServerConfig
    producers: ProducerStateManager
    fetch_cache: Any
    clock: Clock
    endpoints: dict = field(default_factory=dict)  # listener protocol -> advertised (host, port)
    topic_metrics: BrokerTopicMetrics = field(default_factory=BrokerTopicMetrics)  # bytes/records in and out
    txn_coordinator: Any = None  # logstore.txn.coordinator.TransactionCoordinator, set by the server at start
    partition_locks: dict = field(default_factory=dict)
    _locks_guard: threading.Lock = field(default_factory=threading.Lock)

    def partition_lock(self, topic: str, partition: int) -> threading.Lock:
        """The lock that serialises idempotent appends to one partition (sequence check, journal,
        append), so two connections of one producer cannot both pass the check."""
        key = (topic, partition)
        lock = self.partition_locks.get(key)
        if lock is None:
            with self._locks_guard:
                lock = self.partition_locks.setdefault(key, threading.Lock())
        return lock

    def endpoint(self, context: RequestContext | None = None) -> tuple[str, int]:
        """The (host, port) clients are told to connect to: the advertised address of the listener
        ``context``'s request came in on (Kafka answers each listener with its own), else the first's."""
        listener = context.connection.listener if context is not None else None
        if listener is not None and listener.protocol in self.endpoints:
            return self.endpoints[listener.protocol]  # advertised, or bound (KafkaServer._start)
        return self.host, self.port

    def broker_entry(self, context: RequestContext | None = None) -> dict:
        host, port = self.endpoint(context)
        return {"node_id": self.node_id, "host": host, "port": port, "rack": None}


class KafkaApis:
    """Dispatches each request to the handler registered for its API key."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.handlers: dict[int, Handler] = {}
        self.refusals: dict[int, dict] = {}
        # ACLs, when enforced: authorization.RequestAuthorization, asked between decoding and the handler
        self.authorization = None
        self.register(API_VERSIONS, self.api_versions)

    def register(self, api_key: int, handler: Handler) -> None:
        """Serve ``api_key`` with ``handler(context, request_body)``; it must be in SUPPORTED_VERSIONS."""
        if api_key not in SUPPORTED_VERSIONS:
            raise ValueError(f"api key {api_key} has no advertised versions (messages.SUPPORTED_VERSIONS)")
        self.handlers[api_key] = handler

    def refuse(self, api_key: int, body: dict) -> None:
        """Answer every request of ``api_key``, at any version its table has, with ``body`` (an error
        answer), without decoding the request. For an API with a table that is neither advertised nor
        served (``messages_groups.UNSERVED``), so that a client that sends it anyway learns why."""
        if api_key not in APIS or api_key in SUPPORTED_VERSIONS:
            raise ValueError(f"api key {api_key} is not an unserved API with a table (messages_groups.UNSERVED)")
        self.refusals[api_key] = body

    def advertised(self) -> list[dict]:
        return [{"api_key": key, "min_version": low, "max_version": high}
                for key, (low, high) in sorted(SUPPORTED_VERSIONS.items()) if key in self.handlers]

    def handle(self, context: RequestContext) -> None:
        """Decode the request's body and run its handler (on a handler thread)."""
        api_key, version = context.api_key, context.api_version
        handler = self.handlers.get(api_key)
        if handler is None:
            refusal = self.refusals.get(api_key)
            if refusal is not None and APIS[api_key].versions[0] <= version <= APIS[api_key].versions[1]:
                logger.info("refused %s v%d from %s (not supported)", API_NAMES[api_key], version, context.peer)
                context.respond(refusal)
            else:
                context.close(f"api key {api_key} is not supported")
            return
        low, high = SUPPORTED_VERSIONS[api_key]
        if not low <= version <= high:
            if api_key == API_VERSIONS:
                # KIP-511: a newer client's ApiVersions gets a v0 answer naming what we speak.
                context.respond_frame(api_versions_fallback_response(context.correlation_id))
            else:
                context.close(f"{API_NAMES.get(api_key, api_key)} v{version} is not supported "
                              f"(versions {low}-{high})")
            return
        try:
            request = decode_request(api_key, version, context.frame, context.body_offset)
        except ProtocolError as exc:
            context.close(f"a malformed {API_NAMES.get(api_key, api_key)} v{version} request: {exc}")
            return
        authorization, session = self.authorization, context.connection.session
        if authorization is not None and session is not None:
            verdict = authorization.check(api_key, version, request, session.principal, session.host)
            if verdict.response is not None:
                context.respond(verdict.response)
                return
            if verdict.close is not None:
                context.close(verdict.close)
                return
            if verdict.request is not None:
                request = verdict.request
            context.amend = verdict.amend
        handler(context, request)

    # --- ApiVersions -----------------------------------------------------------------------------

    def api_versions(self, context: RequestContext, request: dict) -> None:
        context.respond({"error_code": errors.NONE, "api_keys": self.advertised(), "throttle_time_ms": 0})
