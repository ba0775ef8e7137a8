"""What the command line loads: ``logstore --version`` and ``logstore --help`` load click and the
command line's own modules, never the engine, the server, the client, a benchmark or a compiled
extra (an allow-list: a new import on their path fails here, whatever it is); a command loads what it
uses when it runs. Each check runs the command in a fresh interpreter and reads its ``sys.modules``.
Start-up time itself is measured by ``logstore perf cli``, never asserted here.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from logstore.cli.main import LAZY_COMMANDS, main

RUN_AND_LIST = """
import sys
from logstore.cli.main import main
try:
    main(args=sys.argv[1:], prog_name="logstore")
except SystemExit:
    pass
print("MODULES", " ".join(sorted(sys.modules)))
"""

CLI_CORE = {"logstore", "logstore.errors", "logstore.cli", "logstore.cli.main", "logstore.cli.lazy",
            "logstore.cli.options", "logstore.cli.records_io"}
"""The logstore modules every command loads (``logstore.errors``: the one-line error handling)."""
CLI_COMMAND_MODULES = {"logstore.cli." + target.split(":")[0].lstrip(".") for target in LAZY_COMMANDS.values()}

LIGHT_STDLIB = {
    # what the command line's own modules and logging, json and dataclasses import
    "atexit", "base64", "binascii", "copy", "dataclasses", "importlib", "json", "locale", "logging", "shlex", "signal",
    "string", "struct", "textwrap", "traceback", "weakref", "inspect", "ast", "dis", "opcode", "token", "tokenize",
    "linecache", "keyword", "collections", "contextlib", "enum", "functools", "itertools", "operator", "re", "reprlib",
    "types", "typing", "warnings", "errno", "annotationlib", "_colorize",
    # click's help page: the terminal's width (shutil, with its compression modules)
    "shutil", "bz2", "lzma", "zlib", "fnmatch", "_compression",
}
"""Standard-library packages the two commands may load beyond what ``import click`` loads (their C
parts, ``_json`` and the like, go with them). Heavy ones (ssl, socket, sqlite3, subprocess, ctypes,
asyncio, mmap, hashlib) are not in it."""


def _modules(*code_and_args: str, cwd) -> set[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LOGSTORE_")}
    done = subprocess.run([sys.executable, "-c", *code_and_args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("MODULES "))
    return set(line.split()[1:])


@pytest.fixture(scope="module")
def click_modules(tmp_path_factory) -> set[str]:
    """What the interpreter and ``import click`` load by themselves."""
    return _modules("import sys, click; print('MODULES', ' '.join(sys.modules))", cwd=tmp_path_factory.mktemp("click"))


def _unexpected(loaded: set[str], click_modules: set[str], logstore_allowed: set[str]) -> list[str]:
    extra = loaded - click_modules
    bad = []
    for name in sorted(extra):
        top = name.split(".")[0]
        if top == "logstore":
            if name not in logstore_allowed:
                bad.append(name)
        elif top == "click":
            continue
        elif top.lstrip("_") not in LIGHT_STDLIB and top not in LIGHT_STDLIB:
            bad.append(name)
    return bad


def test_version_loads_only_click_and_the_command_lines_core(tmp_path, click_modules):
    loaded = _modules(RUN_AND_LIST, "--version", cwd=tmp_path)
    assert CLI_CORE <= loaded
    assert _unexpected(loaded, click_modules, CLI_CORE) == []
    # the subcommands of other modules are not even imported
    assert not loaded & CLI_COMMAND_MODULES


def test_help_loads_the_command_modules_but_none_of_their_implementations(tmp_path, click_modules):
    loaded = _modules(RUN_AND_LIST, "--help", cwd=tmp_path)
    assert CLI_COMMAND_MODULES <= loaded  # for their short help
    assert _unexpected(loaded, click_modules, CLI_CORE | CLI_COMMAND_MODULES) == []


def test_the_allow_list_check_names_a_heavy_import(click_modules):
    loaded = click_modules | CLI_CORE | {"logstore.server", "logstore.log.log", "cramjam", "google_crc32c", "ssl",
                                         "_ssl", "sqlite3"}
    assert _unexpected(loaded, click_modules, CLI_CORE) == [
        "_ssl", "cramjam", "google_crc32c", "logstore.log.log", "logstore.server", "sqlite3", "ssl"]


def test_a_group_help_loads_no_implementation(tmp_path, click_modules):
    """``logstore users --help`` and ``logstore perf --help`` list their subcommands without loading
    the server's SCRAM code or a benchmark (their options that need them are built on first use).
    The root's callback runs first: it parses the store-wide settings (``logstore.config``) and, for
    the commands that go through a store's host (topics, groups), looks for one (a small file)."""
    for group in ("users", "perf", "acls"):
        loaded = _modules(RUN_AND_LIST, group, "--help", cwd=tmp_path)
        assert _unexpected(loaded, click_modules, CLI_CORE | CLI_COMMAND_MODULES | {"logstore.config"}) == [], group
    for group in ("topics", "groups"):
        loaded = _modules(RUN_AND_LIST, group, "--help", cwd=tmp_path)
        heavy = sorted(name for name in loaded if name.split(".")[:2] in (
            ["logstore", "server"], ["logstore", "bench"], ["logstore", "log"], ["logstore", "manager"],
            ["logstore", "group"], ["logstore", "tools"]) or name.split(".")[0] in ("cramjam", "google_crc32c"))
        assert heavy == [], group


