"""Kafka's everyday tools on a store: `offsets` (kafka-get-offsets), `delete-records`
(kafka-delete-records), `read --offset end|-N`, `append --key-separator` (kcat's -K, the console
producer's parse.key), `topics ... --topic/--if-exists/--if-not-exists/--replication-factor`,
`topics describe --format text`, and the global options after the subcommand."""

from __future__ import annotations

import json
import os
import select
import shlex
import subprocess
import sys
import time
import warnings

import click
from click.testing import CliRunner
from docs_snippets import blocks, console_commands

from logstore import LogManager, Record
from logstore.cli.main import main

BASE_MS = 1_700_000_000_000


def cli(*args, input=None):
    return CliRunner().invoke(main, [*map(str, args)], input=input)


def run(path, *args, input=None):
    return cli("--dir", path, *args, input=input)


def ok(result):
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exc_info)
    return result


def usage_error(result, *words):
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("Error: "), result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)


def error(result, *words):
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("Error: "), result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)


def make_store(tmp_path) -> str:
    """Topic ``ev``: partition 0 holds 10 records (timestamps BASE+0, +10, ... +90), partition 1
    holds 4, partition 2 none; topic ``other``: one record."""
    path = str(tmp_path / "data")
    with LogManager([path]) as store:
        store.create_topic("ev", 3)
        store.create_topic("other", 1)
        store.append("ev", [Record(b"k", b"v%d" % i, (), BASE_MS + 10 * i) for i in range(10)], partition=0)
        store.append("ev", [Record(b"k", b"w%d" % i, (), BASE_MS + 10 * i) for i in range(4)], partition=1)
        store.append("other", [Record(None, b"x", (), BASE_MS)], partition=0)
    return path


# --- offsets -------------------------------------------------------------------------------------


def test_offsets_prints_kafka_get_offsets_layout_for_each_time(tmp_path):
    path = make_store(tmp_path)
    assert ok(run(path, "offsets", "ev")).stdout == "ev:0:10\nev:1:4\nev:2:0\n"  # latest by default
    assert ok(run(path, "offsets", "--topic", "ev", "--time", "latest")).stdout == "ev:0:10\nev:1:4\nev:2:0\n"
    assert ok(run(path, "offsets", "ev", "--time", "-2")).stdout == "ev:0:0\nev:1:0\nev:2:0\n"
    # The first record at or after the time; a partition with none is left out, as Kafka's tool does
    assert ok(run(path, "offsets", "ev", "--time", BASE_MS + 25)).stdout == "ev:0:3\nev:1:3\n"
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((BASE_MS + 40_000) / 1000))
    assert ok(run(path, "offsets", "ev", "--time", BASE_MS + 40_000)).stdout == ""
    with LogManager([path]) as store:
        store.append("ev", [Record(None, b"late", (), BASE_MS + 40_000)], partition=2)
    for text in (iso, iso + "Z", iso + "+00:00"):
        assert ok(run(path, "offsets", "ev", "--time", text)).stdout == "ev:2:0\n", text
    data = json.loads(ok(run(path, "offsets", "ev", "--time", BASE_MS + 95, "--format", "json")).stdout)
    assert data == [{"topic": "ev", "partition": 0, "offset": None}, {"topic": "ev", "partition": 1, "offset": None},
                    {"topic": "ev", "partition": 2, "offset": 0}]
    assert ok(run(path, "offsets", "ev", "--partitions", "0,2")).stdout == "ev:0:10\nev:2:1\n"
    assert ok(run(path, "offsets", "ev", "-p", "1", "--time", "earliest")).stdout == "ev:1:0\n"
    # Every topic without TOPIC (sorted by topic, then partition)
    assert ok(run(path, "offsets")).stdout == "ev:0:10\nev:1:4\nev:2:1\nother:0:1\n"


