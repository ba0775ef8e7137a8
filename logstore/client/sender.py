"""``Sender``: the producer's sender loop (Kafka's ``Sender``), run by the producer's sender thread.

Each round (``run_once``):
- expiry: batches older than ``delivery.timeout.ms`` fail with ``DeliveryTimeoutError``, queued ones
  taken off at once, ones in a request failed now and settled when their answer comes;
- idempotence: the producer id from InitProducerId before the first send, and the resets of
  partitions whose sequence is in doubt (``idempotence``);
- sending: the ready partitions grouped by leader, one Produce request per leader with at most one
  batch per partition, while the leader's connection has fewer than
  ``max.in.flight.requests.per.connection`` requests out (so up to that many batches of a partition
  are in flight);
- one ``NetworkClient.poll`` over every connection with requests in flight (one selector, woken at
  once by ``send``), and the answers applied: a batch completed, sent again after
  ``retry.backoff.ms`` (a retriable error, a broken connection, with ``retries`` and the delivery
  timeout left), or failed. Errors that say the metadata is stale refresh it (at most once per
  ``retry.backoff.ms``).

Ordering: with idempotence a partition's batches are stored exactly once and in send order however
often they are retried (``idempotence`` says how). Without it, a retry goes back in front of the
batches created after it but, with ``max.in.flight.requests.per.connection`` > 1, a later batch
already in flight may be stored before it, as with Kafka's producer: set it to 1 to keep the order.

If the broker cannot hand out producer ids (InitProducerId refused, or not offered) and idempotence
was not asked for explicitly, the producer goes on without it, with a warning (Kafka 3+ turns the
default off for conflicting settings the same way); asked for explicitly, that is the producer's
failure.

A transactional producer's sender (``transaction``: the producer's ``TransactionManager``) marks
its batches transactional and names the transactional id in each Produce request; its producer id
comes from ``init_transactions``, never from the sender, and a partition whose sequence is in doubt
is not reset here but by the abort that the failure forces (a new epoch, sequences from 0). Each
batch that fails is reported (``transaction.batch_failed``): the transaction can then only be
aborted, and the next round fails the batches not sent yet, as ``request_abort`` (an abort drops
them) does, and as Kafka's sender does.
"""

from __future__ import annotations

import logging

from ..clock import Clock
from ..errors import StoreClosedError
from ..server.protocol import errors as kafka_errors
from .accumulator import ProducerBatch, RecordAccumulator
from .cluster import NetworkClient, PollResult
from .errors import AbortableTransactionError, BrokerResponseError, NetworkError, NoCommonVersionError
from .idempotence import IdempotenceManager
from .produce import RETRIABLE, DeliveryTimeoutError, partition_results, produce_request, response_error

logger = logging.getLogger(__name__)

_IDLE_WAIT_MS = 100  # the longest wait with nothing to do (a send wakes the sender at once)
_BLOCKED_WAIT_MS = 10  # batches ready but no request could go (no leader, connection backing off)
_STORED = frozenset({kafka_errors.NONE, kafka_errors.DUPLICATE_SEQUENCE_NUMBER})
# The broker refused the batch's sequence: not stored (an earlier sequence is missing, or the broker
# lost the producer's state). Retried by an idempotent producer (``idempotence`` says how).
_SEQUENCE_REFUSED = frozenset({kafka_errors.OUT_OF_ORDER_SEQUENCE_NUMBER, kafka_errors.UNKNOWN_PRODUCER_ID})
_STALE_METADATA = frozenset({kafka_errors.NOT_LEADER_OR_FOLLOWER, kafka_errors.LEADER_NOT_AVAILABLE,
                             kafka_errors.UNKNOWN_TOPIC_OR_PARTITION, kafka_errors.NETWORK_EXCEPTION})
_INIT_RETRIABLE = frozenset({kafka_errors.COORDINATOR_LOAD_IN_PROGRESS, kafka_errors.COORDINATOR_NOT_AVAILABLE,
                             16, kafka_errors.REQUEST_TIMED_OUT, kafka_errors.NETWORK_EXCEPTION,
                             51})  # 16 NOT_COORDINATOR, 51 CONCURRENT_TRANSACTIONS


