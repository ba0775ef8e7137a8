"""Durable appends that return at once: a ``concurrent.futures.Future`` per call, completed by the
group-commit flusher once an fsync covers the records, instead of a thread blocked per caller.

This module owns:

- ``PendingSlots``: the bound on the futures outstanding in one store
  (``logstore.durable.max.pending.appends``). A call takes a slot before it appends and its future
  gives it back when it completes; when none is free the call waits for one (a thread blocks on a
  lock of its own; an asyncio task awaits a future, so its event loop never blocks), at most its
  ``timeout_ms``, then raises ``BufferExhaustedError`` having appended nothing (Kafka's producer
  blocks ``send`` the same way when ``buffer.memory`` is full, for ``max.block.ms``).
- ``DurableAppend``: one call's future, its result (what the call returns: an ``AppendInfo``, or the
  infos of every partition it touched) and its parts, one per log appended to. It completes with
  the result once every part is fsynced, or with the first part's error.
- ``DurablePart``: one log's share of a call: the offset an fsync must cover. It joins the log's next
  ``FlushRound`` (``GroupCommitFlusher.join_parts``); the round's release settles it: fsynced (the
  recovery point covers it), failed (the log failed or closed without covering it: the log's
  ``durable_outcome`` says which error), or, when the flush covered nothing for a reason that may
  pass (out of descriptors), joined to the next round until its deadline.
- ``RoundExpiry``: the timeout of a round's parts, one timer task per round (armed at the earliest
  deadline of its parts, cancelled when the round is released): a part still unsettled at its
  deadline fails with ``DurabilityTimeoutError`` even while the flusher is stuck in an fsync.
- ``DurableFutures``: the above for one store (``LogWaits.futures``): ``watch`` makes the future of
  a call whose records were just written.

Futures complete on the flusher thread (or on the timer's thread for a timeout): callbacks added
with ``add_done_callback`` run there and must be short; ``asyncio.wrap_future`` only schedules the
waiting task on its loop; ``append_async`` uses an asyncio future of the running loop instead, whose
outcomes a ``LoopDelivery`` hands over in batches (one wake-up of the loop per round). A future
cannot be cancelled (the records are written: nothing can be undone): ``cancel()`` returns False.

``waits`` imports this module (its flusher keeps the parts in its rounds), so this module sees a
log only through ``FutureLog``, and the flusher through the ``join`` callable it is given.
"""

from __future__ import annotations

import weakref
from _thread import allocate_lock as _allocate_lock
from collections import deque
from concurrent.futures import Future, InvalidStateError
from typing import Any, Callable, Hashable, Protocol, Sequence

from ..clock import SYSTEM_CLOCK
from ..config import MANAGER_KEYS
from ..errors import ShutdownError
from ..timer.system_timer import SystemTimer
from ..timer.timing_wheel import TimerTask

DEFAULT_MAX_PENDING_APPENDS: int = MANAGER_KEYS["logstore.durable.max.pending.appends"].default
"""Futures outstanding at once in a store (about 2 KB each: the Future, its condition and the
result; the records themselves are already in the log)."""


