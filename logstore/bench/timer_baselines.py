"""The contenders of ``logstore perf timer``: the timing wheel and the timers it is measured against.

This module owns the adapters that give every timer the same interface (``task_class(delay_ms,
sink)``, ``add``, ``cancel``, ``advance`` and ``retained``; expired tasks run on the calling thread):
logstore's wheel (also with dict buckets, the alternative ``TimerTaskList`` was measured against),
``heapq`` with lazy deletion, ``heapq`` with asyncio's rebuild rule, the stdlib ``sched`` module, and
a null timer that measures the benchmark driver's own cost. ``perf_timer`` runs the workloads.
"""

from __future__ import annotations

import heapq
import itertools
import sched

from ..clock import ManualClock
from ..timer.system_timer import SystemTimer
from ..timer.timing_wheel import SizeCounter, TimerTask, TimerTaskEntry, TimerTaskList, TimingWheel


# --- contenders --------------------------------------------------------------------------------------


class Sink:
    """Counts runs and, when asked, records how late each task ran (timer ms)."""

    __slots__ = ("runs", "clock", "early", "late", "max_late_ms", "tick_ms")

    def __init__(self, clock: ManualClock, tick_ms: int = 1) -> None:
        self.runs = 0
        self.clock, self.tick_ms = clock, tick_ms
        self.early = self.late = self.max_late_ms = 0

    def timed_run(self, deadline_ms: int) -> None:
        self.runs += 1
        late_ms = self.clock.monotonic_ms() - deadline_ms
        if late_ms < 0:
            self.early += 1
        elif late_ms > self.tick_ms:
            self.late += 1
        if late_ms > self.max_late_ms:
            self.max_late_ms = late_ms


class _Reports:
    """The run of every benchmark task: count it, and with a deadline also how late it is."""

    __slots__ = ()

    def run(self) -> None:
        if self.deadline_ms:
            self.sink.timed_run(self.deadline_ms)
        else:
            self.sink.runs += 1


class WheelTask(_Reports, TimerTask):
    __slots__ = ("sink", "deadline_ms")

    def __init__(self, delay_ms: int, sink: Sink, deadline_ms: int = 0) -> None:
        TimerTask.__init__(self, delay_ms)
        self.sink, self.deadline_ms = sink, deadline_ms


class PlainTask(_Reports):
    __slots__ = ("delay_ms", "sink", "deadline_ms", "cancelled", "event")

    def __init__(self, delay_ms: int, sink: Sink, deadline_ms: int = 0) -> None:
        self.delay_ms, self.sink, self.deadline_ms = delay_ms, sink, deadline_ms
        self.cancelled = False
        self.event = None


class WheelContender:
    """logstore's SystemTimer; ``dict_buckets=True`` swaps in dict buckets (the road not taken)."""

    task_class = WheelTask

    def __init__(self, clock: ManualClock, dict_buckets: bool = False) -> None:
        self.timer = SystemTimer("perf", clock=clock, executor_thread=False)
        if dict_buckets:
            timer = self.timer
            timer._wheel = _DictBucketWheel(1, 20, clock.monotonic_ms(), timer._counter, timer._queue)
        self.add = self.timer.add
        self.retained = self.timer.size

    @staticmethod
    def cancel(task: WheelTask) -> None:
        task.cancel()

    def advance(self) -> None:
        self.timer.advance_clock(0)


class HeapContender:
    """heapq with lazy deletion (``compact=False``) or with asyncio's rebuild rule (``compact=True``)."""

    task_class = PlainTask

    def __init__(self, clock: ManualClock, compact: bool = False) -> None:
        self.clock, self.compact = clock, compact
        self.heap: list = []
        self.seq = itertools.count()
        self.cancelled = 0

    def add(self, task: PlainTask) -> None:
        heapq.heappush(self.heap, (self.clock.monotonic_ms() + task.delay_ms, next(self.seq), task))

    def cancel(self, task: PlainTask) -> None:
        task.cancelled = True
        if self.compact:
            self.cancelled += 1
            heap = self.heap
            if len(heap) > 100 and self.cancelled * 2 > len(heap):
                self.heap = [item for item in heap if not item[2].cancelled]
                heapq.heapify(self.heap)
                self.cancelled = 0

    def advance(self) -> None:
        heap, now_ms = self.heap, self.clock.monotonic_ms()
        while heap and heap[0][0] <= now_ms:
            task = heapq.heappop(heap)[2]
            if not task.cancelled:
                task.run()
            elif self.compact:
                self.cancelled -= 1

    def retained(self) -> int:
        return len(self.heap)


class SchedContender:
    task_class = PlainTask

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.scheduler = sched.scheduler(timefunc=clock.monotonic_ms, delayfunc=lambda _delay: None)

    def add(self, task: PlainTask) -> None:
        task.event = self.scheduler.enterabs(self.clock.monotonic_ms() + task.delay_ms, 0, task.run)

    def cancel(self, task: PlainTask) -> None:
        self.scheduler.cancel(task.event)

    def advance(self) -> None:
        self.scheduler.run(blocking=False)

    def retained(self) -> int:
        return len(self.scheduler._queue)


class NullContender:
    task_class = PlainTask

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock

    def add(self, task) -> None:
        pass

    def cancel(self, task) -> None:
        pass

    def advance(self) -> None:
        pass

    def retained(self) -> int:
        return 0


CONTENDERS = {
    "wheel": WheelContender,
    "wheel-dict": lambda clock: WheelContender(clock, dict_buckets=True),
    "heapq": HeapContender,
    "heapq+compact": lambda clock: HeapContender(clock, compact=True),
    "sched": SchedContender,
    "null": NullContender,
}


def make_contender(name: str, clock: ManualClock):
    """The contender called ``name`` on ``clock``; ValueError names the choices."""
    try:
        return CONTENDERS[name](clock)
    except KeyError:
        raise ValueError(f"unknown timer {name!r}; choose from {', '.join(CONTENDERS)}") from None


class DictTimerTaskList(TimerTaskList):
    """The alternative bucket: a dict keyed by entry (insertion-ordered) instead of a linked list.

    Only the ``wheel-dict`` contender uses it, to measure end to end the choice ``TimerTaskList`` made.
    """

    __slots__ = ("_entries",)

    def __init__(self, counter: SizeCounter) -> None:  # no linked-list root
        self._entries: dict = {}
        self._counter = counter
        self.expiration_ms = -1

    def add(self, entry: TimerTaskEntry) -> None:
        if entry.bucket is not None:
            entry.bucket.remove(entry)
        self._entries[entry] = None
        entry.bucket = self
        self._counter.value += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        if entry.bucket is self:
            del self._entries[entry]
            entry.bucket = None
            self._counter.value -= 1

    def flush(self, fn) -> None:
        entries, self._entries = self._entries, {}
        for entry in entries:
            entry.bucket = None
        self._counter.value -= len(entries)
        self.expiration_ms = -1
        for entry in entries:
            fn(entry)

    def tasks(self) -> list[TimerTask]:
        return [entry.task for entry in self._entries if not entry.cancelled()]

    def __len__(self) -> int:
        return len(self._entries)


class _DictBucketWheel(TimingWheel):
    bucket_class = DictTimerTaskList


# --- the whole run -----------------------------------------------------------------------------------
