"""ENOSPC/EIO injection through the file-operations seam (docs/design.md §7:
an fsync error is fail-stop, no retry that reports success).

Invariants checked: an fsync error in ``flush`` raises ``LogFailedError`` (a ``StorageError`` wrapping
the ``OSError``), the recovery point does not advance, every later append/flush/roll/truncate_to/
delete_records raises ``LogFailedError`` and the log's files are never fsynced again (a spy); closing
the store still releases the lock, and a reopen recovers every record flushed before the fault. A
write error in ``append`` (ENOSPC, EIO; nothing or half of the batch written; once or persistent)
raises ``StorageError``, leaves the log end offset and the file size unchanged and nothing of the batch
visible (to this process or a read-only opener); after a transient error later appends work. A
failed undo of the write makes the log fail-stop. An error injected at every N-th mutating file
operation of a whole workload (append, flush, roll, truncate_to, close; ENOSPC and EIO; once and
persistent) always surfaces as a ``StorageError`` carrying the ``OSError`` (never another type, never
silence, never a bare ``OSError``), and after a reopen on a healthy file system every record whose flush returned is
present, offsets are contiguous and nothing unexpected appears. I/O errors while loading are
``StorageError``s too. No descriptors or mappings leak once a store is closed, after faults too, nor
when opening a segment fails.
"""

from __future__ import annotations

import errno
import gc
import os
import shutil
import tempfile
import traceback
from collections import Counter

import pytest

from logstore import LockedError, LogFailedError, LogManager, Record, StorageError
from logstore.fs import FileSystem
from logstore.log.checkpoint import CLEAN_SHUTDOWN_MARKER
from logstore.testing import FaultyFileSystem
from crash_helpers import read_all

TOPIC = "t"
T0 = 1_700_000_000_000
CONFIG = {"segment.bytes": 1024, "index.interval.bytes": 64, "segment.index.bytes": 120}
ALL_OPS = {"pwrite", "fsync", "fsync_dir", "truncate", "rename", "open_file", "remove", "msync"}


