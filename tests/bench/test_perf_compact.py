"""Smoke tests of ``logstore perf compact`` (``logstore.perf_compact``): tiny sizes, the structure of
the output and that real work was measured and checked, never timings (docs/design.md §12: performance is
a benchmark, never a timed test)."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from logstore.bench import compact as perf_compact
from logstore.cli.main import main

SMALL = ["--records", "20000", "--keys", "2000"]


def _invoke(tmp_path, *args: str):
    result = CliRunner().invoke(main, ["perf", "compact", *SMALL, "--dir", str(tmp_path), "--no-progress", *args])
    assert result.exit_code == 0, result.output
    assert list(tmp_path.iterdir()) == []  # the work dir is removed
    return result.output


def test_workload_is_deterministic_and_writes_every_key():
    workload = perf_compact.CompactWorkload(records=1000, keys=100, seed=7)
    again = perf_compact.CompactWorkload(records=1000, keys=100, seed=7)
    assert [workload.row(o) for o in range(1000)] == [again.row(o) for o in range(1000)]
    latest = workload.latest()
    assert len(latest) == 100 and all(len(key) == 16 for key in latest)
    assert all(workload.key(offset) == key for key, offset in latest.items())
    assert len({workload.value(o) for o in range(1000)}) == 1000  # a value names its offset
    assert len(workload.value(0)) == 100
    assert perf_compact.CompactWorkload(records=10, keys=10).small_buffer_bytes() == 4096  # the config minimum


@pytest.mark.parametrize("kwargs", [{"records": 10, "keys": 11}, {"records": 10, "keys": 0},
                                    {"records": 1000, "keys": 1000, "key_bytes": 2}])
def test_workload_rejects_impossible_settings(kwargs):
    with pytest.raises(ValueError):
        perf_compact.CompactWorkload(**kwargs)


def test_cli_compact_text(tmp_path):
    out = _invoke(tmp_path)
    rows = {m.group(1): float(m.group(2))
            for m in re.finditer(r"^compact 20,000 -> 2,000 records\s+(logstore|sqlite|sqlite\+index)\s+20,000\s+"
                                 r"([0-9.]+)", out, re.M)}
    assert set(rows) == {"logstore", "sqlite", "sqlite+index"} and all(seconds > 0 for seconds in rows.values())
    ratio = float(re.search(r"^compact .* logstore .*?([0-9.]+)×", out, re.M).group(1))
    assert ratio == pytest.approx(min(rows["sqlite"], rows["sqlite+index"]) / rows["logstore"], rel=0.02, abs=0.01)
    assert re.search(r"^goal: logstore >= 1\.5x faster than SQLite: (PASS|FAIL) \([0-9.]+×\)$", out, re.M)
    assert re.search(r"its figure is the faster variant: sqlite(\+index)?$", out, re.M)
    assert re.search(r"^input MB/s \(log bytes before ÷ time\)\s+[0-9.,]+$", out, re.M)
    assert re.search(r"^peak memory growth\s+[0-9.,]+ MB", out, re.M)
    assert re.search(r"^records_dropped\s+18,000$", out, re.M) and re.search(r"^records_kept\s+2,000$", out, re.M)
    passes = int(re.search(r"^multi-pass: .*: passes (\d+), time [0-9.]+ s", out, re.M).group(1))
    assert passes > 1
    assert ("verified (read back, untimed): logstore 2,000 records, sqlite 2,000 records, sqlite+index 2,000 "
            "records, logstore, small buffer 2,000 records") in out


def test_cli_compact_json(tmp_path):
    data = json.loads(_invoke(tmp_path, "--json", "--sqlite-index", "none", "--small-buffer-bytes", "40KB"))
    assert data["settings"]["distinct_keys"] == 2000 and data["settings"]["small_buffer_bytes"] == 40_000
    logstore, multipass = data["logstore"], data["multipass"]
    for run in (logstore, multipass):
        stats = run["stats"]
        assert stats["records_read"] >= 20_000 and stats["records_kept"] == 2000
        assert stats["end_offset"] == 20_000 and stats["size_bytes_before"] == data["log"]["log_bytes"]
        assert stats["size_bytes_after"] < stats["size_bytes_before"] and run["elapsed_s"] > 0
    assert logstore["stats"]["passes"] == 1 and logstore["stats"]["keys_mapped"] == 2000
    assert multipass["stats"]["passes"] > 1 and multipass["dedupe_buffer_bytes"] == 40_000
    assert logstore["dedupe_buffer_bytes"] == perf_compact.DEFAULT_DEDUPE_BUFFER_BYTES
    assert [run["engine"] for run in data["sqlite"]] == ["sqlite"] and data["sqlite_best"] == "sqlite"
    assert data["sqlite"][0]["rows_deleted"] == 18_000 and not data["sqlite"][0]["index"]
    assert data["verified"] == {"logstore": 2000, "sqlite": 2000, "logstore, small buffer": 2000}
    assert data["speedup"] == pytest.approx(data["sqlite"][0]["elapsed_s"] / logstore["elapsed_s"])
    assert data["goals"][0]["passed"] is (data["speedup"] >= perf_compact.GOAL_VS_SQLITE)
    assert "goal: logstore >= 1.5x faster than SQLite" in perf_compact.render_compact(data)


def test_cli_compact_rejects_more_keys_than_records(tmp_path):
    result = CliRunner().invoke(main, ["perf", "compact", "--records", "10", "--keys", "20", "--dir", str(tmp_path)])
    assert result.exit_code != 0 and "must be <= records" in result.output
