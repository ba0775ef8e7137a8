"""Compaction of a log holding transactions (``cleaner.transactions``, Kafka's cleaner rules):

- the cleanable range ends at the base of the segment holding the first unstable offset: an open
  transaction's data, and everything after it, is never compacted;
- the offset map skips markers and aborted data: an aborted record never shadows a committed value,
  and the recopy drops aborted data whatever its keys (also when the round is mapped in passes);
- a marker stays while any data batch of its transaction is left; then it gets a delete horizon
  (now + ``delete.retention.ms``) and the first round at or after it drops it;
- the last batch of each producer the log knows stays (emptied if need be, its producer block kept),
  and a rebuilt batch keeps its producer block, so a replay of the compacted log finds the same
  producers, epochs and (no) open transactions;
- the cleaned segment's ``.txnindex`` holds exactly the entries whose ABORT marker survives, so a
  read_committed reader is never told of an aborted transaction whose marker is gone.
"""

from __future__ import annotations

import os

import pytest

from logstore import LogManager, ManualClock, Record
from logstore.records.batching import ProducerBatch
from logstore.timer.scheduler import Scheduler

T0 = 1_700_000_000_000
RETENTION_MS = 10_000
TOPIC = "c"
CONFIG = {"cleanup.policy": "compact", "segment.bytes": 100_000, "file.delete.delay.ms": 0,
          "delete.retention.ms": RETENTION_MS}
RC, RU = "read_committed", "read_uncommitted"


def open_store(path, clock, **settings) -> LogManager:
    config = {"log.cleaner.threads": 0, "log.initial.task.delay.ms": 3_600_000, **settings}
    return LogManager([str(path)], config=config, clock=clock, scheduler=Scheduler(clock, threaded=False))


@pytest.fixture
def clock():
    return ManualClock(T0)


@pytest.fixture
def store(tmp_path, clock):
    with open_store(tmp_path, clock) as store:
        store.create_topic(TOPIC, 1, CONFIG)
        yield store


@pytest.fixture
def log(store):
    return store.get_log(TOPIC, 0)


def rec(key: str, value: str | None, clock=None) -> Record:
    return Record(key.encode(), None if value is None else value.encode(), (), T0 if clock is None else clock.time_ms())


def txn(pid: int, epoch: int = 0, seq: int = 0) -> ProducerBatch:
    return ProducerBatch(pid, epoch, seq, transactional=True)


def latest(records) -> dict[bytes, bytes | None]:
    found = {}
    for record in records:
        found[record.key] = record.value
    return found


def batches(log) -> list[tuple]:
    """``(base, last, record count, producer, marker, delete horizon)`` of every batch, markers included."""
    return [(b.header.base_offset, b.header.last_offset, b.header.record_count,
             None if p is None else tuple(p), m, b.header.delete_horizon_ms)
            for b, p, m in log.iter_batches_with_control()]


def marker_offsets(log) -> list[int]:
    return [base for base, _last, _count, _producer, marker, _horizon in batches(log) if marker is not None]


def compact(store):
    return store.compact(TOPIC)[(TOPIC, 0)]


# --- the cleanable range -------------------------------------------------------------------------


def test_an_open_transaction_and_everything_after_it_are_never_compacted(store, log):
    log.append([rec("k", "old")])
    log.roll()
    log.append([rec("k", "older-dup")])
    log.append([rec("t", "open")], producer=txn(7))  # opens at offset 2
    log.append([rec("k", "v2")])
    log.roll()
    log.append([rec("k", "v3")])
    log.roll()
    before = [(r.offset, r.key, r.value) for r in log.iter_records()]
    first_dirty, first_uncleanable, _ = store.cleaner.cleaner_manager.cleanable_offsets(log, None, T0)
    assert (first_dirty, first_uncleanable) == (0, 1)  # the base of the segment holding offset 2
    compact(store)
    after = [(r.offset, r.key, r.value) for r in log.iter_records()]
    # Only the first segment was cleaned: nothing at or after its end changed (duplicates stay).
    assert [entry for entry in after if entry[0] >= 1] == [entry for entry in before if entry[0] >= 1]
    assert log.first_unstable_offset == 2
    log.append_marker(7, 0, 0, commit=True)
    log.roll()
    compact(store)
    assert latest(log.iter_records(isolation=RC)) == {b"k": b"v3", b"t": b"open"}
    assert [(r.key, r.value) for r in log.iter_records()] == [(b"t", b"open"), (b"k", b"v3")]


