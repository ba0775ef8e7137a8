"""The request dispatcher (Kafka's KafkaApis) and the APIs that describe the broker: ApiVersions,
Metadata, InitProducerId and OffsetForLeaderEpoch.

``KafkaApis.handle`` runs on a handler thread for every request the network layer reads: it answers
the ApiVersions special cases, closes the connection for an API or version we do not speak (as Kafka
does), decodes the body and calls the API's handler. Handlers are registered per API key
(``register``), so the data APIs (``produce``, ``fetch``), the admin APIs (``admin``) and the
consumer-group APIs (``groups``) plug in without this module knowing them. An API that has a table
but is never served nor advertised can be given a fixed error answer instead (``refuse``: KIP-848's
ConsumerGroupHeartbeat gets UNSUPPORTED_VERSION, as from a Kafka with that protocol off).

``Broker`` is what every handler shares: the store, who this broker is (node id, cluster id, the
advertised address), the server's settings, the producer state and the fetch cache.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from ..clock import Clock
from ..errors import InvalidTopicError, LogStoreError, TopicExistsError
from ..manager.log_manager import LogManager
from . import errors
from .codec import ProtocolError, api_versions_fallback_response, decode_request
from .messages import API_KEYS, API_NAMES, APIS, SUPPORTED_VERSIONS
from .request_context import RequestContext
from .producer_state import ProducerStateManager
from .server_config import ServerConfig

logger = logging.getLogger("logstore.server.apis")

API_VERSIONS = API_KEYS["ApiVersions"]
NOT_REQUESTED = -2147483648  # "authorized operations were not requested" (Metadata v8+)
LEADER_EPOCH = 0  # one broker that never changes leadership: a constant epoch (reference §6.5)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

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
        self.register(API_KEYS["Metadata"], self.metadata)
        self.register(API_KEYS["InitProducerId"], self.init_producer_id)
        self.register(API_KEYS["OffsetForLeaderEpoch"], self.offset_for_leader_epoch)

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

    # --- Metadata --------------------------------------------------------------------------------

    def metadata(self, context: RequestContext, request: dict) -> None:
        broker = self.broker
        store = broker.store
        requested = request.get("topics")
        if context.api_version == 0 and not requested:
            requested = None  # v0: an empty list means every topic
        allow_create = request.get("allow_auto_topic_creation", True) and broker.config.auto_create_topics_enable
        if requested is None:
            names = store.topics()
        else:
            names = [topic["name"] for topic in requested]
        known = set(store.topics())
        missing = set(store.missing_partitions)
        topics = [self._topic_metadata(name, allow_create and requested is not None, known, missing)
                  for name in dict.fromkeys(names)]
        context.respond({
            "throttle_time_ms": 0,
            "brokers": [broker.broker_entry(context)],
            "cluster_id": broker.cluster_id,
            "controller_id": broker.node_id,
            "topics": topics,
            "cluster_authorized_operations": NOT_REQUESTED,
        })

    def _topic_metadata(self, name: str, allow_create: bool, known: set[str], missing: set) -> dict:
        broker = self.broker
        store = broker.store
        entry = {"error_code": errors.NONE, "name": name, "is_internal": name in INTERNAL_TOPICS, "partitions": [],
                 "topic_authorized_operations": NOT_REQUESTED}
        if name not in known:
            if not allow_create:
                entry["error_code"] = errors.UNKNOWN_TOPIC_OR_PARTITION
                return entry
            try:
                store.create_topic(name, partitions=broker.config.num_partitions)
                logger.info("auto-created topic %r with %d partition(s)", name, broker.config.num_partitions)
            except InvalidTopicError:
                entry["error_code"] = errors.INVALID_TOPIC_EXCEPTION
                return entry
            except TopicExistsError:
                pass  # another request created it meanwhile
            except LogStoreError as exc:
                logger.warning("auto-creating topic %r failed: %s", name, exc)
                entry["error_code"] = errors.error_code_for(exc)
                return entry
        try:
            count = store.partitions(name)
        except LogStoreError as exc:  # deleted meanwhile
            entry["error_code"] = errors.error_code_for(exc)
            return entry
        node = broker.node_id
        for partition in range(count):
            offline = (name, partition) in missing
            entry["partitions"].append({
                "error_code": errors.LEADER_NOT_AVAILABLE if offline else errors.NONE,
                "partition_index": partition,
                "leader_id": -1 if offline else node,
                "leader_epoch": LEADER_EPOCH,
                "replica_nodes": [node],
                "isr_nodes": [] if offline else [node],
                "offline_replicas": [node] if offline else [],
            })
        return entry

    # --- InitProducerId --------------------------------------------------------------------------

    def init_producer_id(self, context: RequestContext, request: dict) -> None:
        """A new producer id, epoch 0. A v3+ request naming the id it has (KIP-360, to bump its
        epoch) gets a new id too: Kafka's clients take whatever id and epoch come back, and a new
        id starts its sequences afresh, as a bumped epoch would."""
        if request.get("transactional_id") is not None:
            # Transactions are not supported: a transactional producer gets a clear error.
            context.respond({"throttle_time_ms": 0, "error_code": errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                             "producer_id": -1, "producer_epoch": -1})
            return
        try:
            producer_id = self.broker.producers.new_producer_id()
        except OSError as exc:
            logger.error("handing out a producer id failed: %s", exc)
            context.respond({"throttle_time_ms": 0, "error_code": errors.KAFKA_STORAGE_ERROR,
                             "producer_id": -1, "producer_epoch": -1})
            return
        context.respond({"throttle_time_ms": 0, "error_code": errors.NONE, "producer_id": producer_id,
                         "producer_epoch": 0})

    # --- OffsetForLeaderEpoch --------------------------------------------------------------------

    def offset_for_leader_epoch(self, context: RequestContext, request: dict) -> None:
        """With a constant leader epoch, every epoch asked about ends at the log end offset."""
        store = self.broker.store
        topics = []
        for topic in request.get("topics") or []:
            partitions = []
            for partition in topic.get("partitions") or []:
                index = partition["partition"]
                try:
                    end_offset = store.get_log(topic["topic"], index).log_end_offset
                    error = errors.NONE
                except LogStoreError as exc:
                    end_offset, error = -1, errors.error_code_for(exc)
                partitions.append({"error_code": error, "partition": index,
                                   "leader_epoch": LEADER_EPOCH if error == errors.NONE else -1,
                                   "end_offset": end_offset})
            topics.append({"topic": topic["topic"], "partitions": partitions})
        context.respond({"throttle_time_ms": 0, "topics": topics})
