"""The benchmark harness (``logstore.perf``, ``logstore perf``) at tiny sizes.

These tests check that the harness runs and measures the right thing (the workloads and engines
asked for, the record counts, what each engine really stored and returned). They never assert a
speed: performance is a benchmark, not a timed test.
"""

from __future__ import annotations

import json
import os
import sqlite3

import pytest
from click.testing import CliRunner

from logstore import LogManager
from logstore.bench import core as bench
from logstore.cli.perf import perf

RECORDS = 2_000
LOOKUPS = 500


def _engine_of(results, kind, engine):
    (row,) = [r for r in results if r.kind == kind and r.engine == engine]
    return row


# --- the library -----------------------------------------------------------------------------------


def test_workload_records_are_a_function_of_their_offset():
    workload = bench.Workload(100, key_bytes=16, value_bytes=10, batch_size=30, seed=7)
    offset, key, value, timestamp_ms = workload.row(42)
    assert (offset, key, len(value), timestamp_ms) == (42, b"0000000000000042", 10, bench.BASE_TIMESTAMP_MS + 42)
    assert workload.row(42) == bench.Workload(100, value_bytes=10, seed=7).row(42)
    assert workload.batch_ranges() == [(0, 30), (30, 60), (60, 90), (90, 100)]
    assert workload.record_payload_bytes == 16 + 10 + 8
    assert bench.Workload(5, key_bytes=0).row(3)[1] == b""
    assert bench.Workload(5, key_bytes=2).row(123)[1] == b"23"


def test_max_message_bytes_choices():
    assert bench.Workload(10).topic_config() == {}
    assert bench.Workload(10, max_message_bytes=5_000_000).topic_config() == {"max.message.bytes": 5_000_000}
    auto = bench.Workload(10, value_bytes=10_240, batch_size=1000, max_message_bytes=0).topic_config()
    assert auto["max.message.bytes"] >= 1000 * (16 + 10_240 + 8)
    small = bench.Workload(10, max_message_bytes=0).topic_config()
    assert small == {"max.message.bytes": bench.DEFAULT_MAX_MESSAGE_BYTES}


def test_append_writes_every_record_to_both_engines(tmp_path):
    workload = bench.Workload(RECORDS, batch_size=300)
    results = bench.bench_log(workload, phases=("append",), engines=("logstore", "sqlite"),
                              work_dir=str(tmp_path), keep=True)
    assert [(r.kind, r.engine) for r in results] == [("append", "logstore"), ("append", "sqlite")]
    for row in results:
        assert row.records == RECORDS and row.checked == RECORDS
        assert row.payload_bytes == RECORDS * (16 + 100 + 8)
        assert row.elapsed_s > 0 and row.cpu_s >= 0
    logstore_row, sqlite_row = results
    with LogManager([logstore_row.path]) as store:
        log = store.get_log(bench.TOPIC, 0)
        assert log.log_end_offset == RECORDS
        batch = log.read(0, 1 << 30)
        assert [r.offset for r in batch] == list(range(RECORDS))
        assert [(r.offset, r.key, r.value, r.timestamp_ms) for r in batch[:3]] == workload.rows(0, 3)
    with sqlite3.connect(sqlite_row.path) as conn:
        count = conn.execute("SELECT COUNT(*), MIN(offset), MAX(offset) FROM log").fetchone()
        assert count == (RECORDS, 0, RECORDS - 1)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        row = conn.execute("SELECT offset, key, value, ts FROM log WHERE offset = 1234").fetchone()
        assert row == workload.row(1234)
    assert logstore_row.ratio is not None and logstore_row.target == "≥3×"
    assert logstore_row.passed in (True, False)


