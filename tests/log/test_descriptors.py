"""Descriptors per segment: a store holds descriptors for its active segments and a
bounded cache of others (``logstore.log.file_records.OPEN_FILES``), so a store with many segments
opens, appends, reads, compacts and closes under a small ``ulimit -n``.

Before the fix a writable open held about four descriptors per segment (the ``.log``, each index,
and each index's mapping, which holds a duplicate), so 1,500 segments needed ~6,000.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading

import pytest

from logstore import LogManager, Record
from logstore.log.file_records import OPEN_FILES

_SEGMENTS = 1500

_WORKLOAD = textwrap.dedent('''
    import resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    from logstore import LogManager, Record
    store_dir, segments = sys.argv[1], int(sys.argv[2])
    value = lambda i: b"v%06d" % i
    with LogManager([store_dir]) as store:
        store.create_topic("many", 1, {"segment.bytes": 300, "cleanup.policy": "compact"})
        log = store.get_log("many", 0)
        i = 0
        while len(log.segments) < segments:
            log.append([Record(key=b"k%06d" % (i + n), value=value(i + n)) for n in range(4)])
            i += 4
    with LogManager([store_dir]) as store:  # reopen: every segment is loaded
        log = store.get_log("many", 0)
        assert len(log.segments) >= segments, len(log.segments)
        log.append([Record(key=b"k%06d" % i, value=value(i))])
        i += 1
        records = list(log.iter_records())
        assert [r.value for r in records] == [value(n) for n in range(i)]
        for n in range(0, i, 7):  # point reads everywhere (they map data files)
            (record,) = log.read(n, max_records=1)
            assert record.value == value(n)
        store.compact("many")
        assert [r.value for r in log.iter_records()] == [value(n) for n in range(i)]
    print(i, flush=True)
''')


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def scratch(tmp_path):
    """A scratch dir on tmpfs when there is one (thousands of fsyncs cost nothing there), else
    ``tmp_path``."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = tempfile.mkdtemp(prefix="logstore-fds-", dir="/dev/shm")
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield str(tmp_path)


def test_a_store_of_1500_segments_under_ulimit_256(scratch):
    done = subprocess.run([sys.executable, "-c", _WORKLOAD, scratch, str(_SEGMENTS)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) > _SEGMENTS


@pytest.fixture
def small_cache():
    saved = OPEN_FILES.max_descriptors
    OPEN_FILES.max_descriptors = 24
    try:
        yield OPEN_FILES.max_descriptors
    finally:
        OPEN_FILES.max_descriptors = saved


def test_open_descriptors_stay_under_the_bound_while_reading_every_segment(tmp_path, small_cache):
    baseline = open_descriptors()
    store = LogManager([str(tmp_path)])
    try:
        store.create_topic("t", 1, {"segment.bytes": 4000})
        log = store.get_log("t", 0)
        for i in range(0, 3000, 30):
            log.append([Record(key=None, value=b"%05d" % n + b"x" * 100) for n in range(i, i + 30)])
        assert len(log.segments) > 4 * small_cache
        # The active segment: its .log, two indexes and their mappings; the store's lock file.
        pinned = 5 + 1
        peak = 0
        for n in range(0, 3000, 13):
            (record,) = log.read(n, max_records=1)
            assert record.value.startswith(b"%05d" % n)
            peak = max(peak, open_descriptors() - baseline)
        assert [r.value[:5] for r in log.iter_records()] == [b"%05d" % n for n in range(3000)]
        peak = max(peak, open_descriptors() - baseline)
        assert peak <= small_cache + pinned, f"{peak} descriptors open for {len(log.segments)} segments"
        assert OPEN_FILES.descriptors <= small_cache
        assert OPEN_FILES.evictions > 0
    finally:
        store.close()
    assert open_descriptors() <= baseline + 1  # the cache may still hold one evicted mapping's


def test_eviction_never_closes_a_descriptor_in_use(tmp_path, small_cache):
    """Readers on many threads while the cache evicts: every read returns the right bytes (a
    descriptor closed under a ``pread`` could be reused by another file: a wrong read)."""
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", 1, {"segment.bytes": 2000})
        log = store.get_log("t", 0)
        for i in range(0, 2000, 10):
            log.append([Record(key=None, value=b"%05d" % n + b"y" * 50) for n in range(i, i + 10)])
        segments = log.segments
        assert len(segments) > 3 * small_cache
        errors: list[BaseException] = []

        def reader(start: int) -> None:
            try:
                for round_ in range(3):
                    for n in range(start, 2000, 37):
                        records = log.read(n, max_bytes=200)
                        assert records[0].offset == n and records[0].value.startswith(b"%05d" % n)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=reader, args=(start,)) for start in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors[0]
        assert OPEN_FILES.evictions > 0


