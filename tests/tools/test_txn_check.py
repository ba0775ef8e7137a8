"""``logstore check`` over transactions: the producer state replayed over a partition (what the log
would have refused is an error naming the segment), each segment's ``.txnindex`` against the ABORT
markers, producer snapshots against the replay, and the log's last stable offset.

The rules are shown on raw segments (bytes the log itself would never write) fed to
``TransactionReplay``; the store-level checks use real markers, written with
``Log.append(producer=...)`` and ``Log.append_marker``."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from logstore.cli.main import main
from logstore.manager.log_manager import LogManager
from logstore.records.batching import ProducerBatch
from logstore.records.decoder import Record
from logstore.records.encoder import assign_base_offset, encode_batch, encode_marker_batch
from logstore.tools.check import verify_store
from logstore.tools.dump import scan_log_file
from logstore.tools.txn_check import TransactionReplay

SEGMENT = "00000000000000000000"


# --- the rules, on raw segments ------------------------------------------------------------------


def data(base, pid, epoch, count=1, transactional=True, sequence=0):
    return encode_batch([Record(None, b"v%d" % (base + i), (), 100) for i in range(count)], base_offset=base,
                        producer=(pid, epoch, sequence), transactional=transactional)


def marker(offset, pid, epoch, commit, coordinator_epoch=0):
    batch = encode_marker_batch(commit, coordinator_epoch, pid, epoch, timestamp_ms=200)
    assign_base_offset(batch, offset)
    return batch


def replay_of(tmp_path, *batches, exact=True):
    """Replay the segment of ``batches``; returns (the replay, the errors reported)."""
    path = tmp_path / f"{SEGMENT}.log"
    path.write_bytes(b"".join(batches))
    errors = []
    replay = TransactionReplay(lambda where, message: errors.append((where, message)), exact=exact)
    for entry in scan_log_file(str(path)):
        assert entry.ok
        replay.batch(str(path), entry)
    return replay, errors


def messages(errors):
    return [message for _where, message in errors]


def test_a_clean_history_has_no_error_and_its_aborts(tmp_path):
    replay, errors = replay_of(tmp_path, data(0, 1, 0, 2), data(2, 2, 0), marker(3, 1, 0, True),
                               marker(4, 2, 0, False), data(5, 3, 0), encode_batch([Record(None, b"x", (), 1)],
                                                                                   base_offset=6))
    assert errors == []
    assert replay.last_stable_offset() == 5  # producer 3's transaction is open
    replay.end_segment("i.txnindex", [(2, 2, 4, 5)])  # producer 2 aborted, the LSO then the log end
    assert errors == []


def test_an_abort_missing_from_the_index_is_an_error_naming_it(tmp_path):
    replay, _ = replay_of(tmp_path, data(0, 1, 0, 2), data(2, 2, 0), marker(3, 2, 0, False),
                          marker(4, 1, 0, False))
    errors = []
    replay._report = lambda where, message: errors.append((where, message))
    replay.end_segment("x.txnindex", [(2, 2, 3, 0)])  # producer 1's abort (first 0, marker 4) missing
    assert errors == [("x.txnindex", "no entry for the transaction of producer 1 aborted by the marker at offset 4 "
                                     "(first offset 0): read_committed readers would see its records")]


def test_index_entries_must_match_the_replay(tmp_path):
    replay, _ = replay_of(tmp_path, data(0, 1, 0, 2), data(2, 2, 0), marker(3, 2, 0, False),
                          marker(4, 1, 0, False))
    errors = []
    replay._report = lambda where, message: errors.append((where, message))
    # producer 2: right first offset, LSO after its marker is 0 (producer 1 still open); producer 1:
    # first offset wrong, then LSO 5; and an entry pointing at a COMMIT-less offset
    replay.end_segment("x.txnindex", [(2, 2, 3, 0), (1, 1, 4, 5), (9, 0, 2, 5)])
    assert messages(errors) == [
        "entry 1 (producer 1, offsets 1..4, last stable offset 5): the transaction's first offset in the log is 0",
        "entry 2 (producer 9, offsets 0..2, last stable offset 5) names no ABORT marker of producer 9 at offset 2 "
        "in this segment"]


def test_without_the_whole_history_an_entry_may_start_earlier(tmp_path):
    replay, _ = replay_of(tmp_path, data(10, 1, 0), marker(11, 1, 0, False), marker(12, 2, 0, False), exact=False)
    errors = []
    replay._report = lambda where, message: errors.append((where, message))
    # producer 1's data before 10 is gone (retention): an earlier first offset is fine, a later one not;
    # producer 2's marker closed nothing the replay saw, its entry is kept as written
    replay.end_segment("x.txnindex", [(1, 3, 11, 99), (2, 1, 12, 99)])
    assert errors == []
    replay, _ = replay_of(tmp_path, data(10, 1, 0), marker(11, 1, 0, False), exact=False)
    replay._report = lambda where, message: errors.append((where, message))
    replay.end_segment("x.txnindex", [(1, 10, 11, 11)])
    replay, _ = replay_of(tmp_path, data(10, 1, 0), marker(11, 1, 0, False), exact=False)
    replay._report = lambda where, message: errors.append((where, message))
    replay.end_segment("x.txnindex", [(1, 11, 11, 11)])
    assert messages(errors) == ["entry 0 (producer 1, offsets 11..11, last stable offset 11): the transaction's "
                                "first offset in the log is 10"]


def test_a_transactional_batch_after_a_marker_with_a_higher_epoch_is_an_error(tmp_path):
    _, errors = replay_of(tmp_path, data(0, 1, 0), marker(1, 1, 3, False), data(2, 1, 2))
    assert len(errors) == 1 and errors[0][0].endswith(f"{SEGMENT}.log")
    assert errors[0][1] == ("batch at position %d (offsets 2..2): a transactional batch the log refuses "
                            "(INVALID_PRODUCER_EPOCH): producer 1 epoch 2 is older than its current epoch 3"
                            % (len(data(0, 1, 0)) + len(marker(1, 1, 3, False))))


def test_a_marker_with_a_lower_epoch_or_an_older_coordinator_is_an_error(tmp_path):
    _, errors = replay_of(tmp_path, data(0, 1, 2), marker(1, 1, 1, True))
    assert messages(errors)[0].endswith("a COMMIT marker the log refuses (INVALID_PRODUCER_EPOCH): marker for producer "
                                        "1 has epoch 1, older than its current epoch 2")
    _, errors = replay_of(tmp_path, data(0, 1, 0), marker(1, 1, 0, True, coordinator_epoch=5), data(2, 1, 0),
                          marker(3, 1, 0, False, coordinator_epoch=4))
    assert messages(errors) == [
        "batch at position %d (offsets 3..3): an ABORT marker the log refuses (TRANSACTION_COORDINATOR_FENCED): marker "
        "for producer 1 comes from coordinator epoch 4, older than 5"
        % (2 * len(data(0, 1, 0)) + len(marker(1, 1, 0, True)))]


def test_markers_without_a_transaction_and_higher_epochs_are_allowed(tmp_path):
    replay, errors = replay_of(tmp_path, marker(0, 1, 0, False), marker(1, 1, 0, False), data(2, 1, 0),
                               marker(3, 1, 4, False), data(4, 1, 4), marker(5, 1, 4, True))
    assert errors == []
    assert replay.table.entry(1).epoch == 4 and replay.last_stable_offset() == 6


def test_a_non_transactional_producer_batch_inside_its_open_transaction_is_an_error(tmp_path):
    _, errors = replay_of(tmp_path, data(0, 1, 0), data(1, 1, 0, transactional=False, sequence=1))
    assert messages(errors) == [
        "batch at position %d (offsets 1..1): a non-transactional batch the log refuses (INVALID_TXN_STATE): producer 1 "
        "appends outside its transaction while the transaction is open (from offset 0)" % len(data(0, 1, 0))]


# --- a store -------------------------------------------------------------------------------------


@pytest.fixture
def store_dir(tmp_path):
    """``t-0``: producer 1 epoch 3 committed 0..1 (COMMIT at 2), producer 2 aborted 3 (ABORT at 4),
    plain 5, producer 3's transaction open from 6."""
    path = tmp_path / "store"
    with LogManager([str(path)]) as store:
        store.create_topic("t", partitions=1)
        log = store.get_log("t", 0)
        log.append([Record(value=b"c0"), Record(value=b"c1")], producer=ProducerBatch(1, 3, 0, True))
        log.append_marker(1, 3, 0, True)
        log.append([Record(value=b"a3")], producer=ProducerBatch(2, 0, 0, True))
        log.append_marker(2, 0, 0, False)
        log.append([Record(value=b"plain")])
        log.append([Record(value=b"open")], producer=ProducerBatch(3, 0, 0, True))
        assert log.last_stable_offset == 6
    return path


