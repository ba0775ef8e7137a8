"""``logstore.tools.dump`` and ``logstore dump``: each file type shows the numbers that were written."""

from __future__ import annotations

import json
import os
import re

import pytest
from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.cli.main import main
from logstore.tools.dump import BATCH_CORRUPT, BATCH_OK, BATCH_TORN, dump_file, read_index_file, scan_log_file

SEGMENT = "00000000000000000000"
BATCH_SIZES = [2, 3, 1, 5]


@pytest.fixture
def partition_dir(tmp_path):
    """Partition ``t-0`` with one batch per entry of BATCH_SIZES; batch b has timestamps 1000*(b+1)+i."""
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", config={"index.interval.bytes": 1})  # an index entry after every batch
        for number, size in enumerate(BATCH_SIZES):
            store.append("t", [Record(key=b"k%d" % i, value=b"v%d-%d" % (number, i), headers=[("h", b"%d" % i)],
                                      timestamp_ms=1000 * (number + 1) + i) for i in range(size)])
    return tmp_path / "t-0"


def fields(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+): (\S+)", line))


def batch_lines(lines):
    return [fields(line) for line in lines if line.startswith("position: ") and "base_offset" in line]


def test_log_dump_shows_each_batch(partition_dir):
    path = str(partition_dir / f"{SEGMENT}.log")
    lines = list(dump_file(path))
    assert lines[0].endswith(f"base offset 0, {os.path.getsize(path)} bytes")
    batches = batch_lines(lines)
    assert [int(b["count"]) for b in batches] == BATCH_SIZES
    bases = [sum(BATCH_SIZES[:n]) for n in range(len(BATCH_SIZES))]
    assert [int(b["base_offset"]) for b in batches] == bases
    assert [int(b["last_offset"]) for b in batches] == [base + size - 1 for base, size in zip(bases, BATCH_SIZES)]
    assert [int(b["base_timestamp_ms"]) for b in batches] == [1000 * (n + 1) for n in range(len(BATCH_SIZES))]
    assert [int(b["max_timestamp_ms"]) for b in batches] == [1000 * (n + 1) + size - 1
                                                              for n, size in enumerate(BATCH_SIZES)]
    positions = [int(b["position"]) for b in batches]
    sizes = [int(b["size_bytes"]) for b in batches]
    assert positions == [sum(sizes[:n]) for n in range(len(sizes))] and sum(sizes) == os.path.getsize(path)
    assert all(line.endswith(" ok") for line in lines if "base_offset" in line)
    assert lines[-1] == f"Summary: 4 batches (0 corrupt), 11 records in valid batches, {sum(sizes)} bytes, no torn tail"


def test_log_dump_with_records(partition_dir):
    result = CliRunner().invoke(main, ["dump", str(partition_dir / f"{SEGMENT}.log"), "--records"])
    assert result.exit_code == 0
    records = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert len(records) == sum(BATCH_SIZES)
    assert records[2] == "| offset: 2 timestamp_ms: 2000 key: b'k0' value: b'v1-0' headers: [h=b'0']"
    assert [int(fields(line)["offset"]) for line in records] == list(range(sum(BATCH_SIZES)))


def test_offset_index_dump_points_at_the_batches(partition_dir):
    path = str(partition_dir / f"{SEGMENT}.index")
    lines = list(dump_file(path))
    entries = [(int(f["offset"]), int(f["position"])) for f in map(fields, lines[1:])]
    assert entries and entries == read_index_file(path, "offset index", 0)[0]
    assert f"{len(entries)} entries" in lines[0]
    base_offset_at = {e.position: e.header.base_offset for e in scan_log_file(str(partition_dir / f"{SEGMENT}.log"))}
    assert all(base_offset_at[position] == offset for offset, position in entries)


