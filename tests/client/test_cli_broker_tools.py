"""Kafka's everyday tools against a broker (an in-process ``logstore serve``): `offsets` answers what
the store's dir answers and what kcat -Q answers, `delete-records` moves the low watermark a real
client sees, `api-versions` prints what the broker offers and what this client speaks, `read
--offset end|-N`, `append -K` read back by kcat -K, `topics` with Kafka's option names, and
`--bootstrap-server` after the subcommand (where Kafka's tools take it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from logstore import Record
from logstore.cli.main import main
from logstore.server.protocol.messages import APIS, SUPPORTED_VERSIONS

BASE_MS = 1_700_000_000_000
KCAT = shutil.which("kcat")
needs_kcat = pytest.mark.skipif(KCAT is None, reason="kcat is not installed")


def cli(*args, input=None):
    return CliRunner().invoke(main, [*map(str, args)], input=input)


def ok(result):
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exc_info)
    return result


def on(server, *args, input=None) -> str:
    """The command with --bootstrap-server after it, as Kafka's tools take it."""
    return ok(cli(*args, "--bootstrap-server", server.bootstrap_servers, input=input)).stdout


def on_dir(server, *args) -> str:
    return ok(cli("--dir", os.path.dirname(server.store.get_log("t", 0).dir_path), *args)).stdout


def _topic(server, name: str, partitions: int, counts: list[int]) -> None:
    server.store.create_topic(name, partitions)
    for partition, count in enumerate(counts):
        if count:
            server.store.append(name, [Record(b"k", b"%s-%d-%d" % (name.encode(), partition, i), (),
                                              BASE_MS + 10 * i) for i in range(count)], partition=partition)


def _kcat_query(server, topic: str, partition: int, timestamp: int) -> int:
    # One partition per run: kcat 1.7 answers -1 for all when one -Q run names several of a topic
    out = subprocess.run([KCAT, "-b", server.bootstrap_servers, "-Q", "-t", f"{topic}:{partition}:{timestamp}"],
                         capture_output=True, text=True, timeout=30, check=True).stdout.split()
    assert out[:3] == [topic, f"[{partition}]", "offset"], out
    return int(out[3])


def test_offsets_over_the_broker_answer_what_the_store_answers(server):
    _topic(server, "off", 3, [10, 4, 0])
    for time_arg in ("latest", "earliest", BASE_MS + 25, BASE_MS + 95, "2023-11-14T22:13:20.030Z"):
        broker = on(server, "offsets", "off", "--time", time_arg)
        assert broker == on_dir(server, "offsets", "off", "--time", time_arg), time_arg
        assert json.loads(on(server, "offsets", "--topic", "off", "--time", time_arg, "--format", "json")) == \
            json.loads(on_dir(server, "offsets", "off", "--time", time_arg, "--format", "json"))
    assert on(server, "offsets", "off") == "off:0:10\noff:1:4\noff:2:0\n"
    assert on(server, "offsets", "off", "--time", BASE_MS + 25) == "off:0:3\noff:1:3\n"
    assert on(server, "offsets", "off", "--partitions", "1-2", "--time", "earliest") == "off:1:0\noff:2:0\n"
    every = on(server, "offsets").splitlines()
    assert {"off:0:10", "t:0:0", "orders:3:0"} <= set(every)
    result = cli("offsets", "nope", "--bootstrap-server", server.bootstrap_servers)
    assert result.exit_code == 1 and result.stderr.startswith("Error: ") and "nope" in result.stderr


@needs_kcat
def test_offsets_by_time_agree_with_kcat(server):
    _topic(server, "offk", 2, [6, 3])
    for timestamp in (-2, -1, BASE_MS, BASE_MS + 15, BASE_MS + 50, BASE_MS + 1000):
        ours = json.loads(on(server, "offsets", "offk", "--time", timestamp, "--format", "json"))
        for row in ours:
            kcat = _kcat_query(server, "offk", row["partition"], timestamp)
            assert (row["offset"] if row["offset"] is not None else -1) == kcat, (timestamp, row, kcat)


