"""``logstore.tools.check`` and ``logstore check``: a healthy store passes; each kind of damage is found."""

from __future__ import annotations

import glob
import os
import shutil
import struct

import pytest
from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.log.checkpoint import CLEAN_SHUTDOWN_MARKER
from logstore.cli.main import main
from logstore.tools.check import INTERRUPTED, ERROR, WARNING, verify_logs, verify_store
from logstore.tools.dump import scan_log_file

PARTITIONS = 2
BATCHES = 40
RECORDS_PER_BATCH = 4
CONFIG = {"segment.bytes": 3000, "index.interval.bytes": 150}


def fill(path, partitions=PARTITIONS):
    """A store with topic ``t``: BATCHES batches per partition, several segments each, index entries."""
    with LogManager([str(path)]) as store:
        store.create_topic("t", partitions=partitions, config=CONFIG)
        for number in range(BATCHES):
            batch = [Record(key=b"k%d" % i, value=b"value-%03d-%d" % (number, i) * 3, headers=[("h", b"x")],
                            timestamp_ms=1_000_000 + number * 100 + i) for i in range(RECORDS_PER_BATCH)]
            for partition in range(partitions):
                store.append("t", batch, partition=partition)


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "data"
    fill(path)
    return path


def check(*dirs):
    with LogManager([str(d) for d in dirs], read_only=True) as manager:
        return verify_store(manager)


def cli_check(*dirs):
    args = [arg for d in dirs for arg in ("--dir", str(d))]
    return CliRunner().invoke(main, [*args, "check"])


def segment_files(store, suffix=".log", partition=0):
    return sorted(glob.glob(str(store / f"t-{partition}" / f"*{suffix}")))


def flip_byte(path, position):
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x5A]))


def errors_about(report, path):
    return [p for p in report.problems if p.severity == ERROR and os.path.basename(path) in p.path]


def test_healthy_store_passes(store):
    report = check(store)
    assert report.problems == [] and report.ok
    assert report.partitions == PARTITIONS
    assert report.batches == PARTITIONS * BATCHES
    assert report.records == PARTITIONS * BATCHES * RECORDS_PER_BATCH
    log_files = glob.glob(str(store / "t-*" / "*.log"))
    assert report.segments == len(log_files) > 2 * PARTITIONS  # several segments per partition
    assert report.bytes_checked == sum(os.path.getsize(f) for f in log_files)
    assert any(os.path.getsize(f) for f in glob.glob(str(store / "t-*" / "*.index")))  # entries were checked
    result = cli_check(store)
    assert result.exit_code == 0 and result.stdout.startswith("OK: ")


def test_works_on_a_store_open_for_writing(store):
    with LogManager([str(store)]) as writer:
        writer.append("t", [Record(value=b"more")], partition=0)
        assert verify_logs(writer.logs()).problems == []  # the writer's own view
        assert check(store).problems == []  # a read-only open beside the writer
        assert cli_check(store).exit_code == 0


def test_flipped_byte_inside_a_batch_is_a_crc_error(store):
    path = segment_files(store)[0]
    entries = list(scan_log_file(path))
    flip_byte(path, entries[1].position + 70)  # inside the body of the second batch
    report = check(store)
    errors = errors_about(report, path)
    assert len(errors) == 1 and "checksum mismatch" in errors[0].message
    assert f"position {entries[1].position}" in errors[0].message
    assert report.batches == PARTITIONS * BATCHES  # the scan went on past the damaged batch
    result = cli_check(store)
    assert result.exit_code == 1
    assert path in result.stdout and "checksum mismatch" in result.stdout
    assert result.stdout.splitlines()[-1].startswith("DAMAGED: ")


def test_flipped_byte_in_a_batch_header_stops_the_scan_of_that_segment(store):
    path = segment_files(store)[0]
    entries = list(scan_log_file(path))
    flip_byte(path, entries[2].position + 3)  # the base offset, covered by the header checksum
    report = check(store)
    assert any("header checksum mismatch" in p.message for p in errors_about(report, path))
    assert report.batches == PARTITIONS * BATCHES - (len(entries) - 2)
    assert cli_check(store).exit_code == 1


