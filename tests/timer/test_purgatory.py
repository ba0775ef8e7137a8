"""DelayedOperation and DelayedOperationPurgatory (docs/design.md §5.3), on a manual clock with the reaper
disabled unless the test is about the reaper."""

from __future__ import annotations

import threading

import pytest

from logstore.clock import SYSTEM_CLOCK, ManualClock
from logstore.errors import ShutdownError
from logstore.timer.purgatory import DelayedOperation, DelayedOperationPurgatory
from logstore.timer.system_timer import SystemTimer


class Op(DelayedOperation):
    """Completes when ``state[name]`` is true; records its callbacks."""

    def __init__(self, delay_ms: int, state: dict | None = None, name: str = "ready", lock=None) -> None:
        super().__init__(delay_ms, lock)
        self.state = {} if state is None else state
        self.name = name
        self.events: list[str] = []
        self.checks = 0

    def try_complete(self) -> bool:
        self.checks += 1
        return self.force_complete() if self.state.get(self.name) else False

    def on_complete(self) -> None:
        self.events.append("complete")

    def on_expiration(self) -> None:
        self.events.append("expire")


@pytest.fixture
def manual():
    clock = ManualClock(0)
    purgatory = DelayedOperationPurgatory("test", SystemTimer("test", clock=clock, executor_thread=False),
                                          reaper_enabled=False)
    yield clock, purgatory
    purgatory.shutdown()


# --- DelayedOperation -------------------------------------------------------------------------


def test_force_complete_wins_once():
    op = Op(100)
    assert op.force_complete() is True
    assert op.force_complete() is False
    assert op.is_completed() and op.events == ["complete"]
    assert op.safe_try_complete() is False and op.checks == 0, "a completed op is not re-checked"


def test_expiry_runs_on_complete_then_on_expiration():
    op = Op(100)
    op.run()
    op.run()
    assert op.events == ["complete", "expire"]


def test_a_shared_lock_serialises_operations_of_a_group():
    group_lock = threading.RLock()
    a, b = Op(100, lock=group_lock), Op(100, lock=group_lock)
    assert a.lock is b.lock is group_lock
    holder_done = threading.Event()
    with group_lock:
        checker = threading.Thread(target=lambda: (b.safe_try_complete(), holder_done.set()))
        checker.start()
        assert not holder_done.wait(0.1), "safe_try_complete waits for the group's lock"
    checker.join(10)
    assert holder_done.is_set()


# --- the purgatory ------------------------------------------------------------------------------


def test_completes_at_once_when_the_condition_already_holds(manual):
    _, purgatory = manual
    op = Op(1000, {"ready": True})
    assert purgatory.try_complete_else_watch(op, ["k"]) is True
    assert op.events == ["complete"]
    assert purgatory.watched() == 0 and purgatory.delayed() == 0


def test_request_satisfaction(manual):
    _, purgatory = manual
    state: dict = {}
    a, b = Op(100_000, state, "a"), Op(100_000, state, "b")
    assert purgatory.try_complete_else_watch(a, ["k1"]) is False
    assert purgatory.try_complete_else_watch(b, ["k1"]) is False
    assert purgatory.delayed() == 2 and purgatory.watched() == 2
    assert purgatory.check_and_complete("k1") == 0
    state["a"] = True
    assert purgatory.check_and_complete("k1") == 1
    assert a.events == ["complete"] and b.events == []
    assert purgatory.delayed() == 1, "completion takes the op out of the timer at once"
    assert purgatory.watched() == 1
    state["b"] = True
    assert purgatory.check_and_complete("k1") == 1
    assert purgatory.watched() == 0 and purgatory.delayed() == 0
    assert purgatory.check_and_complete("missing") == 0


def test_request_expiry(manual):
    clock, purgatory = manual
    short, long_ = Op(100), Op(200)
    purgatory.try_complete_else_watch(short, ["k1"])
    purgatory.try_complete_else_watch(long_, ["k1", "k2"])
    clock.advance(99)
    purgatory.advance_clock(0)
    assert short.events == [] and purgatory.delayed() == 2
    clock.advance(1)
    purgatory.advance_clock(0)
    assert short.events == ["complete", "expire"] and long_.events == []
    clock.advance(100)
    purgatory.advance_clock(0)
    assert long_.events == ["complete", "expire"] and purgatory.delayed() == 0


def test_an_expired_op_is_not_completed_again_by_its_key(manual):
    clock, purgatory = manual
    state: dict = {}
    op = Op(10, state)
    purgatory.try_complete_else_watch(op, ["k"])
    clock.advance(10)
    purgatory.advance_clock(0)
    state["ready"] = True
    assert purgatory.check_and_complete("k") == 0
    assert op.events == ["complete", "expire"]
    assert purgatory.watched() == 0, "the completed op was unlinked by the check"


