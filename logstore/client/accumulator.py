"""``RecordAccumulator``: the producer's per-partition batches, waiting for the sender (Kafka's name).

What it owns:
- ``append(topic, partition, record)``: the record joins the last open batch of its partition, or a
  new one when that would pass ``batch_size`` bytes (a record larger than ``batch_size`` gets a batch
  of its own). It returns a ``RecordFuture`` (what a caller uses of ``concurrent.futures.Future``)
  that the batch completes with the record's ``RecordMetadata`` (partition, offset, timestamp) or
  fails with the batch's error: the futures of a batch share one ``BatchResult``, so completing a
  batch costs the same whatever its record count;
- memory: the batches hold at most ``buffer_memory`` bytes (estimated as the wire batch would take
  them); an append that does not fit blocks until the sender frees some, for at most
  ``max_block_ms``, then raises ``BufferExhaustedError``. A record larger than ``buffer_memory``
  is refused at once;
- ``ready(now_ms)``: the partitions whose first batch should go now (full, ``linger_ms`` passed since
  it was opened, a flush asked for, an append waiting for memory, or closing), and how long until
  the next one will;
- ``drain(partitions)``: the first queued batch of each of those partitions, taken off for a request
  (at most ``max_in_flight`` batches of a partition out at once); the sender gives each back for a
  retry (``reenqueue``: in creation order, in front of the batches created after it) or completes it
  and frees its memory (``deallocate``);
- ``expire(now_ms, delivery_timeout_ms)``: the queued batches that waited too long, taken off
  (``delivery.timeout.ms``);
- ``begin_flush``/``end_flush``: while a flush is under way every batch is ready at once.

Thread-safe: the application's threads append while the sender thread drains. Time comes from the
clock (``logstore.clock``); blocking waits for memory wait in real time up to ``max_block_ms``.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import NamedTuple

from ..clock import SYSTEM_CLOCK, Clock
from ..records.decoder import Record
from .errors import BufferExhaustedError

logger = logging.getLogger(__name__)

BATCH_OVERHEAD_BYTES = 61  # a RecordBatch v2 header (Kafka's DefaultRecordBatch.RECORD_BATCH_OVERHEAD)
RECORD_OVERHEAD_BYTES = 21  # at most: length, attributes, timestamp and offset deltas, key/value lengths, headers count


class RecordMetadata(NamedTuple):
    """Where a produced record landed: what its future's ``result()`` gives."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


def record_size_bytes(record: Record) -> int:
    """The bytes ``record`` adds to a wire batch, at most (varints counted at their widest)."""
    size = RECORD_OVERHEAD_BYTES + len(record.key or b"") + len(record.value or b"")
    for name, value in record.headers:
        size += 10 + len(name.encode()) + len(value or b"")
    return size


class BatchResult:
    """What became of one batch, shared by its records' futures: completed at a base offset or
    failed with an error, once (the first outcome stays: a batch failed by its delivery timeout is
    not completed by a late answer). One event per batch instead of a ``Future`` per record: the
    producer's per-record cost is a small object, and a batch's completion is O(1)."""

    __slots__ = ("topic", "partition", "_event", "_lock", "base_offset", "log_append_time_ms", "error", "_callbacks")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._event = threading.Event()
        self._lock = threading.Lock()
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.error: BaseException | None = None
        self._callbacks: list | None = None

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._event.wait(timeout_s)

    def _settle(self, base_offset: int, log_append_time_ms: int, error: BaseException | None) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.base_offset, self.log_append_time_ms, self.error = base_offset, log_append_time_ms, error
            callbacks, self._callbacks = self._callbacks, None
            self._event.set()
        for callback in callbacks or ():
            try:
                callback()
            except Exception:  # a user's callback must not stop the sender: logged, as Future does
                logger.exception("a produce future's callback raised")

    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> None:
        self._settle(base_offset, log_append_time_ms, None)

    def fail(self, error: BaseException) -> None:
        self._settle(-1, -1, error)

    def add_callback(self, callback) -> bool:
        """Call ``callback()`` when settled; False (not added) when it is settled already."""
        with self._lock:
            if self._event.is_set():
                return False
            if self._callbacks is None:
                self._callbacks = []
            self._callbacks.append(callback)
            return True


