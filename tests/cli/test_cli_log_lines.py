"""What the libraries under the command line log reaches a user as one line each,
``logstore: warning: <message>`` (never a bare message or a traceback through Python's last-resort
handler, and a repeated warning once), Python warnings not at all without -v; and `users list`
beside a running `logstore serve` of the store."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from logstore.cli.main import OneLineWarnings


def cli(*args: str, input: str = "") -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LOGSTORE_")}
    env["PYTHONWARNINGS"] = "default"
    return subprocess.run([sys.executable, "-P", "-m", "logstore.cli", *map(str, args)], input=input,
                          capture_output=True, text=True, env=env, timeout=60, start_new_session=True)


def serve(path) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-P", "-m", "logstore.cli", "--dir", str(path), "serve", "--listen",
                                "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    assert "listening on " in line, process.stderr.read() if process.poll() is not None else line
    return process, line.split("listening on ", 1)[1].split()[0]


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    process.stdout.close()
    process.stderr.close()


def test_one_line_warnings_handler(monkeypatch):
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    logger = logging.getLogger("logstore.client.test_one_line")
    logger.propagate = False
    handler = OneLineWarnings()
    logger.addHandler(handler)
    try:
        logger.info("not shown")
        logger.warning("group %s: heartbeat failed: %s", "g", "refused")
        logger.warning("group %s: heartbeat failed: %s", "g", "refused")  # a repeat: said once
        try:
            raise RuntimeError("the cause\nin two lines")
        except RuntimeError:
            logger.exception("a callback raised")
        logger.error("broken\n  over lines")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    assert stderr.getvalue().splitlines() == ["logstore: warning: group g: heartbeat failed: refused",
                                              "logstore: error: a callback raised: the cause in two lines",
                                              "logstore: error: broken over lines"]


def committed_offset(address: str, group: str) -> int | None:
    described = cli("--bootstrap-server", address, "groups", "describe", group, "--format", "json")
    assert described.returncode == 0, described.stderr
    offsets = [entry["committed_offset"] for entry in json.loads(described.stdout)["partitions"]]
    return offsets[0] if offsets else None


def test_a_broker_going_away_under_read_follow_is_one_line_each(tmp_path):
    """The broker stops under a follower whose records are committed: what it logs is one warning
    line each, and Ctrl-C ends it at once with exit 0."""
    assert cli("--dir", tmp_path / "d", "topics", "create", "t").returncode == 0
    server, address = serve(tmp_path / "d")
    try:
        assert cli("--bootstrap-server", address, "append", "t", "hello").returncode == 0
        reader = subprocess.Popen([sys.executable, "-P", "-m", "logstore.cli", "--bootstrap-server", address, "read",
                                   "t", "--follow", "--group", "g"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        watchdog = threading.Timer(120, reader.kill)  # bounds the test if nothing is ever logged
        watchdog.start()
        try:
            assert '"value": "hello"' in reader.stdout.readline()
            # The reader commits once the record is printed; the broker goes away after that (a
            # commit still to make when it goes is the client tests' case).
            deadline = time.monotonic() + 30
            while committed_offset(address, "g") != 1:
                assert time.monotonic() < deadline, "the reader never committed past the record it printed"
                time.sleep(0.1)
            stop(server)  # the broker goes away under the reader
            first = reader.stderr.readline()  # what the client logs about it
            reader.send_signal(signal.SIGINT)
            interrupted = time.monotonic()
            _out, rest = reader.communicate(timeout=60)
            ended_s = time.monotonic() - interrupted
        finally:
            watchdog.cancel()
            if reader.poll() is None:
                reader.kill()
    finally:
        stop(server)
    lines = (first + rest).splitlines()
    assert reader.returncode == 0, lines
    assert lines and all(line.startswith("logstore: warning: ") for line in lines), lines
    assert "127.0.0.1" in lines[0], lines
    assert len(lines) == len(set(lines))  # each said once
    assert "Traceback" not in first + rest
    assert ended_s < 15, f"Ctrl-C took {ended_s:.1f} s to end the reader"


PATCHED_WARNING = """
import sys, warnings
import logstore.tools.topics as topics
listed = topics.listed_topics
def warned(*args):
    warnings.warn("a library warning", DeprecationWarning)
    warnings.warn("another one", ResourceWarning)
    return listed(*args)
topics.listed_topics = warned
from logstore.cli.main import main
main(args=sys.argv[1:], prog_name="logstore")
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_python_warnings_reach_a_user_only_with_verbose(tmp_path, verbose):
    assert cli("--dir", tmp_path / "d", "topics", "create", "t").returncode == 0
    env = {key: value for key, value in os.environ.items() if not key.startswith("LOGSTORE_")}
    env["PYTHONWARNINGS"] = "default"
    args = ["--dir", str(tmp_path / "d"), *(["-v"] if verbose else []), "topics", "list"]
    done = subprocess.run([sys.executable, "-P", "-c", PATCHED_WARNING, *args], capture_output=True, text=True,
                          env=env, timeout=60)
    assert (done.returncode, done.stdout) == (0, "t\n"), done.stderr
    if verbose:
        assert "a library warning" in done.stderr and "another one" in done.stderr
    else:
        assert done.stderr == ""


def test_users_list_beside_a_running_serve(tmp_path):
    data = tmp_path / "d"
    added = cli("--dir", data, "users", "add", "alice", "--password-stdin", "--iterations", "4096",
                "--mechanism", "SCRAM-SHA-256", input="secret\n")
    assert added.returncode == 0, added.stderr
    server, _address = serve(data)
    try:
        listed = cli("--dir", data, "users", "list")
        assert (listed.returncode, listed.stdout, listed.stderr) == (0, "alice\tSCRAM-SHA-256\t4096\n", "")
        refused = cli("--dir", data, "users", "add", "bob", "--password-stdin", input="pw\n")
        assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused.stderr
        assert refused.stderr.startswith("Error: ") and "lock" in refused.stderr
    finally:
        stop(server)