class FutureLog(Protocol):
    """What a part uses of a log: its offsets and state, and the error of a wait that ended
    uncovered (``Log.durable_outcome``: returns once the recovery point covers the offset, else
    raises ``LogFailedError``, ``StoreClosedError`` or ``DurabilityTimeoutError``)."""

    @property
    def key(self) -> Hashable: ...

    @property
    def recovery_point(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    @property
    def failed(self) -> bool: ...

    def durable_outcome(self, required_offset: int, timeout_ms: int) -> int: ...


class DurableFuture(Future):
    """The ``concurrent.futures.Future`` of a durable append: ``cancel()`` returns False (the
    records are written: nothing can be undone), so only the flusher or the timeout completes it."""

    def cancel(self) -> bool:
        return False


class PendingSlots:
    """A counting bound with hand-over: ``release`` gives a freed slot to the oldest waiter (a
    thread's held lock, or a future an asyncio task awaits) instead of freeing it, so a waiter that
    was woken owns its slot. A waiter that gives up (``abandon``) and was handed one meanwhile
    gives it back."""

    def __init__(self, limit: int) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"the pending appends limit must be an int >= 1, got {limit!r}")
        self.limit = limit
        self.used = 0
        self._lock = _allocate_lock()
        self._waiters: deque = deque()  # held locks (threads) and futures (asyncio tasks), oldest first

    def try_acquire(self) -> bool:
        with self._lock:
            if self.used < self.limit and not self._waiters:
                self.used += 1
                return True
        return False

    def acquire(self, timeout_s: float) -> bool:
        """Take a slot, waiting up to ``timeout_s`` for one; False when none came."""
        with self._lock:
            if self.used < self.limit and not self._waiters:
                self.used += 1
                return True
            waiter = _allocate_lock()
            waiter.acquire()
            self._waiters.append(waiter)
        if waiter.acquire(timeout=timeout_s):
            return True
        return self._abandon(waiter)

    def acquire_future(self) -> Future:
        """A future completed (with None) once this caller owns a slot: at once when one is free.
        A caller that stops waiting before it completed must call ``abandon`` with it."""
        future: Future = Future()
        with self._lock:
            if self.used < self.limit and not self._waiters:
                self.used += 1
                future.set_result(None)
            else:
                self._waiters.append(future)
        return future

    def abandon(self, waiter: Any) -> None:
        """The owner of ``waiter`` stopped waiting: it leaves the queue, or, if a slot was handed
        to it meanwhile, gives the slot back."""
        if self._abandon(waiter):
            self.release()

    def _abandon(self, waiter: Any) -> bool:
        """True when ``waiter`` was handed a slot (it left the queue before the caller gave up)."""
        with self._lock:
            try:
                self._waiters.remove(waiter)
            except ValueError:
                return True
        return False

    def release(self, count: int = 1) -> None:
        """Give back ``count`` slots: to the waiters first, oldest first."""
        handed = []
        with self._lock:
            waiters = self._waiters
            while count and waiters:
                handed.append(waiters.popleft())  # still counted in ``used``: now the waiter's
                count -= 1
            self.used -= count
        for waiter in handed:
            if type(waiter) is Future:
                try:
                    waiter.set_result(None)
                except InvalidStateError:  # cancelled by its task, which gives the slot back (abandon)
                    pass
            else:
                waiter.release()


_FINISH_LOCK = _allocate_lock()  # a future's outcome is set once: by its round, or by its timeout


class LoopDelivery:
    """Outcomes for the asyncio futures of one event loop, delivered in batches: the first outcome
    of a batch schedules one ``call_soon_threadsafe`` (a write to the loop's self-pipe), and the
    outcomes that arrive before the loop runs it (a flush round's, typically) ride along. One
    wake-up of the loop per round, not one per append (``asyncio.wrap_future`` costs one each)."""

    __slots__ = ("loop", "lock", "items")

    def __init__(self, loop: Any) -> None:
        self.loop = weakref.ref(loop)  # (weak: ``DurableFutures`` keys these by their loop, weakly)
        self.lock = _allocate_lock()
        self.items: list = []

    def add(self, append: "DurableAppend", error: BaseException | None) -> None:
        """Queue ``append``'s outcome for the loop."""
        with self.lock:
            items = self.items
            items.append((append.future, append.result, error))
            first = len(items) == 1
        if first:
            loop = self.loop()
            try:
                if loop is None:
                    raise RuntimeError("the event loop is gone")
                loop.call_soon_threadsafe(self.deliver)
            except RuntimeError:  # the loop is closed: nobody awaits these any more
                with self.lock:
                    self.items = []

    def deliver(self) -> None:
        """On the loop: set every queued outcome (a future cancelled by its task is left alone)."""
        with self.lock:
            items, self.items = self.items, []
        for future, result, error in items:
            if not future.done():
                if error is None:
                    future.set_result(result)
                else:
                    future.set_exception(error)


