"""The command line against a broker (``logstore --bootstrap-server``) and ``logstore mirror``: the
same commands print the same output against ``logstore serve`` as against its data dir; they work
against Tansu; ``read --follow`` tails a broker, and ``read --group --follow`` rides restarts of it; a mirror store -> server -> store gives identical
records, partition counts and overrides, and an interrupted mirror resumes without copying a
record twice."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.bench.serve import BrokerProcess
from logstore.cli.main import main
from logstore.client import Consumer
from logstore.client import mirror as mirror_module
from logstore.client.mirror import StoreEnd, mirror, open_end


def cli(*args, input=None):
    return CliRunner().invoke(main, [*map(str, args)], input=input)


def ok(result):
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def _on(server, *args, input=None):
    return ok(cli("--bootstrap-server", server.bootstrap_servers, *args, input=input)).output


def _dir_of(server) -> str:
    return os.path.dirname(server.store.get_log("t", 0).dir_path)


def _records(store: LogManager, topic: str) -> dict[int, list]:
    return {p: [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp_ms)
                for r in store.get_log(topic, p).iter_records()] for p in range(store.partitions(topic))}


def test_topics_append_read_and_groups_print_what_they_print_on_the_store(server):
    assert _on(server, "topics", "create", "cli-t", "--partitions", "2", "--config", "retention.ms=123456") == \
        "Created topic cli-t with 2 partitions.\n"
    assert "cli-t" in _on(server, "topics", "list").split()
    lines = "".join(json.dumps({"key": f"k{i}", "value": f"v{i}", "headers": {"n": str(i)},
                                "timestamp": 1_700_000_000_000 + i}) + "\n" for i in range(30))
    appended = [json.loads(line) for line in _on(server, "append", "cli-t", "--input-format", "jsonl",
                                                 "--batch-size", "7", input=lines).splitlines()]
    assert sum(entry["record_count"] for entry in appended) == 30
    described = json.loads(_on(server, "topics", "describe", "cli-t"))
    assert described["overrides"] == {"retention.ms": "123456"} and described["partition_count"] == 2
    assert sum(p["log_end_offset"] for p in described["partitions"]) == 30
    data_dir = _dir_of(server)
    for args in (["read", "cli-t"], ["read", "cli-t", "-p", "1", "--offset", "3"], ["read", "cli-t", "--max-records", "5"],
                 ["read", "cli-t", "--from-timestamp", "1700000000020", "--format", "value"]):
        assert _on(server, *args) == ok(cli("--dir", data_dir, *args)).output, args
    first = _on(server, "read", "cli-t", "--group", "cli-g", "--max-records", "10")
    rest = _on(server, "read", "cli-t", "--group", "cli-g")
    assert len(first.splitlines()) == 10 and len(rest.splitlines()) == 20
    assert sorted(first.splitlines() + rest.splitlines()) == sorted(_on(server, "read", "cli-t").splitlines())
    assert _on(server, "read", "cli-t", "--group", "cli-g") == ""  # all committed
    listed = _on(server, "groups", "list")
    assert "cli-g" in listed and "Empty" in listed
    for args in (["groups", "list"], ["groups", "describe", "cli-g"]):
        # DescribeGroups carries no generation: a broker's group shows generation -1 (and the reads
        # above were members of cli-g, so the store's snapshot has a generation of its own).
        assert re.sub(r"generation -?\d+", "generation N", _on(server, *args)) == \
            re.sub(r"generation -?\d+", "generation N", ok(cli("--dir", data_dir, *args)).output), args
    plan = _on(server, "groups", "reset-offsets", "cli-g", "--topic", "cli-t:1", "--to-offset", "2", "--execute")
    assert "Committed 1 offset for group cli-g." in plan
    assert [json.loads(line)["offset"] for line in _on(server, "read", "cli-t", "--group", "cli-g").splitlines()] \
        == list(range(2, _end(server, "cli-t", 1)))
    with Consumer(bootstrap_servers=server.bootstrap_servers, group_id="cli-live", heartbeat_interval_ms=100) as member:
        member.subscribe(["cli-t"])
        member.poll(200)
        live = _on(server, "groups", "describe", "cli-live")
        assert "1 member" in live and "__consumer_offsets" not in live  # live members: no snapshot note
    assert _on(server, "groups", "delete", "cli-g") == "Deleted group cli-g.\n"
    assert json.loads(_on(server, "topics", "alter", "cli-t", "--delete-config", "retention.ms"))["overrides"] == {}
    assert _on(server, "topics", "delete", "cli-t") == "Deleted topic cli-t.\n"
    assert "cli-t" not in _on(server, "topics", "list").split()


def _end(server, topic: str, partition: int) -> int:
    return server.store.get_log(topic, partition).log_end_offset


def test_errors_against_a_broker_are_one_line(server):
    result = cli("--bootstrap-server", server.bootstrap_servers, "read", "no-such-topic")
    assert result.exit_code == 1 and "no-such-topic" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = cli("--bootstrap-server", "127.0.0.1:1", "topics", "list")
    assert result.exit_code == 1 and "127.0.0.1:1" in result.output and len(result.output.strip().splitlines()) == 1
    result = cli("--bootstrap-server", server.bootstrap_servers, "--dir", "/tmp/x", "topics", "list")
    assert result.exit_code == 2 and "not both" in result.output
    server.store.create_topic("two", 2)
    result = cli("--bootstrap-server", server.bootstrap_servers, "append", "two", "--input-format", "jsonl",
                 input='{"value": "a", "partition": 5}\n')
    assert result.exit_code == 1 and "line 1" in result.output and "partition 5" in result.output
    assert _end(server, "two", 0) == _end(server, "two", 1) == 0  # nothing sent


def test_read_follow_tails_a_broker_until_interrupted(server, tmp_path):
    server.store.create_topic("tail", 1)
    server.store.append("tail", [Record(None, b"before")])
    out = open(tmp_path / "out", "w+b")
    command = [os.path.join(os.path.dirname(sys.executable), "logstore")]
    if not os.path.exists(command[0]):
        command = [sys.executable, "-m", "logstore.cli"]
    # Started with SIGINT ignored, as a shell's `&` job is: it must still end on SIGINT
    process = subprocess.Popen([*command, "--bootstrap-server", server.bootstrap_servers, "read", "tail", "--follow",
                                "--format", "value"], stdout=out, stderr=subprocess.PIPE,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 20
        while b"before" not in (tmp_path / "out").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        server.store.append("tail", [Record(None, b"after")])
        while b"after" not in (tmp_path / "out").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "out").read_bytes().split() == [b"before", b"after"]
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=20)
    assert process.returncode == 0 and b"Traceback" not in err


def _serve_on(data_dir, port: int) -> subprocess.Popen:
    """``logstore serve`` on 127.0.0.1:``port`` (its own process, so it can be stopped and started
    again on the same port and dir), once it says it listens."""
    process = subprocess.Popen([sys.executable, "-P", "-m", "logstore.cli", "--dir", str(data_dir), "serve",
                                "--listen", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    line = process.stdout.readline()
    if "listening on" not in line:
        process.kill()
        process.wait()
        raise AssertionError(f"logstore serve did not start: {line!r}")
    return process


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    process.stdout.close()


def test_read_group_follow_and_a_group_member_ride_three_broker_restarts(tmp_path):
    """`read --group --follow` and a subscribed consumer go on through three restarts of the broker
    (stopped, then started again on the same port and dir), and each prints every record once: the
    reader once exited 1 at its first commit after a restart (the coordinator's connection was
    broken), and a member that rejoined went back to the group's commits."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    bootstrap = f"127.0.0.1:{port}"
    data = tmp_path / "data"
    broker = _serve_on(data, port)
    reader = None
    member = Consumer(bootstrap_servers=bootstrap, group_id="member", auto_offset_reset="earliest",
                      heartbeat_interval_ms=200, session_timeout_ms=10_000)
    sent: list[str] = []

    def append(count: int) -> None:
        values = [f"v{len(sent) + i}" for i in range(count)]
        sent.extend(values)
        lines = "".join(json.dumps({"value": value}) + "\n" for value in values)
        ok(cli("--bootstrap-server", bootstrap, "append", "rides", "--input-format", "jsonl", input=lines))

    def printed() -> list[str]:
        return (tmp_path / "out").read_text().split()

    def wait_for_all(got: list[str]) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (len(printed()) < len(sent) or len(got) < len(sent)):
            got.extend(record.value.decode() for record in member.poll(200))
            assert reader.poll() is None, (reader.returncode, reader.stderr.read())
        assert sorted(printed()) == sorted(sent), "the reader printed a record twice or missed one"
        assert sorted(got) == sorted(sent), "the member returned a record twice or missed one"

    try:
        ok(cli("--bootstrap-server", bootstrap, "topics", "create", "rides", "--partitions", "2"))
        append(10)
        with open(tmp_path / "out", "w") as out:
            reader = subprocess.Popen([sys.executable, "-P", "-m", "logstore.cli", "--bootstrap-server", bootstrap,
                                       "read", "rides", "--group", "G", "--follow", "--format", "value"],
                                      stdout=out, stderr=subprocess.PIPE, text=True)
        member.subscribe(["rides"])
        got: list[str] = []
        wait_for_all(got)
        for _ in range(3):
            _stop(broker)
            broker = _serve_on(data, port)
            append(10)
            wait_for_all(got)
    finally:
        if reader is not None:
            reader.send_signal(signal.SIGINT)
            try:
                _, err = reader.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                reader.kill()
                _, err = reader.communicate()
        member.close()
    try:
        assert reader.returncode == 0 and "Traceback" not in err and "Error" not in err, err
        assert len(sent) == 40
        # What the reader printed is what the group committed: nothing is left to read.
        assert ok(cli("--bootstrap-server", bootstrap, "read", "rides", "--group", "G")).output == ""
    finally:
        _stop(broker)


