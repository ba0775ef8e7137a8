"""One-record appends handed to the append that holds the log's lock (``log/append_combiner.py``).

Pins: every append is written exactly once, at the offset it returns, in each thread's order; a
durable one returns only once an fsync covers it (or raises as ``wait_durable`` does); an error
of a write another thread made is raised by the append it belonged to; nothing waits forever, also
when the lock is held by something that does not combine; and appends that reach ``flush.messages``
never deadlock with a concurrent ``flush()`` (they did: the append flushed holding the log's lock,
``flush()`` takes the flush lock first)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore import LogManager, Record
from logstore.errors import DurabilityTimeoutError, LogFailedError, StorageError
from logstore.log.append_combiner import STRAND_CHECK_S
from logstore.testing import OperationHookFileSystem

from test_group_commit import join_all, run_threads


class SlowWriteFS(OperationHookFileSystem):
    """Each data write sleeps ``write_s`` (the GIL released, as in a real pwrite: the other appenders
    run and find the lock held); fsyncs sleep ``fsync_s``; with ``fail_after`` writes, later ones
    raise EIO."""

    def __init__(self) -> None:
        self.write_s = 0.0
        self.fsync_s = 0.0
        self.writes = 0
        self.fsyncs = 0
        self.fail_after: int | None = None

    def before(self, operation, path):
        if operation == "pwrite":
            self.writes += 1
            time.sleep(self.write_s)
            if self.fail_after is not None and self.writes > self.fail_after:
                raise OSError(5, "injected EIO in pwrite")
        elif operation == "fsync":
            self.fsyncs += 1
            time.sleep(self.fsync_s)


def value(thread: int, n: int) -> bytes:
    return b"%d-%d" % (thread, n)


def check_log(log, outcomes: list, per_thread: int) -> None:
    """Each thread's returned offsets hold its records, in its order; nothing else is in the log."""
    stored = {record.offset: record.value for record in log.iter_records(0)}
    for thread, infos in enumerate(outcomes):
        assert not isinstance(infos, BaseException), infos
        assert [stored[info.first_offset] for info in infos] == [value(thread, n) for n in range(per_thread)]
        assert [info.first_offset for info in infos] == sorted(info.first_offset for info in infos)
    assert len(stored) == len(outcomes) * per_thread == log.log_end_offset


@pytest.mark.parametrize("acks", [1, "all"])
def test_appends_queued_behind_a_slow_write_are_each_written_once(tmp_path, acks):
    fs = SlowWriteFS()
    with LogManager([str(tmp_path)], fs=fs) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        fs.write_s = 0.002

        def writer(thread: int) -> list:
            infos = []
            for n in range(15):
                info = log.append([Record(b"k", value(thread, n))], acks=acks)
                if acks == "all":
                    assert log.recovery_point > info.last_offset, (info, log.recovery_point)
                infos.append(info)
            return infos

        outcomes, threads = run_threads(8, writer)
        join_all(threads)
        fs.write_s = 0.0
        check_log(log, outcomes, 15)
        assert log._combiner.combined > 0, "no append was ever handed over: nothing here was tested"
        if acks == "all":
            assert fs.fsyncs < 8 * 15


def test_a_write_error_is_raised_by_the_append_it_belonged_to(tmp_path):
    fs = SlowWriteFS()
    with LogManager([str(tmp_path)], fs=fs) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        fs.write_s, fs.fail_after = 0.002, fs.writes + 20

        def writer(thread: int) -> list:
            outcomes = []
            for n in range(10):
                try:
                    outcomes.append(log.append([Record(b"k", value(thread, n))]))
                except (LogFailedError, StorageError) as exc:
                    outcomes.append(exc)
            return outcomes

        outcomes, threads = run_threads(6, writer)
        join_all(threads)
        fs.write_s, fs.fail_after = 0.0, None
        appended = [info for per_thread in outcomes for info in per_thread if not isinstance(info, BaseException)]
        failed = [exc for per_thread in outcomes for exc in per_thread if isinstance(exc, BaseException)]
        assert len(appended) + len(failed) == 60 and failed, outcomes
        stored = {record.offset for record in log.iter_records(0)}
        assert {info.first_offset for info in appended} <= stored  # an append that returned is there
        assert log._combiner.combined > 0


