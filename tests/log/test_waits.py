"""Waiting reads (``min_bytes``/``max_wait_ms``, Kafka's DelayedFetch) and durable appends
(``acks="all"``, DelayedProduce with a group-commit flusher), on a Log, on the store, and on a
read-only view that another writer appends to."""

from __future__ import annotations

import threading
import time

import pytest

from logstore import LogManager, Record
from logstore.errors import DurabilityTimeoutError, LogFailedError, OffsetOutOfRangeError
from logstore.testing import OperationHookFileSystem


def rec(i: int, size: int = 20) -> Record:
    return Record(b"k%d" % i, b"v" * size, (), 1_000 + i)


@pytest.fixture
def store(tmp_path):
    with LogManager([str(tmp_path / "d")]) as store:
        store.create_topic("t", 2)
        yield store


def later(delay_s: float, fn) -> threading.Thread:
    def run():
        time.sleep(delay_s)
        fn()
    thread = threading.Thread(target=run)
    thread.start()
    return thread


# --- waiting reads -----------------------------------------------------------------------------


def test_a_waiting_read_wakes_on_append(store):
    log = store.get_log("t", 0)
    thread = later(0.05, lambda: log.append([rec(0)]))
    start = time.monotonic()
    records = log.read(0, max_wait_ms=5000)
    elapsed = time.monotonic() - start
    thread.join()
    assert [r.key for r in records] == [b"k0"]
    assert elapsed < 2.0, f"woke after {elapsed:.2f} s, not at the append"


def test_a_waiting_read_times_out_with_nothing(store):
    log = store.get_log("t", 0)
    start = time.monotonic()
    assert log.read(0, max_wait_ms=150) == []
    assert time.monotonic() - start >= 0.14


def test_a_read_with_enough_data_does_not_wait(store):
    log = store.get_log("t", 0)
    log.append([rec(0)])
    start = time.monotonic()
    assert len(log.read(0, max_wait_ms=5000)) == 1
    assert time.monotonic() - start < 1.0


def test_min_bytes_waits_for_more_and_times_out_with_a_partial_answer(store):
    log = store.get_log("t", 0)
    log.append([rec(0)])
    start = time.monotonic()
    records = log.read(0, min_bytes=10_000, max_wait_ms=150)
    assert time.monotonic() - start >= 0.14
    assert [r.offset for r in records] == [0], "the partial data is returned at the timeout"
    # Enough bytes arriving completes it early.
    thread = later(0.05, lambda: log.append([rec(i, 500) for i in range(1, 40)]))
    start = time.monotonic()
    records = log.read(0, min_bytes=10_000, max_wait_ms=5000)
    thread.join()
    assert time.monotonic() - start < 2.0
    assert len(records) == 40


def test_a_truncation_answers_a_waiting_read(store):
    log = store.get_log("t", 0)
    log.append([rec(i) for i in range(5)])
    thread = later(0.05, lambda: log.truncate_to(2))
    start = time.monotonic()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5, max_wait_ms=5000)  # the offset is past the new end: answered, not left waiting
    thread.join()
    assert time.monotonic() - start < 2.0


def test_closing_the_store_answers_waiting_reads(tmp_path):
    store = LogManager([str(tmp_path / "d")])
    store.create_topic("t", 1)
    log = store.get_log("t", 0)
    result = {}

    def reader():
        start = time.monotonic()
        try:
            log.read(0, max_wait_ms=10_000)
        except Exception as exc:  # noqa: BLE001 - what it raises is checked below
            result["error"] = exc
        result["elapsed"] = time.monotonic() - start

    thread = threading.Thread(target=reader)
    thread.start()
    time.sleep(0.1)
    store.close()
    thread.join(5)
    assert not thread.is_alive() and result["elapsed"] < 5.0


def test_fetch_waits_on_several_partitions(store):
    thread = later(0.05, lambda: store.append("t", [rec(1)], partition=1))
    start = time.monotonic()
    found = store.fetch({("t", 0): 0, ("t", 1): 0}, max_wait_ms=5000)
    thread.join()
    assert time.monotonic() - start < 2.0
    assert found[("t", 0)] == [] and [r.key for r in found[("t", 1)]] == [b"k1"]


@pytest.mark.parametrize("bad", [{"min_bytes": -1}, {"max_wait_ms": -5}, {"max_wait_ms": 1.5}])
def test_bad_wait_arguments_are_rejected(store, bad):
    with pytest.raises(ValueError):
        store.get_log("t", 0).read(0, **bad)


