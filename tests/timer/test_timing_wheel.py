"""The timing wheel and SystemTimer, behaviour by behaviour.

Everything runs on a ManualClock with ``executor_thread=False`` (tasks run on the test's thread inside
``advance_clock``) unless a test is about the executor thread itself.
"""

from __future__ import annotations

import logging
import threading

import pytest

from logstore.clock import SYSTEM_CLOCK, ManualClock
from logstore.errors import ShutdownError
from logstore.timer.system_timer import DelayQueue, SystemTimer
from logstore.timer.timing_wheel import SizeCounter, TimerTask, TimerTaskEntry, TimerTaskList, TimingWheel


class Recorder(TimerTask):
    """Records the clock reading (and thread) at each run."""

    def __init__(self, delay_ms: int, clock, log: list, label=None) -> None:
        super().__init__(delay_ms)
        self.clock, self.log, self.label = clock, log, label
        self.thread_name = None

    def run(self) -> None:
        self.thread_name = threading.current_thread().name
        self.log.append((self.label, self.clock.monotonic_ms()))


class FakeQueue:
    def __init__(self) -> None:
        self.offered: list[tuple[int, TimerTaskList]] = []

    def offer(self, bucket: TimerTaskList) -> None:
        self.offered.append((bucket.expiration_ms, bucket))


def wheel(tick_ms=1, wheel_size=20, start_ms=1005):
    counter = SizeCounter()
    queue = FakeQueue()
    return TimingWheel(tick_ms, wheel_size, start_ms, counter, queue), counter, queue


def entry(expiration_ms: int) -> TimerTaskEntry:
    return TimerTaskEntry(Recorder(0, SYSTEM_CLOCK, []), expiration_ms)


def drive(timer: SystemTimer) -> int:
    rounds = 0
    while timer.advance_clock(0):
        rounds += 1
    return rounds


# --- TimerTask and TimerTaskEntry ------------------------------------------------------


def test_task_delay_must_be_an_int():
    with pytest.raises(TypeError, match="1.5"):
        Recorder(1.5, SYSTEM_CLOCK, [])
    with pytest.raises(TypeError):
        Recorder(True, SYSTEM_CLOCK, [])


def test_cancel_is_harmless_twice_and_on_a_task_never_added():
    task = Recorder(10, SYSTEM_CLOCK, [])
    assert not task.is_cancelled() and not task.is_pending()
    task.cancel()
    task.cancel()
    assert task.is_cancelled()


def test_a_new_entry_evicts_the_old_one():
    w, counter, _ = wheel()
    task = Recorder(0, SYSTEM_CLOCK, [])
    first = TimerTaskEntry(task, 1010)
    assert w.add(first) and counter.value == 1
    second = TimerTaskEntry(task, 1015)
    assert first.cancelled() and not second.cancelled()
    assert first.bucket is None and counter.value == 0
    assert not w.add(first), "a superseded entry is treated as cancelled"
    assert w.add(second) and counter.value == 1


# --- TimerTaskList -----------------------------------------------------------------------------


def test_bucket_counter_is_shared_and_exact():
    counter = SizeCounter()
    a, b = TimerTaskList(counter), TimerTaskList(counter)
    entries = [entry(i) for i in range(5)]
    for e in entries[:3]:
        a.add(e)
    for e in entries[3:]:
        b.add(e)
    assert counter.value == 5 and len(a) == 3 and len(b) == 2
    b.add(entries[0])  # moving an entry unlinks it from its old bucket first
    assert counter.value == 5 and len(a) == 2 and len(b) == 3
    a.remove(entries[3])  # not in a: nothing happens
    assert counter.value == 5
    b.remove(entries[3])
    assert counter.value == 4 and entries[3].bucket is None


def test_set_expiration_reports_a_change():
    bucket = TimerTaskList(SizeCounter())
    assert bucket.expiration_ms == -1
    assert bucket.set_expiration(1000) is True
    assert bucket.set_expiration(1000) is False
    assert bucket.set_expiration(1020) is True


def test_flush_empties_in_order_and_resets_the_expiration():
    counter = SizeCounter()
    bucket = TimerTaskList(counter)
    entries = [entry(100 + i) for i in range(4)]
    for e in entries:
        bucket.add(e)
    bucket.set_expiration(100)
    entries[1].task.cancel()
    assert bucket.tasks() == [entries[0].task, entries[2].task, entries[3].task]
    seen = []
    bucket.flush(seen.append)
    assert seen == [entries[0], entries[2], entries[3]]  # the cancel unlinked entries[1]
    assert counter.value == 0 and len(bucket) == 0 and bucket.expiration_ms == -1
    assert all(e.bucket is None for e in entries)


# --- TimingWheel placement -----------------------------------------------------------------------


