"""The Scheduler (docs/design.md §8.1): manual-clock runs are deterministic; one threaded test per behaviour
that needs the driver thread (real clock, generous waits, never a timing assertion)."""

from __future__ import annotations

import logging
import threading

import pytest

from logstore.clock import SYSTEM_CLOCK, ManualClock
from logstore.errors import ShutdownError
from logstore.timer.scheduler import Scheduler


@pytest.fixture
def manual():
    clock = ManualClock(0)
    scheduler = Scheduler(clock, threaded=False)
    scheduler.startup()
    yield clock, scheduler
    scheduler.shutdown()


def recorder(clock, log, name):
    return lambda: log.append((name, clock.monotonic_ms()))


def test_one_shot_runs_once_at_its_delay(manual):
    clock, scheduler = manual
    log: list = []
    handle = scheduler.schedule("once", recorder(clock, log, "once"), delay_ms=250)
    assert scheduler.advance(249) == 0 and log == []
    assert scheduler.advance(1) == 1 and log == [("once", 250)]
    assert scheduler.advance(10_000) == 0
    assert handle.runs == 1 and handle.cancelled and scheduler.pending() == 0


def test_periodic_jobs_fire_at_the_right_ticks(manual):
    clock, scheduler = manual
    log: list = []
    scheduler.schedule("flush", recorder(clock, log, "flush"), delay_ms=5, period_ms=10)
    scheduler.schedule("retention", recorder(clock, log, "retention"), delay_ms=0, period_ms=30)
    assert scheduler.advance(100) == 10 + 4
    assert [at for name, at in log if name == "flush"] == [5, 15, 25, 35, 45, 55, 65, 75, 85, 95]
    assert [at for name, at in log if name == "retention"] == [0, 30, 60, 90]
    assert [at for _, at in log] == sorted(at for _, at in log)


def test_a_periodic_job_does_not_drift(manual):
    clock, scheduler = manual
    log: list = []
    scheduler.schedule("job", recorder(clock, log, "job"), delay_ms=3, period_ms=7)
    for _ in range(50):
        scheduler.advance(13)  # steps that never line up with the period
    assert [at for _, at in log] == list(range(3, 650 + 1, 7))


def test_missed_runs_are_skipped_not_replayed(manual):
    clock, scheduler = manual
    log: list = []
    handle = scheduler.schedule("job", recorder(clock, log, "job"), delay_ms=10, period_ms=10)
    clock.advance(95)  # the process "slept" through nine boundaries
    assert scheduler.run_due() == 1
    assert log == [("job", 95)] and handle.next_run_ms == 100
    assert scheduler.advance(5) == 1 and log[-1] == ("job", 100)


def test_cancel_stops_a_job(manual):
    clock, scheduler = manual
    log: list = []
    handle = scheduler.schedule("job", recorder(clock, log, "job"), delay_ms=10, period_ms=10)
    scheduler.advance(25)
    handle.cancel()
    handle.cancel()
    assert handle.cancelled and scheduler.pending() == 0
    scheduler.advance(100)
    assert log == [("job", 10), ("job", 20)]


def test_a_job_can_cancel_itself_and_schedule_others(manual):
    clock, scheduler = manual
    log: list = []
    handles = {}

    def job():
        log.append(("job", clock.monotonic_ms()))
        if len(log) == 3:
            handles["job"].cancel()
            scheduler.schedule("follow-up", recorder(clock, log, "follow-up"), delay_ms=0)

    handles["job"] = scheduler.schedule("job", job, delay_ms=0, period_ms=5)
    scheduler.advance(50)
    assert log == [("job", 0), ("job", 5), ("job", 10), ("follow-up", 10)]


def test_an_exception_is_logged_and_the_periodic_job_keeps_running(manual, caplog):
    clock, scheduler = manual
    calls = []

    def flaky():
        calls.append(clock.monotonic_ms())
        if len(calls) % 2:
            raise OSError("disk hiccup")

    handle = scheduler.schedule("flaky", flaky, delay_ms=0, period_ms=100)
    with caplog.at_level(logging.ERROR, logger="logstore.timer.scheduler"):
        scheduler.advance(500)
    assert calls == [0, 100, 200, 300, 400, 500]
    assert handle.failures == 3 and handle.runs == 6
    failures = [r for r in caplog.records if "flaky" in r.getMessage()]
    assert len(failures) == 3 and all(r.exc_info for r in failures)


