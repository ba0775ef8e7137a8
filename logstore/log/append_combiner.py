"""``AppendCombiner``: one-record appends that find the log's lock held are handed to the holder.

Why: an append writes under the log's lock, and its ``pwrite`` releases the GIL. Other appending
threads then run, find the lock held and sleep on it; each such sleep costs a futex wait and a
wake-up, about as much as the append itself. With 8 threads appending durably (``acks="all"``) more
than half of the appends slept on the lock (10,694 of 19,460 in a 2-s run; 95% with 64 threads), and
each then slept a second time, on its flush round.

How (flat combining): a one-record append that cannot take the lock at once queues its encoded
record (``follow``) instead. The thread holding the lock, before it lets go (``release_lock``),
writes every queued record after its own, each as its own batch, in queue order, exactly as the
queued thread would have (``Log._write_one``: the same checks, offsets and errors). Then, outside
the lock, a durable record joins its log's next flush round with the queued thread's own lock, so
that thread wakes once, when the fsync covers its record; any other is released at once, with its
``AppendInfo`` or the exception its write raised, which the queued thread raises as its own.

Rules that keep it safe:
- only the thread holding the log's lock takes requests off the queue (one consumer), so a request
  is written once; a request is released once: by its flush round, or by the thread that wrote it;
- a request queued just after the holder looked at the queue is not lost: the holder looks again
  after releasing the lock and, if the lock is free, serves it. Appends of several records combine
  too (``Log._append_flushing``); if something else holds the lock (a flush's bookkeeping, a roll, a
  truncation, a close: short or rare), the queued thread looks every ``STRAND_CHECK_S`` for the
  lock to be free, and serves the queue itself. It never blocks on the lock: with 64 threads, the
  queued threads that did (after a 1-ms wait) made appends slower than without combining;
- a holder serves at most ``MAX_PASSES`` passes after its own append, so a stream of appends from
  other threads cannot keep its own call from returning.

The ``Log`` calls into this module, so the combiner does not import it: it is given the log's lock,
its clock and the four calls it makes (``AppendCombiner``).
"""

from __future__ import annotations

from _thread import allocate_lock as _allocate_lock
from collections import deque
from typing import Any, Callable

from ..clock import Clock
from ..records.batching import AppendInfo

# Appends combine only on logs without flush.messages (or with one this large): with it, each append
# must flush its own records, under the flush lock (``Log._append_flushing``).
COMBINED_FLUSH_MESSAGES = 2**31
STRAND_CHECK_S = 0.005  # how often a queued append looks for a free lock nobody combines under
MAX_PASSES = 8  # passes over the queue a holder makes after its own append


class _Request:
    """One queued one-record append: what ``Log._write_one`` takes, and its outcome."""

    __slots__ = ("fields", "durable", "done", "taken", "info", "error")

    def __init__(self, fields: tuple, durable: bool) -> None:
        self.fields = fields
        self.durable = durable
        self.done = _allocate_lock()  # held until the request is written (durable: and fsynced)
        self.done.acquire()
        self.taken = False  # set by the lock holder when it takes the request off the queue
        self.info: AppendInfo | None = None
        self.error: BaseException | None = None


class AppendCombiner:
    """The queue of one log's one-record appends waiting for the thread that holds its lock.

    The log calls into this object, so this module does not import it: the combiner is given what
    it uses, the log's ``lock`` and ``clock`` and four callables: ``write(*fields)`` writes one
    queued record under the lock (``Log._write_one``); ``wake_readers()`` completes the reads
    waiting for data, after records were written; ``flush_rounds()`` returns ``join(waiter)``, which
    adds a held lock to the log's next flush round (``GroupCommitFlusher.join``: False when no flush
    comes); ``durable_outcome(required_offset, timeout_ms)`` is ``Log.durable_outcome``."""

    def __init__(self, lock: Any, clock: Clock, write: Callable[..., AppendInfo], wake_readers: Callable[[], None],
                 flush_rounds: Callable[[], Callable[[Any], bool]],
                 durable_outcome: Callable[[int, int], int]) -> None:
        self._lock = lock
        self._clock = clock
        self._write = write
        self._wake_readers = wake_readers
        self._flush_rounds = flush_rounds
        self._durable_outcome = durable_outcome
        self.pending: deque[_Request] = deque()
        self.combined = 0  # appends written by another thread than their own, so far

    def follow(self, fields: tuple, durable: bool, timeout_ms: int) -> AppendInfo:
        """Queue a one-record append (``fields`` as ``Log._write_one`` takes them) because the
        lock is held, and return its ``AppendInfo`` once written; a ``durable`` one returns once
        fsynced, or raises what ``Log.durable_outcome`` raises after ``timeout_ms``."""
        request = _Request(fields, durable)
        clock = self._clock
        deadline_ms = clock.monotonic_ms() + timeout_ms if durable else None
        self.pending.append(request)
        lock = self._lock
        if lock.acquire(False):  # released meanwhile: serve the queue, this request included
            self._serve()
        done = request.done
        while not request.taken:
            if done.acquire(timeout=STRAND_CHECK_S):
                return self._outcome(request, timeout_ms)
            if not request.taken and lock.acquire(False):  # a holder that does not combine has gone
                self._serve()
        if deadline_ms is None:
            done.acquire()  # written, or being written: released right after
        elif not done.acquire(timeout=max(deadline_ms - clock.monotonic_ms(), 0) / 1000):
            if request.info is None and request.error is None:
                # Timed out while the holder writes it: the holder sets the outcome before it lets
                # the lock go, so the outcome is there once this thread has had the lock.
                lock.acquire()
                self._serve()
        return self._outcome(request, timeout_ms)

    def _serve(self) -> None:
        """``release_lock`` for a queued thread that took the lock, then the waiting reads."""
        self.release_lock()
        self._wake_readers()

    def release_lock(self) -> None:
        """Write what was queued (the caller holds the log's lock, once), release the lock, then
        hand each request its outcome; look again for requests queued meanwhile. The caller then
        wakes the reads waiting for data (``data_arrived``), outside the lock."""
        lock = self._lock
        passes = 0
        while True:
            served = None
            try:
                if self.pending:
                    served = self._drain()
            finally:
                lock.release()
            if served:
                self._finish(served)
            passes += 1
            if not self.pending or passes > MAX_PASSES or not lock.acquire(False):
                break

    def _drain(self) -> list[_Request]:
        pending, served = self.pending, []
        write = self._write
        while pending:
            request = pending.popleft()
            request.taken = True
            try:
                request.info = write(*request.fields)
            except BaseException as exc:  # the queued thread raises it (``_outcome``)
                request.error = exc
            served.append(request)
        self.combined += len(served)
        return served

    def _finish(self, served: list[_Request]) -> None:
        join = None
        for request in served:
            if request.durable and request.error is None:
                if join is None:
                    join = self._flush_rounds()
                if join(request.done):
                    continue  # released by its flush round
            request.done.release()

    def _outcome(self, request: _Request, timeout_ms: int) -> AppendInfo:
        if request.error is not None:
            raise request.error
        info = request.info
        if request.durable:
            self._durable_outcome(info.last_offset + 1, timeout_ms)
        return info
