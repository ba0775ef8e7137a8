"""``TransactionCoordinator``: Kafka's transaction coordinator state machine, without network or store.

This module owns the decisions of the transaction APIs per transactional id: InitProducerId (a new
producer id, epoch bumps that fence older instances, the KIP-360 bump of a known producer, the
rotation to a new producer id when the epoch is exhausted, and fencing an open transaction by
aborting it), AddPartitionsToTxn and AddOffsetsToTxn (the transaction's partition set and its start
time), EndTxn (PrepareCommit or PrepareAbort written durably and answered, then the markers, then
CompleteCommit or CompleteAbort), DescribeTransactions and ListTransactions; and the two scanners that
run on the scheduler: open transactions past their timeout are aborted under a bumped epoch (so the
stale producer is fenced), idle transactional ids are expired with a tombstone.

Its collaborators come in as parameters: the state log (``metadata.StateLog``: durable append, load),
the marker writer (``metadata.MarkerWriter``), the producer id allocator, a clock and a ``Scheduler``.
``startup()`` loads the state log, finishes every transaction found prepared (re-sending its markers)
and leaves open ones to their timeout.

Every transition is two-phase (Kafka's pending-state discipline): under the lock the request is
checked and the new state computed and recorded as pending; the record is appended with the lock
released (an append waits for an fsync); then, under the lock again, the new state becomes current,
or on failure the pending state is dropped and the append's error answered. While a transition is
pending the id answers CONCURRENT_TRANSACTIONS. Answers are the return values, with Kafka's codes.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Iterable, Mapping

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import DurabilityTimeoutError, InvalidRecordError, LogStoreError, UnknownTopicOrPartitionError
from ..group.formats import partition_for as offsets_partition_for
from ..timer.scheduler import ScheduledTask, Scheduler
from . import errors
from .formats import TransactionState
from .config import TransactionConfig
from .metadata import (MAX_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, STATE_NAMES, InitProducerIdResult,
                       ListTransactionsResult, MarkerRequest, MarkerWriter, Partition, ProducerIdAllocator,
                       StateLog, TransactionDescription, TransactionListing, TransactionMetadata, Transition,
                       is_epoch_exhausted)

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
MARKER_RETRY_BACKOFF_MS = 100  # before re-sending markers that failed with a retriable error
COMPLETE_RETRY_BACKOFF_MS = 100  # before retrying a Complete* record whose append failed

EMPTY = TransactionState.EMPTY
ONGOING = TransactionState.ONGOING
PREPARE_COMMIT = TransactionState.PREPARE_COMMIT
PREPARE_ABORT = TransactionState.PREPARE_ABORT
COMPLETE_COMMIT = TransactionState.COMPLETE_COMMIT
COMPLETE_ABORT = TransactionState.COMPLETE_ABORT
DEAD = TransactionState.DEAD
PREPARE_EPOCH_FENCE = TransactionState.PREPARE_EPOCH_FENCE

PREPARED = (PREPARE_COMMIT, PREPARE_ABORT)
IDLE = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)  # no transaction open: may bump, start one, or expire

# Marker errors after which the markers are not re-sent: the partition is gone (a single broker
# hosts every partition, so unknown means deleted), or a newer coordinator owns the producer.
DROPPED_MARKER_ERRORS = {errors.UNKNOWN_TOPIC_OR_PARTITION}
FATAL_MARKER_ERRORS = {errors.TRANSACTION_COORDINATOR_FENCED}

LOADING, ACTIVE, STOPPED = "loading", "active", "stopped"


def append_error_code(exc: BaseException) -> int:
    """The code a failed state-log append answers with (Kafka's mapping of its append errors)."""
    if isinstance(exc, InvalidRecordError):  # too large: retrying cannot help
        return errors.UNKNOWN_SERVER_ERROR
    if isinstance(exc, (DurabilityTimeoutError, UnknownTopicOrPartitionError)):
        return errors.COORDINATOR_NOT_AVAILABLE
    return errors.NOT_COORDINATOR  # storage failed under us: the client finds the coordinator again


class TransactionCoordinator:
    """The transaction coordinator of one store (see the module docstring)."""

    def __init__(self, state_log: StateLog, marker_writer: MarkerWriter, clock: Clock | None,
                 scheduler: Scheduler, producer_id_allocator: ProducerIdAllocator,
                 config: TransactionConfig | Mapping[str, Any] | None = None, *,
                 offsets_topic_num_partitions: int = 50, coordinator_epoch: int = 0) -> None:
        if not callable(marker_writer):
            raise TypeError(f"marker_writer must be callable, got {marker_writer!r}")
        if not callable(producer_id_allocator):
            raise TypeError(f"producer_id_allocator must be callable, got {producer_id_allocator!r}")
        if not isinstance(scheduler, Scheduler):
            raise TypeError(f"scheduler must be a Scheduler, got {scheduler!r}")
        if isinstance(offsets_topic_num_partitions, bool) or not isinstance(offsets_topic_num_partitions, int) \
                or offsets_topic_num_partitions < 1:
            raise ValueError(f"offsets_topic_num_partitions must be an int >= 1, got {offsets_topic_num_partitions!r}")
        if isinstance(coordinator_epoch, bool) or not isinstance(coordinator_epoch, int) or coordinator_epoch < 0:
            raise ValueError(f"coordinator_epoch must be an int >= 0, got {coordinator_epoch!r}")
        self.state_log = state_log
        self.marker_writer = marker_writer
        self.clock = clock or SYSTEM_CLOCK
        self.scheduler = scheduler
        self.allocate_producer_id = producer_id_allocator
        self.config = config if isinstance(config, TransactionConfig) else TransactionConfig.from_properties(config)
        self.offsets_topic_num_partitions = offsets_topic_num_partitions
        self.coordinator_epoch = coordinator_epoch
        self.lock = threading.RLock()
        self.transactions: dict[str, TransactionMetadata] = {}  # under ``lock``
        self._status = LOADING
        self._tasks: list[ScheduledTask] = []

    # --- life cycle -------------------------------------------------------------------------------

    def startup(self) -> None:
        """Load the state log, then finish every prepared transaction (its markers are sent again,
        then its Complete* written) and start the timeout and expiration scanners. Open transactions
        keep their persisted start time, so their timeout runs on across the restart."""
        with self.lock:
            if self._status != LOADING:
                raise ValueError(f"startup() on a coordinator that is {self._status}")
        loaded = self.state_log.load()
        prepared: list[TransactionMetadata] = []
        with self.lock:
            for transactional_id, value in loaded.items():
                meta = TransactionMetadata.from_value(transactional_id, value)
                if meta.state == DEAD:
                    continue  # its tombstone was not written; the id is forgotten either way
                if meta.state == PREPARE_EPOCH_FENCE:
                    # Never written by a coordinator (it is in memory only): read it as the open
                    # transaction it fences, which the timeout scanner will abort.
                    logger.warning("transactional id %r loaded in PrepareEpochFence; treated as Ongoing",
                                   transactional_id)
                    meta.state = ONGOING
                self.transactions[transactional_id] = meta
                if meta.state in PREPARED:
                    prepared.append(meta)
            self._status = ACTIVE
        for meta in prepared:
            self._send_markers(meta, meta.transitions)
        self._tasks.append(self.scheduler.schedule(
            "txn-abort-timed-out", self.abort_timed_out_transactions,
            self.config.abort_timed_out_interval_ms, self.config.abort_timed_out_interval_ms))
        self._tasks.append(self.scheduler.schedule(
            "txn-remove-expired", self.remove_expired_transactional_ids,
            self.config.remove_expired_interval_ms, self.config.remove_expired_interval_ms))

    def shutdown(self) -> None:
        """Stop answering (NOT_COORDINATOR) and stop the scanners and marker retries. Markers already
        asked for may still complete; their Complete* is then not written (the next coordinator
        re-sends them). A second call does nothing."""
        with self.lock:
            if self._status == STOPPED:
                return
            self._status = STOPPED
            tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()

    @property
    def active(self) -> bool:
        return self._status == ACTIVE

    def _status_error(self) -> int:
        if self._status == LOADING:
            return errors.COORDINATOR_LOAD_IN_PROGRESS
        if self._status == STOPPED:
            return errors.NOT_COORDINATOR
        return errors.NONE

    def _now(self) -> int:
        return self.clock.time_ms()  # persisted timestamps: wall clock, as Kafka's

    # --- InitProducerId ---------------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str | None, transaction_timeout_ms: int,
                         producer_id: int = NO_PRODUCER_ID,
                         producer_epoch: int = NO_PRODUCER_EPOCH) -> InitProducerIdResult:
        """InitProducerId. Without a transactional id: a fresh producer id at epoch 0 (idempotence
        only, no state). With one: the id's producer, its epoch bumped (fencing every older
        instance), or a new producer id when the epoch is exhausted. ``producer_id``/``producer_epoch``
        (both or neither) name the caller's current producer (KIP-360): a known producer is bumped,
        a retry whose answer was lost gets the same answer again, anything older is fenced. An open
        transaction is aborted first under a bumped epoch; the answer is then CONCURRENT_TRANSACTIONS
        and the retry, once the abort is complete, gets one epoch more."""
        for name, value in (("transaction_timeout_ms", transaction_timeout_ms), ("producer_id", producer_id),
                            ("producer_epoch", producer_epoch)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {value!r}")
        if transactional_id is None:
            return InitProducerIdResult(errors.NONE, self.allocate_producer_id(), 0)
        if not isinstance(transactional_id, str):
            raise TypeError(f"transactional_id must be a str or None, got {transactional_id!r}")
        if not transactional_id:
            return InitProducerIdResult(errors.INVALID_REQUEST)
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return InitProducerIdResult(errors.INVALID_REQUEST)
        if not 0 < transaction_timeout_ms <= self.config.max_timeout_ms:
            return InitProducerIdResult(errors.INVALID_TRANSACTION_TIMEOUT)
        fence = None
        with self.lock:
            status = self._status_error()
            if status:
                return InitProducerIdResult(status)
            now = self._now()
            meta = self.transactions.get(transactional_id)
            if meta is None:
                meta = TransactionMetadata(transactional_id, self.allocate_producer_id(), NO_PRODUCER_EPOCH,
                                           transaction_timeout_ms, EMPTY, last_update_timestamp_ms=now)
                self.transactions[transactional_id] = meta
            if meta.pending is not None:
                return InitProducerIdResult(errors.CONCURRENT_TRANSACTIONS)
            if producer_id != NO_PRODUCER_ID and not (
                    meta.producer_epoch == NO_PRODUCER_EPOCH or producer_id == meta.producer_id
                    or (producer_id == meta.previous_producer_id and is_epoch_exhausted(producer_epoch))):
                return InitProducerIdResult(errors.PRODUCER_FENCED)
            if meta.state in PREPARED:
                return InitProducerIdResult(errors.CONCURRENT_TRANSACTIONS)
            if meta.state == ONGOING:
                fence = self._prepare_fence_and_abort(meta, now)
            elif meta.state in IDLE:
                if is_epoch_exhausted(meta.producer_epoch) and producer_epoch in (NO_PRODUCER_EPOCH,
                                                                                  meta.producer_epoch):
                    target = meta.transition(
                        EMPTY, now, producer_id=self.allocate_producer_id(), previous_producer_id=meta.producer_id,
                        producer_epoch=0,
                        last_producer_epoch=meta.producer_epoch if producer_epoch != NO_PRODUCER_EPOCH
                        else NO_PRODUCER_EPOCH,
                        timeout_ms=transaction_timeout_ms, partitions=frozenset(), start_timestamp_ms=-1)
                elif producer_epoch == NO_PRODUCER_EPOCH:  # a new instance: fences every older one
                    target = meta.transition(
                        EMPTY, now, producer_epoch=meta.producer_epoch + 1, last_producer_epoch=NO_PRODUCER_EPOCH,
                        timeout_ms=transaction_timeout_ms, partitions=frozenset(), start_timestamp_ms=-1)
                elif meta.producer_epoch == NO_PRODUCER_EPOCH or producer_epoch == meta.producer_epoch:
                    target = meta.transition(
                        EMPTY, now, producer_epoch=meta.producer_epoch + 1,
                        last_producer_epoch=meta.producer_epoch,
                        timeout_ms=transaction_timeout_ms, partitions=frozenset(), start_timestamp_ms=-1)
                elif producer_epoch == meta.last_producer_epoch:
                    # The retry of a bump whose answer was lost: the same answer again.
                    return InitProducerIdResult(errors.NONE, meta.producer_id, meta.producer_epoch)
                else:
                    return InitProducerIdResult(errors.PRODUCER_FENCED)
                meta.pending = EMPTY
            else:  # DEAD, PREPARE_EPOCH_FENCE are never current states
                logger.error("transactional id %r in state %s cannot be initialised", transactional_id,
                             STATE_NAMES[meta.state])
                return InitProducerIdResult(errors.UNKNOWN_SERVER_ERROR)
        if fence is not None:
            # The abort is under way: the caller retries until it is complete. If its record could
            # not be written, nothing changed and the append's error is the answer.
            return InitProducerIdResult(self._write_prepare(meta, fence) or errors.CONCURRENT_TRANSACTIONS)
        code = self._write(meta, target)
        if code:
            return InitProducerIdResult(code)
        return InitProducerIdResult(errors.NONE, target.producer_id, target.producer_epoch)

    # --- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------------

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[Partition]) -> dict[Partition, int]:
        """AddPartitionsToTxn (the client versions): add ``partitions`` to the open transaction, or
        open one. Returns a code per partition (the same code for all: the checks are per
        transaction). Whether the partitions exist and may be written is the caller's to check
        first (Kafka adds none when one fails)."""
        wanted = self._partitions(partitions)
        if not wanted:
            return {}
        code = self._add(transactional_id, producer_id, producer_epoch, wanted)
        return {partition: code for partition in wanted}

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> int:
        """AddOffsetsToTxn: add the ``__consumer_offsets`` partition of ``group_id`` to the
        transaction (its offsets are then committed or dropped with it)."""
        if not isinstance(group_id, str):
            raise TypeError(f"group_id must be a str, got {group_id!r}")
        partition = (OFFSETS_TOPIC, offsets_partition_for(group_id, self.offsets_topic_num_partitions))
        return self._add(transactional_id, producer_id, producer_epoch, frozenset([partition]))

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[Partition]) -> dict[Partition, int]:
        """AddPartitionsToTxn with VerifyOnly (KIP-890): are ``partitions`` in the producer's open
        transaction? NONE for each that is, TRANSACTION_ABORTABLE for each that is not; no change."""
        wanted = self._partitions(partitions)
        with self.lock:
            meta, code = self._check_producer(transactional_id, producer_id, producer_epoch)
            if not code and (meta.pending is not None or meta.state in PREPARED):
                code = errors.CONCURRENT_TRANSACTIONS
            if code:
                return {partition: code for partition in wanted}
            current = meta.partitions if meta.state == ONGOING else frozenset()
            return {partition: errors.NONE if partition in current else errors.TRANSACTION_ABORTABLE
                    for partition in wanted}

    @staticmethod
    def _partitions(partitions: Iterable[Partition]) -> frozenset[Partition]:
        wanted = frozenset(partitions)
        for item in wanted:
            if (not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str)
                    or isinstance(item[1], bool) or not isinstance(item[1], int) or item[1] < 0):
                raise ValueError(f"a partition is a (topic, index >= 0) pair, got {item!r}")
        return wanted

    def _check_producer(self, transactional_id: str, producer_id: int,
                        producer_epoch: int) -> tuple[TransactionMetadata | None, int]:
        """(the id's metadata, the code of the first check it fails): under ``lock``."""
        if not isinstance(transactional_id, str):
            raise TypeError(f"transactional_id must be a str, got {transactional_id!r}")
        for name, value in (("producer_id", producer_id), ("producer_epoch", producer_epoch)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {value!r}")
        if not transactional_id:
            return None, errors.INVALID_REQUEST
        status = self._status_error()
        if status:
            return None, status
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return meta, errors.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return meta, errors.PRODUCER_FENCED
        return meta, errors.NONE

    def _add(self, transactional_id: str, producer_id: int, producer_epoch: int,
             wanted: frozenset[Partition]) -> int:
        with self.lock:
            meta, code = self._check_producer(transactional_id, producer_id, producer_epoch)
            if code:
                return code
            if meta.pending is not None or meta.state in PREPARED:
                return errors.CONCURRENT_TRANSACTIONS
            if meta.state == ONGOING and wanted <= meta.partitions:
                return errors.NONE  # nothing new to write
            if meta.state not in IDLE and meta.state != ONGOING:
                return errors.INVALID_TXN_STATE
            now = self._now()
            # The transaction's timeout runs from its first partition, not from InitProducerId.
            start = meta.start_timestamp_ms if meta.state == ONGOING else now
            partitions = (meta.partitions if meta.state == ONGOING else frozenset()) | wanted
            target = meta.transition(ONGOING, now, partitions=partitions, start_timestamp_ms=start)
            meta.pending = ONGOING
        return self._write(meta, target)

    # --- EndTxn -----------------------------------------------------------------------------------

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> int:
        """EndTxn: decide the open transaction. The answer comes once PrepareCommit/PrepareAbort is
        durable (the decision is then final); the markers follow, then CompleteCommit/CompleteAbort.
        A retry with the same outcome after completion answers NONE; with the same outcome while the
        markers are being written CONCURRENT_TRANSACTIONS; with the other outcome, or with no
        transaction open, INVALID_TXN_STATE."""
        if not isinstance(commit, bool):
            raise TypeError(f"commit must be a bool, got {commit!r}")
        with self.lock:
            meta, code = self._check_producer(transactional_id, producer_id, producer_epoch)
            if code:
                return code
            if meta.pending is not None:
                return errors.CONCURRENT_TRANSACTIONS
            state = meta.state
            if state == ONGOING:
                target = meta.transition(PREPARE_COMMIT if commit else PREPARE_ABORT, self._now())
                meta.pending = target.state
            elif state == (PREPARE_COMMIT if commit else PREPARE_ABORT):
                return errors.CONCURRENT_TRANSACTIONS
            elif state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
                return errors.NONE
            else:
                return errors.INVALID_TXN_STATE
        return self._write_prepare(meta, target)

    # --- the prepared transaction: markers, then Complete* ---------------------------------------

    def _prepare_fence_and_abort(self, meta: TransactionMetadata, now: int) -> Transition:
        """Under ``lock``: PrepareAbort of ``meta``'s open transaction under the next epoch, so that
        the producer that opened it is fenced (its markers carry the new epoch). Kafka passes through
        PrepareEpochFence in memory; here the bumped epoch goes straight into the PrepareAbort record,
        and a failed append leaves the metadata as it was, so a retry bumps from the same epoch."""
        epoch = min(meta.producer_epoch + 1, MAX_PRODUCER_EPOCH)
        target = meta.transition(PREPARE_ABORT, now, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH)
        meta.pending = PREPARE_ABORT
        return target

    def _write_prepare(self, meta: TransactionMetadata, target: Transition) -> int:
        code = self._write(meta, target)
        if not code:
            self._send_markers(meta, meta.transitions)
        return code

    def _send_markers(self, meta: TransactionMetadata, generation: int,
                      partitions: frozenset[Partition] | None = None) -> None:
        """Ask for the markers of ``meta``'s prepared transaction (all its partitions, or those left)."""
        with self.lock:
            if self._status != ACTIVE or self.transactions.get(meta.transactional_id) is not meta \
                    or meta.transitions != generation or meta.state not in PREPARED:
                return
            request = MarkerRequest(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                                    meta.state == PREPARE_COMMIT,
                                    meta.partitions if partitions is None else partitions, self.coordinator_epoch)
        if not request.partitions:
            self._markers_written(meta, generation, request, {})
            return
        try:
            self.marker_writer(request, lambda results: self._markers_written(meta, generation, request, results))
        except Exception:  # the writer's own failure: try again later, as for a retriable error
            logger.exception("marker writer failed for transactional id %r", meta.transactional_id)
            self._retry(lambda: self._send_markers(meta, generation, request.partitions), MARKER_RETRY_BACKOFF_MS)

    def _markers_written(self, meta: TransactionMetadata, generation: int, request: MarkerRequest,
                         results: Mapping[Partition, int]) -> None:
        left = set()
        for partition in request.partitions:
            code = results.get(partition, errors.UNKNOWN_SERVER_ERROR)  # no answer: ask again
            if code == errors.NONE or code in DROPPED_MARKER_ERRORS:
                if code:
                    logger.warning("marker for transactional id %r dropped on %s-%d: %s", meta.transactional_id,
                                   partition[0], partition[1], errors.name_of(code))
                continue
            if code in FATAL_MARKER_ERRORS:
                logger.error("markers for transactional id %r stopped: %s (a newer coordinator owns it)",
                             meta.transactional_id, errors.name_of(code))
                return
            left.add(partition)
        if left:
            self._retry(lambda: self._send_markers(meta, generation, frozenset(left)), MARKER_RETRY_BACKOFF_MS)
            return
        self._complete(meta, generation)

    def _complete(self, meta: TransactionMetadata, generation: int) -> None:
        with self.lock:
            if self._status != ACTIVE or self.transactions.get(meta.transactional_id) is not meta \
                    or meta.transitions != generation or meta.state not in PREPARED or meta.pending is not None:
                return
            state = COMPLETE_COMMIT if meta.state == PREPARE_COMMIT else COMPLETE_ABORT
            target = meta.transition(state, self._now(), partitions=frozenset())
            meta.pending = state
        if self._write(meta, target):
            self._retry(lambda: self._complete(meta, generation), COMPLETE_RETRY_BACKOFF_MS)

    def _retry(self, fn, delay_ms: int) -> None:
        with self.lock:
            if self._status != ACTIVE:
                return
            self.scheduler.schedule("txn-retry", fn, delay_ms)

    # --- the state log ----------------------------------------------------------------------------

    def _write(self, meta: TransactionMetadata, target: Transition | None) -> int:
        """Append ``target`` (None: a tombstone) for ``meta`` whose ``pending`` is set; on success make
        it current. Called without ``lock`` (the append waits for an fsync)."""
        try:
            self.state_log.append(meta.transactional_id, None if target is None else target.value())
        except Exception as exc:  # any failure: the pending state must go, or the id stays busy forever
            code = append_error_code(exc)
            if isinstance(exc, LogStoreError):
                logger.warning("transaction state append for %r failed (%s): %s", meta.transactional_id,
                               errors.name_of(code), exc)
            else:  # not a storage failure but a bug: with its traceback
                logger.exception("transaction state append for %r failed (%s)", meta.transactional_id,
                                 errors.name_of(code))
            with self.lock:
                meta.pending = None
            return code
        with self.lock:
            if self.transactions.get(meta.transactional_id) is not meta:
                return errors.NOT_COORDINATOR
            if target is None:
                del self.transactions[meta.transactional_id]
                meta.pending = None
            else:
                meta.apply(target)
            # A coordinator stopped during the append no longer answers for the id: its successor
            # loads the record just written.
            return errors.NOT_COORDINATOR if self._status != ACTIVE else errors.NONE

    # --- scanners ---------------------------------------------------------------------------------

    def abort_timed_out_transactions(self) -> int:
        """Abort every open transaction older than its timeout, under a bumped epoch (the producer
        that opened it is fenced). Runs every ``transaction.abort.timed.out.transaction.cleanup.
        interval.ms``; returns how many aborts it started."""
        with self.lock:
            if self._status != ACTIVE:
                return 0
            now = self._now()
            fences = []
            for meta in self.transactions.values():
                if meta.state == ONGOING and meta.pending is None \
                        and meta.start_timestamp_ms + meta.timeout_ms < now:
                    fences.append((meta, self._prepare_fence_and_abort(meta, now)))
        started = 0
        for meta, target in fences:
            logger.info("transactional id %r: transaction timed out after %d ms; aborting",
                        meta.transactional_id, target.last_update_timestamp_ms - meta.start_timestamp_ms)
            if not self._write_prepare(meta, target):
                started += 1
        return started

    def remove_expired_transactional_ids(self) -> int:
        """Forget transactional ids with no open transaction whose last update is older than
        ``transactional.id.expiration.ms`` (a tombstone is written). Returns how many."""
        with self.lock:
            if self._status != ACTIVE:
                return 0
            horizon = self._now() - self.config.transactional_id_expiration_ms
            expired = [meta for meta in self.transactions.values()
                       if meta.state in IDLE and meta.pending is None and meta.last_update_timestamp_ms <= horizon]
            for meta in expired:
                meta.pending = DEAD
        return sum(1 for meta in expired if not self._write(meta, None))

    # --- DescribeTransactions / ListTransactions --------------------------------------------------

    def describe_transactions(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        """DescribeTransactions: the current (durable) state of each id."""
        answers = []
        with self.lock:
            status = self._status_error()
            for transactional_id in transactional_ids:
                if not isinstance(transactional_id, str):
                    raise TypeError(f"a transactional id is a str, got {transactional_id!r}")
                meta = self.transactions.get(transactional_id)
                if status or not transactional_id or meta is None:
                    code = status or (errors.INVALID_REQUEST if not transactional_id
                                      else errors.TRANSACTIONAL_ID_NOT_FOUND)
                    answers.append(TransactionDescription(code, transactional_id, topics={}))
                    continue
                topics: dict[str, list[int]] = {}
                for topic, partition in sorted(meta.partitions):
                    topics.setdefault(topic, []).append(partition)
                answers.append(TransactionDescription(
                    errors.NONE, transactional_id, STATE_NAMES[meta.state], meta.timeout_ms,
                    meta.start_timestamp_ms, meta.producer_id, meta.producer_epoch, topics))
        return answers

    def list_transactions(self, state_filters: Iterable[str] = (), producer_id_filters: Iterable[int] = (),
                          duration_filter_ms: int = -1) -> ListTransactionsResult:
        """ListTransactions: the ids in the named states (all when none are named), of the given
        producer ids (all when none), open for longer than ``duration_filter_ms`` (-1: any)."""
        states = list(state_filters)
        by_name = {name: state for state, name in STATE_NAMES.items()}
        unknown = [name for name in states if name not in by_name]
        wanted_states = {by_name[name] for name in states if name in by_name}
        producers = set(producer_id_filters)
        with self.lock:
            status = self._status_error()
            if status:
                return ListTransactionsResult(status, unknown, [])
            now = self._now()
            listed = [
                TransactionListing(meta.transactional_id, meta.producer_id, STATE_NAMES[meta.state])
                for meta in sorted(self.transactions.values(), key=lambda m: m.transactional_id)
                if (not states or meta.state in wanted_states)
                and (not producers or meta.producer_id in producers)
                and (duration_filter_ms < 0 or (meta.start_timestamp_ms >= 0
                                                and now - meta.start_timestamp_ms > duration_filter_ms))]
        return ListTransactionsResult(errors.NONE, unknown, listed)
