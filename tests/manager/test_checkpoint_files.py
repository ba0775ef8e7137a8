"""Every metadata file the store writes carries a version and a checksum; damage is survived
(two copies of each checkpoint) or reported, never silently used. Covers the offset checkpoints
(recovery point, log start offset, cleaner), the clean-shutdown marker and topics.json: every
single-byte flip and every truncation of a small file, old-format files, and one damage scenario in full
(delete_records, then a flipped byte in log-start-offset-checkpoint, then a writable open)."""

from __future__ import annotations

import json
import os

import pytest

from logstore import LogManager, Record
from logstore.errors import CorruptCheckpointError, OffsetOutOfRangeError
from logstore.log.checkpoint import (CLEAN_SHUTDOWN_MARKER, LOG_START_OFFSET_CHECKPOINT,
                                     RECOVERY_POINT_CHECKPOINT,
                                     format_clean_shutdown_marker, format_offsets, parse_checkpoint,
                                     parse_clean_shutdown_marker)
from logstore.manager.topics import TOPICS_FILE, TopicsFile
from logstore.fs import OS_FILE_SYSTEM
from logstore.tools.check import verify_store

PARTITION_LOG_START_OFFSET = "log-start-offset"  # the partition's own copy
ENTRIES = {("orders", 0): 1200, ("orders", 1): 1187, ("t", 0): 20}


def damaged_variants(data: bytes):
    """Every single-byte flip (all eight bits, and a zero) and every truncation of ``data``."""
    for position in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            yield f"flip {mask:#x} at {position}", data[:position] + bytes([data[position] ^ mask]) + data[position + 1:]
        if data[position]:
            yield f"zero at {position}", data[:position] + b"\0" + data[position + 1:]
    for length in range(len(data)):
        yield f"cut to {length}", data[:length]


def test_every_flip_and_cut_of_an_offset_checkpoint_is_survived_or_reported():
    data = format_offsets(ENTRIES)
    survived = reported = 0
    for how, damaged in damaged_variants(data):
        try:
            contents = parse_checkpoint(damaged, "cp")
        except CorruptCheckpointError as exc:
            assert "cp" in str(exc)  # the error names the file
            reported += 1
            continue
        assert contents.entries == ENTRIES, how  # never wrong values
        survived += 1
    # Two copies: any one flip, and any cut that leaves the first copy whole, is survived.
    assert reported == len(data) // 2  # only cuts inside the first copy (or to nothing) are lost
    assert survived > 3 * len(data)
    print(f"offset checkpoint of {len(data)} bytes: {survived} damaged variants survived, {reported} reported")


def test_a_damaged_copy_is_noticed_even_when_the_other_is_used():
    data = format_offsets(ENTRIES)
    half = len(data) // 2
    first_damaged = data[:5] + b"X" + data[6:]
    assert parse_checkpoint(first_damaged, "cp").damaged_copies
    second_damaged = data[:half + 20] + b"X" + data[half + 21:]
    assert parse_checkpoint(second_damaged, "cp").damaged_copies
    assert parse_checkpoint(data, "cp").damaged_copies == []


def test_old_version_0_checkpoints_are_still_read():
    legacy = b"0\n3\norders 0 1200\norders 1 1187\nt 0 20\n"
    contents = parse_checkpoint(legacy, "cp")
    assert contents.entries == ENTRIES and contents.version == 0
    assert parse_checkpoint(b"0\n0\n", "cp").entries == {}
    with pytest.raises(CorruptCheckpointError, match="cp"):
        parse_checkpoint(b"0\n2\norders 0 1200\n", "cp")
    with pytest.raises(CorruptCheckpointError, match="empty"):
        parse_checkpoint(b"", "cp")  # no version ever wrote an empty checkpoint


def test_every_flip_and_cut_of_the_clean_shutdown_marker_is_detected():
    data = format_clean_shutdown_marker(1_700_000_000_000)
    assert parse_clean_shutdown_marker(data, "m") == 1_700_000_000_000
    assert parse_clean_shutdown_marker(b'{"version": 0, "shutdown_ms": 5}', "m") == 5  # old marker
    for how, damaged in damaged_variants(data):
        try:
            value = parse_clean_shutdown_marker(damaged, "m")
        except CorruptCheckpointError:
            continue
        assert value == 1_700_000_000_000, how  # only a whitespace change can pass, with the right value