def test_offsets_max_timestamp_is_the_first_record_with_the_largest_timestamp(tmp_path):
    """--time max-timestamp (or -3, KIP-734): the earliest offset among the records with the
    largest timestamp, across batches and segments, not below the log start; none in an empty
    partition (left out of the text, null in JSON)."""
    path = make_store(tmp_path)
    with LogManager([path], config={"log.segment.bytes": 200}) as store:
        store.create_topic("times", 2)
        for stamp in (1000, 5000, 3000):  # offsets 0-2, one batch each
            store.append("times", [Record(b"k", b"v", (), BASE_MS + stamp)], partition=0)
        store.append("times", [Record(b"k", b"v", (), BASE_MS + s) for s in (2000, 5000, 5000)], partition=0)
        store.append("times", [Record(b"k", b"v", (), BASE_MS + 4000) for _ in range(20)], partition=0)
        assert len(store.get_log("times", 0).segments) > 2
    for word in ("max-timestamp", "-3", "MAX-TIMESTAMP"):
        assert ok(run(path, "offsets", "times", "--time", word)).stdout == "times:0:1\n", word
    assert json.loads(ok(run(path, "offsets", "times", "--time", "-3", "--format", "json")).stdout) == [
        {"topic": "times", "partition": 0, "offset": 1}, {"topic": "times", "partition": 1, "offset": None}]
    # ev's partitions: the last record holds the largest timestamp; other's single record
    assert ok(run(path, "offsets", "--time", "max-timestamp")).stdout == "ev:0:9\nev:1:3\nother:0:0\ntimes:0:1\n"
    with LogManager([path]) as store:
        store.get_log("times", 0).delete_records(2)  # offset 1 is gone: the same timestamp at 4 is next
    assert ok(run(path, "offsets", "times", "--time", "-3")).stdout == "times:0:4\n"
    with LogManager([path]) as store:
        store.get_log("times", 0).delete_records(6)  # every 5000 is gone: the 4000s, the first at 6
    assert ok(run(path, "offsets", "times", "--time", "-3")).stdout == "times:0:6\n"


def test_offsets_topic_is_a_regular_expression_where_no_topic_has_that_name(tmp_path):
    path = make_store(tmp_path)
    with LogManager([path]) as store:
        for name in ("e.v", "eXv", "__consumer_offsets"):
            store.create_topic(name, 1)
    assert ok(run(path, "offsets", "--topic", "e.*")).stdout == "e.v:0:0\neXv:0:0\nev:0:10\nev:1:4\nev:2:0\n"
    assert ok(run(path, "offsets", "e.v")).stdout == "e.v:0:0\n"  # the topic of that name, not eXv too
    assert ok(run(path, "offsets", "--topic", "e[X]v")).stdout == "eXv:0:0\n"
    assert ok(run(path, "offsets", "--topic", "(ev|other)", "--time", "earliest")).stdout == \
        "ev:0:0\nev:1:0\nev:2:0\nother:0:0\n"
    # A whole-name match, as Kafka's Pattern.matches: "e" matches no topic (and may be a name)
    error(run(path, "offsets", "--topic", "e"), "unknown topic 'e'")
    error(run(path, "offsets", "--topic", "x.*"), "no topic matches", "x.*")
    error(run(path, "offsets", "--topic", "(unclosed"), "(unclosed", "regular expression")
    assert ok(run(path, "offsets", "--topic", "_.*")).stdout == "__consumer_offsets:0:0\n"
    error(run(path, "offsets", "--topic", "_.*", "--exclude-internal-topics"), "no topic matches")
    # A name given exactly is what was asked for, internal or not
    assert ok(run(path, "offsets", "__consumer_offsets", "--exclude-internal-topics")).stdout == \
        "__consumer_offsets:0:0\n"


def test_offsets_and_delete_records_print_json_and_json_lines(tmp_path):
    path = make_store(tmp_path)
    rows = [{"topic": "ev", "partition": 0, "offset": 10}, {"topic": "ev", "partition": 1, "offset": 4},
            {"topic": "ev", "partition": 2, "offset": 0}]
    assert json.loads(ok(run(path, "offsets", "ev", "--format", "json")).stdout) == rows
    assert [json.loads(line) for line in ok(run(path, "offsets", "ev", "--format", "jsonl")).stdout.splitlines()] \
        == rows
    deleted = ok(run(path, "delete-records", "ev", "-p", "1", "-p", "0", "--before", "3", "--format", "json")).stdout
    assert json.loads(deleted) == [{"topic": "ev", "partition": 0, "low_watermark": 3},
                                   {"topic": "ev", "partition": 1, "low_watermark": 3}]
    deleted = ok(run(path, "delete-records", "ev", "-p", "0", "-p", "1", "--before", "-1", "--format", "jsonl")).stdout
    assert [json.loads(line) for line in deleted.splitlines()] == [
        {"topic": "ev", "partition": 0, "low_watermark": 10}, {"topic": "ev", "partition": 1, "low_watermark": 4}]
    usage_error(run(path, "delete-records", "ev", "-p", "0", "--before", "1", "--format", "xml"), "--format")