@pytest.mark.parametrize("change, fragment", [
    (lambda offset, position: (offset, position + 1), "where no valid batch starts"),
    (lambda offset, position: (offset + 1, position), "points at a batch whose base offset is"),
])
def test_corrupted_offset_index_entry(store, change, fragment):
    path = segment_files(store, ".index")[0]
    with open(path, "r+b") as f:
        offset, position = struct.unpack("<ii", f.read(16)[8:])
        f.seek(8)
        f.write(struct.pack("<ii", *change(offset, position)))
    report = check(store)
    errors = errors_about(report, path)
    assert len(errors) == 1 and "entry 1" in errors[0].message and fragment in errors[0].message
    assert cli_check(store).exit_code == 1


def test_time_index_entry_that_disagrees_with_the_data(store):
    path = segment_files(store, ".timeindex")[0]
    with open(path, "r+b") as f:
        timestamp_ms, relative_offset = struct.unpack("<qi", f.read(12))
        f.seek(0)
        f.write(struct.pack("<qi", timestamp_ms - 1, relative_offset))
    errors = errors_about(check(store), path)
    assert len(errors) == 1 and "disagrees with the data" in errors[0].message


def test_time_index_of_an_old_segment_without_its_final_entry(store):
    path = segment_files(store, ".timeindex")[0]
    os.truncate(path, os.path.getsize(path) - 12)
    errors = errors_about(check(store), path)
    assert len(errors) == 1 and "no longer active" in errors[0].message


def test_index_file_with_a_partial_entry(store):
    path = segment_files(store, ".index")[0]
    with open(path, "ab") as f:
        f.write(b"\x01\x02\x03")
    errors = errors_about(check(store), path)
    assert any("whole 8-byte entry" in p.message for p in errors)


def test_missing_index_file_is_a_warning(store):
    path = segment_files(store, ".index")[0]
    os.remove(path)
    report = check(store)
    assert [(p.severity, os.path.basename(p.path)) for p in report.problems] == [(WARNING, os.path.basename(path))]
    assert report.ok and cli_check(store).exit_code == 0


def test_batches_out_of_order_across_segments(store):
    first, second = segment_files(store)[:2]
    shutil.copyfile(first, second)  # the second segment now repeats the first one's offsets
    messages = [p.message for p in errors_about(check(store), second)]
    assert any("does not follow the previous batch's last offset" in m for m in messages)
    assert any("does not fit the segment's base offset" in m for m in messages)


@pytest.mark.parametrize("name", ["00000000000000000000.log.cleaned", "00000000000000000000.index.swap",
                                  "00000000000000000000.log.deleted", "00000000000000000000.timeindex.deleted"])
def test_stray_files_are_reported(store, name):
    """Leftovers of a kill during compaction or retention are an interrupted operation that the next
    writable open completes: a warning (exit 0), not damage."""
    (store / "t-1" / name).write_bytes(b"")
    report = check(store)
    assert report.errors == []
    assert [(os.path.basename(p.path), INTERRUPTED in p.message) for p in report.warnings] == [(name, True)]
    result = cli_check(store)
    assert result.exit_code == 0 and name in result.stdout and "interrupted operation" in result.stdout
    with LogManager([str(store)]):
        pass  # a writable open completes it
    assert not (store / "t-1" / name).exists() and check(store).problems == []


def test_stray_swap_segment_is_reported(store):
    shutil.copyfile(segment_files(store)[-1], store / "t-0" / "00000000000000099999.log.swap")
    assert any(p.path.endswith("00000000000000099999.log.swap") and "swap" in p.message
               for p in check(store).warnings)


def test_leftovers_in_the_data_dir_are_reported(store):
    (store / "t-0.0123abcd-delete").mkdir()
    (store / "recovery-point-offset-checkpoint.tmp").write_text("0\n")
    report = check(store)
    assert report.ok and sorted(os.path.basename(p.path) for p in report.warnings) == [
        "recovery-point-offset-checkpoint.tmp", "t-0.0123abcd-delete"]
    assert cli_check(store).exit_code == 0


def test_an_orphan_index_file_stays_an_error(store):
    """An index without its .log means a missing segment (a hole), not an interrupted operation."""
    (store / "t-1" / "00000000000000099999.index").write_bytes(b"")
    errors = check(store).errors
    assert "00000000000000099999.index" in [os.path.basename(p.path) for p in errors]
    assert any("t-1 is damaged" in p.message for p in errors)  # the partition is reported damaged too
    assert cli_check(store).exit_code == 1


