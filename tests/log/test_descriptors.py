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