class DurableAppend:
    """One call's future: ``result`` once every part is fsynced, or the first part's error. Gives
    its slot back (``slots``) when it completes. ``delivery``: the future is an asyncio one of that
    loop, whose outcome goes through it."""

    __slots__ = ("future", "result", "remaining", "lock", "slots", "delivery", "delivered")

    def __init__(self, future: Any, result: Any, parts: int, slots: PendingSlots | None,
                 delivery: LoopDelivery | None = None) -> None:
        self.future = future
        self.result = result
        self.remaining = parts
        self.lock = _allocate_lock() if parts > 1 else None  # parts of several logs settle on several threads
        self.slots = slots
        self.delivery = delivery
        self.delivered = False

    def part_done(self, part: "DurablePart", error: BaseException | None) -> None:
        lock = self.lock
        if lock is None:  # one part: the future itself decides who settles first
            part.settled = True
            self.finish(error)
            return
        with lock:
            if part.settled:
                return
            part.settled = True
            self.remaining -= 1
            last = self.remaining == 0
        if error is not None or last:
            self.finish(error)

    def finish(self, error: BaseException | None) -> None:
        """Give the slot back, then complete the future (once: a later call, a timeout racing a
        flush or a second failing part, does nothing), so a caller that sees it done can take the
        slot again."""
        with _FINISH_LOCK:
            if self.delivered:
                return
            self.delivered = True
        if self.slots is not None:
            self.slots.release()
        delivery = self.delivery
        if delivery is not None:
            delivery.add(self, error)
        elif error is None:
            self.future.set_result(self.result)
        else:
            self.future.set_exception(error)


class DurablePart:
    """One log's share of a ``DurableAppend``: done once the log's recovery point reaches
    ``required_offset``."""

    __slots__ = ("log", "required_offset", "deadline_ms", "timeout_ms", "append", "owner", "settled")

    def __init__(self, log: FutureLog, required_offset: int, deadline_ms: int, timeout_ms: int,
                 append: DurableAppend, owner: "DurableFutures") -> None:
        self.log = log
        self.required_offset = required_offset
        self.deadline_ms = deadline_ms
        self.timeout_ms = timeout_ms
        self.append = append
        self.owner = owner
        self.settled = False

    def settle(self, expired: bool = False) -> None:
        """After its round was released (or, ``expired``, at its deadline): fsynced, failed, or
        (a round that covered nothing, the log healthy, the deadline ahead) joined to the next."""
        if self.settled:
            return
        log = self.log
        if log.recovery_point >= self.required_offset:
            self.append.part_done(self, None)
            return
        if (not expired and not log.failed and not log.closed
                and SYSTEM_CLOCK.monotonic_ms() < self.deadline_ms and self.owner.rejoin(log, self)):
            return  # e.g. the flush ran out of descriptors: the next round tries again
        try:
            log.durable_outcome(self.required_offset, self.timeout_ms)
        except BaseException as exc:  # LogFailedError, StoreClosedError, DurabilityTimeoutError
            self.append.part_done(self, exc)
        else:
            self.append.part_done(self, None)  # covered meanwhile


class RoundExpiry(TimerTask):
    """The timeout of one flush round's parts: at the earliest deadline among them, fail those due
    (``DurablePart.settle(expired=True)``) and re-arm for the rest. ``finish`` (the round's release)
    takes it out of the timer."""

    __slots__ = ("parts", "timer", "at_ms", "done")

    def __init__(self, parts: list, timer: SystemTimer, at_ms: int) -> None:
        super().__init__(0)
        self.parts = parts  # the round's list: parts join it until the flusher takes the round
        self.timer = timer
        self.at_ms = at_ms
        self.done = False

    def arm(self, at_ms: int) -> None:
        """Expire at ``at_ms`` (earlier than now armed, or first)."""
        self.at_ms = at_ms
        self.timer.add(self, at_ms=at_ms)
        if self.done:  # released meanwhile (``finish`` may have run before the add)
            self.cancel()

    def finish(self) -> None:
        self.done = True
        self.cancel()

    def run(self) -> None:
        now_ms = SYSTEM_CLOCK.monotonic_ms()
        later = None
        for part in list(self.parts):
            if part.settled:
                continue
            if part.deadline_ms <= now_ms:
                part.settle(expired=True)
            elif later is None or part.deadline_ms < later:
                later = part.deadline_ms
        if later is not None and not self.done:
            try:
                self.arm(later)
            except ShutdownError:  # the store is closing: its close settles every round
                pass