def test_a_durable_append_handed_over_times_out_as_wait_durable_does(tmp_path):
    fs = SlowWriteFS()
    with LogManager([str(tmp_path)], fs=fs) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        fs.write_s, fs.fsync_s = 0.005, 0.5
        began = time.monotonic()
        outcomes, threads = run_threads(6, lambda n: log.append([Record(b"k", value(n, 0))], acks="all",
                                                             timeout_ms=100))
        join_all(threads)
        assert time.monotonic() - began < 2.0
        fs.write_s, fs.fsync_s = 0.0, 0.0
        assert all(isinstance(outcome, DurabilityTimeoutError) for outcome in outcomes), outcomes
        # Appended all the same (as wait_durable's error says): each at the offset its error names.
        stored = {record.offset: record.value for record in log.iter_records(0)}
        assert sorted(stored.values()) == sorted(value(n, 0) for n in range(6))
        assert {outcome.required_offset - 1 for outcome in outcomes} == set(stored)


def test_an_append_queued_behind_a_holder_that_does_not_combine_is_written(tmp_path):
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        log._lock.acquire()  # what a roll or a truncation does: it holds the lock and combines nothing
        try:
            outcomes, threads = run_threads(3, lambda n: log.append([Record(b"k", value(n, 0))]))
            deadline = time.monotonic() + 5
            while len(log._combiner.pending) < 3 and time.monotonic() < deadline:
                time.sleep(0.001)
            assert len(log._combiner.pending) == 3, "the appends did not queue"
        finally:
            log._lock.release()
        released = time.monotonic()
        join_all(threads, timeout_s=5)
        assert time.monotonic() - released < 1.0 + 10 * STRAND_CHECK_S
        assert sorted(record.value for record in log.iter_records(0)) == sorted(value(n, 0) for n in range(3))
        assert sorted(info.first_offset for info in outcomes) == [0, 1, 2]


def test_appends_reaching_flush_messages_and_a_concurrent_flush_do_not_deadlock(tmp_path):
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", 1, {"flush.messages": 1})
        log = store.get_log("t", 0)
        stop = time.monotonic() + 0.5

        def appender(n: int) -> int:
            count = 0
            while time.monotonic() < stop:
                records = [Record(b"k", value(n, count))] * (1 + n % 2)  # one record, and two
                info = log.append(records)
                assert log.recovery_point > info.last_offset  # flush.messages=1: fsynced on return
                count += 1
            return count

        def flusher(_n: int) -> int:
            count = 0
            while time.monotonic() < stop:
                log.flush()
                count += 1
            return count

        outcomes, threads = run_threads(3, lambda n: flusher(n) if n == 2 else appender(n))
        join_all(threads, timeout_s=10)
        assert all(isinstance(outcome, int) and outcome > 0 for outcome in outcomes), outcomes


@settings(max_examples=10, deadline=None)
@given(plan=st.lists(st.lists(st.tuples(st.sampled_from([1, "all"]), st.integers(1, 2)), min_size=1, max_size=10),
                     min_size=2, max_size=6),
       reopen_at=st.integers(0, 9))
def test_combined_appends_against_a_model_with_a_reopen(tmp_path_factory, plan, reopen_at):
    """Threads append random mixes of one- and two-record appends, acks=1 and "all", behind slow
    writes (so they are handed over); the store is closed and reopened once between two waves. Model:
    every append is in the log, at its returned offsets, in each thread's order; every durable one
    returned fsynced; after the reopen the same records are there, and appends go on after them."""
    path = str(tmp_path_factory.mktemp("combined"))
    fs = SlowWriteFS()
    fs.write_s = 0.001
    expected: dict[int, bytes] = {}

    def wave(store, wave_number: int) -> None:
        log = store.get_log("t", 0)

        def writer(n: int) -> list:
            done = []
            for step, (acks, size) in enumerate(plan[n]):
                values = [b"%d-%d-%d-%d" % (wave_number, n, step, i) for i in range(size)]
                info = log.append([Record(b"k", v) for v in values], acks=acks)
                if acks == "all":
                    assert log.recovery_point > info.last_offset
                done.append((info, values))
            return done

        outcomes, threads = run_threads(len(plan), writer)
        join_all(threads)
        assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
        for done in outcomes:
            offsets = [info.first_offset for info, _ in done]
            assert offsets == sorted(offsets)
            for info, values in done:
                assert info.last_offset - info.first_offset + 1 == len(values)
                expected.update(zip(range(info.first_offset, info.last_offset + 1), values))
        assert {r.offset: r.value for r in log.iter_records(0)} == expected

    with LogManager([path], fs=fs) as store:
        store.create_topic("t", 1)
        wave(store, 0)
    with LogManager([path], fs=fs) as store:  # reopened: the same records, then more after them
        assert {r.offset: r.value for r in store.get_log("t", 0).iter_records(0)} == expected
        if reopen_at % 2:
            wave(store, 1)