def test_purge_runs_once_the_estimate_passes_the_interval():
    clock = ManualClock(0)
    purgatory = DelayedOperationPurgatory("purge", SystemTimer("purge", clock=clock, executor_thread=False),
                                          purge_interval=3, reaper_enabled=False)
    ops = [Op(100_000) for _ in range(6)]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(op, [f"k{i % 2}", "all"])
    assert purgatory.watched() == 12
    for op in ops[:3]:
        op.force_complete()
    assert purgatory.delayed() == 3
    assert purgatory.purge_if_needed() == 0, "3 completed is not more than the interval of 3"
    ops[3].force_complete()
    assert purgatory.purge_if_needed() == 8  # four ops on two keys each
    assert purgatory.watched() == 4
    assert purgatory.purge_if_needed() == 0, "the estimate restarted from the delayed count"
    purgatory.shutdown()


def test_cancel_for_key_returns_the_ops_without_completing_them(manual):
    clock, purgatory = manual
    state: dict = {}
    a, b = Op(100, state, "a"), Op(100, state, "b")
    purgatory.try_complete_else_watch(a, ["k1", "k2"])
    purgatory.try_complete_else_watch(b, ["k1"])
    cancelled = purgatory.cancel_for_key("k1")
    assert set(map(id, cancelled)) == {id(a), id(b)}
    assert purgatory.cancel_for_key("k1") == []
    assert purgatory.delayed() == 0 and purgatory.watched() == 1
    clock.advance(1000)
    purgatory.advance_clock(0)
    assert a.events == [] and b.events == [], "cancelled ops neither complete nor expire"
    state["a"] = True
    assert purgatory.check_and_complete("k2") == 1, "a is still watched under its other key"
    assert a.events == ["complete"]


def test_a_key_list_is_removed_only_when_empty_and_still_current(manual):
    _, purgatory = manual
    state: dict = {}
    op = Op(1000, state)
    purgatory.try_complete_else_watch(op, ["k"])
    shard = purgatory._shard("k")
    old = shard.watchers["k"]
    state["ready"] = True
    purgatory.check_and_complete("k")
    assert "k" not in shard.watchers
    newer = Op(1000)
    purgatory.try_complete_else_watch(newer, ["k"])
    assert shard.watchers["k"] is not old
    purgatory._unwatch(shard, old, [])  # a late call for the old list
    assert shard.watchers["k"].ops == {id(newer): newer}


def test_completion_during_watching_is_noticed_by_the_second_check(manual):
    _, purgatory = manual
    state: dict = {}

    class CompletesOnSecondLook(Op):
        looks = 0

        def try_complete(self) -> bool:
            self.looks += 1
            if self.looks == 2:  # the state changed while the op was being put on its watch lists
                state["ready"] = True
            return super().try_complete()

    op = CompletesOnSecondLook(1000, state)
    assert purgatory.try_complete_else_watch(op, ["k1", "k2"]) is True
    assert op.events == ["complete"] and purgatory.delayed() == 0
    assert purgatory.watched() == 2, "it was watched before the second check; a check or purge unlinks it"
    assert purgatory.check_and_complete("k1") == 0 and purgatory.watched() == 1


def test_bad_requests_are_refused(manual):
    _, purgatory = manual
    with pytest.raises(ValueError, match="at least one key"):
        purgatory.try_complete_else_watch(Op(10), [])
    with pytest.raises(TypeError, match="DelayedOperation"):
        purgatory.try_complete_else_watch(object(), ["k"])
    with pytest.raises(ValueError, match="purge_interval"):
        DelayedOperationPurgatory("x", SystemTimer(executor_thread=False), purge_interval=-1, reaper_enabled=False)


def test_shutdown_leaves_pending_ops_alone_and_refuses_new_ones(manual):
    clock, purgatory = manual
    op = Op(10)
    purgatory.try_complete_else_watch(op, ["k"])
    purgatory.shutdown()
    clock.advance(100)
    purgatory.advance_clock(0)
    assert op.events == []
    with pytest.raises(ShutdownError):
        purgatory.try_complete_else_watch(Op(10), ["k"])


# --- the reaper, real clock -----------------------------------------------------------------------


def test_reaper_expires_operations_on_its_own():
    purgatory = DelayedOperationPurgatory("reaped", SystemTimer("reaped", clock=SYSTEM_CLOCK))
    expired = threading.Event()

    class Watched(Op):
        def on_expiration(self) -> None:
            super().on_expiration()
            expired.set()

    op = Watched(20)
    start_ms = SYSTEM_CLOCK.monotonic_ms()
    purgatory.try_complete_else_watch(op, ["k"])
    assert expired.wait(10)
    assert SYSTEM_CLOCK.monotonic_ms() - start_ms >= 20
    assert op.events == ["complete", "expire"]
    purgatory.shutdown()
    assert not purgatory._reaper.is_alive()


def test_reaper_purges_completed_operations():
    purgatory = DelayedOperationPurgatory("purging", SystemTimer("purging", clock=SYSTEM_CLOCK), purge_interval=10)
    ops = [Op(60_000) for _ in range(50)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["k"])
    for op in ops:
        op.force_complete()
    deadline_ms = SYSTEM_CLOCK.monotonic_ms() + 10_000
    while purgatory.watched() and SYSTEM_CLOCK.monotonic_ms() < deadline_ms:
        SYSTEM_CLOCK.sleep_ms(20)
    assert purgatory.watched() == 0
    purgatory.shutdown()
