"""``logstore.tools.reading``: the chunks ``logstore read`` prints, at both isolation levels, with real
transactions (``Log.append(producer=...)``, ``Log.append_marker``): each chunk's next offset moves
past markers and aborted records, so a reader (and a follower) never stalls at a marker."""

from __future__ import annotations

import pytest

from logstore import LogManager, Record
from logstore.records.batching import ProducerBatch
from logstore.tools.reading import follow_chunks, read_chunks


@pytest.fixture
def store(tmp_path):
    """``t-0``: producer 1 aborted 0..1 (ABORT at 2), plain 3, producer 2 committed 4 (COMMIT at 5)."""
    with LogManager([str(tmp_path / "store")]) as opened:
        opened.create_topic("t", partitions=1)
        log = opened.get_log("t", 0)
        log.append([Record(value=b"aborted-0"), Record(value=b"aborted-1")], producer=ProducerBatch(1, 0, 0, True))
        log.append_marker(1, 0, 0, False)
        log.append([Record(value=b"plain-3")])
        log.append([Record(value=b"committed-4")], producer=ProducerBatch(2, 0, 0, True))
        log.append_marker(2, 0, 0, True)
        yield opened


def chunks(log, start, isolation, max_records=100, chunk_records=1):
    return [([r.value for r in records], next_offset)
            for records, next_offset in read_chunks(log, start, max_records, chunk_bytes=1 << 20,
                                                    chunk_records=chunk_records, isolation=isolation)]


def test_read_committed_chunks_skip_aborted_records_and_end_past_the_last_marker(store):
    log = store.get_log("t", 0)
    got = chunks(log, 0, "read_committed")
    assert [value for values, _ in got for value in values] == [b"plain-3", b"committed-4"]
    assert got[-1][1] == 6 == log.log_end_offset  # the trailing COMMIT marker is passed
    assert all(later > earlier for (_, earlier), (_, later) in zip(got, got[1:]))


def test_read_uncommitted_chunks_show_aborted_records_but_no_marker(store):
    got = chunks(store.get_log("t", 0), 0, "read_uncommitted", chunk_records=10)
    assert [value for values, _ in got for value in values] == [b"aborted-0", b"aborted-1", b"plain-3", b"committed-4"]
    assert got[-1][1] == 6


def test_max_records_stops_after_that_many(store):
    got = chunks(store.get_log("t", 0), 0, "read_uncommitted", max_records=3)
    assert [value for values, _ in got for value in values] == [b"aborted-0", b"aborted-1", b"plain-3"]
    assert got[-1][1] == 4


def test_follow_moves_past_markers_and_aborted_records(store):
    log = store.get_log("t", 0)
    positions = {("t", 0): 0}
    seen = []
    for _turn in range(10):  # bounded: a stalled position would show as no progress here
        moved = follow_chunks(store, positions, chunk_bytes=1 << 20, wait_ms=0, isolation="read_committed")
        if not moved:
            break
        records, next_offset = moved[("t", 0)]
        seen.extend(r.value for r in records)
        assert next_offset > positions[("t", 0)]
        positions[("t", 0)] = next_offset
    assert seen == [b"plain-3", b"committed-4"] and positions[("t", 0)] == log.log_end_offset
    log.append([Record(value=b"open-6")], producer=ProducerBatch(3, 0, 0, True))
    assert follow_chunks(store, positions, chunk_bytes=1 << 20, wait_ms=0, isolation="read_committed") == {}
    assert [r.value for r in follow_chunks(store, positions, chunk_bytes=1 << 20, wait_ms=0)[("t", 0)][0]] == \
        [b"open-6"]


def test_an_unknown_isolation_is_refused(store):
    with pytest.raises(ValueError, match="isolation must be one of read_uncommitted, read_committed, got 'dirty'"):
        list(read_chunks(store.get_log("t", 0), 0, 1, chunk_bytes=1, chunk_records=1, isolation="dirty"))