# --- aborted data --------------------------------------------------------------------------------


@pytest.mark.parametrize("buffer", [None, 4096])  # one pass; a tiny dedupe buffer: mapped in passes
def test_an_aborted_record_never_shadows_a_committed_value_and_goes_whatever_its_key(tmp_path, clock, buffer):
    settings = {} if buffer is None else {"log.cleaner.dedupe.buffer.size": buffer}
    with open_store(tmp_path, clock, **settings) as store:
        store.create_topic(TOPIC, 1, CONFIG)
        log = store.get_log(TOPIC, 0)
        for i in range(60):
            log.append([rec(f"k{i}", f"committed-{i}")])
        log.append([rec(f"k{i}", f"aborted-{i}") for i in range(0, 60, 3)], producer=txn(7))
        log.append([rec("only-aborted", "x")], producer=txn(7, seq=20))
        log.append_marker(7, 0, 0, commit=False)
        log.append([rec("k1", "committed-again")], producer=txn(8))
        log.append_marker(8, 0, 0, commit=True)
        log.append([rec("k2", "plain-again")])
        log.roll()
        expected = {f"k{i}".encode(): f"committed-{i}".encode() for i in range(60)}
        expected[b"k1"], expected[b"k2"] = b"committed-again", b"plain-again"
        assert latest(log.iter_records(isolation=RC)) == expected
        stats = compact(store)
        assert stats is not None
        assert latest(log.iter_records(isolation=RC)) == expected
        # Aborted data is gone from the log itself: read_uncommitted sees one record per key, committed.
        uncommitted = list(log.iter_records())
        assert latest(uncommitted) == expected and len(uncommitted) == 60
        # Its ABORT marker no longer has data: it waits for its horizon (its entry with it).
        assert [(t.producer_id, t.first_offset) for t in log.aborted_transactions(0, log.log_end_offset)] == [
            (7, 60)]


# --- markers -------------------------------------------------------------------------------------


def test_a_marker_stays_while_its_data_does_then_goes_after_its_delete_horizon(store, log, clock):
    log.append([rec("a", "txn-1"), rec("b", "txn-1")], producer=txn(7))
    commit = log.append_marker(7, 0, 0, commit=True)  # offset 2
    log.append([rec("x", "aborted")], producer=txn(7, seq=2))
    abort = log.append_marker(7, 0, 0, commit=False)  # offset 4
    log.append([rec("c", "txn-3")], producer=txn(7, seq=3))
    last = log.append_marker(7, 0, 0, commit=True)  # offset 6: the producer's last batch
    log.append([rec("a", "plain")])
    log.roll()
    assert (commit, abort, last) == (2, 4, 6)
    compact(store)
    horizons = {base: horizon for base, _l, _c, _p, marker, horizon in batches(log) if marker is not None}
    # b of the first transaction is left: its COMMIT stays as it was; the aborted transaction lost its
    # data: its ABORT gets a horizon; the producer's last batch stays as it is.
    assert horizons == {2: -1, 4: T0 + RETENTION_MS, 6: -1}
    assert [(t.producer_id, t.first_offset) for t in log.aborted_transactions(0, 100)] == [(7, 3)]
    log.append([rec("b", "plain")])
    log.roll()
    clock.advance(RETENTION_MS - 1)
    compact(store)
    horizons = {base: horizon for base, _l, _c, _p, marker, horizon in batches(log) if marker is not None}
    assert horizons == {2: T0 + 2 * RETENTION_MS - 1, 4: T0 + RETENTION_MS, 6: -1}
    clock.advance(1)
    log.append([rec("b", "plain-2")])  # (a round needs dirty data)
    log.roll()
    stats = compact(store)
    assert stats.markers_removed == 1
    assert marker_offsets(log) == [2, 6]
    assert log.aborted_transactions(0, 100) == []  # the entry went with its marker
    assert sorted(os.path.basename(p) for p in os.listdir(log.dir_path) if "txnindex" in p) == []
    clock.advance(RETENTION_MS)
    log.append([rec("z", "plain")])
    log.roll()
    compact(store)
    assert marker_offsets(log) == [6]  # the producer's last marker stays, whatever its age
    assert latest(log.iter_records(isolation=RC)) == {b"a": b"plain", b"b": b"plain-2", b"c": b"txn-3",
                                                     b"z": b"plain"}