def test_read_group_followers_split_the_partitions_and_one_takes_over_when_the_other_leaves(server, tmp_path):
    """Two `read --group G --follow` processes are members of G, as two kafka-console-consumers are:
    they split the partitions, each record is printed by one of them, and when one leaves the other
    is given its partitions and goes on from what it committed."""
    server.store.create_topic("split", 4)
    sent: list[str] = []

    def append(round_: int) -> None:
        for partition in range(4):
            values = [f"r{round_}-p{partition}-{i}" for i in range(10)]
            server.store.append("split", [Record(None, value.encode()) for value in values], partition=partition)
            sent.extend(values)

    def reader(name: str) -> subprocess.Popen:
        out = open(tmp_path / name, "w")
        return subprocess.Popen([sys.executable, "-P", "-m", "logstore.cli", "--bootstrap-server",
                                 server.bootstrap_servers, "read", "split", "--group", "G", "--follow",
                                 "--format", "value"], stdout=out, stderr=subprocess.PIPE, text=True)

    def printed(name: str) -> list[str]:
        return (tmp_path / name).read_text().split()

    def wait_until_all_printed() -> None:
        deadline = time.monotonic() + 60
        while len(printed("a")) + len(printed("b")) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.1)

    readers = {"a": reader("a"), "b": reader("b")}
    try:
        time.sleep(1.0)  # both join within the group's initial rebalance delay
        append(0)
        wait_until_all_printed()
        first_a, first_b = printed("a"), printed("b")
        assert sorted(first_a + first_b) == sorted(sent), "a record was printed twice, or by neither"
        assert first_a and first_b, "one reader printed everything: the partitions were not split"
        partitions_of = lambda values: {value.split("-")[1] for value in values}  # noqa: E731
        assert not partitions_of(first_a) & partitions_of(first_b)
        readers["a"].send_signal(signal.SIGINT)  # a leaves the group: b is given its partitions
        _, err = readers["a"].communicate(timeout=30)
        assert readers["a"].returncode == 0 and "Traceback" not in err, err
        append(1)
        wait_until_all_printed()
        assert sorted(printed("a") + printed("b")) == sorted(sent)
        assert partitions_of(printed("b")) == {"p0", "p1", "p2", "p3"}
    finally:
        for process in readers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.communicate()
    assert readers["b"].returncode == 0
    # What was printed is what the group committed: a reader of G now finds nothing to read.
    assert _on(server, "read", "split", "--group", "G") == ""


