"""The Spark source over transactions, without a JVM: ``kafka.isolation.level`` (default
read_uncommitted, as Spark's Kafka source) picks the end of "latest" (the last stable offset or the
log end offset) and whether aborted records are rows; transaction markers are never rows. The read
task (``read_range``) runs here as an executor would run it. Real markers: ``Log.append(producer=...)``
and ``Log.append_marker``."""

from __future__ import annotations

import json

import pytest

from logstore.manager.log_manager import LogManager
from logstore.records.batching import ProducerBatch
from logstore.records.decoder import Record
from logstore.spark.options import SourceOptionError, parse_source_options
from logstore.spark.planning import OffsetRange, StreamPlanner, plan_batch

pytest.importorskip("pyarrow")
source = pytest.importorskip("logstore.spark.source")  # pyspark's Python side only, no JVM

COMMITTED = [b"plain-0", b"committed-1", b"committed-2", b"plain-6"]
EVERYTHING = [b"plain-0", b"committed-1", b"committed-2", b"aborted-4", b"plain-6", b"open-7", b"plain-8"]


@pytest.fixture
def store(tmp_path):
    """``events-0``: plain 0, producer 1 committed 1..2 (COMMIT at 3), producer 2 aborted 4 (ABORT at
    5), plain 6, producer 3's transaction open from 7, plain 8: LSO 7, LEO 9."""
    path = str(tmp_path / "store")
    with LogManager(path) as manager:
        manager.create_topic("events", 1)
        log = manager.get_log("events", 0)
        log.append([Record(value=b"plain-0")])
        log.append([Record(value=b"committed-1"), Record(value=b"committed-2")], producer=ProducerBatch(1, 0, 0, True))
        log.append_marker(1, 0, 0, True)
        log.append([Record(value=b"aborted-4")], producer=ProducerBatch(2, 0, 0, True))
        log.append_marker(2, 0, 0, False)
        log.append([Record(value=b"plain-6")])
        log.append([Record(value=b"open-7")], producer=ProducerBatch(3, 0, 0, True))
        log.append([Record(value=b"plain-8")])
        assert (log.last_stable_offset, log.log_end_offset) == (7, 9)
    return path


def opts(path, streaming=False, **options):
    return parse_source_options({"path": path, "subscribe": "events", "arrow": "false", **options},
                                streaming=streaming)


def rows(options, ranges):
    return [row[1] for offset_range in ranges for row in source.read_range(options, offset_range)]


def test_the_option_defaults_to_read_uncommitted_and_is_checked(store):
    assert opts(store).isolation == "read_uncommitted"
    assert opts(store, **{"kafka.isolation.level": "READ_COMMITTED"}).read_committed
    with pytest.raises(SourceOptionError, match="kafka.isolation.level must be read_uncommitted or read_committed, "
                                                "got 'snapshot'"):
        opts(store, **{"kafka.isolation.level": "snapshot"})


def test_read_uncommitted_reads_to_the_log_end_without_markers(store):
    options = opts(store)
    ranges = plan_batch(options)
    assert ranges == [OffsetRange("events", 0, 0, 9)]
    assert rows(options, ranges) == EVERYTHING


def test_read_committed_ends_at_the_last_stable_offset_without_aborted_records(store):
    options = opts(store, **{"kafka.isolation.level": "read_committed"})
    ranges = plan_batch(options)
    assert ranges == [OffsetRange("events", 0, 0, 7)]
    assert rows(options, ranges) == COMMITTED
    # An explicit range over the whole log still leaves the aborted records out.
    assert rows(options, [OffsetRange("events", 0, 0, 7)]) == COMMITTED


def test_a_range_on_markers_only_has_no_rows(store):
    for isolation in ("read_uncommitted", "read_committed"):
        options = opts(store, **{"kafka.isolation.level": isolation})
        assert rows(options, [OffsetRange("events", 0, 3, 4), OffsetRange("events", 0, 5, 6)]) == []


def test_a_stream_under_read_committed_waits_for_the_open_transaction(store):
    options = opts(store, streaming=True, startingOffsets="earliest", **{"kafka.isolation.level": "read_committed"})
    planner = StreamPlanner(options)
    start = planner.initial_offset()
    end = planner.latest_offset(start, None)
    assert end == {("events", 0): 7}
    assert rows(options, planner.partitions(start, end)) == COMMITTED
    assert planner.latest_offset(end, None) == end  # nothing new while the transaction is open
    with LogManager(store) as manager:
        manager.get_log("events", 0).append_marker(3, 0, 0, True)
    later = planner.latest_offset(end, None)
    assert later == {("events", 0): 10}
    assert rows(options, planner.partitions(end, later)) == [b"open-7", b"plain-8"]


@pytest.mark.parametrize("isolation, latest", [("read_committed", 7), ("read_uncommitted", 9)])
def test_latest_is_the_end_the_isolation_level_sees(store, isolation, latest):
    options = opts(store, streaming=True, startingOffsets="latest", **{"kafka.isolation.level": isolation})
    assert StreamPlanner(options).initial_offset() == {("events", 0): latest}
    ending = json.dumps({"events": {"0": -1}})
    assert plan_batch(opts(store, endingOffsets=ending, **{"kafka.isolation.level": isolation})) == \
        [OffsetRange("events", 0, 0, latest)]