# --- descriptors per partition -------------------------------------------------------------------

def _reopened_store_growth(data_dir: str, partitions: int) -> tuple[int, int, LogManager]:
    """Descriptors a store of ``partitions`` partitions (several segments each) holds once opened,
    the count before, and the store."""
    with LogManager([data_dir]) as store:
        store.create_topic("p", partitions, {"segment.bytes": 1500})
        for partition in range(partitions):
            log = store.get_log("p", partition)
            for i in range(40):
                log.append([Record(key=None, value=b"%04d" % i + b"z" * 100)])
            assert len(log.segments) >= 4
    baseline = open_descriptors()
    store = LogManager([data_dir])
    return open_descriptors() - baseline, baseline, store


def test_an_open_partition_holds_descriptors_for_its_active_segment_only(scratch):
    """Before: every segment's data file stayed open after the open (the loader reads each one's
    head), and each index kept its own descriptor beside its mapping's: 7 a partition here."""
    from logstore.fs import MAPPING_HOLDS_DESCRIPTOR
    from logstore.log.file_records import ACTIVE_SEGMENT_DESCRIPTORS
    partitions = 12
    growth, baseline, store = _reopened_store_growth(scratch, partitions)
    try:
        per_partition = 1 + (2 if MAPPING_HOLDS_DESCRIPTOR else 0)  # the .log, the indexes' mappings
        assert growth <= partitions * per_partition + 1, f"{growth} descriptors for {partitions} partitions"
        # An append and a read of the active segment keep to that; an old segment's read goes to the cache.
        for partition in range(partitions):
            log = store.get_log("p", partition)
            log.append([Record(key=None, value=b"more")])
            assert log.read(log.log_end_offset - 1, max_records=1)[0].value == b"more"
        needed = store.descriptors_needed()
        assert needed >= partitions * ACTIVE_SEGMENT_DESCRIPTORS + OPEN_FILES.bound + 1
        assert open_descriptors() - baseline <= needed
    finally:
        store.close()


def test_a_clean_open_holds_no_descriptor_per_partition_until_one_is_used(scratch):
    """Before: each partition's active segment held its data file's descriptor and, before Python
    3.13, one per index mapping (3 a partition: 10,000 partitions needed 30,000 descriptors)."""
    partitions = 12
    growth, baseline, store = _reopened_store_growth(scratch, partitions)
    try:
        assert growth <= 1, f"{growth} descriptors for {partitions} idle partitions"
        log = store.get_log("p", 3)
        active = log.segments[-1]
        assert active.descriptors == 0
        # The index keeps its full capacity though unmapped: the append does not roll.
        assert active.offset_index.max_entries == log.config.segment_index_bytes // active.offset_index.ENTRY_BYTES
        end = log.log_end_offset
        log.append([Record(key=None, value=b"x")])
        assert log.segments[-1] is active and active.descriptors >= 1
        assert [r.value for r in log.read(end, max_records=1)] == [b"x"]
        assert open_descriptors() - baseline <= 1 + active.descriptors
    finally:
        store.close()
    with LogManager([scratch]) as store:
        log = store.get_log("p", 3)
        assert [r.value for r in log.read(end, max_records=1)] == [b"x"]
        assert not store.problems


