"""A machine without the tools from outside Python: the real-client tests skip, naming the tool and
how to install it, and the run says how many each tool skipped; where LOGSTORE_REQUIRE_TOOLS
requires a tool (CI sets ``all``), its absence fails instead.

The runs are real pytest runs of the kcat and kafkajs cases of ``tests/server/test_clients_produce.py``
in a subprocess whose PATH has everything the test's PATH has except kcat and node (a dir of
symlinks), with every LOGSTORE_REQUIRE_* variable unset; kafkajs without ``npm ci`` is a
node_modules dir that does not exist (LOGSTORE_TEST_NODE_MODULES)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import external_tools

ROOT = Path(__file__).resolve().parents[1]
SELECTION = ["tests/server/test_clients_produce.py", "-k", "kcat or kafkajs"]
HIDDEN = {"kcat", "kafkacat", "node", "nodejs"}


def path_without(hidden: set[str], directory: Path) -> str:
    """A PATH of one dir holding a link to every command on this PATH but ``hidden``."""
    directory.mkdir()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isdir(entry):
            continue
        for name in os.listdir(entry):
            target = os.path.join(entry, name)
            if name not in hidden and not (directory / name).exists() and os.access(target, os.X_OK):
                (directory / name).symlink_to(target)
    return str(directory)


def run_pytest(tmp_path: Path, name: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("LOGSTORE_REQUIRE_")}
    environment.update(env)
    command = [sys.executable, "-P", "-m", "pytest", "-x", "-q", "-rs", "-p", "no:cacheprovider",
               f"--basetemp={tmp_path / name}", *args]
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def bare_path(tmp_path_factory):
    return path_without(HIDDEN, tmp_path_factory.mktemp("bare") / "bin")


def test_without_kcat_and_node_the_real_client_tests_skip_saying_what_to_install(tmp_path, bare_path):
    done = run_pytest(tmp_path, "bare", *SELECTION, PATH=bare_path)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert " failed" not in output and " error" not in output, output
    assert "kcat not found: apt-get install kcat" in output
    assert "node not found: apt-get install nodejs npm" in output
    summary = [line for line in output.splitlines() if line.startswith("skipped for missing tools: ")]
    assert len(summary) == 1, output
    assert "kcat " in summary[0] and "[apt-get install kcat]" in summary[0]
    assert "node " in summary[0] and "[apt-get install nodejs npm]" in summary[0]
    assert " passed" not in output.splitlines()[-1], output  # the selection is kcat and kafkajs only


def test_where_a_missing_tool_is_required_it_fails(tmp_path, bare_path):
    done = run_pytest(tmp_path, "required", *SELECTION, PATH=bare_path, LOGSTORE_REQUIRE_TOOLS="kcat")
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "kcat not found: apt-get install kcat, and LOGSTORE_REQUIRE_TOOLS" in output
    assert "1 error" in output, output  # at setup: before its fixtures start a broker


def test_node_without_npm_ci_skips_kafkajs_naming_npm_ci(tmp_path):
    """node is there (CI installs it; elsewhere the skip names node), kafkajs's node_modules is not."""
    done = run_pytest(tmp_path, "no-npm-ci", "tests/server/test_clients_produce.py", "-k", "kafkajs",
                      LOGSTORE_TEST_NODE_MODULES=str(tmp_path / "no-node_modules"))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    expected = "kafkajs" if external_tools.find("node") else "node"
    assert f"{external_tools.reason(expected)}" in output, output
    assert f"skipped for missing tools: {expected} " in output, output


def test_an_unknown_required_tool_is_a_usage_error(monkeypatch):
    monkeypatch.setenv("LOGSTORE_REQUIRE_TOOLS", "kcat,kafkacat")
    with pytest.raises(pytest.UsageError, match="kafkacat"):
        external_tools.required_names()
    monkeypatch.setenv("LOGSTORE_REQUIRE_TOOLS", "all")
    assert external_tools.required("java") and external_tools.required("mount")
    monkeypatch.setenv("LOGSTORE_REQUIRE_TOOLS", "")
    monkeypatch.setenv("LOGSTORE_REQUIRE_NODE", "1")
    assert external_tools.required("kafkajs") and not external_tools.required("kcat")


def test_the_skip_reasons_are_counted_per_tool_and_the_shards_lines_add_up():
    class Report:
        def __init__(self, reason):
            self.longrepr = (__file__, 1, f"Skipped: {reason}")
    reports = [Report(external_tools.reason("kcat"))] * 3 + [Report(external_tools.reason("kafkajs")),
                                                             Report("some other reason")]
    line = external_tools.summary_line(reports)
    assert line == ("skipped for missing tools: kafkajs 1 [(cd tests/server/clients/js && npm ci)], "
                    "kcat 3 [apt-get install kcat]")
    assert external_tools.summary_line([Report("some other reason")]) == "skipped for missing tools: none"
    spec = importlib.util.spec_from_file_location("logstore_test_script", ROOT / "scripts" / "test.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    merged = script.merged_missing_tools([line, "skipped for missing tools: kcat 4 [apt-get install kcat]"])
    assert merged == ("skipped for missing tools: kafkajs 1 [(cd tests/server/clients/js && npm ci)], "
                      "kcat 7 [apt-get install kcat]")
    # an install command with brackets of its own, first, last and alone
    docs = f"mkdocs 4 [{external_tools.INSTALL['mkdocs']}]"
    assert "[" in external_tools.INSTALL["mkdocs"]
    merged = script.merged_missing_tools([f"skipped for missing tools: {docs}, kcat 1 [apt-get install kcat]",
                                          f"skipped for missing tools: java 2 [x], {docs}", f"skipped for missing tools: {docs}"])
    assert merged == (f"skipped for missing tools: java 2 [x], kcat 1 [apt-get install kcat], "
                      f"mkdocs 12 [{external_tools.INSTALL['mkdocs']}]")
