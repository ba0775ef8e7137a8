"""The hierarchical timing wheel: tasks, their entries, buckets and wheels (Kafka's TimingWheel).

This module owns the data structures and the placement arithmetic, not the threads: ``TimerTask``
(what a user schedules), ``TimerTaskEntry`` (the task's one node in a bucket), ``TimerTaskList`` (a
bucket: a circular doubly-linked list with a sentinel, O(1) add and remove, a size counter shared by
every bucket of one timer, and an expiration that reports when it changes) and ``TimingWheel`` (one
level of ``wheel_size`` buckets of ``tick_ms`` each, with a lazily created coarser overflow wheel).

Thread safety: a wheel and its buckets are not thread-safe on their own; ``SystemTimer`` (module
``timer``) serialises every add, flush and advance with one lock, and gives each entry that lock so
that ``TimerTask.cancel`` from any thread unlinks under it. Used alone (tests), everything runs on one
thread and entries carry no lock.

Why a linked list and not a dict keyed by entry (``logstore perf timer`` runs both, see
``perf_timer_baselines.DictTimerTaskList``): on the purgatory workload they cost the same within this
machine's noise; with 1M tasks pending, add + cancel stays flat with lists (about 1.3 µs) and costs
1.3-1.6× more with dicts, whose big buckets keep resizing (each resize also a pause under the timer
lock); a dict flushes about 10% faster at expiry. Flat cost with many pending tasks decided it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Callable, Protocol


class _NoLock:
    """The lock of an entry that lives in a wheel used from one thread (no ``SystemTimer``)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


NO_LOCK = _NoLock()


class TimerTask:
    """Something to run once, ``delay_ms`` after it is added to a timer.

    Subclasses implement ``run()``. A task is bound to at most one ``TimerTaskEntry`` at a time:
    adding it again (to the same or another timer) re-schedules it, it never runs twice for one add.
    ``cancel()`` takes it out of its timer in O(1); it is harmless to call twice, on a task that was
    never added, or on one that already ran.
    """

    __slots__ = ("delay_ms", "_entry")

    def __init__(self, delay_ms: int) -> None:
        if type(delay_ms) is not int:  # noqa: E721 (exact type: bool and float are refused, cheaply)
            raise TypeError(f"delay_ms must be an int, got {delay_ms!r}")
        self.delay_ms = delay_ms
        # None: never added; _CANCELLED: cancelled since the last add; else the live (or spent) entry.
        self._entry: TimerTaskEntry | None = None

    def run(self) -> None:
        """The work to do when the task expires (runs on the timer's executor)."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Take the task out of its timer; it will not run unless it is added again."""
        entry = self._entry
        if entry is None or entry is _CANCELLED:
            self._entry = _CANCELLED
            return
        with entry.lock:  # the timer's lock: a flush may be moving this entry between buckets
            entry = self._entry
            self._entry = _CANCELLED
            if entry is not None and entry.bucket is not None:
                entry.bucket.remove(entry)

    def is_cancelled(self) -> bool:
        """True after ``cancel()`` until the task is added again."""
        return self._entry is _CANCELLED

    def is_pending(self) -> bool:
        """True while the task waits in a timer's wheel (not yet expired, not cancelled)."""
        entry = self._entry
        return entry is not None and entry.bucket is not None


class TimerTaskEntry:
    """A task's node in a bucket: the absolute ``expiration_ms`` and the links.

    Creating an entry binds the task to it, which unlinks the task's previous entry if it is still
    in a bucket (invariant T1: one live entry per task). An entry whose task is no longer bound to it
    is ``cancelled()`` and is never run.
    """

    __slots__ = ("task", "expiration_ms", "bucket", "next", "prev", "lock")

    # Typed for the entries the code walks: a task's entry, linked in a bucket. The sentinels (a
    # bucket's root, ``_CANCELLED``) have no task, and an unlinked entry's links are None; neither is
    # ever read there (checking would cost every add, flush and cancel on the timer's hot path).
    task: TimerTask
    next: TimerTaskEntry
    prev: TimerTaskEntry

    def __init__(self, task: TimerTask | None, expiration_ms: int,
                 lock: AbstractContextManager[object] = NO_LOCK) -> None:
        self.task = task  # type: ignore[assignment]  # None in the sentinels only (see above)
        self.expiration_ms = expiration_ms
        self.bucket: TimerTaskList | None = None  # next and prev are set when it is linked
        self.lock = lock
        if task is not None:
            old = task._entry
            if old is not None and old.bucket is not None:
                old.bucket.remove(old)  # the caller holds the timer lock (SystemTimer.add)
            task._entry = self

    def cancelled(self) -> bool:
        """True when the task was cancelled or re-bound to a newer entry."""
        return self.task._entry is not self

    def __repr__(self) -> str:
        return f"TimerTaskEntry(expiration_ms={self.expiration_ms}, cancelled={self.cancelled()})"


