"""Compaction on Spark equals the local cleaner: same retained offsets, keys, values, headers,
timestamps and tombstone handling on hypothesis-generated logs; the log end offset never moves back;
``logstore compact --engine spark`` end to end, also where Spark's scan for ``pyspark_*`` modules
cannot see ``pyspark_logstore`` (as under an editable install)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

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


# Spark finds Python data sources by scanning pkgutil.iter_modules() for top-level pyspark_* modules, in
# a Python worker. setuptools' editable finder leaves pyspark_logstore importable but out of that scan.
# This sitecustomize does the same in every Python process started with it on PYTHONPATH: the driver
# and, through the inherited environment, Spark's workers.
_HIDE_FROM_SCAN = textwrap.dedent("""\
    import importlib.machinery
    import importlib.util
    import os
    import pkgutil
    import sys

    _iter_modules = pkgutil.iter_modules


    def iter_modules(path=None, prefix=""):
        return (info for info in _iter_modules(path, prefix) if info.name != prefix + "pyspark_logstore")


    pkgutil.iter_modules = iter_modules

    # This file shadows any sitecustomize further along sys.path (a venv's, a distribution's): run it too.
    _here = os.path.dirname(os.path.abspath(__file__))
    _spec = importlib.machinery.PathFinder.find_spec(
        "sitecustomize", [p for p in sys.path if os.path.abspath(p or os.curdir) != _here])
    if _spec is not None:
        _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
    """)

_PLAIN_READ = textwrap.dedent("""\
    import sys
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[1]").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark.read.format("logstore").option("subscribe", "state").load(sys.argv[1]).count()
    except Exception as exc:
        print(type(exc).__name__, exc)
    else:
        print("READ WITHOUT REGISTER")
    finally:
        spark.stop()
    """)

_LIGHT_SPARK = ("--conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false "
                "--conf spark.sql.shuffle.partitions=2 --conf spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 "
                "pyspark-shell")


def scan_hiding_env(hook_dir):
    """os.environ plus a sitecustomize on PYTHONPATH hiding pyspark_logstore from pkgutil.iter_modules()."""
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(_HIDE_FROM_SCAN, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(hook_dir), *filter(None, [env.get("PYTHONPATH")])])
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_SUBMIT_ARGS=_LIGHT_SPARK)
    return env


def run_python(env, cwd, *args):
    return subprocess.run([sys.executable, *args], env=env, cwd=str(cwd), capture_output=True, text=True,
                          timeout=240)


def test_cli_spark_compaction_registers_the_source_when_spark_cannot_discover_it(tmp_path):
    """``logstore compact --engine spark`` registers the source itself: it compacts even where Spark's
    module scan cannot see pyspark_logstore (an editable install), where a plain format("logstore") fails."""
    path = str(tmp_path / "store")
    with LogManager(path) as manager:
        manager.create_topic("state", 2, config=CONFIG)
        for partition in range(2):
            for i in range(40):
                manager.append("state", [Record(b"k%d" % (i % 4), b"v%d" % i)], partition=partition)
            manager.get_log("state", partition).roll()  # everything appended is below the active segment
    env, cwd = scan_hiding_env(tmp_path / "hook"), tmp_path / "cwd"
    cwd.mkdir()  # outside the repository: the installed package, as a user runs it

    # The simulation hides the module from the scan, leaves it importable, and so breaks discovery.
    hidden = run_python(env, cwd, "-c", "import pkgutil, pyspark_logstore; "
                        "print('pyspark_logstore' in {m.name for m in pkgutil.iter_modules()})")
    assert hidden.returncode == 0 and hidden.stdout.strip() == "False", hidden.stderr
    plain = run_python(env, cwd, "-c", _PLAIN_READ, path)
    assert "DATA_SOURCE_NOT_FOUND" in plain.stdout, (plain.stdout, plain.stderr[-3000:])

    result = run_python(env, cwd, "-m", "logstore.cli", "--dir", path, "compact", "--engine", "spark",
                        "--master", "local[2]", "state")
    assert result.returncode == 0, (result.stdout, result.stderr[-3000:])
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == "Compacted 2 of 2 partitions on Spark.", result.stdout
    compacted = snapshot(path, 2)
    for partition in range(2):  # one record per key, the latest; the log end offset stays
        records, log_end_offset = compacted[partition]
        assert [(r.offset, r.key, r.value) for r in records] == [(36 + i, b"k%d" % i, b"v%d" % (36 + i))
                                                                 for i in range(4)]
        assert log_end_offset == 40
