"""Shell completion (docs/guide/cli.md, "Shell completion"): `_LOGSTORE_COMPLETE=<shell>_source
logstore` prints the script each shell loads, and the completions it asks for name the commands,
the lazily loaded subcommands and their options."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from docs_snippets import environment


def _logstore(variables: dict[str, str]) -> str:
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "logstore")], capture_output=True,
                          text=True, timeout=60, env={**environment(), **variables}, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout


@pytest.mark.parametrize(("shell", "marks"), [
    ("bash", ["_logstore_completion() {", "_LOGSTORE_COMPLETE=bash_complete", "complete -o nosort -F "
              "_logstore_completion logstore"]),
    ("zsh", ["#compdef logstore", "_LOGSTORE_COMPLETE=zsh_complete"]),
    ("fish", ["function _logstore_completion", "_LOGSTORE_COMPLETE=fish_complete"]),
])
def test_each_shell_gets_its_script(shell, marks):
    script = _logstore({"_LOGSTORE_COMPLETE": f"{shell}_source"})
    for mark in marks:
        assert mark in script, (shell, mark)


@pytest.mark.parametrize(("words", "expected"), [
    ("logstore top", ["topics"]),
    ("logstore topics ", ["alter", "create", "delete", "describe", "list"]),
    ("logstore topics create --part", ["--partitions"]),
    ("logstore groups reset-offsets --to-e", ["--to-earliest"]),
])
def test_completions_name_commands_lazy_subcommands_and_their_options(words, expected):
    answer = _logstore({"_LOGSTORE_COMPLETE": "bash_complete", "COMP_WORDS": words,
                        "COMP_CWORD": str(len(words.split(" ")) - 1)})
    assert [line.split(",", 1)[1] for line in answer.splitlines()] == expected
