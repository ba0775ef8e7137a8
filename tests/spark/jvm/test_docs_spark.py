"""The Spark blocks of the README's tour and of the Spark guide's "Reading" run as written, in the
tests' Spark session (paths made absolute: Spark's JVM resolves them against its own working dir)."""

from __future__ import annotations

import contextlib
import io
import re

import pytest
from docs_snippets import block, python_expected

from logstore import LogManager, Record

pytestmark = pytest.mark.spark


def test_the_readmes_spark_tour_prints_what_it_shows(spark, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = block("README.md", "readme-spark")
    assert '"events-data"' in code
    code = code.replace('"events-data"', repr(str(tmp_path / "events-data")))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), {"__name__": "docs_spark"})
    assert printed.getvalue().splitlines() == python_expected(code)


def test_the_spark_guides_read_runs(spark, tmp_path):
    data = str(tmp_path / "data")
    with LogManager([data]) as store:
        store.create_topic("events", 1)
        store.append("events", [Record(b"k%d" % i, b"v%d" % i) for i in range(150)])
    code = block("docs/guide/spark.md", "reading")
    assert '.load("data")' in code and "path 'data'" in code
    code = code.replace('.load("data")', f".load({data!r})").replace("path 'data'", f"path '{data}'")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "docs/guide/spark.md", "exec"), {"spark": spark})
    shown = printed.getvalue()
    assert re.search(r"\|\s*k100\|\s*v100\|\s*0\|\s*100\|", shown), shown  # show(): from offset 100, as asked
    assert spark.sql("SELECT count(*) AS n FROM ev").collect()[0].n == 150