def test_a_follow_commit_the_coordinator_cannot_take_is_kept_then_reported(server, monkeypatch):
    """While following a partition, a commit that fails because the coordinator cannot be reached does not end
    the reading (it is made at the next turn); one still not made when the reading ends is reported,
    naming the offsets, instead of being lost quietly. Without following, the first such commit ends
    the reading with the same report."""
    from logstore.client.admin import BrokerGroupAdmin
    from logstore.client.errors import NetworkError
    from logstore.client.tools import read_chunks
    server.store.create_topic("pending", 1)
    server.store.append("pending", [Record(None, b"a"), Record(None, b"b")])
    made = []

    def unreachable(self, group_id, offsets, **_):
        made.append(dict(offsets))
        raise NetworkError("the coordinator is away")

    monkeypatch.setattr(BrokerGroupAdmin, "commit", unreachable)
    chunks = read_chunks(server.bootstrap_servers, "pending", partition=0, group="away", follow=True)
    partition, records = next(chunks)
    assert [record.value for record in records] == [b"a", b"b"]
    server.store.append("pending", [Record(None, b"c")])
    partition, records = next(chunks)  # the reading went on
    assert [record.value for record in records] == [b"c"]
    assert made and all(offsets == {("pending", 0): 2} for offsets in made)
    # Closed while the caller holds "c" (not known to be printed): what is reported is the offset
    # after "b", the last chunk the caller came back from.
    with pytest.raises(NetworkError, match=r"\(pending-0: 2\) could not be committed"):
        chunks.close()
    # Without --follow the reading ends at the first commit that cannot be made, saying the same.
    made.clear()
    chunks = read_chunks(server.bootstrap_servers, "pending", partition=0, group="away")
    partition, records = next(chunks)
    assert [record.value for record in records] == [b"a", b"b", b"c"]
    with pytest.raises(NetworkError, match=r"\(pending-0: 3\) could not be committed, so they will be read again: "
                                           r"the coordinator is away"):
        next(chunks)
    assert made == [{("pending", 0): 3}]  # tried once: the end of the reading does not try again


