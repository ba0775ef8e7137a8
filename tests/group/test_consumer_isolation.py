"""The in-process ``Consumer`` over transactions: ``isolation_level`` read_committed stops at the last
stable offset and leaves aborted records out, read_uncommitted returns them; markers are never
records and positions move past them; a ``latest`` reset under read_committed starts at the LSO.

Real markers: the partition's transactions are written with ``Log.append(producer=...)`` and
``Log.append_marker``. One member on the real clock (bounded polls)."""

from __future__ import annotations

import time

import pytest

from logstore.group.consumer import Consumer
from logstore.manager.log_manager import LogManager
from logstore.records.batching import ProducerBatch
from logstore.records.decoder import Record

FAST = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1}
CONSUMER = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 100, "rebalance_timeout_ms": 10000}


def txn(log, pid, values, sequence=0, epoch=0):
    log.append([Record(value=value) for value in values], producer=ProducerBatch(pid, epoch, sequence, True))


@pytest.fixture
def store(tmp_path):
    """``t-0``: plain 0, producer 1 committed 1..2 (COMMIT at 3), producer 2 aborted 4 (ABORT at 5),
    plain 6, producer 3's transaction open from 7, plain 8."""
    with LogManager([str(tmp_path / "store")]) as opened:
        opened.create_topic("t", partitions=1)
        log = opened.get_log("t", 0)
        log.append([Record(value=b"plain-0")])
        txn(log, 1, [b"committed-1", b"committed-2"])
        assert log.append_marker(1, 0, 0, True) == 3
        txn(log, 2, [b"aborted-4"])
        assert log.append_marker(2, 0, 0, False) == 5
        log.append([Record(value=b"plain-6")])
        txn(log, 3, [b"open-7"])
        log.append([Record(value=b"plain-8")])
        assert (log.last_stable_offset, log.log_end_offset) == (7, 9)
        yield opened


def poll_for(consumer, until, timeout_s=20.0):
    """Poll until ``until(records so far)``; bounded in time."""
    records = []
    deadline = time.monotonic() + timeout_s
    while not until(records):
        assert time.monotonic() < deadline, f"not reached in {timeout_s} s: {records}"
        records.extend(consumer.poll(100))
    return records


def test_read_committed_stops_at_the_open_transaction_without_aborted_records(store):
    with Consumer(store, "c", ["t"], coordinator_config=FAST, isolation_level="read_committed", **CONSUMER) as consumer:
        records = poll_for(consumer, lambda got: consumer.assignment() and consumer.position("t", 0) >= 7)
        assert [r.value for r in records] == [b"plain-0", b"committed-1", b"committed-2", b"plain-6"]
        assert consumer.position("t", 0) == 7
        assert consumer.poll(200) == []  # nothing past the LSO
        log = store.get_log("t", 0)
        log.append_marker(3, 0, 0, True)  # the open transaction commits: 7 and 8 become readable
        more = poll_for(consumer, lambda got: consumer.position("t", 0) >= 10)
        assert [(r.offset, r.value) for r in more] == [(7, b"open-7"), (8, b"plain-8")]
        assert consumer.position("t", 0) == 10 == log.log_end_offset  # past the trailing COMMIT marker


def test_read_uncommitted_returns_aborted_and_open_records_but_never_markers(store):
    with Consumer(store, "u", ["t"], coordinator_config=FAST, **CONSUMER) as consumer:
        assert consumer.isolation_level == "read_uncommitted"
        records = poll_for(consumer, lambda got: consumer.assignment() and consumer.position("t", 0) >= 9)
        assert [(r.offset, r.value) for r in records] == [
            (0, b"plain-0"), (1, b"committed-1"), (2, b"committed-2"), (4, b"aborted-4"), (6, b"plain-6"),
            (7, b"open-7"), (8, b"plain-8")]


def test_a_position_after_an_abort_marker_moves_on(store):
    log = store.get_log("t", 0)
    txn(log, 3, [b"open-9"], sequence=1)
    log.append_marker(3, 0, 0, False)  # aborts 7 and 9: the log ends with a marker (10)
    with Consumer(store, "a", ["t"], coordinator_config=FAST, isolation_level="read_committed", **CONSUMER) as consumer:
        records = poll_for(consumer, lambda got: consumer.assignment() and consumer.position("t", 0) >= 11)
        assert [r.value for r in records] == [b"plain-0", b"committed-1", b"committed-2", b"plain-6", b"plain-8"]
        consumer.commit()
        assert consumer.committed("t", 0) == 11 == log.log_end_offset


@pytest.mark.parametrize("isolation, start", [("read_committed", 7), ("read_uncommitted", 9)])
def test_latest_reset_starts_at_the_last_stable_offset_when_read_committed(store, isolation, start):
    with Consumer(store, f"latest-{isolation}", ["t"], coordinator_config=FAST, auto_offset_reset="latest",
                  isolation_level=isolation, **CONSUMER) as consumer:
        assert poll_for(consumer, lambda got: consumer.assignment()) == []  # nothing readable from there
        assert consumer.committed("t", 0) is None
        assert consumer.position("t", 0) == start


def test_a_bad_isolation_level_is_refused(store):
    with pytest.raises(ValueError, match="isolation_level.*'serializable'"):
        Consumer(store, "g", ["t"], isolation_level="serializable")
