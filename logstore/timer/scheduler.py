"""Scheduler: named one-shot and periodic background jobs on the timing wheel (docs/design.md §8.1).

This module owns ``Scheduler`` and its handles, ``ScheduledTask``. The LogManager runs its
retention, flush and checkpoint jobs here. Jobs sit in a ``SystemTimer`` whose expired tasks run on
the thread that drives it (``executor_thread=False``):

- in production, ``startup()`` starts one daemon driver thread that blocks in the delay queue until
  the next bucket is due and runs due jobs one after another (a slow job delays the others, as on
  Kafka's single-thread schedulers);
- in tests (``threaded=False``, a ``ManualClock``), nothing runs until the test calls
  ``advance(delta_ms)``, which walks the clock forward stopping at every due time and runs each job
  on the test's thread at exactly its time: the same wheel code, deterministically.

Periodic jobs run at fixed rate: at ``start + k * period_ms``, without drift. When a run is late by
more than a period (the process was suspended, or the job overran), the missed runs are skipped,
not replayed in a burst: a retention check or a flush gains nothing from running five times in a
row. An exception in a job is logged with its name and a periodic job keeps its schedule.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Callable

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import ShutdownError
from .system_timer import SystemTimer
from .timing_wheel import TimerTask

log = logging.getLogger(__name__)

DRIVER_POLL_MS = 200  # how long the driver waits in one poll; a shutdown wakes it sooner


class ScheduledTask(TimerTask):
    """The handle of a scheduled job: ``cancel()`` it; read its ``name``, ``period_ms``,
    ``next_run_ms`` (monotonic), ``runs`` and ``failures``."""

    __slots__ = ("name", "fn", "period_ms", "next_run_ms", "runs", "failures", "_scheduler", "_guard",
                 "_stopped", "__weakref__")

    def __init__(self, scheduler: Scheduler, name: str, fn: Callable[[], object], delay_ms: int,
                 period_ms: int | None) -> None:
        super().__init__(delay_ms)
        self.name = name
        self.fn = fn
        self.period_ms = period_ms
        self.next_run_ms = 0
        self.runs = 0
        self.failures = 0
        self._scheduler = scheduler
        self._guard = threading.Lock()  # orders cancel() against the periodic re-arm
        self._stopped = False

    def run(self) -> None:
        if self._stopped:
            return
        scheduled_ms = self.next_run_ms
        self.runs += 1
        self._scheduler._runs += 1
        try:
            self.fn()
        except Exception:
            self.failures += 1
            log.exception("scheduled task %r failed (run %d)", self.name, self.runs)
        if self.period_ms is not None:
            self._rearm(scheduled_ms, self.period_ms)
        else:
            self._stopped = True

    def _rearm(self, scheduled_ms: int, period_ms: int) -> None:
        now_ms = self._scheduler.clock.monotonic_ms()
        next_ms = scheduled_ms + period_ms
        if next_ms < now_ms:  # late by more than a period: skip to the first boundary not yet past
            next_ms += -(-(now_ms - next_ms) // period_ms) * period_ms
        with self._guard:
            if self._stopped:
                return
            self.next_run_ms = next_ms
            try:
                self._scheduler._timer_for_rearm().add(self, at_ms=next_ms)
            except ShutdownError:  # the scheduler shut down while this run was in progress
                self._stopped = True

    def cancel(self) -> None:
        """Stop the job: a pending run is dropped; a run in progress finishes and is not re-armed."""
        with self._guard:
            self._stopped = True
            super().cancel()

    @property
    def cancelled(self) -> bool:
        """True once the job will not run again (cancelled, finished one-shot, or scheduler shut down)."""
        return self._stopped

    def __repr__(self) -> str:
        kind = f"every {self.period_ms} ms" if self.period_ms is not None else "once"
        return f"ScheduledTask({self.name!r}, {kind}, next_run_ms={self.next_run_ms}, runs={self.runs})"


class Scheduler:
    """Runs named jobs after a delay, once or periodically, on the timing wheel.

    ``Scheduler(clock)`` then ``startup()``; ``schedule(name, fn, delay_ms, period_ms=None)`` returns a
    ``ScheduledTask`` handle; ``shutdown()`` waits for the job that is running and drops the rest. A
    scheduler can be started again after a shutdown. With ``threaded=False`` no thread is started and
    the caller drives time with ``advance(delta_ms)`` (a ``ManualClock``) or ``run_due()``.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK, *, name: str = "logstore-scheduler", threaded: bool = True,
                 tick_ms: int = 1, wheel_size: int = 20) -> None:
        self.clock = clock
        self.name = name
        self.threaded = threaded
        self._tick_ms = tick_ms
        self._wheel_size = wheel_size
        self._lock = threading.Lock()
        self._timer: SystemTimer | None = None
        self._driver: threading.Thread | None = None
        self._tasks: weakref.WeakSet[ScheduledTask] = weakref.WeakSet()  # pending jobs are held by the wheel
        self._runs = 0  # job runs so far (incremented only by the thread that runs jobs)

    # --- lifecycle ------------------------------------------------------------------------------

    def startup(self) -> None:
        """Start taking jobs (and, when threaded, start the driver thread)."""
        with self._lock:
            if self._timer is not None:
                raise ShutdownError(f"scheduler {self.name!r} is already started")
            timer = SystemTimer(self.name, tick_ms=self._tick_ms, wheel_size=self._wheel_size, clock=self.clock,
                                executor_thread=False)
            self._timer = timer
            if self.threaded:
                self._driver = threading.Thread(target=self._drive, args=(timer,), name=self.name, daemon=True)
                self._driver.start()

    def _drive(self, timer: SystemTimer) -> None:
        while not timer.closed:
            try:
                timer.advance_clock(DRIVER_POLL_MS)
            except Exception:  # the timer's own bug: log it, never die silently, do not spin
                log.exception("scheduler %r: driver error", self.name)
                threading.Event().wait(DRIVER_POLL_MS / 1000.0)  # real time: a manual clock must not move

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Stop: wait for the job in progress (up to ``timeout_s``), drop every other. Idempotent."""
        with self._lock:
            timer, driver = self._timer, self._driver
            self._timer = self._driver = None
            tasks, self._tasks = list(self._tasks), weakref.WeakSet()
        if timer is None:
            return
        for task in tasks:
            task._stopped = True
        timer.shutdown()
        if driver is not None and driver is not threading.current_thread():
            driver.join(timeout_s)
            if driver.is_alive():
                log.warning("scheduler %r: a job is still running after %s s", self.name, timeout_s)

    @property
    def is_started(self) -> bool:
        return self._timer is not None

    def __enter__(self) -> Scheduler:
        self.startup()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # --- jobs -----------------------------------------------------------------------------------

    def schedule(self, name: str, fn: Callable[[], object], delay_ms: int = 0,
                 period_ms: int | None = None) -> ScheduledTask:
        """Run ``fn()`` ``delay_ms`` from now, then every ``period_ms`` if given (fixed rate).

        Raises ``ShutdownError`` when the scheduler is not started, ``ValueError``/``TypeError`` for
        a bad argument (a negative delay, a period that is not a positive int, ``fn`` not callable).
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str, got {name!r}")
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        if not isinstance(delay_ms, int) or isinstance(delay_ms, bool) or delay_ms < 0:
            raise ValueError(f"delay_ms must be an int >= 0, got {delay_ms!r}")
        if period_ms is not None and (not isinstance(period_ms, int) or isinstance(period_ms, bool) or period_ms < 1):
            raise ValueError(f"period_ms must be None or an int >= 1, got {period_ms!r}")
        task = ScheduledTask(self, name, fn, delay_ms, period_ms)
        with self._lock:
            timer = self._timer
            if timer is None:
                raise ShutdownError(f"scheduler {self.name!r} is not started; cannot schedule {name!r}")
            self._tasks.add(task)
        task.next_run_ms = self.clock.monotonic_ms() + delay_ms
        timer.add(task, at_ms=task.next_run_ms)
        return task

    def _timer_for_rearm(self) -> SystemTimer:
        timer = self._timer
        if timer is None:
            raise ShutdownError(f"scheduler {self.name!r} is shut down")
        return timer

    def pending(self) -> int:
        """Jobs waiting for their next run (a periodic job counts between its runs)."""
        timer = self._timer
        return 0 if timer is None else timer.size() + timer.backlog()

    def tasks(self) -> list[ScheduledTask]:
        """The jobs that will run again, soonest first."""
        with self._lock:
            live = [task for task in self._tasks if not task._stopped]
        return sorted(live, key=lambda task: (task.next_run_ms, task.name))

    # --- driving time by hand (threaded=False) ----------------------------------------------------

    def run_due(self) -> int:
        """Run every job due at the clock's current time on this thread; returns how many runs."""
        timer = self._manual_timer()
        before = self._runs
        while timer.advance_clock(0):
            pass
        return self._runs - before

    def advance(self, delta_ms: int) -> int:
        """Move a ``ManualClock`` forward by ``delta_ms``, running each job at exactly its due time.

        The clock stops at every due time on the way (as real time would pass through it), so a
        10 ms periodic job runs 10 times in ``advance(100)``. Returns the number of runs.
        """
        if not isinstance(delta_ms, int) or delta_ms < 0:
            raise ValueError(f"delta_ms must be an int >= 0, got {delta_ms!r}")
        timer = self._manual_timer()
        clock = self.clock
        if not hasattr(clock, "advance"):
            raise TypeError(f"advance() needs a ManualClock, got {clock!r}")
        before = self._runs
        target_ms = clock.monotonic_ms() + delta_ms
        while True:
            self.run_due()
            due_ms = timer.next_expiration_ms()
            now_ms = clock.monotonic_ms()
            if due_ms is None or due_ms > target_ms:
                break
            clock.advance(max(0, due_ms - now_ms))
        clock.advance(max(0, target_ms - clock.monotonic_ms()))
        self.run_due()
        return self._runs - before

    def _manual_timer(self) -> SystemTimer:
        if self.threaded:
            raise ValueError(f"scheduler {self.name!r} runs its own driver thread; run_due/advance are for "
                             "threaded=False")
        timer = self._timer
        if timer is None:
            raise ShutdownError(f"scheduler {self.name!r} is not started")
        return timer

    def __repr__(self) -> str:
        return f"Scheduler(name={self.name!r}, started={self.is_started}, pending={self.pending()})"
