"""The durability rules of docs/design.md §7, each tested where it is cheap to break.

Each test here is the one a planted mutant of ``scripts/mutants.py`` is expected to fail, and passes
on the real engine:

- ``write_file_atomic`` is durable when it returns (the directory fsync after the rename);
- a checkpoint is replaced crash-safely: a crash at any file operation of ``delete_records`` leaves
  the old or the new log start offset, never a lower one (records deleted come back), and no
  damaged checkpoint;
- recovery verifies every batch's checksum: a damaged last batch of an unclean log is cut;
- a torn tail (an incomplete last batch) of an unclean log is cut, logged and recorded, never an error;
- ``truncate_to`` removes exactly the records from the offset on, in memory and on disk;
- the clean-shutdown marker is durable only after every log's data: a power loss at any file
  operation of ``close()`` that leaves the marker leaves every record appended before it;
- a lying offset index entry is never trusted by a read-only view: a read returns the records at
  the offset asked for.
"""

from __future__ import annotations

import os
import random
import shutil
import struct

import pytest

from logstore import LogManager, Record
from logstore.clock import ManualClock
from logstore.config import LogConfig
from logstore.fs import OS_FILE_SYSTEM
from logstore.log.checkpoint import CLEAN_SHUTDOWN_MARKER
from logstore.log.log import Log
from logstore.testing import SimulatedCrashFileSystem
from crash_helpers import PowerCut as _Cut, PowerCutFS as CutFS

TOPIC = "t"
SMALL = {"segment.bytes": 1024, "index.interval.bytes": 64, "segment.index.bytes": 4096}


def _records(start: int, count: int) -> list[Record]:
    return [Record(key=b"k%d" % (offset % 7), value=b"value-%d-" % offset + b"x" * 30, timestamp_ms=1000 + offset)
            for offset in range(start, start + count)]


def _values(store: LogManager, partition: int = 0) -> dict[int, bytes]:
    return {record.offset: record.value for record in store.get_log(TOPIC, partition).iter_records()}


def _operations(run) -> int:
    """How many mutating file operations ``run(fs)`` makes once armed (the fs is armed by ``run``)."""
    fs = CutFS()
    run(fs)
    return fs.count


# --- write_file_atomic ----------------------------------------------------------------------------


def test_write_file_atomic_is_durable_when_it_returns(tmp_path):
    """After ``write_file_atomic`` returns, no power loss brings the old content back (the rename is
    made durable by the directory fsync)."""
    path = str(tmp_path / "checkpoint")
    OS_FILE_SYSTEM.write_file_atomic(path, b"old")
    OS_FILE_SYSTEM.fsync_dir(str(tmp_path))
    for seed in range(20):
        fs = SimulatedCrashFileSystem()
        fs.write_file_atomic(path, b"new %d" % seed)
        report = fs.crash(random.Random(seed))
        with open(path, "rb") as handle:
            assert handle.read() == b"new %d" % seed, report


# --- checkpoints are replaced, not rewritten in place ---------------------------------------------


def _delete_records_store(root) -> list[str]:
    dirs = [str(root)]
    with LogManager(dirs) as store:
        store.create_topic(TOPIC, 1, SMALL)
        for start in range(0, 120, 10):
            store.append(TOPIC, _records(start, 10), partition=0)
        store.get_log(TOPIC, 0).delete_records(15)  # inside the first segment: the checkpoint holds 15
    return dirs


