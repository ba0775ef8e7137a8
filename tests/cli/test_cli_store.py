"""The CLI commands of the store's own work: `retention`, `status`, `append --acks all` and
`read --follow` (the last as a real subprocess tailing while another process appends)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.cli.main import main


def run(store_dir, *args, input=None):
    return CliRunner().invoke(main, ["--dir", str(store_dir), *map(str, args)], input=input)


def ok(result):
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exc_info)
    return result


def make_store(path, retention_bytes=3000):
    ok(run(path, "topics", "create", "ev", "--config", "segment.bytes=1000", "--config",
           f"retention.bytes={retention_bytes}", "--config", "file.delete.delay.ms=0"))
    lines = "".join(f"event number {i:04d} with some padding to fill segments\n" for i in range(200))
    ok(run(path, "append", "ev", input=lines))


def test_retention_dry_run_then_delete(tmp_path):
    path = tmp_path / "data"
    make_store(path)
    before = sorted(os.listdir(path / "ev-0"))
    dry = ok(run(path, "retention", "--dry-run")).stdout.splitlines()
    assert dry[-1].startswith("Would delete ") and "by retention.bytes" in dry[0]
    assert sorted(os.listdir(path / "ev-0")) == before, "a dry run changes nothing"
    real = ok(run(path, "retention", "ev")).stdout.splitlines()
    assert [line.replace("would delete", "deleted") for line in dry[:-1]] == real[:-1]
    assert real[-1].startswith("Deleted ") and real[-1].split()[1] == dry[-1].split()[2]
    with LogManager([str(path)], read_only=True) as store:
        log = store.get_log("ev", 0)
        assert log.log_start_offset > 0 and log.size_bytes >= 3000
        assert not [name for name in os.listdir(path / "ev-0") if name.endswith(".deleted")]
    assert ok(run(path, "retention")).stdout.startswith("Deleted 0 segments")


def test_retention_of_an_unknown_topic_is_one_line(tmp_path):
    path = tmp_path / "data"
    make_store(path)
    result = run(path, "retention", "nope")
    assert result.exit_code == 1 and result.stderr.startswith("Error: ") and "nope" in result.stderr


def test_status_text_and_json(tmp_path):
    path = tmp_path / "data"
    make_store(path, retention_bytes=-1)
    text = ok(run(path, "status")).stdout
    assert "online, 1 partitions" in text and "last shutdown clean" in text and "ev-0: recovery point 200" in text
    data = json.loads(ok(run(path, "status", "--json")).stdout)
    (entry,) = data["dirs"]
    assert entry["online"] and entry["clean_shutdown"] and entry["partitions"] == 1
    assert entry["logs"] == [{"topic": "ev", "partition": 0, "recovery_point": 200, "log_end_offset": 200,
                             "damaged": None}]
    described = json.loads(ok(run(path, "topics", "describe", "ev")).stdout)
    assert described["partitions"][0]["recovery_point"] == 200


def test_append_acks_all_is_fsynced(tmp_path):
    path = tmp_path / "data"
    ok(run(path, "topics", "create", "ev"))
    ok(run(path, "append", "ev", "--acks", "all", "durable"))
    bad = run(path, "append", "ev", "--acks", "2", "x")
    assert bad.exit_code != 0
    with LogManager([str(path)], read_only=True) as store:
        assert [r.value for r in store.read("ev", 0, 0)] == [b"durable"]


def _cli_command() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "logstore")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "logstore.cli"]


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_read_follow_tails_appends_from_another_process(tmp_path):
    path = str(tmp_path / "data")
    with LogManager([path]) as store:
        store.create_topic("ev", 2)
        store.append("ev", [Record(b"a", b"before")], partition=0)
    # Started with SIGINT ignored, as a shell's `&` job is: the follower must still end on it
    follower = subprocess.Popen([*_cli_command(), "--dir", path, "read", "ev", "--follow", "--format", "value"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
                                cwd=str(tmp_path))  # not the repo: its source tree would shadow the install
    try:
        assert follower.stdout.readline() == b"before\n"
        with LogManager([path]) as writer:  # the follower holds no lock: a writer opens beside it
            for partition, value in ((1, b"after-1"), (0, b"after-0")):
                time.sleep(0.2)
                writer.append("ev", [Record(b"k", value)], partition=partition)
                started = time.monotonic()
                assert follower.stdout.readline() == value + b"\n"
                assert time.monotonic() - started < 3.0
        before = _cpu_seconds(follower.pid)
        time.sleep(1.0)  # idle: a follower that polled busily would burn CPU here
        assert _cpu_seconds(follower.pid) - before < 0.15
        follower.send_signal(signal.SIGINT)
        assert follower.wait(10) == 0, follower.stderr.read()
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
