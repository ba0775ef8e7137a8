"""Compaction on Spark equals the local cleaner: same retained offsets, keys, values, headers,
timestamps and tombstone handling on hypothesis-generated logs; the log end offset never moves back;
``logstore compact --engine spark`` end to end."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from logstore.cli.main import main
from logstore.manager.log_manager import LogManager
from logstore.records.decoder import Record
from logstore.spark.compact import compact_on_spark

pytestmark = pytest.mark.spark

CONFIG = {"cleanup.policy": "compact", "segment.bytes": "600", "delete.retention.ms": "1000",
          "min.cleanable.dirty.ratio": "0.01"}
NOW_MS = 10**12

record = st.builds(Record, key=st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"]),  # compacted topics need keys
                   value=st.one_of(st.none(), st.binary(max_size=30)),
                   headers=st.lists(st.tuples(st.sampled_from(["h", "trace"]), st.one_of(st.none(), st.binary(max_size=4))),
                                    max_size=2).map(tuple),
                   timestamp_ms=st.integers(NOW_MS - 10**6, NOW_MS))


def build(path, batches_per_partition):
    with LogManager(path) as manager:
        manager.create_topic("state", len(batches_per_partition), config=CONFIG)
        for partition, batches in enumerate(batches_per_partition):
            for batch in batches:
                manager.append("state", batch, partition=partition)


def snapshot(path, partitions):
    """Per partition: every record (offset, key, value, headers, timestamp) and the log end offset."""
    with LogManager(path, read_only=True) as manager:
        return {p: (list(manager.get_log("state", p).iter_records()), manager.get_log("state", p).log_end_offset)
                for p in range(partitions)}


def compact_locally(path, now_ms):
    manager = LogManager(path)
    try:
        return manager.compact("state", now_ms=now_ms)
    finally:
        manager.close()


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.lists(st.lists(record, min_size=1, max_size=8), min_size=1, max_size=12), min_size=1, max_size=2))
def test_spark_compaction_equals_local(spark, tmp_path_factory, batches_per_partition):
    base = tmp_path_factory.mktemp("compact")
    local, remote = str(base / "local"), str(base / "spark")
    build(local, batches_per_partition)
    shutil.copytree(local, remote)
    partitions = len(batches_per_partition)
    before = snapshot(local, partitions)
    # Round 1 stamps tombstone horizons; round 2, after delete.retention.ms, drops them: both engines.
    for now_ms in (NOW_MS, NOW_MS + 5000):
        compact_locally(local, now_ms)
        compact_on_spark(spark, remote, "state", now_ms=now_ms)
        after_local, after_spark = snapshot(local, partitions), snapshot(remote, partitions)
        assert after_spark == after_local
        for partition in range(partitions):
            assert after_spark[partition][1] == before[partition][1]  # the log end offset stays


def test_spark_compaction_maps_more_keys_than_the_dedupe_buffer_in_one_pass(spark, tmp_path):
    path = str(tmp_path / "store")
    with LogManager(path, config={"log.cleaner.dedupe.buffer.size": "20000"}) as manager:
        manager.create_topic("state", 1, config={**CONFIG, "segment.bytes": "20000"})
        for round_ in range(3):
            manager.append("state", [Record(b"key-%05d" % i, b"%d" % round_) for i in range(1000)])
        manager.get_log("state", 0).roll()
    results = compact_on_spark(spark, path, "state", config={"log.cleaner.dedupe.buffer.size": "20000"})
    stats = results[("state", 0)]
    assert stats.passes == 1 and stats.keys_mapped == 1000
    records = snapshot(path, 1)[0][0]
    assert len(records) == 1000 and {r.value for r in records} == {b"2"}


def test_cli_compact_with_the_spark_engine(spark, tmp_path):
    path = str(tmp_path / "store")
    with LogManager(path) as manager:
        manager.create_topic("state", 2, config=CONFIG)
        for partition in range(2):
            for i in range(40):
                manager.append("state", [Record(b"k%d" % (i % 4), b"v%d" % i)], partition=partition)
        manager.create_topic("plain", 1)
    local = str(tmp_path / "local")
    shutil.copytree(path, local)
    assert CliRunner().invoke(main, ["--dir", local, "compact", "state"]).exit_code == 0
    result = CliRunner().invoke(main, ["--dir", path, "compact", "--engine", "spark", "state"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1] == "Compacted 2 of 2 partitions on Spark."
    assert lines[0].startswith("state-0:") and lines[1].startswith("state-1:")
    compacted = snapshot(path, 2)
    assert all(len(records) < 40 for records, _ in compacted.values())

    def without_times(snap):  # the two runs appended nothing, but each stamped its own clock
        return {p: [(r.offset, r.key, r.value) for r in records] for p, (records, _) in snap.items()}

    assert without_times(compacted) == without_times(snapshot(local, 2))
    refused = CliRunner().invoke(main, ["--dir", path, "compact", "--engine", "spark", "plain"])
    assert refused.exit_code != 0 and "only compacted topics are compacted" in refused.output
    assert "Traceback" not in refused.output
    mixed = CliRunner().invoke(main, ["--dir", path, "compact", "--master", "local[1]"])
    assert mixed.exit_code != 0 and "--master is for --engine spark" in mixed.output


def test_the_spark_submit_module(spark, tmp_path, capsys):
    from logstore.spark.compact import main as submit_main

    path = str(tmp_path / "store")
    with LogManager(path) as manager:
        manager.create_topic("state", 1, config=CONFIG)
        for i in range(30):
            manager.append("state", [Record(b"k%d" % (i % 3), b"v%d" % i)])
    assert submit_main([path, "state", "--partition", "0"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "Compacted 1 of 1 partition on Spark." and out[0].startswith("state-0:")
    assert spark.range(3).count() == 3  # the active session was used and left running
