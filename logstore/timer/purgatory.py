"""Delayed operations and the purgatory that holds them (docs/design.md §5).

This module owns ``DelayedOperation`` (a request that completes when a condition holds or expires
after ``delay_ms``) and ``DelayedOperationPurgatory`` (operations watched under keys, completed by
``check_and_complete(key)`` after the state behind the key changed, expired by a ``SystemTimer``).
The LogManager uses it for reads that wait for data (``min_bytes``/``max_wait_ms``) and for appends
that wait for fsync; neither needs a thread per waiter.

Why no wake-up is lost (docs/design.md §5.3). Whoever makes a condition true first publishes the new state, then
calls ``check_and_complete`` for every affected key. ``try_complete_else_watch`` checks, registers on
all keys, and checks again, all under the operation's lock, and arms the timer only afterwards. A
state change before the second check is seen by it; a change after it finds the operation on a watch
list, and its ``safe_try_complete`` waits for the operation's lock and re-evaluates. Completion is
exactly once because ``force_complete`` flips a guarded flag that only one caller can win, whether
the contenders are two keys firing at once or a completion racing the timer's expiry.

Rule for callers: call ``check_and_complete`` holding no lock that ``try_complete`` or
``on_complete`` might take (Kafka's rule since 2.7).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Hashable, Iterable

from .system_timer import SystemTimer
from .timing_wheel import TimerTask

log = logging.getLogger(__name__)

SHARDS = 512  # watcher-list shards: hash(key) % SHARDS picks a shard and its lock
REAPER_POLL_MS = 200  # how long the reaper waits for a due bucket per round


class DelayedOperation(TimerTask):
    """An operation that completes when ``try_complete`` finds its condition true, or expires.

    Subclasses implement ``try_complete()`` (check; when the condition holds, return
    ``self.force_complete()``, else False), ``on_complete()`` (build the answer; called exactly once,
    on timeout too) and ``on_expiration()`` (called after ``on_complete`` when the operation timed
    out). ``lock`` serialises condition checks; pass a shared lock to tie an operation to a group.
    """

    def __init__(self, delay_ms: int, lock: threading.RLock | None = None) -> None:
        super().__init__(delay_ms)
        self.lock = threading.RLock() if lock is None else lock
        self._completed = False
        self._completion_guard = threading.Lock()

    # --- to implement --------------------------------------------------------------------------

    def try_complete(self) -> bool:
        """Check the condition; when it holds return ``self.force_complete()``, else False."""
        raise NotImplementedError

    def on_complete(self) -> None:
        """Produce the result. Runs exactly once, on the thread that completed the operation."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Called after ``on_complete`` when the operation completed by timing out."""

    # --- the machinery -------------------------------------------------------------------------

    def force_complete(self) -> bool:
        """Complete now unless somebody already did: True for the one caller that wins.

        The winner takes the operation out of the timer (O(1)) and runs ``on_complete``.
        """
        with self._completion_guard:
            if self._completed:
                return False
            self._completed = True
        self.cancel()
        self.on_complete()
        return True

    def is_completed(self) -> bool:
        return self._completed

    def run(self) -> None:
        """The timer's callback: the operation expired unless something completed it first."""
        if self.force_complete():
            self.on_expiration()

    def safe_try_complete(self) -> bool:
        """``try_complete`` under the operation's lock; False at once when already completed."""
        with self.lock:
            if self._completed:
                return False
            return self.try_complete()

    def safe_try_complete_or_else(self, action: Callable[[], None]) -> bool:
        """Under the lock: ``try_complete``; if that fails, ``action()`` and ``try_complete`` again."""
        with self.lock:
            if self.try_complete():
                return True
            action()
            return self.try_complete()


class _Watchers:
    """The operations watched under one key, in the order they were watched.

    A dict keyed by ``id(op)`` gives O(1) removal and ordered iteration; the shard's lock guards it.
    Condition checks iterate over a snapshot, outside the lock.
    """

    __slots__ = ("key", "ops")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.ops: dict[int, DelayedOperation] = {}


class _Shard:
    __slots__ = ("lock", "watchers")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.watchers: dict[Hashable, _Watchers] = {}


