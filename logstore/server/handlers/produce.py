"""Produce: records from the wire appended to the store, idempotent producers' retries answered
with their original offsets, and ``acks=-1`` answered from the produce purgatory once fsynced; and
InitProducerId, which hands idempotent producers their ids.

Per partition of a request: the RecordBatch v2 bytes are decoded and validated (``wire_records``),
each batch of an idempotent producer is checked against the producer's last batches
(``producer_state``; a producer id this broker never handed out is UNKNOWN_PRODUCER_ID), and the
records are appended as one append per batch (a Kafka batch stays atomic), with the producer's codec
(a topic with ``compression.type=producer`` stores it). A batch holding records the topic refuses (no
key on a compacted topic, a timestamp outside ``message.timestamp.before/after.max.ms``) is refused
whole, record by record, as Kafka's LogValidator does (KIP-467: ``record_errors``). ``acks=1`` is answered at once. ``acks=-1`` asks the store's group-commit flusher for an
fsync and parks a ``DelayedProduceResponse`` in the store's produce purgatory, which the flusher
completes once the recovery points cover every partition's last offset; after the request's
``timeout_ms`` the partitions not yet covered get REQUEST_TIMED_OUT (their records stay appended
and may still become durable, as in Kafka). ``acks=0`` is never answered; if anything in it failed
the connection is closed, so the client notices (Kafka's rule). Records for an internal topic
(``__consumer_offsets``, ``__transaction_state``) are INVALID_TOPIC_EXCEPTION, as in Kafka.

Transactions: a request with a ``transactional_id`` may carry transactional batches (Kafka's bit 4,
with the producer id and epoch the transaction coordinator handed out; control batches never come
from clients); transactional batches in a request without one refuse the whole request with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka does. A transactional batch keeps the journal's
sequence checks and is appended with its producer block (``ProducerBatch(..., transactional=True)``):
the log checks the producer's epoch and transaction under its lock (INVALID_PRODUCER_EPOCH,
INVALID_TXN_STATE, TRANSACTION_COORDINATOR_FENCED), and a refusal takes the batch's journal line
back. Before the first transactional batch of a producer on a partition, the coordinator is asked
whether the partition is in the producer's open transaction
(``transaction.partition.verification.enable``, KIP-890): a late retry cannot open a transaction
nobody will end. An idempotent non-transactional batch from a producer whose transaction is open on
the partition is INVALID_TXN_STATE (Kafka's rule).
"""

from __future__ import annotations

import logging

from ...errors import LogStoreError
from ...log.log import Log
from ...manager.topics import is_internal_topic
from ...records.batching import ProducerBatch, timestamp_errors
from ...timer.purgatory import DelayedOperation
from ..network.request_context import RequestContext
from ..protocol import errors
from ..wire_records import WireRecordError, decode_produce_columns
from ..wire_records.batch import ATTRIBUTES_AT, TRANSACTIONAL_MASK
from .kafka_apis import Broker
from .producer_state import ProducerIdsExhaustedError

logger = logging.getLogger(__name__)


class DelayedProduceResponse(DelayedOperation):
    """An ``acks=-1`` produce that completes once every ``(log, required_offset)`` is fsynced (the
    log's recovery point covers it), when a log fails or closes, or after ``delay_ms``."""

    def __init__(self, delay_ms: int, waits: list[tuple[tuple[str, int], Log, int]], answer) -> None:
        super().__init__(delay_ms)
        self.waits = waits
        self.answer = answer

    def try_complete(self) -> bool:
        for _key, log, required_offset in self.waits:
            if log.recovery_point < required_offset and not log.failed and not log.closed:
                return False
        return self.force_complete()

    def on_complete(self) -> None:
        outcome = {}
        for key, log, required_offset in self.waits:
            if log.failed or (log.closed and log.recovery_point < required_offset):
                outcome[key] = errors.KAFKA_STORAGE_ERROR
            elif log.recovery_point < required_offset:
                outcome[key] = errors.REQUEST_TIMED_OUT
        self.answer(outcome)