def test_start_is_aligned_down_to_the_tick():
    w, _, _ = wheel(tick_ms=10, wheel_size=5, start_ms=1005)
    assert w.current_time_ms == 1000


@pytest.mark.parametrize("expiration_ms, level, index, bucket_expiration_ms", [
    (1006, 1, 6, 1006),
    (1024, 1, 4, 1024),
    (1025, 2, 11, 1020),  # level 1 covers [1005, 1025): the overflow wheel (tick 20, time 1000) takes it
    (1400, 3, 3, 1200),
    (9005, 4, 1, 8000),
])
def test_bucket_selection_worked_examples(expiration_ms, level, index, bucket_expiration_ms):
    w, counter, queue = wheel(tick_ms=1, wheel_size=20, start_ms=1005)
    e = entry(expiration_ms)
    assert w.add(e)
    levels = w.levels()
    assert len(levels) == level
    assert e.bucket is levels[level - 1].buckets[index]
    assert e.bucket.expiration_ms == bucket_expiration_ms
    assert queue.offered == [(bucket_expiration_ms, e.bucket)]
    assert counter.value == 1


def test_level_geometry_with_the_defaults():
    w, _, _ = wheel(tick_ms=1, wheel_size=20, start_ms=0)
    w.add(entry(20 ** 6))  # needs the seventh level
    assert [level.tick_ms for level in w.levels()] == [1, 20, 400, 8000, 160_000, 3_200_000, 64_000_000]
    assert [level.interval_ms for level in w.levels()][:4] == [20, 400, 8000, 160_000]


def test_expired_and_cancelled_entries_are_rejected():
    w, counter, queue = wheel(tick_ms=10, wheel_size=5, start_ms=1000)
    assert w.add(entry(1020))
    assert not w.add(entry(999))
    assert not w.add(entry(1005)), "1005 is inside the current tick [1000, 1010)"
    cancelled = entry(1030)
    cancelled.task.cancel()
    assert not w.add(cancelled)
    assert counter.value == 1 and len(queue.offered) == 1


def test_overflow_wheel_is_created_lazily_and_reused():
    w, _, _ = wheel(tick_ms=10, wheel_size=5, start_ms=1000)
    assert w.overflow_wheel is None
    assert w.add(entry(1040))
    assert w.overflow_wheel is None, "1040 < 1000 + 50 fits the first level"
    assert w.add(entry(1060))
    overflow = w.overflow_wheel
    assert overflow is not None and overflow.tick_ms == 50 and overflow.current_time_ms == 1000
    assert w.add(entry(1200))
    assert w.overflow_wheel is overflow, "the overflow wheel is reused"
    w.advance_clock(1060)
    assert w.current_time_ms == 1060 and overflow.current_time_ms == 1050


def test_advance_clock_never_goes_backwards_and_moves_in_whole_ticks():
    w, _, _ = wheel(tick_ms=10, wheel_size=5, start_ms=1000)
    w.advance_clock(1009)
    assert w.current_time_ms == 1000
    w.advance_clock(1017)
    assert w.current_time_ms == 1010
    w.advance_clock(900)
    assert w.current_time_ms == 1010


def test_a_bucket_is_queued_once_per_round():
    w, _, queue = wheel(tick_ms=1, wheel_size=20, start_ms=1000)
    for _ in range(50):
        assert w.add(entry(1007))
    assert len(queue.offered) == 1, "W1: one offer while the bucket keeps its expiration"
    bucket = queue.offered[0][1]
    bucket.flush(lambda e: None)
    w.advance_clock(1008)
    assert w.add(entry(1027)), "the same bucket, next round"
    assert queue.offered[-1] == (1027, bucket) and len(queue.offered) == 2


# --- SystemTimer --------------------------------------------------------------------------------


def manual_timer(start_ms=1000, **kwargs):
    clock = ManualClock(start_ms)
    kwargs.setdefault("executor_thread", False)
    return clock, SystemTimer("test", clock=clock, **kwargs)


def test_reinsertion_moves_entries_down_the_levels():
    clock, timer = manual_timer(1005)
    log: list = []
    timer.add(Recorder(20, clock, log))  # deadline 1025: level 2, bucket 1020
    level2_bucket = timer.wheel.overflow_wheel.buckets[11]
    assert level2_bucket.expiration_ms == 1020 and len(level2_bucket) == 1
    clock.advance(15)  # 1020: the level-2 bucket is due and cascades
    assert timer.advance_clock(0) is True
    assert log == [] and len(level2_bucket) == 0
    assert timer.wheel.current_time_ms == 1020
    level1_bucket = timer.wheel.buckets[1025 % 20]
    assert level1_bucket.expiration_ms == 1025 and len(level1_bucket) == 1
    clock.advance(4)
    assert timer.advance_clock(0) is False and log == []
    clock.advance(1)
    assert timer.advance_clock(0) is True and log == [(None, 1025)]
    assert timer.size() == 0