class RecordFuture:
    """A produced record's future (the subset of ``concurrent.futures.Future`` a producer's caller
    uses: ``result``, ``exception``, ``done``, ``add_done_callback``), resolved with its batch:
    ``result()`` gives its ``RecordMetadata``."""

    __slots__ = ("_batch", "_index", "_timestamp_ms")

    def __init__(self, batch: BatchResult, index: int, timestamp_ms: int | None) -> None:
        self._batch = batch
        self._index = index
        self._timestamp_ms = timestamp_ms

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self._batch.error is not None else "done")
        return f"RecordFuture({self._batch.topic}-{self._batch.partition}, {state})"

    def done(self) -> bool:
        return self._batch._event.is_set()

    def running(self) -> bool:
        return not self.done()

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False  # a record handed to the producer cannot be taken back

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error that stopped the record (None when stored); ``TimeoutError`` after ``timeout`` s."""
        if not self._batch._event.wait(timeout):
            raise TimeoutError(f"the record was not acknowledged within {timeout} s")
        return self._batch.error

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Where the record landed; raises the error that stopped it, or ``TimeoutError`` after
        ``timeout`` s."""
        batch = self._batch
        if not batch._event.wait(timeout):
            raise TimeoutError(f"the record was not acknowledged within {timeout} s")
        if batch.error is not None:
            raise batch.error
        timestamp = batch.log_append_time_ms if batch.log_append_time_ms != -1 else self._timestamp_ms
        return RecordMetadata(batch.topic, batch.partition, -1 if batch.base_offset < 0 else batch.base_offset + self._index,
                              -1 if timestamp is None else timestamp)

    def add_done_callback(self, fn) -> None:
        """Call ``fn(future)`` once the record is stored or failed (at once when it is already)."""
        if not self._batch.add_callback(lambda: fn(self)):
            fn(self)


