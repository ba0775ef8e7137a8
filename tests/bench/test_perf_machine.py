"""Every ``logstore perf`` command ends its output with the command line and the machine's load
average before and after the run (text), or carries them under ``"machine"`` (JSON)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from logstore.bench import machine
from logstore.cli.perf import perf


def test_text_output_ends_with_the_command_and_the_load(tmp_path):
    result = CliRunner().invoke(perf, ["append", "--records", "50", "--batch-size", "10", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    command, machine_line = result.output.rstrip("\n").splitlines()[-2:]
    assert command.startswith("command: logstore ")
    assert machine_line.startswith("machine: ") and "load average (1/5/15 min)" in machine_line
    assert " before and " in machine_line and " after; " in machine_line


def test_json_output_carries_the_machine_next_to_the_results(tmp_path):
    result = CliRunner().invoke(perf, ["append", "--records", "50", "--batch-size", "10", "--dir", str(tmp_path),
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["results"] and document["results"][0]["records"] == 50
    facts = document["machine"]
    assert facts["cpus"] >= 1 and facts["python"] and facts["sqlite"]
    assert len(facts["load_average_before"]) == 3 and len(facts["load_average_after"]) == 3
    assert facts["seconds"] >= 0


def test_output_that_is_not_one_json_object_is_left_as_it_was():
    state = machine.snapshot()
    assert machine.with_machine("[1, 2]\n", state, state) == "[1, 2]\n"
    assert machine.with_machine("not json", state, state) == "not json"
    assert json.loads(machine.with_machine('{"a": 1}', state, state, ["perf", "x"]))["machine"]["command"] == \
        "logstore perf x"