def test_an_idle_log_gives_its_descriptors_back_and_takes_them_again(tmp_path):
    """``Log.release_idle_descriptors``: an active segment unused since the previous call releases
    its descriptor and index mappings; the next append and read open them again."""
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        log.append([Record(key=None, value=b"y" * 5000)] * 3)
        active = log.segments[-1]
        held = active.descriptors
        assert held >= 1
        assert log.release_idle_descriptors() == 0  # used since the previous call: kept
        assert log.release_idle_descriptors() == held  # idle for a whole interval: released
        assert active.descriptors == 0 and not active.offset_index.mapped
        assert log.read(0, max_records=1)[0].value == b"y" * 5000  # a read opens the data file again
        assert log.release_idle_descriptors() == 0  # that read counted as a use
        log.append([Record(key=None, value=b"z" * 5000)] * 3)
        assert active.offset_index.mapped and log.segments[-1] is active
        assert log.release_idle_descriptors() == 0
        assert log.release_idle_descriptors() > 0
        log.flush()  # a flush after the release syncs the index by name
        entries = active.offset_index.entries
    with LogManager([str(tmp_path)]) as store:
        log = store.get_log("t", 0)
        assert [r.value for r in log.iter_records()] == [b"y" * 5000] * 3 + [b"z" * 5000] * 3
        assert log.segments[-1].offset_index.entries == entries
        assert not store.problems


def test_the_descriptor_release_job_runs_every_log_descriptor_idle_ms(tmp_path):
    from logstore.clock import ManualClock
    from logstore.config import ManagerConfig
    from logstore.timer.scheduler import Scheduler
    assert ManagerConfig.from_broker_properties({}).descriptor_idle_ms == 300_000
    with pytest.raises(Exception, match="log.descriptor.idle.ms"):
        ManagerConfig.from_broker_properties({"log.descriptor.idle.ms": 0})
    clock = ManualClock(1_000_000)
    store = LogManager([str(tmp_path)], clock=clock, scheduler=Scheduler(clock, threaded=False),
                       config={"log.initial.task.delay.ms": 500, "log.descriptor.idle.ms": 1000})
    with store:
        store.create_topic("t", 2)
        logs = [store.get_log("t", p) for p in range(2)]
        for log in logs:
            log.append([Record(key=None, value=b"v" * 5000)] * 2)
        store.scheduler.advance(500)  # the first run sees both used
        assert all(log.segments[-1].descriptors for log in logs)
        logs[1].append([Record(key=None, value=b"w")])
        store.scheduler.advance(1000)  # the second: log 0 idle for an interval, log 1 appended to
        assert logs[0].segments[-1].descriptors == 0 and logs[1].segments[-1].descriptors


def test_descriptors_needed_grows_with_the_partitions(tmp_path):
    from logstore.log.file_records import ACTIVE_SEGMENT_DESCRIPTORS
    with LogManager([str(tmp_path)]) as store:
        empty = store.descriptors_needed()
        assert empty > OPEN_FILES.bound
        store.create_topic("t", 10)
        assert store.descriptors_needed() == empty + 10 * ACTIVE_SEGMENT_DESCRIPTORS


# --- running out of descriptors is not a disk failure ---------------------------------------------

def _emfile_store(tmp_path, operations: set[str], **config):
    """A store whose file system raises EMFILE at the chosen operations once ``arm``ed."""
    import errno

    from logstore.testing import FaultyFileSystem
    fs = FaultyFileSystem(operations, fail_at=10**9, errno_code=errno.EMFILE)

    def arm() -> None:  # the next such operation fails
        fs.calls, fs.fail_at = 0, 1

    def disarm() -> None:
        fs.fail_at, fs.calls = 10**9, 0

    return LogManager([str(tmp_path)], fs=fs, config=config), arm, disarm


