"""``Producer``: Kafka's producer on our network layer: ``send`` appends to the record accumulator and
returns a future; a sender thread drains ready batches into one Produce request per broker, keeps
them in flight, applies the responses and retries what failed with a retriable error.

What it owns:
- configuration with Kafka's names (``linger.ms``, ``batch.size``, ``buffer.memory``, ``max.block.ms``,
  ``acks``, ``retries``, ``retry.backoff.ms``, ``request.timeout.ms``,
  ``max.in.flight.requests.per.connection``, ``client.id``), given as a dict, or as keywords with
  the dots written as underscores;
- partitioning: an explicit partition, Kafka's murmur2 of the key, or for a null key the partition
  the topic's open batch is filling (sticky, as Kafka 3.3+ spreads them: a new one for each batch);
- the sender thread: ready partitions grouped by leader, one Produce request per leader with at
  most one batch per partition (so a retry never reorders a partition), responses matched as they
  come; a retriable error or a broken connection puts the batch back in front after
  ``retry.backoff.ms`` (and refreshes the metadata), until ``retries`` are spent;
- ``flush()`` (every record sent so far is acknowledged or failed when it returns) and ``close()``.

Idempotence (``enable.idempotence``, on by default with ``acks=all`` as in Kafka 3+): an id and epoch
from InitProducerId, and per partition a sequence given to each batch at its first send and kept by
its retries, so the broker stores a batch once however often it is sent.

Not yet (issue 16's next steps): compression,
``delivery.timeout.ms``, and polling several brokers' connections with one selector.
"""

from __future__ import annotations

import logging
import random
import threading
from concurrent.futures import Future, wait
from typing import Any

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import StoreClosedError
from ..records.decoder import Record
from .accumulator import RecordAccumulator
from .cluster import NetworkClient
from .errors import BrokerResponseError, NetworkError
from .partitioner import partition_for_key
from .produce import apply_response, produce_request

DEFAULTS: dict[str, Any] = {
    "bootstrap.servers": None, "client.id": "logstore", "acks": "all", "linger.ms": 5, "batch.size": 16384,
    "buffer.memory": 32 * 1024 * 1024, "max.block.ms": 60_000, "retries": 2**31 - 1, "retry.backoff.ms": 100,
    "request.timeout.ms": 30_000, "max.in.flight.requests.per.connection": 5, "enable.idempotence": None}
_ACKS = {"all": -1, "-1": -1, -1: -1, "1": 1, 1: 1, "0": 0, 0: 0}
logger = logging.getLogger("logstore.client")
_IDLE_WAIT_MS = 100  # the sender's longest sleep with nothing to do (a send wakes it at once)


def producer_config(config: dict | None, keywords: dict) -> dict[str, Any]:
    """Kafka's producer settings from a dict of dotted names and/or keywords with underscores."""
    merged = dict(DEFAULTS)
    for key, value in [*(config or {}).items(), *((k.replace("_", "."), v) for k, v in keywords.items())]:
        if key not in DEFAULTS:
            raise ValueError(f"unknown producer setting {key!r} (known: {', '.join(sorted(DEFAULTS))})")
        merged[key] = value
    if not merged["bootstrap.servers"]:
        raise ValueError("bootstrap.servers is required")
    if merged["acks"] not in _ACKS:
        raise ValueError(f"acks must be all, -1, 1 or 0, got {merged['acks']!r}")
    for key in ("retries", "retry.backoff.ms"):
        if type(merged[key]) is not int or merged[key] < 0:
            raise ValueError(f"{key} must be an int >= 0, got {merged[key]!r}")
    # Kafka 3+: idempotent unless asked otherwise, or unless acks is not "all" (then it is off, and
    # asking for it with such acks is a mistake)
    idempotence, acks = merged["enable.idempotence"], _ACKS[merged["acks"]]
    if idempotence not in (None, True, False):
        raise ValueError(f"enable.idempotence must be true or false, got {idempotence!r}")
    if idempotence and acks != -1:
        raise ValueError(f"enable.idempotence needs acks=all, got acks={merged['acks']!r}")
    merged["enable.idempotence"] = acks == -1 if idempotence is None else idempotence
    return merged


