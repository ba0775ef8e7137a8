"""The producer-state snapshot file format (logstore/log/producer_snapshot.py, docs/FORMAT.md 3.8):
golden bytes, every flipped byte refused, random round trips, and the file helpers."""

from __future__ import annotations

import os
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.errors import CorruptDataError, CorruptSnapshotError
from logstore.fs import OS_FILE_SYSTEM
from logstore.log.producer_snapshot import (ENTRY_BYTES, PRODUCER_BATCHES_FOLLOW, ProducerSnapshot, SnapshotEntry,
                                            decode_snapshot, delete_snapshots, encode_snapshot, list_snapshots,
                                            read_snapshot, snapshot_file_name, snapshot_offset, write_snapshot)

# Two producers at offset 100, flag set: pid 3 (epoch 0, no coordinator epoch yet, last offset 42,
# no open transaction) and pid 7 (epoch 2, coordinator epoch 5, last offset 99, transaction open at 90).
GOLDEN_ENTRIES = [SnapshotEntry(7, 2, 5, 99, 1_700_000_000_000, 90), SnapshotEntry(3, 0, -1, 42, 1_699_999_999_000, -1)]
GOLDEN = bytes.fromhex(
    "0100" "0100" "02000000"                      # version 1, flags PRODUCER_BATCHES_FOLLOW, 2 entries
    "0300000000000000" "0000" "0000" "ffffffff"   # pid 3, epoch 0, pad, coordinator epoch -1
    "2a00000000000000" "1864e5cf8b010000"         # last offset 42, last timestamp 1699999999000
    "ffffffffffffffff"                            # no open transaction
    "0700000000000000" "0200" "0000" "05000000"   # pid 7, epoch 2, pad, coordinator epoch 5
    "6300000000000000" "0068e5cf8b010000"         # last offset 99, last timestamp 1700000000000
    "5a00000000000000"                            # open transaction from offset 90
    "cf81a61b")                                   # crc32 of the 88 bytes before
EMPTY_GOLDEN = bytes.fromhex("0100" "0000" "00000000" "f7df88a9")


def test_golden_bytes():
    assert len(GOLDEN) == 8 + 2 * ENTRY_BYTES + 4
    assert int.from_bytes(GOLDEN[-4:], "little") == zlib.crc32(GOLDEN[:-4])
    assert encode_snapshot(100, GOLDEN_ENTRIES, batches_follow=True) == GOLDEN
    snapshot = decode_snapshot(GOLDEN, offset=100, path="p")
    assert snapshot == ProducerSnapshot(100, True, tuple(sorted(GOLDEN_ENTRIES)))
    assert encode_snapshot(0, [], batches_follow=False) == EMPTY_GOLDEN
    assert decode_snapshot(EMPTY_GOLDEN, offset=0, path="p") == ProducerSnapshot(0, False, ())


def test_flag_bit_is_bit_zero():
    assert PRODUCER_BATCHES_FOLLOW == 1
    clear = encode_snapshot(100, GOLDEN_ENTRIES, batches_follow=False)
    assert clear[2:4] == b"\x00\x00" and clear[4:-4] == GOLDEN[4:-4]


@pytest.mark.parametrize("position", range(len(GOLDEN)))
def test_every_flipped_byte_is_refused_naming_the_file(position):
    for flip in (0x01, 0x80, 0xFF):
        damaged = bytearray(GOLDEN)
        damaged[position] ^= flip
        with pytest.raises(CorruptSnapshotError, match="producer snapshot /d/x.snapshot"):
            decode_snapshot(bytes(damaged), offset=100, path="/d/x.snapshot")


@pytest.mark.parametrize("length", range(len(GOLDEN)))
def test_every_cut_is_refused(length):
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(GOLDEN[:length], offset=100, path="p")
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(GOLDEN + bytes(length + 1), offset=100, path="p")


def _with_crc(body: bytes) -> bytes:
    return body + zlib.crc32(body).to_bytes(4, "little")