def test_each_task_runs_at_its_deadline_never_before():
    clock, timer = manual_timer(0)
    log: list = []
    deadlines = {}
    for i, delay in enumerate([1, 2, 3, 19, 20, 21, 399, 400, 401, 7999, 8000, 8001, 12_345]):
        timer.add(Recorder(delay, clock, log, label=i))
        deadlines[i] = delay
    while timer.size():
        clock.advance(1)
        drive(timer)
    assert sorted(log, key=lambda item: item[1]) == log, "tasks ran in deadline order"
    assert {label: at for label, at in log} == deadlines


def test_cancelled_tasks_never_run_and_leave_the_timer_at_once():
    clock, timer = manual_timer(0)
    log: list = []
    tasks = [Recorder(100 + i, clock, log, label=i) for i in range(10)]
    for task in tasks:
        timer.add(task)
    for task in tasks[::2]:
        task.cancel()
    assert timer.size() == 5
    clock.advance(1000)
    drive(timer)
    assert sorted(label for label, _ in log) == [1, 3, 5, 7, 9]
    assert all(task.is_cancelled() for task in tasks[::2])


def test_re_adding_a_task_reschedules_it():
    clock, timer = manual_timer(0)
    log: list = []
    task = Recorder(100, clock, log)
    timer.add(task)
    clock.advance(50)
    timer.add(task)  # now due at 150
    assert timer.size() == 1
    clock.advance(60)
    drive(timer)
    assert log == []
    clock.advance(40)
    drive(timer)
    assert log == [(None, 150)]


def test_adding_to_another_timer_moves_the_task():
    clock, first = manual_timer(0)
    second = SystemTimer("second", clock=clock, executor_thread=False)
    log: list = []
    task = Recorder(10, clock, log)
    first.add(task)
    second.add(task)
    assert first.size() == 0 and second.size() == 1
    clock.advance(10)
    drive(first)
    drive(second)
    assert log == [(None, 10)]


def test_expired_task_runs_at_once_when_the_wheel_is_current():
    clock, timer = manual_timer(1000)
    log: list = []
    timer.add(Recorder(0, clock, log))
    timer.add(Recorder(-5, clock, log))
    assert timer.size() == 0, "already expired: straight to the executor, not into a bucket"
    assert log == [], "never on the adding thread"
    assert timer.advance_clock(0) is True
    assert log == [(None, 1000), (None, 1000)]


def test_a_lagging_wheel_catches_up_through_past_buckets():
    # The wheel clock moves only when buckets expire; after an idle period a new task lands in a
    # bucket whose expiration has passed, and one advance_clock walks it down: 4800 -> 5000 -> 5010.
    clock, timer = manual_timer(0)
    log: list = []
    clock.advance(5000)
    timer.add(Recorder(10, clock, log))
    assert timer.next_expiration_ms() == 4800
    assert timer.advance_clock(0) is True
    assert timer.wheel.current_time_ms == 5000 and log == []
    assert timer.next_expiration_ms() == 5010
    clock.advance(10)
    drive(timer)
    assert log == [(None, 5010)]


def test_a_zero_delay_task_on_a_lagging_wheel_waits_for_the_next_advance():
    clock, timer = manual_timer(0)
    log: list = []
    clock.advance(777)
    timer.add(Recorder(0, clock, log))
    assert timer.size() == 1 and log == []
    drive(timer)
    assert log == [(None, 777)]


def test_coarse_tick_fires_up_to_one_tick_early():
    # W4: with tick 10 a deadline of 1025 sits in the bucket for 1020 and runs there. The default
    # tick of 1 ms cannot fire early at millisecond resolution.
    clock, timer = manual_timer(1000, tick_ms=10, wheel_size=5)
    log: list = []
    timer.add(Recorder(25, clock, log))
    clock.advance(20)
    drive(timer)
    assert log == [(None, 1020)]


def test_advance_clock_reports_processed_buckets():
    clock, timer = manual_timer(0)
    log: list = []
    assert timer.advance_clock(0) is False
    task = Recorder(5, clock, log)
    timer.add(task)
    task.cancel()
    clock.advance(5)
    assert timer.advance_clock(0) is True, "a bucket was processed even though nothing ran"
    assert log == [] and timer.advance_clock(0) is False


def test_delay_queue_holds_buckets_not_tasks():
    clock, timer = manual_timer(0)
    for i in range(20_000):
        timer.add(Recorder(1 + (i * 7919) % 100_000, clock, []))
    levels = len(timer.wheel.levels())
    queued = len(timer._queue)
    assert timer.size() == 20_000
    assert queued <= 20 * levels, f"W2: {queued} queued buckets for {levels} levels"


