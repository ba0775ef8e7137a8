"""Produce requests from accumulator batches, and their responses applied back to the batches.

What it owns (the part of Kafka's Sender that is bytes and bookkeeping, no threads, no sockets):
- ``produce_request(batches, acks, timeout_ms, ..., compression=codec)``: one Produce request body
  for batches bound for one broker, each batch encoded as a Kafka RecordBatch v2
  (``wire_records.encode_produce_batch``, compressed with the codec given), grouped by topic; an
  idempotent producer's batches carry their producer id, epoch and base sequence, a transactional
  producer's the transactional bit and its transactional id;
- ``partition_results(batches, body)``: each batch's error code and partition response (a
  partition missing from the response, or a request never answered, is NETWORK_EXCEPTION);
- ``apply_response(batches, body)``: each batch's outcome from the response: completed with its base
  offset (futures resolved), to be retried (a retriable error, attempts left), or failed with a
  ``BrokerResponseError`` naming Kafka's error. With ``acks=0`` there is no response: the batches
  complete with offset -1, as Kafka's producer reports them;
- ``compression_codec(name)``: ``compression.type`` as a codec id, refused when unknown or when this
  process cannot compress with it (``logstore.server.wire_records.compression``);
- ``DeliveryTimeoutError``: what a record's future raises when ``delivery.timeout.ms`` passed before
  the broker acknowledged it.

The sender thread that drives these (ready, drain, send, poll, retry with backoff) is ``sender``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable, NamedTuple

from ..server.protocol import errors as kafka_errors
from ..server.wire_records.compression import AVAILABLE_CODECS, CODEC_NAMES
from ..server.wire_records.encode import encode_produce_batch
from .accumulator import ProducerBatch
from .errors import BrokerResponseError, NetworkError

# Kafka's retriable produce errors: the batch may be sent again (to the same or a new leader).
# NETWORK_EXCEPTION also stands for a partition missing from a response (or a connection lost).
RETRIABLE = frozenset({
    kafka_errors.CORRUPT_MESSAGE, kafka_errors.UNKNOWN_TOPIC_OR_PARTITION, kafka_errors.LEADER_NOT_AVAILABLE,
    kafka_errors.NOT_LEADER_OR_FOLLOWER, kafka_errors.REQUEST_TIMED_OUT, kafka_errors.NETWORK_EXCEPTION,
    kafka_errors.COORDINATOR_LOAD_IN_PROGRESS, kafka_errors.NOT_ENOUGH_REPLICAS,
    kafka_errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND})


class DeliveryTimeoutError(NetworkError, TimeoutError):
    """A record was not acknowledged within ``delivery.timeout.ms`` of its send, waiting in the
    accumulator or being retried (Kafka's ``TimeoutException`` for an expired batch). A record
    that was in a request when it expired may still have been stored."""


_CODECS_BY_NAME = {name: codec for codec, name in CODEC_NAMES.items()}


def compression_codec(name: object) -> int:
    """The codec id of ``compression.type`` ``name`` (none, gzip, snappy, lz4, zstd). ``ValueError``
    names the value when it is no codec, or one this process cannot compress with (snappy, lz4
    and zstd need the ``server`` extra's ``cramjam``)."""
    if not isinstance(name, str) or name.lower() not in _CODECS_BY_NAME:
        raise ValueError(f"compression.type must be one of {', '.join(_CODECS_BY_NAME)}, got {name!r}")
    codec = _CODECS_BY_NAME[name.lower()]
    if codec not in AVAILABLE_CODECS:
        raise ValueError(f"compression.type {name!r} is not available here: it needs the cramjam package "
                         "(pip install 'kafka-logstore[server]')")
    return codec


class Outcome(NamedTuple):
    """What a response says about one batch: ``retry`` (send it again) or done (completed, or
    failed with ``error``)."""

    batch: ProducerBatch
    retry: bool
    error: BrokerResponseError | None


def produce_request(batches: Iterable[ProducerBatch], acks: int, timeout_ms: int, producer_id: int = -1,
                    producer_epoch: int = -1, *, compression: int = 0,
                    transactional_id: str | None = None) -> dict[str, Any]:
    """The Produce request body carrying ``batches`` (at most one per partition), their records
    compressed with codec ``compression``. An idempotent producer's batch carries a producer id,
    epoch and ``base_sequence``, so the broker stores a retried batch once: its own
    (``batch.producer_id``, given at its first send) or else ``producer_id``/``producer_epoch``.
    A transactional producer's (``transactional_id``) batches have the transactional bit set."""
    if acks not in (0, 1, -1):
        raise ValueError(f"acks must be 0, 1 or -1 (all), got {acks!r}")
    if compression not in CODEC_NAMES:
        raise ValueError(f"compression must be a codec id in {sorted(CODEC_NAMES)}, got {compression!r}")
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for batch in batches:
        pid, epoch = ((batch.producer_id, batch.producer_epoch) if batch.producer_id >= 0
                      else (producer_id, producer_epoch))
        records = encode_produce_batch(batch.records, producer_id=pid, producer_epoch=epoch,
                                       base_sequence=batch.base_sequence if pid >= 0 else -1, compression=compression,
                                       transactional=transactional_id is not None)
        by_topic[batch.topic].append({"index": batch.partition, "records": records})
    return {"transactional_id": transactional_id, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": partitions} for topic, partitions in by_topic.items()]}


def partition_results(batches: Iterable[ProducerBatch], body: dict[str, Any]
                      ) -> list[tuple[ProducerBatch, int, dict[str, Any] | None]]:
    """``(batch, error code, partition response)`` for each of ``batches`` from the Produce response
    ``body``; a partition the response does not answer gets NETWORK_EXCEPTION (and None)."""
    results: dict[tuple[str, int], dict[str, Any]] = {}
    for topic in body["responses"]:
        for partition in topic["partition_responses"]:
            results[(topic["name"], partition["index"])] = partition
    answered: list[tuple[ProducerBatch, int, dict[str, Any] | None]] = []
    for batch in batches:
        result = results.get((batch.topic, batch.partition))
        answered.append((batch, kafka_errors.NETWORK_EXCEPTION if result is None else result["error_code"], result))
    return answered


def response_error(batch: ProducerBatch, code: int, result: dict[str, Any] | None) -> BrokerResponseError:
    """The ``BrokerResponseError`` a batch fails with when the broker refused it with ``code``."""
    name = kafka_errors.NAMES.get(code, f"error {code}")
    message = (result or {}).get("error_message") or ""
    return BrokerResponseError(f"producing to {batch.topic}-{batch.partition} failed: {name}"
                               f"{': ' + message if message else ''}", code, name)


def apply_response(batches: Iterable[ProducerBatch], body: dict[str, Any] | None,
                   retries_left: Callable[[ProducerBatch], bool]) -> list[Outcome]:
    """Complete, fail or mark for retry each of ``batches`` from the Produce response ``body`` (None:
    an ``acks=0`` request, which has no response). ``retries_left(batch)`` says whether a retriable
    error may be retried. Completed and failed batches have their futures resolved; the caller
    deallocates them (and re-enqueues the retried ones)."""
    if body is None:
        outcomes: list[Outcome] = []
        for batch in batches:
            batch.complete(-1)
            outcomes.append(Outcome(batch, False, None))
        return outcomes
    outcomes = []
    for batch, code, result in partition_results(batches, body):
        if code == kafka_errors.NONE and result is not None:  # (an answered partition: NONE comes with its result)
            batch.complete(result["base_offset"], result.get("log_append_time_ms", -1))
            outcomes.append(Outcome(batch, False, None))
        elif code in RETRIABLE and retries_left(batch):
            outcomes.append(Outcome(batch, True, None))
        else:
            error = response_error(batch, code, result)
            batch.fail(error)
            outcomes.append(Outcome(batch, False, error))
    return outcomes
