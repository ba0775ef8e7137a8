"""The ``.txnindex`` of a segment (docs/FORMAT.md 2.4): its bytes, where an entry goes, its life
with the segment (roll, truncation, retention, reopen, a crash after a flush), and a damaged entry
rebuilt from the log and reported."""

from __future__ import annotations

import os
import random
import struct
import zlib
from pathlib import Path

import pytest

from logstore import LogManager, ManualClock, Record
from logstore.errors import CorruptIndexError
from logstore.log.txn_index import AbortedTxn, TransactionIndex, TxnIndexEntry, decode_entries
from logstore.records.batching import ProducerBatch
from logstore.testing import SimulatedCrashFileSystem

T0 = 1_700_000_000_000
RC = "read_committed"


def rec(i: int) -> Record:
    return Record(b"k%d" % i, b"v%d" % i, (), T0 + i)


def txn(pid: int) -> ProducerBatch:
    return ProducerBatch(pid, 0, 0, transactional=True)


def txnindex_files(log) -> list[str]:
    return sorted(name for name in os.listdir(log.dir_path) if ".txnindex" in name)


@pytest.fixture
def store(tmp_path):
    with LogManager([str(tmp_path)], clock=ManualClock(T0)) as store:
        store.create_topic("t", 1)
        yield store


@pytest.fixture
def log(store):
    return store.get_log("t", 0)


def golden(pid: int, first: int, last: int, lso: int) -> bytes:
    head = struct.pack("<qqqqHH", pid, first, last, lso, 0, 0)
    return head + struct.pack("<I", zlib.crc32(head))


def test_an_abort_writes_one_checksummed_40_byte_entry_and_a_commit_none(log):
    log.append([rec(0)], producer=txn(11))
    log.append_marker(11, 0, 0, commit=True)
    assert txnindex_files(log) == []  # no file until the first aborted transaction
    log.append([rec(1), rec(2)], producer=txn(12))  # 2-3
    log.append([rec(3)], producer=txn(13))  # 4: still open when 12 aborts
    log.append_marker(12, 0, 0, commit=False)  # 5
    log.append_marker(13, 0, 0, commit=False)  # 6
    assert txnindex_files(log) == ["00000000000000000000.txnindex"]
    data = Path(log.dir_path, "00000000000000000000.txnindex").read_bytes()
    assert data == golden(12, 2, 5, 4) + golden(13, 4, 6, 7)
    assert decode_entries(data, "x") == [TxnIndexEntry(12, 2, 5, 4), TxnIndexEntry(13, 4, 6, 7)]


@pytest.mark.parametrize("damage", ["crc", "length", "order"])
def test_a_damaged_file_is_refused_entry_by_entry(damage):
    data = bytearray(golden(1, 0, 5, 6) + golden(2, 6, 9, 10))
    if damage == "crc":
        data[50] ^= 0x01
    elif damage == "length":
        data = data[:-1]
    else:
        data = bytearray(golden(1, 0, 9, 10) + golden(2, 6, 5, 10))
    with pytest.raises(CorruptIndexError, match="x.txnindex"):
        decode_entries(bytes(data), "x.txnindex")


def test_an_abort_is_indexed_in_the_segment_of_its_marker(log):
    log.append([rec(0)], producer=txn(9))
    log.roll()
    log.append([rec(1)])
    log.append_marker(9, 0, 0, commit=False)
    assert txnindex_files(log) == ["00000000000000000001.txnindex"]
    assert log.segments[0].txn_index.entries == []
    assert log.aborted_transactions(0, 3) == [AbortedTxn(9, 0)]
    assert [record.value for record in log.read(0, isolation=RC)] == [b"v1"]


@pytest.mark.parametrize("seed", range(6))
def test_entries_survive_a_reopen_and_a_crash_after_a_flush(tmp_path, seed):
    fs = SimulatedCrashFileSystem()
    store = LogManager([str(tmp_path)], clock=ManualClock(T0), fs=fs)
    store.create_topic("t", 1)
    log = store.get_log("t", 0)
    log.append([rec(0)], producer=txn(1))
    log.append_marker(1, 0, 0, commit=False)
    log.flush()
    fs.crash(random.Random(seed))  # the entry was fsynced with the marker: intact, nothing to rebuild
    store = LogManager([str(tmp_path)], clock=ManualClock(T0), fs=fs)
    log = store.get_log("t", 0)
    assert log.aborted_transactions(0, 10) == [AbortedTxn(1, 0)]
    assert not [problem for problem in log.load_problems if ".txnindex" in problem]
    log.append([rec(1)], producer=txn(2))
    log.append_marker(2, 0, 0, commit=False)  # written, not fsynced: a power loss may take it with its marker
    fs.crash(random.Random(seed))
    store = LogManager([str(tmp_path)], clock=ManualClock(T0), fs=fs)
    log = store.get_log("t", 0)
    expected = [AbortedTxn(1, 0)] + ([AbortedTxn(2, 2)] if log.log_end_offset == 4 else [])
    assert log.aborted_transactions(0, 10) == expected
    # The first transaction's data stays hidden. (When the crash kept the second one's data but not
    # its marker, that transaction is open again: recovering open transactions is the producer-state
    # snapshots' part, not the index's.)
    assert b"v0" not in [record.value for record in log.read(0, isolation=RC)]
    store.close()
    store = LogManager([str(tmp_path)], clock=ManualClock(T0), fs=fs)
    assert store.get_log("t", 0).aborted_transactions(0, 10) == expected
    store.close()