def test_offsets_leaves_out_internal_topics_when_asked(tmp_path):
    path = make_store(tmp_path)
    with LogManager([path]) as store:
        store.create_topic("__consumer_offsets", 1)
    assert "__consumer_offsets:0:0" in ok(run(path, "offsets")).stdout.splitlines()
    assert ok(run(path, "offsets", "--exclude-internal-topics")).stdout == "ev:0:10\nev:1:4\nev:2:0\nother:0:1\n"


def test_offsets_errors_are_one_line(tmp_path):
    path = make_store(tmp_path)
    usage_error(run(path, "offsets", "ev", "--time", "yesterday"), "--time", "yesterday", "ISO 8601")
    usage_error(run(path, "offsets", "ev", "--time", "-7"), "-7")
    usage_error(run(path, "offsets", "ev", "--partitions", "2-1"), "--partitions")
    usage_error(run(path, "offsets", "ev", "--partitions", "0-99999999999"), "--partitions")
    usage_error(run(path, "offsets", "ev", "--topic", "other"), "two topics")
    error(run(path, "offsets", "nope"), "nope")
    error(run(path, "offsets", "ev", "--partitions", "5"), "no partition 5")


# --- delete-records ------------------------------------------------------------------------------


def test_delete_records_moves_the_log_start_and_reads_start_there(tmp_path):
    path = make_store(tmp_path)
    assert ok(run(path, "delete-records", "ev", "--partition", "0", "--before", "6")).stdout == \
        "partition: ev-0\tlow_watermark: 6\n"
    assert ok(run(path, "offsets", "ev", "--time", "earliest")).stdout == "ev:0:6\nev:1:0\nev:2:0\n"
    values = ok(run(path, "read", "ev", "-p", "0", "--format", "value")).stdout.split()
    assert values == ["v6", "v7", "v8", "v9"]
    # -1: everything up to the log end, in several partitions at once
    assert ok(run(path, "delete-records", "--topic", "ev", "-p", "0", "-p", "1", "--before", "-1")).stdout == \
        "partition: ev-0\tlow_watermark: 10\npartition: ev-1\tlow_watermark: 4\n"
    assert ok(run(path, "read", "ev")).stdout == ""
    # Below the log start already: nothing to do, the start stays
    assert ok(run(path, "delete-records", "ev", "-p", "0", "--before", "2")).stdout == \
        "partition: ev-0\tlow_watermark: 10\n"


def test_delete_records_takes_kafkas_offset_json_file(tmp_path):
    path = make_store(tmp_path)
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"partitions": [{"topic": "ev", "partition": 1, "offset": 3},
                                                  {"topic": "other", "partition": 0, "offset": -1}], "version": 1}))
    assert ok(run(path, "delete-records", "--offset-json-file", offsets)).stdout == \
        "partition: ev-1\tlow_watermark: 3\npartition: other-0\tlow_watermark: 1\n"
    offsets.write_text(json.dumps({"partitions": [{"topic": "ev", "partition": 1}]}))
    error(run(path, "delete-records", "--offset-json-file", offsets), "bad entry")
    usage_error(run(path, "delete-records", "ev", "--offset-json-file", offsets), "--offset-json-file")


def test_delete_records_refusals(tmp_path):
    path = make_store(tmp_path)
    error(run(path, "delete-records", "ev", "-p", "1", "--before", "5"), "ev-1", "log end offset is 4")
    error(run(path, "delete-records", "ev", "-p", "7", "--before", "1"), "7")
    usage_error(run(path, "delete-records", "ev", "--before", "1"), "--partition")
    usage_error(run(path, "delete-records", "ev", "-p", "0", "--before", "-3"), "--before")
    with LogManager([path]) as store:
        store.create_topic("__consumer_offsets", 1)
    error(run(path, "delete-records", "__consumer_offsets", "-p", "0", "--before", "0"), "internal topic")
    # Nothing was deleted by a refused request
    assert ok(run(path, "offsets", "ev", "--time", "earliest")).stdout == "ev:0:0\nev:1:0\nev:2:0\n"


# --- read --offset end|-N ------------------------------------------------------------------------


