"""Damaged partitions: damage no crash could leave is reported
and kept, never cut silently; one partition's damage never blocks the others; ``repair`` cuts it
at its first damage, logged, and leaves a healthy log.

Each test builds a small store (several segments per partition, an index entry every ~100 bytes),
damages it from outside the engine (one flipped byte, a cut or zero-filled tail, a removed file, a
wrong checkpoint value) and opens it as a user would: a writable ``LogManager`` that appends to
another topic, a read-only view, ``verify_store`` (``logstore check``).
"""

from __future__ import annotations

import logging
import os

import pytest

from crash_helpers import fork_call
from logstore import LogManager, Record
from logstore.errors import CorruptRecordError, LogDamagedError
from logstore.log.checkpoint import LOG_START_OFFSET_CHECKPOINT, OffsetCheckpointFile
from logstore.tools.check import verify_store

TOPIC, OTHER = "t", "other"
CONFIG = {"segment.bytes": 2048, "index.interval.bytes": 100}


def records(count: int, tag: bytes = b"v") -> list[Record]:
    return [Record(b"k%d" % i, tag + b"%05d" % i + b"x" * 30) for i in range(count)]


def build(data_dir: str, count: int = 300, batch: int = 5) -> None:
    """A cleanly closed store: ``t`` with ``count`` records in batches of ``batch``, and ``other``."""
    with LogManager([data_dir]) as store:
        store.create_topic(TOPIC, 1, CONFIG)
        store.create_topic(OTHER, 1, CONFIG)
        for start in range(0, count, batch):
            store.append(TOPIC, records(batch, b"%d-" % start), partition=0)


def part(data_dir: str) -> str:
    return os.path.join(data_dir, f"{TOPIC}-0")


def segment_files(data_dir: str) -> list[str]:
    return sorted(os.path.join(part(data_dir), name) for name in os.listdir(part(data_dir)) if name.endswith(".log"))


def log_bytes(data_dir: str) -> dict[str, bytes]:
    """The .log files of ``t-0`` (the data: what no open may cut without a word)."""
    return {path: open(path, "rb").read() for path in segment_files(data_dir)}


def batch_positions(path: str) -> list[int]:
    from logstore.records.decoder import read_header
    data = open(path, "rb").read()
    positions, position = [], 0
    while position < len(data):
        positions.append(position)
        position += read_header(data, position, whole=False).size_bytes
    return positions