_CANCELLED = TimerTaskEntry(None, -1)  # the marker a cancelled task points at


class SizeCounter:
    """The number of entries linked in any bucket of one timer (shared by all of its buckets)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class BucketQueue(Protocol):
    """Where a wheel offers a bucket whose expiration changed (``timer.DelayQueue``)."""

    def offer(self, bucket: TimerTaskList) -> None: ...


class TimerTaskList:
    """A bucket: the entries whose expirations fall in one tick of one wheel.

    A circular doubly-linked list with a sentinel root, so add and remove are O(1) and a flush
    visits entries in the order they were added. ``expiration_ms`` is the start of the tick the
    bucket currently stands for, or -1 while it is empty and not queued.
    """

    __slots__ = ("_root", "_counter", "expiration_ms")

    def __init__(self, counter: SizeCounter) -> None:
        root = TimerTaskEntry(None, -1)
        root.next = root.prev = root
        self._root = root
        self._counter = counter
        self.expiration_ms = -1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the bucket's expiration; True when it changed (the bucket must then be queued)."""
        if self.expiration_ms == expiration_ms:
            return False
        self.expiration_ms = expiration_ms
        return True

    def add(self, entry: TimerTaskEntry) -> None:
        """Link ``entry`` at the tail (after unlinking it from any other bucket)."""
        if entry.bucket is not None:
            entry.bucket.remove(entry)
        root = self._root
        tail = root.prev
        entry.prev = tail
        entry.next = root
        tail.next = entry
        root.prev = entry
        entry.bucket = self
        self._counter.value += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        """Unlink ``entry`` if it is in this bucket; otherwise do nothing."""
        if entry.bucket is not self:
            return
        entry.prev.next = entry.next
        entry.next.prev = entry.prev
        entry.next = entry.prev = entry.bucket = None  # type: ignore[assignment]  # unlinked (see TimerTaskEntry)
        self._counter.value -= 1

    def flush(self, fn: Callable[[TimerTaskEntry], None]) -> None:
        """Unlink every entry, then call ``fn`` on each in order; the bucket is reset to empty.

        ``fn`` (the timer's reinsert) may link entries into other buckets, never into this one
        (invariant W1), so unlinking everything first is safe.
        """
        root = self._root
        entry = root.next
        count = 0
        entries: list[TimerTaskEntry] = []
        while entry is not root:
            following = entry.next
            entry.next = entry.prev = entry.bucket = None  # type: ignore[assignment]  # unlinked (see TimerTaskEntry)
            entries.append(entry)
            count += 1
            entry = following
        root.next = root.prev = root
        self._counter.value -= count
        self.expiration_ms = -1
        for entry in entries:
            fn(entry)

    def tasks(self) -> list[TimerTask]:
        """The tasks of the entries that are not cancelled, in order."""
        result = []
        root = self._root
        entry = root.next
        while entry is not root:
            if not entry.cancelled():
                result.append(entry.task)
            entry = entry.next
        return result

    def __len__(self) -> int:
        count = 0
        root = self._root
        entry = root.next
        while entry is not root:
            count += 1
            entry = entry.next
        return count

    def __repr__(self) -> str:
        return f"TimerTaskList(expiration_ms={self.expiration_ms}, entries={len(self)})"