def test_time_index_dump_shows_timestamps(partition_dir):
    lines = list(dump_file(str(partition_dir / f"{SEGMENT}.timeindex")))
    entries = [(int(f["timestamp_ms"]), int(f["offset"])) for f in map(fields, lines[1:])]
    ends = [sum(BATCH_SIZES[: n + 1]) - 1 for n in range(len(BATCH_SIZES))]
    expected = [(1000 * (n + 1) + size - 1, end) for n, (size, end) in enumerate(zip(BATCH_SIZES, ends))]
    assert entries[-1] == expected[-1]  # the final entry written at close
    assert set(entries) <= set(expected) and entries == sorted(entries)


def test_checkpoint_dump(partition_dir):
    path = str(partition_dir.parent / "recovery-point-offset-checkpoint")
    entry = f"topic: t partition: 0 offset: {sum(BATCH_SIZES)}"
    assert list(dump_file(path)) == [f"Dumping {path}: offset checkpoint (version 1), 1 entries", entry]
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "ab") as f:
        f.write(b"garbage\n")  # the second copy no longer matches: the first is shown
    lines = list(dump_file(path))
    assert lines[1].startswith("damaged copy: second copy differs") and lines[2:] == [entry]
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2 - 3] + b"\ngarbage\n")  # both copies lost
    lines = list(dump_file(path))
    assert "DAMAGED" in lines[0] and lines[-1] == "| garbage"
    with open(path, "wb") as f:
        f.write(b"0\n1\nt 0 7\n")  # version 0, as earlier versions wrote it
    assert list(dump_file(path)) == [f"Dumping {path}: offset checkpoint (version 0), 1 entries",
                                     "topic: t partition: 0 offset: 7"]


def test_dump_refuses_what_is_not_a_regular_file(tmp_path):
    """A FIFO named like a segment would block the read forever; it is refused at once."""
    fifo = tmp_path / f"{SEGMENT}.log"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        list(dump_file(str(fifo)))


def test_torn_tail_is_shown_not_raised(partition_dir):
    path = str(partition_dir / f"{SEGMENT}.log")
    last = list(scan_log_file(path))[-1]
    os.truncate(path, last.position + last.size_bytes - 10)
    entries = list(scan_log_file(path))
    assert [e.status for e in entries] == [BATCH_OK] * 3 + [BATCH_TORN]
    result = CliRunner().invoke(main, ["dump", path, "--records"])
    assert result.exit_code == 0 and "Traceback" not in result.output
    out = result.stdout.splitlines()
    assert out[-2] == (f"position: {last.position} torn tail: {last.size_bytes - 10} bytes of an incomplete batch "
                       "(an interrupted append; recovery cuts it at the next writable open)")
    assert out[-1].startswith("Summary: 3 batches (0 corrupt), 6 records in valid batches, torn tail of")


def test_torn_header_and_corrupt_batch(partition_dir):
    path = str(partition_dir / f"{SEGMENT}.log")
    entries = list(scan_log_file(path))
    with open(path, "r+b") as f:
        f.seek(entries[1].position + 60)  # a body byte of the second batch
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 1]))
    os.truncate(path, entries[-1].position + 5)  # only 5 bytes of the last batch's header
    scanned = list(scan_log_file(path))
    assert [e.status for e in scanned] == [BATCH_OK, BATCH_CORRUPT, BATCH_OK, BATCH_TORN]
    lines = list(dump_file(path, records=True))
    assert "BAD (batch checksum mismatch" in batch_line_at(lines, entries[1].position)
    assert lines[-1].startswith("Summary: 3 batches (1 corrupt), 3 records in valid batches, torn tail of 5 bytes")


def batch_line_at(lines, position):
    return next(line for line in lines if line.startswith(f"position: {position} "))


def test_renamed_segment_files_are_dumped_too(partition_dir):
    source = partition_dir / f"{SEGMENT}.log"
    target = partition_dir / f"{SEGMENT}.log.deleted"
    os.rename(source, target)
    assert len(batch_lines(dump_file(str(target)))) == len(BATCH_SIZES)