class SpyFaultyFS(FaultyFileSystem):
    """``FaultyFileSystem`` that is armed late (``arm``), covers ``remove`` and ``msync`` too, can
    leave half of a failing write behind (``torn``), and records every fsync attempt by path."""

    def __init__(self, operations=frozenset(ALL_OPS), errno_code=errno.EIO, persistent=False, torn=False):
        super().__init__(set(operations), fail_at=0, errno_code=errno_code, persistent=persistent)
        self.torn = torn
        self.armed = False
        self.paths: dict[int, str] = {}
        self.fsync_attempts: list[str] = []

    def arm(self, fail_at: int | None) -> None:
        """Count operations from now; fail the ``fail_at``-th (never when None)."""
        self.armed = True
        self.calls = 0
        self.fail_at = fail_at if fail_at is not None else 2**62

    def heal(self) -> None:
        self.operations = set()

    def _maybe_fail(self, operation: str) -> None:
        if self.armed:
            super()._maybe_fail(operation)

    def open_file(self, path, *, create=False, writable=True):
        fd = super().open_file(path, create=create, writable=writable)
        self.paths[fd] = os.path.abspath(path)
        return fd

    def close(self, fd):
        self.paths.pop(fd, None)
        super().close(fd)

    def fsync(self, fd):
        self.fsync_attempts.append(self.paths.get(fd, "?"))
        super().fsync(fd)

    def fsync_dir(self, path):
        self.fsync_attempts.append(os.path.abspath(path) + "/")
        super().fsync_dir(path)

    def pwrite(self, fd, data, position):
        self._torn_fail(fd, bytes(data), position)
        FileSystem.pwrite(self, fd, data, position)  # counted by _torn_fail: not through the hook again

    def pwritev(self, fd, buffers, position):
        self._torn_fail(fd, b"".join(bytes(buffer) for buffer in buffers), position)
        FileSystem.pwritev(self, fd, buffers, position)

    def _torn_fail(self, fd, data, position):
        try:
            self._maybe_fail("pwrite")
        except OSError:
            if self.torn:
                os.pwrite(fd, data[: max(1, len(data) // 2)], position)
            raise


def records(tag: str, count: int, first_ts: int = T0) -> list[Record]:
    return [Record(b"k%d" % (i % 3), f"{tag}-{i}".encode() + b"." * (i % 40), (("tag", tag.encode()),),
                   first_ts + i) for i in range(count)]


def plain(record: Record) -> Record:
    return record._replace(offset=None)


def reopen_and_read(data_dir: str) -> list[Record]:
    with LogManager([data_dir]) as store:
        return [plain(r) for r in read_all(store.get_log(TOPIC, 0))]


def open_store(data_dir: str, fs, config=CONFIG) -> LogManager:
    store = LogManager([data_dir], fs=fs)
    if TOPIC not in store.topics():
        store.create_topic(TOPIC, 1, config)
    return store


def log_fsyncs(fs: SpyFaultyFS, log) -> int:
    return sum(1 for path in fs.fsync_attempts if path.startswith(os.path.abspath(log.dir_path)))


def _engine_frame(exc: BaseException) -> str:
    """``function (file)`` of the innermost logstore frame outside the seam that raised ``exc``."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if "/logstore/" in frame.filename and not frame.filename.endswith(("fs.py", "testing.py"))]
    return f"{frames[-1].name} ({os.path.basename(frames[-1].filename)})" if frames else "?"


def caused_by_oserror(exc: BaseException, code: int) -> bool:
    """The ``OSError`` is in the exception chain (or, for the summary ``LogManager.close`` raises
    after closing everything, quoted in its message)."""
    if f"[Errno {code}]" in str(exc):
        return True
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno == code:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


# --- fsync errors: fail-stop ------------------------------------------------------------------------

@pytest.mark.parametrize("operation, fail_at", [("fsync", 1), ("fsync", 4), ("fsync_dir", 1)],
                         ids=["first fsync", "fourth fsync", "directory fsync"])
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
def test_fsync_error_makes_the_log_fail_stop(tmp_path, code, operation, fail_at):
    data_dir = str(tmp_path / "data")
    fs = SpyFaultyFS({operation}, errno_code=code)
    store = open_store(data_dir, fs)
    log = store.get_log(TOPIC, 0)
    flushed = records("flushed", 30)
    log.append(flushed[:20])
    log.append(flushed[20:])
    assert log.flush() == 30
    log.roll()  # the flush below covers a new segment: data, index, time index and directory fsyncs
    log.append(records("unflushed", 25, T0 + 100))
    assert len(log.segments) > 2
    fs.arm(fail_at)
    with pytest.raises(LogFailedError) as failure:
        log.flush()
    assert isinstance(failure.value, StorageError)
    assert caused_by_oserror(failure.value, code)
    assert log.recovery_point == 30, "the recovery point must not advance past a failed fsync"
    fsyncs = log_fsyncs(fs, log)
    fs.heal()  # the disk answers again: the log must still refuse (no retry into a false success)
    for attempt in (lambda: log.append(records("later", 2)), log.flush, log.roll,
                    lambda: log.truncate_to(10), lambda: log.delete_records(5), log.flush):
        with pytest.raises(LogFailedError):
            attempt()
    assert log.recovery_point == 30 and log.log_end_offset == 55 and log.log_start_offset == 0
    assert [plain(r) for r in log.read(0, 1 << 20, 30)] == flushed, "reads still work"
    try:
        store.close()
    except StorageError:
        pass  # reporting the failed log at close is fine
    assert log_fsyncs(fs, log) == fsyncs, "a failed log's files were fsynced again"
    # The lock is released: a healthy writer can open the store, and finds every flushed record.
    got = reopen_and_read(data_dir)
    assert got[:30] == flushed
    assert got[30:] == records("unflushed", 25, T0 + 100)[: len(got) - 30]


def test_store_with_a_failed_log_is_recovered_after_close(tmp_path):
    """fsyncgate: the fsync failed, so the unflushed tail may be lost (here: zeros). The next open
    must recover (cut it), not trust it. (Regression: LogManager._release used to write the
    clean-shutdown marker of a dir whose log was fail-stop; the reopen then could not even load.)"""
    data_dir = str(tmp_path / "data")
    fs = SpyFaultyFS({"fsync"})
    store = open_store(data_dir, fs)
    log = store.get_log(TOPIC, 0)
    log.append(records("flushed", 5))
    log.flush()
    durable = log.active_segment.size_bytes
    log.append(records("lost", 5))
    fs.arm(1)
    with pytest.raises(LogFailedError):
        log.flush()
    fs.heal()
    store.close()
    segment_file = os.path.join(log.dir_path, f"{0:020d}.log")
    with open(segment_file, "r+b") as handle:  # the page cache was dropped: zeros reached the disk
        handle.seek(durable)
        handle.write(bytes(os.path.getsize(segment_file) - durable))
    assert not os.path.exists(os.path.join(data_dir, CLEAN_SHUTDOWN_MARKER))
    assert reopen_and_read(data_dir) == records("flushed", 5)


# --- write errors in append -------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["mid-segment", "new segment"])
@pytest.mark.parametrize("torn", [False, True], ids=["nothing-written", "half-written"])
@pytest.mark.parametrize("persistent", [False, True], ids=["once", "persistent"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_write_error_in_append(tmp_path, code, persistent, torn, where):
    data_dir = str(tmp_path / "data")
    fs = SpyFaultyFS({"pwrite"}, errno_code=code, persistent=persistent, torn=torn)
    store = open_store(data_dir, fs, {**CONFIG, "segment.bytes": 1 << 20})  # no roll in the append
    log = store.get_log(TOPIC, 0)
    before = records("before", 12)
    log.append(before[:7])
    log.flush()
    log.append(before[7:])
    if where == "new segment":
        log.roll()
    segment = log.active_segment
    size = segment.size_bytes
    fs.arm(1)
    with pytest.raises(StorageError) as failure:
        log.append(records("failed", 6, T0 + 500))
    assert not isinstance(failure.value, LogFailedError), "a write that was undone is not fail-stop"
    assert caused_by_oserror(failure.value, code)
    assert log.log_end_offset == 12 and log.active_segment is segment
    assert segment.size_bytes == size == os.path.getsize(segment.log_path), "the partial batch was cut"
    assert log.read(12) == []
    assert [plain(r) for r in read_all(log)] == before
    with LogManager([data_dir], read_only=True) as view:  # another process sees nothing of it either
        assert [plain(r) for r in read_all(view.get_log(TOPIC, 0))] == before
    after = records("after", 9, T0 + 900)
    if persistent:
        for _ in range(2):
            with pytest.raises(StorageError):
                log.append(after)
            assert log.log_end_offset == 12
        expected = before
    else:
        info = log.append(after)
        assert info.first_offset == 12 and info.last_offset == 20
        expected = before + after
    assert log.flush() == len(expected)  # the log is not fail-stop
    assert [plain(r) for r in read_all(log)] == expected
    fs.heal()
    store.close()
    assert reopen_and_read(data_dir) == expected


@pytest.mark.parametrize("torn", [False, True], ids=["nothing-written", "half-written"])
def test_failed_undo_of_a_write_makes_the_log_fail_stop(tmp_path, torn):
    data_dir = str(tmp_path / "data")
    fs = SpyFaultyFS({"pwrite", "truncate"}, persistent=True, torn=torn)
    store = open_store(data_dir, fs)
    log = store.get_log(TOPIC, 0)
    before = records("before", 10)
    log.append(before)
    log.flush()
    fs.arm(1)  # the write fails, then the truncate that would undo it
    with pytest.raises(LogFailedError) as failure:
        log.append(records("failed", 4, T0 + 500))
    assert caused_by_oserror(failure.value, errno.EIO)
    assert log.log_end_offset == 10
    assert [plain(r) for r in read_all(log)] == before, "readers never see the partial batch"
    fs.heal()
    for attempt in (lambda: log.append(records("later", 1)), log.flush, log.roll, lambda: log.truncate_to(3)):
        with pytest.raises(LogFailedError):
            attempt()
    store.close()
    assert reopen_and_read(data_dir)[:10] == before


def test_appends_after_a_failed_undo_and_reopen_are_not_lost(tmp_path):
    """The half-written batch that could not be cut stays at the tail; the reopen must cut it.
    (Regression: with the dir marked clean at close, the reopen kept it, and the next append was
    written after it: acknowledged and flushed, but unreadable and gone after another reopen.)"""
    data_dir = str(tmp_path / "data")
    fs = SpyFaultyFS({"pwrite", "truncate"}, persistent=True, torn=True)
    store = open_store(data_dir, fs)
    log = store.get_log(TOPIC, 0)
    log.append(records("before", 5))
    log.flush()
    fs.arm(1)
    with pytest.raises(LogFailedError):
        log.append([Record(b"k", b"x" * 200, (), T0)])
    fs.heal()
    store.close()
    with LogManager([data_dir]) as reopened:
        log = reopened.get_log(TOPIC, 0)
        assert log.append(records("after", 1)).first_offset == 5
        log.flush()
    assert reopen_and_read(data_dir) == records("before", 5) + records("after", 1)


# --- an error at every N-th operation of a workload ------------------------------------------------

WORKLOAD = [("append", 7), ("append", 3), ("flush",), ("append", 12), ("roll",), ("append", 5),
            ("flush",), ("truncate_to", 4), ("append", 6), ("append", 14), ("flush",), ("roll",),
            ("append", 2), ("truncate_to", 9), ("append", 3), ("flush",), ("append", 4), ("close",)]


class _Model:
    def __init__(self) -> None:
        self.content: list[Record] = []  # the longest log the store may legitimately hold
        self.acked = 0  # records [0, acked) were covered by a flush that returned: they must survive


def run_workload(template: str, data_dir: str, fs: SpyFaultyFS, fail_at: int | None) -> tuple[_Model, dict]:
    shutil.copytree(template, data_dir)
    store = open_store(data_dir, fs)
    log = store.get_log(TOPIC, 0)
    model = _Model()
    report = Counter()
    fs.arm(fail_at)
    failed = False  # the log went fail-stop
    for number, (step, *args) in enumerate(WORKLOAD):
        failures_before = fs.failures
        expected_end = len(model.content)
        try:
            if step == "append":
                batch = records(f"s{number}", args[0], T0 + 1000 * number)
                log.append(batch)
                model.content[expected_end:] = batch
            elif step == "flush":
                log.flush()
                model.acked = len(model.content)
            elif step == "roll":
                log.roll()
            elif step == "truncate_to":
                point = max(0, len(model.content) - args[0])
                model.acked = min(model.acked, point)  # whatever happens, the rest was given up
                log.truncate_to(point)
                del model.content[point:]
            elif step == "close":
                store.close()
                if not failed:  # a clean close flushes everything (a failed log's close cannot)
                    model.acked = len(model.content)
        except StorageError as exc:
            report["errors"] += 1
            if isinstance(exc, LogFailedError):
                failed = True
            if step == "truncate_to" and log.log_end_offset == point:
                del model.content[point:]  # it took effect; only what followed it (a checkpoint) failed
            if fs.failures > failures_before:
                assert caused_by_oserror(exc, fs.errno_code), f"step {number} {step}: {exc!r} lost its OSError"
        except OSError as exc:  # not wrapped: a finding, counted by the callers
            report["bare OSError"] += 1
            report[f"bare OSError from {step}: {_engine_frame(exc)}"] += 1
            if step == "truncate_to" and log.log_end_offset == point:
                del model.content[point:]  # it took effect; only what followed it failed
            if fs.failures > failures_before:
                assert exc.errno == fs.errno_code
        except BaseException as exc:  # noqa: BLE001 - anything else is a finding
            raise AssertionError(f"fault at op {fail_at}: step {number} {step} raised {exc!r}, "
                                 f"not a StorageError") from exc
        else:
            assert fs.failures == failures_before, (
                f"fault at op {fail_at}: step {number} {step} returned although an injected error hit it")
        if step != "close" and not failed:
            assert log.log_end_offset == len(model.content), f"fault at op {fail_at}: step {number} {step}"
    try:
        store.close()  # a no-op unless the close step raised before it was reached
    except StorageError:
        pass
    report["faults"] = fs.failures
    return model, report


@pytest.fixture(scope="module")
def workload_template(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("workload") / "template")
    open_store(data_dir, None).close()
    return data_dir


def test_workload_without_faults(workload_template, tmp_path):
    fs = SpyFaultyFS()
    model, report = run_workload(workload_template, str(tmp_path / "data"), fs, None)
    assert report["errors"] == 0 and report["faults"] == 0
    assert fs.calls >= 60, "the workload touches the file system enough to be worth injecting into"
    assert reopen_and_read(str(tmp_path / "data")) == model.content
    assert model.acked == len(model.content)




@pytest.fixture
def scratch(tmp_path):
    """A scratch dir on tmpfs when there is one (fsync costs nothing there; these tests inject
    their faults themselves and never rely on the disk), else ``tmp_path``."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = tempfile.mkdtemp(prefix="logstore-faults-", dir="/dev/shm")
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield str(tmp_path)


@pytest.mark.parametrize("persistent", [False, True], ids=["once", "persistent"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_error_at_every_operation_of_a_workload(workload_template, scratch, record_property, code, persistent):
    counting = SpyFaultyFS()
    run_workload(workload_template, os.path.join(scratch, "count"), counting, None)
    operations = counting.calls
    points = lost = bare = 0
    problems = []
    for fail_at in range(1, operations + 1):
        data_dir = os.path.join(scratch, f"fault-{fail_at}")
        fs = SpyFaultyFS(errno_code=code, persistent=persistent)
        model, report = run_workload(workload_template, data_dir, fs, fail_at)
        assert report["faults"] >= 1, f"op {fail_at} of {operations} was never reached"
        assert report["errors"] + report["bare OSError"] >= 1, f"an injected error at op {fail_at} went unreported"
        bare += report["bare OSError"]
        for key in report:
            if key.startswith("bare OSError from "):
                problems.append(f"op {fail_at}: {key}")
        got = reopen_and_read(data_dir)
        points += 1
        matching = next((i for i, (a, b) in enumerate(zip(got, model.content)) if a != b),
                        min(len(got), len(model.content)))
        if matching < model.acked:
            lost += model.acked - matching
            problems.append(f"op {fail_at}: {model.acked - matching} acked records lost ({len(got)} read)")
        if matching < len(got):
            problems.append(f"op {fail_at}: records that were never appended appeared ({len(got)} read, "
                            f"{len(model.content)} possible, first unexpected at offset {matching})")
        shutil.rmtree(data_dir)
    figure = f"fault points: {points}, acked records lost: {lost}"
    print(f"\n{errno.errorcode[code]} {'persistent' if persistent else 'once'}: {figure} "
          f"(errors raised as a bare OSError: {bare})")
    record_property("faults", figure)
    assert not problems, figure + "\n" + "\n".join(problems[:10])
    assert points == operations >= 60


def test_io_error_in_roll_is_a_storage_error(tmp_path):
    fs = SpyFaultyFS({"truncate"})
    store = open_store(str(tmp_path / "data"), fs)
    log = store.get_log(TOPIC, 0)
    log.append(records("a", 3))
    fs.arm(1)  # the trim of the old segment's index
    try:
        with pytest.raises(StorageError):
            log.roll()  # raises OSError
    finally:
        fs.heal()
        store.close()


def test_io_error_writing_checkpoints_in_truncate_to_is_a_storage_error(tmp_path):
    fs = SpyFaultyFS({"rename"})
    store = open_store(str(tmp_path / "data"), fs)
    log = store.get_log(TOPIC, 0)
    log.append(records("a", 3))
    log.append(records("b", 3))
    fs.arm(1)  # batch boundary, one segment: no rename but the checkpoint file's
    try:
        with pytest.raises(StorageError):
            log.truncate_to(3)  # raises OSError
    finally:
        fs.heal()
        store.close()




def test_io_error_while_loading_is_a_storage_error(tmp_path):
    data_dir = str(tmp_path / "data")
    with open_store(data_dir, None) as store:
        store.get_log(TOPIC, 0).append(records("a", 3))
    fs = SpyFaultyFS({"open_file"})
    fs.arm(1)  # the first segment file the loader opens
    with pytest.raises(StorageError):
        LogManager([data_dir], fs=fs)  # raises OSError from LogSegment.__init__
    assert reopen_and_read(data_dir) == records("a", 3)


# --- no leaked descriptors or mappings ---------------------------------------------------------------

def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _fds_under(root: str) -> list[str]:
    """The files under ``root`` this process holds open (by descriptor number reuse cannot hide)."""
    paths = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the descriptor listdir itself used
        if target.startswith(root):
            paths.append(target)
    return sorted(paths)


def _mappings_under(root: str) -> list[str]:
    with open("/proc/self/maps") as handle:
        return [line for line in handle if root in line]


def test_no_leaked_descriptors_or_mappings(tmp_path):
    data_dir = str(tmp_path / "data")
    fds = _open_fds()
    with LogManager([data_dir]) as store:
        store.create_topic(TOPIC, 2, CONFIG)
        log = store.get_log(TOPIC, 0)
        for i in range(20):
            log.append(records(f"r{i}", 1 + i % 7, T0 + 100 * i))
        log.roll()
        log.append(records("x", 5, T0 + 5000))
        log.truncate_to(log.log_end_offset - 2)  # the swap path
        log.truncate_to(log.segments[1].base_offset + 1)  # segments deleted
        log.delete_records(2)
        log.flush()
        assert read_all(log) and log.offset_for_timestamp(T0) is not None
        with LogManager([data_dir], read_only=True) as view:
            assert read_all(view.get_log(TOPIC, 0))
        with pytest.raises(LockedError):
            LogManager([data_dir])
        assert _mappings_under(data_dir), "the writer maps its active indexes"
    assert _open_fds() == fds and _fds_under(data_dir) == []
    assert _mappings_under(data_dir) == []
    # Reopen (load, recovery after a clean close) and close again.
    with LogManager([data_dir]) as store:
        assert read_all(store.get_log(TOPIC, 0))
    assert _open_fds() == fds
    assert _mappings_under(data_dir) == []


def test_no_leaks_after_faults(tmp_path):
    data_dir = str(tmp_path / "data")
    fds = _open_fds()
    fs = SpyFaultyFS({"fsync", "pwrite"}, persistent=True)
    store = open_store(data_dir, fs)
    log = store.get_log(TOPIC, 0)
    log.append(records("a", 30))
    log.roll()
    fs.arm(1)
    with pytest.raises(StorageError):
        log.append(records("b", 3))
    with pytest.raises(LogFailedError):
        log.flush()
    try:
        store.close()
    except StorageError:
        pass  # reporting the failed log (or the checkpoints it cannot write) is fine
    assert not os.path.exists(os.path.join(data_dir, CLEAN_SHUTDOWN_MARKER))
    assert _open_fds() == fds
    assert _mappings_under(data_dir) == []
    fs.heal()
    assert len(reopen_and_read(data_dir)) == 30
    assert _open_fds() == fds




def test_no_descriptor_leaks_when_opening_a_segment_fails(tmp_path):
    data_dir = str(tmp_path / "data")
    with open_store(data_dir, None) as store:
        store.get_log(TOPIC, 0).append(records("a", 3))
    gc.collect()  # earlier tests' failures leave mappings only a collection releases (traceback cycles)
    fds = _open_fds()
    fs = SpyFaultyFS({"open_file"})
    fs.arm(2)  # the loader opened 00000000000000000000.log; opening its .index fails
    with pytest.raises((StorageError, OSError)):
        LogManager([data_dir], fs=fs)
    gc.collect()
    assert _fds_under(data_dir) == []  # the .log descriptor leaked
    assert _open_fds() == fds
    store = open_store(data_dir, fs)
    fs.arm(2)  # roll: the new segment's .log is created, its .index fails
    with pytest.raises(StorageError):
        store.get_log(TOPIC, 0).roll()
    fs.heal()
    store.close()
    gc.collect()
    assert _fds_under(data_dir) == []