class DelayedOperationPurgatory:
    """Holds delayed operations until they complete or expire.

    ``try_complete_else_watch(op, keys)`` completes ``op`` now if it can, otherwise watches it under
    every key and arms its timeout. ``check_and_complete(key)`` re-checks the operations watched
    under ``key``. An expiration reaper thread drives the timer (every ``REAPER_POLL_MS`` at most)
    and purges completed operations from the watch lists once their estimated number passes
    ``purge_interval``. Give each purgatory its own timer: ``delayed()`` is the timer's size.
    """

    def __init__(self, name: str, timer: SystemTimer | None = None, purge_interval: int = 1000,
                 reaper_enabled: bool = True) -> None:
        if not isinstance(purge_interval, int) or isinstance(purge_interval, bool) or purge_interval < 0:
            raise ValueError(f"purge_interval must be an int >= 0, got {purge_interval!r}")
        self.name = name
        self.timer = SystemTimer(name) if timer is None else timer
        self.purge_interval = purge_interval
        self._shards = [_Shard() for _ in range(SHARDS)]
        self._estimate_lock = threading.Lock()
        self._estimated_total = 0
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None
        if reaper_enabled:
            self._reaper = threading.Thread(target=self._reap, name=f"ExpirationReaper-{name}", daemon=True)
            self._reaper.start()

    def _shard(self, key: Hashable) -> _Shard:
        return self._shards[hash(key) % SHARDS]

    # --- the API ---------------------------------------------------------------------------------

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Complete ``op`` now if its condition holds; otherwise watch it under ``keys`` and arm its
        timeout. True when ``op`` completed during the call, False when it is now pending.

        Raises ``ValueError`` for an empty ``keys``, ``ShutdownError`` after ``shutdown()``.
        """
        keys = list(keys)
        if not keys:
            raise ValueError(f"try_complete_else_watch needs at least one key for {op!r}")
        if not isinstance(op, DelayedOperation):
            raise TypeError(f"op must be a DelayedOperation, got {op!r}")

        def watch_all() -> None:
            for key in keys:
                if op.is_completed():  # completed meanwhile: no need to watch the remaining keys
                    break
                self._watch(key, op)
            with self._estimate_lock:
                self._estimated_total += 1

        if op.safe_try_complete_or_else(watch_all):
            return True
        if not op.is_completed():
            self.timer.add(op)
            if op.is_completed():  # completed between the check and the add: take it back out
                op.cancel()
        return False

    def _watch(self, key: Hashable, op: DelayedOperation) -> None:
        shard = self._shard(key)
        with shard.lock:
            watchers = shard.watchers.get(key)
            if watchers is None:
                watchers = shard.watchers[key] = _Watchers(key)
            watchers.ops[id(op)] = op

    def check_and_complete(self, key: Hashable) -> int:
        """Re-check the operations watched under ``key``; returns how many this call completed."""
        shard = self._shard(key)
        with shard.lock:
            watchers = shard.watchers.get(key)
            if watchers is None:
                return 0
            ops = list(watchers.ops.values())
        done = []
        completed = 0
        for op in ops:
            if op.is_completed():
                done.append(op)
            elif op.safe_try_complete():
                done.append(op)
                completed += 1
        if done:
            self._unwatch(shard, watchers, done)
        return completed

    def _unwatch(self, shard: _Shard, watchers: _Watchers, ops: list[DelayedOperation]) -> int:
        with shard.lock:
            removed = 0
            for op in ops:
                if watchers.ops.pop(id(op), None) is not None:
                    removed += 1
            # Delete the key only if it still maps to this very list and the list is empty, so a
            # late call never drops a newer list that somebody just started watching under.
            if not watchers.ops and shard.watchers.get(watchers.key) is watchers:
                del shard.watchers[watchers.key]
            return removed

    def watched(self) -> int:
        """Watch-list entries: an operation counts once per key; completed ones count until purged."""
        total = 0
        for shard in self._shards:
            with shard.lock:
                total += sum(len(watchers.ops) for watchers in shard.watchers.values())
        return total

    def delayed(self) -> int:
        """Operations waiting in the timer (exact: a completed operation leaves it at once)."""
        return self.timer.size()

    def cancel_for_key(self, key: Hashable) -> list[DelayedOperation]:
        """Stop watching ``key``: its operations leave the timer, are NOT completed, and are returned.

        They stay on any other key they were watched under.
        """
        shard = self._shard(key)
        with shard.lock:
            watchers = shard.watchers.pop(key, None)
        if watchers is None:
            return []
        ops = list(watchers.ops.values())
        for op in ops:
            op.cancel()
        return ops

    # --- the reaper ------------------------------------------------------------------------------

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        """One reaper round: expire due operations (waiting up to ``timeout_ms``), then purge if needed.

        The reaper thread calls this in a loop; with ``reaper_enabled=False`` the caller does.
        """
        advanced = self.timer.advance_clock(timeout_ms)
        self.purge_if_needed()
        return advanced

    def purge_if_needed(self) -> int:
        """Purge completed operations from every watch list when their estimate passes the interval."""
        delayed = self.delayed()
        with self._estimate_lock:
            if self._estimated_total - delayed <= self.purge_interval:
                return 0
            self._estimated_total = delayed
        purged = 0
        for shard in self._shards:
            with shard.lock:
                snapshots = [(watchers, list(watchers.ops.values())) for watchers in shard.watchers.values()]
            for watchers, ops in snapshots:
                done = [op for op in ops if op.is_completed()]
                if done or not ops:
                    purged += self._unwatch(shard, watchers, done)
        return purged

    def _reap(self) -> None:
        timer = self.timer
        while not self._stop.is_set() and not timer.closed:
            try:
                self.advance_clock(REAPER_POLL_MS)
            except Exception:  # a bug, not an expected state: log it and keep the purgatory alive
                log.exception("purgatory %r: reaper round failed", self.name)
                self._stop.wait(REAPER_POLL_MS / 1000.0)

    def shutdown(self, timeout_s: float | None = 5.0) -> None:
        """Stop the reaper and the timer. Pending operations are neither completed nor expired."""
        self._stop.set()
        self.timer.wake()
        if self._reaper is not None and self._reaper is not threading.current_thread():
            self._reaper.join(timeout_s)
        self.timer.shutdown(timeout_s)

    def __repr__(self) -> str:
        return f"DelayedOperationPurgatory(name={self.name!r}, delayed={self.delayed()})"