def test_read_the_last_n_records_of_each_partition(tmp_path):
    path = make_store(tmp_path)
    assert ok(run(path, "read", "ev", "--offset", "-2", "--format", "value")).stdout.split() == \
        ["v8", "v9", "w2", "w3"]
    assert ok(run(path, "read", "ev", "--offset", "-6", "-p", "1", "--format", "value")).stdout.split() == \
        ["w0", "w1", "w2", "w3"]  # no further back than the log start
    with LogManager([path]) as store:
        store.get_log("ev", 0).delete_records(9)
    assert ok(run(path, "read", "ev", "--offset", "-3", "-p", "0", "--format", "value")).stdout.split() == ["v9"]
    assert ok(run(path, "read", "ev", "--offset", "end")).stdout == ""
    assert ok(run(path, "read", "ev", "--offset", "latest")).stdout == ""
    assert ok(run(path, "read", "ev", "--offset", "beginning", "-p", "1", "--format", "value")).stdout.split() == \
        ["w0", "w1", "w2", "w3"]
    assert ok(run(path, "read", "ev", "--offset", "2", "-p", "1", "--format", "value")).stdout.split() == ["w2", "w3"]
    usage_error(run(path, "read", "ev", "--offset", "2"), "--partition")
    usage_error(run(path, "read", "ev", "--offset", "soon"), "soon")
    usage_error(run(path, "read", "ev", "--offset", "-1", "--from-timestamp", "0"), "at most one")
    usage_error(run(path, "read", "ev", "--offset", "end", "--group", "g"), "--group")


def _cli_command() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "logstore")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "logstore.cli"]


