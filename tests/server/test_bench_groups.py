"""``logstore perf groups`` (``logstore.bench.groups``) at tiny sizes: the result's structure
and sanity (figures above zero, every member holding its partitions, memory given back, empty
purgatories), never its speed: performance is a benchmark, not a timed test (docs/design.md §12)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from logstore.bench import groups as bench_groups
from logstore.bench.groups import PARTITIONS, bench_groups as run_bench


def _rows(result: dict, target: str) -> dict:
    return {row["workload"]: row for row in result["rows"] if row["broker"] == target}


def _check_target(rows: dict, members: tuple[int, ...], committers: int) -> None:
    for count in members:
        rebalance = rows[f"rebalance, {count} members"]
        assert rebalance["value"] > 0 and rebalance["unit"] == "ms"
        assert rebalance["members"] == count and rebalance["generation"] >= 0
        assert rebalance["assigned_partitions"] == PARTITIONS  # every partition went to some member
        assert 0 < rebalance["join_phase_ms"] <= rebalance["ms"]
    commits = rows[f"commits/s, {committers} committers"]
    assert commits["commits"] > 0 and commits["value"] > 0 and commits["unit"] == "commits/s"
    assert 0 < rows["commit latency p50"]["value"] <= rows["commit latency p99"]["value"]


def test_in_process_rebalance_commits_and_memory(tmp_path):
    result = run_bench(members=(1, 3), committers=2, seconds=0.2, wire=False, against=(), memory_groups=2, repeats=2,
                       memory_members=30, work_dir=str(tmp_path))
    assert {row["broker"] for row in result["rows"]} == {"in-process"}
    rows = _rows(result, "in-process")
    _check_target(rows, (1, 3), 2)
    assert len(rows["rebalance, 3 members"]["runs_ms"]) == 2 and rows["server CPU per commit"]["value"] > 0
    assert rows["commits/s, 2 committers"]["fsync_rounds"] > 0
    work = rows["floor: commit work CPU, one thread"]  # both members' commits in each round
    assert work["value"] > 0 and work["commits"] > 0 and work["commits_per_fsync"] >= 1
    memory = result["memory"]
    assert memory["bytes_per_member"] > 0 and memory["built_bytes"] > 0
    # Expired members and deleted groups leave nothing behind but container capacity (a constant
    # tens of KB, so the groups built must be large enough for the comparison to mean something).
    assert memory["left_bytes"] < memory["built_bytes"] / 2, memory
    assert memory["left_after_second_cycle_bytes"] < memory["built_bytes"] / 2, memory
    assert memory["with_members"]["groups"] == 2 and memory["with_members"]["heartbeat_delayed"] == 60
    assert memory["after"] == {"rebalance_watched": 0, "rebalance_delayed": 0, "heartbeat_watched": 0,
                               "heartbeat_delayed": 0, "groups": 0}
    assert list(tmp_path.iterdir()) == []  # the work dir is removed
    text = bench_groups.render_groups(result)
    assert "rebalance, 3 members" in text and "memory per member" in text and "'heartbeat_watched': 0" in text


def test_over_the_wire_against_logstore_serve(tmp_path):
    # commitAsync over the wire: 2 commits in flight on each member's connection, answered in order
    result = run_bench(members=(2,), committers=2, seconds=0.3, wire=True, against=(), fetch=True, in_flight=2,
                       memory_groups=0, repeats=1, work_dir=str(tmp_path))
    _check_target(_rows(result, "in-process"), (2,), 2)
    wire = {row["workload"].replace(" + fetch", "").replace(", 2 in flight each", ""): row
            for row in result["rows"] if row["broker"] == "logstore"}
    _check_target(wire, (2,), 2)
    assert wire["RSS after the run"]["value"] > 0 and wire["commits/s, 2 committers"]["client_cpu_us_per_commit"] > 0
    assert result["memory"] is None and result["settings"]["fetch"] is True
    commits = wire["commits/s, 2 committers"]
    assert commits["in_flight"] == 2 and result["settings"]["in_flight"] == 2
    # a member's commits in flight bound the rate: members x in flight / mean latency
    assert 0 < commits["value"] <= wire["ceiling: in flight / mean latency"]["value"] * 1.01
    assert wire["client CPU per commit"]["value"] > 0
    # the server's writer: at least one commit per batch, fewer batches than commits answered
    assert wire["commits per fsync"]["value"] >= 1 and 0 < wire["commits per fsync"]["batches"] <= commits["commits"]
    floor = wire["floor: Heartbeat round trips/s"]
    assert floor["requests"] > 0 and floor["value"] > 0 and wire["floor: server CPU per Heartbeat"]["value"] > 0


def test_cli_prints_json(tmp_path):
    from logstore.cli.main import main
    outcome = CliRunner().invoke(main, ["perf", "groups", "--no-wire", "--members", "2", "--committers", "1",
                                        "--seconds", "0.1", "--memory-groups", "1", "--memory-members", "2",
                                        "--dir", str(tmp_path), "--json"])
    assert outcome.exit_code == 0, outcome.output
    result = json.loads(outcome.output)
    assert result["goals"] == {"rebalance_ms": 100.0, "commits_per_s": 20000.0}
    assert _rows(result, "in-process")["rebalance, 2 members"]["members"] == 2
