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
    assert errors[0][1] == ("batch at position %d (offsets 2..2): a transactional batch of producer 1 with epoch 2, "
                            "below the epoch 3 of its earlier batches or markers (the log refuses it: "
                            "INVALID_PRODUCER_EPOCH)" % (len(data(0, 1, 0)) + len(marker(1, 1, 3, False))))


def test_a_marker_with_a_lower_epoch_or_an_older_coordinator_is_an_error(tmp_path):
    _, errors = replay_of(tmp_path, data(0, 1, 2), marker(1, 1, 1, True))
    assert "a marker of producer 1 with epoch 1, below the epoch 2" in messages(errors)[0]
    _, errors = replay_of(tmp_path, data(0, 1, 0), marker(1, 1, 0, True, coordinator_epoch=5), data(2, 1, 0),
                          marker(3, 1, 0, False, coordinator_epoch=4))
    assert messages(errors) == [
        "batch at position %d (offsets 3..3): an ABORT marker of producer 1 from coordinator epoch 4, below the "
        "coordinator epoch 5 of its previous marker (the log refuses it: a fenced coordinator)"
        % (2 * len(data(0, 1, 0)) + len(marker(1, 1, 0, True)))]


def test_markers_without_a_transaction_and_higher_epochs_are_allowed(tmp_path):
    replay, errors = replay_of(tmp_path, marker(0, 1, 0, False), marker(1, 1, 0, False), data(2, 1, 0),
                               marker(3, 1, 4, False), data(4, 1, 4), marker(5, 1, 4, True))
    assert errors == []
    assert replay.producers[1].epoch == 4 and replay.last_stable_offset() == 6


def test_a_non_transactional_producer_batch_inside_its_open_transaction_is_an_error(tmp_path):
    _, errors = replay_of(tmp_path, data(0, 1, 0), data(1, 1, 0, transactional=False, sequence=1))
    assert messages(errors) == [
        "batch at position %d (offsets 1..1): a non-transactional batch of producer 1 while its transaction from "
        "offset 0 is open (the log refuses it: INVALID_TXN_STATE)" % len(data(0, 1, 0))]
