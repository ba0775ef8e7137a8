"""``logstore perf client`` at a tiny size: the table's shape, and that every client
read back exactly what it produced. Nothing here is timed: the rates are whatever this machine gives."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from logstore.bench import client as bench
from logstore.bench.client import ClientBenchmarkError, ClientWorkload, bench_client, render_client

try:
    from logstore.cli.perf import perf
except ModuleNotFoundError:  # the source tree keeps the CLI in cli/, installed as logstore.cli
    from cli.perf import perf


def _row(result: dict, client: str) -> dict:
    return next(row for row in result["clients"] if row["client"] == client)


def test_every_client_reads_back_every_record_it_produced(server):
    workload = ClientWorkload(records=2000, partitions=2, check="all")
    result = bench_client(workload, rounds=1, bootstrap_server=server.bootstrap_servers)
    assert [row["client"] for row in result["clients"]] == list(bench.CLIENTS)
    for row in result["clients"]:
        assert not row["missing"]
        assert row["consumed"] == [2000] and row["checked"] == [2000]  # every record, in order, once
        for phase in ("produce", "consume"):
            assert len(row[phase]["runs"]) == 1 and row[phase]["best"] > 0
            assert row[phase]["mb_per_s"] == pytest.approx(row[phase]["best"] * 100 / 1e6)
    assert _row(result, "kafka-python")["produce"]["vs_kafka_python"] == pytest.approx(1.0)
    for phase in ("produce", "consume"):
        ratio = _row(result, "logstore")[phase]["vs_kafka_python"]
        assert result["goal"][phase] == {"ratio": ratio, "passed": ratio >= bench.GOAL}
        assert result["per_round"][0][f"{phase}_ratio"] == pytest.approx(ratio)
    assert result["broker"] == "external" and result["rounds"] == 1
    text = render_client(result)
    header = text.splitlines()[1]
    for column in ("client", "produce rec/s", "MB/s", "consume rec/s", "produce ÷ kafka-python",
                   "consume ÷ kafka-python"):
        assert column in header
    assert "goal: logstore >= 1.5x kafka-python" in text and ("PASS" in text or "FAIL" in text)


def test_a_wrong_missing_or_extra_record_fails_the_run():
    workload = ClientWorkload(records=4, partitions=2, check="all")
    pool = bench.value_pool(100)
    tally = bench._Tally(workload)
    tally.expect(1, 0, pool[1])  # record 1 went to partition 1, offset 0
    with pytest.raises(ClientBenchmarkError, match="partition 0 offset 0"):
        tally.expect(0, 0, pool[1])
    with pytest.raises(ClientBenchmarkError, match="offset 1 after -1"):
        tally.expect(0, 1, pool[2])
    tally.count, tally.bytes = 3, 300
    with pytest.raises(ClientBenchmarkError, match="consumed 3 records"):
        tally.finish("x")


def test_a_missing_client_stops_the_bench_unless_skipped(server, monkeypatch):
    monkeypatch.setattr(bench, "missing_clients", lambda clients=bench.CLIENTS: ["kafka-python"])
    with pytest.raises(ClientBenchmarkError, match="not installed: kafka-python"):
        bench_client(ClientWorkload(records=100), rounds=1, bootstrap_server=server.bootstrap_servers)
    result = bench_client(ClientWorkload(records=100), rounds=1, clients=("logstore", "kafka-python"),
                          skip_missing=True, bootstrap_server=server.bootstrap_servers)
    assert [(row["client"], row["missing"]) for row in result["clients"]] == [("logstore", False),
                                                                              ("kafka-python", True)]
    assert result["passed"] is None and result["goal"]["produce"]["ratio"] is None
    assert "not installed" in render_client(result)
    refused = CliRunner().invoke(perf, ["client", "--records", "100", "--bootstrap-server", server.bootstrap_servers])
    assert refused.exit_code != 0 and "not installed: kafka-python" in refused.output


def test_the_command_starts_its_own_broker_and_prints_json():
    result = CliRunner().invoke(perf, ["client", "--records", "300", "--rounds", "2", "--client", "logstore",
                                       "--client", "kafka-python", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["broker"] == "logstore" and data["rounds"] == 2
    assert [entry["order"] for entry in data["per_round"]] == [["logstore", "kafka-python"],
                                                               ["kafka-python", "logstore"]]
    assert all(row["consumed"] == [300, 300] for row in data["clients"])
    usage = CliRunner().invoke(perf, ["client", "--broker", "tansu", "--bootstrap-server", "127.0.0.1:1"])
    assert usage.exit_code == 2 and "not both" in usage.output