def test_reads_scan_everything_and_find_the_random_offsets(tmp_path):
    workload = bench.Workload(RECORDS)
    results = bench.bench_log(workload, phases=("scan", "random"), engines=("logstore", "sqlite"),
                              lookups=LOOKUPS, work_dir=str(tmp_path))
    assert sorted((r.kind, r.engine) for r in results) == [
        ("random", "logstore"), ("random", "sqlite"), ("scan", "logstore"), ("scan", "sqlite")]
    for engine in ("logstore", "sqlite"):
        scan = _engine_of(results, "scan", engine)
        assert scan.records == scan.checked == RECORDS
        lookups = _engine_of(results, "random", engine)
        assert lookups.records == lookups.checked == LOOKUPS
    assert os.listdir(tmp_path) == []  # the work dir is removed without keep
    offsets = bench.random_offsets(workload, LOOKUPS)
    assert offsets == bench.random_offsets(workload, LOOKUPS) and len(set(offsets)) > LOOKUPS // 2
    assert all(0 <= offset < RECORDS for offset in offsets)


def test_sqlite_engine_uses_the_reference_settings(tmp_path):
    engine = bench.SqliteEngine(str(tmp_path / "db"), bench.Workload(10))
    try:
        assert engine.conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert engine.conn.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
        columns = [row[1:3] for row in engine.conn.execute("PRAGMA table_info(log)")]
        assert columns == [("offset", "INTEGER"), ("key", "BLOB"), ("value", "BLOB"), ("ts", "INTEGER")]
    finally:
        engine.close()


def test_logstore_random_reads_return_exactly_the_record_asked_for(tmp_path):
    workload = bench.Workload(RECORDS, batch_size=250)
    engine = bench.LogstoreEngine(str(tmp_path / "store"), workload)
    try:
        engine.append([engine.build(workload.rows(start, stop)) for start, stop in workload.batch_ranges()])
        offsets = bench.random_offsets(workload, 50)
        assert engine.lookups(offsets) == 50
        assert all(engine.get(offset) == workload.row(offset) for offset in offsets)
        assert engine.scan(0, RECORDS) == RECORDS
    finally:
        engine.close()


def test_a_wrong_answer_is_an_error_not_a_number(tmp_path, monkeypatch):
    monkeypatch.setattr(bench.SqliteEngine, "lookups", lambda self, offsets: len(offsets) - 1)
    with pytest.raises(bench.BenchmarkError, match="random reads"):
        bench.bench_log(bench.Workload(500), phases=("random",), engines=("sqlite",), lookups=20,
                        work_dir=str(tmp_path))
    monkeypatch.setattr(bench.LogstoreEngine, "get", lambda self, offset: (offset, b"?", b"?", 0))
    with pytest.raises(bench.BenchmarkError, match="logstore returned"):
        bench.bench_log(bench.Workload(500), work_dir=str(tmp_path))


def test_open_builds_stores_of_the_sizes_asked_for(tmp_path):
    seen = []
    results = bench.bench_open([20_000, 200_000], repeats=2, value_bytes=100, batch_size=50,
                               segment_bytes=64 * 1024, work_dir=str(tmp_path), keep=True,
                               progress=lambda *args: seen.append(args))
    small, large = results
    assert (small.kind, small.engine, large.kind) == ("open", "logstore", "open")
    assert small.extra["store_bytes"] >= 20_000 and large.extra["store_bytes"] >= 200_000
    assert large.extra["segments"] > 1 and large.extra["repeats"] == 2
    assert small.ratio is None and large.ratio == pytest.approx(large.elapsed_s / small.elapsed_s)
    assert large.target == "≤2×"
    for row in results:
        with LogManager([row.path], read_only=True) as store:
            assert store.get_log(bench.TOPIC, 0).log_end_offset == row.records
    assert seen and seen[-1][1] == seen[-1][2]  # progress reached its total


