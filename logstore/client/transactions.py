"""``TransactionManager``: a transactional producer's transaction state and its requests to the
transaction and group coordinators (the transactional half of Kafka's ``TransactionManager``; the
idempotent half, sequences per partition, is ``idempotence``).

What it owns:
- the state machine: uninitialized, ready (no transaction open), in a transaction, committing,
  aborting, abortable error (this transaction can only be aborted), fatal error (the producer can
  only be closed), and which calls each state allows (``TransactionStateError`` otherwise);
- the transaction coordinator: FindCoordinator with key type 1 (the transactional id), found again
  when it moves (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a broken connection);
- ``init``: InitProducerId with the transactional id and ``transaction.timeout.ms``: the producer
  id and a new epoch, which fences every older producer of that id (their transactions are
  aborted); after an abortable error that left sequences in doubt, the same call with the id and
  epoch held (KIP-360, InitProducerId v3+) bumps the epoch so sequences start again from 0;
- ``add_partition``: AddPartitionsToTxn before the first record of a transaction to a partition (the
  producer calls it before the record is queued, so no batch of a partition is sent before the
  coordinator has the partition);
- ``send_offsets``: AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the
  group's coordinator (FindCoordinator key type 0), with the consumer's generation, member id and
  instance id when given (KIP-447: a consumer that left the group can no longer commit);
- ``end``: EndTxn (commit or abort) once the producer has flushed, skipped when the transaction
  added nothing (as Kafka's clients skip it);
- the errors, in Kafka's classes: CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS and the
  coordinator-moved errors are retried with backoff (20 ms at first for CONCURRENT_TRANSACTIONS,
  doubling up to ``retry.backoff.ms``) until ``max.block.ms``; PRODUCER_FENCED and
  INVALID_PRODUCER_EPOCH from a coordinator, authorization of the transactional id and
  INVALID_TXN_STATE are fatal; a refused batch, a refused offset commit, UNKNOWN_PRODUCER_ID and
  TRANSACTION_ABORTABLE are abortable (``batch_failed`` is the sender thread's report).

Thread-safe: one lock around the state and the coordinator requests (they run in the calling
thread: ``init_transactions``, ``send`` to a new partition, ``commit_transaction``...).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections import deque
from typing import Any, Mapping

from ..clock import Clock
from ..server.protocol import errors as kafka_errors
from .cluster import NetworkClient
from .connection import BrokerConnection
from .consumer import GroupMetadata
from .errors import (AbortableTransactionError, BrokerResponseError, FatalTransactionError, NetworkError,
                     ProducerFencedError, RequestTimedOutError, TransactionError, TransactionStateError)

logger = logging.getLogger(__name__)

# Kafka's codes for the transaction APIs (the server's table names the ones it answers itself).
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
OPERATION_NOT_ATTEMPTED = 55
FENCED_INSTANCE_ID = 82
UNSTABLE_OFFSET_COMMIT = 88
PRODUCER_FENCED = 90
TRANSACTION_ABORTABLE = 120
_NAMES = {NOT_COORDINATOR: "NOT_COORDINATOR", ILLEGAL_GENERATION: "ILLEGAL_GENERATION",
          UNKNOWN_MEMBER_ID: "UNKNOWN_MEMBER_ID", INVALID_TXN_STATE: "INVALID_TXN_STATE",
          INVALID_PRODUCER_ID_MAPPING: "INVALID_PRODUCER_ID_MAPPING",
          INVALID_TRANSACTION_TIMEOUT: "INVALID_TRANSACTION_TIMEOUT", CONCURRENT_TRANSACTIONS: "CONCURRENT_TRANSACTIONS",
          OPERATION_NOT_ATTEMPTED: "OPERATION_NOT_ATTEMPTED", FENCED_INSTANCE_ID: "FENCED_INSTANCE_ID",
          UNSTABLE_OFFSET_COMMIT: "UNSTABLE_OFFSET_COMMIT", PRODUCER_FENCED: "PRODUCER_FENCED",
          TRANSACTION_ABORTABLE: "TRANSACTION_ABORTABLE"}

# The coordinator moved or is not there yet: find it again, then retry.
_COORDINATOR_MOVED = frozenset({NOT_COORDINATOR, kafka_errors.COORDINATOR_NOT_AVAILABLE})
# Retried as they are (the same coordinator, after a backoff).
_RETRY = frozenset({CONCURRENT_TRANSACTIONS, kafka_errors.COORDINATOR_LOAD_IN_PROGRESS, kafka_errors.REQUEST_TIMED_OUT,
                    kafka_errors.NETWORK_EXCEPTION})
_FENCED = frozenset({PRODUCER_FENCED, kafka_errors.INVALID_PRODUCER_EPOCH})
_FATAL = frozenset({kafka_errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, kafka_errors.CLUSTER_AUTHORIZATION_FAILED,
                    INVALID_TXN_STATE, INVALID_TRANSACTION_TIMEOUT, kafka_errors.UNSUPPORTED_VERSION})
# The transaction cannot commit, but an abort and a new epoch let the producer go on.
_ABORTABLE = frozenset({kafka_errors.UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING, TRANSACTION_ABORTABLE,
                        kafka_errors.TOPIC_AUTHORIZATION_FAILED, kafka_errors.GROUP_AUTHORIZATION_FAILED,
                        ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID})
_FIRST_CONCURRENT_BACKOFF_MS = 20  # Kafka's first wait after CONCURRENT_TRANSACTIONS: markers are quick
# The highest version a client sends: AddPartitionsToTxn v4+ is the brokers' batched, verify-only shape.
_CLIENT_MAX_VERSIONS = {"AddPartitionsToTxn": 3}


def error_name(code: int) -> str:
    return kafka_errors.NAMES.get(code) or _NAMES.get(code) or f"error {code}"


class State(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in a transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


class TransactionManager:
    """One transactional id's transactions (see the module docstring). ``identity`` is told the
    producer id and epoch (the producer's ``IdempotenceManager.set_producer_id``)."""

    def __init__(self, network: NetworkClient, transactional_id: str, transaction_timeout_ms: int, *,
                 retry_backoff_ms: int, max_block_ms: int, clock: Clock) -> None:
        self._network = network
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._retry_backoff_ms = max(retry_backoff_ms, 1)
        self._max_block_ms = max_block_ms
        self._clock = clock
        self._lock = threading.RLock()
        self._state = State.UNINITIALIZED
        # Failures the sender thread reports (``batch_failed``), applied under the lock by the next
        # call: the sender never waits for a coordinator request another thread has under way
        self._failures: deque[BaseException] = deque()
        self.producer_id = -1
        self.producer_epoch = -1
        self._error: TransactionError | None = None  # the abortable or fatal error of those states
        self._partitions: set[tuple[str, int]] = set()  # added to the open transaction
        self._offsets_added = False  # AddOffsetsToTxn done in the open transaction
        self.epoch_bump_needed = False  # sequences in doubt: the next abort ends with a new epoch
        self._coordinators: dict[str, tuple[str, int]] = {}  # "txn" or a group id -> (host, port)

    # --- state -----------------------------------------------------------------------------------

    @property
    def state(self) -> State:
        with self._lock:
            self._apply_failures()
            return self._state

    def _require(self, what: str, *states: State) -> None:
        self._apply_failures()
        if self._state is State.FATAL_ERROR:
            raise self._error_again(what)
        if self._state not in states:
            if self._state is State.ABORTABLE_ERROR and what != "abort_transaction":
                raise self._error_again(what)
            raise TransactionStateError(f"{what}: not allowed while the producer is {self._state.value} "
                                        f"(allowed: {', '.join(state.value for state in states)})")

    def _error_again(self, what: str) -> TransactionError:
        error = self._error
        kind = type(error) if error is not None else FatalTransactionError
        again = kind(f"{what}: {error}", getattr(error, "error_code", None), getattr(error, "error_name", None))
        again.__cause__ = error
        return again

    def _fatal(self, error: FatalTransactionError) -> FatalTransactionError:
        self._state, self._error = State.FATAL_ERROR, error
        logger.error("transactional producer %s: %s", self.transactional_id, error)
        return error

    def _abortable(self, error: AbortableTransactionError) -> AbortableTransactionError:
        if self._state in (State.IN_TRANSACTION, State.COMMITTING):  # (the first error is the one kept)
            self._state, self._error = State.ABORTABLE_ERROR, error
        return error

    @property
    def in_transaction(self) -> bool:
        return self._state is State.IN_TRANSACTION

    @property
    def error(self) -> TransactionError | None:
        """The error that put the producer in the abortable or fatal state (None otherwise)."""
        with self._lock:
            self._apply_failures()
            return self._error

    def check_send(self) -> None:
        """Raise unless a record may be sent now (a transaction is open and not failed)."""
        with self._lock:
            self._require("send", State.IN_TRANSACTION)

    def batch_failed(self, error: BaseException) -> None:
        """The sender's report: a batch of the open transaction failed (refused, or expired): the
        transaction cannot commit, and the producer's sequences may be in doubt. Applied by the
        next call (any thread's), so the sender thread never waits for the lock."""
        self._failures.append(error)

    def _apply_failures(self) -> None:
        while self._failures:
            error = self._failures.popleft()
            self.epoch_bump_needed = True
            if self._state in (State.ABORTING, State.FATAL_ERROR, State.READY, State.UNINITIALIZED):
                continue  # aborting anyway (the batches an abort drops fail too), or nothing open
            code = getattr(error, "error_code", None)
            if code in (PRODUCER_FENCED, kafka_errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        kafka_errors.CLUSTER_AUTHORIZATION_FAILED, INVALID_TXN_STATE):
                kind = ProducerFencedError if code == PRODUCER_FENCED else FatalTransactionError
                self._fatal(kind(f"a batch was refused: {error}", code, error_name(code)))
            else:
                failure = AbortableTransactionError(f"a batch of the transaction failed: {error}", code,
                                                    None if code is None else error_name(code))
                failure.__cause__ = error
                self._abortable(failure)

    # --- the calls -------------------------------------------------------------------------------

    def init(self, identity) -> None:
        """InitProducerId with the transactional id: ``identity(producer_id, epoch)`` told the result."""
        with self._lock:
            self._require("init_transactions", State.UNINITIALIZED, State.INITIALIZING)
            self._state = State.INITIALIZING
            self._init_producer_id(identity, "init_transactions", bump=False)
            self._state = State.READY

    def _init_producer_id(self, identity, what: str, *, bump: bool) -> None:
        body = {"transactional_id": self.transactional_id, "transaction_timeout_ms": self.transaction_timeout_ms,
                "producer_id": self.producer_id if bump else -1, "producer_epoch": self.producer_epoch if bump else -1}
        answer, code = self._coordinator_call("txn", "InitProducerId", body, lambda a: a["error_code"], what)
        if code != kafka_errors.NONE:
            raise self._classify(code, f"{what}: InitProducerId refused")
        self.producer_id, self.producer_epoch = answer["producer_id"], answer["producer_epoch"]
        identity(self.producer_id, self.producer_epoch)
        self.epoch_bump_needed = False
        logger.info("transactional producer %s: producer id %d epoch %d", self.transactional_id, self.producer_id,
                    self.producer_epoch)

    def begin(self) -> None:
        with self._lock:
            self._require("begin_transaction", State.READY)
            self._partitions.clear()
            self._offsets_added = False
            self._state = State.IN_TRANSACTION

    def add_partition(self, topic: str, partition: int) -> None:
        """AddPartitionsToTxn for ``topic``/``partition`` unless the open transaction has it."""
        with self._lock:
            self._require("send", State.IN_TRANSACTION)
            if (topic, partition) in self._partitions:
                return
            body = {"v3_and_below_transactional_id": self.transactional_id,
                    "v3_and_below_producer_id": self.producer_id, "v3_and_below_producer_epoch": self.producer_epoch,
                    "v3_and_below_topics": [{"name": topic, "partitions": [partition]}]}
            _, code = self._coordinator_call("txn", "AddPartitionsToTxn", body, _first_partition_code,
                                             f"adding {topic}-{partition} to the transaction",
                                             retry=_RETRY | {kafka_errors.UNKNOWN_TOPIC_OR_PARTITION})
            if code != kafka_errors.NONE:
                raise self._classify(code, f"AddPartitionsToTxn for {topic}-{partition} refused")
            self._partitions.add((topic, partition))

    def send_offsets(self, offsets: Mapping[tuple[str, int], tuple[int, str | None]], group: GroupMetadata) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit of ``offsets`` to ``group``'s coordinator."""
        with self._lock:
            self._require("send_offsets_to_transaction", State.IN_TRANSACTION)
            body = {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                    "producer_epoch": self.producer_epoch, "group_id": group.group_id}
            _, code = self._coordinator_call("txn", "AddOffsetsToTxn", body, lambda a: a["error_code"],
                                             f"adding group {group.group_id}'s offsets to the transaction")
            if code != kafka_errors.NONE:
                raise self._classify(code, f"AddOffsetsToTxn for group {group.group_id} refused")
            self._offsets_added = True
            topics: dict[str, list[dict[str, Any]]] = {}
            for (topic, partition), (offset, metadata) in sorted(offsets.items()):
                topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                     "committed_leader_epoch": -1, "committed_metadata": metadata})
            body = {"transactional_id": self.transactional_id, "group_id": group.group_id,
                    "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                    "generation_id": group.generation_id, "member_id": group.member_id,
                    "group_instance_id": group.group_instance_id,
                    "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}
            _, code = self._coordinator_call(group.group_id, "TxnOffsetCommit", body, _first_offset_code,
                                             f"committing group {group.group_id}'s offsets in the transaction",
                                             retry=_RETRY | {kafka_errors.UNKNOWN_TOPIC_OR_PARTITION})
            if code != kafka_errors.NONE:
                raise self._classify(code, f"TxnOffsetCommit for group {group.group_id} refused")

    def begin_commit(self) -> None:
        with self._lock:
            self._require("commit_transaction", State.IN_TRANSACTION, State.COMMITTING)
            self._state = State.COMMITTING

    def begin_abort(self) -> None:
        with self._lock:
            self._require("abort_transaction", State.IN_TRANSACTION, State.ABORTABLE_ERROR, State.ABORTING)
            self._state = State.ABORTING

    def end(self, commit: bool, identity) -> None:
        """EndTxn (skipped when the transaction added nothing); after an abort that left sequences
        in doubt, a new epoch (``identity`` told it). The producer flushed before this."""
        what = "commit_transaction" if commit else "abort_transaction"
        with self._lock:
            if commit:
                self._require(what, State.COMMITTING)
            else:
                self._require(what, State.ABORTING)
            if self._partitions or self._offsets_added:
                body = {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                        "producer_epoch": self.producer_epoch, "committed": commit}
                _, code = self._coordinator_call("txn", "EndTxn", body, lambda a: a["error_code"], what)
                if code != kafka_errors.NONE:
                    raise self._classify(code, f"{what}: EndTxn refused")
            self._partitions.clear()
            self._offsets_added = False
            if not commit and self.epoch_bump_needed:
                self._init_producer_id(identity, what, bump=True)
            self._state, self._error = State.READY, None

    # --- requests --------------------------------------------------------------------------------

    def _classify(self, code: int, what: str) -> TransactionError:
        name = error_name(code)
        message = f"{what}: {name}"
        if code in _FENCED:
            return self._fatal(ProducerFencedError(
                f"{message}: another producer with transactional.id {self.transactional_id!r} took over", code, name))
        if code in _ABORTABLE:
            if code in (kafka_errors.UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING):
                self.epoch_bump_needed = True
            if self._state in (State.IN_TRANSACTION, State.COMMITTING, State.ABORTABLE_ERROR):
                return self._abortable(AbortableTransactionError(message, code, name))
            if self._state is State.ABORTING:  # the abort itself was refused: its epoch is no good
                self._state = State.ABORTABLE_ERROR
                self._error = AbortableTransactionError(message, code, name)
                return self._error
        return self._fatal(FatalTransactionError(message, code, name))

    def _coordinator_call(self, key: str, api: str, body: dict, code_of, what: str, *,
                          retry: frozenset[int] = _RETRY) -> tuple[dict, int]:
        """``body`` to the coordinator of ``key`` ("txn": the transaction's, else a group's), again
        while it moves, loads or answers a retriable error, for up to ``max.block.ms``: the answer
        and its error code. ``RequestTimedOutError`` when the time is up (the state is kept: the
        call may be made again)."""
        deadline_ms = self._clock.monotonic_ms() + self._max_block_ms
        concurrent_ms = _FIRST_CONCURRENT_BACKOFF_MS
        backoff_ms = self._retry_backoff_ms
        while True:
            try:
                connection = self._connection(key)
                version = connection.version_of(api)
                answer = connection.request(api, body, min(version, _CLIENT_MAX_VERSIONS.get(api, version)))
                code = code_of(answer)
                last = error_name(code)
            except NetworkError as exc:
                self._coordinators.pop(key, None)
                code, answer, last = None, None, str(exc)
            except BrokerResponseError as exc:  # FindCoordinator's own refusal
                if exc.error_code not in _COORDINATOR_MOVED | _RETRY:
                    raise self._classify(exc.error_code, f"{what}: FindCoordinator refused")
                code, answer, last = None, None, str(exc)
            if code is not None and code not in _COORDINATOR_MOVED and code not in retry:
                return answer, code
            if code in _COORDINATOR_MOVED:
                self._coordinators.pop(key, None)
            if code == CONCURRENT_TRANSACTIONS:
                wait_ms, concurrent_ms = concurrent_ms, min(concurrent_ms * 2, self._retry_backoff_ms)
            else:
                wait_ms, backoff_ms = backoff_ms, min(backoff_ms * 2, 1000)
            if self._clock.monotonic_ms() + wait_ms >= deadline_ms:
                raise RequestTimedOutError(f"{what}: no answer within max.block.ms ({self._max_block_ms} ms); "
                                           f"the last attempt: {last}")
            logger.debug("transactional producer %s: %s: %s, again in %d ms", self.transactional_id, api, last, wait_ms)
            self._clock.sleep_ms(wait_ms)

    def _connection(self, key: str) -> BrokerConnection:
        address = self._coordinators.get(key)
        if address is None:
            key_type, name = (1, self.transactional_id) if key == "txn" else (0, key)
            answer = self._network.request_any("FindCoordinator", {"key": name, "key_type": key_type,
                                                                   "coordinator_keys": [name]})
            entry = answer["coordinators"][0] if answer.get("coordinators") else answer
            if entry["error_code"]:
                code = entry["error_code"]
                raise BrokerResponseError(f"FindCoordinator for {name!r}: {error_name(code)}", code, error_name(code))
            address = self._coordinators[key] = (entry["host"], entry["port"])
        try:
            return self._network.connection_to(*address)
        except NetworkError:
            self._coordinators.pop(key, None)
            raise


def _first_partition_code(answer: dict) -> int:
    """AddPartitionsToTxn's error: the first partition's that is not NONE or OPERATION_NOT_ATTEMPTED
    (the others were not tried because of it)."""
    codes = [partition["partition_error_code"] for topic in answer["results_by_topic_v3_and_below"]
             for partition in topic["results_by_partition"]]
    return next((code for code in codes if code not in (kafka_errors.NONE, OPERATION_NOT_ATTEMPTED)),
                codes[0] if codes else kafka_errors.NONE)


def _first_offset_code(answer: dict) -> int:
    return next((partition["error_code"] for topic in answer["topics"] for partition in topic["partitions"]
                 if partition["error_code"]), kafka_errors.NONE)


def group_metadata(group: Any) -> GroupMetadata:
    """``send_offsets_to_transaction``'s group argument as ``GroupMetadata``: a group id, or any
    object with ``group_id`` (and ``generation_id``, ``member_id``, ``group_instance_id``)."""
    if isinstance(group, GroupMetadata):
        return group
    if isinstance(group, str):
        if not group:
            raise ValueError("a group id is a non-empty str, got ''")
        return GroupMetadata(group)
    group_id = getattr(group, "group_id", None)
    if not isinstance(group_id, str) or not group_id:
        raise TypeError(f"the group is a group id or a consumer's group_metadata(), got {group!r}")
    return GroupMetadata(group_id, getattr(group, "generation_id", -1), getattr(group, "member_id", "") or "",
                         getattr(group, "group_instance_id", None))
