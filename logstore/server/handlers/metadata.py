"""Metadata, DescribeCluster and DescribeTopicPartitions: the topics and partitions this broker leads,
and the broker itself, as clients see them.

One broker leads every partition (leader epoch constant, replicas and in-sync replicas itself); a
partition whose data dir is offline is answered LEADER_NOT_AVAILABLE with no leader. A request
naming an unknown topic creates it when both the request and ``auto.create.topics.enable`` allow it,
with ``num.partitions`` partitions, unless it is an internal topic (``is_internal`` marks those). The
answer names the broker by the address advertised on the listener the request came in on.

DescribeCluster (KIP-700) names this one broker, which is also the controller; asked for the
controllers (v1's endpoint type 2) it answers UNSUPPORTED_VERSION, as a Kafka broker does.
DescribeTopicPartitions (KIP-966) lists the named topics (or every topic) sorted by name, at most
``min(response_partition_limit, max.request.partition.size.limit)`` partitions per answer, with a
cursor to continue from; topics have no ids here (the zero UUID). The authorized-operations fields
hold every operation of the resource; with ACLs on, the authorization layer puts the principal's.
"""

from __future__ import annotations

import logging
import uuid

from ...errors import InvalidTopicError, LogStoreError, TopicExistsError
from ...manager.topics import is_internal_topic
from ..network.request_context import RequestContext
from ..protocol import errors
from ..protocol.messages import NOT_REQUESTED
from .kafka_apis import LEADER_EPOCH, Broker

logger = logging.getLogger(__name__)


# Every operation of a cluster and of a topic (AclEntry.supportedOperations): what a Kafka broker
# without an authorizer reports as allowed. The authorization layer replaces them when ACLs are on.
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
BROKER_ENDPOINTS, CONTROLLER_ENDPOINTS = 1, 2
NO_TOPIC_ID = uuid.UUID(int=0)


class MetadataHandler:
    """Metadata over a ``Broker``'s store."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

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
            # Asked for (v8+): every operation, as a Kafka broker without an authorizer answers; with
            # ACLs on, the authorization layer puts the principal's instead.
            "cluster_authorized_operations": (CLUSTER_OPERATIONS if request.get("include_cluster_authorized_operations")
                                              else NOT_REQUESTED),
        })
        if request.get("include_topic_authorized_operations"):
            for topic in topics:
                if topic["error_code"] == errors.NONE:
                    topic["topic_authorized_operations"] = TOPIC_OPERATIONS

    def _topic_metadata(self, name: str, allow_create: bool, known: set[str], missing: set) -> dict:
        broker = self.broker
        store = broker.store
        entry = {"error_code": errors.NONE, "name": name, "is_internal": is_internal_topic(name), "partitions": [],
                 "topic_authorized_operations": NOT_REQUESTED}
        if name not in known:
            # An internal topic is created by its owner (the group coordinator makes
            # ``__consumer_offsets`` at start-up; ``__transaction_state`` is reserved), never by a
            # client's Metadata request, which would give it the wrong partition count and config.
            if not allow_create or is_internal_topic(name):
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

    # --- DescribeCluster -------------------------------------------------------------------------

    def describe_cluster(self, context: RequestContext, request: dict) -> None:
        broker = self.broker
        body = {"throttle_time_ms": 0, "error_code": errors.NONE, "error_message": None,
                "endpoint_type": BROKER_ENDPOINTS, "cluster_id": broker.cluster_id, "controller_id": broker.node_id,
                "brokers": [], "cluster_authorized_operations": NOT_REQUESTED}
        if request.get("endpoint_type", BROKER_ENDPOINTS) != BROKER_ENDPOINTS:
            body["error_code"] = errors.UNSUPPORTED_VERSION
            body["error_message"] = "The broker does not handle the DescribeCluster request for controller endpoints"
            body["endpoint_type"] = request.get("endpoint_type")
            context.respond(body)
            return
        entry = broker.broker_entry(context)
        body["brokers"] = [{"broker_id": entry["node_id"], "host": entry["host"], "port": entry["port"],
                            "rack": entry["rack"]}]
        if request.get("include_cluster_authorized_operations"):
            body["cluster_authorized_operations"] = CLUSTER_OPERATIONS
        context.respond(body)

    # --- DescribeTopicPartitions -----------------------------------------------------------------

    def describe_topic_partitions(self, context: RequestContext, request: dict) -> None:
        broker = self.broker
        store = broker.store
        requested = [topic["name"] for topic in request.get("topics") or ()]
        names = sorted(set(requested)) if requested else sorted(store.topics())
        cursor = request.get("cursor")
        body = {"throttle_time_ms": 0, "topics": [], "next_cursor": None}
        if cursor is not None and requested and cursor["topic_name"] not in names:
            body["topics"] = [self._described_topic(name, errors.INVALID_REQUEST) for name in names]
            context.respond(body)
            return
        if cursor is not None:
            names = [name for name in names if name >= cursor["topic_name"]]
        budget = max(1, min(request.get("response_partition_limit", 2000), broker.config.max_request_partition_size_limit))
        known = set(store.topics())
        missing = set(store.missing_partitions)
        node = broker.node_id
        for position, name in enumerate(names):
            if name not in known:
                body["topics"].append(self._described_topic(name, errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            try:
                count = store.partitions(name)
            except LogStoreError as exc:  # deleted meanwhile
                body["topics"].append(self._described_topic(name, errors.error_code_for(exc)))
                continue
            first = cursor["partition_index"] if cursor is not None and name == cursor["topic_name"] else 0
            if budget == 0:
                body["next_cursor"] = {"topic_name": name, "partition_index": first}
                break
            last = min(count, first + budget)
            entry = self._described_topic(name, errors.NONE)
            for partition in range(max(first, 0), last):
                offline = (name, partition) in missing
                entry["partitions"].append({
                    "error_code": errors.LEADER_NOT_AVAILABLE if offline else errors.NONE,
                    "partition_index": partition, "leader_id": -1 if offline else node,
                    "leader_epoch": LEADER_EPOCH, "replica_nodes": [node], "isr_nodes": [] if offline else [node],
                    "eligible_leader_replicas": None, "last_known_elr": None,
                    "offline_replicas": [node] if offline else []})
            body["topics"].append(entry)
            budget -= max(last - max(first, 0), 0)
            if last < count:
                body["next_cursor"] = {"topic_name": name, "partition_index": last}
                break
        context.respond(body)

    @staticmethod
    def _described_topic(name: str, error_code: int) -> dict:
        return {"error_code": error_code, "name": name, "topic_id": NO_TOPIC_ID, "is_internal": is_internal_topic(name),
                "partitions": [],
                "topic_authorized_operations": TOPIC_OPERATIONS if error_code == errors.NONE else NOT_REQUESTED}