class Sender:
    """Drains the accumulator into Produce requests and applies their answers (see the module
    docstring). ``run`` is the sender thread's body; ``stopping`` and ``force`` end it."""

    def __init__(self, network: NetworkClient, accumulator: RecordAccumulator, *, acks: int, retries: int,
                 retry_backoff_ms: int, request_timeout_ms: int, delivery_timeout_ms: int, compression: int,
                 idempotence: IdempotenceManager | None, idempotence_explicit: bool, clock: Clock,
                 transaction=None, transactional_id: str | None = None) -> None:
        self._network = network
        self._accumulator = accumulator
        self._acks = acks
        self._retries = retries
        self._retry_backoff_ms = retry_backoff_ms
        self._request_timeout_ms = request_timeout_ms
        self._delivery_timeout_ms = delivery_timeout_ms
        self._compression = compression
        self.idempotence = idempotence
        self._idempotence_explicit = idempotence_explicit
        self._clock = clock
        self.transaction = transaction  # a transactional producer's TransactionManager, else None
        self._transactional_id = transactional_id
        # Set by request_abort or a failed batch of the transaction; while set, every round fails the
        # batches not in a request (a batch answered later and given back for a retry among them)
        self._abort_error: BaseException | None = None
        self._in_flight: dict[tuple, list[ProducerBatch]] = {}  # (connection, correlation id) -> batches
        self._metadata_wanted = False
        self._metadata_due_ms = 0
        self._init_due_ms = 0
        self.stopping = False  # finish what is queued and in flight, then return
        self.force = False  # fail what is left and return
        self.failure: BaseException | None = None

    def request_abort(self, error: BaseException) -> None:
        """From the next round on, every batch not in a request fails (with ``error``): the
        transaction they belong to is being aborted. Batches in a request are settled by their
        answers (and fail then, if given back for a retry). Until ``clear_abort``."""
        self._abort_error = error
        self.wakeup()

    def clear_abort(self) -> None:
        """The abort settled every batch (none is held): batches are sent again."""
        self._abort_error = None

    def wakeup(self) -> None:
        """End the sender's wait at once (a record was queued, a flush or close began)."""
        self._network.wakeup()

    def run(self) -> None:
        """Rounds until stopped; a failure fails every queued record and is kept in ``failure``."""
        try:
            while not (self.stopping and not self._in_flight and not self._accumulator.pending()):
                if self.force:
                    self._accumulator.fail_all(StoreClosedError("the producer closed before these records "
                                                                "were acknowledged"))
                    return
                self.run_once()
        except BaseException as exc:  # the sender must not die silently: every queued future learns it
            self.failure = exc
            self._accumulator.fail_all(exc)
        finally:
            self._network.close()

    def run_once(self) -> None:
        """One round: expire, reset, send what is ready, wait for and apply answers."""
        now_ms = self._clock.monotonic_ms()
        abort_error = self._abort_error
        if abort_error is not None:
            self._abort_undrained(abort_error)
        self._expire(now_ms)
        if self.transaction is None and self.idempotence is not None and self.idempotence.has_producer_id():
            self._reset_partitions(now_ms)
        next_ms, blocked = self._send_ready(now_ms)
        wait_ms = _IDLE_WAIT_MS if next_ms is None else max(0, min(next_ms, _IDLE_WAIT_MS))
        if blocked and not self._in_flight:
            wait_ms = min(wait_ms, _BLOCKED_WAIT_MS)
        self._apply(self._network.poll(wait_ms, [connection for connection, _ in self._in_flight]))
        self._refresh_metadata_if_wanted()

    # --- sending ---------------------------------------------------------------------------------

    def _send_ready(self, now_ms: int) -> tuple[int | None, bool]:
        """Send requests to the leaders of ready batches while there are ready batches and room (a
        request carries one batch per partition: a partition with several ready batches needs
        several); the ms until the next batch is ready, and whether a ready batch could not go for
        want of a leader or a connection."""
        while True:
            next_ms, blocked, sent = self._send_round(now_ms)
            if not sent:
                return next_ms, blocked

    def _send_round(self, now_ms: int) -> tuple[int | None, bool, bool]:
        ready, next_ms = self._accumulator.ready(now_ms)
        if not ready:
            return next_ms, False, False
        if self.idempotence is not None and not self.idempotence.has_producer_id() and (
                self.transaction is not None or not self._init_producer_id(now_ms)):
            return next_ms, True, False  # (a transactional producer's id comes from init_transactions)
        by_leader: dict[int, list] = {}
        blocked = False
        for key in ready:
            try:
                by_leader.setdefault(self._network.leader_for(*key), []).append(key)
            except NetworkError:
                self._metadata_wanted = True
                blocked = True
        admit = None if self.idempotence is None else self.idempotence.may_send
        sent = False
        for leader, keys in by_leader.items():
            try:
                connection = self._network.connection(leader)
            except NetworkError:  # backing off, or unreachable: the batches wait
                self._metadata_wanted = True
                blocked = True
                continue
            if connection.in_flight >= connection.max_in_flight:
                continue  # its answers will wake the poll
            batches = self._accumulator.drain(keys, now_ms, admit)
            if batches:
                sent = self._send(connection, batches) or sent
        return next_ms, blocked, sent

    def _send(self, connection, batches: list[ProducerBatch]) -> bool:
        """Send ``batches`` in one request; False when the connection failed (they wait for a retry)."""
        for batch in batches:
            if self.idempotence is not None:
                self.idempotence.sending(batch)  # a sequence at its first send, kept by its retries
            else:
                batch.in_request = True
        body = produce_request(batches, self._acks, self._request_timeout_ms, compression=self._compression,
                               transactional_id=self._transactional_id)
        try:
            if self._acks == 0:  # no answer will come: done once written
                connection.send("Produce", body, expect_response=False)
                for batch in batches:
                    batch.complete(-1)
                    self._accumulator.deallocate(batch)
            else:
                self._in_flight[(connection, connection.send("Produce", body))] = batches
        except NetworkError as exc:
            for batch in batches:
                self._retry_or_fail(batch, kafka_errors.NETWORK_EXCEPTION, None, exc)
            return False
        return True

    # --- answers ---------------------------------------------------------------------------------

    def _apply(self, result: PollResult) -> None:
        # The answers first: a connection may have answered some requests before it broke.
        for connection, responses in result.responses.items():
            for response in responses:
                batches = self._in_flight.pop((connection, response.correlation_id), None)
                if batches is None:
                    continue
                for batch, code, partition in partition_results(batches, response.body):
                    if code in _STORED:
                        self._complete(batch, code, partition)
                    else:
                        self._retry_or_fail(batch, code, partition)
        for connection, error in result.broken.items():
            logger.info("producer: %s", error)
            for key in [key for key in self._in_flight if key[0] is connection]:
                for batch in self._in_flight.pop(key):
                    self._retry_or_fail(batch, kafka_errors.NETWORK_EXCEPTION, None, error)
            self._metadata_wanted = True

    def _complete(self, batch: ProducerBatch, code: int, partition: dict) -> None:
        # DUPLICATE_SEQUENCE_NUMBER: stored before, offset not known (an older broker's answer to a
        # retry; ours and Kafka 2+ answer NONE with the first copy's offsets)
        base_offset = partition.get("base_offset", -1) if code == kafka_errors.NONE else -1
        batch.in_request = False
        batch.complete(base_offset, partition.get("log_append_time_ms", -1))
        if self.idempotence is not None:
            for orphan in self.idempotence.acknowledged(batch):
                error = BrokerResponseError(
                    f"producing to {orphan.topic}-{orphan.partition} failed: its sequence was refused "
                    "(OUT_OF_ORDER_SEQUENCE_NUMBER) and a later batch was stored meanwhile, so it can no longer "
                    "be stored in order", kafka_errors.OUT_OF_ORDER_SEQUENCE_NUMBER, "OUT_OF_ORDER_SEQUENCE_NUMBER")
                orphan.fail(error)
                self._report_failure(error)
                self._accumulator.deallocate(orphan)
        self._accumulator.deallocate(batch)

    def _retry_or_fail(self, batch: ProducerBatch, code: int, partition: dict | None,
                       error: BaseException | None = None) -> None:
        """A batch not stored, or whose request went unanswered: send it again, or fail it."""
        now_ms = self._clock.monotonic_ms()
        if code in _STALE_METADATA:
            self._metadata_wanted = True
        if batch.done:  # expired while in the request: only its sequence's fate matters now
            if self.idempotence is not None:
                self.idempotence.left_unacknowledged(batch)
            batch.in_request = False
            self._accumulator.deallocate(batch)
            return
        expired = now_ms - batch.created_ms >= self._delivery_timeout_ms
        sequence_refused = self.idempotence is not None and code in _SEQUENCE_REFUSED
        batch.last_error = kafka_errors.NAMES.get(code, f"error {code}")
        if (code in RETRIABLE or sequence_refused) and not expired and batch.attempts <= self._retries:
            if sequence_refused:
                self.idempotence.refused_out_of_order(batch)
            elif self.idempotence is not None:
                self.idempotence.unanswered(batch)
            batch.in_request = False
            self._accumulator.reenqueue(batch, now_ms + self._retry_backoff_ms)
            return
        if expired:
            failure = self._timeout_error(batch, now_ms, "in a request")
        else:
            failure = response_error(batch, code, partition)
            if error is not None:
                failure.__cause__ = error
        batch.in_request = False
        batch.fail(failure)
        self._report_failure(failure)
        if self.idempotence is not None:
            self.idempotence.left_unacknowledged(batch)
        self._accumulator.deallocate(batch)

    def _report_failure(self, error: BaseException) -> None:
        if self.transaction is not None:
            self.transaction.batch_failed(error)
            # The transaction can only be aborted now: the batches not sent yet fail at once (as
            # Kafka's sender aborts them), rather than wait behind a partition left in doubt
            if self._abort_error is None:
                failure = AbortableTransactionError(f"not sent: an earlier batch of the transaction failed ({error})")
                failure.__cause__ = error
                self._abort_error = failure

    def _abort_undrained(self, error: BaseException) -> None:
        for batch in self._accumulator.undrained():
            batch.fail(error)
            if self.idempotence is not None and batch.base_sequence >= 0:
                self.idempotence.left_unacknowledged(batch)
                self._report_failure(error)
            self._accumulator.deallocate(batch)

    # --- expiry ----------------------------------------------------------------------------------

    def _expire(self, now_ms: int) -> None:
        for batch in self._accumulator.expire(now_ms, self._delivery_timeout_ms):
            batch.fail(self._timeout_error(batch, now_ms, "not sent" if batch.attempts == 0 else "waiting for a retry"))
            self._report_failure(batch.result.error)
            if self.idempotence is not None and batch.base_sequence >= 0:
                self.idempotence.left_unacknowledged(batch)
        for batches in self._in_flight.values():
            for batch in batches:
                if not batch.done and now_ms - batch.created_ms >= self._delivery_timeout_ms:
                    # Failed now; the request's answer still settles its sequence (``_retry_or_fail``).
                    batch.fail(self._timeout_error(batch, now_ms, "in a request not answered yet"))
                    self._report_failure(batch.result.error)

    def _timeout_error(self, batch: ProducerBatch, now_ms: int, state: str) -> DeliveryTimeoutError:
        last = f", the last one answered {batch.last_error}" if batch.last_error else ""
        return DeliveryTimeoutError(
            f"{len(batch.records)} record(s) for {batch.topic}-{batch.partition} not acknowledged within "
            f"delivery.timeout.ms ({self._delivery_timeout_ms} ms; {now_ms - batch.created_ms} ms since the batch "
            f"was created, {state}; {batch.attempts} attempt(s){last})")

    # --- producer ids and metadata -----------------------------------------------------------------

    def _init_producer_id(self, now_ms: int) -> bool:
        """A new producer id and epoch from InitProducerId (any broker); False when none came yet (the
        batches wait). A broker that cannot give one turns idempotence off unless it was asked for."""
        if now_ms < self._init_due_ms:
            return False
        self._init_due_ms = now_ms + self._retry_backoff_ms
        try:
            body = self._network.request_any("InitProducerId", {"transactional_id": None,
                                                                "transaction_timeout_ms": 60_000})
        except NoCommonVersionError as exc:
            return self._without_idempotence(exc)
        except NetworkError as exc:
            logger.warning("producer: no InitProducerId yet: %s", exc)
            return False
        code = body["error_code"]
        if code == kafka_errors.NONE:
            self.idempotence.set_producer_id(body["producer_id"], body["producer_epoch"])
            return True
        if code in _INIT_RETRIABLE:
            return False
        name = kafka_errors.NAMES.get(code, f"error {code}")
        return self._without_idempotence(BrokerResponseError(f"InitProducerId refused: {name}", code, name))

    def _without_idempotence(self, error: Exception) -> bool:
        if self._idempotence_explicit or self.idempotence.has_producer_id():
            raise error  # asked for, or sequences already out: the producer cannot go on without it
        logger.warning("producer: idempotence is off: the broker gives no producer id (%s); a retry may store "
                       "a batch twice", error)
        self.idempotence = None
        return True

    def _reset_partitions(self, now_ms: int) -> None:
        keys = self.idempotence.partitions_to_reset()
        if not keys:
            return
        if self.idempotence.needs_new_producer_id(keys) and not self._init_producer_id(now_ms):
            return
        for key in keys:
            logger.info("producer: %s-%d's sequence was in doubt: it goes on as producer %d epoch %d from sequence 0",
                        key[0], key[1], self.idempotence.producer_id, self.idempotence.producer_epoch)
            self.idempotence.reset(key)

    def _refresh_metadata_if_wanted(self) -> None:
        now_ms = self._clock.monotonic_ms()
        if not self._metadata_wanted or now_ms < self._metadata_due_ms:
            return
        # The topics known so far too: a response replaces the metadata, and a topic left out would
        # lose its leaders until a batch of it asks again (after the backoff)
        topics = sorted({*self._network.metadata.leaders, *self._accumulator.topics()})
        self._metadata_wanted = False
        if not topics:
            return
        self._metadata_due_ms = now_ms + max(self._retry_backoff_ms, _BLOCKED_WAIT_MS)
        try:
            self._network.refresh_metadata(topics, allow_auto_topic_creation=True)
        except NetworkError as exc:  # no broker answered: the batches wait, a later round tries again
            logger.warning("producer: no metadata: %s", exc)
            self._metadata_wanted = True
