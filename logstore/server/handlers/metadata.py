"""Metadata: the topics and partitions this broker leads, and the broker itself, as clients see them.

One broker leads every partition (leader epoch constant, replicas and in-sync replicas itself); a
partition whose data dir is offline is answered LEADER_NOT_AVAILABLE with no leader. A request
naming an unknown topic creates it when both the request and ``auto.create.topics.enable`` allow it,
with ``num.partitions`` partitions, unless it is an internal topic (``is_internal`` marks those). The
answer names the broker by the address advertised on the listener the request came in on.
"""

from __future__ import annotations

import logging

from ...errors import InvalidTopicError, LogStoreError, TopicExistsError
from ...manager.topics import is_internal_topic
from ..network.request_context import RequestContext
from ..protocol import errors
from ..protocol.messages import NOT_REQUESTED
from .kafka_apis import LEADER_EPOCH, Broker

logger = logging.getLogger(__name__)


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
            "cluster_authorized_operations": NOT_REQUESTED,
        })

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
