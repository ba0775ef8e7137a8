"""The command line's contract, command by command: a usage error (a bad option value, a missing
argument, a malformed NAME=VALUE, bad base64, HOST without PORT) exits 2 with one line on stderr;
every other error exits 1 with one line; never a Python warning, a traceback or a log line through
Python's last-resort handler for an expected condition. Run as a subprocess (what a user sees, with
Python's warnings shown) and through click's CliRunner."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from logstore.cli.main import main


def run(*args: str, input: str = "", cwd=None) -> subprocess.CompletedProcess:
    """``logstore ARGS`` in a new session (no controlling terminal), stdin from ``input``, warnings on."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LOGSTORE_")}
    env["PYTHONWARNINGS"] = "default"
    return subprocess.run([sys.executable, "-P", "-m", "logstore.cli", *args], input=input, capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=60, start_new_session=True)


def one_line_error(result, code: int, *words: str) -> str:
    lines = result.stderr.splitlines()
    assert result.returncode == code, (result.returncode, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert all(word in lines[0] for word in words), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store with topic ``t``, a regular file and a path that does not exist."""
    root = tmp_path_factory.mktemp("contract")
    assert CliRunner().invoke(main, ["--dir", str(root / "d"), "topics", "create", "t"]).exit_code == 0
    (root / "f").write_text("not a store")
    return root


@pytest.mark.parametrize("args, words", [
    (["append", "t", "--header", "nohdrvalue", "v"], ["--header", "NAME=VALUE", "nohdrvalue"]),
    (["append", "t", "--header", "=v", "v"], ["--header", "NAME=VALUE"]),
    (["append", "t", "--encoding", "base64", "!!!"], ["VALUE", "base64"]),
    (["append", "t", "--encoding", "base64", "--key", "!!", "dg=="], ["--key", "base64"]),
    (["append", "t", "--encoding", "base64", "--header", "h=!!", "dg=="], ["--header", "base64"]),
])
def test_bad_command_line_values_of_append_are_usage_errors(store, args, words):
    one_line_error(run("--dir", str(store / "d"), *args), 2, *words)


def test_bad_base64_on_stdin_is_a_data_error_naming_the_line(store):
    one_line_error(run("--dir", str(store / "d"), "append", "t", "--encoding", "base64", input="dg==\n!!\n"), 1,
                   "line 2", "base64")


@pytest.mark.parametrize("server", ["127.0.0.1", "127.0.0.1:0", "127.0.0.1:99999", "127.0.0.1:port"])
def test_a_bootstrap_server_without_a_port_is_a_usage_error(server):
    one_line_error(run("--bootstrap-server", server, "topics", "list"), 2, "--bootstrap-server", server)


def test_a_data_dir_that_is_a_file_is_named_so_in_one_line(store):
    for args in (["topics", "list"], ["read", "t"], ["check"], ["status"], ["users", "list"]):
        one_line_error(run("--dir", str(store / "f"), *args), 1, str(store / "f"), "is not a directory")
    # a writer: no "data dir ... is offline" log line before the error
    one_line_error(run("--dir", str(store / "f"), "topics", "create", "x"), 1, "is not a directory")
    one_line_error(run("--dir", str(store / "none"), "read", "t"), 1, "does not exist")
    assert not (store / "none").exists()


def test_a_file_beside_a_working_data_dir_is_reported_and_the_rest_works(tmp_path):
    (tmp_path / "f").write_text("")
    result = run("--dir", str(tmp_path / "f"), "--dir", str(tmp_path / "d"), "topics", "create", "x")
    assert result.returncode == 0, result.stderr
    assert "is not a directory" in result.stderr  # the store runs without that dir: said, not hidden


def test_users_add_without_a_terminal_refuses_in_one_line(store):
    result = run("--dir", str(store / "d"), "users", "add", "bob")
    one_line_error(result, 2, "--password-stdin")
    assert "Warning" not in result.stderr and result.stdout == ""


def test_users_and_acls_list_beside_the_process_holding_the_store(store):
    assert run("--dir", str(store / "d"), "users", "add", "bob", "--password-stdin", "--iterations", "4096",
               input="pw\n").returncode == 0
    holder = subprocess.Popen([sys.executable, "-P", "-c", "import sys\nfrom logstore import LogManager\n"
                               f"store = LogManager([{str(store / 'd')!r}])\nprint('open', flush=True)\n"
                               "sys.stdin.read()\nstore.close()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "open\n"
        one_line_error(run("--dir", str(store / "d"), "users", "delete", "bob"), 1, "locked")
        listed = run("--dir", str(store / "d"), "users", "list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines() == ["bob\tSCRAM-SHA-256\t4096", "bob\tSCRAM-SHA-512\t4096"]
        listed = run("--dir", str(store / "d"), "acls", "list")
        assert (listed.returncode, listed.stdout, listed.stderr) == (0, "No ACLs.\n", "")
    finally:
        holder.communicate("", timeout=60)


@pytest.mark.parametrize("end", ["localhost", "kafka1.example.com", "127.0.0.1", "[::1]"])
def test_mirror_refuses_a_host_without_its_port(tmp_path, store, end):
    one_line_error(run("mirror", "--from", str(store / "d"), "--to", end, cwd=tmp_path), 2, "--to", "HOST:PORT",
                   f"./{end}")
    one_line_error(run("mirror", "--from", end, "--to", "./copy", cwd=tmp_path), 2, "--from", "HOST:PORT")
    assert list(tmp_path.iterdir()) == []


def test_mirror_to_an_explicit_path_and_a_failed_mirror_leaves_nothing(tmp_path, store):
    result = run("mirror", "--from", str(store / "d"), "--to", "./localhost", "nosuch", cwd=tmp_path)
    one_line_error(result, 1, "nosuch")  # no "mirroring" progress label before it
    assert list(tmp_path.iterdir()) == []  # the store it created for the copy is gone
    (tmp_path / "kept").mkdir()
    one_line_error(run("mirror", "--from", str(store / "d"), "--to", "./kept", "nosuch", cwd=tmp_path), 1, "nosuch")
    assert (tmp_path / "kept").is_dir()  # a dir it did not create stays
    result = run("mirror", "--from", str(store / "d"), "--to", "./localhost", "t", cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert (tmp_path / "localhost" / "t-0").is_dir()
    one_line_error(run("mirror", "--from", str(store / "none"), "--to", "./x", cwd=tmp_path), 2, "--from")


# (arguments after --dir D; F: a file, N: no such path), the exit code, words of the one line
SWEEP = [
    (["topics", "create"], 2, ["NAME"]),
    (["topics", "create", "u", "--partitions", "0"], 2, ["--partitions"]),
    (["topics", "describe", "nosuch"], 1, ["nosuch"]),
    (["topics", "delete", "nosuch"], 1, ["nosuch"]),
    (["topics", "alter", "t"], 2, ["nothing to change"]),
    (["topics", "create", "u", "--config", "nosuch=1"], 2, ["--config", "nosuch"]),
    (["topics", "create", "u", "--config", "retention.ms=abc"], 2, ["--config", "retention.ms"]),
    (["topics", "create", "bad/name"], 2, ["NAME", "bad/name"]),
    (["topics", "alter", "t", "--config", "retention.ms=x"], 2, ["--config", "retention.ms"]),
    (["--set", "nosuch=1", "topics", "list"], 2, ["--set", "nosuch"]),
    (["--set", "log.segment.bytes=abc", "read", "t"], 2, ["--set", "log.segment.bytes"]),
    (["topics", "alter", "nosuch", "--partitions", "3"], 1, ["nosuch"]),
    (["topics", "alter", "t", "--partitions", "1"], 1, ["partition"]),
    (["topics", "list", "--bogus"], 2, ["--bogus"]),
    (["append", "nosuch", "v"], 1, ["nosuch"]),
    (["append", "t", "--partition", "-1", "v"], 2, ["--partition"]),
    (["append", "t", "--partition", "5", "v"], 1, ["partition 5"]),
    (["append", "t", "--timestamp", "abc", "v"], 2, ["--timestamp"]),
    (["read", "nosuch"], 1, ["nosuch"]),
    (["read", "t", "--offset", "xyz"], 2, ["--offset"]),
    (["read", "t", "--offset", "5"], 2, ["--partition"]),
    (["read", "t", "--partition", "7"], 1, ["partition 7"]),
    (["retention", "nosuch"], 1, ["nosuch"]),
    (["compact", "nosuch"], 1, ["nosuch"]),
    (["repair", "nosuch"], 1, ["nosuch"]),
    (["groups", "describe", "g"], 1, ["'g'"]),
    (["groups", "delete", "g"], 1, ["'g'"]),
    (["offsets", "nosuch"], 1, ["nosuch"]),
    (["delete-records", "nosuch"], 2, ["--partition"]),
    (["users", "delete", "nobody"], 1, ["nobody"]),
    (["acls", "add"], 2, ["principal"]),
    (["perf", "bogus"], 2, ["bogus"]),
    (["demo", "extra"], 2, ["extra"]),
    (["nosuchcommand"], 2, ["nosuchcommand"]),
    (["api-versions"], 2, ["--bootstrap-server"]),
    (["topics", "list", "--format", "yaml"], 2, ["--format", "yaml"]),
    (["topics", "describe", "t", "--format", "jsonl"], 2, ["--format", "jsonl"]),
    (["status", "--format", "xml"], 2, ["--format", "xml"]),
    (["check", "--format", "jsonl"], 2, ["--format"]),
    (["groups", "list", "--format", "csv"], 2, ["--format", "csv"]),
    (["users", "list", "--format", "csv"], 2, ["--format"]),
    (["acls", "list", "--format", "csv"], 2, ["--format"]),
    (["retention", "--format", "csv"], 2, ["--format"]),
    (["append", "t", "v", "--format", "value"], 2, ["--format"]),
    (["groups", "describe", "g", "--format"], 2, ["--format"]),
    (["offsets", "t", "--format", "tsv"], 2, ["--format", "tsv"]),
    (["mirror", "--from", "x", "--to", "y", "--format", "csv"], 2, ["--format"]),
    (["perf", "append", "--format", "csv"], 2, ["--format"]),
    (["compact", "--format", "csv"], 2, ["--format"]),
]
SWEEP_NO_STORE = [["status"], ["check"], ["read", "t"], ["groups", "list"], ["users", "list"], ["acls", "list"],
                  ["topics", "list"], ["offsets", "t"]]


@pytest.mark.parametrize("args, code, words", SWEEP)
def test_sweep_through_click(store, args, code, words):
    result = CliRunner().invoke(main, ["--dir", str(store / "d"), *args])
    lines = result.stderr.splitlines()
    assert result.exit_code == code and len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert all(word in lines[0] for word in words), lines[0]


def test_sweep_as_a_subprocess(store):
    for args, code, words in SWEEP[::3]:  # a subprocess each: a sample, for Python's own warnings
        one_line_error(run("--dir", str(store / "d"), *args), code, *words)
    for args in SWEEP_NO_STORE:
        one_line_error(run("--dir", str(store / "none"), *args), 1, "does not exist")
    one_line_error(run("dump", str(store / "none")), 2, "does not exist")
    one_line_error(run("dump", str(store / "d")), 2, "is a directory")
    one_line_error(run("dump", str(store / "f")), 1, "cannot tell what kind of file")
    one_line_error(run("--bootstrap-server", "127.0.0.1:1", "topics", "list"), 1, "127.0.0.1:1")