def test_a_crash_at_any_operation_of_delete_records_keeps_the_log_start_offset(tmp_path):
    """A kill at every file operation of ``delete_records(55)``: the next open's log start offset is
    15 (the old one) or 55, never lower: records once deleted never come back."""
    template = _delete_records_store(tmp_path / "template")

    def run(fs: CutFS, root=template[0]) -> None:
        store = LogManager([root], fs=fs)
        fs.armed = True
        try:
            store.get_log(TOPIC, 0).delete_records(55)
            store.close()
        except _Cut:
            pass
        fs.crash(random.Random(0), lose_unsynced=False)

    work = str(tmp_path / "work")
    shutil.copytree(template[0], work)
    total = _operations(lambda fs: run(fs, work))
    assert total >= 3
    for cut_at in range(1, total + 1):
        shutil.rmtree(work)
        shutil.copytree(template[0], work)
        run(CutFS(cut_at), work)
        with LogManager([work], read_only=True) as view:
            log = view.get_log(TOPIC, 0)
            assert log.log_start_offset in (15, 55), (cut_at, log.log_start_offset, view.problems)
            assert min(_values(view)) == log.log_start_offset
            # Each file holds its old or new content: at most the two homes of the log start offset
            # disagree (a kill between their writes), never a damaged checkpoint.
            assert all("disagree" in problem for problem in view.problems), (cut_at, view.problems)


# --- recovery -------------------------------------------------------------------------------------


def _unclean_log(path: str, flushed: int, unflushed: int) -> tuple[int, int]:
    """A standalone log with ``flushed`` records flushed then ``unflushed`` more in batches of 5,
    left without a close (a process crash). Returns (recovery point, position of the last batch)."""
    config = LogConfig.from_properties({"segment.bytes": 1 << 20})
    os.makedirs(path)
    log = Log(path, config, fs=OS_FILE_SYSTEM, clock=ManualClock(10**6))
    for start in range(0, flushed, 5):
        log.append(_records(start, 5))
    recovery_point = log.flush()
    for start in range(flushed, flushed + unflushed, 5):
        log.append(_records(start, 5))
    last_position = log.active_segment.size_bytes - _batch_size(log)
    log.close_handlers()  # no flush, no clean state: the next open recovers
    return recovery_point, last_position


def _batch_size(log: Log) -> int:
    segment = log.active_segment
    *_, (_, header, _, _) = segment.scan_headers(0)
    return header.size_bytes


def _reopen(path: str, recovery_point: int) -> Log:
    return Log(path, LogConfig.from_properties({"segment.bytes": 1 << 20}), fs=OS_FILE_SYSTEM,
               clock=ManualClock(10**6), recovery_point=recovery_point, clean_shutdown=False)


def test_recovery_cuts_a_last_batch_whose_checksum_fails(tmp_path):
    """After a crash, a flipped byte in the body of the last batch (above the recovery point) is
    found by the checksum: recovery cuts the batch, logs and records it."""
    path = str(tmp_path / "p-0")
    recovery_point, last_position = _unclean_log(path, 20, 20)
    segment_path = os.path.join(path, f"{0:020d}.log")
    size = os.path.getsize(segment_path)
    with open(segment_path, "r+b") as handle:  # a byte of the last record's value
        handle.seek(size - 3)
        byte = handle.read(1)[0]
        handle.seek(size - 3)
        handle.write(bytes([byte ^ 0x5A]))
    log = _reopen(path, recovery_point)
    try:
        assert log.log_end_offset == 35
        assert [record.offset for record in log.iter_records()] == list(range(35))
        assert any("00000000000000000000.log" in problem for problem in log.load_problems)  # recorded
    finally:
        log.close()
    assert os.path.getsize(segment_path) == last_position


@pytest.mark.parametrize("cut_bytes", [1, 20])
def test_a_torn_tail_after_a_crash_is_cut_not_an_error(tmp_path, cut_bytes):
    """An incomplete last batch after a crash is end-of-log: the open succeeds and cuts it."""
    path = str(tmp_path / "p-0")
    recovery_point, _ = _unclean_log(path, 20, 20)
    segment_path = os.path.join(path, f"{0:020d}.log")
    os.truncate(segment_path, os.path.getsize(segment_path) - cut_bytes)
    log = _reopen(path, recovery_point)
    try:
        assert log.log_end_offset == 35
        assert [record.offset for record in log.iter_records()] == list(range(35))
        assert any("00000000000000000000.log" in problem for problem in log.load_problems)  # recorded
        log.append(_records(35, 5))
        assert [record.offset for record in log.iter_records()][-1] == 39
    finally:
        log.close()


