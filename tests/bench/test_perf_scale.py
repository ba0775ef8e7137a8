"""``logstore perf scale`` at tiny sizes (4 partitions, 3 connections: one size of each keeps it
short; the exponent's fit is tested apart): every figure is there, the goals are judged, the work
dir is removed and the servers it started are gone. No figure is asserted beyond what the run must be (a clean open is
clean, descriptors are counted, a fetch round sends bytes)."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from logstore.bench import scale
from logstore.cli.perf import perf
from logstore.server import missing_extra

pytestmark = pytest.mark.skipif(bool(missing_extra()), reason="logstore serve needs the server extra")


def test_perf_scale_at_tiny_sizes(tmp_path):
    work = tmp_path / "work"
    result = CliRunner().invoke(perf, ["scale", "--partitions", "4", "--connections", "3",
                                       "--records-per-partition", "2", "--dir", str(work), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    rows = data["partition_rows"]
    assert [row["partitions"] for row in rows] == [4]
    for row in rows:
        assert row["clean"]["clean"] and not row["unclean"]["clean"]
        assert row["clean"]["partitions"] == row["partitions"] == row["unclean"]["partitions"]
        assert row["fetch_partitions"] == row["partitions"]
        assert row["fetch_full"]["idle_sent"] > 0 and row["fetch_full"]["changed_received"] > 0
        assert row["produce_records_per_s"] > 0
    assert [row["connections"] for row in data["connection_rows"]] == [3]
    assert data["connection_rows"][0]["descriptor_growth"] >= 3  # a socket each, at least
    assert set(data["growth"]) == {name for name, _ in scale.PARTITION_FIGURES + scale.CONNECTION_FIGURES}
    goals = {goal["goal"].split(" (")[0]: goal for goal in data["goals"]}
    assert goals["descriptors per inactive partition after a clean open"]["passed"] is True
    assert goals["clean open of 4 partitions"]["passed"] is None  # judged at 10,000 only
    assert os.listdir(work) == []
    table = scale.render_scale(data)
    assert "b (∝ size^b)" in table and "PASS" in table and "Kafka" in table
    assert "4 partitions" in table and "3 connections" in table


def test_growth_exponent():
    assert scale.growth_exponent([10, 100, 1000], [2.0, 20.0, 200.0]) == pytest.approx(1.0)
    assert scale.growth_exponent([10, 1000], [5.0, 5.0]) == pytest.approx(0.0)
    assert scale.growth_exponent([10], [1.0]) is None


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="10,000"):
        scale.bench_scale((10, 20_000), ())
    result = CliRunner().invoke(perf, ["scale", "--partitions", "3,x"])
    assert result.exit_code == 2
