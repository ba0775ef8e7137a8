"""Model-based tests of the timer, the scheduler and the purgatory (hypothesis state machines).

Each machine drives the real component on a ManualClock and compares it with a plain model:
- SystemTimer: a list of live deadlines at tick granularity. After the clock moves to ``now`` and the
  timer is driven, exactly the live tasks whose deadline's tick has started (``d - d % tick <= now``)
  have run, each once, in nondecreasing tick order; ``size()`` is the number of live tasks.
- Scheduler: the run times of every job (``start + k * period``) up to the clock.
- Purgatory: each operation's fate (pending, completed by its condition, expired, cancelled) and the
  exact watch-list and estimate bookkeeping.
A restart step (shutdown, then a fresh component) is the crash of an in-memory component: what was
pending is dropped and never runs later.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from logstore.clock import ManualClock
from logstore.timer.purgatory import DelayedOperation, DelayedOperationPurgatory
from logstore.timer.scheduler import Scheduler
from logstore.timer.system_timer import SystemTimer
from logstore.timer.timing_wheel import TimerTask


class Probe(TimerTask):
    def __init__(self, ident: int, delay_ms: int, ran: list) -> None:
        super().__init__(delay_ms)
        self.ident, self.ran = ident, ran

    def run(self) -> None:
        self.ran.append(self.ident)


class TimerMachine(RuleBasedStateMachine):
    @initialize(tick_ms=st.sampled_from([1, 2, 5, 10]), wheel_size=st.sampled_from([2, 3, 4, 8, 20]),
                start_ms=st.integers(0, 10_000))
    def setup(self, tick_ms, wheel_size, start_ms):
        self.tick_ms, self.wheel_size = tick_ms, wheel_size
        self.clock = ManualClock(start_ms)
        self.ran: list[int] = []
        self.tasks: dict[int, Probe] = {}
        self.live: dict[int, int] = {}  # ident -> deadline (the model)
        self.order: dict[int, int] = {}  # ident -> the tick it runs in order with
        self.dead: set[int] = set()  # idents that must never run again
        self.runs: dict[int, int] = {}
        self.next_ident = 0
        self.timer = self._new_timer()

    def _new_timer(self) -> SystemTimer:
        return SystemTimer("model", tick_ms=self.tick_ms, wheel_size=self.wheel_size, clock=self.clock,
                           executor_thread=False)

    def _tick(self, deadline_ms: int) -> int:
        return deadline_ms - deadline_ms % self.tick_ms

    @rule(delay_ms=st.one_of(st.integers(-20, 60), st.integers(60, 20_000)))
    def add(self, delay_ms):
        ident = self.next_ident
        self.next_ident += 1
        task = Probe(ident, delay_ms, self.ran)
        self.tasks[ident] = task
        self.timer.add(task)
        self.live[ident] = self.clock.monotonic_ms() + delay_ms
        self.order[ident] = self._order_tick(self.live[ident])

    def _order_tick(self, deadline_ms: int) -> int:
        # A task already due when added runs at once, in add order: its place in the run order is
        # the current tick, not its (past) deadline's.
        return max(self._tick(deadline_ms), self._tick(self.clock.monotonic_ms()))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def cancel(self, data):
        ident = data.draw(st.sampled_from(sorted(self.live)))
        self.tasks[ident].cancel()
        del self.live[ident]
        self.dead.add(ident)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), delay_ms=st.integers(0, 5_000))
    def re_add(self, data, delay_ms):
        ident = data.draw(st.sampled_from(sorted(self.live)))
        task = self.tasks[ident]
        task.delay_ms = delay_ms
        self.timer.add(task)
        self.live[ident] = self.clock.monotonic_ms() + delay_ms
        self.order[ident] = self._order_tick(self.live[ident])

    @rule(delta_ms=st.one_of(st.integers(0, 30), st.integers(30, 30_000)))
    def advance(self, delta_ms):
        now_ms = self.clock.advance(delta_ms)
        self.ran.clear()
        while self.timer.advance_clock(0):
            pass
        expected = sorted((self._tick(d), i) for i, d in self.live.items() if self._tick(d) <= now_ms)
        assert sorted(self.ran) == sorted(i for _, i in expected), "the set of tasks that ran"
        assert self.timer.size() == len(self.live) - len(self.ran) and self.timer.backlog() == 0
        ticks = [self.order[i] for i in self.ran]
        assert ticks == sorted(ticks), f"tasks ran out of tick order: {ticks}"
        for ident in self.ran:
            assert ident not in self.dead, f"task {ident} ran after cancel or restart"
            self.runs[ident] = self.runs.get(ident, 0) + 1
            assert self.runs[ident] == 1, f"task {ident} ran twice"
            del self.live[ident]
            self.dead.add(ident)

    @rule()
    def restart(self):
        self.timer.shutdown()
        self.dead.update(self.live)
        self.live.clear()
        self.timer = self._new_timer()

    @invariant()
    def size_is_exact(self):
        if hasattr(self, "timer"):
            size, backlog = self.timer.size(), self.timer.backlog()
            assert size <= len(self.live) <= size + backlog, "expired tasks wait in the backlog until driven"
            levels = len(self.timer.wheel.levels())
            assert len(self.timer._queue) <= self.wheel_size * levels


TestTimerModel = TimerMachine.TestCase


class SchedulerMachine(RuleBasedStateMachine):
    @initialize(start_ms=st.integers(0, 1_000_000))
    def setup(self, start_ms):
        self.clock = ManualClock(start_ms)
        self.scheduler = Scheduler(self.clock, threaded=False)
        self.scheduler.startup()
        self.log: list[tuple[int, int]] = []
        self.handles = {}
        self.jobs: dict[int, tuple[int, int | None]] = {}  # ident -> (next run, period): the model
        self.next_ident = 0

    def _job(self, ident):
        return lambda: self.log.append((self.clock.monotonic_ms(), ident))

    @rule(delay_ms=st.integers(0, 2_000), period_ms=st.none() | st.integers(1, 1_000))
    def schedule(self, delay_ms, period_ms):
        ident = self.next_ident
        self.next_ident += 1
        self.handles[ident] = self.scheduler.schedule(f"job-{ident}", self._job(ident), delay_ms, period_ms)
        self.jobs[ident] = (self.clock.monotonic_ms() + delay_ms, period_ms)

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def cancel(self, data):
        ident = data.draw(st.sampled_from(sorted(self.jobs)))
        self.handles[ident].cancel()
        del self.jobs[ident]

    @rule(delta_ms=st.integers(0, 3_000))
    def advance(self, delta_ms):
        target_ms = self.clock.monotonic_ms() + delta_ms
        expected = []
        for ident, (next_ms, period_ms) in list(self.jobs.items()):
            while next_ms <= target_ms:
                expected.append((next_ms, ident))
                if period_ms is None:
                    del self.jobs[ident]
                    break
                next_ms += period_ms
            else:
                self.jobs[ident] = (next_ms, period_ms)
        self.log.clear()
        runs = self.scheduler.advance(delta_ms)
        assert runs == len(expected)
        assert sorted(self.log) == sorted(expected)
        assert [at for at, _ in self.log] == sorted(at for at, _ in self.log), "runs out of time order"

    @rule()
    def restart(self):
        self.scheduler.shutdown()
        self.jobs.clear()
        self.scheduler.startup()

    @invariant()
    def pending_matches(self):
        if hasattr(self, "scheduler"):
            assert self.scheduler.pending() == len(self.jobs)


TestSchedulerModel = SchedulerMachine.TestCase


class ModelOp(DelayedOperation):
    def __init__(self, ident: int, delay_ms: int, ready: set, events: list) -> None:
        super().__init__(delay_ms)
        self.ident, self.ready, self.events = ident, ready, events
        self.completions = self.expirations = 0

    def try_complete(self) -> bool:
        return self.force_complete() if self.ident in self.ready else False

    def on_complete(self) -> None:
        self.completions += 1
        self.events.append(("complete", self.ident))

    def on_expiration(self) -> None:
        self.expirations += 1
        self.events.append(("expire", self.ident))


KEYS = ["a", "b", "c", "d"]


class PurgatoryMachine(RuleBasedStateMachine):
    @initialize(purge_interval=st.sampled_from([0, 1, 3, 1000]))
    def setup(self, purge_interval):
        self.purge_interval = purge_interval
        self.clock = ManualClock(0)
        self.ready: set[int] = set()
        self.events: list = []
        self.ops: dict[int, ModelOp] = {}
        self.next_ident = 0
        self._open()

    def _open(self):
        self.purgatory = DelayedOperationPurgatory(
            "model", SystemTimer("model", clock=self.clock, executor_thread=False),
            purge_interval=self.purge_interval, reaper_enabled=False)
        # the model
        self.timed: dict[int, int] = {}  # ident -> deadline, for ops armed in the timer
        self.keys_of: dict[int, list[str]] = {}
        self.watch: dict[str, list[int]] = {key: [] for key in KEYS}
        self.done: set[int] = set()  # completed (by condition or expiry)
        self.estimate = 0

    @rule(delay_ms=st.integers(1, 500), keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True),
          ready_now=st.booleans())
    def watch_op(self, delay_ms, keys, ready_now):
        ident = self.next_ident
        self.next_ident += 1
        op = ModelOp(ident, delay_ms, self.ready, self.events)
        self.ops[ident] = op
        if ready_now:
            self.ready.add(ident)
        self.events.clear()
        completed = self.purgatory.try_complete_else_watch(op, keys)
        assert completed == ready_now
        if ready_now:
            assert self.events == [("complete", ident)]
            self.done.add(ident)
            return
        assert self.events == []
        self.timed[ident] = self.clock.monotonic_ms() + delay_ms
        self.keys_of[ident] = keys
        for key in keys:
            self.watch[key].append(ident)
        self.estimate += 1

    @rule(key=st.sampled_from(KEYS), data=st.data())
    def satisfy_and_check(self, key, data):
        waiting = [i for i in self.watch[key] if i not in self.done]
        chosen = data.draw(st.lists(st.sampled_from(waiting), unique=True)) if waiting else []
        self.ready.update(chosen)
        self.events.clear()
        completed = self.purgatory.check_and_complete(key)
        newly = [i for i in self.watch[key] if i not in self.done and i in self.ready]
        assert completed == len(newly)
        assert sorted(self.events) == sorted(("complete", i) for i in newly)
        for ident in newly:
            self.done.add(ident)
            self.timed.pop(ident, None)
        self.watch[key] = [i for i in self.watch[key] if i not in self.done]

    @rule(key=st.sampled_from(KEYS))
    def cancel_key(self, key):
        cancelled = self.purgatory.cancel_for_key(key)
        assert sorted(op.ident for op in cancelled) == sorted(self.watch[key])
        for ident in self.watch[key]:
            self.timed.pop(ident, None)
        self.watch[key] = []

    @rule(delta_ms=st.integers(0, 300))
    def advance(self, delta_ms):
        now_ms = self.clock.advance(delta_ms)
        self.events.clear()
        self.purgatory.advance_clock(0)
        due = sorted(i for i, d in self.timed.items() if d <= now_ms)
        assert sorted(self.events) == sorted([("complete", i) for i in due] + [("expire", i) for i in due])
        for ident in due:
            del self.timed[ident]
            self.done.add(ident)
        if self.estimate - len(self.timed) > self.purge_interval:  # the purge rule, modelled
            self.estimate = len(self.timed)
            for key in KEYS:
                self.watch[key] = [i for i in self.watch[key] if i not in self.done]

    @rule()
    def restart(self):
        self.purgatory.shutdown()
        self.events.clear()
        self.clock.advance(1_000)
        self.purgatory.advance_clock(0)
        assert self.events == [], "a shut-down purgatory expires nothing"
        self._open()

    @invariant()
    def bookkeeping(self):
        if not hasattr(self, "purgatory"):
            return
        assert self.purgatory.delayed() == len(self.timed)
        assert self.purgatory.watched() == sum(len(ids) for ids in self.watch.values())
        for op in self.ops.values():
            assert op.completions <= 1 and op.expirations <= op.completions, f"op {op.ident} completed twice"
            assert op.completions == (op.ident in self.done) or op.ident not in self.keys_of


TestPurgatoryModel = PurgatoryMachine.TestCase
