"""SystemTimer: the hierarchical timing wheel made usable from many threads (Kafka's SystemTimer; docs/design.md §5).

This module owns the moving parts around the wheel: ``DelayQueue`` (a heap of *buckets*, not tasks,
ordered by expiration, with a blocking ``poll``), ``TaskExecutor`` (the one thread expired tasks run
on) and ``SystemTimer`` (``add``, ``advance_clock``, ``size``, ``shutdown``).

Locking, and why it differs from Kafka's. Kafka takes a read/write lock: adds share it (they touch
only per-bucket locks and atomics), ``advance_clock`` takes it exclusively so that no add computes a
bucket from a wheel time that is being moved. Under CPython's GIL adds cannot run in parallel anyway,
so the shared mode buys nothing, while per-bucket and per-entry locks and the remove-retry loop would
cost on every operation. So one lock serialises add, cancel, flush and
advance; the exclusion that matters, no add during an advance, is the same, and the rare holes of Kafka's scheme
(a cancelled entry re-linked during a flush) cannot happen. The delay queue's
blocking wait happens outside that lock, and tasks never run under it, so a task may add or cancel
tasks of its own timer.

Where expired tasks run: by default on the executor thread (``executor-<name>``), never on the
thread that called ``add`` or ``advance_clock``. With ``executor_thread=False`` they run on whichever
thread calls ``advance_clock`` (after it has released the lock): the Scheduler's driver in
production, the test itself on a manual clock, which makes every run deterministic.

Time: every reading comes from the injected clock's ``monotonic_ms``. A blocking ``poll`` waits in
real time, so on a manual clock pass ``timeout_ms=0`` and move the clock yourself.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
from collections import deque

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import ShutdownError
from .timing_wheel import SizeCounter, TimerTask, TimerTaskEntry, TimerTaskList, TimingWheel

log = logging.getLogger(__name__)


def run_entry(entry: TimerTaskEntry, where: str) -> bool:
    """Run an expired entry's task unless it was cancelled or re-added since it expired.

    An exception is logged with its traceback and goes no further. True when the task ran.
    """
    if entry.cancelled():
        return False
    try:
        entry.task.run()
    except Exception:
        log.exception("timer task %r failed on %s", entry.task, where)
    return True


class DelayQueue:
    """The buckets whose expiration is set, ordered by expiration (Java's DelayQueue of buckets).

    Holds at most ``wheel_size`` buckets per wheel level whatever the number of tasks (W2), and a
    bucket at most once at a time with a key that never changes while queued (W1), so a plain heap
    of ``(expiration_ms, seq, bucket)`` snapshots is exact.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._heap: list[tuple[int, int, TimerTaskList]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # waits and notifies; plain checks take the lock
        self._woken = False

    def offer(self, bucket: TimerTaskList) -> None:
        """Queue ``bucket`` under its current expiration; wake a waiting ``poll`` if it is the new head."""
        with self._cond:
            heapq.heappush(self._heap, (bucket.expiration_ms, next(self._seq), bucket))
            if self._heap[0][2] is bucket:
                self._cond.notify_all()

    def poll(self, timeout_ms: int = 0) -> TimerTaskList | None:
        """The head bucket once it is due, waiting up to ``timeout_ms`` of real time for that.

        Returns None when the wait ends with nothing due, or early after ``wake()``.
        """
        clock = self._clock
        if timeout_ms <= 0:  # the common non-blocking case, without the waiting machinery
            with self._lock:
                heap = self._heap
                if heap and heap[0][0] <= clock.monotonic_ms():
                    return heapq.heappop(heap)[2]
                self._woken = False
                return None
        with self._cond:
            deadline_ms = clock.monotonic_ms() + timeout_ms
            while True:
                now_ms = clock.monotonic_ms()
                heap = self._heap
                if heap and heap[0][0] <= now_ms:
                    return heapq.heappop(heap)[2]
                if self._woken:
                    self._woken = False
                    return None
                wait_ms = deadline_ms - now_ms
                if heap:
                    wait_ms = min(wait_ms, heap[0][0] - now_ms)
                if wait_ms <= 0:
                    return None
                self._cond.wait(wait_ms / 1000.0)

    def wake(self) -> None:
        """Make the current (or next) ``poll`` return now, due bucket or not."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def head_expiration_ms(self) -> int | None:
        """The expiration of the earliest queued bucket, or None."""
        with self._lock:
            return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)


class TaskExecutor:
    """One daemon thread that runs expired entries in order; an exception is logged, the thread lives.

    Daemon, unlike Kafka's, because logstore is embedded in the user's process: a store the user
    forgot to close must not keep the interpreter from exiting. ``shutdown`` is the orderly way out.
    """

    _STOP = object()

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[TimerTaskEntry] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, entry: TimerTaskEntry) -> None:
        self._queue.put(entry)

    def _loop(self) -> None:
        while True:
            entry = self._queue.get()
            if entry is self._STOP:
                return
            run_entry(entry, self.name)

    def shutdown(self, timeout_s: float | None = 5.0) -> bool:
        """Run what was already submitted, then stop; True when the thread ended within ``timeout_s``."""
        self.submit(self._STOP)  # type: ignore[arg-type]  # the stop marker travels the entries' queue
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        return not self._thread.is_alive() or threading.current_thread() is self._thread

    def backlog(self) -> int:
        """Entries submitted and not yet started (cancelled ones included)."""
        return self._queue.qsize()


class SystemTimer:
    """A hierarchical timing wheel with a delay queue of buckets and an executor.

    ``add(task)`` schedules ``task.run()`` at ``now + task.delay_ms``: O(levels) to find the bucket,
    O(1) to link, a heap push only when a bucket starts a new round. ``task.cancel()`` is an O(1)
    unlink, and ``size()`` is the exact number of tasks waiting. Somebody must call
    ``advance_clock(timeout_ms)`` for time to pass: a purgatory's reaper or the Scheduler's driver
    thread in production, the test on a manual clock.
    """

    def __init__(self, name: str = "timer", *, tick_ms: int = 1, wheel_size: int = 20,
                 clock: Clock = SYSTEM_CLOCK, start_ms: int | None = None, executor_thread: bool = True) -> None:
        self.name = name
        self._clock = clock
        self._lock = threading.Lock()  # never re-entered: tasks run outside it
        self._queue = DelayQueue(clock)
        self._counter = SizeCounter()
        self._wheel = TimingWheel(tick_ms, wheel_size, clock.monotonic_ms() if start_ms is None else start_ms,
                                  self._counter, self._queue)
        self._executor = TaskExecutor(f"executor-{name}") if executor_thread else None
        self._ready: deque[TimerTaskEntry] = deque()  # expired, awaiting a driver (executor_thread=False)
        self._closed = False

    # --- adding -------------------------------------------------------------------------------

    def add(self, task: TimerTask, at_ms: int | None = None) -> None:
        """Schedule ``task`` to run ``task.delay_ms`` from now, or at the monotonic time ``at_ms``
        when given (periodic re-arming without drift). A pending task is re-scheduled.

        A task already due (its deadline inside the wheel's current tick) goes to the executor at
        once; it never runs on the calling thread. Raises ``ShutdownError`` after ``shutdown()``.
        """
        # The purgatory's per-request path: kept to one lock round and one entry allocation.
        lock = self._lock
        old = task._entry
        if old is not None and old.lock is not lock and old.bucket is not None:
            task.cancel()  # pending in another timer: unlink it there, under that timer's lock
        with lock:
            if self._closed:
                raise ShutdownError(f"timer {self.name!r} is shut down; cannot add {task!r}")
            entry = TimerTaskEntry(task, task.delay_ms + self._clock.monotonic_ms() if at_ms is None else at_ms,
                                   lock)
            if self._wheel.add(entry):
                return
        if task._entry is entry:  # expired, not cancelled meanwhile
            self._submit(entry)

    def _submit(self, entry: TimerTaskEntry) -> None:
        if self._executor is not None:
            self._executor.submit(entry)
        else:
            self._ready.append(entry)
            self._queue.wake()  # a driver blocked in poll runs it now

    # --- time passing -------------------------------------------------------------------------

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        """Process every bucket that is due, waiting up to ``timeout_ms`` (real time) for the first.

        Each due bucket moves the wheels to its expiration and re-adds its entries: an entry lands
        in a finer bucket, or is expired and goes to the executor. Returns True when at least one
        bucket was processed or (``executor_thread=False``) a task ran on this thread.
        """
        if timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms!r}")
        bucket = self._queue.poll(timeout_ms) if not self._closed else None
        processed = bucket is not None
        if processed:
            expired: list[TimerTaskEntry] = []
            wheel = self._wheel
            delay_queue = self._queue

            def reinsert(entry: TimerTaskEntry) -> None:
                if not wheel.add(entry) and not entry.cancelled():
                    expired.append(entry)

            with self._lock:
                while bucket is not None:
                    wheel.advance_clock(bucket.expiration_ms)
                    bucket.flush(reinsert)
                    bucket = delay_queue.poll(0)
            if self._executor is not None:
                for entry in expired:
                    self._executor.submit(entry)
            else:
                self._ready.extend(expired)
        if self._executor is None:
            processed = self._run_ready() or processed
        return processed

    def _run_ready(self) -> bool:
        ran = False
        ready = self._ready
        while ready and not self._closed:
            try:
                entry = ready.popleft()
            except IndexError:  # another driver took it
                break
            ran = run_entry(entry, threading.current_thread().name) or ran
        return ran

    def wake(self) -> None:
        """Make a thread blocked in ``advance_clock`` return now (used to stop reapers and drivers)."""
        self._queue.wake()

    # --- inspection and shutdown --------------------------------------------------------------

    def size(self) -> int:
        """The number of tasks waiting in the wheel (exact: cancelled tasks leave at once)."""
        return self._counter.value

    def backlog(self) -> int:
        """Expired tasks not yet started: exact (cancelled ones excluded) with ``executor_thread=False``,
        the executor's queue length otherwise."""
        if self._executor is not None:
            return self._executor.backlog()
        return sum(1 for entry in list(self._ready) if not entry.cancelled())

    def next_expiration_ms(self) -> int | None:
        """When the earliest queued bucket is due (its tick's start), or None when nothing waits.

        A coarse bucket is due before its entries are: it cascades them into finer buckets.
        """
        return self._queue.head_expiration_ms()

    @property
    def wheel(self) -> TimingWheel:
        """The finest wheel (tests inspect levels and buckets through it)."""
        return self._wheel

    @property
    def closed(self) -> bool:
        return self._closed

    def shutdown(self, timeout_s: float | None = 5.0) -> None:
        """Stop: tasks still in the wheel are abandoned; tasks already expired still run (executor).

        Waits up to ``timeout_s`` for the executor thread to finish what it was given. Idempotent.
        Later ``add`` calls raise ``ShutdownError``.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._queue.wake()
        self._ready.clear()
        if self._executor is not None:
            if not self._executor.shutdown(timeout_s):
                log.warning("timer %r: executor still busy after %.1f s; left running", self.name, timeout_s)

    def __repr__(self) -> str:
        return f"SystemTimer(name={self.name!r}, size={self.size()}, closed={self._closed})"