class ProducerBatch:
    """Records of one partition going in one request, and their futures."""

    __slots__ = ("topic", "partition", "created_ms", "records", "result", "size_bytes", "attempts", "drained_ms",
                 "retry_at_ms", "base_sequence", "producer_id", "producer_epoch", "serial", "in_request",
                 "not_stored", "done", "last_error")

    def __init__(self, topic: str, partition: int, created_ms: int, serial: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.created_ms = created_ms
        self.records: list[Record] = []
        self.result = BatchResult(topic, partition)  # what its records' futures give
        self.size_bytes = BATCH_OVERHEAD_BYTES
        self.attempts = 0  # requests that carried it so far
        self.drained_ms: int | None = None  # when the sender took it (None: queued)
        self.retry_at_ms = 0  # a retried batch waits for its backoff
        self.serial = serial  # creation order in the accumulator: a partition's send order
        # An idempotent producer's identity and sequence for the batch, given at its first send and
        # kept by its retries while the broker may have stored it (-1: not sent yet)
        self.base_sequence = -1
        self.producer_id = -1
        self.producer_epoch = -1
        self.in_request = False  # carried by a request not answered yet
        self.not_stored = False  # the broker refused its sequence: not stored, waits for new sequences
        self.done = False  # its futures are resolved (it may still be in a request: its answer is awaited)
        self.last_error: str | None = None  # why its last attempt failed (Kafka's error name)

    def __repr__(self) -> str:
        return f"ProducerBatch({self.topic}-{self.partition}, {len(self.records)} records, {self.size_bytes} bytes)"

    @property
    def last_sequence(self) -> int:
        """The sequence of its last record (sequences wrap from 2**31 - 1 to 0, as Kafka's do)."""
        return (self.base_sequence + len(self.records) - 1) % 2**31

    def try_append(self, record: Record, size_bytes: int, batch_size: int) -> RecordFuture | None:
        """The record's future, or None when the batch is not empty and the record would take it past
        ``batch_size``."""
        if self.records and self.size_bytes + size_bytes > batch_size:
            return None
        records = self.records
        records.append(record)
        self.size_bytes += size_bytes
        return RecordFuture(self.result, len(records) - 1, record.timestamp_ms)

    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> None:
        """The broker stored the batch at ``base_offset``: each record's future gets its offset (and
        the broker's time for a LogAppendTime topic). ``base_offset`` -1 (``acks=0``: no answer, so
        no offsets) gives every record offset -1, as Kafka's producer reports them. A batch failed
        already (a delivery timeout) stays failed."""
        self.done = True
        self.result.complete(base_offset, log_append_time_ms)

    def fail(self, error: BaseException) -> None:
        """The batch will not be stored (or may not have been, for a timeout): every record's future
        raises ``error`` (unless the batch completed already)."""
        self.done = True
        self.result.fail(error)


class RecordAccumulator:
    """Per-partition queues of ``ProducerBatch`` (see the module docstring)."""

    def __init__(self, *, batch_size: int = 16384, linger_ms: int = 5, buffer_memory: int = 32 * 1024 * 1024,
                 max_block_ms: int = 60_000, max_in_flight: int = 1, clock: Clock = SYSTEM_CLOCK) -> None:
        for name, value, low in (("batch_size", batch_size, 1), ("linger_ms", linger_ms, 0),
                                 ("buffer_memory", buffer_memory, 1), ("max_block_ms", max_block_ms, 0),
                                 ("max_in_flight", max_in_flight, 1)):
            if type(value) is not int or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.max_block_ms = max_block_ms
        self.max_in_flight = max_in_flight
        self._clock = clock
        self._lock = threading.RLock()
        self._condition = threading.Condition(self._lock)
        self._queues: dict[tuple[str, int], deque[ProducerBatch]] = {}  # batches waiting to be drained
        self._in_flight: dict[tuple[str, int], int] = {}  # batches drained and not yet given back or done
        self._incomplete: dict[ProducerBatch, None] = {}  # every batch not deallocated, in creation order
        self._serial = 0
        self._used_bytes = 0
        self._flushes = 0
        self._closing = False
        self._waiting = 0  # appends blocked on memory: every batch is ready then (free some)

    @property
    def used_bytes(self) -> int:
        """Memory held by batches not yet deallocated (queued or in flight)."""
        return self._used_bytes

    def append(self, topic: str, partition: int, record: Record) -> RecordFuture:
        """Add ``record`` to ``topic``/``partition``'s batches; its future completes when the batch does."""
        if type(record) is not Record:
            raise TypeError(f"append takes a Record, got {type(record).__name__}")
        return self.append_record(topic, partition, record)[0]

    def append_record(self, topic: str, partition: int, record: Record) -> tuple[RecordFuture, bool]:
        """``append`` for the producer (``record`` is a ``Record``): the future, and whether the
        record opened a new batch (the sender then has a new deadline to wait for)."""
        size = record_size_bytes(record)
        if size + BATCH_OVERHEAD_BYTES > self.buffer_memory:
            raise ValueError(f"a record of {size} bytes is larger than buffer_memory ({self.buffer_memory} bytes)")
        with self._lock:  # the condition's lock, entered directly: the per-record path
            queue = self._queues.get((topic, partition))
            if queue:
                # Only a batch never sent takes more records: a retried one keeps its records (and
                # its sequence)
                last = queue[-1]
                if last.attempts == 0 and last.size_bytes + size <= self.batch_size \
                        and self._used_bytes + size <= self.buffer_memory:
                    self._used_bytes += size
                    return last.try_append(record, size, self.batch_size), False
            elif queue is None:
                queue = self._queues[(topic, partition)] = deque()
            deadline_ms = self._clock.monotonic_ms() + self.max_block_ms
            while True:  # the queue may change while this waits for memory: look again each time
                last = queue[-1] if queue and queue[-1].attempts == 0 else None
                if last is not None and last.size_bytes + size > self.batch_size:
                    last = None  # full for this record: a new batch behind it
                needed = size if last is not None else BATCH_OVERHEAD_BYTES + size
                if self._used_bytes + needed <= self.buffer_memory:
                    break
                self._wait_for_memory(needed, deadline_ms)
            opened = last is None
            if opened:
                self._serial += 1
                last = ProducerBatch(topic, partition, self._clock.monotonic_ms(), self._serial)
                queue.append(last)
                self._incomplete[last] = None
            future = last.try_append(record, size, self.batch_size)
            self._used_bytes += needed
            return future, opened

    def _wait_for_memory(self, needed: int, deadline_ms: int) -> None:
        """Wait once (holding the condition) for memory to be freed; raise past ``max_block_ms``."""
        remaining_ms = deadline_ms - self._clock.monotonic_ms()
        if remaining_ms <= 0 or self._closing:
            raise BufferExhaustedError(f"no room for {needed} bytes in buffer_memory ({self._used_bytes} of "
                                       f"{self.buffer_memory} bytes held) within max_block_ms ({self.max_block_ms} ms)")
        self._waiting += 1
        try:
            self._condition.wait(remaining_ms / 1000)
        finally:
            self._waiting -= 1

    def ready(self, now_ms: int) -> tuple[set[tuple[str, int]], int | None]:
        """The partitions whose first queued batch should be sent now (and that have room for one
        more in flight), and the ms until the next one will be (None: no batch is waiting)."""
        ready, next_ms = set(), None
        with self._condition:
            urgent = self._flushes > 0 or self._closing or self._waiting > 0
            for key, queue in self._queues.items():
                if not queue or self._in_flight.get(key, 0) >= self.max_in_flight:
                    continue
                first = queue[0]
                waited = now_ms - first.created_ms
                if now_ms < first.retry_at_ms:  # backing off before a retry, whatever else holds
                    wait = first.retry_at_ms - now_ms
                elif urgent or len(queue) > 1 or first.size_bytes >= self.batch_size or waited >= self.linger_ms:
                    ready.add(key)
                    continue
                else:
                    wait = self.linger_ms - waited
                next_ms = wait if next_ms is None else min(next_ms, wait)
        return ready, next_ms

    def drain(self, partitions, now_ms: int, admit=None) -> list[ProducerBatch]:
        """Take the first queued batch of each of ``partitions`` for a request: at most one per
        partition, none from a partition with ``max_in_flight`` batches out already, and none that
        ``admit(batch)`` (when given) refuses (an idempotent producer's ordering rules)."""
        batches = []
        with self._condition:
            for key in partitions:
                queue = self._queues.get(key)
                if not queue or self._in_flight.get(key, 0) >= self.max_in_flight:
                    continue
                if admit is not None and not admit(queue[0]):
                    continue
                batch = queue.popleft()
                batch.drained_ms = now_ms
                batch.attempts += 1
                self._in_flight[key] = self._in_flight.get(key, 0) + 1
                batches.append(batch)
        return batches

    def reenqueue(self, batch: ProducerBatch, retry_at_ms: int = 0) -> None:
        """Give back a drained batch for a retry, not ready before ``retry_at_ms`` (the retry
        backoff). It goes back in creation order, in front of every batch created after it, so
        the batches of a partition are sent again in the order they were first sent."""
        with self._condition:
            key = (batch.topic, batch.partition)
            if batch.drained_ms is None or batch not in self._incomplete:
                raise ValueError(f"{batch!r} is not in flight")
            queue = self._queues.setdefault(key, deque())
            at = next((index for index, queued in enumerate(queue) if queued.serial > batch.serial), len(queue))
            queue.insert(at, batch)
            self._in_flight[key] -= 1
            batch.drained_ms = None
            batch.retry_at_ms = retry_at_ms

    def deallocate(self, batch: ProducerBatch) -> None:
        """The batch is done (completed or failed): off its queue if it was queued, its memory free
        for appends."""
        with self._condition:
            if batch not in self._incomplete:
                raise ValueError(f"{batch!r} is not held by this accumulator")
            self._release(batch)
            self._condition.notify_all()

    def _release(self, batch: ProducerBatch) -> None:
        key = (batch.topic, batch.partition)
        if batch.drained_ms is None:
            self._queues[key].remove(batch)
        else:
            self._in_flight[key] -= 1
        del self._incomplete[batch]
        self._used_bytes -= batch.size_bytes

    def expire(self, now_ms: int, delivery_timeout_ms: int) -> list[ProducerBatch]:
        """Take off and deallocate the queued batches created ``delivery_timeout_ms`` or more ago (each
        queue is in creation order: only its front can have expired); the caller fails them."""
        expired = []
        with self._condition:
            for queue in self._queues.values():
                while queue and now_ms - queue[0].created_ms >= delivery_timeout_ms:
                    batch = queue[0]
                    self._release(batch)
                    expired.append(batch)
            if expired:
                self._condition.notify_all()
        return expired

    def undrained(self) -> list[ProducerBatch]:
        """The batches queued and not in a request (new ones, and ones waiting for a retry), in
        creation order: what a transaction's abort fails (the caller deallocates each)."""
        with self._condition:
            return [batch for batch in self._incomplete if batch.drained_ms is None]

    def begin_flush(self) -> None:
        """Every batch is ready until ``end_flush`` (flushes may nest)."""
        with self._condition:
            self._flushes += 1

    def end_flush(self) -> None:
        with self._condition:
            if self._flushes == 0:
                raise ValueError("end_flush without begin_flush")
            self._flushes -= 1

    def close(self) -> None:
        """Closing: every batch is ready, and appends waiting for memory give up."""
        with self._condition:
            self._closing = True
            self._condition.notify_all()

    def results(self) -> list[BatchResult]:
        """The results of every batch not yet completed or failed (queued or in flight): what a
        flush waits for."""
        with self._condition:
            return [batch.result for batch in self._incomplete if not batch.result.done()]

    def topics(self) -> set[str]:
        """Topics with batches queued or in flight."""
        with self._condition:
            return {batch.topic for batch in self._incomplete}

    def fail_all(self, error: BaseException) -> None:
        """Fail every batch (the sender cannot go on): their futures raise ``error``; memory freed."""
        with self._condition:
            for batch in self._incomplete:
                batch.fail(error)
            self._incomplete.clear()
            self._queues.clear()
            self._in_flight.clear()
            self._used_bytes = 0
            self._condition.notify_all()

    def pending(self) -> int:
        """Batches not yet deallocated (queued or in flight)."""
        with self._condition:
            return len(self._incomplete)