def test_a_dropped_abort_marker_takes_its_entry_so_later_committed_data_of_its_producer_stays_visible(
        store, log, clock):
    log.append([rec("a", "aborted")], producer=txn(7))
    log.append_marker(7, 0, 0, commit=False)
    log.append([rec("pad", "x")])
    log.roll()
    compact(store)
    clock.advance(RETENTION_MS)
    log.append([rec("pad", "y")])
    log.roll()
    compact(store)  # the ABORT (not the producer's last batch? it is: kept)
    log.append([rec("b", "committed")], producer=txn(7, seq=1))
    log.append_marker(7, 0, 0, commit=True)
    log.append([rec("pad", "z")])
    log.roll()
    compact(store)
    clock.advance(RETENTION_MS)
    log.append([rec("pad", "w")])
    log.roll()
    compact(store)
    assert 1 not in marker_offsets(log)  # the ABORT went: no longer the producer's last batch
    assert log.aborted_transactions(0, log.log_end_offset) == []
    assert latest(log.iter_records(isolation=RC)) == {b"b": b"committed", b"pad": b"w"}
    assert [r.value for r in log.read(0, isolation=RC, max_bytes=1 << 20)] == [b"committed", b"w"]


# --- producers -----------------------------------------------------------------------------------


def test_rebuilt_batches_keep_their_producer_block_and_a_replay_finds_the_same_producers(store, log):
    log.append([rec("a", "1"), rec("b", "1"), rec("c", "1")], producer=txn(7, epoch=3, seq=10))
    log.append_marker(7, 3, 2, commit=True)
    log.append([rec("a", "2")], producer=ProducerBatch(9, 1, 5))  # idempotent, not transactional
    log.append([rec("a", "3")])  # shadows 9's only record: 9's batch stays, emptied
    log.roll()
    compact(store)
    rows = batches(log)
    assert rows[0] == (0, 2, 2, (7, 3, 10, True, False), None, -1)  # b and c kept, block kept
    assert rows[1][0] == 3 and rows[1][4] is not None  # its COMMIT: its data is left
    assert rows[2] == (4, 4, 0, (9, 1, 5, False, False), None, -1)  # emptied, producer block kept
    entries = list(log.producer_state.entries())
    lso = log.last_stable_offset
    log.rebuild_producer_state()
    assert [(e.producer_id, e.epoch, e.coordinator_epoch, e.txn_first_offset) for e in log.producer_state.entries()] \
        == [(e.producer_id, e.epoch, e.coordinator_epoch, e.txn_first_offset) for e in entries] \
        == [(7, 3, 2, -1), (9, 1, -1, -1)]
    assert log.first_unstable_offset is None and log.last_stable_offset == lso == log.log_end_offset


