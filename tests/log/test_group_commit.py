"""The group-commit flusher's rounds (``log/waits.py``): durable appends (``acks="all"``) park on
their log's next flush round and are woken together once its fsync ended. Pins the contract the
rounds must keep: an append returns only after an fsync that covers it succeeded (the recovery
point is past it), an fsync error reaches every waiter of the round and fails the log, a close or a
timeout answers a parked waiter, and operations parked in the produce purgatory (the server's
responses) are still completed after each flush."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore import LogManager, Record
from logstore.errors import DurabilityTimeoutError, LogFailedError, StoreClosedError
from logstore.testing import OperationHookFileSystem
from logstore.timer.purgatory import DelayedOperation


def rec(i: int) -> Record:
    return Record(b"k%d" % i, b"v%d" % i)


class SlowFsyncFS(OperationHookFileSystem):
    """fsyncs take ``delay_s``; with ``fail`` they raise EIO."""

    def __init__(self) -> None:
        self.delay_s = 0.0
        self.fail = False
        self.fsyncs = 0

    def before(self, operation, path):
        if operation == "fsync":
            self.fsyncs += 1
            time.sleep(self.delay_s)
            if self.fail:
                raise OSError(5, "injected EIO in fsync")


def run_threads(count: int, target) -> tuple[list, list[threading.Thread]]:
    """Start ``count`` threads running ``target(n)``; returns (outcomes, threads), each outcome
    what the call returned or raised."""
    outcomes: list = [None] * count

    def run(n: int) -> None:
        try:
            outcomes[n] = target(n)
        except BaseException as exc:  # noqa: BLE001 - the outcome is checked by the test
            outcomes[n] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    return outcomes, threads


def join_all(threads: list[threading.Thread], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "a durable append was left waiting"


def test_an_fsync_error_reaches_every_waiter_of_the_round_and_fails_the_log(tmp_path):
    fs = SlowFsyncFS()
    store = LogManager([str(tmp_path / "d")], fs=fs)
    try:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        fs.delay_s, fs.fail = 0.05, True
        outcomes, threads = run_threads(8, lambda n: log.append([rec(n)], acks="all", timeout_ms=10_000))
        join_all(threads)
        assert all(isinstance(outcome, LogFailedError) for outcome in outcomes), outcomes
        assert log.failed and log.recovery_point == 0
        with pytest.raises(LogFailedError):
            log.append([rec(99)], acks="all")
    finally:
        fs.delay_s, fs.fail = 0.0, False
        store.close()


def test_waiters_parked_when_the_store_closes_are_answered(tmp_path):
    fs = SlowFsyncFS()
    store = LogManager([str(tmp_path / "d")], fs=fs)
    store.create_topic("t", 1)
    log = store.get_log("t", 0)
    fs.delay_s = 0.1
    outcomes, threads = run_threads(8, lambda n: log.append([rec(n)], acks="all", timeout_ms=60_000))
    time.sleep(0.05)  # most of them are parked on a round by now
    store.close()
    join_all(threads)
    for outcome in outcomes:
        # Either durable before or by the close's flush, or refused because the log had closed.
        assert isinstance(outcome, StoreClosedError) or outcome.last_offset < log.recovery_point, outcome
    assert log.recovery_point == log.log_end_offset


def test_a_timed_out_waiter_leaves_the_rounds_working(tmp_path):
    fs = SlowFsyncFS()
    with LogManager([str(tmp_path / "d")], fs=fs) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        fs.delay_s = 0.2
        began = time.monotonic()
        with pytest.raises(DurabilityTimeoutError):
            log.append([rec(0)], acks="all", timeout_ms=10)
        assert time.monotonic() - began < 0.19, "the timeout did not wait for the fsync"
        with pytest.raises(DurabilityTimeoutError):
            log.append([rec(1)], acks="all", timeout_ms=0)
        fs.delay_s = 0.0
        # The rounds those two left (woken after they gave up) do not disturb the next ones.
        outcomes, threads = run_threads(6, lambda n: log.append([rec(10 + n)], acks="all"))
        join_all(threads)
        assert all(info.last_offset < log.recovery_point for info in outcomes), outcomes
        assert log.recovery_point == log.log_end_offset == 8


def test_operations_in_the_produce_purgatory_complete_after_a_flush(tmp_path):
    """The server parks its acks=-1 responses in the produce purgatory and asks the flusher for the
    fsync; the flusher completes them after each flush, also when the purgatory was made after the
    flusher (durable appends alone do not make it)."""

    class FsyncedOp(DelayedOperation):
        def __init__(self, log, required_offset):
            super().__init__(10_000)
            self.log, self.required_offset, self.done = log, required_offset, threading.Event()

        def try_complete(self):
            return self.log.recovery_point >= self.required_offset and self.force_complete()

        def on_complete(self):
            self.done.set()

    with LogManager([str(tmp_path / "d")]) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        log.append([rec(0)], acks="all")
        flusher = store.waits.flusher
        assert flusher.produce is None, "durable appends alone park nothing in the purgatory"
        produce = store.waits.produce
        assert flusher.produce is produce
        for i in range(1, 20):
            info = log.append([rec(i)])
            op = FsyncedOp(log, info.last_offset + 1)
            flusher.request(log)
            produce.try_complete_else_watch(op, [log.key])
            assert op.done.wait(5), f"operation {i} was not completed after the flush"
            assert log.recovery_point > info.last_offset


def test_rounds_cover_appends_of_several_logs(tmp_path):
    with LogManager([str(tmp_path / "d")]) as store:
        store.create_topic("t", 3)
        logs = [store.get_log("t", p) for p in range(3)]

        def writer(n: int) -> list:
            log = logs[n % 3]
            infos = [log.append([rec(n * 100 + i)], acks="all") for i in range(15)]
            assert all(info.last_offset < log.recovery_point for info in infos)
            return infos

        outcomes, threads = run_threads(9, writer)
        join_all(threads)
        assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
        assert [log.log_end_offset for log in logs] == [45, 45, 45]
        assert all(log.recovery_point == 45 for log in logs)
        flusher = store.waits.flusher
        assert flusher.flushes < 9 * 15 and flusher.rounds <= flusher.flushes


@settings(max_examples=12, deadline=None)
@given(plan=st.lists(st.lists(st.tuples(st.sampled_from([1, "all"]), st.integers(1, 3), st.booleans()),
                              min_size=1, max_size=12), min_size=1, max_size=6))
def test_durable_appends_against_a_model(tmp_path_factory, plan):
    """Threads run random mixes of acks=1 and acks="all" appends of 1-3 records and explicit
    flushes. Model: the log holds every record of every thread in each thread's order; each
    acks="all" append returned with the recovery point past its last offset (its fsync succeeded
    before it returned); the recovery point never passes the log end."""
    path = tmp_path_factory.mktemp("model")
    with LogManager([str(path)]) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)

        def writer(n: int) -> list[tuple[list[bytes], bool]]:
            done = []
            for step, (acks, size, flush) in enumerate(plan[n]):
                values = [b"%d-%d-%d" % (n, step, i) for i in range(size)]
                info = log.append([Record(b"k", value) for value in values], acks=acks)
                recovery_point = log.recovery_point
                assert recovery_point <= log.log_end_offset
                if acks == "all":
                    assert recovery_point > info.last_offset, (info, recovery_point)
                if flush:
                    log.flush()
                done.append((values, acks == "all"))
            return done

        outcomes, threads = run_threads(len(plan), writer)
        join_all(threads)
        assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
        stored = [record.value for record in log.iter_records(0)]
        for n, done in enumerate(outcomes):
            mine = [value for value in stored if value.startswith(b"%d-" % n)]
            assert mine == [value for values, _ in done for value in values]
        assert len(stored) == sum(size for steps in plan for _, size, _ in steps)