def test_a_flush_short_of_descriptors_keeps_the_log_writable_and_the_recovery_point(tmp_path):
    """Before: the EMFILE made the log fail-stop (every later produce: a storage error until a
    restart)."""
    from logstore.errors import ResourceShortageError
    store, arm, disarm = _emfile_store(tmp_path, {"fsync_dir"})
    with store:
        store.create_topic("t", 1, {"segment.bytes": 1000})
        log = store.get_log("t", 0)
        log.flush()
        for i in range(30):  # new segments: the flush syncs the directory
            log.append([Record(key=None, value=b"v" * 100)])
        before = log.recovery_point
        arm()
        with pytest.raises(ResourceShortageError):
            log.flush()
        disarm()
        assert not log.failed and log.recovery_point == before, "nothing counted as synced"
        assert store.offline_dirs == {}
        log.append([Record(key=None, value=b"after")])
        assert log.flush() == log.log_end_offset == 31


def test_a_roll_short_of_descriptors_changes_nothing_and_the_next_append_rolls(tmp_path):
    from logstore.errors import StorageError
    store, arm, disarm = _emfile_store(tmp_path, {"open_file"})
    with store:
        store.create_topic("t", 1, {"segment.bytes": 500})
        log = store.get_log("t", 0)
        while len(log.segments) < 2:
            log.append([Record(key=None, value=b"v" * 100)])
        end, segments = log.log_end_offset, len(log.segments)
        arm()
        with pytest.raises(StorageError):
            while len(log.segments) == segments:  # the append that needs the next roll fails
                log.append([Record(key=None, value=b"v" * 100)])
                end += 1
        disarm()
        assert not log.failed and log.log_end_offset == end and store.offline_dirs == {}
        log.append([Record(key=None, value=b"after")])
        assert len(log.segments) == segments + 1
        assert [r.value for r in log.read(end, max_records=1)] == [b"after"]
        assert log.flush() == end + 1


def test_a_checkpoint_short_of_descriptors_leaves_the_dir_online(tmp_path):
    """The probe's symptom: the scheduled checkpoint met EMFILE and the only data dir went offline,
    so every produce failed after the flood had left."""
    from logstore.errors import ResourceShortageError
    store, arm, disarm = _emfile_store(tmp_path, {"open_file"})
    with store:
        store.create_topic("t", 2)
        store.append("t", [Record(key=None, value=b"x")], partition=0)
        store.flush()
        arm()
        with pytest.raises(ResourceShortageError):
            store.checkpoint()
        disarm()
        assert store.offline_dirs == {}
        store.append("t", [Record(key=None, value=b"y")], partition=0)
        store.flush()
        store.checkpoint()
    with LogManager([str(tmp_path)]) as store:
        assert [r.value for r in store.get_log("t", 0).iter_records()] == [b"x", b"y"]


def test_the_checkpoint_job_logs_a_shortage_once_and_retries(tmp_path, caplog):
    import errno
    import logging

    from logstore.clock import ManualClock
    from logstore.testing import FaultyFileSystem
    from logstore.timer.scheduler import Scheduler
    clock = ManualClock(1_000_000)
    fs = FaultyFileSystem({"open_file"}, fail_at=10**9, errno_code=errno.EMFILE)
    config = {"log.initial.task.delay.ms": 1000, "log.flush.offset.checkpoint.interval.ms": 1000}
    with LogManager([str(tmp_path)], fs=fs, config=config, clock=clock,
                    scheduler=Scheduler(clock, threaded=False)) as store:
        store.create_topic("t", 1)
        store.append("t", [Record(key=None, value=b"x")], partition=0)
        store.flush()
        fs.calls, fs.fail_at, fs.persistent = 0, 1, True
        with caplog.at_level(logging.WARNING, logger="logstore"):
            for _ in range(5):
                store.scheduler.advance(1000)
            fs.fail_at, fs.persistent = 10**9, False
            store.scheduler.advance(1000)
        assert store.offline_dirs == {}
        shortage_lines = [r for r in caplog.records if "recovery-point-checkpoint" in r.getMessage()]
        assert len(shortage_lines) == 2, [r.getMessage() for r in shortage_lines]  # met once, over once
        assert "succeeded again" in shortage_lines[-1].getMessage()
        with open(os.path.join(str(tmp_path), "recovery-point-offset-checkpoint"), "rb") as handle:
            assert handle.read()  # written at the run after the shortage