def check(store_dir):
    with LogManager([str(store_dir)], read_only=True) as store:
        return verify_store(store)


def test_a_store_with_transactions_passes(store_dir):
    report = check(store_dir)
    assert report.ok and report.problems == [], report.problems
    assert report.batches == 6


def append_raw(store_dir, batch):
    """Append ``batch`` (bytes the log itself would refuse) at the log end of ``t-0``."""
    with LogManager([str(store_dir)], read_only=True) as store:
        end = store.get_log("t", 0).log_end_offset
    assign_base_offset(batch, end)
    path = store_dir / "t-0" / f"{SEGMENT}.log"
    with open(path, "ab") as file:
        file.write(batch)
    return str(path), end


def test_a_marker_the_log_would_refuse_is_an_error_naming_the_segment(store_dir):
    path, offset = append_raw(store_dir, encode_marker_batch(True, 0, 1, 2, timestamp_ms=10))
    report = check(store_dir)
    assert [(p.path, p.message.split(": ", 1)[1]) for p in report.errors] == [
        (path, "a COMMIT marker the log refuses (INVALID_PRODUCER_EPOCH): marker for producer 1 has epoch 2, older "
               "than its current epoch 3")]
    assert f"(offsets {offset}..{offset})" in report.errors[0].message
    result = CliRunner().invoke(main, ["--dir", str(store_dir), "check"])
    assert result.exit_code == 1 and path in result.stdout + result.stderr