# --- truncation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [0, 10, 13, 25, 35, 39])
def test_truncate_to_cuts_whole_batches_at_the_offset(tmp_path, offset):
    """``truncate_to(offset)`` removes every record from ``offset`` on (a batch holding it is
    rewritten without them), in memory and on disk: the next open, recovering from scratch, finds
    exactly the records below it."""
    path = str(tmp_path / "p-0")
    config = LogConfig.from_properties({"segment.bytes": 1 << 20})
    os.makedirs(path)
    log = Log(path, config, fs=OS_FILE_SYSTEM, clock=ManualClock(10**6))
    for start in range(0, 40, 5):
        log.append(_records(start, 5))
    log.truncate_to(offset)
    assert log.log_end_offset == offset
    assert [record.offset for record in log.iter_records()] == list(range(offset))
    log.close_handlers()
    again = _reopen(path, 0)
    try:
        assert again.log_end_offset == offset
        assert [record.offset for record in again.iter_records()] == list(range(offset))
    finally:
        again.close()


# --- the clean-shutdown marker ----------------------------------------------------------------------


def test_the_clean_marker_is_durable_only_after_the_data(tmp_path):
    """A power loss at every file operation of ``close()`` after unflushed appends: wherever the
    clean-shutdown marker survives, every record appended before ``close()`` survives too (the
    marker says the next open may skip recovery)."""
    template = str(tmp_path / "template")
    with LogManager([template]) as store:
        store.create_topic(TOPIC, 1, SMALL)
        store.append(TOPIC, _records(0, 30), partition=0, acks="all")
    work = str(tmp_path / "work")

    def run(fs: CutFS, seed: int) -> None:
        store = LogManager([work], fs=fs)
        for start in range(30, 60, 5):
            store.append(TOPIC, _records(start, 5), partition=0)  # page cache only
        fs.armed = True
        try:
            store.close()
        except _Cut:
            pass
        fs.crash(random.Random(seed))

    shutil.copytree(template, work)
    total = _operations(lambda fs: run(fs, 0))
    marked = 0
    for cut_at in range(1, total + 2):  # total + 1: close completes, then the power goes
        for seed in range(3):
            shutil.rmtree(work)
            shutil.copytree(template, work)
            run(CutFS(cut_at), seed)
            if not os.path.exists(os.path.join(work, CLEAN_SHUTDOWN_MARKER)):
                continue
            marked += 1
            with LogManager([work], read_only=True) as view:
                assert sorted(_values(view)) == list(range(60)), (cut_at, seed)
    assert marked, "some cut points leave the marker"


# --- the offset index -------------------------------------------------------------------------------


def test_a_read_only_view_never_trusts_a_lying_index_entry(tmp_path):
    """A read-only view of a store whose offset index has an entry pointing at the wrong batch: a
    read at any offset returns the records from that offset (or reports the damage), never others."""
    from logstore.errors import CorruptDataError

    data_dir = str(tmp_path / "store")
    with LogManager([data_dir]) as store:
        store.create_topic(TOPIC, 1, {"segment.bytes": 1 << 20, "index.interval.bytes": 64})
        for start in range(0, 200, 5):
            store.append(TOPIC, _records(start, 5), partition=0)
    index_path = os.path.join(data_dir, f"{TOPIC}-0", f"{0:020d}.index")
    with open(index_path, "r+b") as handle:
        data = handle.read()
        entries = len(data) // 8
        assert entries >= 4
        # entry 2 keeps its offset but takes entry 3's position: it points at a later batch
        relative, _ = struct.unpack_from("<ii", data, 16)
        _, position = struct.unpack_from("<ii", data, 24)
        handle.seek(16)
        handle.write(struct.pack("<ii", relative, position))
    with LogManager([data_dir], read_only=True) as view:
        log = view.get_log(TOPIC, 0)
        for offset in range(0, 200, 3):
            try:
                got = [record.offset for record in log.read(offset, max_records=2)]
            except CorruptDataError:
                continue
            assert got == [offset, offset + 1], offset
