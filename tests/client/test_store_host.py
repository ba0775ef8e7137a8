"""A store shared by the local processes that read it as one consumer group: two `logstore --dir D
read T --group G --follow` processes split the partitions as kafka-console-consumer's do (the first
serves the store to the other on a private Unix socket), the commands that write go through that
host while it runs, and when the host ends another reader takes the store over. Also: the server's
Unix socket listener and our client on it, and the host file's staleness rules."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.cli.main import main
from logstore.client import Consumer, Producer
from logstore.client.store_host import HOST_FILE, StoreHost, hosted_address, read_host_file
from logstore.server import KafkaServer

CLI = [sys.executable, "-P", "-m", "logstore.cli"]
FAST = ["--set", "group.initial.rebalance.delay.ms=0"]


def test_a_unix_socket_listener_is_owner_only_serves_our_client_and_is_removed_on_stop(tmp_path):
    socket_dir = tmp_path / "sock"
    socket_dir.mkdir(mode=0o700)
    path = str(socket_dir / "kafka.sock")
    with LogManager([str(tmp_path / "store")]) as store, KafkaServer(store, listen=f"PLAINTEXT://{path}") as server:
        store.create_topic("t", 2)
        assert server.bootstrap_servers == path
        assert stat.S_ISSOCK(os.stat(path).st_mode) and stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with Producer({}, bootstrap_servers=path) as producer:
            futures = [producer.send("t", f"v{i}".encode(), key=f"k{i}".encode()) for i in range(20)]
            producer.flush(30)
        assert sorted(future.result(0).offset for future in futures if future.result(0).partition == 0) == \
            list(range(sum(1 for future in futures if future.result(0).partition == 0)))
        with Consumer({}, bootstrap_servers=path, group_id="g", auto_offset_reset="earliest") as consumer:
            consumer.subscribe(["t"])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 20 and time.monotonic() < deadline:
                got += consumer.poll(200)
        assert sorted(record.value for record in got) == sorted(f"v{i}".encode() for i in range(20))
    assert not os.path.exists(path)


def test_a_unix_socket_listener_is_plaintext_only(tmp_path):
    from logstore.errors import InvalidConfigError
    with pytest.raises(InvalidConfigError, match="Unix socket is PLAINTEXT"):
        KafkaServer([str(tmp_path / "store")], listen=f"SASL_SSL://{tmp_path}/kafka.sock")


def test_a_host_file_names_a_live_host_only(tmp_path):
    dirs = [str(tmp_path / "store")]
    with LogManager(dirs) as store:
        assert hosted_address(dirs) is None
        with StoreHost(store) as host:
            content = read_host_file(dirs)
            assert content == {"pid": os.getpid(), "address": host.address}
            assert stat.S_IMODE(os.stat(os.path.join(dirs[0], HOST_FILE)).st_mode) == 0o600
            assert stat.S_IMODE(os.stat(os.path.dirname(host.address)).st_mode) == 0o700
            assert hosted_address(dirs) == host.address
            address = host.address
        assert hosted_address(dirs) is None and not os.path.exists(os.path.join(dirs[0], HOST_FILE))
        assert not os.path.exists(os.path.dirname(address))
    # A host killed with SIGKILL leaves its file: a dead pid (or a missing socket) makes it stale.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with open(os.path.join(dirs[0], HOST_FILE), "w") as file:
        json.dump({"pid": dead.pid, "address": address}, file)
    assert read_host_file(dirs) is not None and hosted_address(dirs) is None
    with open(os.path.join(dirs[0], HOST_FILE), "w") as file:
        json.dump({"pid": os.getpid(), "address": address}, file)
    assert hosted_address(dirs) is None  # alive, but no socket there


def _store_with(tmp_path, *, partitions: int, records: int) -> str:
    """A store whose topic ``split`` holds ``records`` values ``p<partition>-<i>`` per partition."""
    store_dir = str(tmp_path / "store")
    with LogManager([store_dir]) as store:
        store.create_topic("split", partitions)
        for partition in range(partitions):
            store.append("split", [Record(None, f"p{partition}-{i}".encode()) for i in range(records)],
                         partition=partition)
    return store_dir


def _reader(tmp_path, name: str, *extra: str) -> subprocess.Popen:
    out = open(tmp_path / name, "w")
    return subprocess.Popen([*CLI, "--dir", str(tmp_path / "store"), *FAST, "read", "split", "--group", "G",
                             "--format", "value", *extra], stdout=out, stderr=subprocess.PIPE, text=True)


def _printed(tmp_path, name: str) -> list[str]:
    return (tmp_path / name).read_text().split()


def _interrupt(process: subprocess.Popen) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
    return err


def _wait(condition, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not reached in {timeout_s} s: {what}")
        time.sleep(0.1)


def test_read_group_followers_on_a_store_split_it_and_one_takes_over_hosting(tmp_path):
    store_dir = str(tmp_path / "store")
    with LogManager([store_dir]) as store:
        store.create_topic("split", 4)
    sent: list[str] = []

    def append(round_: int) -> None:
        values = [f"r{round_}-p{partition}-{i}" for partition in range(4) for i in range(10)]
        # Through the host: the store is locked by the first reader, which serves it.
        for partition in range(4):
            chunk = [value for value in values if value.split("-")[1] == f"p{partition}"]
            result = subprocess.run([*CLI, "--dir", store_dir, "append", "split", "--partition", str(partition)],
                                    input="".join(value + "\n" for value in chunk), capture_output=True, text=True,
                                    timeout=60)
            assert result.returncode == 0 and result.stderr == "", result.stderr
        sent.extend(values)

    readers = {"a": _reader(tmp_path, "a", "--follow")}
    try:
        _wait(lambda: hosted_address([store_dir]) is not None, "the first reader hosts the store")
        host_pid = read_host_file([store_dir])["pid"]
        assert host_pid == readers["a"].pid
        readers["b"] = _reader(tmp_path, "b", "--follow")

        def members() -> int:
            described = subprocess.run([*CLI, "--dir", store_dir, "groups", "describe", "G", "--json"],
                                       capture_output=True, text=True, timeout=60)
            assert described.returncode == 0, described.stderr
            return sum(1 for member in json.loads(described.stdout)["members"] if member["partitions"])

        _wait(lambda: members() == 2, "both readers hold partitions")
        append(0)
        _wait(lambda: len(_printed(tmp_path, "a")) + len(_printed(tmp_path, "b")) >= len(sent), "all printed")
        first_a, first_b = _printed(tmp_path, "a"), _printed(tmp_path, "b")
        assert sorted(first_a + first_b) == sorted(sent), "a record was printed twice, or by neither"
        partitions_of = lambda values: {value.split("-")[1] for value in values}  # noqa: E731
        assert first_a and first_b and not partitions_of(first_a) & partitions_of(first_b)

        err = _interrupt(readers["a"])  # the host leaves: b takes the store over and all partitions
        assert readers["a"].returncode == 0 and err == "", err
        _wait(lambda: (read_host_file([store_dir]) or {}).get("pid") == readers["b"].pid, "b hosts the store")
        append(1)
        _wait(lambda: len(_printed(tmp_path, "a")) + len(_printed(tmp_path, "b")) >= len(sent), "all printed")
        assert sorted(_printed(tmp_path, "a") + _printed(tmp_path, "b")) == sorted(sent)
        assert partitions_of(_printed(tmp_path, "b")) == {"p0", "p1", "p2", "p3"}
    finally:
        errors = {name: _interrupt(process) for name, process in readers.items()}
    assert readers["b"].returncode == 0 and errors["b"] == "", errors["b"]
    assert not os.path.exists(os.path.join(store_dir, HOST_FILE))
    # What was printed is what the group committed: a reader of G now finds nothing left.
    left = subprocess.run([*CLI, "--dir", store_dir, "read", "split", "--group", "G"], capture_output=True,
                          text=True, timeout=60)
    assert left.returncode == 0 and left.stdout == "", left.stderr


def test_read_group_without_follow_reads_what_is_there_once_and_commits(tmp_path):
    store_dir = _store_with(tmp_path, partitions=3, records=5)
    result = subprocess.run([*CLI, "--dir", store_dir, *FAST, "read", "split", "--group", "G", "--format", "value"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert sorted(result.stdout.split()) == sorted(f"p{p}-{i}" for p in range(3) for i in range(5))
    with LogManager([store_dir]) as store:
        store.append("split", [Record(None, b"p1-late")], partition=1)
    again = subprocess.run([*CLI, "--dir", store_dir, *FAST, "read", "split", "--group", "G", "--format", "value"],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout.split() == ["p1-late"], again.stderr
    assert not os.path.exists(os.path.join(store_dir, HOST_FILE))


def test_without_the_server_extra_a_group_reader_reads_alone_and_cannot_follow(tmp_path, monkeypatch):
    import logstore.server.extra as extra
    monkeypatch.setattr(extra, "missing_extra", lambda: ["cramjam"])
    store_dir = str(tmp_path / "store")
    with LogManager([store_dir]) as store:
        store.create_topic("t", 2)
        store.append("t", [Record(None, b"one")], partition=0)
    runner = CliRunner()
    follow = runner.invoke(main, ["--dir", store_dir, "read", "t", "--group", "G", "--follow"])
    assert follow.exit_code == 1 and "server extra" in follow.output and "pip install" in follow.output
    assert len(follow.output.strip().splitlines()) == 1
    once = runner.invoke(main, ["--dir", store_dir, "read", "t", "--group", "G", "--format", "value"])
    assert once.exit_code == 0 and once.output.split() == ["one"], once.output


def test_commands_go_through_the_host_and_name_no_topic_into_being(tmp_path):
    """While a process hosts the store (its lock held), the CLI's writing commands go through it;
    an unknown topic is refused as on a store (the host does not auto-create topics)."""
    store_dir = str(tmp_path / "store")

    def cli(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([*CLI, "--dir", store_dir, *args], input=input, capture_output=True, text=True,
                              timeout=60)

    with LogManager([store_dir]) as store, StoreHost(store):
        store.create_topic("t", 2)
        appended = cli("append", "t", "--partition", "1", input="one\ntwo\n")
        assert appended.returncode == 0 and appended.stderr == "", appended.stderr
        assert [record.value for record in store.get_log("t", 1).read(0, 1 << 20)] == [b"one", b"two"]
        for args in (["append", "nope", "x"], ["read", "nope", "--group", "g"]):
            refused = cli(*args)
            assert refused.returncode == 1 and "nope" in refused.stderr, (args, refused.stderr)
            assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
        created = cli("topics", "create", "u", "--partitions", "3")
        assert created.returncode == 0, created.stderr
        assert store.partitions("u") == 3 and "nope" not in store.topics()
        # The file reader needs no host: it opens the files read-only.
        assert cli("read", "t", "--format", "value").stdout.split() == ["one", "two"]


def test_a_host_killed_with_sigkill_is_succeeded_by_the_next_reader(tmp_path):
    store_dir = _store_with(tmp_path, partitions=2, records=3)
    killed = _reader(tmp_path, "a", "--follow")
    try:
        _wait(lambda: hosted_address([store_dir]) is not None, "the first reader hosts the store")
        # Killed once it reads (not while it creates __consumer_offsets, which the next open would
        # roll back, saying so on stderr).
        _wait(lambda: len(_printed(tmp_path, "a")) == 6, "the first reader printed the records")
    finally:
        killed.kill()
        killed.communicate(timeout=30)
    assert read_host_file([store_dir])["pid"] == killed.pid  # left behind, naming a dead process
    assert hosted_address([store_dir]) is None
    # Another group, so that the killed reader's membership (kept until its session times out) is
    # not waited for: the store itself is taken over at once.
    result = subprocess.run([*CLI, "--dir", store_dir, *FAST, "read", "split", "--group", "H", "--format", "value"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert sorted(result.stdout.split()) == sorted(f"p{p}-{i}" for p in range(2) for i in range(3))
    assert read_host_file([store_dir]) is None


def test_the_groups_guides_two_terminals_run_as_written(tmp_path):
    """docs/guide/groups.md's readers of one group on a store: its two followers (as two processes),
    the append through the host, and the describe that shows both members."""
    from docs_snippets import block, environment
    lines = [line for line in block("docs/guide/groups.md", "host-readers").splitlines() if line.strip()]
    first, second, append, describe = (line.split("  #")[0].strip() for line in lines)
    RECORD = '"value": "{\\"n\\": 1}"'  # the appended value, as read prints it (JSON lines)  # noqa: N806
    with LogManager([str(tmp_path / "data")]) as store:
        store.create_topic("orders", 2)
    env = environment()
    run = lambda command: subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True,  # noqa: E731
                                         text=True, timeout=60)
    outputs = [tmp_path / "terminal-1.txt", tmp_path / "terminal-2.txt"]
    printed = lambda: "".join(output.read_text() for output in outputs)  # noqa: E731
    readers = [subprocess.Popen(["bash", "-c", f"exec {first}"], cwd=tmp_path, env=env,
                                stdout=outputs[0].open("w"), stderr=subprocess.PIPE, text=True)]
    try:
        _wait(lambda: hosted_address([str(tmp_path / "data")]) is not None, "the first reader hosts the store")
        readers.append(subprocess.Popen(["bash", "-c", f"exec {second}"], cwd=tmp_path, env=env,
                                        stdout=outputs[1].open("w"), stderr=subprocess.PIPE, text=True))
        _wait(lambda: run(describe).stdout.startswith("Group billing: state Stable")
              and " 2 members" in run(describe).stdout.splitlines()[0], "both readers are members")
        appended = run(append)
        assert appended.returncode == 0, appended.stderr
        _wait(lambda: RECORD in printed(), "one of the readers printed the record")
    finally:
        errors = [_interrupt(reader) for reader in readers]
    assert [reader.returncode for reader in readers] == [0, 0], errors
    assert printed().count(RECORD) == 1, printed()