class ProduceHandler:
    """The Produce API (versions 3 and up; older versions are answered UNSUPPORTED_VERSION)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def handle(self, context: RequestContext, request: dict) -> None:
        version = context.api_version
        acks = request.get("acks", -1)
        topics = request.get("topic_data") or []
        transactional_id = request.get("transactional_id")
        refuse = None
        if version < 3:
            refuse = errors.UNSUPPORTED_VERSION  # the pre-v2 record formats are not spoken
        elif transactional_id is None and _has_transactional_batches(topics):
            refuse = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED  # Kafka's answer to such a request
        elif acks not in (-1, 0, 1):
            refuse = errors.INVALID_REQUIRED_ACKS
        responses: list[dict] = []
        waits: list[tuple[tuple[str, int], Log, int]] = []
        failures: list[str] = []
        by_key: dict[tuple[str, int], dict] = {}
        for topic in topics:
            name = topic["name"]
            partitions = []
            for partition in topic.get("partition_data") or []:
                index = partition["index"]
                if refuse is not None:
                    result = _partition_response(index, refuse)
                else:
                    result, log = self._append_partition(name, index, partition.get("records"), version,
                                                         transactional_id)
                    if result["error_code"] != errors.NONE:
                        failures.append(f"{name}-{index}: {errors.NAMES.get(result['error_code'])}")
                    elif acks == -1 and log is not None and result.get("_last_offset") is not None:
                        waits.append(((name, index), log, result["_last_offset"] + 1))
                    result.pop("_last_offset", None)
                partitions.append(result)
                by_key[(name, index)] = result
            responses.append({"name": name, "partition_responses": partitions})
        body = {"responses": responses, "throttle_time_ms": 0}
        if acks == 0:
            if failures:
                context.close(f"an acks=0 produce failed ({'; '.join(failures[:3])})")
            else:
                context.no_response()
            return
        if not waits:
            context.respond(body)
            return

        def answer(outcome: dict) -> None:
            for key, error_code in outcome.items():
                by_key[key]["error_code"] = error_code
            context.respond(body)

        store = self.broker.store
        operation = DelayedProduceResponse(max(0, request.get("timeout_ms", 30000)), waits, answer)
        for _key, log, _required in waits:
            store.waits.flusher.request(log)
        store.waits.produce.try_complete_else_watch(operation, [log.key for _key, log, _required in waits])

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
        except ProducerIdsExhaustedError as exc:
            logger.error("handing out a producer id failed: %s", exc)
            context.respond({"throttle_time_ms": 0, "error_code": errors.UNKNOWN_SERVER_ERROR,
                             "producer_id": -1, "producer_epoch": -1})
            return
        context.respond({"throttle_time_ms": 0, "error_code": errors.NONE, "producer_id": producer_id,
                         "producer_epoch": 0})

    def _append_partition(self, topic: str, partition: int, records, version: int,
                          transactional_id: str | None = None) -> tuple[dict, Log | None]:
        broker = self.broker
        if is_internal_topic(topic):
            # Only the broker writes its own state (the group coordinator, ``__consumer_offsets``):
            # a client's records there would be replayed as commits. Refused whatever the ACLs say.
            return _partition_response(partition, errors.INVALID_TOPIC_EXCEPTION,
                                       f"Cannot append to internal topic {topic}"), None
        try:
            log = broker.store.get_log(topic, partition)
        except LogStoreError as exc:
            return _partition_response(partition, errors.error_code_for(exc)), None
        try:
            batches = decode_produce_columns(records, max_message_bytes=log.config.max_message_bytes,
                                             transactional=transactional_id is not None)
        except WireRecordError as exc:
            logger.info("produce to %s-%d refused: %s", topic, partition, exc)
            return _partition_response(partition, _for_version(exc.error_code, version), str(exc)), log
        if not batches:
            return _partition_response(partition, errors.CORRUPT_MESSAGE, "no record batch"), log
        if len(batches) > 1:
            # Kafka takes exactly one v2 batch per partition of a request; no client sends more.
            return _partition_response(partition, _for_version(errors.INVALID_RECORD, version),
                                       f"{len(batches)} record batches for one partition (one is allowed)"), log
        refusal = _record_errors(log.config, topic, partition, batches[0][1], broker.clock.time_ms(), version)
        if refusal is not None:
            logger.info("produce to %s-%d refused: %s", topic, partition, refusal["error_message"])
            return refusal, log
        first_offset = None
        last_offset = None
        log_append_time_ms = -1
        try:
            for batch, batch_records in batches:
                if batch.producer_id >= 0:
                    outcome = self._append_idempotent(log, topic, partition, batch, batch_records, transactional_id)
                    if isinstance(outcome, dict):
                        return outcome, log
                    base, last, append_time_ms = outcome
                else:
                    info = log.append(batch_records)
                    base, last, append_time_ms = info.first_offset, info.last_offset, info.log_append_time_ms
                first_offset = base if first_offset is None else first_offset
                last_offset = last
                log_append_time_ms = append_time_ms
        except LogStoreError as exc:
            if first_offset is not None:
                logger.warning("produce to %s-%d failed after appending from offset %d: %s", topic, partition,
                               first_offset, exc)
            return _partition_response(partition, _for_version(errors.error_code_for(exc), version), str(exc)), log
        broker.topic_metrics.produced(topic, len(records), last_offset - first_offset + 1)
        result = _partition_response(partition, errors.NONE)
        result["base_offset"] = first_offset
        result["log_append_time_ms"] = log_append_time_ms
        result["log_start_offset"] = log.log_start_offset
        result["_last_offset"] = last_offset
        return result, log

    def _append_idempotent(self, log: Log, topic: str, partition: int, batch, batch_records,
                           transactional_id: str | None = None):
        """Append one batch of an idempotent or transactional producer: (base, last, append
        time), or a response dict for a refused batch. A retried batch returns its first append's
        offsets."""
        producers = self.broker.producers
        producer_id = batch.producer_id
        first_sequence = batch.base_sequence
        last_sequence = (first_sequence + batch.last_offset_delta) % 2**31
        with self.broker.partition_lock(topic, partition):
            verdict = producers.check(topic, partition, producer_id, batch.producer_epoch, first_sequence,
                                      last_sequence)
            if verdict.duplicate is not None:
                logger.info("produce to %s-%d: batch %d..%d of producer %d is a retry; answered with offset %d",
                            topic, partition, first_sequence, last_sequence, producer_id,
                            verdict.duplicate.first_offset)
                return verdict.duplicate.first_offset, verdict.duplicate.last_offset, -1
            if verdict.error_code != errors.NONE:
                return _partition_response(partition, verdict.error_code, verdict.message)
            open_at = log.producer_state.open_transaction(producer_id)
            if batch.attributes & TRANSACTIONAL_MASK:
                if open_at is None:
                    refusal = self._verify(transactional_id, producer_id, batch.producer_epoch, topic, partition)
                    if refusal is not None:
                        return refusal
                prepared = log.prepare(batch_records, producer=ProducerBatch(producer_id, batch.producer_epoch,
                                                                             first_sequence, True))
            elif open_at is not None:
                return _partition_response(partition, errors.INVALID_TXN_STATE,
                                           f"producer {producer_id} has a transaction open on {topic}-{partition} "
                                           f"(from offset {open_at}): a non-transactional batch is refused")
            else:
                prepared = log.prepare(batch_records)
            expected_first = log.log_end_offset
            expected_last = expected_first + len(batch_records) - 1
            producers.will_append(topic, partition, producer_id, batch.producer_epoch, first_sequence,
                                  last_sequence, expected_first, expected_last)
            try:
                info = log.append_prepared(prepared)
            except BaseException:
                # refused by the log (a fenced epoch, a transaction in the wrong state) or failed
                producers.forget(topic, partition, producer_id, batch.producer_epoch, first_sequence)
                raise
            if info.first_offset != expected_first:  # another writer of the store appended meanwhile
                producers.forget(topic, partition, producer_id, batch.producer_epoch, first_sequence)
                producers.will_append(topic, partition, producer_id, batch.producer_epoch, first_sequence,
                                      last_sequence, info.first_offset, info.last_offset)
            return info.first_offset, info.last_offset, info.log_append_time_ms

    def _verify(self, transactional_id: str | None, producer_id: int, producer_epoch: int, topic: str,
                partition: int) -> dict | None:
        """KIP-890's check before a producer's first transactional batch on a partition: is the
        partition in the producer's open transaction? None when it is (or when there is no
        coordinator to ask, or ``transaction.partition.verification.enable`` is false), else the
        refusal, with the codes Kafka gives Produce clients for the coordinator's answers."""
        verify = getattr(getattr(self.broker, "txn_coordinator", None), "verify_partitions", None)
        if verify is None or not getattr(self.broker.config, "transaction_partition_verification_enable", True):
            return None
        code = verify(transactional_id, producer_id, producer_epoch, [(topic, partition)]).get(
            (topic, partition), errors.INVALID_TXN_STATE)
        if code == errors.NONE:
            return None
        code = _VERIFICATION_CODES.get(code, code)
        return _partition_response(partition, code, f"partition {topic}-{partition} is not in an ongoing transaction "
                                                    f"of producer {producer_id} ({errors.NAMES.get(code, code)})")