def test_read_from_the_end_follows_only_new_records(tmp_path):
    path = make_store(tmp_path)
    follower = subprocess.Popen([*_cli_command(), "read", "ev", "--offset", "end", "--follow", "--max-records", "1",
                                 "--dir", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(tmp_path))
    try:
        line = b""
        with LogManager([path]) as writer:  # the follower holds no lock: a writer opens beside it
            # The follower's start is not observable: append until it prints (at most 100 appends)
            for attempt in range(100):
                writer.append("ev", [Record(None, b"new-%d" % attempt)], partition=attempt % 3)
                poller = select.poll()  # (not select: a test process may hold more than 1024 descriptors)
                poller.register(follower.stdout, select.POLLIN)
                if poller.poll(100):
                    line = follower.stdout.readline()
                    break
        record = json.loads(line)
        assert record["value"].startswith("new-"), record
        assert follower.wait(10) == 0, follower.stderr.read()
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()


# --- append --key-separator ----------------------------------------------------------------------


def _keys_and_values(path, topic):
    return sorted((r["key"], r["value"]) for r in map(json.loads, ok(run(path, "read", topic)).stdout.splitlines()))


def test_append_lines_with_a_key_separator(tmp_path):
    path = str(tmp_path / "data")
    ok(run(path, "topics", "create", "kv", "--partitions", "3"))
    ok(run(path, "append", "kv", "--key-separator", ":", input="a:1\nb:two:parts\n:empty key\nc:\n"))
    assert _keys_and_values(path, "kv") == [("", "empty key"), ("a", "1"), ("b", "two:parts"), ("c", "")]
    # Kafka's console producer properties: parse.key with the tab by default, or key.separator
    ok(run(path, "append", "kv", "--property", "parse.key=true", input="d\t4\n"))
    ok(run(path, "append", "kv", "--property", "parse.key=true", "--property", "key.separator=|", input="e|5\n"))
    ok(run(path, "append", "kv", "-K", "=>", input="f=>6\r\n"))
    assert _keys_and_values(path, "kv")[-3:] == [("d", "4"), ("e", "5"), ("f", "6")]
    # Same key, same partition: the key is the record's key, not part of its value
    partitions = {r["partition"] for r in map(json.loads, ok(run(path, "read", "kv")).stdout.splitlines())
                  if r["key"] == "a"}
    ok(run(path, "append", "kv", "-K", ":", input="a:again\n"))
    assert {r["partition"] for r in map(json.loads, ok(run(path, "read", "kv")).stdout.splitlines())
            if r["key"] == "a"} == partitions
    # base64 keys and values on each side of the separator
    ok(run(path, "append", "kv", "-K", " ", "--encoding", "base64", input="a2V5 dmFsdWU=\n"))
    assert ("key", "value") in _keys_and_values(path, "kv")


def test_append_key_separator_refusals(tmp_path):
    path = str(tmp_path / "data")
    ok(run(path, "topics", "create", "kv"))
    error(run(path, "append", "kv", "-K", ":", input="a:1\nno separator\n"), "line 2", "no key separator")
    assert ok(run(path, "read", "kv")).stdout == ""  # nothing appended from a bad input
    usage_error(run(path, "append", "kv", "-K", ":", "a:1"), "key separator")
    usage_error(run(path, "append", "kv", "-K", ":", "--input-format", "jsonl", input="{}\n"), "key separator")
    usage_error(run(path, "append", "kv", "-K", ":", "--key", "k", input="a:1\n"), "key separator")
    usage_error(run(path, "append", "kv", "-K", "", input="a:1\n"), "empty")
    usage_error(run(path, "append", "kv", "--property", "print.key=true", input="a\n"), "parse.key")
    usage_error(run(path, "append", "kv", "-K", ":", "--property", "parse.key=true", input="a:1\n"), "differ")


# --- topics: Kafka's option names ----------------------------------------------------------------


def test_topics_take_kafka_topics_options(tmp_path):
    path = str(tmp_path / "data")
    assert ok(run(path, "topics", "create", "--topic", "t", "--partitions", "2", "--replication-factor", "1")).stdout \
        == "Created topic t with 2 partitions.\n"
    error(run(path, "topics", "create", "--topic", "t"), "already exists")
    assert ok(run(path, "topics", "create", "--topic", "t", "--if-not-exists", "--partitions", "5")).stdout == \
        "Topic t exists already: nothing created.\n"
    usage_error(run(path, "topics", "create", "u", "--replication-factor", "3"), "--replication-factor",
                "one copy of each partition")
    usage_error(run(path, "topics", "create"), "--topic")
    usage_error(run(path, "topics", "create", "a", "--topic", "b"), "two topics")
    assert ok(run(path, "topics", "list")).stdout == "t\n"
    assert json.loads(ok(run(path, "topics", "alter", "--topic", "t", "--config", "retention.ms=5000")).stdout) == \
        {"topic": "t", "partitions": 2, "overrides": {"retention.ms": "5000"}}
    assert json.loads(ok(run(path, "topics", "describe", "--topic", "t")).stdout)["partition_count"] == 2
    for command in (["alter", "--config", "retention.ms=1"], ["describe"], ["delete"]):
        error(run(path, "topics", *command, "--topic", "gone"), "gone")
        assert ok(run(path, "topics", *command, "--topic", "gone", "--if-exists")).stdout == ""
    assert ok(run(path, "topics", "delete", "--topic", "t", "--if-exists")).stdout == "Deleted topic t.\n"
    assert ok(run(path, "topics", "list")).stdout == ""


def test_topics_describe_prints_kafkas_text_layout(tmp_path):
    path = make_store(tmp_path)
    ok(run(path, "topics", "alter", "ev", "--config", "retention.ms=5000", "--config", "cleanup.policy=compact"))
    assert ok(run(path, "topics", "describe", "ev", "--format", "text")).stdout == (
        "Topic: ev\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: cleanup.policy=compact,retention.ms=5000\n"
        "\tTopic: ev\tPartition: 0\tLeader: -\tReplicas: -\tIsr: -\n"
        "\tTopic: ev\tPartition: 1\tLeader: -\tReplicas: -\tIsr: -\n"
        "\tTopic: ev\tPartition: 2\tLeader: -\tReplicas: -\tIsr: -\n")


def test_topics_describe_without_a_name_describes_every_topic(tmp_path):
    """kafka-topics --describe without --topic: every topic by name, internal ones too unless
    --exclude-internal (as `topics list`), in json (a list of what NAME prints) and text."""
    path = make_store(tmp_path)
    with LogManager([path]) as store:
        store.create_topic("__consumer_offsets", 2)
    every = json.loads(ok(run(path, "topics", "describe")).stdout)
    assert [topic["topic"] for topic in every] == ["__consumer_offsets", "ev", "other"]
    for described in every:
        assert described == json.loads(ok(run(path, "topics", "describe", described["topic"])).stdout)
    assert [p["log_end_offset"] for p in every[1]["partitions"]] == [10, 4, 0]
    assert [topic["topic"] for topic in json.loads(ok(run(path, "topics", "describe", "--exclude-internal")).stdout)] \
        == ["ev", "other"]
    text = ok(run(path, "topics", "describe", "--format", "text", "--exclude-internal")).stdout
    assert text == ok(run(path, "topics", "describe", "ev", "--format", "text")).stdout + \
        ok(run(path, "topics", "describe", "other", "--format", "text")).stdout
    assert text.splitlines()[4] == "Topic: other\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: "
    assert ok(run(path, "topics", "describe", "--format", "text")).stdout.startswith(
        "Topic: __consumer_offsets\tPartitionCount: 2\t")
    assert ok(run(path, "topics", "list", "--exclude-internal")).stdout == "ev\nother\n"
    assert ok(run(path, "topics", "list")).stdout == "__consumer_offsets\nev\nother\n"
    empty = str(tmp_path / "empty")
    LogManager([empty]).close()
    assert json.loads(ok(run(empty, "topics", "describe")).stdout) == []
    assert ok(run(empty, "topics", "describe", "--format", "text")).stdout == ""


# --- global options after the subcommand ---------------------------------------------------------


def test_global_options_work_after_the_subcommand(tmp_path):
    path = str(tmp_path / "data")
    assert ok(cli("topics", "create", "t", "--dir", path, "--set", "log.segment.bytes=1000")).stdout.startswith(
        "Created topic t")
    ok(cli("append", "t", "hello", f"--dir={path}", "-v"))
    assert ok(cli("read", "t", "--format", "value", "--dir", path)).stdout == "hello\n"
    assert ok(cli("topics", "--dir", path, "list")).stdout == "t\n"  # between a group and its command too
    assert os.listdir(tmp_path) == ["data"], "nothing was written to a default dir"
    usage_error(cli("--dir", path, "topics", "list", "--bootstrap-server", "127.0.0.1:1"), "not both")


def _root_params(args):
    """The root's options and what is left for the subcommand, as click parses ``args``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # click 8.2 deprecates protected_args
        with main.make_context("logstore", list(args)) as ctx:
            return ctx.params, [*ctx.protected_args, *ctx.args]


def test_global_options_are_moved_only_where_they_are_options(tmp_path):
    params, rest = _root_params(["topics", "list", "--dir", "/a", "--set", "k=v", "-v"])
    assert params["dirs"] == ("/a",) and params["settings"] == ("k=v",) and params["verbose"]
    assert rest == ["topics", "list"]
    # An option's value that looks like a global option stays the value
    params, rest = _root_params(["append", "t", "--key", "--dir", "v"])
    assert params["dirs"] == () and rest == ["append", "t", "--key", "--dir", "v"]
    # A subcommand's own option of the same name stays its own (perf's work dir)
    params, rest = _root_params(["perf", "append", "--dir", "/w"])
    assert params["dirs"] == () and rest == ["perf", "append", "--dir", "/w"]
    # After --, arguments are arguments
    params, rest = _root_params(["append", "t", "--", "--dir"])
    assert params["dirs"] == () and rest == ["append", "t", "--", "--dir"]
    params, _ = _root_params(["--dir", "/a", "read", "t", "--dir", "/b", "--bootstrap-server=h:1"])
    assert params["dirs"] == ("/a", "/b") and params["bootstrap"] == "h:1"


# --- the command-line guide's examples (docs/guide/cli.md) ----------------------------------------


def _guide_tool_commands() -> list[list[str]]:
    commands = []
    for block in blocks("docs/guide/cli.md"):
        if block.kind != "console":
            continue
        for line, _output in console_commands(block.text):
            line = line.split("  #")[0].split("|")[-1].split("&&")[-1]
            words = shlex.split(line)
            for redirection in ("<", ">"):
                if redirection in words:
                    words = words[:words.index(redirection)]
            if words[0] != "logstore" or words[-1] == "&":
                continue  # the shell's own commands that make the example's files; a server started for it
            commands.append(words[1:])
    return commands


def test_the_guides_examples_parse(tmp_path, monkeypatch):
    """Every command the guide shows for these tools is one the command line takes (its options
    parsed and converted; nothing is run)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "offsets.json").write_text("{}")  # the file an example names: opened, not read
    commands = _guide_tool_commands()
    assert len(commands) >= 15
    for args in commands:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx = main.make_context("logstore", list(args))
            command, rest = main, [*ctx.protected_args, *ctx.args]
            while isinstance(command, click.Group):
                name, command, rest = command.resolve_command(ctx, rest)
                ctx = command.make_context(name, rest, parent=ctx)
                rest = [*ctx.protected_args, *ctx.args] if isinstance(command, click.Group) else []