def test_an_emptied_transactional_batch_keeps_its_marker(tmp_path, clock):
    with open_store(tmp_path, clock) as store:
        store.create_topic(TOPIC, 1, {**CONFIG, "segment.bytes": 150})  # a group per segment
        log = store.get_log(TOPIC, 0)
        for append in (lambda: log.append([rec("a", "txn")], producer=txn(7)),
                       lambda: log.append_marker(7, 0, 0, commit=True),
                       lambda: log.append([rec("a", "plain")]),
                       lambda: log.append([rec("b", "txn")], producer=txn(7, seq=1)),
                       lambda: log.append_marker(7, 0, 0, commit=True),
                       lambda: log.append([rec("pad", "x")])):
            append()
            log.roll()
        assert len(log.segments) == 7
        for pad in range(3):
            compact(store)
            clock.advance(RETENTION_MS)
            log.append([rec("pad", str(pad))])
            log.roll()
        rows = batches(log)
        # The first transaction's only batch ends its segment: kept, emptied, its block kept; so
        # its COMMIT stays (a replay must find the transaction closed).
        assert rows[0] == (0, 0, 0, (7, 0, 0, True, False), None, -1)
        assert marker_offsets(log) == [1, 4]
        log.rebuild_producer_state()
        assert log.first_unstable_offset is None


def test_reads_and_the_txn_index_survive_a_reopen_after_compaction(tmp_path, clock):
    with open_store(tmp_path, clock) as store:
        store.create_topic(TOPIC, 1, CONFIG)
        log = store.get_log(TOPIC, 0)
        log.append([rec("a", "committed")])
        log.append([rec("a", "aborted"), rec("b", "aborted")], producer=txn(7))
        log.append_marker(7, 0, 0, commit=False)
        log.append([rec("c", "open")], producer=txn(8))
        log.roll()
        log.append([rec("d", "after")])
        log.roll()
        compact(store)  # nothing: the open transaction's segment is the first
        log.append_marker(8, 0, 0, commit=True)
        log.roll()
        compact(store)
        expected = [(r.offset, r.value) for r in log.iter_records(isolation=RC)]
        aborted = log.aborted_transactions(0, log.log_end_offset)
    assert expected == [(0, b"committed"), (4, b"open"), (5, b"after")]
    assert [(t.producer_id, t.first_offset) for t in aborted] == [(7, 1)]
    with open_store(tmp_path, clock) as store:
        log = store.get_log(TOPIC, 0)
        assert [(r.offset, r.value) for r in log.iter_records(isolation=RC)] == expected
        assert log.aborted_transactions(0, log.log_end_offset) == aborted


def test_a_map_built_elsewhere_over_aborted_data_is_not_trusted(store, log):
    """A ``PrebuiltMap`` (the Spark job's) made from a read_uncommitted scan holds an aborted record as
    the latest of its key; used as it is, it would drop the committed value. The round maps that
    range itself instead."""
    from logstore.cleaner.log_cleaner import PrebuiltMap
    from logstore.cleaner.offset_map import OffsetMap

    log.append([rec("k", "committed")])
    log.append([rec("k", "aborted")], producer=txn(7))
    log.append_marker(7, 0, 0, commit=False)
    log.append([rec("pad", "x")])
    log.roll()
    (first_dirty, first_uncleanable), = store.compaction_ranges(TOPIC).values()
    offset_map = OffsetMap(1 << 20)
    offset_map.put_batch([record.key for record in log.iter_records()],
                         [record.offset for record in log.iter_records()])  # read_uncommitted: k -> 1
    stats = store.compact(TOPIC, offset_maps={(TOPIC, 0): PrebuiltMap(first_dirty, first_uncleanable, offset_map)})
    assert stats[(TOPIC, 0)] is not None
    assert latest(log.iter_records(isolation=RC)) == {b"k": b"committed", b"pad": b"x"}
    assert [(r.offset, r.value) for r in log.iter_records()] == [(0, b"committed"), (3, b"x")]
