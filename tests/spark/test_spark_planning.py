"""The Spark source's options and planning, without Spark (stdlib only): option checks, offset
resolution, minPartitions splits, the proportional maxOffsetsPerTrigger, availableNow and data loss."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from logstore.manager.log_manager import LogManager
from logstore.records.decoder import Record
from logstore.spark.options import (SourceOptionError, offsets_from_json, offsets_to_json, parse_source_options)
from logstore.spark.planning import (DataLossError, OffsetRange, StreamPlanner, plan_batch, rate_limit,
                                     split_ranges)


@pytest.fixture
def store(tmp_path):
    path = str(tmp_path / "store")
    with LogManager(path) as manager:
        manager.create_topic("events", 3)
        manager.create_topic("other", 1)
        for partition, count in enumerate((10, 20, 0)):
            for index in range(count):
                manager.append("events", [Record(b"k", b"v%d" % index, (), 1000 + 10 * index)], partition=partition)
        manager.append("other", [Record(None, b"x")])
    return path


def opts(path, streaming=False, **options):
    return parse_source_options({"path": path, **options}, streaming=streaming)


# --- options -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("options, message", [
    ({}, "exactly one of the options subscribe"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "got subscribe, assign"),
    ({"subscribe": " , "}, "names no topic"),
    ({"subscribePattern": "("}, "not a valid regular expression"),
    ({"assign": "[1]"}, "must be a JSON object"),
    ({"assign": '{"a": [-1]}'}, "needs a list of partition numbers"),
    ({"subscribe": "a", "startingOffsets": "latest"}, "cannot be 'latest' for a batch query"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": -1}}'}, "-1 (latest) is not allowed"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, "cannot be 'earliest'"),
    ({"subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, "-2 (earliest) is not allowed"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"x": 1}}'}, "is not a partition number"),
    ({"subscribe": "a", "startingOffsets": "{nope"}, "not valid JSON"),
    ({"subscribe": "a", "minPartitions": "0"}, "minPartitions must be an integer >= 1, got '0'"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger must be an integer"),
    ({"subscribe": "a", "failOnDataLoss": "yes"}, "failOnDataLoss must be true or false, got 'yes'"),
    ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "closest"}, "must be 'error' or 'latest'"),
    ({"subscribe": "a", "startingOffset": "earliest"}, "unknown option 'startingoffset'"),
])
def test_bad_options_fail_with_the_option_and_value(options, message):
    with pytest.raises(SourceOptionError) as info:
        parse_source_options({"path": "/store", **options}, streaming=False)
    assert message in str(info.value)


def test_options_are_case_insensitive_and_default_like_kafka():
    parsed = parse_source_options({"PATH": "/a,/b", "SUBSCRIBE": "x, y,x", "includeheaders": "TRUE"}, streaming=False)
    assert parsed.data_dirs == ("/a", "/b")
    assert parsed.subscribe == ("x", "y")
    assert parsed.include_headers and parsed.fail_on_data_loss
    assert parsed.starting == "earliest" and parsed.ending == "latest"
    assert parse_source_options({"path": "/a", "subscribe": "x"}, streaming=True).starting == "latest"
    with pytest.raises(SourceOptionError, match="endingOffsets is for batch queries only"):
        parse_source_options({"path": "/a", "subscribe": "x", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(SourceOptionError, match="logstore needs the store's path"):
        parse_source_options({"subscribe": "x"}, streaming=False)


def test_offset_json_round_trips_with_string_partitions():
    offsets = {("b", 10): 5, ("a", 2): 0, ("a", 1): 7}
    encoded = offsets_to_json(offsets)
    assert json.dumps(encoded) == '{"a": {"1": 7, "2": 0}, "b": {"10": 5}}'
    assert offsets_from_json(json.dumps(encoded)) == offsets
    with pytest.raises(SourceOptionError):
        offsets_from_json('{"a": 3}')


# --- batch plans ------------------------------------------------------------------------------------


def test_batch_plan_reads_every_partition_with_data(store):
    assert plan_batch(opts(store, subscribe="events")) == [
        OffsetRange("events", 0, 0, 10), OffsetRange("events", 1, 0, 20)]
    assert plan_batch(opts(store, subscribePattern="e.*|oth.r")) == [
        OffsetRange("events", 0, 0, 10), OffsetRange("events", 1, 0, 20), OffsetRange("other", 0, 0, 1)]
    assert plan_batch(opts(store, assign='{"events": [1]}')) == [OffsetRange("events", 1, 0, 20)]
    assert plan_batch(opts(store, subscribePattern="none")) == []


def test_batch_plan_offsets_json_with_earliest_and_latest(store):
    ranges = plan_batch(opts(store, subscribe="events", startingOffsets='{"events": {"0": 4, "1": -2}}',
                             endingOffsets='{"events": {"0": 6, "1": -1}}'))
    assert ranges == [OffsetRange("events", 0, 4, 6), OffsetRange("events", 1, 0, 20)]


def test_batch_plan_by_timestamp_uses_the_time_index(store):
    # partition 0 has timestamps 1000..1090, partition 1 1000..1190
    ranges = plan_batch(opts(store, subscribe="events", startingTimestamp="1095",
                             startingOffsetsByTimestampStrategy="latest"))
    assert ranges == [OffsetRange("events", 1, 10, 20)]
    with pytest.raises(SourceOptionError, match="has no record with timestamp >= 1095"):
        plan_batch(opts(store, subscribe="events", startingTimestamp="1095"))
    assert plan_batch(opts(store, assign='{"events": [0]}', startingTimestamp="1031")) == [
        OffsetRange("events", 0, 4, 10)]


def test_batch_plan_by_timestamps_per_partition_and_at_the_end(store):
    # partition 0 has timestamps 1000..1090, partition 1 1000..1190, both one per 10 ms
    by_partition = plan_batch(opts(store, subscribe="events", startingOffsetsByTimestamp='{"events": {"1": 1150}}',
                                   startingOffsets='{"events": {"0": 3}}'))
    assert by_partition == [OffsetRange("events", 0, 3, 10), OffsetRange("events", 1, 15, 20)]
    # startingTimestamp wins over the per-partition JSON
    assert plan_batch(opts(store, assign='{"events": [1]}', startingTimestamp="1100",
                           startingOffsetsByTimestamp='{"events": {"1": 1150}}')) == [OffsetRange("events", 1, 10, 20)]
    ended = plan_batch(opts(store, subscribe="events", endingTimestamp="1045"))
    assert ended == [OffsetRange("events", 0, 0, 5), OffsetRange("events", 1, 0, 5)]  # before the first ts >= 1045
    assert plan_batch(opts(store, subscribe="events", endingOffsetsByTimestamp='{"events": {"1": 5000}}',
                           endingOffsets='{"events": {"0": 2}}')) == [
        OffsetRange("events", 0, 0, 2), OffsetRange("events", 1, 0, 20)]  # no record that late: the log end
    with pytest.raises(SourceOptionError, match="endingTimestamp is for batch queries only"):
        parse_source_options({"path": store, "subscribe": "events", "endingTimestamp": "5"}, streaming=True)
    with pytest.raises(SourceOptionError, match="is not a partition number and a timestamp"):
        opts(store, subscribe="events", startingOffsetsByTimestamp='{"events": {"0": -5}}')
    with pytest.raises(SourceOptionError, match="names other-0, which the query does not read"):
        plan_batch(opts(store, subscribe="events", endingOffsetsByTimestamp='{"other": {"0": 5}}'))


def test_batch_plan_refuses_what_the_store_does_not_have(store):
    with pytest.raises(SourceOptionError, match="topic 'nope' does not exist"):
        plan_batch(opts(store, subscribe="nope"))
    with pytest.raises(SourceOptionError, match="has no partition 5"):
        plan_batch(opts(store, assign='{"events": [5]}'))
    with pytest.raises(SourceOptionError, match="names other-0, which the query does not read"):
        plan_batch(opts(store, subscribe="events", startingOffsets='{"other": {"0": 0}}'))
    with pytest.raises(SourceOptionError, match="starting offset 8 is after the ending offset 3"):
        plan_batch(opts(store, subscribe="events", startingOffsets='{"events": {"0": 8}}',
                        endingOffsets='{"events": {"0": 3}}'))
    with pytest.raises(DataLossError, match="past its log end offset 10"):
        plan_batch(opts(store, subscribe="events", endingOffsets='{"events": {"0": 50}}'))
    assert plan_batch(opts(store, subscribe="events", endingOffsets='{"events": {"0": 50}}',
                           failOnDataLoss="false"))[0] == OffsetRange("events", 0, 0, 10)


def test_data_loss_after_retention(store):
    with LogManager(store) as manager:
        manager.get_log("events", 1).delete_records(15)
    with pytest.raises(DataLossError, match="offsets 0..14 of events-1 were deleted"):
        plan_batch(opts(store, subscribe="events", startingOffsets='{"events": {"1": 0}}'))
    assert plan_batch(opts(store, assign='{"events": [1]}', startingOffsets='{"events": {"1": 0}}',
                           failOnDataLoss="false")) == [OffsetRange("events", 1, 15, 20)]


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=6), st.integers(1, 40))
def test_split_ranges_covers_each_range_exactly(sizes, min_partitions):
    ranges = [OffsetRange("t", p, 100 * p, 100 * p + size) for p, size in enumerate(sizes) if size]
    split = split_ranges(ranges, min_partitions)
    for r in ranges:
        pieces = [piece for piece in split if piece.partition == r.partition]
        assert pieces[0].start == r.start and pieces[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))
        assert all(piece.size > 0 for piece in pieces)
    if len(ranges) >= min_partitions:
        assert split == ranges
    elif ranges:
        assert len(split) >= min(min_partitions, sum(r.size for r in ranges)) // 2


# --- streaming -----------------------------------------------------------------------------------------


@settings(max_examples=200)
@given(st.dictionaries(st.integers(0, 5), st.tuples(st.integers(0, 50), st.integers(0, 500)), min_size=1),
       st.one_of(st.none(), st.integers(1, 300)))
def test_rate_limit_takes_exactly_the_limit_in_proportion(backlogs, limit):
    starts = {("t", p): start for p, (start, _) in backlogs.items()}
    latest = {("t", p): start + size for p, (start, size) in backlogs.items()}
    ends = rate_limit(starts, latest, limit)
    total = sum(latest[k] - starts[k] for k in latest)
    taken = {k: ends[k] - starts[k] for k in latest}
    assert all(0 <= taken[k] <= latest[k] - starts[k] for k in latest)
    assert sum(taken.values()) == (total if limit is None else min(limit, total))
    if limit is not None and total > limit:  # proportional: within one record of the exact share
        assert all(abs(taken[k] - limit * (latest[k] - starts[k]) / total) < 1 for k in latest)


def test_stream_planner_micro_batches_with_available_now(store):
    planner = StreamPlanner(opts(store, streaming=True, subscribe="events", startingOffsets="earliest",
                                 maxOffsetsPerTrigger="7"))
    start = planner.initial_offset()
    assert start == {("events", 0): 0, ("events", 1): 0, ("events", 2): 0}
    planner.prepare_available_now()
    with LogManager(store) as manager:  # arrives after the availableNow target was fixed
        manager.append("events", [Record(b"late", b"x")], partition=2)
    batches = []
    while True:
        end = planner.latest_offset(start, 7)
        if end == start:
            break
        batches.append(sum(r.size for r in planner.partitions(start, end)))
        start = end
    assert batches == [7, 7, 7, 7, 2]
    assert start == {("events", 0): 10, ("events", 1): 20, ("events", 2): 0}
    fresh = StreamPlanner(opts(store, streaming=True, subscribe="events"))
    assert fresh.latest_offset(start, None)[("events", 2)] == 1  # without the target it sees the late record


def test_stream_planner_new_partitions_start_at_their_log_start(store):
    planner = StreamPlanner(opts(store, streaming=True, subscribePattern="ev.*|new"))
    start = planner.initial_offset()  # latest
    assert start == {("events", 0): 10, ("events", 1): 20, ("events", 2): 0}
    with LogManager(store) as manager:
        manager.create_topic("new", 1)
        manager.append("new", [Record(None, b"a"), Record(None, b"b")])
    end = planner.latest_offset(start, None)
    assert end[("new", 0)] == 2
    assert planner.partitions(start, end) == [OffsetRange("new", 0, 0, 2)]


def test_stream_planner_data_loss(store):
    planner = StreamPlanner(opts(store, streaming=True, subscribe="events"))
    with LogManager(store) as manager:
        manager.get_log("events", 1).delete_records(12)
    with pytest.raises(DataLossError, match="failOnDataLoss=false"):
        planner.partitions({("events", 1): 3}, {("events", 1): 20})
    tolerant = StreamPlanner(opts(store, streaming=True, subscribe="events", failOnDataLoss="false"))
    assert tolerant.partitions({("events", 1): 3}, {("events", 1): 20}) == [OffsetRange("events", 1, 12, 20)]