# What a produce client gets for the coordinator's verification answers (Kafka's mapping for
# Produce below v11): fenced -> the epoch error producers handle; "abortable" -> INVALID_TXN_STATE;
# a transition in progress or no coordinator -> NOT_ENOUGH_REPLICAS, which clients retry without
# refreshing metadata.
_VERIFICATION_CODES = {
    errors.PRODUCER_FENCED: errors.INVALID_PRODUCER_EPOCH,
    errors.TRANSACTION_ABORTABLE: errors.INVALID_TXN_STATE,
    errors.CONCURRENT_TRANSACTIONS: errors.NOT_ENOUGH_REPLICAS,
    errors.COORDINATOR_LOAD_IN_PROGRESS: errors.NOT_ENOUGH_REPLICAS,
    errors.COORDINATOR_NOT_AVAILABLE: errors.NOT_ENOUGH_REPLICAS,
    errors.NOT_COORDINATOR: errors.NOT_ENOUGH_REPLICAS,
}


def _has_transactional_batches(topics) -> bool:
    """Whether a partition's (first) batch has the transactional bit: one byte looked at per
    partition (a request holds one batch per partition)."""
    at = ATTRIBUTES_AT + 1  # the low byte of the big-endian attributes
    for topic in topics:
        for partition in topic.get("partition_data") or ():
            records = partition.get("records")
            if records is not None and len(records) > at and records[at] & TRANSACTIONAL_MASK:
                return True
    return False


