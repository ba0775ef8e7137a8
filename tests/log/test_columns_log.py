"""Invariants checked: the columnar reads of a log (``Log.iter_columns``, ``Log.fetch_columns``,
``LogManager.fetch_columns``) give exactly the records of the record reads.

- ``iter_columns(a, b)`` flattened (``ColumnBatch.records``) equals ``iter_records(a, b)``, and
  ``fetch_columns(o, max_bytes, max_records)`` equals ``fetch(...)`` (records, next offset, high
  watermark, last stable offset, aborted transactions), at both isolation levels, over logs of
  several segments with plain, gzip, keyless, tombstone and header-carrying batches, a compacted log
  (sparse offsets), transactions committed, aborted and still open (markers never come, aborted
  batches never come at read_committed, nothing at or past the LSO), from offsets inside batches
  (the first ``ColumnBatch`` then starts inside its batch); random logs too (hypothesis).
- A read-only view and the store's ``fetch_columns`` of several partitions; out-of-range offsets
  and bad limits raise as ``fetch`` does.
"""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import given, settings, strategies as st

from logstore import LogManager, ManualClock, Record
from logstore.errors import OffsetOutOfRangeError
from logstore.records.batching import ProducerBatch
from logstore.records.decoder import CONTROL
from logstore.timer.scheduler import Scheduler

T0 = 1_700_000_000_000
RC, RU = "read_committed", "read_uncommitted"


def open_store(path: str, **options) -> tuple[LogManager, ManualClock]:
    clock = ManualClock(T0)
    config = {"log.cleaner.threads": 0, "log.initial.task.delay.ms": 3_600_000}
    return LogManager([path], config=config, clock=clock, scheduler=Scheduler(clock, threaded=False),
                      **options), clock


def flat(batches) -> list[Record]:
    return [record for batch in batches for record in batch.records()]


def check_log(log, offsets, isolation: str = RU) -> int:
    """The columnar reads of ``log`` from each of ``offsets`` against the record reads; returns how
    many scans began inside a batch."""
    end = log.log_end_offset
    straddled = 0
    for offset in offsets:
        for stop in (None, offset + 1, offset + 7, end):
            columns = list(log.iter_columns(offset, stop, isolation=isolation))
            assert flat(columns) == list(log.iter_records(offset, stop, isolation=isolation)), (offset, stop)
            assert all(len(batch) and not batch.batch.header.attributes & CONTROL for batch in columns)
            if columns and columns[0].start:  # a batch straddling the start: the range begins inside it
                first = columns[0]
                assert first.batch.record_at(first.start - 1).offset < offset <= first.first_offset
                straddled += 1
        for max_bytes, max_records in ((1, None), (50, None), (400, 3), (1 << 20, None), (1 << 20, 5), (0, 1)):
            want = log.fetch(offset, max_bytes, max_records, isolation=isolation)
            got = log.fetch_columns(offset, max_bytes, max_records, isolation=isolation)
            assert flat(got.batches) == want.records, (offset, max_bytes, max_records)
            assert got[1:] == want[1:], (offset, max_bytes, max_records)
    return straddled


def mixed_log(store: LogManager, clock: ManualClock):
    store.create_topic("m", 1, {"segment.bytes": 2000})
    store.create_topic("z", 1, {"segment.bytes": 2000, "compression.type": "gzip"})
    for topic in ("m", "z"):
        log = store.get_log(topic, 0)
        for i in range(40):
            size = 1 + i % 9
            log.append([Record(None if j % 4 == 1 else b"k%d" % j, None if j % 5 == 3 else b"v%d-%d" % (i, j) * (j % 3),
                               (("h", b"%d" % j),) if i % 3 == 0 else (), T0 + i * 10 + j) for j in range(size)])
            clock.advance(1)
    return store.get_log("m", 0), store.get_log("z", 0)


