"""Produce requests from accumulator batches, and their responses applied back to the batches.

What it owns (the part of Kafka's Sender that is bytes and bookkeeping, no threads, no sockets):
- ``produce_request(batches, acks, timeout_ms)``: one Produce request body for batches bound for one
  broker, each batch encoded as a Kafka RecordBatch v2 (``wire_encode.encode_produce_batch``), grouped
  by topic;
- ``apply_response(batches, body)``: each batch's outcome from the response: completed with its base
  offset (futures resolved), to be retried (a retriable error, attempts left), or failed with a
  ``BrokerResponseError`` naming Kafka's error. With ``acks=0`` there is no response: the batches
  complete with offset -1, as Kafka's producer reports them.

The sender thread that drives these (ready, drain, send, poll, retry with backoff) is the next step
of issue 16.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, NamedTuple

from ..server import errors as kafka_errors
from ..server.wire_encode import encode_produce_batch
from .accumulator import ProducerBatch
from .errors import BrokerResponseError

# Kafka's retriable produce errors: the batch may be sent again (to the same or a new leader).
# NETWORK_EXCEPTION also stands for a partition missing from a response (or a connection lost).
RETRIABLE = frozenset({
    kafka_errors.CORRUPT_MESSAGE, kafka_errors.UNKNOWN_TOPIC_OR_PARTITION, kafka_errors.LEADER_NOT_AVAILABLE,
    kafka_errors.NOT_LEADER_OR_FOLLOWER, kafka_errors.REQUEST_TIMED_OUT, kafka_errors.NETWORK_EXCEPTION,
    kafka_errors.COORDINATOR_LOAD_IN_PROGRESS, kafka_errors.NOT_ENOUGH_REPLICAS,
    kafka_errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND})


class Outcome(NamedTuple):
    """What a response says about one batch: ``retry`` (send it again) or done (completed, or
    failed with ``error``)."""

    batch: ProducerBatch
    retry: bool
    error: BrokerResponseError | None


def produce_request(batches: Iterable[ProducerBatch], acks: int, timeout_ms: int, producer_id: int = -1,
                    producer_epoch: int = -1) -> dict:
    """The Produce request body carrying ``batches`` (at most one per partition). With a
    ``producer_id`` (an idempotent producer) each batch carries it, the epoch and its
    ``base_sequence``, so the broker stores a retried batch once."""
    if acks not in (0, 1, -1):
        raise ValueError(f"acks must be 0, 1 or -1 (all), got {acks!r}")
    by_topic: dict[str, list] = defaultdict(list)
    for batch in batches:
        records = encode_produce_batch(batch.records, producer_id=producer_id, producer_epoch=producer_epoch,
                                       base_sequence=batch.base_sequence if producer_id >= 0 else -1)
        by_topic[batch.topic].append({"index": batch.partition, "records": records})
    return {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": partitions} for topic, partitions in by_topic.items()]}


def apply_response(batches: Iterable[ProducerBatch], body: dict | None, retries_left) -> list[Outcome]:
    """Complete, fail or mark for retry each of ``batches`` from the Produce response ``body`` (None:
    an ``acks=0`` request, which has no response). ``retries_left(batch)`` says whether a retriable
    error may be retried. Completed and failed batches have their futures resolved; the caller
    deallocates them (and re-enqueues the retried ones)."""
    results = {}
    if body is not None:
        for topic in body["responses"]:
            for partition in topic["partition_responses"]:
                results[(topic["name"], partition["index"])] = partition
    outcomes = []
    for batch in batches:
        if body is None:
            batch.complete(-1)
            outcomes.append(Outcome(batch, False, None))
            continue
        result = results.get((batch.topic, batch.partition))
        code = kafka_errors.NETWORK_EXCEPTION if result is None else result["error_code"]
        if code == kafka_errors.NONE:
            batch.complete(result["base_offset"], result.get("log_append_time_ms", -1))
            outcomes.append(Outcome(batch, False, None))
        elif code in RETRIABLE and retries_left(batch):
            outcomes.append(Outcome(batch, True, None))
        else:
            name = kafka_errors.NAMES.get(code, f"error {code}")
            message = (result or {}).get("error_message") or ""
            error = BrokerResponseError(f"producing to {batch.topic}-{batch.partition} failed: {name}"
                                        f"{': ' + message if message else ''}", code, name)
            batch.fail(error)
            outcomes.append(Outcome(batch, False, error))
    return outcomes
