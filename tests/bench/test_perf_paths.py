"""The paths table (``logstore perf paths``, and its part of ``perf all``) at tiny sizes.

They check the structure of the table and of the JSON (every row, every measurement, the runs
alternated and counted), that the answers were checked, and that each PASS/FAIL is computed from
the measured figures against the goal. They never assert a speed: performance is a benchmark, not
a timed test (docs/design.md §12).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re

import pytest
from click.testing import CliRunner

from logstore.bench import paths as bench_paths
from logstore.bench.paths_report import PATH_ROWS, Goal, Measurement, render_paths, row_verdict, table_rows
from logstore.cli.perf import perf

TINY = dict(records=600, lookups=50, singles=40)


def _expected_verdict(m: dict) -> bool | None:
    """The verdict recomputed from the runs in the JSON, independently of the code under test."""
    pick = min if m["unit"] == "s" else max
    best = pick(m["logstore_runs"])
    if m["goal_kind"] == "rate":
        return best >= m["goal_bound"]
    if not m["baseline_runs"]:
        return None
    ratio = best / pick(m["baseline_runs"])
    return ratio <= m["goal_bound"] if m["goal_kind"] == "time" else ratio >= m["goal_bound"]


def _check_json_rows(rows: list[dict], numbers: list[int], repeats: int = 3) -> None:
    assert [row["row"] for row in rows] == numbers
    for row in rows:
        assert (row["workload"], row["goal"]) == PATH_ROWS[row["row"]]
        assert row["measurements"] and all(m["row"] == row["row"] for m in row["measurements"])
        for m in row["measurements"]:
            assert len(m["logstore_runs"]) == repeats and all(value > 0 for value in m["logstore_runs"])
            if m["baseline_runs"] is not None:
                assert len(m["baseline_runs"]) == repeats and m["baseline"]
            assert m["passed"] is _expected_verdict(m)
        verdicts = [m["passed"] for m in row["measurements"]]
        assert row["passed"] is (False if False in verdicts else None if None in verdicts else True)


# --- verdicts ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("goal, unit, logstore, baseline, ratio, passed", [
    (Goal("faster", 3.0), "rec/s", [1.0, 3.0, 2.0], [1.0, 0.9, 0.5], 3.0, True),  # best of each: 3.0 / 1.0
    (Goal("faster", 3.0), "rec/s", [2.9, 1.0], [1.0, 0.2], 2.9, False),
    (Goal("rate", 1e6), "rec/s", [0.9e6, 1e6], None, None, True),
    (Goal("rate", 1e6), "rec/s", [0.99e6], None, None, False),
    (Goal("time", 2.0), "s", [5.0, 2.0, 3.0], [1.5, 1.0], 2.0, True),  # times: the smallest is the best
    (Goal("time", 1.5), "s", [1.6], [1.0], 1.6, False),
    (Goal("faster", 3.0), "rec/s", [5.0], None, None, None),  # no baseline run (--compare none): not judged
])
def test_verdict_is_computed_from_the_measured_ratio(goal, unit, logstore, baseline, ratio, passed):
    m = Measurement(1, "w", unit, goal, logstore, "base" if baseline else "", baseline)
    assert m.ratio == (None if ratio is None else pytest.approx(ratio))
    assert m.passed is passed
    assert m.as_dict()["passed"] is passed and m.as_dict()["ratio"] == m.ratio


def test_a_row_passes_only_when_every_measurement_does():
    def m(passing: bool | None) -> Measurement:
        runs = None if passing is None else [1.0]
        return Measurement(2, "w", "rec/s", Goal("faster", 3.0), [3.0 if passing else 2.0], "b", runs)

    assert row_verdict([m(True), m(True)]) is True
    assert row_verdict([m(True), m(False)]) is False
    assert row_verdict([m(None), m(False)]) is False
    assert row_verdict([m(True), m(None)]) is None
    assert [row["row"] for row in table_rows([m(True), Measurement(9, "t", "s", Goal("time", 1.5), [1.0])])] == [2, 9]
    with pytest.raises(ValueError):
        Goal("better", 1.0)


def test_sizes_scale_together_and_reject_impossible_ones():
    full = bench_paths.PathSizes()
    assert (full.records, full.lookups, full.singles, full.durable_threads) == (1_000_000, 100_000, 100_000, (8, 64))
    assert bench_paths.PathSizes.scaled(1_000_000) == full
    small = bench_paths.PathSizes.scaled(10_000, repeats=2, lookups=None)
    assert (small.records, small.lookups, small.singles, small.compact_records, small.compact_keys) == (
        10_000, 1000, 1000, 10_000, 1000)
    assert small.recovery_tail_bytes == 100_000 and small.repeats == 2 and small.durable_seconds == 0.02
    for bad in (dict(records=0), dict(durable_threads=(1, 2, 3)), dict(compact_records=10, compact_keys=20),
                dict(durable_seconds=0)):
        with pytest.raises(ValueError):
            bench_paths.PathSizes(**bad)


def test_varied_workload_varies_and_is_a_function_of_the_offset():
    workload = bench_paths.VariedWorkload(5000, seed=3)
    rows = workload.rows(0, 5000)
    assert rows == bench_paths.VariedWorkload(5000, seed=3).rows(0, 5000)
    key_sizes, value_sizes = {len(row[1]) for row in rows}, {len(row[2]) for row in rows}
    assert min(key_sizes) == 1 and max(key_sizes) == 32 and min(value_sizes) >= 10 and max(value_sizes) > 250
    assert all(row[0] == offset and (b"%032d" % offset).endswith(row[1]) for offset, row in enumerate(rows))


# --- the library at tiny sizes --------------------------------------------------------------------------


def test_in_process_rows_run_against_sqlite(tmp_path):
    seen = []
    result = bench_paths.bench_paths(bench_paths.PathSizes(**TINY), rows=(1, 2, 3, 4, 5, 6), work_dir=str(tmp_path),
                                     say=seen.append)
    data = bench_paths.as_json(result)
    _check_json_rows(data["rows"], [1, 2, 3, 4, 5, 6])
    labels = [m["label"] for row in data["rows"] for m in row["measurements"]]
    assert labels == ["read loop touching offset, value", "read(o, max_bytes=1)", "read(o, max_records=1)",
                      "read(o, max_records=1), cold",
                      "varied sizes: iter_records", "varied sizes: read loop", "2 headers: iter_records",
                      "2 headers: read loop", "log.append([r]) per record, then flush",
                      "iter_records over one-record batches"]
    baselines = {m["label"]: m["baseline"] for row in data["rows"] for m in row["measurements"]}
    assert baselines["read(o, max_records=1)"] == "SQLite point SELECT" and baselines["2 headers: read loop"] is None
    assert baselines["read(o, max_records=1), cold"] == "SQLite point SELECT, fresh connection"
    assert sum(line.startswith("row ") for line in seen) == 10  # each measurement reported as it completes
    assert os.listdir(tmp_path) == []  # the work dir is removed
    json.dumps(data)  # plain data


def test_in_process_rows_without_sqlite_are_not_judged_against_it(tmp_path):
    result = bench_paths.bench_paths(bench_paths.PathSizes(**{**TINY, "repeats": 1}), rows=(1, 4), compare=False,
                                     work_dir=str(tmp_path))
    (loop,), headers = result["rows"][0]["measurements"], result["rows"][1]["measurements"]
    assert loop["baseline_runs"] is None and loop["passed"] is None and result["rows"][0]["passed"] is None
    assert all(m["passed"] is _expected_verdict(m) for m in headers)
    assert "n/a" in render_paths(result)


def test_the_columnar_row_checks_its_answer_against_sqlite(tmp_path, monkeypatch):
    seen = []
    result = bench_paths.bench_paths(bench_paths.PathSizes(**TINY), rows=(10,), work_dir=str(tmp_path),
                                     say=seen.append)
    data = bench_paths.as_json(result)
    _check_json_rows(data["rows"], [10])
    rate, ratio = data["rows"][0]["measurements"]
    assert (rate["goal"], rate["baseline"], ratio["goal"], ratio["baseline"]) == (
        "≥ 10.00 M rec/s", None, "≥ 5×", "SQLite scan")
    assert rate["logstore_runs"] == ratio["logstore_runs"]  # one set of columnar runs judges both goals
    notes = " ".join(rate["notes"])
    assert ("to_arrow() of every batch" in notes) is (importlib.util.find_spec("pyarrow") is not None)
    assert sum(line.startswith("row 10 ") for line in seen) == 2
    # A wrong answer is an error, not a figure: the scan's value checksum is compared with the data's.
    monkeypatch.setattr(bench_paths, "scan_columns", lambda log: (TINY["records"], 0, 0))
    with pytest.raises(bench_paths.BenchmarkError, match="row 10 columnar scan"):
        bench_paths.bench_paths(bench_paths.PathSizes(**TINY), rows=(10,), compare=False, work_dir=str(tmp_path))


def test_bad_row_numbers_are_refused(tmp_path):
    with pytest.raises(ValueError, match="rows must be"):
        bench_paths.bench_paths(bench_paths.PathSizes(**TINY), rows=(0, 11), work_dir=str(tmp_path))


# --- the command line ------------------------------------------------------------------------------------


def test_cli_paths_text_has_one_line_per_table_row(tmp_path):
    result = CliRunner().invoke(perf, ["paths", "--records", "500", "--rows", "1,4,6,9", "--singles", "30",
                                       "--recovery-base", "50KB", "--recovery-tail", "10KB", "--compare", "sqlite",
                                       "--dir", str(tmp_path), "--no-progress"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("#  ")))
    assert lines[header].split() == ["#", "workload", "logstore", "baseline", "ratio", "goal", "result"]
    table = lines[header + 2: header + 6]
    assert [line.split()[0] for line in table] == ["1", "4", "6", "9"]
    assert all(line.split()[-1] in ("PASS", "FAIL") for line in table)
    ratio = float(re.search(r"  ([0-9.]+)×  ", table[0]).group(1))
    assert table[0].endswith("PASS" if ratio >= 3 else "FAIL")
    assert "measurements (best of the runs" in result.output and os.listdir(tmp_path) == []


def test_cli_paths_rejects_bad_options():
    runner = CliRunner()
    for args, message in ((["--rows", "0,11"], "row numbers from 1 to 10"), (["--rows", "a"], "row numbers"),
                          (["--durable-threads", "1,2,3"], "one or two thread counts"),
                          (["--recovery-tail", "lots"], "not a size")):
        result = runner.invoke(perf, ["paths", *args])
        assert result.exit_code != 0 and message in result.output, result.output


def test_cli_all_adds_the_paths_table(tmp_path):
    result = CliRunner().invoke(perf, ["all", "--records", "400", "--lookups", "50", "--large-records", "20",
                                       "--large-value-bytes", "1024", "--sizes", "10KB", "--repeats", "1",
                                       "--compare", "sqlite", "--dir", str(tmp_path), "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [row["kind"] for row in data["results"]][:2] == ["append", "append"]
    rows = data["paths"]["rows"]
    _check_json_rows(rows, list(range(1, 11)))
    assert data["paths"]["settings"]["records"] == 400 and data["paths"]["settings"]["compare"] == "sqlite"
    durable = rows[6]["measurements"]  # rows 7-9 run in child processes
    assert [(m["label"], m["goal"]) for m in durable] == [
        (f"{label} vs {baseline}", goal) for label, goal in (("8 producers × 16 append_future in flight", "≥ 5×"),
                                                             ("8 threads, acks=all", "≥ 3×"),
                                                             ("64 threads, acks=all", "≥ 5×"))
        for baseline in ("fsync per append", "SQLite synchronous=FULL")]
    (compaction,), (recovery,) = rows[7]["measurements"], rows[8]["measurements"]
    assert compaction["unit"] == recovery["unit"] == "s"
    assert compaction["baseline"] == "single pass (default buffer)" and compaction["goal"] == "≤ 2×"
    passes = int(re.search(r"(\d+) pass\(es\)", " ".join(compaction["notes"])).group(1))
    assert passes > 1  # the small buffer really took several passes
    assert recovery["goal"] == "≤ 1.5×" and "past the recovery point" in " ".join(recovery["notes"])
    assert os.listdir(tmp_path) == []
    result = CliRunner().invoke(perf, ["all", "--records", "400", "--lookups", "50", "--large-records", "20",
                                       "--large-value-bytes", "1024", "--sizes", "10KB", "--repeats", "1",
                                       "--no-paths", "--dir", str(tmp_path), "--json", "--no-progress"])
    assert result.exit_code == 0 and "paths" not in json.loads(result.output)