@pytest.mark.parametrize("edit, message", [
    (lambda b: b"\x02\x00" + b[2:], "unknown version 2"),
    (lambda b: b[:2] + b"\x03\x00" + b[4:], "unknown flags"),
    (lambda b: b[:4] + b"\x03\x00\x00\x00" + b[8:], "do not hold the 3 entries"),
    (lambda b: b[:4] + b"\xff\xff\xff\xff" + b[8:], "do not hold the -1 entries"),
    (lambda b: b[:8] + b[48:88] + b[8:48], "does not follow"),  # unsorted
    (lambda b: b[:8] + b[8:48] + b[8:48], "does not follow"),  # a producer twice
    (lambda b: b[:18] + b"\x01\x00" + b[20:], "padding"),
    (lambda b: b[:16] + b"\xff\xff" + b[18:], "epoch -1"),
    (lambda b: b[:20] + b"\xfe\xff\xff\xff" + b[24:], "coordinator epoch -2"),
    (lambda b: b[:24] + (100).to_bytes(8, "little") + b[32:], "last offset 100 is not in"),
    (lambda b: b[:40] + (43).to_bytes(8, "little") + b[48:], "first offset 43"),
    (lambda b: b[:8] + (2**63).to_bytes(8, "little") + b[16:], "producer id -"),
])
def test_structural_rules_with_a_valid_crc(edit, message):
    body = edit(GOLDEN[:-4])
    with pytest.raises(CorruptSnapshotError, match=message):
        decode_snapshot(_with_crc(body), offset=100, path="p")


def test_corrupt_snapshot_is_corrupt_data():
    assert issubclass(CorruptSnapshotError, CorruptDataError)


@pytest.mark.parametrize("entries, message", [
    ([(1, 0, 0, 100, 0, -1)], "last offset 100"),
    ([(1, 0, 0, 5, 0, 6)], "first offset 6"),
    ([(1, 0, 0, 5, 0, -1), (1, 1, 0, 6, 0, -1)], "appears twice"),
    ([(-1, 0, 0, 5, 0, -1)], "producer id -1"),
    ([(1, 2**15, 0, 5, 0, -1)], "epoch 32768"),
    ([(1, 0, 2**31, 5, 0, -1)], "coordinator epoch"),
    ([(1, 0, 0, 5, 2**63, -1)], "last timestamp"),
])
def test_encode_refuses_impossible_entries(entries, message):
    with pytest.raises(ValueError, match=message):
        encode_snapshot(100, entries, batches_follow=False)


def test_encode_refuses_bad_offsets_and_types():
    with pytest.raises(ValueError, match="offset"):
        encode_snapshot(-1, [], batches_follow=False)
    with pytest.raises(TypeError):
        encode_snapshot(100, [(1, 0, 0, 5.0, 0, -1)], batches_follow=False)


_entries = st.lists(
    st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.integers(-1, 2**31 - 1),
              st.integers(0, 10**6), st.integers(-2**63, 2**63 - 1), st.booleans(), st.integers(0, 10**6)),
    max_size=20, unique_by=lambda t: t[0])


@settings(max_examples=200, deadline=None)
@given(_entries, st.booleans(), st.integers(0, 10**6))
def test_round_trip(raw, follow, extra):
    entries = [SnapshotEntry(pid, epoch, ce, last, ts, min(back, last) if txn else -1)
               for pid, epoch, ce, last, ts, txn, back in raw]
    offset = max((entry.last_offset for entry in entries), default=-1) + 1 + extra
    data = encode_snapshot(offset, entries, batches_follow=follow)
    assert len(data) == 12 + ENTRY_BYTES * len(entries)
    decoded = decode_snapshot(data, offset=offset, path="p")
    assert decoded.batches_follow is follow and decoded.offset == offset
    assert decoded.entries == tuple(sorted(entries))
    assert encode_snapshot(offset, decoded.entries, batches_follow=follow) == data


def test_names():
    assert snapshot_file_name(42) == "00000000000000000042.snapshot"
    assert snapshot_offset("00000000000000000042.snapshot") == 42
    for other in ("00000000000000000042.snapshot.tmp", "00000000000000000042.log", "0042.snapshot",
                  "0000000000000000004x.snapshot", "leader-epoch-checkpoint"):
        assert snapshot_offset(other) is None


def test_write_read_list_delete(tmp_path):
    directory = str(tmp_path)
    path = write_snapshot(OS_FILE_SYSTEM, directory, 100, GOLDEN_ENTRIES, batches_follow=True)
    assert path == os.path.join(directory, "00000000000000000100.snapshot")
    assert open(path, "rb").read() == GOLDEN
    write_snapshot(OS_FILE_SYSTEM, directory, 7, [], batches_follow=False)
    (tmp_path / "00000000000000000009.snapshot.tmp").write_bytes(b"leftover")
    assert list_snapshots(OS_FILE_SYSTEM, directory) == [7, 100]
    assert read_snapshot(OS_FILE_SYSTEM, directory, 100).entries == tuple(sorted(GOLDEN_ENTRIES))
    assert not os.path.exists(path + ".tmp")
    assert delete_snapshots(OS_FILE_SYSTEM, directory, [100, 55]) == 1
    assert list_snapshots(OS_FILE_SYSTEM, directory) == [7]