def test_schedule_refuses_bad_arguments_and_a_stopped_scheduler():
    clock = ManualClock(0)
    scheduler = Scheduler(clock, threaded=False)
    with pytest.raises(ShutdownError, match="not started"):
        scheduler.schedule("job", lambda: None)
    scheduler.startup()
    with pytest.raises(ShutdownError, match="already started"):
        scheduler.startup()
    with pytest.raises(ValueError, match="-1"):
        scheduler.schedule("job", lambda: None, delay_ms=-1)
    with pytest.raises(ValueError, match="period_ms"):
        scheduler.schedule("job", lambda: None, period_ms=0)
    with pytest.raises(TypeError, match="callable"):
        scheduler.schedule("job", "not a function")
    with pytest.raises(TypeError, match="name"):
        scheduler.schedule("", lambda: None)
    with pytest.raises(ValueError, match="delta_ms"):
        scheduler.advance(-5)
    scheduler.shutdown()
    with pytest.raises(ShutdownError):
        scheduler.schedule("job", lambda: None)


def test_shutdown_drops_pending_jobs_and_the_scheduler_restarts(manual):
    clock, scheduler = manual
    log: list = []
    first = scheduler.schedule("old", recorder(clock, log, "old"), delay_ms=10, period_ms=10)
    scheduler.shutdown()
    scheduler.shutdown()
    assert first.cancelled and not scheduler.is_started
    scheduler.startup()
    scheduler.schedule("new", recorder(clock, log, "new"), delay_ms=10)
    scheduler.advance(100)
    assert log == [("new", 10)]


def test_manual_driving_is_refused_for_a_threaded_scheduler():
    scheduler = Scheduler(SYSTEM_CLOCK)
    scheduler.startup()
    try:
        with pytest.raises(ValueError, match="driver thread"):
            scheduler.run_due()
    finally:
        scheduler.shutdown()


def test_tasks_lists_live_jobs_soonest_first(manual):
    clock, scheduler = manual
    b = scheduler.schedule("b", lambda: None, delay_ms=50, period_ms=100)
    a = scheduler.schedule("a", lambda: None, delay_ms=20)
    assert scheduler.tasks() == [a, b]
    scheduler.advance(30)
    assert scheduler.tasks() == [b]


# --- the driver thread (real clock) ----------------------------------------------------------------


def test_driver_thread_runs_jobs_and_periodic_ones_repeat():
    runs = []
    enough = threading.Event()

    def job():
        runs.append(threading.current_thread().name)
        if len(runs) >= 3:
            enough.set()

    with Scheduler(SYSTEM_CLOCK, name="bg") as scheduler:
        scheduler.schedule("job", job, delay_ms=0, period_ms=10)
        assert enough.wait(10)
    assert set(runs) == {"bg"}, "jobs run on the driver thread, never on the caller"


def test_shutdown_waits_for_the_running_job_and_drops_the_rest():
    started, release = threading.Event(), threading.Event()
    finished, others = [], []

    def slow():
        started.set()
        release.wait(10)
        finished.append(True)

    scheduler = Scheduler(SYSTEM_CLOCK, name="slow")
    scheduler.startup()
    scheduler.schedule("slow", slow, delay_ms=0)
    scheduler.schedule("other", lambda: others.append(True), delay_ms=0)
    scheduler.schedule("later", lambda: others.append(True), delay_ms=50)
    assert started.wait(10)
    stopper = threading.Thread(target=scheduler.shutdown)
    stopper.start()
    stopper.join(0.2)
    assert stopper.is_alive(), "shutdown waits while a job runs"
    release.set()
    stopper.join(10)
    assert not stopper.is_alive()
    assert finished == [True] and others == []