def test_snapshots_must_decode_and_agree_with_the_log(store_dir):
    from logstore.fs import OS_FILE_SYSTEM
    from logstore.log.producer_snapshot import list_snapshots, read_snapshot, write_snapshot

    directory = str(store_dir / "t-0")
    newest = list_snapshots(OS_FILE_SYSTEM, directory)[-1]
    assert newest == 7 and check(store_dir).problems == []  # the store's own snapshots agree with the log
    (one, two, three) = read_snapshot(OS_FILE_SYSTEM, directory, newest).entries
    assert (three.producer_id, three.txn_first_offset) == (3, 6)
    path = write_snapshot(OS_FILE_SYSTEM, directory, newest, [one, two._replace(epoch=1), three], batches_follow=False)
    assert [(p.path, p.message) for p in check(store_dir).errors] == [
        (path, "producer 2: (epoch, coordinator epoch, last offset, open transaction's first offset) is (1, 0, 4, -1), "
               "the log's batches before offset 7 say (0, 0, 4, -1)")]
    write_snapshot(OS_FILE_SYSTEM, directory, newest, [one, two], batches_follow=False)  # producer 3's open one lost
    assert [(p.path, p.message) for p in check(store_dir).errors] == [
        (path, "producer 3's transaction open from offset 6 is missing: a load would not know it is open "
               "(read_committed readers would read past it)"),
        # and indeed the open loaded it without the transaction: its LSO is the log end
        (directory, "the log's last stable offset 7 is not the replay's 6 (open transactions by first offset and "
                    "producer: [(6, 3)])")]
    with open(path, "r+b") as file:
        file.seek(12)
        file.write(b"\x7f")
    report = check(store_dir)
    # the damage is reported (by the open); the newest intact snapshot before it is the one compared,
    # and it agrees with the log (as does the log's LSO, which the open replayed from it)
    assert len(report.errors) == 1 and path in report.errors[0].message and "CRC mismatch" in str(report.errors[0])


def test_the_txnindex_must_hold_each_abort(store_dir):
    index = store_dir / "t-0" / f"{SEGMENT}.txnindex"
    from logstore.log.txn_index import TxnIndexEntry, decode_entries, encode_entry

    entries = decode_entries(index.read_bytes(), str(index))
    assert entries == [TxnIndexEntry(2, 3, 4, 5)]  # producer 2's data at 3, its ABORT at 4, then the LSO 5
    index.write_bytes(encode_entry(entries[0]._replace(first_offset=2)))
    assert [(p.path, p.message) for p in check(store_dir).errors] == [
        (str(index), "entry 0 (producer 2, offsets 2..4, last stable offset 5): the transaction's first offset in the "
                     "log is 3")]
    index.write_bytes(encode_entry(entries[0]._replace(last_stable_offset=6)))
    assert [p.message for p in check(store_dir).errors] == [
        "entry 0 (producer 2, offsets 3..4, last stable offset 6): the last stable offset after the marker is 5"]
    index.unlink()
    assert [(p.path, p.message) for p in check(store_dir).errors] == [
        (str(index), "no entry for the transaction of producer 2 aborted by the marker at offset 4 (first offset 3): "
                     "read_committed readers would see its records")]
    index.write_bytes(encode_entry(entries[0])[:-1] + b"\x00")
    report = check(store_dir)
    assert [p.path for p in report.errors] == [str(index)] and "fails its checksum" in report.errors[0].message
    index.write_bytes(encode_entry(entries[0]) + encode_entry(TxnIndexEntry(1, 0, 5, 6)))
    assert [p.message for p in check(store_dir).errors] == [
        "entry 1 (producer 1, offsets 0..5, last stable offset 6) names no ABORT marker of producer 1 at offset 5 in "
        "this segment"]