def test_unknown_file_kind_is_an_error(partition_dir):
    with pytest.raises(ValueError, match="cannot tell what kind of file"):
        list(dump_file(str(partition_dir.parent / "topics.json")))


# --- producer batches and transaction markers ----------------------------------------------------


def write_transactional_segment(path):
    """A segment of: a plain batch (0..1), producer 7 epoch 2's transaction (2..4) and its COMMIT
    marker (5, coordinator epoch 4), producer 8's batch (6) and its ABORT marker (7)."""
    from logstore.records.encoder import assign_base_offset, encode_batch, encode_marker_batch

    batches = [encode_batch([Record(b"k", b"plain", (), 100)] * 2),
               encode_batch([Record(b"k", b"t%d" % i, (), 200) for i in range(3)], producer=(7, 2, 0),
                            transactional=True, base_offset=2),
               encode_marker_batch(True, 4, 7, 2, timestamp_ms=300),
               encode_batch([Record(b"k", b"aborted", (), 400)], producer=(8, 0, 5), transactional=True,
                            base_offset=6),
               encode_marker_batch(False, 4, 8, 0, timestamp_ms=500)]
    assign_base_offset(batches[2], 5)
    assign_base_offset(batches[4], 7)
    path.write_bytes(b"".join(batches))
    return path


def test_log_dump_shows_producers_and_markers(tmp_path):
    path = str(write_transactional_segment(tmp_path / f"{SEGMENT}.log"))
    lines = [line for line in dump_file(path) if line.startswith("position: ")]
    assert [int(fields(line)["base_offset"]) for line in lines] == [0, 2, 5, 6, 7]
    assert "producer=" not in lines[0] and "marker" not in lines[0]
    assert " producer=7/2 seq=0 txn crc: " in lines[1]
    assert " producer=7/2 seq=-1 txn COMMIT marker coordinator_epoch=4 crc: " in lines[2]
    assert " producer=8/0 seq=5 txn crc: " in lines[3] and "marker" not in lines[3]
    assert " producer=8/0 seq=-1 txn ABORT marker coordinator_epoch=4 crc: " in lines[4]
    assert all(line.endswith(" ok") for line in lines)


def test_log_dump_json_shows_producers_and_markers(tmp_path):
    path = str(write_transactional_segment(tmp_path / f"{SEGMENT}.log"))
    result = CliRunner().invoke(main, ["dump", path, "--format", "json"])
    assert result.exit_code == 0, result.output
    batches = json.loads(result.stdout)["batches"]
    assert [batch["producer"] for batch in batches] == [
        None, {"producer_id": 7, "producer_epoch": 2, "base_sequence": 0, "transactional": True},
        {"producer_id": 7, "producer_epoch": 2, "base_sequence": -1, "transactional": True},
        {"producer_id": 8, "producer_epoch": 0, "base_sequence": 5, "transactional": True},
        {"producer_id": 8, "producer_epoch": 0, "base_sequence": -1, "transactional": True}]
    assert [batch["marker"] for batch in batches] == [None, None, {"type": "COMMIT", "coordinator_epoch": 4}, None,
                                                      {"type": "ABORT", "coordinator_epoch": 4}]


def test_a_damaged_producer_batch_shows_no_producer(tmp_path):
    path = write_transactional_segment(tmp_path / f"{SEGMENT}.log")
    data = bytearray(path.read_bytes())
    second = next(entry for entry in scan_log_file(str(path)) if entry.header.base_offset == 2)
    data[second.position + 60] ^= 0xFF  # inside its producer block: the body CRC fails
    path.write_bytes(bytes(data))
    lines = [line for line in dump_file(str(path)) if line.startswith("position: ")]
    assert "BAD" in lines[1] and "producer=" not in lines[1]
    assert " producer=7/2 seq=-1 txn COMMIT marker" in lines[2]


def write_snapshot_file(directory, offset=6, batches_follow=True):
    from logstore.fs import OS_FILE_SYSTEM
    from logstore.log.producer_snapshot import write_snapshot

    return write_snapshot(OS_FILE_SYSTEM, str(directory), offset, [(8, 0, -1, 5, 1700000000000, 2),
                                                                     (7, 2, 4, 3, 300, -1)],
                          batches_follow=batches_follow)