class TimingWheel:
    """One level of the hierarchical wheel: ``wheel_size`` buckets of ``tick_ms`` each.

    The wheel covers ``[current_time_ms, current_time_ms + interval_ms)``; an entry expiring later
    goes to the overflow wheel (tick = this wheel's interval), created the first time it is needed
    and reused after. ``current_time_ms`` starts at ``start_ms`` rounded down to the tick and only
    moves forward, in whole ticks, when ``advance_clock`` is called with a bucket's expiration.
    """

    __slots__ = ("tick_ms", "wheel_size", "interval_ms", "current_time_ms", "buckets", "overflow_wheel",
                 "_counter", "_queue")

    bucket_class = TimerTaskList  # overflow wheels are built with type(self), so they share it

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, counter: SizeCounter,
                 queue: BucketQueue) -> None:
        if not isinstance(tick_ms, int) or isinstance(tick_ms, bool) or tick_ms < 1:
            raise ValueError(f"tick_ms must be an int >= 1, got {tick_ms!r}")
        if not isinstance(wheel_size, int) or isinstance(wheel_size, bool) or wheel_size < 2:
            raise ValueError(f"wheel_size must be an int >= 2, got {wheel_size!r}")
        if not isinstance(start_ms, int) or start_ms < 0:
            raise ValueError(f"start_ms must be an int >= 0, got {start_ms!r}")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_time_ms = start_ms - start_ms % tick_ms
        self.buckets = [self.bucket_class(counter) for _ in range(wheel_size)]
        self.overflow_wheel: TimingWheel | None = None
        self._counter = counter
        self._queue = queue

    def _add_overflow_wheel(self) -> TimingWheel:
        # Created under the timer's lock (adds are serialised), so no double-checked locking.
        if self.overflow_wheel is None:
            self.overflow_wheel = type(self)(self.interval_ms, self.wheel_size, self.current_time_ms,
                                              self._counter, self._queue)
        return self.overflow_wheel

    def add(self, entry: TimerTaskEntry) -> bool:
        """Place ``entry`` in the bucket of the finest level that covers its expiration.

        Returns False, placing nothing, when the entry is cancelled or already expired (its
        expiration is inside the current tick or earlier): the caller runs an expired task now.
        """
        task = entry.task
        if task is None or task._entry is not entry:
            return False
        expiration_ms = entry.expiration_ms
        wheel = self
        if expiration_ms < wheel.current_time_ms + wheel.tick_ms:
            return False
        # Only the finest level can find an entry expired: a coarser level's time is the finer
        # level's rounded down, so "beyond the finer interval" implies "beyond the coarser tick".
        while expiration_ms >= wheel.current_time_ms + wheel.interval_ms:
            wheel = wheel.overflow_wheel or wheel._add_overflow_wheel()
        tick_ms = wheel.tick_ms
        virtual_id = expiration_ms // tick_ms
        bucket = wheel.buckets[virtual_id % wheel.wheel_size]
        bucket.add(entry)
        # Queue the bucket only when it starts standing for a new tick: a queued bucket's
        # expiration never changes (W1), so the delay queue needs no decrease-key. (This is
        # ``set_expiration`` inlined: add is the hot path of every delayed operation.)
        bucket_expiration_ms = virtual_id * tick_ms
        if bucket.expiration_ms != bucket_expiration_ms:
            bucket.expiration_ms = bucket_expiration_ms
            wheel._queue.offer(bucket)
        return True

    def advance_clock(self, time_ms: int) -> None:
        """Move this wheel (and its overflow wheels) forward to the tick containing ``time_ms``."""
        wheel: TimingWheel | None = self
        while wheel is not None and time_ms >= wheel.current_time_ms + wheel.tick_ms:
            wheel.current_time_ms = time_ms - time_ms % wheel.tick_ms
            time_ms = wheel.current_time_ms
            wheel = wheel.overflow_wheel

    def levels(self) -> list[TimingWheel]:
        """This wheel and the overflow wheels created so far, finest first."""
        result = []
        wheel: TimingWheel | None = self
        while wheel is not None:
            result.append(wheel)
            wheel = wheel.overflow_wheel
        return result

    def __repr__(self) -> str:
        return (f"TimingWheel(tick_ms={self.tick_ms}, wheel_size={self.wheel_size}, "
                f"current_time_ms={self.current_time_ms})")