@needs_kcat
def test_delete_records_over_the_broker(server):
    _topic(server, "del", 2, [8, 5])
    assert on(server, "delete-records", "--topic", "del", "-p", "0", "--before", "5") == \
        "partition: del-0\tlow_watermark: 5\n"
    assert server.store.get_log("del", 0).log_start_offset == 5
    assert _kcat_query(server, "del", 0, -2) == 5  # what a real client sees as the earliest offset
    assert on(server, "offsets", "del", "--time", "earliest") == "del:0:5\ndel:1:0\n"
    assert on(server, "read", "del", "-p", "0", "--format", "value").split() == [f"del-0-{i}" for i in range(5, 8)]
    assert on(server, "delete-records", "del", "-p", "1", "--before", "-1") == "partition: del-1\tlow_watermark: 5\n"
    for args, words in ((["del", "-p", "0", "--before", "9"], ["del-0", "OFFSET_OUT_OF_RANGE"]),
                        (["del", "-p", "4", "--before", "0"], ["no partition 4"]),
                        (["nope", "-p", "0", "--before", "0"], ["nope"]),
                        (["__consumer_offsets", "-p", "0", "--before", "0"], ["internal topic"])):
        result = cli("delete-records", *args, "--bootstrap-server", server.bootstrap_servers)
        assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, (args, result.stderr)
        assert all(word in result.stderr for word in words), (args, result.stderr)
    assert server.store.get_log("del", 0).log_start_offset == 5


def test_api_versions_prints_each_api_of_the_broker(server):
    text = on(server, "api-versions").splitlines()
    host, port = server.bootstrap_servers.split(":")
    assert text[0].startswith(f"{host}:{port} (id: ") and text[0].endswith(" rack: null) -> (") and text[-1] == ")"
    for key, (low, high) in SUPPORTED_VERSIONS.items():
        assert f"\t{APIS[key].name}({key}): {low} to {high} [usable: {high}]," in text, APIS[key].name
    assert "\tDescribeGroups(15): 0 to 5 [usable: 5]," in text  # v5: the first flexible version
    unsupported = [key for key in APIS if key not in SUPPORTED_VERSIONS]
    for key in unsupported:
        assert f"\t{APIS[key].name}({key}): UNSUPPORTED," in text
    (broker,) = json.loads(on(server, "api-versions", "--format", "json"))
    rows = {row["api_key"]: row for row in broker["apis"]}
    assert rows[18]["broker"] == list(SUPPORTED_VERSIONS[18]) and rows[18]["usable"] == SUPPORTED_VERSIONS[18][1]
    assert all(rows[key]["broker"] is None and rows[key]["usable"] is None for key in unsupported)
    result = cli("--dir", "x", "api-versions")
    assert result.exit_code == 2 and "--bootstrap-server" in result.stderr


def test_read_from_the_end_over_the_broker(server):
    _topic(server, "tail", 2, [6, 2])
    for offset in ("-3", "-1", "end", "-10"):
        assert on(server, "read", "tail", "--offset", offset) == on_dir(server, "read", "tail", "--offset", offset)
    assert on(server, "read", "tail", "--offset", "-3", "--format", "value").split() == \
        ["tail-0-3", "tail-0-4", "tail-0-5", "tail-1-0", "tail-1-1"]
    assert on(server, "read", "tail", "--offset", "end") == ""


@needs_kcat
def test_append_with_a_key_separator_reads_back_with_kcat(server):
    server.store.create_topic("keyed", 2)
    on(server, "append", "keyed", "-K", ":", input="a:1\nb:2:x\nc:\n")
    out = subprocess.run([KCAT, "-b", server.bootstrap_servers, "-C", "-t", "keyed", "-o", "beginning", "-e", "-q",
                          "-K", "|"], capture_output=True, text=True, timeout=30, check=True).stdout
    assert sorted(out.splitlines()) == ["a|1", "b|2:x", "c|"]


def test_topics_with_kafkas_options_over_the_broker(server):
    assert on(server, "topics", "create", "--topic", "kt", "--partitions", "2", "--replication-factor", "1") == \
        "Created topic kt with 2 partitions.\n"
    assert on(server, "topics", "create", "--topic", "kt", "--if-not-exists") == \
        "Topic kt exists already: nothing created.\n"
    result = cli("topics", "create", "--topic", "kt", "--bootstrap-server", server.bootstrap_servers)
    assert result.exit_code == 1 and "TOPIC_ALREADY_EXISTS" in result.stderr
    on(server, "topics", "alter", "--topic", "kt", "--config", "retention.ms=7000")
    text = on(server, "topics", "describe", "--topic", "kt", "--format", "text").splitlines()
    assert text[0] == "Topic: kt\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: retention.ms=7000"
    leader = json.loads(on(server, "topics", "describe", "kt"))["partitions"][0]["leader"]
    assert isinstance(leader, int) and leader >= 0
    assert text[1:] == [f"\tTopic: kt\tPartition: {p}\tLeader: {leader}\tReplicas: {leader}\tIsr: {leader}"
                        for p in range(2)]
    for command in (["alter", "--config", "retention.ms=1"], ["describe"], ["delete"]):
        assert on(server, "topics", *command, "--topic", "gone", "--if-exists") == ""
    assert on(server, "topics", "delete", "--topic", "kt", "--if-exists") == "Deleted topic kt.\n"
    assert "kt" not in on(server, "topics", "list").split()
