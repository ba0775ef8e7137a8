"""The transaction APIs on the wire: Kafka's requests mapped onto ``logstore.txn``'s coordinator.

``TxnHandlers`` owns the translation between the wire and ``TransactionCoordinator`` for
InitProducerId with a transactional id, AddPartitionsToTxn (v0-3, the clients' form; v4+, the
brokers' batched form whose ``VerifyOnly`` transactions only ask whether partitions are in the
transaction), AddOffsetsToTxn, EndTxn, FindCoordinator for transaction keys, DescribeTransactions
and ListTransactions; and DescribeProducers, which reads each partition's producer state (the log's,
for epochs and open transactions, and the server's journal, for the last sequence).

What it decides itself: whether the partitions an AddPartitionsToTxn names exist (Kafka adds none
when one does not: the unknown ones get UNKNOWN_TOPIC_OR_PARTITION, the others
OPERATION_NOT_ATTEMPTED), and the code each request version understands (PRODUCER_FENCED becomes
INVALID_PRODUCER_EPOCH below the version that introduced it; TRANSACTION_ABORTABLE becomes
INVALID_TXN_STATE before AddPartitionsToTxn v5). Everything about a transaction's state is the
coordinator's. ACLs are checked before these handlers run (``security.authorization``).

The coordinator answers once its ``__transaction_state`` record is fsynced, so these handlers hold
their handler thread for one fsync of a small record (the group coordinator's writes do the same);
the markers an EndTxn leads to are written and waited for off the handler thread
(``txn.markers.StoreMarkerWriter``).

Back-to-back transactions: EndTxn is answered once the decision is durable, and the markers and the
Complete* record follow, a millisecond or two later. A producer's next AddPartitionsToTxn or
AddOffsetsToTxn that arrives in that window would get CONCURRENT_TRANSACTIONS, and its client would
back off (librdkafka and Kafka's Java client for 20 ms or more) with the new transaction's records
waiting. Such a request is instead parked: tried again on the store's scheduler every
``CONCURRENT_RETRY_MS`` until the previous transaction completed, for at most
about ``CONCURRENT_WAIT_MS``, and only then answered CONCURRENT_TRANSACTIONS (the answer a client would
get from retrying itself; no thread waits meanwhile).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from ...errors import LogStoreError, ShutdownError
from ...txn import errors as txn_errors
from ...txn.coordinator import TransactionCoordinator
from ..network.request_context import RequestContext
from ..protocol import errors
from ..protocol.messages import API_KEYS
from .groups import TRANSACTION_KEY_TYPE, GroupHandlers
from .kafka_apis import Broker, KafkaApis
from .produce import ProduceHandler
from .producer_state import ProducerIdsExhaustedError

logger = logging.getLogger(__name__)

FIRST_VERSION_WITH_TRANSACTION_ABORTABLE = 5  # AddPartitionsToTxn (KIP-890)
CONCURRENT_RETRY_MS = 1  # how often a parked AddPartitionsToTxn/AddOffsetsToTxn is tried again
CONCURRENT_WAIT_MS = 100  # how long it is parked before CONCURRENT_TRANSACTIONS is the answer


def _for_version(code: int, api: str, version: int) -> int:
    code = txn_errors.fenced_for_version(code, api, version)
    if code == txn_errors.TRANSACTION_ABORTABLE and not (
            api == "AddPartitionsToTxn" and version >= FIRST_VERSION_WITH_TRANSACTION_ABORTABLE):
        return txn_errors.INVALID_TXN_STATE
    return code


class TxnHandlers:
    """The transaction APIs of one server, over its transaction coordinator. ``register(apis)``
    plugs them in; FindCoordinator's group keys are passed on to ``groups``, InitProducerId without
    a transactional id to ``produce``."""

    def __init__(self, broker: Broker, coordinator: TransactionCoordinator, groups: GroupHandlers,
                 produce: ProduceHandler) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self.groups = groups
        self.produce = produce

    def register(self, apis: KafkaApis) -> None:
        for name, handler in (("InitProducerId", self.init_producer_id), ("FindCoordinator", self.find_coordinator),
                              ("AddPartitionsToTxn", self.add_partitions_to_txn),
                              ("AddOffsetsToTxn", self.add_offsets_to_txn), ("EndTxn", self.end_txn),
                              ("DescribeTransactions", self.describe_transactions),
                              ("ListTransactions", self.list_transactions),
                              ("DescribeProducers", self.describe_producers)):
            apis.register(API_KEYS[name], handler)

    # --- InitProducerId --------------------------------------------------------------------------

    def init_producer_id(self, context: RequestContext, request: dict) -> None:
        transactional_id = request.get("transactional_id")
        if transactional_id is None:
            self.produce.init_producer_id(context, request)
            return
        try:
            result = self.coordinator.init_producer_id(
                transactional_id, request.get("transaction_timeout_ms", 0), request.get("producer_id", -1),
                request.get("producer_epoch", -1))
            code, producer_id, epoch = result.error_code, result.producer_id, result.producer_epoch
        except (OSError, ProducerIdsExhaustedError) as exc:  # the producer id allocator's
            logger.error("handing out a producer id for transactional id %r failed: %s", transactional_id, exc)
            code = errors.KAFKA_STORAGE_ERROR if isinstance(exc, OSError) else errors.UNKNOWN_SERVER_ERROR
            producer_id, epoch = -1, -1
        context.respond({"throttle_time_ms": 0,
                         "error_code": _for_version(code, "InitProducerId", context.api_version),
                         "producer_id": producer_id if code == errors.NONE else -1,
                         "producer_epoch": epoch if code == errors.NONE else -1})

    # --- FindCoordinator -------------------------------------------------------------------------

    def find_coordinator(self, context: RequestContext, request: dict) -> None:
        """Transaction keys (type 1): this broker, once the coordinator is active. Other key types
        are the group handlers'."""
        if request.get("key_type", 0) != TRANSACTION_KEY_TYPE:
            self.groups.find_coordinator(context, request)
            return
        if context.api_version >= 4:
            context.respond({"throttle_time_ms": 0, "coordinators": [
                {"key": key, **self._coordinator(key, context)} for key in request.get("coordinator_keys") or []]})
        else:
            context.respond({"throttle_time_ms": 0, **self._coordinator(request.get("key", ""), context)})

    def _coordinator(self, transactional_id: str, context: RequestContext) -> dict:
        if not transactional_id:
            error, message = errors.INVALID_REQUEST, "a transactional id must not be empty"
        elif self.coordinator.active:
            host, port = self.broker.endpoint(context)
            return {"error_code": errors.NONE, "error_message": None, "node_id": self.broker.node_id,
                    "host": host, "port": port}
        else:
            error, message = errors.COORDINATOR_NOT_AVAILABLE, "the transaction coordinator is not running"
        return {"error_code": error, "error_message": message, "node_id": -1, "host": "", "port": -1}

    # --- parking while the previous transaction completes ----------------------------------------

    def _settled(self, context: RequestContext, attempt: Callable[[], tuple[bool, dict]]) -> None:
        """Answer ``context`` with the body of ``attempt()`` -> (concurrent, body), tried again on
        the scheduler while ``concurrent``, at most ``CONCURRENT_WAIT_MS // CONCURRENT_RETRY_MS``
        times (counted, not timed: the bound holds whatever clock the server runs on)."""
        scheduler = self.broker.store.scheduler
        left = [CONCURRENT_WAIT_MS // CONCURRENT_RETRY_MS if scheduler.threaded else 0]

        def run() -> None:
            concurrent, body = attempt()
            if concurrent and left[0] > 0 and not context.connection.closed:
                left[0] -= 1
                try:
                    scheduler.schedule("txn-concurrent-retry", run, CONCURRENT_RETRY_MS)
                    return
                except ShutdownError:
                    pass  # the store is closing: the answer is the one there is
            context.respond(body)

        run()

    # --- AddPartitionsToTxn ----------------------------------------------------------------------

    def add_partitions_to_txn(self, context: RequestContext, request: dict) -> None:
        version = context.api_version
        if version <= 3:
            def attempt() -> tuple[bool, dict]:
                results = self._add_partitions(request.get("v3_and_below_transactional_id", ""),
                                               request.get("v3_and_below_producer_id", -1),
                                               request.get("v3_and_below_producer_epoch", -1),
                                               request.get("v3_and_below_topics") or [], False, version)
                concurrent = any(partition["partition_error_code"] == txn_errors.CONCURRENT_TRANSACTIONS
                                 for topic in results for partition in topic["results_by_partition"])
                return concurrent, {"throttle_time_ms": 0, "results_by_topic_v3_and_below": results}
            self._settled(context, attempt)
            return
        answers = []
        for transaction in request.get("transactions") or []:
            transactional_id = transaction.get("transactional_id", "")
            answers.append({"transactional_id": transactional_id, "topic_results": self._add_partitions(
                transactional_id, transaction.get("producer_id", -1), transaction.get("producer_epoch", -1),
                transaction.get("topics") or [], bool(transaction.get("verify_only")), version)})
        context.respond({"throttle_time_ms": 0, "error_code": errors.NONE, "results_by_transaction": answers})

    def _add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int, topics: list,
                        verify_only: bool, version: int) -> list[dict]:
        wanted = [(topic["name"], index) for topic in topics for index in topic.get("partitions") or ()]
        unknown = set() if verify_only else {partition for partition in wanted if not self._exists(*partition)}
        if unknown:
            codes = {partition: errors.UNKNOWN_TOPIC_OR_PARTITION if partition in unknown
                     else errors.OPERATION_NOT_ATTEMPTED for partition in wanted}
        elif verify_only:
            codes = self.coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, wanted)
        else:
            codes = self.coordinator.add_partitions(transactional_id, producer_id, producer_epoch, wanted)
        by_topic: dict[str, list[dict]] = {}
        for topic, index in wanted:
            by_topic.setdefault(topic, []).append({
                "partition_index": index,
                "partition_error_code": _for_version(codes.get((topic, index), errors.NONE), "AddPartitionsToTxn",
                                                     version)})
        return [{"name": topic, "results_by_partition": partitions} for topic, partitions in by_topic.items()]

    def _exists(self, topic: str, partition: int) -> bool:
        store = self.broker.store
        try:
            return 0 <= partition < store.partitions(topic)
        except LogStoreError:
            return False

    # --- AddOffsetsToTxn, EndTxn -----------------------------------------------------------------

    def add_offsets_to_txn(self, context: RequestContext, request: dict) -> None:
        def attempt() -> tuple[bool, dict]:
            code = self.coordinator.add_offsets(request["transactional_id"], request["producer_id"],
                                                request["producer_epoch"], request["group_id"])
            return code == txn_errors.CONCURRENT_TRANSACTIONS, {
                "throttle_time_ms": 0, "error_code": _for_version(code, "AddOffsetsToTxn", context.api_version)}
        self._settled(context, attempt)

    def end_txn(self, context: RequestContext, request: dict) -> None:
        code = self.coordinator.end_txn(request["transactional_id"], request["producer_id"],
                                        request["producer_epoch"], bool(request["committed"]))
        context.respond({"throttle_time_ms": 0, "error_code": _for_version(code, "EndTxn", context.api_version)})

    # --- DescribeTransactions, ListTransactions --------------------------------------------------

    def describe_transactions(self, context: RequestContext, request: dict) -> None:
        states = []
        for entry in self.coordinator.describe_transactions(request.get("transactional_ids") or []):
            states.append({"error_code": entry.error_code, "transactional_id": entry.transactional_id,
                           "transaction_state": entry.state, "transaction_timeout_ms": entry.timeout_ms,
                           "transaction_start_time_ms": entry.start_timestamp_ms, "producer_id": entry.producer_id,
                           "producer_epoch": entry.producer_epoch,
                           "topics": [{"topic": topic, "partitions": partitions}
                                      for topic, partitions in entry.topics.items()]})
        context.respond({"throttle_time_ms": 0, "transaction_states": states})

    def list_transactions(self, context: RequestContext, request: dict) -> None:
        result = self.coordinator.list_transactions(request.get("state_filters") or [],
                                                    request.get("producer_id_filters") or [],
                                                    request.get("duration_filter", -1))
        context.respond({"throttle_time_ms": 0, "error_code": result.error_code,
                         "unknown_state_filters": result.unknown_state_filters,
                         "transaction_states": [{"transactional_id": listing.transactional_id,
                                                 "producer_id": listing.producer_id,
                                                 "transaction_state": listing.state}
                                                for listing in result.transactions]})

    # --- DescribeProducers -----------------------------------------------------------------------

    def describe_producers(self, context: RequestContext, request: dict) -> None:
        topics = []
        for topic in request.get("topics") or []:
            name = topic["name"]
            topics.append({"name": name, "partitions": [self._producers(name, index)
                                                        for index in topic.get("partition_indexes") or ()]})
        context.respond({"throttle_time_ms": 0, "topics": topics})

    def _producers(self, topic: str, partition: int) -> dict:
        """One partition's active producers: the journal's (idempotent and transactional batches,
        with their last sequence) merged with the log's producer state (coordinator epoch, the
        first offset of an open transaction)."""
        try:
            log = self.broker.store.get_log(topic, partition)
        except LogStoreError as exc:
            return {"partition_index": partition, "error_code": errors.error_code_for(exc),
                    "error_message": str(exc), "active_producers": []}
        producers: dict[int, dict[str, Any]] = {}
        for producer_id, epoch, last_sequence, last_append_ms in self.broker.producers.producers_on(topic, partition):
            producers[producer_id] = {"producer_id": producer_id, "producer_epoch": epoch,
                                      "last_sequence": last_sequence, "last_timestamp": last_append_ms,
                                      "coordinator_epoch": -1, "current_txn_start_offset": -1}
        state = getattr(log, "producer_state", None)
        for entry in (state.entries() if state is not None else ()):
            known = producers.setdefault(entry.producer_id, {"producer_id": entry.producer_id, "last_sequence": -1})
            known["producer_epoch"] = max(entry.epoch, known.get("producer_epoch", -1))
            known["last_timestamp"] = entry.last_timestamp_ms
            known["coordinator_epoch"] = entry.coordinator_epoch
            known["current_txn_start_offset"] = -1 if entry.txn_first_offset is None else entry.txn_first_offset
        return {"partition_index": partition, "error_code": errors.NONE, "error_message": None,
                "active_producers": [producers[producer_id] for producer_id in sorted(producers)]}