def test_no_lost_wakeup_under_concurrent_appends(store):
    """Readers chase a writer with long waits; a lost wake-up would leave a reader waiting its
    whole max_wait_ms (5 s) while data is there. Every wait must end quickly."""
    log = store.get_log("t", 0)
    total = 3000
    slow_waits = []
    errors = []

    def reader():
        offset = 0
        try:
            while offset < total:
                start = time.monotonic()
                records = log.read(offset, max_wait_ms=5000)
                if time.monotonic() - start > 2.0:
                    slow_waits.append(offset)
                assert [r.offset for r in records] == list(range(offset, offset + len(records)))
                offset += len(records)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(4)]
    for thread in readers:
        thread.start()
    for i in range(total):
        log.append([rec(i)])
    for thread in readers:
        thread.join(30)
    assert not errors and not slow_waits


def test_a_read_only_view_waits_for_another_writer(tmp_path):
    """The reader's store is read-only (as `logstore read --follow` opens it): the appends happen in
    another store object, so only the files tell the reader; it must wake without polling."""
    data_dir = str(tmp_path / "d")
    with LogManager([data_dir]) as writer:
        writer.create_topic("t", 1, {"segment.bytes": 2000})
        writer.append("t", [rec(0)], partition=0)
        with LogManager([data_dir], read_only=True) as reader:
            assert [r.offset for r in reader.read("t", 0, 0)] == [0]
            thread = later(0.05, lambda: writer.append("t", [rec(1)], partition=0))
            start = time.monotonic()
            found = reader.fetch({("t", 0): 1}, max_wait_ms=5000)
            thread.join()
            assert time.monotonic() - start < 2.0
            assert [r.offset for r in found[("t", 0)]] == [1]
            # New segments rolled by the writer are picked up too.
            for i in range(2, 60):
                writer.append("t", [rec(i)], partition=0)
            assert len(writer.get_log("t", 0).segments) > 2
            found = reader.fetch({("t", 0): 2}, max_wait_ms=2000, max_bytes=1 << 20)
            offsets = [r.offset for r in found[("t", 0)]]
            assert offsets and offsets[0] == 2 and offsets == list(range(2, 2 + len(offsets)))
            start = time.monotonic()
            assert reader.fetch({("t", 0): 60}, max_wait_ms=150) == {("t", 0): []}
            assert time.monotonic() - start >= 0.14


# --- durable appends ---------------------------------------------------------------------------


def test_acks_all_returns_with_the_recovery_point_past_the_records(store):
    log = store.get_log("t", 0)
    info = log.append([rec(0), rec(1)], acks="all")
    assert log.recovery_point >= info.last_offset + 1
    infos = store.append("t", [Record(b"a", b"1"), Record(b"b", b"2"), Record(b"c", b"3")], acks="all")
    for partition, info in infos.items():
        assert store.get_log("t", partition).recovery_point > info.last_offset


def test_acks_1_does_not_fsync(store):
    log = store.get_log("t", 0)
    log.append([rec(0)])
    assert log.recovery_point == 0


def test_concurrent_durable_appends_share_fsyncs(store):
    log = store.get_log("t", 0)
    per_thread = 40

    def writer(n):
        for i in range(per_thread):
            info = log.append([rec(n * 1000 + i)], acks="all")
            assert log.recovery_point > info.last_offset

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flusher = store.waits.flusher
    assert log.log_end_offset == 8 * per_thread
    assert flusher.flushes < 8 * per_thread, "group commit: fewer flushes than appends"


@pytest.mark.parametrize("acks", [0, 2, "none", True])
def test_bad_acks_are_rejected_before_appending(store, acks):
    log = store.get_log("t", 0)
    with pytest.raises(ValueError):
        log.append([rec(0)], acks=acks)
    assert log.log_end_offset == 0


class SlowFsyncFS(OperationHookFileSystem):
    def __init__(self):
        self.delay_s = 0.0
        self.fail = False

    def before(self, operation, path):
        if operation == "fsync":
            time.sleep(self.delay_s)
            if self.fail:
                raise OSError(5, "injected EIO in fsync")


def test_a_durable_append_times_out_clearly_and_becomes_durable_later(tmp_path):
    fs = SlowFsyncFS()
    with LogManager([str(tmp_path / "d")], fs=fs) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        fs.delay_s = 0.3
        with pytest.raises(DurabilityTimeoutError) as caught:
            log.append([rec(0)], acks="all", timeout_ms=20)
        assert "may still become durable" in str(caught.value)
        assert log.log_end_offset == 1, "the records stay appended"
        deadline = time.monotonic() + 5
        while log.recovery_point < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert log.recovery_point == 1, "the flusher finished the fsync after the timeout"
        fs.delay_s = 0