def test_a_command_loads_what_it_uses(tmp_path):
    loaded = _modules(RUN_AND_LIST, "--dir", str(tmp_path / "store"), "topics", "list", cwd=tmp_path)
    assert {"logstore.manager.log_manager", "logstore.tools.topics"} <= loaded
    assert not {name for name in loaded if name.split(".")[:2] in (["logstore", "server"], ["logstore", "bench"])}
    assert not loaded & {"logstore.cli.perf", "logstore.cli.users", "logstore.cli.acls", "logstore.cli.groups"}


def test_root_help_lists_every_subcommand_with_its_short_help():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    for name in LAZY_COMMANDS:
        command = main.get_command(None, name)
        assert command is not None, name
        assert f"  {name} " in result.output, name
        assert command.get_short_help_str(45)[:30] in " ".join(result.output.split()), name


def test_deferred_options_are_there_when_the_command_is_shown_parsed_and_completed(tmp_path):
    runner = CliRunner()
    shown = runner.invoke(main, ["users", "add", "--help"])
    assert shown.exit_code == 0 and "--iterations" in shown.output and "4096..16384" in shown.output, shown.output
    assert "SCRAM-SHA-256" in shown.output
    refused = runner.invoke(main, ["--dir", str(tmp_path / "s"), "users", "add", "bob", "--iterations", "10",
                                   "--password-stdin"], input="secret\n")
    assert refused.exit_code == 2 and "--iterations" in refused.output, refused.output
    epilog = runner.invoke(main, ["topics", "create", "--help"])
    assert epilog.exit_code == 0 and "retention.ms (default" in epilog.output, epilog.output
    timeout = runner.invoke(main, ["append", "--help"])
    assert "--timeout-ms" in timeout.output and "2147483647" in timeout.output, timeout.output
    mirror = runner.invoke(main, ["mirror", "--help"])
    assert "--group" in mirror.output and "logstore-mirror" in mirror.output, mirror.output
    serve = runner.invoke(main, ["perf", "serve", "--help"])
    assert "--sasl-mechanism" in serve.output and "--security" in serve.output, serve.output


@pytest.mark.parametrize("words, cword, expected", [
    ("logstore to", 1, "topics"),
    ("logstore us", 1, "users"),
    ("logstore users add --it", 3, "--iterations"),
    ("logstore perf serve --sasl", 3, "--sasl-mechanism"),
    ("logstore --dir d topics cr", 4, "create"),
])
def test_shell_completion_completes_lazy_commands_and_deferred_options(tmp_path, words, cword, expected):
    env = {key: value for key, value in os.environ.items() if not key.startswith("LOGSTORE_")}
    env.update({"_LOGSTORE_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)})
    done = subprocess.run([sys.executable, "-c", "from logstore.cli.main import main; main(prog_name='logstore')"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"plain,{expected}" in done.stdout.splitlines(), done.stdout