def test_compare_fills_ratios_and_verdicts():
    def row(kind, engine, elapsed_s, workload="w", store_bytes=0):
        return bench.Result(kind, workload, engine, 1000, 1000, elapsed_s, elapsed_s / 2,
                            extra={"store_bytes": store_bytes, "segments": 1, "repeats": 3, "close_s": 0.001,
                                   "log_bytes_read_at_open": 0})

    results = bench.compare([row("append", "logstore", 1.0), row("append", "sqlite", 3.0),
                             row("scan", "logstore", 1.0, "s"), row("scan", "sqlite", 1.5, "s"),
                             row("open", "logstore", 0.01, "o1", 10), row("open", "logstore", 0.03, "o2", 1000)])
    append, _, scan, _, open_small, open_large = results
    assert (append.ratio, append.passed, append.target) == (3.0, True, "≥3×")
    assert (scan.ratio, scan.passed, scan.target) == (1.5, False, "≥2×")
    assert open_small.ratio is None and open_large.ratio == pytest.approx(3.0) and open_large.passed is False
    table = bench.render_table(results)
    assert "PASS" in table and "FAIL" in table and "cpu rec/s" in table


def test_sizes_parse_and_print():
    assert [bench.parse_size(text) for text in ("1MB", "1GB", "64MiB", "512", "1.5KB")] == [
        10**6, 10**9, 64 << 20, 512, 1500]
    assert bench.format_bytes(10**9) == "1GB" and bench.format_bytes(20_000) == "20KB"
    with pytest.raises(ValueError):
        bench.parse_size("lots")


# --- the command line ------------------------------------------------------------------------------


def test_cli_append_prints_a_table(tmp_path):
    result = CliRunner().invoke(perf, ["append", "--records", str(RECORDS), "--compare", "sqlite",
                                       "--dir", str(tmp_path), "--no-progress"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[:3] == ["workload", "engine", "records"]
    assert any(" logstore " in line and "2,000" in line for line in lines)
    assert any(" sqlite " in line and "2,000" in line for line in lines)
    assert os.listdir(tmp_path) == []


def test_cli_read_json_and_keep(tmp_path):
    result = CliRunner().invoke(perf, ["read", "--mode", "both", "--records", str(RECORDS), "--lookups",
                                       str(LOOKUPS), "--compare", "sqlite", "--dir", str(tmp_path),
                                       "--keep", "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["results"]
    assert sorted((row["kind"], row["engine"]) for row in rows) == [
        ("random", "logstore"), ("random", "sqlite"), ("scan", "logstore"), ("scan", "sqlite")]
    scan = next(row for row in rows if row["kind"] == "scan" and row["engine"] == "logstore")
    assert scan["records"] == scan["checked"] == RECORDS and scan["records_per_s"] > 0
    assert scan["ratio"] is not None and os.path.isdir(scan["path"])
    with LogManager([scan["path"]], read_only=True) as store:  # the kept store holds what was appended
        assert store.get_log(bench.TOPIC, 0).log_end_offset == RECORDS


def test_cli_all_and_open(tmp_path):
    runner = CliRunner()
    result = runner.invoke(perf, ["all", "--records", "1000", "--lookups", "100", "--large-records", "40",
                                  "--large-value-bytes", "2048", "--sizes", "10KB,100KB", "--repeats", "2",
                                  "--compare", "sqlite", "--dir", str(tmp_path), "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["results"]
    assert [(row["kind"], row["engine"]) for row in rows] == [
        ("append", "logstore"), ("append", "sqlite"), ("scan", "logstore"), ("scan", "sqlite"),
        ("random", "logstore"), ("random", "sqlite"),
        ("append", "logstore"), ("append", "sqlite"), ("open", "logstore"), ("open", "logstore")]
    assert all(row["passed"] in (True, False) for row in rows if row["engine"] == "logstore" and row["ratio"])
    result = runner.invoke(perf, ["open", "--sizes", "10KB", "--repeats", "1", "--dir", str(tmp_path), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "open 10KB store" in result.output and "segment data read at open" in result.output
    result = runner.invoke(perf, ["open", "--sizes", "lots"])
    assert result.exit_code != 0 and "not a size" in result.output