def _record_errors(config, topic: str, partition: int, records, now_ms: int, version: int) -> dict | None:
    """The answer refusing a batch record by record (KIP-467), as Kafka's LogValidator does: a
    record without a key on a compacted topic (INVALID_RECORD), a CreateTime timestamp outside
    ``message.timestamp.before/after.max.ms`` (INVALID_TIMESTAMP, which wins when both occur). Each
    refused record gets a ``record_errors`` entry (its index in the batch and why); nothing of the
    batch is appended. None when every record passes."""
    bounds = config.timestamp_bounds_ms
    if not config.compact and bounds is None:
        return None
    found: dict[int, tuple[int, str]] = {}
    if config.compact:
        message = f"Compacted topic cannot accept message without key in topic partition {topic}-{partition}."
        for index, key in enumerate(records.keys):
            if key is None:
                found[index] = (errors.INVALID_RECORD, message)
    if bounds is not None:
        for index, message in timestamp_errors(records.timestamps, bounds, now_ms, topic):
            found.setdefault(index, (errors.INVALID_TIMESTAMP, message))
    if not found:
        return None
    record_errors = [{"batch_index": index, "batch_index_error_message": message}
                     for index, (_code, message) in sorted(found.items())]
    if any(code == errors.INVALID_TIMESTAMP for code, _message in found.values()):
        code, summary = errors.INVALID_TIMESTAMP, "One or more records have been rejected due to invalid timestamp"
    else:
        shown = ", ".join(f"RecordError(batchIndex={entry['batch_index']}, message='{entry['batch_index_error_message']}')"
                          for entry in record_errors[:3])
        code = errors.INVALID_RECORD
        summary = (f"One or more records have been rejected due to {len(record_errors)} record errors in total, "
                   f"and only showing the first three errors at most: [{shown}]")
    response = _partition_response(partition, _for_version(code, version), summary)
    response["record_errors"] = record_errors
    return response


def _for_version(error_code: int, version: int) -> int:
    """INVALID_RECORD exists from Produce v8 only; older clients get CORRUPT_MESSAGE for it."""
    return errors.CORRUPT_MESSAGE if error_code == errors.INVALID_RECORD and version < 8 else error_code


def _partition_response(index: int, error_code: int, message: str | None = None) -> dict:
    return {"index": index, "error_code": error_code, "base_offset": -1, "log_append_time_ms": -1,
            "log_start_offset": -1, "record_errors": [], "error_message": message if error_code else None}
