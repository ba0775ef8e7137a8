"""``logstore.bench.recovery.bench_recovery``: a small run (never timed: no assertion on a time)."""

from __future__ import annotations

import pytest

from logstore.bench import recovery as perf_recovery


def test_bench_recovery_small_run(tmp_path):
    data = perf_recovery.bench_recovery(size_mb=2, tail_mb=1, repeats=2, work_dir=str(tmp_path), batch_records=50)
    crash = data["crash"]
    assert crash["end_offset"] > crash["recovery_point"] > 0
    assert crash["tail_bytes"] == crash["store_bytes"] - crash["durable_bytes"] >= 10**6
    assert len(data["rounds"]) == 2
    for done in data["rounds"]:
        assert not done["unclean"]["clean"] and done["clean"]["clean"]
        assert done["unclean"]["end_offset"] == done["clean"]["end_offset"] == crash["end_offset"]
        assert done["scan_bytes"] >= crash["tail_bytes"]  # from the batch holding the recovery point
    assert data["ratio"] == data["unclean_open_s"] / (data["clean_open_s"] + data["scan_s"])
    assert len(data["goals"]) == 1 and data["goals"][0]["passed"] in (True, False)
    assert list(tmp_path.iterdir()) == []  # the work dir is removed
    assert "unclean open" in perf_recovery.render_recovery(data)


def test_bench_recovery_refuses_nonsense():
    with pytest.raises(ValueError, match="tail_mb 0"):
        perf_recovery.bench_recovery(tail_mb=0)