def test_a_broker_gone_before_a_commit_holds_neither_the_following_nor_its_end(tmp_path, caplog):
    """The broker stops after a member handed out a chunk and before it committed past it: while
    following, the commit is tried once a turn (one warning for the outage, not one a turn), so the
    turns go on instead of waiting default.api.timeout.ms each; when the reading ends (here at the
    fourth turn, as Ctrl-C would end it) the last commit waits a few seconds, then the offsets are
    reported as not committed. Before, each commit waited a minute, and Ctrl-C two."""
    from logstore.client.errors import NetworkError
    from logstore.client.tools import read_chunks
    from logstore.server import KafkaServer
    turns = []

    def fourth_turn() -> bool:
        turns.append(time.monotonic())
        return len(turns) > 4

    with LogManager([str(tmp_path / "d")]) as store:
        with KafkaServer(store, listen="127.0.0.1:0") as running:
            store.create_topic("gone", 1)
            store.append("gone", [Record(None, b"a")])
            chunks = read_chunks(running.bootstrap_servers, "gone", group="away", follow=True, stop_when=fourth_turn)
            partition, records = next(chunks)
            assert (partition, [record.value for record in records]) == (0, [b"a"])
        started = time.monotonic()
        with caplog.at_level(logging.INFO, logger="logstore.client.tools"), \
                pytest.raises(NetworkError, match=r"group away: the offsets after the records printed \(gone-0: 1\) "
                                                  r"could not be committed, so they will be read again"):
            next(chunks)
        ended_s = time.monotonic() - started
    later = [r for r in caplog.records if r.name == "logstore.client.tools" and "committing {0: 1} later" in r.message]
    assert len(later) >= 4  # a try each turn ...
    assert [r.levelno for r in later] == [logging.WARNING] + [logging.INFO] * (len(later) - 1)  # ... said once
    assert ended_s < 20, f"4 turns and the last commit took {ended_s:.1f} s"


def _source_store(path: str) -> None:
    with LogManager([path]) as store:
        store.create_topic("events", 3, {"retention.ms": "999999999"})
        store.create_topic("state", 2, {"cleanup.policy": "compact"})
        for partition in range(3):
            store.append("events", [Record(b"k%d" % i, b"e%d-%d" % (partition, i), (("h", b"%d" % i), ("z", None)),
                                           1_700_000_000_000 + i) for i in range(400)], partition=partition)
        for partition in range(2):
            store.append("state", [Record(b"s%d" % (i % 9), b"v%d" % i if i % 5 else None, (), 1_600_000_000_000 + i)
                                   for i in range(120)], partition=partition)