def test_snapshot_dump_shows_each_producer(tmp_path):
    path = write_snapshot_file(tmp_path)
    lines = list(dump_file(path))
    assert lines[0] == (f"Dumping {path}: producer snapshot, state before offset 6, 2 producers, producer batches "
                        f"may follow (a load replays from here), {os.path.getsize(path)} bytes")
    assert [fields(line) for line in lines[1:]] == [
        {"producer_id": "7", "epoch": "2", "coordinator_epoch": "4", "last_offset": "3", "last_timestamp_ms": "300",
         "txn_first_offset": "-1"},
        {"producer_id": "8", "epoch": "0", "coordinator_epoch": "-1", "last_offset": "5",
         "last_timestamp_ms": "1700000000000", "txn_first_offset": "2"}]
    assert "exact (no replay)" in next(dump_file(write_snapshot_file(tmp_path, 9, batches_follow=False)))
    assert "last_timestamp: 2023-11-14T22:13:20.000Z" in list(dump_file(path, timestamps="iso"))[2]


def test_snapshot_dump_json_and_damage(tmp_path):
    path = write_snapshot_file(tmp_path)
    result = CliRunner().invoke(main, ["dump", path, "--format", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["kind"], document["base_offset"], document["batches_follow"], document["error"]) == \
        ("producer snapshot", 6, True, None)
    assert document["entries"][1] == {"producer_id": 8, "epoch": 0, "coordinator_epoch": -1, "last_offset": 5,
                                      "last_timestamp_ms": 1700000000000, "txn_first_offset": 2}
    with open(path, "r+b") as file:
        file.seek(10)
        file.write(b"\xff")
    lines = list(dump_file(path))
    assert len(lines) == 1 and "DAMAGED" in lines[0] and "CRC mismatch" in lines[0] and path in lines[0]
    damaged = json.loads(CliRunner().invoke(main, ["dump", path, "--format", "json"]).stdout)
    assert damaged["entries"] == [] and "CRC mismatch" in damaged["error"]


def test_txnindex_dump_shows_the_aborted_transactions(tmp_path):
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t")
        log = store.get_log("t", 0)
        from logstore.records.batching import ProducerBatch

        log.append([Record(value=b"a")], producer=ProducerBatch(4, 0, 0, True))
        log.append([Record(value=b"b")], producer=ProducerBatch(5, 1, 0, True))
        log.append_marker(4, 0, 2, False)  # offset 2: producer 5 still open from 1
        log.append_marker(5, 1, 2, False)  # offset 3
    path = str(tmp_path / "t-0" / f"{SEGMENT}.txnindex")
    lines = list(dump_file(path))
    assert lines[0] == f"Dumping {path}: transaction index (aborted transactions), base offset 0, 2 entries, 80 bytes"
    assert [fields(line) for line in lines[1:]] == [
        {"entry": "0", "producer_id": "4", "first_offset": "0", "last_offset": "2", "last_stable_offset": "1"},
        {"entry": "1", "producer_id": "5", "first_offset": "1", "last_offset": "3", "last_stable_offset": "4"}]
    document = json.loads(CliRunner().invoke(main, ["dump", path, "--format", "json"]).stdout)
    assert (document["kind"], document["error"], document["entries"][1]) == (
        "transaction index", None,
        {"producer_id": 5, "first_offset": 1, "last_offset": 3, "last_stable_offset": 4})
    with open(path, "r+b") as file:
        file.seek(41)
        file.write(b"\xff")
    damaged = list(dump_file(path))
    assert len(damaged) == 1 and "DAMAGED" in damaged[0] and "entry 1 fails its checksum" in damaged[0]
    assert "fails its checksum" in json.loads(CliRunner().invoke(main, ["dump", path, "--format", "json"]).stdout)["error"]
