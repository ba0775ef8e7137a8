"""The Spark guide's end-to-end pipeline (docs/guide/spark.md) runs as written: clicks streamed through a Spark aggregation into
a compacted topic, compacted on Spark, exported to Parquet."""

from __future__ import annotations

import contextlib
import io
from collections import Counter

import pytest
from docs_snippets import block

from logstore.manager.log_manager import LogManager

pytestmark = pytest.mark.spark

PAGE = "docs/guide/spark.md"


def pipeline_code() -> str:
    return block("docs/guide/spark.md", "pipeline")


def test_readme_pipeline(spark, tmp_path):
    # The README's relative paths, made absolute: Spark's JVM resolves paths against its own working
    # directory, which a test cannot move.
    code = pipeline_code()
    for name in ("shop-data", "shop-checkpoint", "clicks-per-user.parquet"):
        assert f'"{name}"' in code
        code = code.replace(f'"{name}"', repr(str(tmp_path / name)))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, PAGE, "exec"), {"__name__": "readme_pipeline"})
    expected = Counter(f"user{i % 7}" for i in range(5000))
    exported = {row.user: row.clicks for row in spark.read.parquet(str(tmp_path / "clicks-per-user.parquet")).collect()}
    assert exported == dict(expected)
    assert "Row(user='user0', clicks=715)" in printed.getvalue()
    with LogManager(str(tmp_path / "shop-data"), read_only=True) as store:
        log = store.get_log("clicks-per-user", 0)
        records = list(log.iter_records())
        below_active = [r for r in records if r.offset < log.active_segment.base_offset]
        assert log.log_end_offset == 35  # 5 micro-batches x 7 users, nothing lost by compaction
        assert len(records) < 35 and len({r.key for r in below_active}) == len(below_active)