def test_an_fsync_error_fails_the_durable_append(tmp_path):
    fs = SlowFsyncFS()
    store = LogManager([str(tmp_path / "d")], fs=fs)
    store.create_topic("t", 1)
    log = store.get_log("t", 0)
    fs.fail = True
    with pytest.raises(LogFailedError):
        log.append([rec(0)], acks="all", timeout_ms=5000)
    assert log.failed
    with pytest.raises(LogFailedError):
        log.append([rec(1)])
    fs.fail = False
    store.close()
    with LogManager([str(tmp_path / "d")], read_only=True) as reopened:
        assert not reopened.status()[0].clean_shutdown, "a failed log leaves its dir unclean"


def test_a_standalone_log_waits_and_acks_all_with_its_own_threads(tmp_path):
    from logstore import Log, LogConfig
    from logstore.clock import SYSTEM_CLOCK
    from logstore.fs import OS_FILE_SYSTEM
    (tmp_path / "p").mkdir()
    log = Log(str(tmp_path / "p"), LogConfig(), fs=OS_FILE_SYSTEM, clock=SYSTEM_CLOCK)
    try:
        thread = later(0.05, lambda: log.append([rec(0)], acks="all"))
        assert [r.offset for r in log.read(0, max_wait_ms=5000)] == [0]
        thread.join()
        assert log.recovery_point == 1
    finally:
        log.close()


# --- readers, a writer and the retention job at once ---------------------------------------------


def test_readers_with_a_writer_and_the_retention_job(tmp_path):
    """Reader threads read (some waiting, some scanning) while one writer appends and the real,
    threaded retention job deletes segments every 20 ms: no torn or wrong record, no offset past
    the log end, no exception other than the OffsetOutOfRangeError of an offset retention took."""
    import random
    config = {"log.retention.check.interval.ms": 20, "log.initial.task.delay.ms": 0}
    with LogManager([str(tmp_path / "d")], config=config) as store:
        store.create_topic("t", 1, {"segment.bytes": 4000, "retention.bytes": 12_000, "file.delete.delay.ms": 30})
        log = store.get_log("t", 0)
        stop = threading.Event()
        problems: list[str] = []
        checked = [0]

        def check(records, log_end_after):
            for record in records:
                if record.value != b"value-%d" % record.offset + b"." * 40:
                    problems.append(f"wrong record at {record.offset}: {record.value[:20]!r}")
                if record.offset >= log_end_after:
                    problems.append(f"offset {record.offset} past the log end {log_end_after}")
            checked[0] += len(records)

        def reader(seed):
            rng = random.Random(seed)
            while not stop.is_set():
                start = rng.randint(log.log_start_offset, log.log_end_offset)
                try:
                    if rng.random() < 0.3:
                        records = list(log.iter_records(start))
                    else:
                        records = log.read(start, max_bytes=rng.choice([1, 500, 5000]), max_wait_ms=rng.choice([0, 20]))
                except OffsetOutOfRangeError:
                    continue  # retention moved the log start past it meanwhile
                except Exception as exc:  # noqa: BLE001 - anything else is the finding
                    problems.append(repr(exc))
                    return
                check(records, log.log_end_offset)

        readers = [threading.Thread(target=reader, args=(seed,)) for seed in range(4)]
        for thread in readers:
            thread.start()
        deadline = time.monotonic() + 2.0
        offset = 0
        while time.monotonic() < deadline:
            batch = [Record(b"k", b"value-%d" % (offset + i) + b"." * 40) for i in range(20)]
            offset = log.append(batch).last_offset + 1
            time.sleep(0.001)
        stop.set()
        for thread in readers:
            thread.join(10)
        assert not problems, problems[:5]
        assert log.log_start_offset > 0, "retention ran during the test"
        assert checked[0] > 1000


@pytest.mark.parametrize("timeout_ms", [2**31, 2**70, -1, 1.5])
@pytest.mark.parametrize("acks", [1, "all"])
def test_a_timeout_out_of_range_is_refused_before_anything_is_appended(store, timeout_ms, acks):
    """D9: a huge timeout raised OverflowError after the records were appended, so a retry
    duplicated them. Every timeout is checked first (Kafka's int32 range)."""
    log = store.get_log("t", 0)
    with pytest.raises(ValueError, match=f"timeout_ms must be an int between 0 and {2**31 - 1}.*{timeout_ms!r}"):
        store.append("t", [rec(0)], partition=0, acks=acks, timeout_ms=timeout_ms)
    with pytest.raises(ValueError, match="timeout_ms"):
        log.append([rec(0)], acks=acks, timeout_ms=timeout_ms)
    with pytest.raises(ValueError, match="max_wait_ms"):
        store.read("t", 0, 0, max_wait_ms=timeout_ms)
    with pytest.raises(ValueError, match="max_wait_ms"):
        store.fetch({("t", 0): 0}, max_wait_ms=timeout_ms)
    assert log.log_end_offset == 0
    store.append("t", [rec(0)], partition=0, acks="all", timeout_ms=2**31 - 1)  # the largest is fine
    assert log.log_end_offset == 1
