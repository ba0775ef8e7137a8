"""``logstore perf cli``: each command timed as a new process, interleaved, with its median and min
and the same less ``python -c pass``'s; a failing command fails the benchmark with its error line;
``serve`` is timed to its listening line and stopped. No figure is asserted (start-up times are
reported, never tested)."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest
from click.testing import CliRunner

from logstore.bench import cli_startup
from logstore.cli.perf import perf
from logstore.server import missing_extra


def test_every_command_is_timed_as_often_as_asked_and_compared_with_python(tmp_path):
    said = []
    result = cli_startup.bench_cli(repeats=2, serve=False, work_dir=str(tmp_path), say=said.append)
    assert [row["command"] for row in result["rows"]] == [
        "python -c pass", "logstore --version", "logstore --help", "logstore topics list"]
    assert said == ["round 1 of 2", "round 2 of 2"]
    python = result["rows"][0]
    assert "median_over_python_s" not in python
    for row in result["rows"]:
        assert len(row["samples_s"]) == 2 and all(sample > 0 for sample in row["samples_s"])
        assert row["min_s"] == min(row["samples_s"]) and row["min_s"] <= row["median_s"]
        if row is not python:
            assert row["median_over_python_s"] == pytest.approx(row["median_s"] - python["median_s"])
            assert row["min_over_python_s"] == pytest.approx(row["min_s"] - python["min_s"])
    assert result["rows"][1]["goal_s"] == 0.15 and python["goal_s"] is None
    assert os.listdir(tmp_path) == []  # its work dir is removed
    table = cli_startup.render_cli(result)
    assert "logstore topics list" in table and "median - python" in table and "2 runs of each command" in table


@pytest.mark.skipif(bool(missing_extra()), reason="logstore serve needs the server extra")
def test_serve_is_timed_to_its_listening_line_and_stopped(tmp_path):
    result = cli_startup.bench_cli(repeats=1, serve=True, work_dir=str(tmp_path))
    (row,) = [row for row in result["rows"] if row["command"] == "logstore serve"]
    assert len(row["samples_s"]) == 1 and row["goal_s"] == 0.3
    assert os.listdir(tmp_path) == []  # stopped: its store could be removed


def test_a_failing_command_fails_the_benchmark_with_its_error(tmp_path):
    program = tmp_path / "logstore"
    program.write_text(f"#!{sys.executable}\nimport sys\nsys.exit('Error: no such store' if 'topics' in sys.argv "
                       "else 0)\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(cli_startup.CliBenchmarkError, match="logstore topics create failed .*no such store"):
        cli_startup.bench_cli(repeats=1, program=[str(program)], serve=False, work_dir=str(tmp_path))


def test_a_server_without_its_listening_line_fails_the_benchmark(tmp_path):
    program = tmp_path / "logstore"
    program.write_text(f"#!{sys.executable}\nimport sys\nsys.exit('Error: cannot bind' if 'serve' in sys.argv else 0)\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(cli_startup.CliBenchmarkError, match="no listening line .*cannot bind"):
        cli_startup.bench_cli(repeats=1, program=[str(program)], serve=True, work_dir=str(tmp_path))


def test_the_command_prints_json_and_refuses_zero_repeats(tmp_path):
    runner = CliRunner()
    done = runner.invoke(perf, ["cli", "--repeats", "1", "--no-serve", "--json", "--dir", str(tmp_path)])
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    assert result["repeats"] == 1 and len(result["rows"]) == 4
    refused = runner.invoke(perf, ["cli", "--repeats", "0"])
    assert refused.exit_code == 2 and "--repeats" in refused.output
