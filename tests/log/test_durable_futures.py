"""Durable appends that return a future (``log/durable_futures.py``): ``append_future`` and
``append_async`` on a log and a store, and ``append_many(acks="all")``. Pins their contract: the
future completes only once an fsync that covers the records succeeded (the recovery point is past
them), a failed fsync fails every pending future and the log, a timeout fails the future while the
records stay appended, a clean close completes the pending futures, the outstanding futures are
bounded, and an asyncio caller never blocks its event loop."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import wait

import pytest

from logstore import LogManager, Record
from logstore.errors import (BufferExhaustedError, DurabilityTimeoutError, InvalidRecordError, LogFailedError,
                             StoreClosedError)
from logstore.testing import OperationHookFileSystem

WAIT_S = 10.0  # bound on every wait of a test (a hang fails instead of blocking the suite)


def rec(i: int) -> Record:
    return Record(b"k%d" % i, b"v%d" % i)


class GatedFsyncFS(OperationHookFileSystem):
    """Every fsync waits for ``gate`` (open from the start unless closed), and raises EIO while
    ``fail`` is set; ``entered`` is set once an fsync waits at the gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail = False
        self.fsyncs = 0

    def before(self, operation, path):
        if operation == "fsync":
            self.fsyncs += 1
            if not self.gate.is_set():
                self.entered.set()
                assert self.gate.wait(WAIT_S), "a test left an fsync waiting"
            if self.fail:
                raise OSError(5, "injected EIO in fsync")


@pytest.fixture
def gated(tmp_path):
    fs = GatedFsyncFS()
    store = LogManager([str(tmp_path / "d")], fs=fs, config={"logstore.durable.max.pending.appends": 4})
    store.create_topic("t", 1)
    store.create_topic("m", 3)
    yield store, store.get_log("t", 0), fs
    fs.gate.set()
    fs.fail = False
    try:
        store.close()
    except Exception:  # noqa: BLE001 - a test that failed the log leaves it unclean on purpose
        pass


def hold_fsyncs(fs: GatedFsyncFS, log) -> None:
    """Close the gate and start a round that waits at it: the flusher is busy, so later appends
    stay pending until the gate opens."""
    fs.gate.clear()
    fs.entered.clear()
    log.append_future([Record(b"first", b"x")])
    assert fs.entered.wait(WAIT_S)


def test_a_future_completes_only_after_the_fsync_that_covers_it(gated):
    store, log, fs = gated
    hold_fsyncs(fs, log)
    futures = [log.append_future([rec(i)]) for i in range(3)]
    assert not any(future.done() for future in futures)
    assert log.recovery_point <= 1 and log.log_end_offset == 4  # written, not fsynced
    assert not futures[0].cancel(), "the records are written: the future cannot be cancelled"
    fs.gate.set()
    infos = [future.result(WAIT_S) for future in futures]
    assert [info.first_offset for info in infos] == [1, 2, 3]
    assert log.recovery_point > infos[-1].last_offset
    assert store.waits.futures.slots.used == 0


def test_an_fsync_error_fails_every_pending_future_and_the_log(gated):
    store, log, fs = gated
    hold_fsyncs(fs, log)
    futures = [log.append_future([rec(i)]) for i in range(3)]
    fs.fail = True
    fs.gate.set()
    done, _ = wait(futures, WAIT_S)
    assert len(done) == 3
    assert all(isinstance(future.exception(), LogFailedError) for future in futures)
    assert log.failed and log.recovery_point == 0
    with pytest.raises(LogFailedError):
        log.append_future([rec(9)])
    assert store.waits.futures.slots.used == 0


def test_a_timeout_fails_the_future_and_the_records_stay(gated):
    store, log, fs = gated
    hold_fsyncs(fs, log)
    future = log.append_future([rec(1)], timeout_ms=20)
    # The round's expiry fails it while the flusher is still stuck in the fsync.
    with pytest.raises(DurabilityTimeoutError):
        future.result(WAIT_S)
    assert not fs.gate.is_set() and log.log_end_offset == 2
    assert store.waits.futures.slots.used == 1  # the first append's, still waiting
    fs.gate.set()
    assert log.wait_durable(2, timeout_ms=int(WAIT_S * 1000)) >= 2  # appended, and durable later


def test_the_outstanding_futures_are_bounded(gated):
    store, log, fs = gated  # logstore.durable.max.pending.appends = 4
    hold_fsyncs(fs, log)
    futures = [log.append_future([rec(i)]) for i in range(3)]
    assert store.waits.futures.slots.used == 4
    with pytest.raises(BufferExhaustedError):
        log.append_future([rec(99)], timeout_ms=10)
    assert log.log_end_offset == 4, "nothing is appended when no slot is free"
    # A blocked caller gets the slot of the first future to complete.
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(log.append_future([rec(5)], timeout_ms=int(WAIT_S * 1000))))
    waiter.start()
    fs.gate.set()
    waiter.join(WAIT_S)
    assert got and got[0].result(WAIT_S).first_offset == 4
    assert all(future.result(WAIT_S) for future in futures)
    assert store.waits.futures.slots.used == 0