def flip(path: str, position: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(position)
        byte = handle.read(1)
        handle.seek(position)
        handle.write(bytes([byte[0] ^ 0x55]))


def index_entry_positions(data_dir: str, segment: int) -> list[int]:
    with LogManager([data_dir], read_only=True) as store:
        index = store.get_log(TOPIC, 0).segments[segment].offset_index
        return [index.entry(slot).position for slot in range(index.entries)]


def assert_damaged_and_kept(data_dir: str, before: dict[str, bytes], clean: bool = True) -> None:
    """A writable open reports ``t-0`` damaged, keeps its data, and the other topic works; ``check``
    reports it, and so does a read-only view of a cleanly closed store, or of damage before an unclean
    store's last segment (``clean``; in the last one the view cannot tell damage from a writer's
    append under way)."""
    with LogManager([data_dir]) as store:  # the symptom first: an append to another topic
        store.append(OTHER, records(1))
    assert log_bytes(data_dir) == before, "no record was cut from the files"
    with LogManager([data_dir]) as store:
        assert list(store.damaged_partitions) == [(TOPIC, 0)]
        assert any("t-0 is damaged" in problem for problem in store.problems)
        with pytest.raises(LogDamagedError, match="logstore repair t --partition 0"):
            store.get_log(TOPIC, 0)
        with pytest.raises(LogDamagedError):
            store.append(TOPIC, records(1), partition=0)
        end = store.get_log(OTHER, 0).log_end_offset
        store.append(OTHER, records(3))  # one partition's damage blocks no other
        assert [r.offset for r in store.read(OTHER, 0, end)] == [end, end + 1, end + 2]
    assert log_bytes(data_dir) == before, "no record was cut from the files"
    with LogManager([data_dir], read_only=True) as store:
        assert not verify_store(store).ok
        assert ((TOPIC, 0) in store.damaged_partitions) == clean


def repair_and_check(data_dir: str, expect_removed: bool = True, damaged: bool = True):
    """``repair`` says what it would do, does it (logged), and leaves a store that checks OK."""
    with LogManager([data_dir]) as store:
        (plan,) = store.repair(TOPIC, 0, dry_run=True)
        assert plan.changes == expect_removed
        assert ((TOPIC, 0) in store.damaged_partitions) == damaged, "a dry run changes nothing"
        (done,) = store.repair(TOPIC, 0)
        assert done.describe(True).replace("removed", "") and done.removed_offsets == plan.removed_offsets
        log = store.get_log(TOPIC, 0)
        readable = list(log.iter_records())
        assert [r.offset for r in readable] == list(range(log.log_start_offset, log.log_end_offset))
        store.append(TOPIC, records(2), partition=0)
    with LogManager([data_dir], read_only=True) as store:
        report = verify_store(store)
        assert report.ok, report.problems
        assert not store.damaged_partitions
    return done


# --- D4: damage below the recovery point of a clean store --------------------------------------------


def test_flipped_header_byte_below_the_recovery_point_is_kept_and_reported(tmp_path, caplog):
    data_dir = str(tmp_path / "data")
    build(data_dir)
    first = segment_files(data_dir)[0]
    # A batch an index entry points at (the open checks that entry, then rebuilds the index).
    position = index_entry_positions(data_dir, 0)[-1]
    flip(first, position + 2)  # base offset: covered by the header CRC
    before = log_bytes(data_dir)
    assert_damaged_and_kept(data_dir, before)
    assert_damaged_and_kept(data_dir, before)  # and again: nothing was acted on in between
    with caplog.at_level(logging.WARNING, logger="logstore.log"):
        plan = repair_and_check(data_dir)
    assert plan.removed_records > 0 and plan.removed_bytes > 0
    assert any("repair:" in message for message in caplog.messages), "a repair is logged"


def test_flipped_byte_in_a_batch_nothing_points_at(tmp_path):
    """Damage the clean open does not look at is reported by reads, and cut only by a repair."""
    data_dir = str(tmp_path / "data")
    build(data_dir)
    first = segment_files(data_dir)[0]
    flip(first, batch_positions(first)[1] + 30)  # a body byte of the second batch
    with LogManager([data_dir]) as store:
        store.append(OTHER, records(1))
        with pytest.raises(Exception, match="checksum|CRC|crc"):
            list(store.get_log(TOPIC, 0).iter_records())
    with LogManager([data_dir], read_only=True) as store:
        assert not verify_store(store).ok
    plan = repair_and_check(data_dir, damaged=False)
    assert plan.removed_offsets[0] == 5, "the cut starts at the damaged batch"


# --- D5: damage above a lagging recovery point after a crash -----------------------------------------


def _crash_with_lagging_recovery_point(data_dir: str) -> None:
    def child():
        store = LogManager([data_dir])
        store.create_topic(TOPIC, 1, CONFIG)
        store.create_topic(OTHER, 1, CONFIG)
        store.append(TOPIC, records(20), partition=0, acks="all")  # recovery point 20, checkpointed
        store.checkpoint()
        for start in range(20, 400, 5):
            store.append(TOPIC, records(5), partition=0)  # not flushed: the recovery point lags
        return store.get_log(TOPIC, 0).recovery_point  # the child leaves with os._exit: never closed
    outcome = fork_call(child, 60)
    assert outcome.status == "ok" and outcome.result == 20, outcome


def test_corrupt_batch_followed_by_valid_data_after_a_crash_is_not_a_torn_tail(tmp_path):
    data_dir = str(tmp_path / "data")
    _crash_with_lagging_recovery_point(data_dir)
    files = segment_files(data_dir)
    assert len(files) >= 4
    flip(files[1], batch_positions(files[1])[2] + 30)  # above the recovery point, below the end
    before = log_bytes(data_dir)
    # Not the last segment: a read-only view tells it from an append under way, and reports it too.
    assert_damaged_and_kept(data_dir, before)
    assert_damaged_and_kept(data_dir, before)  # the dir stays unclean: found again
    plan = repair_and_check(data_dir)
    assert plan.removed_files, "the repair drops the later segments (what recovery would have done)"


def test_torn_tail_after_a_crash_is_still_cut(tmp_path, caplog):
    data_dir = str(tmp_path / "data")
    _crash_with_lagging_recovery_point(data_dir)
    last = segment_files(data_dir)[-1]
    size = os.path.getsize(last)
    with open(last, "r+b") as handle:
        handle.truncate(size - 7)
    with caplog.at_level(logging.WARNING, logger="logstore.log"):
        with LogManager([data_dir]) as store:
            assert not store.damaged_partitions
            assert any("torn tail" in problem for problem in store.problems)
            assert store.get_log(TOPIC, 0).log_end_offset == 395
    assert any("torn tail" in message for message in caplog.messages)


def test_lost_unsynced_tail_of_an_earlier_segment_drops_the_later_ones(tmp_path):
    """A power loss can lose one file's unsynced tail while a later file kept its pages."""
    data_dir = str(tmp_path / "data")
    _crash_with_lagging_recovery_point(data_dir)
    files = segment_files(data_dir)
    cut_at = batch_positions(files[2])[3]
    with open(files[2], "r+b") as handle:
        handle.truncate(cut_at + 20)
    # A read-only view (it cannot cut) ends where the writer's recovery cuts: no hole, and it says so.
    with LogManager([data_dir], read_only=True) as view:
        log = view.get_log(TOPIC, 0)
        offsets = [r.offset for r in log.iter_records()]
        assert offsets == list(range(log.log_end_offset)) and log.log_end_offset < 400
        assert len(log.segments) == 3
        assert any("the read-only view ends at offset" in problem for problem in view.problems)
        assert [r.offset for r in log.read(log.log_end_offset - 1, max_records=5)] == [log.log_end_offset - 1]
        view_end = log.log_end_offset
    with LogManager([data_dir]) as store:
        assert not store.damaged_partitions
        assert any("dropped" in problem for problem in store.problems)
        assert len(store.get_log(TOPIC, 0).segments) == 3
        assert store.get_log(TOPIC, 0).log_end_offset == view_end


# --- D6 / D10: the tail of a cleanly closed segment --------------------------------------------------


@pytest.mark.parametrize("damage", ["cut_last_byte", "flip_last_batch", "zero_tail", "garbage_tail"])
def test_damaged_tail_of_a_clean_store(tmp_path, damage):
    data_dir = str(tmp_path / "data")
    build(data_dir)
    last = segment_files(data_dir)[-1]
    with open(last, "r+b") as handle:
        size = handle.seek(0, 2)
        if damage == "cut_last_byte":
            handle.truncate(size - 1)
        elif damage == "flip_last_batch":
            flip(last, size - 1)  # a value byte of the last batch: only its body CRC sees it
        else:
            handle.write(bytes(100) if damage == "zero_tail" else os.urandom(100))
    before = log_bytes(data_dir)
    # A read-only view (logstore read) reports it instead of bounding the log silently.
    with LogManager([data_dir], read_only=True) as store:
        assert (TOPIC, 0) in store.damaged_partitions
        with pytest.raises(LogDamagedError):
            store.read(TOPIC, 0, 0)
        report = verify_store(store)
        assert not report.ok
    if damage == "flip_last_batch":
        # A writable clean open reads headers only: a read reaching the batch reports it, and
        # nothing is cut until a repair. (When the flipped byte is one the open's header checks
        # read, such as the max timestamp its time index entry must match, the open reports the
        # partition damaged instead: either way it is reported.)
        with LogManager([data_dir]) as store:
            found_at_open = (TOPIC, 0) in store.damaged_partitions
            with pytest.raises((CorruptRecordError, LogDamagedError)):
                list(store.get_log(TOPIC, 0).iter_records())
        assert log_bytes(data_dir) == before
        repair_and_check(data_dir, damaged=found_at_open)
        return
    assert_damaged_and_kept(data_dir, before)
    repair_and_check(data_dir)


def test_read_only_view_of_a_running_writer_still_bounds_a_torn_tail(tmp_path):
    data_dir = str(tmp_path / "data")
    build(data_dir)
    with LogManager([data_dir]) as writer:  # holds the store: no clean marker while it runs
        writer.append(TOPIC, records(1), partition=0)
        last = writer.get_log(TOPIC, 0).active_segment.log_path
        with open(last, "ab") as handle:
            handle.write(b"\x00" * 30)  # an append under way
        with LogManager([data_dir], read_only=True) as view:
            assert not view.damaged_partitions
            assert view.get_log(TOPIC, 0).log_end_offset == 301
        writer.get_log(TOPIC, 0).active_segment.file.truncate_to(os.path.getsize(last) - 30)


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_a_record_count_zeroed_does_not_hide_a_batch(tmp_path, read_only):
    """Zeros over a batch's record count (outside the header checksum, inside the body's) make it
    look like an empty batch, which reads pass over: reads verify it and report the damage instead
    of skipping its records."""
    data_dir = str(tmp_path / "data")
    build(data_dir)
    victim = segment_files(data_dir)[2]
    position = batch_positions(victim)[1]
    with open(victim, "r+b") as handle:
        handle.seek(position + 27)  # record_count: base_offset, length, magic, crc, header crc, attributes, delta
        handle.write(b"\0\0\0\0")
    base = int.from_bytes(open(victim, "rb").read()[position : position + 8], "little")
    with LogManager([data_dir], read_only=read_only) as store:
        log = store.get_log(TOPIC, 0)
        with pytest.raises(CorruptRecordError, match="checksum"):
            list(log.iter_records())
        with pytest.raises(CorruptRecordError, match="checksum"):
            log.read(base - 1, max_records=10)
    with LogManager([data_dir], read_only=True) as store:
        assert not verify_store(store).ok


# --- D7: a missing segment ----------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["log_only", "all_files"])
def test_missing_segment_is_a_hole(tmp_path, what):
    data_dir = str(tmp_path / "data")
    build(data_dir)
    files = segment_files(data_dir)
    victim = files[2]
    os.remove(victim)
    if what == "all_files":
        for suffix in (".index", ".timeindex"):
            os.remove(victim[: -len(".log")] + suffix)
    with LogManager([data_dir], read_only=True) as store:
        assert (TOPIC, 0) in store.damaged_partitions, "a read-only view reports the hole"
        assert not verify_store(store).ok
    assert_damaged_and_kept(data_dir, log_bytes(data_dir))
    if what == "log_only":
        assert os.path.exists(victim[: -len(".log")] + ".index"), "the evidence stays"
    plan = repair_and_check(data_dir)
    assert plan.removed_offsets[0] == int(os.path.basename(files[1])[:20]) + 0 or plan.removed_offsets[0] > 0


@pytest.mark.parametrize("renamed", [False, True], ids=["log_removed", "log_renamed_deleted"])
def test_first_segment_log_gone_after_a_crash(tmp_path, renamed):
    """After a crash, index files before every segment are an interrupted prefix deletion only when
    that segment's ``.log.deleted`` is there (retention renames the ``.log`` first; a power loss keeps
    a prefix of the renames). A ``.log`` simply gone is a missing segment: damage, never a silent
    loss of its records."""
    data_dir = str(tmp_path / "data")
    build(data_dir)
    os.remove(os.path.join(data_dir, ".kafka_cleanshutdown"))
    first = segment_files(data_dir)[0]
    second_base = int(os.path.basename(segment_files(data_dir)[1])[:20])
    if not renamed:
        os.remove(first)
        with LogManager([data_dir], read_only=True) as store:
            assert (TOPIC, 0) in store.damaged_partitions, store.problems
            assert not verify_store(store).ok
        assert_damaged_and_kept(data_dir, log_bytes(data_dir))
        assert os.path.exists(first[: -len(".log")] + ".index"), "the evidence stays"
        return
    os.rename(first, first + ".deleted")
    with LogManager([data_dir], read_only=True) as store:
        assert not store.damaged_partitions, store.problems
        assert [r.offset for r in store.get_log(TOPIC, 0).iter_records()] == list(range(second_base, 300))
    with LogManager([data_dir]) as store:
        assert not store.damaged_partitions, store.problems
        assert [r.offset for r in store.get_log(TOPIC, 0).iter_records()] == list(range(second_base, 300))
    assert not [name for name in os.listdir(part(data_dir)) if name.startswith(os.path.basename(first)[:20])]


def test_missing_last_segment_of_a_clean_store(tmp_path):
    data_dir = str(tmp_path / "data")
    build(data_dir)
    os.remove(segment_files(data_dir)[-1])
    assert_damaged_and_kept(data_dir, log_bytes(data_dir))
    repair_and_check(data_dir)


# --- D8: a log start offset that contradicts the log ---------------------------------------------------


def test_log_start_offset_above_the_log_end_is_refused(tmp_path):
    data_dir = str(tmp_path / "data")
    build(data_dir, count=250)
    OffsetCheckpointFile(__import__("logstore").fs.OS_FILE_SYSTEM,
                         os.path.join(data_dir, LOG_START_OFFSET_CHECKPOINT)).write({(TOPIC, 0): 1000})
    before = log_bytes(data_dir)
    assert_damaged_and_kept(data_dir, before)
    plan = repair_and_check(data_dir)
    assert plan.start_offset_reset and plan.log_start_offset == 0 and plan.slot is None
    with LogManager([data_dir], read_only=True) as store:
        assert len(list(store.get_log(TOPIC, 0).iter_records())) == 252


def test_truncation_below_the_recovery_point_persists_it_first(tmp_path):
    """After a crash, a recovery point above the log end means fsynced records are missing; a
    truncation lowers (and persists) the recovery point before it cuts, so it never looks so."""
    data_dir = str(tmp_path / "data")
    build(data_dir)
    with LogManager([data_dir]) as store:
        log = store.get_log(TOPIC, 0)
        log.flush()
        seen = []
        original = log.on_checkpoint_needed
        log.on_checkpoint_needed = lambda lg: (seen.append((lg.recovery_point, lg.log_end_offset)), original(lg))
        log.truncate_to(100)
        assert seen[0] == (100, 300), "the lowered recovery point is persisted before the cut"


def test_recovery_point_above_the_log_end_after_a_crash_is_reported(tmp_path):
    """The last segment's files vanished after a crash whose checkpoint covers them: fsynced
    records are missing. Reported (store.problems), never passed over in silence."""
    data_dir = str(tmp_path / "data")

    def child():
        store = LogManager([data_dir])
        store.create_topic(TOPIC, 1, CONFIG)
        store.create_topic(OTHER, 1, CONFIG)
        for start in range(0, 200, 5):
            store.append(TOPIC, records(5), partition=0, acks="all")
        store.checkpoint()
        return store.get_log(TOPIC, 0).recovery_point  # left with os._exit: never closed

    outcome = fork_call(child, 60)
    assert outcome.status == "ok" and outcome.result == 200, outcome
    last = segment_files(data_dir)[-1]
    for suffix in (".log", ".index", ".timeindex"):
        os.remove(last[: -len(".log")] + suffix)
    with LogManager([data_dir]) as store:
        assert any("recovery point 200 is above the log end offset" in problem for problem in store.problems)


@pytest.mark.parametrize("clean", [True, False])
def test_hole_below_the_log_start_offset_is_dead_data_not_damage(tmp_path, clean):
    """``delete_records`` checkpoints the new start, then deletes the segments below it newest
    first: a crash in between leaves a hole below the log start offset. Not damage."""
    data_dir = str(tmp_path / "data")
    build(data_dir)
    files = segment_files(data_dir)
    start = int(os.path.basename(files[3])[:20])
    for suffix in (".log", ".index", ".timeindex"):
        os.remove(files[2][: -len(".log")] + suffix)
    OffsetCheckpointFile(__import__("logstore").fs.OS_FILE_SYSTEM,
                         os.path.join(data_dir, LOG_START_OFFSET_CHECKPOINT)).write({(TOPIC, 0): start})
    if not clean:
        os.remove(os.path.join(data_dir, ".kafka_cleanshutdown"))
    with LogManager([data_dir]) as store:
        assert not store.damaged_partitions, store.problems
        log = store.get_log(TOPIC, 0)
        assert [r.offset for r in log.iter_records()] == list(range(start, 300))
    with LogManager([data_dir], read_only=True) as store:
        assert verify_store(store).ok


def test_index_files_of_a_deleted_prefix_segment_are_not_damage(tmp_path):
    """A prefix deletion renames each segment's .log to .deleted before its index files: a crash in
    between leaves index files without data below the log start offset. Not a missing segment."""
    data_dir = str(tmp_path / "data")
    build(data_dir)
    files = segment_files(data_dir)
    start = int(os.path.basename(files[2])[:20])
    os.rename(files[1], files[1] + ".deleted")
    OffsetCheckpointFile(__import__("logstore").fs.OS_FILE_SYSTEM,
                         os.path.join(data_dir, LOG_START_OFFSET_CHECKPOINT)).write({(TOPIC, 0): start})
    with LogManager([data_dir]) as store:
        assert not store.damaged_partitions, store.problems
        assert [r.offset for r in store.get_log(TOPIC, 0).iter_records()] == list(range(start, 300))


@pytest.mark.parametrize("damage", ["flipped byte", "torn end"])
@pytest.mark.parametrize("also_live", [False, True])
@pytest.mark.parametrize("dead", [1, 3])
def test_repair_of_damage_below_the_log_start_keeps_every_readable_record(tmp_path, damage, also_live, dead):
    """Segments wholly below the log start offset hold deleted records awaiting retention (left by a
    delete_records or retention whose removal a shortage stopped, then a clean close). Damage in one
    of them is reported, and ``repair`` removes those dead segments, as retention would, instead of
    cutting the log there: it once cut at the dead segment and removed every readable record after
    it. Damage in the readable part as well is still cut where it is."""
    data_dir = str(tmp_path / "data")
    build(data_dir)
    files = segment_files(data_dir)
    start = int(os.path.basename(files[dead])[:20])
    OffsetCheckpointFile(__import__("logstore").fs.OS_FILE_SYSTEM,
                         os.path.join(data_dir, LOG_START_OFFSET_CHECKPOINT)).write({(TOPIC, 0): start})
    if damage == "flipped byte":  # found by verify and repair only
        flip(files[0], batch_positions(files[0])[1] + 30)
    else:  # found by the open too: the store shut down cleanly, so no crash tore it
        with open(files[dead - 1], "r+b") as handle:
            handle.truncate(os.path.getsize(files[dead - 1]) - 7)
    cut_at = None
    if also_live:
        cut_at = batch_positions(files[6])[2]
        flip(files[6], cut_at + 30)
    with LogManager([data_dir], read_only=True) as store:
        assert not verify_store(store).ok  # never silent
    with LogManager([data_dir]) as store:
        (plan,) = store.repair(TOPIC, 0, dry_run=True)
        assert plan.changes and plan.dead_segments == dead and os.path.exists(files[0])
        which = "the segment" if dead == 1 else f"the {dead} segments"
        assert f"would remove {which} wholly below the log start offset {start}" in plan.describe(False)
        (done,) = store.repair(TOPIC, 0)
        log = store.get_log(TOPIC, 0)
        end = 300 if cut_at is None else done.cut_offset
        assert log.log_start_offset == start and log.log_end_offset == end
        assert [r.offset for r in log.iter_records()] == list(range(start, end))
        if also_live:
            assert done.slot == 6 and done.position == cut_at and done.removed_offsets[0] == end
            assert done.removed_records == 300 - end - 5  # the damaged batch's 5 records are not readable
        else:
            assert done.slot is None and done.removed_records == 0
        store.append(TOPIC, records(2), partition=0)
    assert segment_files(data_dir)[0] == files[dead]
    with LogManager([data_dir], read_only=True) as store:
        report = verify_store(store)
        assert report.ok, report.problems
