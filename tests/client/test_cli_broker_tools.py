"""Kafka's everyday tools against a broker (an in-process ``logstore serve``): `offsets` answers what
the store's dir answers and what kcat -Q answers, `delete-records` moves the low watermark a real
client sees, `api-versions` prints what the broker offers and what this client speaks, `read
--offset end|-N`, `append -K` read back by kcat -K, `topics` with Kafka's option names, and
`--bootstrap-server` after the subcommand (where Kafka's tools take it)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from click.testing import CliRunner

from logstore import Record
from logstore.client.admin import BrokerGroupAdmin
from logstore.cli.main import main
from logstore.server.protocol.messages import APIS, SUPPORTED_VERSIONS

import external_tools

BASE_MS = 1_700_000_000_000
needs_kcat = pytest.mark.needs_tools("kcat")  # skips where kcat is missing (tests/external_tools.py)


def _kcat() -> str:
    return external_tools.require("kcat")


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
    out = subprocess.run([_kcat(), "-b", server.bootstrap_servers, "-Q", "-t", f"{topic}:{partition}:{timestamp}"],
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


def test_offsets_max_timestamp_and_topic_patterns_over_the_broker(server):
    """--time max-timestamp (-3, KIP-734) and --topic as a regular expression answer over the broker
    what they answer on the store's dir; json and jsonl too."""
    server.store.create_topic("mx", 3)
    for stamps, partition in (((1000, 5000, 3000), 0), ((2000, 5000, 5000, 4000), 0), ((7,), 1)):
        server.store.append("mx", [Record(None, b"v", (), BASE_MS + stamp) for stamp in stamps], partition=partition)
    server.store.create_topic("mx.y", 1)
    server.store.create_topic("mxzy", 1)
    for args in (["mx", "--time", "max-timestamp"], ["--topic", "mx", "--time", "-3", "--format", "json"],
                 ["--topic", "mx.*", "--format", "jsonl"], ["mx.y"], ["--topic", "m[x]z."], ["--time", "-3"]):
        assert on(server, "offsets", *args) == on_dir(server, "offsets", *args), args
    assert on(server, "offsets", "mx", "--time", "max-timestamp") == "mx:0:1\nmx:1:0\n"
    assert on(server, "offsets", "--topic", "mx.*", "--time", "earliest") == \
        "mx:0:0\nmx:1:0\nmx:2:0\nmx.y:0:0\nmxzy:0:0\n"
    assert on(server, "offsets", "mx.y") == "mx.y:0:0\n"  # the topic of that name wins
    result = cli("offsets", "--topic", "nomatch.*", "--bootstrap-server", server.bootstrap_servers)
    assert result.exit_code == 1 and "no topic matches" in result.stderr


def test_max_timestamp_agrees_with_confluent_kafkas_admin(server):
    confluent = pytest.importorskip("confluent_kafka", reason="confluent-kafka (the clients extra) is not installed")
    from confluent_kafka.admin import AdminClient, OffsetSpec

    server.store.create_topic("mxc", 2)
    server.store.append("mxc", [Record(None, b"v", (), BASE_MS + stamp) for stamp in (30, 90, 10, 90)], partition=0)
    admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
    wanted = {confluent.TopicPartition("mxc", p): OffsetSpec.max_timestamp() for p in (0, 1)}
    try:
        theirs = {tp.partition: future.result(timeout=30).offset
                  for tp, future in admin.list_offsets(wanted, request_timeout=30).items()}
    finally:
        del admin  # destroyed now, not after the module's broker has stopped
    ours = json.loads(on(server, "offsets", "mxc", "--time", "max-timestamp", "--format", "json"))
    assert {row["partition"]: -1 if row["offset"] is None else row["offset"] for row in ours} == theirs == {0: 1, 1: -1}


def test_max_timestamp_is_refused_below_list_offsets_v7(server):
    """A broker that speaks ListOffsets below v7 does not know -3: refused before asking, as Kafka's
    admin client refuses it."""
    from logstore.client.admin import BrokerAdmin
    from logstore.client.errors import BrokerResponseError
    from logstore.client.tools import partition_offsets

    with BrokerAdmin(server.bootstrap_servers) as admin:
        admin.network.refresh_metadata(["t"])
        connection = admin.network.connection(admin.network.leader_for("t", 0))
        connection.versions[2] = 6  # as if the broker offered ListOffsets 1-6
        with pytest.raises(BrokerResponseError, match="max-timestamp needs v7") as refused:
            partition_offsets(admin, "t", -3)
        assert refused.value.error_name == "UNSUPPORTED_VERSION"
        assert [row.offset for row in partition_offsets(admin, "t", -2)] == [0, 0, 0]  # v6 does the rest


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
    assert json.loads(on(server, "delete-records", "del", "-p", "0", "-p", "1", "--before", "5", "--format", "json")) \
        == [{"topic": "del", "partition": 0, "low_watermark": 5}, {"topic": "del", "partition": 1, "low_watermark": 5}]
    assert [json.loads(line) for line in on(server, "delete-records", "del", "-p", "0", "--before", "7", "--format",
                                             "jsonl").splitlines()] == [{"topic": "del", "partition": 0, "low_watermark": 7}]


def test_topics_describe_without_a_name_over_the_broker(server):
    """Every topic the broker has, as `topics list` lists them (internal ones unless
    --exclude-internal), each as `topics describe NAME` describes it, in json and text."""
    _topic(server, "dsc", 2, [3, 1])
    server.store.alter_topic_config("dsc", {"retention.ms": "123456"})
    with BrokerGroupAdmin.connect(server.bootstrap_servers) as groups:  # the first commit makes __consumer_offsets
        groups.commit("dsc-group", {("dsc", 0): 1})
    listed = on(server, "topics", "list").splitlines()
    every = json.loads(on(server, "topics", "describe"))
    assert [topic["topic"] for topic in every] == listed and {"dsc", "t", "orders"} <= set(listed)
    for described in every:
        assert described == json.loads(on(server, "topics", "describe", described["topic"])), described["topic"]
    (dsc,) = [topic for topic in every if topic["topic"] == "dsc"]
    assert dsc["overrides"] == {"retention.ms": "123456"}
    assert [(p["partition"], p["log_start_offset"], p["log_end_offset"]) for p in dsc["partitions"]] == \
        [(0, 0, 3), (1, 0, 1)]
    assert "__consumer_offsets" in listed, listed
    outside = [name for name in listed if not name.startswith("__")]
    assert on(server, "topics", "list", "--exclude-internal").splitlines() == outside
    assert [topic["topic"] for topic in json.loads(on(server, "topics", "describe", "--exclude-internal"))] == outside
    text = on(server, "topics", "describe", "--exclude-internal", "--format", "text")
    assert text == "".join(on(server, "topics", "describe", name, "--format", "text") for name in outside)
    assert "Topic: dsc\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: retention.ms=123456\n" in text


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
    out = subprocess.run([_kcat(), "-b", server.bootstrap_servers, "-C", "-t", "keyed", "-o", "beginning", "-e", "-q",
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