def test_a_mirror_store_to_server_to_store_gives_identical_records(server, tmp_path):
    source, back = str(tmp_path / "source"), str(tmp_path / "back")
    _source_store(source)
    assert "events: copied 1200 records" in ok(cli("mirror", "--from", source, "--to", server.bootstrap_servers,
                                                   "events", "state")).output
    assert "events: copied 0 records" in ok(cli("mirror", "--from", source, "--to", server.bootstrap_servers,
                                                "events", "state")).output  # nothing new: nothing copied
    ok(cli("mirror", "--from", server.bootstrap_servers, "--to", back, "events", "state"))
    with LogManager([source], read_only=True) as original, LogManager([back], read_only=True) as copy:
        for topic in ("events", "state"):
            assert _records(copy, topic) == _records(original, topic), topic
            assert copy.topic_overrides(topic) == original.topic_overrides(topic)
    assert _records(server.store, "events") == _records(LogManager([source], read_only=True), "events")


def test_an_interrupted_mirror_resumes_and_copies_each_record_once(tmp_path, monkeypatch):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    _source_store(source)
    monkeypatch.setattr(mirror_module, "_CHUNK_RECORDS", 50)
    writes = []
    original_write = StoreEnd.write

    def write_then_die(self, topic, partition, records):
        original_write(self, topic, partition, records)
        writes.append(len(records))
        if len(writes) == 5:  # written, not yet committed: the worst moment
            raise KeyboardInterrupt

    monkeypatch.setattr(StoreEnd, "write", write_then_die)
    src, dst = open_end(source, writable=False), open_end(target, writable=True)
    with pytest.raises(KeyboardInterrupt):
        mirror(src, dst, ["events"])
    dst.close()
    monkeypatch.setattr(StoreEnd, "write", original_write)
    dst = open_end(target, writable=True)
    progress = []
    copied = mirror(src, dst, ["events"], progress=lambda done, total: progress.append((done, total)))
    src.close()
    dst.close()
    assert copied["events"] == 1200 - 5 * 50
    assert progress[-1][0] == progress[-1][1]
    with LogManager([source], read_only=True) as original, LogManager([target], read_only=True) as copy:
        assert _records(copy, "events") == _records(original, "events")


def test_mirror_to_tansu_and_back(tmp_path):
    source, back = str(tmp_path / "source"), str(tmp_path / "back")
    _source_store(source)
    broker = BrokerProcess("tansu", str(tmp_path))
    try:
        ok(cli("mirror", "--from", source, "--to", broker.address, "events"))
        ok(cli("mirror", "--from", broker.address, "--to", back, "events"))
        # The other commands against Tansu print what they print on the store they came from.
        on_tansu = ("--bootstrap-server", broker.address)
        assert "events" in ok(cli(*on_tansu, "topics", "list")).output.split()
        for args in (["read", "events", "-p", "2", "--max-records", "7"], ["read", "events", "-p", "1", "--offset", "390"]):
            assert ok(cli(*on_tansu, *args)).output == ok(cli("--dir", source, *args)).output
        ok(cli(*on_tansu, "topics", "create", "notes", "--partitions", "2"))
        ok(cli(*on_tansu, "append", "notes", "hello", "--key", "k", "--partition", "1"))
        read = ok(cli(*on_tansu, "read", "notes", "--group", "readers")).output
        assert [(line["partition"], line["value"]) for line in map(json.loads, read.splitlines())] == [(1, "hello")]
        assert ok(cli(*on_tansu, "read", "notes", "--group", "readers")).output == ""  # committed
        described = ok(cli(*on_tansu, "groups", "describe", "readers")).output.splitlines()
        assert described[-1].split() == ["notes", "1", "1", "1", "0", "-"]
    finally:
        broker.stop()
    with LogManager([source], read_only=True) as original, LogManager([back], read_only=True) as copy:
        assert _records(copy, "events") == _records(original, "events")