def test_plain_and_compressed_logs_across_segments(tmp_path):
    store, clock = open_store(str(tmp_path))
    with store:
        for log in mixed_log(store, clock):
            assert len(log.segments) >= 3
            end = log.log_end_offset
            assert check_log(log, sorted({0, 1, 4, 5, 17, end // 2, end - 3, end - 1, end}))
            check_log(log, [0, 7, end - 1], RC)  # no transaction: the same records


def test_a_compacted_log_with_sparse_offsets(tmp_path):
    store, clock = open_store(str(tmp_path))
    with store:
        store.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": 1000, "file.delete.delay.ms": 0})
        log = store.get_log("c", 0)
        for i in range(120):
            log.append([Record(b"k%d" % (i % 9), None if i % 11 == 3 else b"v%d" % i, (), T0 + i),
                        Record(b"u%d" % i, b"", (("i", b"x"),), T0 - i)])
            clock.advance(1)
        log.roll()
        store.compact("c")
        columns = list(log.iter_columns())
        assert any(not batch.dense for batch in columns)
        offsets = [record.offset for record in log.iter_records()]
        assert len(offsets) < log.log_end_offset - log.log_start_offset
        check_log(log, sorted({3, 100, offsets[len(offsets) // 2], 239, 240}))


def rec(tag: str, i: int) -> Record:
    return Record(f"{tag}-{i}".encode(), f"value-{tag}-{i}".encode(), (), T0 + i)


def test_transactions_at_both_isolation_levels(tmp_path):
    store, _clock = open_store(str(tmp_path))
    with store:
        store.create_topic("t", 1, {"segment.bytes": 1500})
        log = store.get_log("t", 0)

        def txn(pid: int, seq: int) -> ProducerBatch:
            return ProducerBatch(pid, 0, seq, transactional=True)

        log.append([rec("plain", i) for i in range(5)])
        log.append([rec("committed", i) for i in range(4)], producer=txn(1, 0))
        log.append([rec("aborted", i) for i in range(6)], producer=txn(2, 0))
        log.append([rec("plain2", i) for i in range(3)])
        log.append([rec("committed", i) for i in range(4, 7)], producer=txn(1, 4))
        log.append_marker(2, 0, 0, commit=False)
        log.append_marker(1, 0, 0, commit=True)
        log.append([rec("aborted-b", i) for i in range(2)], producer=txn(2, 6))
        log.append_marker(2, 0, 0, commit=False)
        log.append([rec("tail", i) for i in range(3)])
        log.append([rec("open", i) for i in range(3)], producer=txn(3, 0))  # still open: the LSO stops here
        log.append([rec("after-open", i) for i in range(2)])
        assert log.last_stable_offset < log.log_end_offset
        every = list(range(log.log_end_offset + 1))
        check_log(log, every, RU)
        check_log(log, every, RC)
        committed = [record.value for record in flat(log.iter_columns(isolation=RC))]
        assert not any(b"aborted" in value or b"open" in value for value in committed)
        assert b"value-committed-6" in committed and b"value-tail-2" in committed
        log.append_marker(3, 0, 0, commit=False)
        check_log(log, every, RC)


def test_a_read_only_view_and_the_stores_fetch(tmp_path):
    store, clock = open_store(str(tmp_path))
    with store:
        mixed_log(store, clock)
        positions = {("m", 0): 3, ("z", 0): 11}
        want = store.fetch_results(positions, max_bytes=300)
        got = store.fetch_columns(positions, max_bytes=300)
        assert {key: (flat(result.batches), *result[1:]) for key, result in got.items()} == {
            key: tuple(result) for key, result in want.items()}
    with LogManager([str(tmp_path)], read_only=True) as view:
        log = view.get_log("z", 0)
        check_log(log, [0, 9, log.log_end_offset - 2])
        got = view.fetch_columns({("m", 0): 0}, max_bytes=1 << 20)[("m", 0)]
        assert got.next_offset == got.high_watermark == view.get_log("m", 0).log_end_offset


def test_bad_offsets_and_limits_raise_as_fetch_does(tmp_path):
    store, clock = open_store(str(tmp_path))
    with store:
        log, _ = mixed_log(store, clock)
        for offset in (-1, log.log_end_offset + 1):
            with pytest.raises(OffsetOutOfRangeError):
                log.fetch_columns(offset)
            with pytest.raises(OffsetOutOfRangeError):
                list(log.iter_columns(offset))
        for bad, error in (({"max_bytes": -1}, ValueError), ({"max_records": 0}, ValueError),
                           ({"isolation": "dirty"}, ValueError)):
            with pytest.raises(error):
                log.fetch_columns(0, **bad)
        with pytest.raises(TypeError):
            log.fetch_columns("0")
        assert log.fetch_columns(log.log_end_offset).batches == []


@settings(max_examples=12, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12), st.booleans(), st.booleans(),
                          st.sampled_from(["none", "commit", "abort"])), min_size=1, max_size=14),
       st.data())
def test_random_logs(batches, data):
    with tempfile.TemporaryDirectory() as path:
        store, _clock = open_store(path)
        with store:
            store.create_topic("r", 1, {"segment.bytes": 900})
            log = store.get_log("r", 0)
            sequence = 0
            for i, (size, nulls, headers, txn) in enumerate(batches):
                records = [Record(None if nulls and j % 2 else b"k%d" % j, None if nulls and j % 3 == 1 else b"v" * j,
                                  (("h", b"%d" % i),) if headers else (), T0 + i - j) for j in range(size)]
                if txn == "none":
                    log.append(records)
                else:
                    log.append(records, producer=ProducerBatch(5, 0, sequence, transactional=True))
                    sequence += size
                    log.append_marker(5, 0, 0, commit=txn == "commit")
            end = log.log_end_offset
            offsets = sorted(set(data.draw(st.lists(st.integers(0, end), min_size=1, max_size=3))))
            check_log(log, offsets, data.draw(st.sampled_from([RU, RC])))
