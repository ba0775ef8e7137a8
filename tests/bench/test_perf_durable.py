"""Smoke tests of ``logstore.perf_durable`` and its CLI commands: tiny sizes, structures and counts
only (docs/design.md §12: performance is a benchmark, never a timed test)."""

from __future__ import annotations

import json

import pytest

from click.testing import CliRunner

from logstore.bench import durable as perf_durable
from logstore.cli.perf import perf


def test_group_commit_acknowledges_every_append_with_fewer_flushes(tmp_path):
    row = perf_durable.run_durable("group-commit", 8, str(tmp_path / "gc"), count=25)
    assert row["appends"] == row["stored"] == 8 * 25
    assert row["recovery_point"] >= row["stored"]  # acks="all": every acknowledged append is fsynced
    assert 1 <= row["flushes"] < row["appends"] and row["records_per_flush"] > 1
    assert row["rounds"] >= 1 and row["flusher_flushes"] >= row["flushes"]  # a round may find nothing new to fsync
    assert 0 <= row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]


def test_fsync_per_append_flushes_once_per_append(tmp_path):
    row = perf_durable.run_durable("fsync-per-append", 4, str(tmp_path / "fpa"), count=10)
    assert row["appends"] == row["stored"] == row["recovery_point"] == 40
    assert row["flushes"] == row["appends"] and row["records_per_flush"] == 1.0
    # The data file every time; an index only when it changed since its last flush (one entry per
    # 4 KiB here, so almost never).
    assert row["appends"] <= row["fsyncs"] < 2 * row["appends"]


@pytest.mark.parametrize("mode", ["futures", "asyncio"])
def test_the_future_modes_acknowledge_every_append_once_fsynced(tmp_path, mode):
    row = perf_durable.run_durable(mode, 3, str(tmp_path / mode), count=20, in_flight=4)
    assert row["appends"] == row["stored"] == 3 * 20 and row["in_flight"] == 4
    assert row["recovery_point"] >= row["stored"]  # every acknowledged append is fsynced
    assert 1 <= row["flushes"] < row["appends"] and row["rounds"] >= 1
    assert 0 <= row["p50_ms"] <= row["p99_ms"] <= row["max_ms"] and row["cpu_us_per_append"] > 0


def test_an_in_flight_below_one_is_refused(tmp_path):
    with pytest.raises(ValueError, match="in_flight must be"):
        perf_durable.run_durable("futures", 2, str(tmp_path / "f"), count=1, in_flight=0)


def test_sqlite_stores_every_append(tmp_path):
    row = perf_durable.run_durable("sqlite", 4, str(tmp_path / "sq"), count=10)
    assert row["appends"] == row["stored"] == 40 and row["flushes"] is None


def test_a_deadline_that_passes_before_the_threads_run_still_measures_one_append_each(tmp_path):
    # CI once ran 64 threads against a 20 ms deadline on a loaded machine: no thread was scheduled
    # before it passed, and the row had no latencies to report (an IndexError).
    row = perf_durable.run_durable("group-commit", 16, str(tmp_path / "gc"), seconds=1e-9)
    assert row["appends"] == row["stored"] >= 16
    assert 0 <= row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]


def test_a_count_below_one_is_refused(tmp_path):
    with pytest.raises(ValueError, match="count must be >= 1"):
        perf_durable.run_durable("sqlite", 2, str(tmp_path / "sq"), count=0)


def test_judge_durable_goals():
    rows = [{"mode": mode, "threads": threads, "appends_per_s": rate}
            for mode, threads, rate in [("group-commit", 8, 6000), ("futures", 8, 12000), ("asyncio", 8, 9000),
                                        ("fsync-per-append", 8, 2000), ("sqlite", 8, 2000),
                                        ("group-commit", 64, 9000), ("fsync-per-append", 64, 1000),
                                        ("sqlite", 64, 2000)]]
    goals = perf_durable.judge_durable(rows)
    assert [goal["goal"] for goal in goals] == [
        "futures ÷ fsync-per-append, 8 producers", "futures ÷ sqlite, 8 producers",
        "asyncio ÷ fsync-per-append, 8 producers", "asyncio ÷ sqlite, 8 producers", "group commit 64 threads ÷ 8 threads"]
    assert [goal["passed"] for goal in goals] == [True, True, False, False, True]
    assert [goal["measured"] for goal in goals] == ["6.00×", "6.00×", "4.50×", "4.50×", "1.50×"]


def test_cli_durable(tmp_path):
    runner = CliRunner()
    result = runner.invoke(perf, ["durable", "--threads", "2", "--count", "5", "--repeats", "1",
                                  "--dir", str(tmp_path), "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [row["mode"] for row in data["rows"]] == list(perf_durable.MODES)
    assert all(row["appends"] == row["stored"] == 10 and len(row["runs"]) == 1 for row in data["rows"])
    assert [goal["passed"] in (True, False) for goal in data["goals"]] == [True] * 4  # futures, asyncio ÷ 2 each
    assert list(tmp_path.iterdir()) == []  # the work dir is removed
    text = perf_durable.render_durable(data)
    assert "group-commit" in text and "goals" in text and ("PASS" in text or "FAIL" in text)
    assert "futures: a thread keeping 16 log.append_future calls" in text  # what a producer is
    result = runner.invoke(perf, ["durable", "--threads", "2", "--count", "3", "--repeats", "2", "--in-flight", "2",
                                  "--modes", "futures,sqlite", "--dir", str(tmp_path), "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [row["mode"] for row in data["rows"]] == ["futures", "sqlite"] and data["settings"]["in_flight"] == 2
    assert all(row["appends"] == row["stored"] == 6 and len(row["runs"]) == 2 for row in data["rows"])
    result = runner.invoke(perf, ["durable", "--modes", "futures,nope", "--no-progress"])
    assert result.exit_code == 2 and "nope" in result.output


def test_cli_open_recovery(tmp_path):
    runner = CliRunner()
    result = runner.invoke(perf, ["open-recovery", "--partitions", "6", "--size-mb", "2", "--tail-mb", "1",
                                  "--repeats", "1", "--dir", str(tmp_path), "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [m["threads"] for m in data["many"]] == [1, 2]
    assert all(m["partitions"] == 6 and m["records"] == 18 and m["clean"] == [True] for m in data["many"])
    crash, unclean, scans = data["crash"], data["unclean"], data["scans"]
    assert unclean["clean"] == [False] and unclean["records"] == crash["end_offset"] > crash["recovery_point"]
    assert crash["recovered_bytes"] >= crash["store_bytes"] - crash["durable_bytes"] >= 10**6
    assert scans["tail_bytes"] == crash["store_bytes"] - crash["durable_bytes"]
    assert scans["full_bytes"] == crash["store_bytes"]
    assert len(data["goals"]) == 1 and data["goals"][0]["passed"] in (True, False)
    assert list(tmp_path.iterdir()) == []
    assert "unclean open" in perf_durable.render_open(data)
