"""Many threads on one timer and one purgatory, with the interpreter's switch interval lowered so that
threads interleave inside the critical sections. Real clock, real executor and reaper threads.

Each test asserts exactly-once outcomes, never a duration: every operation completes exactly once,
a completed operation never expires, a task runs at most once and a cancelled one never runs.
"""

from __future__ import annotations

import random
import sys
import threading
import time

import pytest

from logstore.clock import SYSTEM_CLOCK, ManualClock
from logstore.timer.purgatory import DelayedOperation, DelayedOperationPurgatory
from logstore.timer.system_timer import SystemTimer
from logstore.timer.timing_wheel import TimerTask

WAIT_S = 30  # generous: a stuck test fails instead of hanging; nothing is timed


@pytest.fixture
def fast_switching():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def run_threads(targets) -> None:
    errors: list[BaseException] = []

    def guarded(fn):
        def body():
            try:
                fn()
            except BaseException as exc:  # re-raised in the test thread below
                errors.append(exc)
        return body

    threads = [threading.Thread(target=guarded(fn)) for fn in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
        assert not thread.is_alive(), "a worker thread is stuck"
    if errors:
        raise errors[0]


class Counted(TimerTask):
    def __init__(self, delay_ms: int, runs: dict, ident: int) -> None:
        super().__init__(delay_ms)
        self.runs, self.ident = runs, ident

    def run(self) -> None:
        with lock:
            self.runs[self.ident] = self.runs.get(self.ident, 0) + 1


lock = threading.Lock()


def test_adds_and_cancels_from_many_threads(fast_switching):
    timer = SystemTimer("hammer", clock=SYSTEM_CLOCK)
    stop = threading.Event()
    driver = threading.Thread(target=lambda: [timer.advance_clock(5) for _ in iter(stop.is_set, True)])
    driver.start()
    runs: dict[int, int] = {}
    kept: list[int] = []
    cancelled_early: list[int] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for i in range(400):
            ident = seed * 1_000_000 + i
            task = Counted(rng.randint(0, 30), runs, ident)
            timer.add(task)
            if rng.random() < 0.5:
                task.cancel()
                cancelled_early.append(ident)
            else:
                kept.append(ident)

    try:
        run_threads([lambda s=s: worker(s) for s in range(8)])
        deadline_ms = SYSTEM_CLOCK.monotonic_ms() + WAIT_S * 1000
        while (timer.size() or timer.backlog() or not all(i in runs for i in kept)) \
                and SYSTEM_CLOCK.monotonic_ms() < deadline_ms:
            SYSTEM_CLOCK.sleep_ms(10)
    finally:
        stop.set()
        timer.wake()
        driver.join(WAIT_S)
        timer.shutdown()
    assert all(runs.get(i) == 1 for i in kept), "every kept task ran exactly once"
    ran_after_cancel = [i for i in cancelled_early if i in runs]
    # A task can expire before its cancel (delay 0): then it may already be running. Never twice.
    assert all(runs[i] == 1 for i in ran_after_cancel)
    assert timer.size() == 0


class Threshold(DelayedOperation):
    """Completes once any of its keys' counters reaches its target.

    The check yields the GIL after reading the state (as a check that reads a log's end offset
    would), which opens the window a lost wake-up needs: state read, then changed by the producer
    before the op is on its watch lists.
    """

    def __init__(self, delay_ms: int, counters: dict, keys: list, target: int) -> None:
        super().__init__(delay_ms)
        self.counters, self.keys, self.target = counters, keys, target
        self.completions = self.expirations = 0

    def try_complete(self) -> bool:
        satisfied = any(self.counters[key] >= self.target for key in self.keys)
        time.sleep(0)
        return self.force_complete() if satisfied else False

    def on_complete(self) -> None:
        self.completions += 1  # under force_complete's guard: never concurrent for one op

    def on_expiration(self) -> None:
        self.expirations += 1


def test_each_operation_completes_exactly_once_under_contention(fast_switching):
    purgatory = DelayedOperationPurgatory("contention", SystemTimer("contention", clock=SYSTEM_CLOCK),
                                          purge_interval=50)
    keys = [f"k{i}" for i in range(8)]
    counters = {key: 0 for key in keys}
    counter_lock = threading.Lock()
    rng = random.Random(7)
    # Long timeouts: these must complete through their keys; short ones race their expiry.
    ops = [Threshold(60_000 if i % 4 else rng.randint(0, 5), counters, rng.sample(keys, rng.randint(1, 3)),
                     rng.randint(1, 40)) for i in range(800)]
    chunks = [ops[i::4] for i in range(4)]

    def watcher(chunk) -> None:
        for op in chunk:
            purgatory.try_complete_else_watch(op, op.keys)

    def producer(seed: int) -> None:
        local = random.Random(seed)
        for _ in range(400):
            key = local.choice(keys)
            with counter_lock:  # publish the new state first ...
                counters[key] += 1
            purgatory.check_and_complete(key)  # ... then wake the watchers, holding no lock

    try:
        run_threads([lambda c=c: watcher(c) for c in chunks] + [lambda s=s: producer(s) for s in range(3)])
        for key in keys:  # final checks: the counters only grew
            purgatory.check_and_complete(key)
        deadline_ms = SYSTEM_CLOCK.monotonic_ms() + WAIT_S * 1000
        while not all(op.is_completed() for op in ops if op.delay_ms <= 5) \
                and SYSTEM_CLOCK.monotonic_ms() < deadline_ms:
            SYSTEM_CLOCK.sleep_ms(10)
    finally:
        purgatory.shutdown()
    assert all(op.completions <= 1 for op in ops), "on_complete ran twice for an op"
    reachable = [op for op in ops if any(counters[key] >= op.target for key in op.keys)]
    assert all(op.completions == 1 for op in reachable)
    assert all(op.expirations == 0 for op in reachable if op.delay_ms == 60_000), \
        "an op whose condition became true was left to expire: a lost wake-up"
    assert all(op.completions == 1 for op in ops if op.delay_ms <= 5), "short ops expired"
    assert all(op.expirations <= op.completions for op in ops)


def test_no_lost_wakeup_when_watching_races_completion(fast_switching):
    # One op, one producer, many rounds: the producer publishes then checks while the consumer is in
    # the middle of try_complete_else_watch. The op's timeout is an hour, so only a wake-up completes it.
    clock = ManualClock(0)
    purgatory = DelayedOperationPurgatory("race", SystemTimer("race", clock=clock, executor_thread=False),
                                          reaper_enabled=False)
    lost = 0
    try:
        for round_ in range(300):
            state = {"k": 0}
            op = Threshold(3_600_000, state, ["k"], 1)
            barrier = threading.Barrier(2)

            def consumer() -> None:
                barrier.wait()
                purgatory.try_complete_else_watch(op, ["k"])

            def producer() -> None:
                barrier.wait()
                for _ in range(round_ % 7):  # land at different points of the consumer's registration
                    time.sleep(0)
                state["k"] = 1
                purgatory.check_and_complete("k")

            run_threads([consumer, producer])
            if not op.is_completed():
                lost += 1
            assert op.completions <= 1
            purgatory.cancel_for_key("k")
    finally:
        purgatory.shutdown()
    assert lost == 0, f"{lost} of 300 rounds lost the wake-up"


def test_two_keys_and_the_timer_firing_at_once_complete_once(fast_switching):
    clock = ManualClock(0)
    timer = SystemTimer("burst", clock=clock, executor_thread=False)
    purgatory = DelayedOperationPurgatory("burst", timer, reaper_enabled=False)
    try:
        for _ in range(200):
            state = {"a": 0, "b": 0}
            op = Threshold(10, state, ["a", "b"], 1)
            purgatory.try_complete_else_watch(op, ["a", "b"])
            state["a"] = state["b"] = 1
            clock.advance(10)
            run_threads([lambda: purgatory.check_and_complete("a"), lambda: purgatory.check_and_complete("b"),
                         lambda: purgatory.advance_clock(0)])
            assert op.completions == 1
            assert op.expirations <= 1
    finally:
        purgatory.shutdown()