def test_a_clean_close_completes_the_pending_futures(gated):
    store, log, fs = gated
    hold_fsyncs(fs, log)
    futures = [log.append_future([rec(i)]) for i in range(3)]
    assert not any(future.done() for future in futures)
    closing = threading.Thread(target=store.close)
    closing.start()
    fs.gate.set()
    closing.join(WAIT_S)
    assert not closing.is_alive()
    infos = [future.result(WAIT_S) for future in futures]  # flushed by a round or by the close
    assert [info.first_offset for info in infos] == [1, 2, 3]
    assert log.closed and log.recovery_point == log.log_end_offset == 4
    with pytest.raises(StoreClosedError):
        log.append_future([rec(9)])


def test_a_store_future_covers_every_partition_touched(gated):
    store, _log, fs = gated
    records = [Record(b"key-%d" % i, b"v") for i in range(12)]
    future = store.append_future("m", records)
    infos = future.result(WAIT_S)
    assert sum(info.record_count for info in infos.values()) == 12 and len(infos) > 1
    for partition, info in infos.items():
        assert store.get_log("m", partition).recovery_point > info.last_offset
    with pytest.raises(InvalidRecordError):  # bad input raises at once, with nothing appended
        store.append_future("m", [Record(b"k", b"x" * (2 << 20))])
    assert store.waits.futures.slots.used == 0


def test_append_many_waits_once_for_one_round_over_every_log(gated):
    store, log, fs = gated
    log.append([rec(0)], acks="all")
    rounds = store.waits.flusher.rounds
    results = store.append_many([("t", [rec(1)]), ("m", [rec(2), rec(3)], 2), ("m", [Record(None, b"x")], 0),
                                 ("t", [rec(4), rec(5)])], acks="all")
    assert [sorted(result) for result in results] == [[0], [2], [0], [0]]
    assert results[3][0].last_offset == 3
    assert store.waits.flusher.rounds == rounds + 1, "one round covered both topics"
    assert log.recovery_point == 4 and store.get_log("m", 2).recovery_point == 2
    assert store.get_log("m", 0).recovery_point == 1
    with pytest.raises(InvalidRecordError):  # every append is checked before any is written
        store.append_many([("t", [rec(6)]), ("m", [Record(b"k", b"x" * (2 << 20))], 1)], acks="all")
    assert log.log_end_offset == 4
    with pytest.raises(TypeError):
        store.append_many([("t",)])


def test_append_async_does_not_block_the_event_loop(gated):
    store, log, fs = gated
    hold_fsyncs(fs, log)

    async def main():
        appends = [asyncio.ensure_future(log.append_async([rec(i)])) for i in range(3)]
        # A fourth waits for a slot (the limit is 4), a fifth for one too; the loop runs on.
        queued = [asyncio.ensure_future(store.append_async("t", [rec(10 + i)])) for i in range(2)]
        ticks = 0
        while log.log_end_offset < 4:
            await asyncio.sleep(0)
            ticks += 1
        assert ticks < 1000 and not any(task.done() for task in appends + queued)
        assert store.waits.futures.slots.used == 4
        fs.gate.set()  # from the loop's own thread: it was never blocked
        infos = await asyncio.wait_for(asyncio.gather(*appends), WAIT_S)
        later = await asyncio.wait_for(asyncio.gather(*queued), WAIT_S)
        return infos, later

    infos, later = asyncio.run(main())
    assert [info.first_offset for info in infos] == [1, 2, 3]
    assert sorted(result[0].first_offset for result in later) == [4, 5]
    assert log.recovery_point == log.log_end_offset == 6
    assert store.waits.futures.slots.used == 0


def test_an_async_caller_that_finds_no_slot_in_time_gets_buffer_exhausted(gated):
    store, log, fs = gated
    hold_fsyncs(fs, log)
    for i in range(3):
        log.append_future([rec(i)])

    async def main():
        with pytest.raises(BufferExhaustedError):
            await log.append_async([rec(9)], timeout_ms=10)
        task = asyncio.ensure_future(log.append_async([rec(9)]))
        await asyncio.sleep(0.01)
        task.cancel()  # gives up its place in the queue
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert log.log_end_offset == 4
    fs.gate.set()
    assert log.wait_durable(4, timeout_ms=int(WAIT_S * 1000)) == 4
    for _ in range(int(WAIT_S / 0.01)):  # the futures give their slots back on the flusher thread
        if not store.waits.futures.slots.used:
            break
        threading.Event().wait(0.01)
    assert store.waits.futures.slots.used == 0


def test_a_standalone_log_has_futures_too(tmp_path):
    from logstore.clock import SYSTEM_CLOCK
    from logstore.config import LogConfig
    from logstore.fs import OS_FILE_SYSTEM
    from logstore.log.log import Log

    (tmp_path / "p").mkdir()
    log = Log(str(tmp_path / "p"), LogConfig(), fs=OS_FILE_SYSTEM, clock=SYSTEM_CLOCK)
    try:
        futures = [log.append_future([rec(i)]) for i in range(5)]
        assert [future.result(WAIT_S).first_offset for future in futures] == list(range(5))
        assert log.recovery_point == 5
    finally:
        log.close()
