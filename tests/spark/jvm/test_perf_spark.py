"""``logstore perf spark`` at a tiny size: every part runs, every answer is checked before it is
timed into the result, and a wrong answer stops the benchmark instead of producing a number."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from logstore.bench import spark as spark_perf
from logstore.bench.compact import CompactWorkload
from logstore.cli.main import main

pytestmark = pytest.mark.spark

RECORDS, KEYS, PARTITIONS = 20_000, 2_000, 2


def test_benchmark_measures_and_verifies_every_part(spark, tmp_path):
    result = spark_perf.bench_spark(records=RECORDS, keys=KEYS, partitions=PARTITIONS, repeats=1, spark=spark,
                                    work_dir=str(tmp_path))
    json.dumps(result)  # --json prints it as it is
    assert result["session_start_s"] is None  # a given session's start is not timed
    read = result["read"]
    assert sum(read["store"]["end_offsets"]) == RECORDS and len(read["store"]["end_offsets"]) == PARTITIONS
    assert set(read["spark"]) == {f"{path} {query}" for path in ("arrow", "tuple") for query in ("count", "groupby")}
    assert set(read["context"]) == {"source arrow", "source tuple", "core", "sqlite"}
    for row in [*read["spark"].values(), *read["context"].values()]:
        assert row["checked"] == RECORDS and len(row["times_s"]) == 1 and row["records_per_s"] > 0
    assert set(read["arrow_over_tuple"]) == {"count", "groupby"}
    write = result["write"]
    assert write["spark"]["checked"] == write["core"]["checked"] == RECORDS  # every record landed, once
    assert write["spark"]["records_per_s"] > 0 and write["core"]["records_per_s"] > 0
    compact = result["compact"]
    assert set(compact["runs"]) == {"local", "spark", "local-small", "spark-small"}
    assert compact["verified"] == dict.fromkeys(compact["runs"], KEYS)  # one record per key, the latest
    assert compact["warmup_s"] > 0
    assert compact["runs"]["local-small"]["stats"]["passes"] > 1  # the small buffer does force several passes
    assert compact["runs"]["spark-small"]["stats"]["passes"] == 1
    for name in ("spark", "spark-small"):
        run = compact["runs"][name]
        assert run["map_s"] > 0 and run["recopy_s"] > 0 and run["bytes_after"] < run["bytes_before"]
    text = spark_perf.render_spark(result)
    assert "spark arrow=false" in text and "findings" in text and f"{KEYS:,} records" in text
    assert "writing " in text and "stage, then one commit" in text
    assert len(result["findings"]) == 4  # reading, writing, compaction, multi-pass (no session start: it was given)


def test_a_wrong_answer_is_an_error_not_a_number(spark, tmp_path):
    workload = CompactWorkload(2_000, 100)
    spark_perf.build_read_store(str(tmp_path / "store"), workload, 2)
    seconds, records = spark_perf.spark_query(spark, str(tmp_path / "store"), "arrow", "count", workload)
    assert records == 2_000 and seconds > 0
    with pytest.raises(spark_perf.SparkBenchmarkError, match="expected 3,000"):
        spark_perf.spark_query(spark, str(tmp_path / "store"), "tuple", "count", CompactWorkload(3_000, 100))
    with pytest.raises(spark_perf.SparkBenchmarkError, match="in 200"):  # right records, wrong number of keys
        spark_perf.spark_query(spark, str(tmp_path / "store"), "arrow", "groupby", CompactWorkload(2_000, 200))


def test_cli_declares_the_command():
    out = CliRunner().invoke(main, ["perf", "spark", "--help"])
    assert out.exit_code == 0
    for option in ("--records", "--keys", "--partitions", "--repeats", "--skip-compact", "--dir", "--format"):
        assert option in out.output