class DurableFutures:
    """The futures of one store's durable appends. ``join([(log, part), ...])`` adds each part to
    its log's next flush round, all in one round (``GroupCommitFlusher.join_parts``; False once the
    flusher stopped: no flush comes); ``slots`` bounds the futures outstanding."""

    def __init__(self, join: Callable[[Sequence[tuple[FutureLog, "DurablePart"]]], bool], max_pending: int) -> None:
        self.join = join
        self.slots = PendingSlots(max_pending)
        self._deliveries: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> LoopDelivery

    def watch(self, targets: Sequence[tuple[FutureLog, int]], result: Any, timeout_ms: int,
              slot: bool = True, loop: Any = None) -> Any:
        """The future of a call that wrote its records: ``result`` once each ``(log,
        required_offset)`` of ``targets`` is fsynced, else the first error (``DurabilityTimeoutError``
        after ``timeout_ms``). ``slot``: the caller holds a slot, which the future gives back.
        ``loop``: an asyncio future of that running loop instead of a ``concurrent.futures`` one."""
        if loop is None:
            future = DurableFuture()
            delivery = None
        else:
            future = loop.create_future()
            delivery = self._deliveries.get(loop)
            if delivery is None:
                delivery = self._deliveries[loop] = LoopDelivery(loop)
        append = DurableAppend(future, result, len(targets), self.slots if slot else None, delivery)
        if not targets:
            append.finish(None)
            return future
        deadline_ms = SYSTEM_CLOCK.monotonic_ms() + timeout_ms
        if len(targets) == 1:  # (the common case, without the list)
            log, required_offset = targets[0]
            part = DurablePart(log, required_offset, deadline_ms, timeout_ms, append, self)
            if log.recovery_point >= required_offset:
                append.part_done(part, None)  # fsynced already (flush.messages, another flush)
            elif not self.join(((log, part),)):
                part.settle(expired=True)  # the store is closing: no flush comes, the outcome is now
            return future
        waiting = []
        for log, required_offset in targets:
            part = DurablePart(log, required_offset, deadline_ms, timeout_ms, append, self)
            if log.recovery_point >= required_offset:
                append.part_done(part, None)
            else:
                waiting.append((log, part))
        if waiting and not self.join(waiting):
            for _log, part in waiting:
                part.settle(expired=True)  # the store is closing: no flush comes, the outcome is now
        return future

    def rejoin(self, log: FutureLog, part: "DurablePart") -> bool:
        """``part`` to the next round of ``log`` (its last round covered nothing)."""
        return self.join(((log, part),))


async def acquire_slot_async(slots: PendingSlots, timeout_ms: int, exhausted: Callable[[], BaseException]) -> None:
    """Take a slot of ``slots`` from an asyncio task: at once when one is free, else await one (the
    event loop runs on) for at most ``timeout_ms``, then raise ``exhausted()``."""
    if slots.try_acquire():
        return
    import asyncio  # (asyncio users only: a store that never awaits does not load it for this)

    waiter = slots.acquire_future()
    try:
        await asyncio.wait_for(asyncio.wrap_future(waiter), timeout_ms / 1000.0)
    except asyncio.TimeoutError:
        slots.abandon(waiter)
        raise exhausted() from None
    except BaseException:  # cancelled: a slot handed over meanwhile goes back
        slots.abandon(waiter)
        raise
