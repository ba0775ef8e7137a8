"""``StoreMarkerWriter``: the transaction coordinator's markers written into the store's logs.

The coordinator (``coordinator.TransactionCoordinator``) decides a transaction, then asks its marker
writer for a COMMIT or ABORT marker on each partition of it (a ``MarkerRequest``) and writes
CompleteCommit/CompleteAbort once ``done`` reports every partition. This module owns that step for a
store served by one process (Kafka's WriteTxnMarkers sent to the broker itself):

- per partition, ``Log.append_marker`` writes the control batch (the log closes the producer's open
  transaction, moves the last stable offset and indexes an aborted transaction);
- the markers' durability is waited for without a thread: one ``DelayedMarkerWrite`` parked in the
  store's produce purgatory, which the group-commit flusher completes once every log's recovery
  point covers its marker (as an ``acks=-1`` produce waits). A marker is fsynced before ``done``:
  the coordinator writes Complete* after it, and a Complete* that survived a power loss its marker
  did not would leave a transaction that no one finishes;
- for a ``__consumer_offsets`` partition, the group coordinator's ``complete_transaction`` then
  applies (commit) or drops (abort) the offsets the transaction committed there;
- ``done({partition: code})`` is called on the scheduler's thread (it writes and fsyncs the
  Complete* record: not on the flusher's thread, whose rounds other appends wait on).

Codes: UNKNOWN_TOPIC_OR_PARTITION for a partition the store does not have (the coordinator drops
it: on one broker, unknown means deleted); TRANSACTION_COORDINATOR_FENCED when the log refuses the
marker for its producer epoch or coordinator epoch (a newer one owns the producer: the coordinator
stops, as Kafka's does on INVALID_PRODUCER_EPOCH from WriteTxnMarkers); KAFKA_STORAGE_ERROR for a
failed log and REQUEST_TIMED_OUT when the fsync did not come within ``timeout_ms`` (both retried by
the coordinator, which writes the marker again: a second marker of a closed transaction changes
nothing).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from ..clock import Clock
from ..errors import (InvalidProducerEpochError, LogStoreError, ShutdownError, TransactionCoordinatorFencedError,
                      UnknownTopicOrPartitionError)
from ..group.coordinator import GroupCoordinator
from ..manager.log_manager import LogManager
from ..timer.purgatory import DelayedOperation
from ..timer.scheduler import Scheduler
from . import errors
from .metadata import MarkerDone, MarkerRequest, Partition

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_TIMEOUT_MS = 30000  # Kafka's request.timeout.ms, which bounds its WriteTxnMarkers too

# The log's refusals of a marker that mean another producer epoch or coordinator owns the producer.
_FENCED = (InvalidProducerEpochError, TransactionCoordinatorFencedError)


class DelayedMarkerWrite(DelayedOperation):
    """The markers of one request, waiting until every ``(partition, log, required_offset)`` is
    fsynced (the log's recovery point covers it), a log fails or closes, or ``delay_ms`` passes;
    then ``answer({partition: code})`` for those partitions."""

    def __init__(self, delay_ms: int, waits: list[tuple[Partition, Any, int]],
                 answer: Callable[[dict[Partition, int]], None]) -> None:
        super().__init__(delay_ms)
        self.waits = waits
        self.answer = answer

    def try_complete(self) -> bool:
        for _partition, log, required_offset in self.waits:
            if log.recovery_point < required_offset and not log.failed and not log.closed:
                return False
        return self.force_complete()

    def on_complete(self) -> None:
        outcome = {}
        for partition, log, required_offset in self.waits:
            if log.recovery_point >= required_offset:
                outcome[partition] = errors.NONE
            elif log.failed or log.closed:
                outcome[partition] = errors.KAFKA_STORAGE_ERROR
            else:
                outcome[partition] = errors.REQUEST_TIMED_OUT
        self.answer(outcome)


class StoreMarkerWriter:
    """The coordinator's ``MarkerWriter`` over ``store`` (see the module docstring). ``group`` is the
    store's group coordinator (its ``complete_transaction`` settles the transactional offsets of a
    ``__consumer_offsets`` partition); ``scheduler`` runs ``done``; ``timeout_ms`` bounds the wait
    for the markers' fsync."""

    def __init__(self, store: LogManager, clock: Clock, scheduler: Scheduler, group: GroupCoordinator | None = None, *,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 1:
            raise ValueError(f"timeout_ms must be an int >= 1, got {timeout_ms!r}")
        self.store = store
        self.clock = clock
        self.scheduler = scheduler
        self.group = group
        self.timeout_ms = timeout_ms

    def __call__(self, request: MarkerRequest, done: MarkerDone) -> None:
        results: dict[Partition, int] = {}
        written: dict[Partition, int] = {}  # partition -> the marker's offset
        waits: list[tuple[Partition, Any, int]] = []
        now = self.clock.time_ms()
        for partition in sorted(request.partitions):
            topic, index = partition
            try:
                log = self.store.get_log(topic, index)
                offset = log.append_marker(request.producer_id, request.producer_epoch, request.coordinator_epoch,
                                           request.commit, timestamp_ms=now)
            except UnknownTopicOrPartitionError:
                results[partition] = errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            except _FENCED as exc:
                logger.warning("%s marker of producer %d (transactional id %r) refused by %s-%d: %s",
                               _kind(request), request.producer_id, request.transactional_id, topic, index, exc)
                results[partition] = errors.TRANSACTION_COORDINATOR_FENCED
                continue
            except LogStoreError as exc:
                logger.warning("%s marker of producer %d (transactional id %r) on %s-%d failed: %s", _kind(request),
                               request.producer_id, request.transactional_id, topic, index, exc)
                results[partition] = errors.KAFKA_STORAGE_ERROR
                continue
            written[partition] = offset
            waits.append((partition, log, offset + 1))
        if not waits:
            self._finish(request, results, written, done)
            return

        def answer(outcome: Mapping[Partition, int]) -> None:
            results.update(outcome)
            self._finish(request, results, written, done)

        operation = DelayedMarkerWrite(self.timeout_ms, waits, answer)
        waiting = self.store.waits
        for _partition, log, _required in waits:
            waiting.flusher.request(log)
        waiting.produce.try_complete_else_watch(operation, [log.key for _partition, log, _required in waits])

    def _finish(self, request: MarkerRequest, results: dict[Partition, int], written: dict[Partition, int],
                done: MarkerDone) -> None:
        """On the scheduler's thread: settle the durable markers of ``__consumer_offsets`` partitions
        with the group coordinator, then ``done``."""
        def finish() -> None:
            for partition, offset in written.items():
                if partition[0] != OFFSETS_TOPIC or results.get(partition) != errors.NONE or self.group is None:
                    continue
                try:
                    self.group.complete_transaction(partition[1], request.producer_id, request.commit, offset)
                except Exception:
                    # The marker is durable, so a replay of the partition settles the offsets the
                    # same way; in memory they stay pending until then. Retrying writes a marker more.
                    logger.exception("settling the offsets of producer %d on %s-%d failed", request.producer_id,
                                     *partition)
            done(results)

        try:
            self.scheduler.schedule("txn-markers-done", finish, 0)
        except ShutdownError:
            # The store is closing: the coordinator has stopped and writes no Complete* now; its
            # successor finds the transaction prepared and writes the markers again.
            logger.info("markers of transactional id %r written while the store closes; not completed",
                        request.transactional_id)


def _kind(request: MarkerRequest) -> str:
    return "COMMIT" if request.commit else "ABORT"
