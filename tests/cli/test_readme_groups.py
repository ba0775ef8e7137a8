"""The consumer groups guide (docs/guide/groups.md): its Python example runs as written (in a temporary working
dir) and prints what its comments say; the describe output shown is what the CLI prints after it;
every command of its shell block runs; every group setting is documented."""

from __future__ import annotations

import contextlib
import io
import shlex

from click.testing import CliRunner
from docs_snippets import REPOSITORY, block

from logstore.cli.main import main
from logstore.group.config import GROUP_KEYS

PAGE = "docs/guide/groups.md"


def groups_section() -> str:
    return (REPOSITORY / PAGE).read_text(encoding="utf-8")


def invoke(args: list[str]):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, (args, result.stdout, result.stderr, result.exc_info)
    return result


def test_the_example_prints_what_it_says_and_the_commands_run_after_it(tmp_path, monkeypatch):
    snippet = block("docs/guide/groups.md", "groups-python")
    commands = block("docs/guide/groups.md", "groups-cli")
    shown = block("docs/guide/groups.md", "groups-describe")
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(snippet, PAGE, "exec"), {})
    promised = [line[2:] for line in snippet.splitlines() if line.startswith("# ")]
    assert printed.getvalue().splitlines() == promised
    assert invoke(["--dir", "data", "groups", "describe", "billing"]).stdout == shown
    outputs = []
    for line in commands.splitlines():
        args = shlex.split(line, comments=True)
        assert args[0] == "logstore", line
        outputs.append(invoke(args[1:]).stdout)
    assert outputs[-1] == "Deleted group billing.\n"
    read_lines = outputs[-2].splitlines()
    assert len(read_lines) == 5 and '"value": "order 1"' in read_lines[0]  # --to-datetime moved it to the start


def test_every_group_setting_is_documented():
    section = groups_section()
    for key in GROUP_KEYS:
        assert f"`{key}`" in section, key