def test_truncation_cuts_the_entries_with_the_markers(log):
    for pid in range(1, 5):
        log.append([rec(pid)], producer=txn(pid))
        log.append_marker(pid, 0, 0, commit=False)  # markers at 1, 3, 5, 7
        if pid == 2:
            log.roll()
    assert [e.last_offset for segment in log.segments for e in segment.txn_index.entries] == [1, 3, 5, 7]
    log.truncate_to(6)
    assert [e.last_offset for segment in log.segments for e in segment.txn_index.entries] == [1, 3, 5]
    assert os.path.getsize(log.segments[1].txn_index.path) == 40
    assert log.aborted_transactions(0, 10) == [AbortedTxn(1, 0), AbortedTxn(2, 2), AbortedTxn(3, 4)]
    log.truncate_to(3)  # the whole second segment goes, with its .txnindex
    assert txnindex_files(log) == ["00000000000000000000.txnindex"]
    assert log.aborted_transactions(0, 10) == [AbortedTxn(1, 0)]
    log.truncate_to(0)
    assert txnindex_files(log) == [] and log.aborted_transactions(0, 10) == []


def test_retention_deletes_the_txnindex_with_its_segment(log):
    log.append([rec(0)], producer=txn(1))
    log.append_marker(1, 0, 0, commit=False)
    log.roll()
    log.append([rec(1)])
    assert txnindex_files(log) == ["00000000000000000000.txnindex"]
    log.delete_records(2)
    assert txnindex_files(log) == []
    assert log.aborted_transactions(2, 3) == []


def test_a_damaged_entry_is_rebuilt_from_the_log_and_reported(log):
    log.append([rec(0)], producer=txn(1))
    log.append([rec(1)], producer=txn(2))
    log.append_marker(1, 0, 0, commit=False)  # 2: 2 still open, so the LSO after it is 1
    log.append_marker(2, 0, 0, commit=False)  # 3
    path = log.segments[0].txn_index.path
    good = Path(path).read_bytes()
    damaged = bytearray(good)
    damaged[45] ^= 0x40  # the second entry's first offset
    Path(path).write_bytes(bytes(damaged))
    log.segments[0].txn_index.reload()
    assert log.aborted_transactions(0, 4) == [AbortedTxn(1, 0), AbortedTxn(2, 1)]
    assert any("fails its checksum" in problem and "rebuilt" in problem for problem in log.load_problems)
    assert Path(path).read_bytes() == good
    assert [record.value for record in log.read(0, isolation=RC)] == []


def test_a_read_only_view_sees_the_aborted_transactions(tmp_path):
    with LogManager([str(tmp_path)], clock=ManualClock(T0)) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        log.append([rec(0)], producer=txn(1))
        log.append_marker(1, 0, 0, commit=False)
        log.flush()
        with LogManager([str(tmp_path)], read_only=True) as view:
            assert view.get_log("t", 0).aborted_transactions(0, 2) == [AbortedTxn(1, 0)]
            log.append([rec(1)], producer=txn(2))
            log.append_marker(2, 0, 0, commit=False)
            view_log = view.get_log("t", 0)
            view_log.refresh()
            assert view_log.aborted_transactions(0, 4) == [AbortedTxn(1, 0), AbortedTxn(2, 2)]


def test_the_index_file_on_its_own(tmp_path):
    from logstore.fs import FileSystem

    path = str(tmp_path / "00000000000000000000.txnindex")
    index = TransactionIndex(FileSystem(), path, present=False)
    assert index.entries == [] and not os.path.exists(path)
    index.append(TxnIndexEntry(1, 0, 3, 4))
    with pytest.raises(ValueError):
        index.append(TxnIndexEntry(2, 1, 3, 4))  # not after the last marker
    index.append(TxnIndexEntry(2, 1, 5, 6))
    index.flush()
    again = TransactionIndex(FileSystem(), path)
    assert again.entries == [TxnIndexEntry(1, 0, 3, 4), TxnIndexEntry(2, 1, 5, 6)]
    again.truncate_to(5)
    assert os.path.getsize(path) == 40 and again.entries == [TxnIndexEntry(1, 0, 3, 4)]
    again.rename_to(path + ".deleted")
    assert os.path.exists(path + ".deleted") and not os.path.exists(path)
    again.delete()
    assert not os.path.exists(path + ".deleted")


def test_the_entries_held_in_memory_are_bounded_and_read_again_when_needed(log, monkeypatch):
    from logstore.log import txn_index

    monkeypatch.setattr(txn_index, "LOADED", txn_index._LoadedIndexes(3))
    for pid in range(1, 7):  # two entries per segment, three segments
        log.append([rec(pid)], producer=txn(pid))
        log.append_marker(pid, 0, 0, commit=False)
        if pid % 2 == 0:
            log.roll()
    expected = [AbortedTxn(pid, 2 * (pid - 1)) for pid in range(1, 7)]
    for _ in range(2):
        assert log.aborted_transactions(0, 20) == expected
        assert txn_index.LOADED.entries <= 3 + 2  # the bound, plus the index in use
    held = [segment.txn_index._entries is not None for segment in log.segments[:3]]
    assert held.count(True) < 3  # some forgot theirs, and were read again from their files
    log.segments[0].close_handlers()
    assert log.segments[0].txn_index._entries is None