class Producer:
    """Sends records to a Kafka-compatible broker (see the module docstring). ``send`` is
    thread-safe; ``close()`` (or a ``with`` block) flushes and stops the sender thread."""

    def __init__(self, config: dict | None = None, *, clock: Clock = SYSTEM_CLOCK, **settings) -> None:
        self.config = settings = producer_config(config, settings)
        self._acks = _ACKS[settings["acks"]]
        self._clock = clock
        network = dict(client_id=settings["client.id"], request_timeout_ms=settings["request.timeout.ms"],
                       max_in_flight=settings["max.in.flight.requests.per.connection"], clock=clock)
        # Two clients, as connections are not shared between threads: the sender's, and the one the
        # application's threads ask for a topic's partition count (under ``_metadata_lock``).
        self._network = NetworkClient(settings["bootstrap.servers"], **network)
        self._lookup = NetworkClient(settings["bootstrap.servers"], **network)
        self._accumulator = RecordAccumulator(batch_size=settings["batch.size"], linger_ms=settings["linger.ms"],
                                              buffer_memory=settings["buffer.memory"],
                                              max_block_ms=settings["max.block.ms"], clock=clock)
        self._metadata_lock = threading.Lock()
        self._sticky: dict[str, int] = {}
        self._in_flight: dict[tuple[Any, int], list] = {}  # (connection, correlation id) -> batches
        self._wakeup = threading.Event()
        self._closed = False
        self._stopping = False
        self._force = False  # close's timeout passed: fail what is left and stop
        self._failure: BaseException | None = None
        self._rng = random.Random()
        self._idempotent = settings["enable.idempotence"]
        self.producer_id, self.producer_epoch = -1, -1  # from InitProducerId, before the first send
        self._sequences: dict[tuple[str, int], int] = {}  # the next sequence of each partition
        self._sender = threading.Thread(target=self._run, name="logstore-producer-sender", daemon=True)
        self._sender.start()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- sending ---------------------------------------------------------------------------------

    def send(self, topic: str, value: bytes | None, key: bytes | None = None, headers=None,
             partition: int | None = None, timestamp_ms: int | None = None) -> Future:
        """Queue a record; the future gives its ``RecordMetadata`` once the broker stored it (or the
        error that stopped it). Blocks while the buffer is full (``max.block.ms``)."""
        if self._closed:
            raise StoreClosedError("the producer is closed")
        if self._failure is not None:
            raise StoreClosedError(f"the producer's sender failed: {self._failure!r}") from self._failure
        record = Record(key, value, tuple(headers or ()), self._clock.time_ms() if timestamp_ms is None else timestamp_ms)
        partitions = self._partitions(topic)
        if partition is None:
            partition = (partition_for_key(key, partitions) if key is not None
                         else self._sticky.setdefault(topic, self._rng.randrange(partitions)))
        elif type(partition) is not int or not 0 <= partition < partitions:
            raise ValueError(f"partition must be in [0, {partitions}) for {topic}, got {partition!r}")
        batches_before = self._accumulator.pending()
        future = self._accumulator.append(topic, partition, record)
        if key is None and self._accumulator.pending() > batches_before:
            self._sticky[topic] = self._rng.randrange(partitions)  # that record opened a batch: next one elsewhere
        self._wakeup.set()
        return future

    def _partitions(self, topic: str) -> int:
        count = self._lookup.metadata.partitions(topic)
        if count is None:
            with self._metadata_lock:
                known = list(self._lookup.metadata.leaders)
                metadata = self._lookup.refresh_metadata([*known, topic], allow_auto_topic_creation=True)
            count = metadata.partitions(topic)
            if count is None:
                raise NetworkError(f"no metadata for topic {topic!r}: error {metadata.topic_errors.get(topic)}")
        return count

    def flush(self, timeout_s: float | None = None) -> None:
        """Send everything queued now and wait until each record is acknowledged or failed."""
        futures = self._accumulator.futures()
        self._accumulator.begin_flush()
        self._wakeup.set()
        try:
            _, not_done = wait(futures, timeout_s)
        finally:
            self._accumulator.end_flush()
        if not_done:
            raise TimeoutError(f"flush: {len(not_done)} records not acknowledged within {timeout_s} s")

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, stop the sender, close the connections. Safe twice. With ``timeout_s``, records
        still unacknowledged then fail (``StoreClosedError``) and the sender stops anyway."""
        if self._closed:
            return
        self._closed = True
        try:
            self.flush(timeout_s)
        except TimeoutError:
            pass  # the records left fail below
        finally:
            self._stopping = True
            self._accumulator.close()
            self._wakeup.set()
            self._sender.join(timeout_s)
            if self._sender.is_alive():  # still waiting on a broker: give up on what is left
                self._force = True
                self._wakeup.set()
                self._sender.join(10)
            with self._metadata_lock:
                self._lookup.close()

    # --- the sender thread -------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not (self._stopping and not self._in_flight and not self._accumulator.pending()):
                if self._force:
                    self._accumulator.fail_all(StoreClosedError("the producer closed before these records "
                                                                "were acknowledged"))
                    return
                self._send_ready()
                if not self._poll_responses():
                    now = self._clock.monotonic_ms()
                    _, next_ms = self._accumulator.ready(now)
                    self._wakeup.wait((_IDLE_WAIT_MS if next_ms is None else min(next_ms, _IDLE_WAIT_MS)) / 1000)
                    self._wakeup.clear()
        except BaseException as exc:  # the sender must not die silently: every queued future learns it
            self._failure = exc
            self._accumulator.fail_all(exc)
        finally:
            self._network.close()

    def _init_producer_id(self) -> bool:
        """An idempotent producer's id and epoch (InitProducerId, from any broker); False when no
        broker answered yet (the batches wait)."""
        try:
            body = self._network.request_any("InitProducerId", {"transactional_id": None,
                                                                "transaction_timeout_ms": 60_000})
        except NetworkError as exc:
            logger.warning("producer: no InitProducerId yet: %s", exc)
            return False
        if body["error_code"]:
            raise BrokerResponseError(f"InitProducerId refused: error {body['error_code']}", body["error_code"],
                                      "InitProducerId")
        self.producer_id, self.producer_epoch = body["producer_id"], body["producer_epoch"]
        return True

    def _send_ready(self) -> None:
        now = self._clock.monotonic_ms()
        ready, _ = self._accumulator.ready(now)
        if ready and self._idempotent and self.producer_id < 0 and not self._init_producer_id():
            return
        by_leader: dict[int, list] = {}
        for key in ready:
            try:
                leader = self._network.leader_for(*key)
            except NetworkError:
                self._refresh_metadata()
                continue
            by_leader.setdefault(leader, []).append(key)
        for leader, keys in by_leader.items():
            try:
                connection = self._network.connection(leader)
            except NetworkError:
                continue  # backing off: the batches wait
            if connection.in_flight >= connection.max_in_flight:
                continue
            batches = self._accumulator.drain(keys, now)
            if not batches:
                continue
            if self._idempotent:
                for batch in batches:  # a sequence at its first send, kept by its retries
                    if batch.base_sequence < 0:
                        key = (batch.topic, batch.partition)
                        batch.base_sequence = self._sequences.get(key, 0)
                        self._sequences[key] = (batch.base_sequence + len(batch.records)) % 2**31
            body = produce_request(batches, self._acks, self.config["request.timeout.ms"], self.producer_id,
                                   self.producer_epoch)
            try:
                if self._acks == 0:
                    connection.send("Produce", body, expect_response=False)
                    self._apply(batches, None)
                else:
                    self._in_flight[(connection, connection.send("Produce", body))] = batches
            except NetworkError:
                self._retry_all(batches)

    def _poll_responses(self) -> bool:
        """Apply the responses that arrived; True when any did. What a broken connection carried
        goes again (its requests get no response: the connection is closed)."""
        any_response = False
        for connection in list(dict.fromkeys(connection for connection, _ in self._in_flight)):
            try:
                if not connection.connected:
                    raise NetworkError(f"{connection!r} closed")
                responses = connection.poll(10)
            except NetworkError:
                for key in [key for key in self._in_flight if key[0] is connection]:
                    self._retry_all(self._in_flight.pop(key))
                self._refresh_metadata()
                any_response = True  # batches changed state: go round again at once
                continue
            for response in responses:
                batches = self._in_flight.pop((connection, response.correlation_id), None)
                if batches is not None:
                    self._apply(batches, response.body)
                    any_response = True
        return any_response

    def _apply(self, batches: list, body: dict | None) -> None:
        for outcome in apply_response(batches, body, self._retries_left):
            if outcome.retry:
                self._accumulator.reenqueue(outcome.batch, self._clock.monotonic_ms() + self.config["retry.backoff.ms"])
            else:
                self._accumulator.deallocate(outcome.batch)

    def _retries_left(self, batch) -> bool:
        return batch.attempts <= self.config["retries"]

    def _retry_all(self, batches: list) -> None:
        self._apply(batches, {"responses": []})  # each one as if unanswered: NETWORK_EXCEPTION, retriable

    def _refresh_metadata(self) -> None:
        try:
            self._network.refresh_metadata(sorted(self._accumulator.topics()), allow_auto_topic_creation=True)
        except NetworkError as exc:  # no broker answered: the batches wait, the next round tries again
            logger.warning("producer: no metadata: %s", exc)