def test_missing_partition_is_reported(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    with LogManager([str(first), str(second)]) as manager:
        manager.create_topic("t", partitions=2)
        manager.append("t", [Record(value=b"v")], partition=1)
    assert (second / "t-1").is_dir()
    assert check(first, second).problems == []
    report = check(first)  # the second data dir left out
    assert not report.ok
    assert any("t-1" in p.message and "missing" in p.message for p in report.errors)
    result = cli_check(first)
    assert result.exit_code == 1 and "t-1" in result.stdout


def test_torn_tail_of_the_last_segment_is_a_warning(store):
    """Only while a writer may be appending (or after it crashed): no clean-shutdown marker."""
    os.remove(store / CLEAN_SHUTDOWN_MARKER)
    path = segment_files(store)[-1]
    os.truncate(path, os.path.getsize(path) - 7)
    report = check(store)
    assert report.ok and all(p.severity == WARNING for p in report.problems)
    assert [p.message for p in report.problems if p.path == path] == [
        f"torn tail: {os.path.getsize(path) - list(scan_log_file(path))[-1].position} bytes of an incomplete "
        f"batch at position {list(scan_log_file(path))[-1].position} (an interrupted append; recovery cuts it "
        "at the next writable open)"]
    # index entries that named the torn batch are a consequence, reported as such
    assert all("torn tail" in p.message for p in report.problems)
    assert cli_check(store).exit_code == 0


def test_torn_tail_of_a_cleanly_closed_store_is_an_error(store):
    """A clean shutdown leaves no torn tail: a cut last byte is damage."""
    path = segment_files(store)[-1]
    os.truncate(path, os.path.getsize(path) - 1)
    errors = errors_about(check(store), path)
    assert any("torn tail" in p.message and "shut down cleanly" in p.message for p in errors)
    result = cli_check(store)
    assert result.exit_code == 1 and "DAMAGED" in result.stdout


@pytest.mark.parametrize("remove", [(".log",), (".log", ".index", ".timeindex")])
def test_missing_segment_is_a_hole(store, remove):
    """Offsets are contiguous across segments, also after a writable open."""
    victim = segment_files(store)[1]
    for suffix in remove:
        os.remove(victim[: -len(".log")] + suffix)
    report = check(store)
    assert any("are missing" in p.message for p in report.errors), report.problems
    with LogManager([str(store)]) as writer:  # a writable command: the hole is still reported
        writer.append("t", [Record(value=b"v")], partition=1)
    result = cli_check(store)
    assert result.exit_code == 1 and "are missing" in result.stdout


def test_torn_tail_of_an_older_segment_is_an_error(store):
    path = segment_files(store)[0]
    os.truncate(path, os.path.getsize(path) - 7)
    errors = errors_about(check(store), path)
    assert any("torn tail" in p.message for p in errors)
    assert cli_check(store).exit_code == 1


def test_data_appended_by_a_writer_after_the_read_only_open_is_not_an_error(tmp_path):
    with LogManager([str(tmp_path)]) as writer:
        writer.create_topic("u", config={"index.interval.bytes": 50})
        writer.append("u", [Record(value=b"early")])
    with LogManager([str(tmp_path)], read_only=True) as reader, LogManager([str(tmp_path)]) as writer:
        for number in range(5):  # into the segment the reader sees, past its log end offset
            writer.append("u", [Record(value=b"late %d" % number)] * 3)
        report = verify_store(reader)
        assert reader.get_log("u", 0).log_end_offset == 1 and len(writer.get_log("u", 0).segments) == 1
    assert report.problems == []
    assert (report.batches, report.records) == (6, 16)


def test_segment_deleted_by_the_writer_during_a_check_is_a_warning(store):
    with LogManager([str(store)], read_only=True) as reader:
        deleted = segment_files(store)[0]
        for suffix in (".log", ".index", ".timeindex"):
            os.remove(deleted[: -len(".log")] + suffix)
        report = verify_store(reader)
    assert [(p.severity, p.path) for p in report.problems] == [(WARNING, deleted)]
    assert report.ok