def test_tasks_may_add_and_cancel_on_their_own_timer():
    clock, timer = manual_timer(0)
    log: list = []
    victim = Recorder(50, clock, log, label="victim")

    class Chain(TimerTask):
        def run(self) -> None:
            log.append(("chain", clock.monotonic_ms()))
            victim.cancel()
            timer.add(Recorder(5, clock, log, label="child"))

    timer.add(victim)
    timer.add(Chain(10))
    clock.advance(10)
    drive(timer)
    clock.advance(100)
    drive(timer)
    assert log == [("chain", 10), ("child", 110)]


def test_a_failing_task_is_logged_and_the_others_still_run(caplog):
    clock, timer = manual_timer(0)
    log: list = []

    class Boom(TimerTask):
        def run(self) -> None:
            raise RuntimeError("boom")

    timer.add(Boom(1))
    timer.add(Recorder(1, clock, log))
    clock.advance(1)
    with caplog.at_level(logging.ERROR, logger="logstore.timer"):
        drive(timer)
    assert log == [(None, 1)]
    assert any("failed" in record.message and record.exc_info for record in caplog.records)


def test_executor_thread_runs_expired_tasks_off_the_calling_thread():
    clock = ManualClock(0)
    timer = SystemTimer("exec", clock=clock)
    log: list = []
    done = threading.Event()

    class Last(Recorder):
        def run(self) -> None:
            super().run()
            done.set()

    first, last = Recorder(0, clock, log, "first"), Last(3, clock, log, "last")
    timer.add(first)
    timer.add(last)
    clock.advance(3)
    timer.advance_clock(0)
    assert done.wait(10)
    assert first.thread_name == last.thread_name == "executor-exec"
    timer.shutdown()


def test_shutdown_abandons_waiting_tasks_and_refuses_new_ones():
    clock, timer = manual_timer(0)
    log: list = []
    timer.add(Recorder(10, clock, log))
    timer.shutdown()
    timer.shutdown()  # idempotent
    clock.advance(100)
    assert timer.advance_clock(0) is False
    assert log == []
    with pytest.raises(ShutdownError, match="shut down"):
        timer.add(Recorder(1, clock, log))


def test_shutdown_lets_the_executor_finish_what_it_was_given():
    clock = ManualClock(0)
    timer = SystemTimer("drain", clock=clock)
    log: list = []
    for i in range(100):
        timer.add(Recorder(0, clock, log, label=i))
    timer.shutdown()
    assert [label for label, _ in log] == list(range(100))


def test_blocking_poll_waits_for_the_head_on_the_real_clock():
    timer = SystemTimer("real", clock=SYSTEM_CLOCK, executor_thread=False)
    log: list = []
    timer.add(Recorder(30, SYSTEM_CLOCK, log))
    start_ms = SYSTEM_CLOCK.monotonic_ms()
    while not log:
        assert timer.advance_clock(5_000) is True
    assert log[0][1] - start_ms >= 30
    assert SYSTEM_CLOCK.monotonic_ms() - start_ms < 5_000, "woke for the due bucket, not the timeout"
    timer.shutdown()


def test_wake_cuts_a_blocking_poll_short():
    queue = DelayQueue(SYSTEM_CLOCK)
    threading.Timer(0.05, queue.wake).start()
    start_ms = SYSTEM_CLOCK.monotonic_ms()
    assert queue.poll(10_000) is None
    assert SYSTEM_CLOCK.monotonic_ms() - start_ms < 10_000


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="tick_ms"):
        SystemTimer(tick_ms=0, executor_thread=False)
    with pytest.raises(ValueError, match="wheel_size"):
        SystemTimer(wheel_size=1, executor_thread=False)
    clock, timer = manual_timer(0)
    with pytest.raises(ValueError, match="timeout_ms"):
        timer.advance_clock(-1)


def test_cancel_after_expiry_but_before_the_run_wins():
    clock, timer = manual_timer(1000)
    log: list = []
    task = Recorder(0, clock, log)
    timer.add(task)  # expired at once: waits in the backlog for the driver
    assert timer.backlog() == 1
    task.cancel()
    assert timer.backlog() == 0
    drive(timer)
    assert log == []


def test_re_adding_an_expired_task_runs_it_once_at_the_new_deadline():
    clock, timer = manual_timer(1000)
    log: list = []
    task = Recorder(0, clock, log)
    timer.add(task)
    task.delay_ms = 30
    timer.add(task)  # the stale expiry must not run it
    drive(timer)
    assert log == []
    clock.advance(30)
    drive(timer)
    assert log == [(None, 1030)]
