"""The timer benchmark (``logstore.perf_timer``, ``logstore perf timer``) at tiny sizes.

These tests check that every contender does the work it is credited with (the same tasks expire in
each, cancelled entries are retained or not as the design says, nothing runs early) and that the
command prints its tables. They never assert a speed.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from logstore.bench import timer as perf_timer
from logstore.bench.timer_baselines import make_contender
from logstore.cli.perf import perf
from logstore.clock import ManualClock

SMALL = dict(ops=3_000, sched_ops=500, timeout_ms=500, cancel_pending=2_000, scaling_pending=(500, 2_000), pairs=2_000,
             expiry_tasks=3_000, spread_ms=200)


@pytest.mark.parametrize("name", ["wheel", "wheel-dict", "heapq", "heapq+compact", "sched"])
def test_every_contender_expires_exactly_the_uncancelled_tasks(name):
    none_cancelled = perf_timer.run_purgatory(name, 1_000, timeout_ms=50, cancel_fraction=0.0)
    all_cancelled = perf_timer.run_purgatory(name, 1_000, timeout_ms=50, cancel_fraction=1.0)
    assert none_cancelled["expired"] == 1_000
    assert all_cancelled["expired"] == 0
    some = perf_timer.run_purgatory(name, 2_000, timeout_ms=50)
    assert some["expired"] == perf_timer.run_purgatory("wheel", 2_000, timeout_ms=50)["expired"] > 0


def test_retention_follows_each_design():
    # Arrivals span 30 ms, the timeout is 1 s: a lazy heap keeps every cancelled entry until its
    # deadline; the wheel (and sched) keep the live ones only: at most 10 ms of arrivals plus the 1%.
    heap = perf_timer.run_purgatory("heapq", 3_000, timeout_ms=1_000)
    wheel = perf_timer.run_purgatory("wheel", 3_000, timeout_ms=1_000)
    sched_ = perf_timer.run_purgatory("sched", 3_000, timeout_ms=1_000)
    assert heap["peak_retained"] == 3_000
    assert wheel["peak_retained"] <= 11 * 100 + 30
    assert sched_["peak_retained"] == wheel["peak_retained"]


@pytest.mark.parametrize("name", ["wheel", "wheel-dict", "heapq", "sched"])
def test_expiry_is_never_early_or_late(name):
    row = perf_timer.run_expiry(name, 2_000, 300)
    assert (row["ran"], row["early"], row["late"], row["max_late_ms"]) == (2_000, 0, 0, 0)


def test_cancel_and_scaling_report_what_they_timed():
    row = perf_timer.run_cancel("sched", pending=300, cancels=20)
    assert row["cancels"] == 20 and row["us_per_cancel"] > 0
    row = perf_timer.run_scaling("wheel", pending=300, pairs=2_000)
    assert row["pairs"] == 2_000 and row["ns_per_pair"] > 0


def test_executor_queueing_sees_every_task():
    row = perf_timer.run_executor_queueing(2_000, 100)
    assert row["ran"] == 2_000 and 0 <= row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]


def test_unknown_contender_is_refused():
    with pytest.raises(ValueError, match="choose from"):
        make_contender("splay", ManualClock(0))


def test_bench_timer_runs_everything_and_judges_the_goals():
    result = perf_timer.bench_timer(**SMALL)
    names = [row["timer"] for row in result.purgatory]
    assert names == ["wheel", "wheel-dict", "heapq", "heapq+compact", "sched"]
    assert len({row["expired"] for row in result.purgatory if row["ops"] == SMALL["ops"]}) == 1
    assert [row["timer"] for row in result.cancel] == ["wheel", "heapq", "sched"]
    assert {(row["timer"], row["pending"]) for row in result.scaling} == {
        (name, pending) for name in ("wheel", "heapq") for pending in SMALL["scaling_pending"]}
    assert all(row["ran"] == SMALL["expiry_tasks"] for row in result.expiry)
    assert len(result.goals) == 5 and all(isinstance(goal["passed"], bool) for goal in result.goals)
    text = perf_timer.render_timer_table(result)
    for heading in ("purgatory:", "cancel:", "scaling:", "expiry:", "goals"):
        assert heading in text


def test_cli_prints_json_and_refuses_bad_options():
    args = ["timer", "--ops", "2000", "--sched-ops", "300", "--timeout-ms", "300", "--cancel-pending", "1000",
            "--scaling-pending", "300,1000", "--pairs", "1000", "--expiry-tasks", "1000", "--spread-ms", "100"]
    result = CliRunner().invoke(perf, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["settings"]["ops"] == 2000 and len(data["goals"]) == 5
    bad = CliRunner().invoke(perf, ["timer", "--scaling-pending", "1000"])
    assert bad.exit_code == 2 and "at least two counts" in bad.output