def test_every_flip_and_cut_of_topics_json_is_survived_or_reported(tmp_path):
    """topics.json has a version and a CRC, and holds its object twice: with one data dir, one damaged
    byte or a cut second copy is survived with the right topics; the rest fails the open with an error
    naming the file, never a wrong topic list."""
    from logstore.manager.topics import TopicMetadata, parse_topics_file

    topics = TopicsFile(OS_FILE_SYSTEM, [str(tmp_path)])
    topics.load()
    topics.topics = {"orders": TopicMetadata(4, {"cleanup.policy": "compact"})}
    topics.save()
    path = tmp_path / TOPICS_FILE
    data = path.read_bytes()
    copy = data[: len(data) // 2]
    assert data == copy + copy and json.loads(copy)["version"] == 3 and "crc32" in json.loads(copy)
    expected = {"orders": {"partitions": 4, "config": {"cleanup.policy": "compact"}, "state": "ready",
                           "placement": "murmur2"}}
    survived = reported = 0
    for how, damaged in damaged_variants(data):
        try:
            generation, found, damage = parse_topics_file(damaged, str(path))
        except CorruptCheckpointError as exc:
            assert TOPICS_FILE in str(exc)
            reported += 1
            continue
        assert (generation, found) == (1, expected), how
        assert damage is not None or damaged == data, how
        survived += 1
    assert reported == len(copy) - 1  # only cuts inside the first copy's JSON object
    print(f"topics.json of {len(data)} bytes: {survived} damaged variants survived, {reported} reported")
    # A version-1 file (one copy, no placement: crc32) is still read; a damaged copy is rewritten by
    # the next writable open.
    legacy = json.loads(copy)
    legacy["version"] = 1
    del legacy["crc32"], legacy["topics"]["orders"]["placement"]
    expected["orders"]["placement"] = "crc32"
    legacy["crc32"] = __import__("zlib").crc32(json.dumps(legacy, sort_keys=True, separators=(",", ":")).encode())
    assert parse_topics_file(json.dumps(legacy).encode(), "t")[:2] == (1, expected)
    path.write_bytes(data[:10] + b"X" + data[11:])
    with LogManager(str(tmp_path)) as store:
        assert store.topics() == ["orders"] and not any(TOPICS_FILE in problem for problem in store.problems)
    assert path.read_bytes()[: len(copy)] == path.read_bytes()[len(copy):]  # repaired


# --- the store ----------------------------------------------------------------------------------------


def _store_with_deleted_records(tmp_path) -> str:
    data_dir = str(tmp_path / "data")
    with LogManager(data_dir, config={"log.segment.bytes": 1 << 20}) as store:
        store.create_topic("t", 1)
        store.create_topic("u", 1)
        store.append("t", [Record(key=b"k", value=f"v{i}".encode()) for i in range(50)])
        store.get_log("t", 0).delete_records(20)  # in the first (only) segment
    return data_dir


def _log_start(data_dir: str, read_only: bool = False) -> tuple[int, list[str]]:
    with LogManager(data_dir, read_only=read_only) as store:
        log = store.get_log("t", 0)
        return log.log_start_offset, list(store.problems)


@pytest.mark.parametrize("position", ["version", "offset digit", "checksum", "end of the first copy"])
def test_a_flipped_byte_in_the_log_start_offset_checkpoint_does_not_bring_deleted_records_back(tmp_path, position):
    """delete_records, a flipped byte in log-start-offset-checkpoint, then a writable
    open (which writes the checkpoint again) must not bring the deleted records back."""
    data_dir = _store_with_deleted_records(tmp_path)
    path = os.path.join(data_dir, LOG_START_OFFSET_CHECKPOINT)
    data = bytearray(open(path, "rb").read())
    where = {"version": 0, "offset digit": data.index(b"t 0 20") + 4, "checksum": data.index(b"\n") - 1,
             "end of the first copy": len(data) // 2 - 1}[position]
    data[where] ^= 0x01  # "t 0 20" -> "t 0 30" when it hits the offset: a well-formed wrong value
    open(path, "wb").write(bytes(data))
    assert _log_start(data_dir, read_only=True) == (20, [])
    assert _log_start(data_dir) == (20, [])  # writable: and it writes the checkpoint again
    assert _log_start(data_dir) == (20, [])
    with LogManager(data_dir, read_only=True) as store:
        assert store.read("t", 0, 20, max_records=1)[0].value == b"v20"


def test_a_log_start_offset_checkpoint_with_no_intact_copy_is_reported_and_kept(tmp_path):
    data_dir = _store_with_deleted_records(tmp_path)
    path = os.path.join(data_dir, LOG_START_OFFSET_CHECKPOINT)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2 - 2])  # cut inside the first copy: nothing left
    with LogManager(data_dir, read_only=True) as store:
        assert any(LOG_START_OFFSET_CHECKPOINT in problem and "delete_records" in problem for problem in store.problems)
        assert not verify_store(store).ok
    with LogManager(data_dir) as store:  # a writer reports it too, and keeps the damaged file aside
        (problem,) = store.problems
        assert "kept as" in problem and "delete_records" in problem
    kept = [name for name in os.listdir(data_dir) if name.endswith(".damaged")]
    assert len(kept) == 1 and open(os.path.join(data_dir, kept[0]), "rb").read() == data[: len(data) // 2 - 2]
    with LogManager(data_dir, read_only=True) as store:  # still reported by check until it is removed
        report = verify_store(store)
        assert not report.ok and any(problem.path.endswith(".damaged") for problem in report.errors)


def test_a_recovery_point_checkpoint_with_one_damaged_copy_costs_nothing(tmp_path):
    data_dir = _store_with_deleted_records(tmp_path)
    path = os.path.join(data_dir, RECOVERY_POINT_CHECKPOINT)
    data = bytearray(open(path, "rb").read())
    data[3] ^= 0x10
    open(path, "wb").write(bytes(data))
    with LogManager(data_dir, read_only=True) as store:
        assert store.problems == []
        report = verify_store(store)
        assert report.ok and any("other copy is intact" in problem.message for problem in report.warnings)
    with LogManager(data_dir) as store:
        assert store.problems == [] and store.status()[0].clean_shutdown  # no recovery needed
        assert store.status()[0].recovery_points[("t", 0)] == 50


def test_a_damaged_clean_shutdown_marker_means_recovery_and_is_reported(tmp_path):
    data_dir = _store_with_deleted_records(tmp_path)
    path = os.path.join(data_dir, CLEAN_SHUTDOWN_MARKER)
    data = bytearray(open(path, "rb").read())
    data[data.index(b"shutdown_ms") + 16] ^= 0x01  # a digit of the time: still valid JSON
    open(path, "wb").write(bytes(data))
    with LogManager(data_dir, read_only=True) as store:
        assert any(CLEAN_SHUTDOWN_MARKER in problem for problem in store.problems)
        assert not store.status()[0].clean_shutdown
    with LogManager(data_dir) as store:
        assert any("unclean" in problem for problem in store.problems)
        assert not store.status()[0].clean_shutdown
        assert store.get_log("t", 0).log_end_offset == 50
    parse_clean_shutdown_marker(open(path, "rb").read(), path)  # rewritten intact at close


def test_a_store_that_changed_nothing_puts_back_the_marker_it_found(tmp_path):
    data_dir = _store_with_deleted_records(tmp_path)
    path = os.path.join(data_dir, CLEAN_SHUTDOWN_MARKER)
    before = open(path, "rb").read()
    with LogManager(data_dir) as store:
        with pytest.raises(Exception):
            store.alter_topic_config("nope", {"retention.ms": 5})
        store.read("t", 0, 20)
    assert open(path, "rb").read() == before
    with LogManager(data_dir) as store:
        store.append("u", [Record(value=b"x")])
    assert open(path, "rb").read() != before  # a change writes a new marker


def test_every_flip_and_cut_of_the_log_start_offset_checkpoint_in_a_store(tmp_path):
    """Through real opens: each damaged log-start-offset checkpoint gives the right log start offset
    (20) with no problem, or a reported problem; never a silently wrong one. Read-only opens for every
    variant, writable opens (which rewrite the file) for every fifth."""
    data_dir = _store_with_deleted_records(tmp_path)
    path = os.path.join(data_dir, LOG_START_OFFSET_CHECKPOINT)
    data = open(path, "rb").read()
    variants = [data[:n] + bytes([data[n] ^ 0x04]) + data[n + 1:] for n in range(len(data))]
    variants += [data[:n] for n in range(len(data))]
    survived = reported = 0
    for number, damaged in enumerate(variants):
        open(path, "wb").write(damaged)
        for read_only in (True,) if number % 5 else (True, False):
            start, problems = _log_start(data_dir, read_only=read_only)
            if problems:
                assert any(LOG_START_OFFSET_CHECKPOINT in problem for problem in problems)
                reported += 1
            else:
                assert start == 20, (number, damaged)
                survived += 1
        for name in os.listdir(data_dir):
            if name.endswith(".damaged"):
                os.remove(os.path.join(data_dir, name))
        if not os.path.exists(path):  # set aside by the writable open: the next variant needs the file
            open(path, "wb").write(data)
    assert survived and reported
    print(f"log-start-offset checkpoint in a store: {survived} opens with the right offset, {reported} reported")


def _partition_start_file(data_dir: str) -> str:
    return os.path.join(data_dir, "t-0", PARTITION_LOG_START_OFFSET)


@pytest.mark.parametrize("damage", ["remove", "cut", "zero"])
def test_a_lost_log_start_offset_checkpoint_does_not_bring_deleted_records_back(tmp_path, damage):
    """File-fuzz findings: with no intact copy of log-start-offset-checkpoint (removed,
    cut, zero-filled), the partition's own ``log-start-offset`` file keeps its log start offset, in
    read-only and writable opens and afterwards; a removed checkpoint is reported."""
    data_dir = _store_with_deleted_records(tmp_path)
    assert parse_checkpoint(open(_partition_start_file(data_dir), "rb").read()).entries == {("t", 0): 20}
    path = os.path.join(data_dir, LOG_START_OFFSET_CHECKPOINT)
    data = open(path, "rb").read()
    if damage == "remove":
        os.remove(path)
    else:
        half = len(data) // 2  # damage reaching into both copies
        open(path, "wb").write(data[:half - 2] if damage == "cut" else data[:10] + bytes(half) + data[half + 10:])
    with LogManager(data_dir, read_only=True) as store:
        assert store.get_log("t", 0).log_start_offset == 20 and store.problems
        with pytest.raises(OffsetOutOfRangeError):
            store.read("t", 0, 19)
        assert not verify_store(store).ok
    start, problems = _log_start(data_dir)  # a writer: reported, and both homes written again
    assert start == 20 and problems
    assert _log_start(data_dir) == (20, [])
    assert _log_start(data_dir, read_only=True) == (20, [])


def test_the_partition_file_follows_the_log_start_offset(tmp_path):
    """Written when delete_records raises the start above the first base offset, removed when a
    truncation brings it back to the base; a lost partition file is reported, never used wrongly."""
    data_dir = _store_with_deleted_records(tmp_path)
    os.remove(_partition_start_file(data_dir))
    start, problems = _log_start(data_dir, read_only=True)
    assert start == 20 and any(PARTITION_LOG_START_OFFSET in problem and "disagree" in problem for problem in problems)
    assert _log_start(data_dir)[0] == 20
    assert os.path.exists(_partition_start_file(data_dir))  # written again by the writer
    with LogManager(data_dir) as store:
        store.get_log("t", 0).truncate_to(10)  # below the start: the start goes down to 10
        assert store.get_log("t", 0).log_start_offset == 10
        assert parse_checkpoint(open(_partition_start_file(data_dir), "rb").read()).entries == {("t", 0): 10}
    assert _log_start(data_dir) == (10, [])
    with LogManager(data_dir) as store:
        store.get_log("t", 0).truncate_to(0)  # back to the base offset: no partition file
    assert not os.path.exists(_partition_start_file(data_dir))
    assert _log_start(data_dir) == (0, [])
