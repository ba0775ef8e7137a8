"""End-to-end tests of the ``logstore`` command line: every command through click's CliRunner against
a temporary store, plus the installed console script as a subprocess."""

from __future__ import annotations

import base64
import glob
import json
import os
import shutil
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.cli.main import main
from logstore.config import describe_keys
from logstore.manager.topics import partition_for_key


def run(store_dir, *args, input=None, env=None):
    """Invoke the CLI on ``store_dir`` (None: no --dir option)."""
    prefix = [] if store_dir is None else ["--dir", str(store_dir)]
    return CliRunner().invoke(main, [*prefix, *map(str, args)], input=input, env=env)


def ok(result):
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exc_info)
    return result


def jsonl(result) -> list[dict]:
    return [json.loads(line) for line in ok(result).stdout.splitlines()]


def assert_one_line_error(result, *fragments):
    """A non-zero exit, exactly one ``Error:`` line on stderr, no traceback, nothing else."""
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit), result.exc_info  # no uncaught exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def snapshot(store_dir) -> dict:
    """Topics, their overrides and each partition's log end offset (read-only)."""
    with LogManager([str(store_dir)], read_only=True) as store:
        return {topic: (store.topic_overrides(topic),
                        [store.get_log(topic, p).log_end_offset for p in range(store.partitions(topic))])
                for topic in store.topics()}


@pytest.fixture
def store(tmp_path):
    """A store dir with topic ``t`` (2 partitions) and ``one`` (1 partition), both empty."""
    path = tmp_path / "data"
    ok(run(path, "topics", "create", "t", "--partitions", 2))
    ok(run(path, "topics", "create", "one"))
    return path


# --- topics ---------------------------------------------------------------------------------------


def test_topics_create_list_describe(tmp_path):
    path = tmp_path / "data"
    result = ok(run(path, "topics", "create", "orders", "--partitions", 3, "--config", "retention.ms=1000",
                    "--config", "cleanup.policy=compact"))
    assert "orders" in result.stdout
    ok(run(path, "topics", "create", "audit"))
    assert ok(run(path, "topics", "list")).stdout.splitlines() == ["audit", "orders"]
    described = json.loads(ok(run(path, "topics", "describe", "orders")).stdout)
    assert described["topic"] == "orders"
    assert described["overrides"] == {"retention.ms": "1000", "cleanup.policy": "compact"}
    # Every topic key, and the topic's key placement (read-only; Kafka's murmur2 for a new topic).
    assert set(described["config"]) == {key for key, _default, _doc in describe_keys()} | {"logstore.key.placement"}
    assert described["config"]["logstore.key.placement"] == "murmur2"
    assert described["config"]["retention.ms"] == "1000"  # config values are strings, as a broker gives them
    assert described["config"]["cleanup.policy"] == "compact"
    assert described["config"]["segment.bytes"] == str(1 << 30)  # a default
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    for partition in described["partitions"]:
        assert partition["dir"] == str(path / f"orders-{partition['partition']}")
        assert (partition["log_start_offset"], partition["log_end_offset"], partition["size_bytes"],
                partition["segments"]) == (0, 0, 0, 1)


def test_describe_numbers_match_what_was_appended_and_the_disk(tmp_path):
    path = tmp_path / "data"
    ok(run(path, "topics", "create", "t", "--partitions", 2, "--config", "segment.bytes=600"))
    lines = "".join(json.dumps({"value": f"value-{i}", "partition": i % 2}) + "\n" for i in range(50))
    ok(run(path, "append", "t", "--input-format", "jsonl", "--batch-size", 4, input=lines))
    described = json.loads(ok(run(path, "topics", "describe", "t")).stdout)
    for partition in described["partitions"]:
        log_files = glob.glob(os.path.join(partition["dir"], "*.log"))
        assert partition["log_end_offset"] == 25
        assert partition["log_start_offset"] == 0
        assert partition["size_bytes"] == sum(os.path.getsize(f) for f in log_files) > 0
        assert partition["segments"] == len(log_files) > 1  # segment.bytes=600 rolled


def test_topics_alter_sets_and_deletes_overrides(store):
    result = ok(run(store, "topics", "alter", "t", "--config", "retention.ms=5000", "--config", "segment.bytes=1000"))
    assert json.loads(result.stdout)["overrides"] == {"retention.ms": "5000", "segment.bytes": "1000"}
    config = json.loads(ok(run(store, "topics", "describe", "t")).stdout)["config"]
    assert (config["retention.ms"], config["segment.bytes"]) == ("5000", "1000")
    ok(run(store, "topics", "alter", "t", "--delete-config", "retention.ms"))
    described = json.loads(ok(run(store, "topics", "describe", "t")).stdout)
    assert described["overrides"] == {"segment.bytes": "1000"}
    assert described["config"]["retention.ms"] == str(7 * 24 * 3600 * 1000)  # back to the default


def test_topics_alter_partitions_grows_a_topic_and_keeps_its_records(store):
    ok(run(store, "append", "t", "kept", "--partition", 1))
    result = ok(run(store, "topics", "alter", "t", "--partitions", 4))
    assert json.loads(result.stdout) == {"topic": "t", "partitions": 4, "overrides": {}}
    described = json.loads(ok(run(store, "topics", "describe", "t")).stdout)
    assert [p["log_end_offset"] for p in described["partitions"]] == [0, 1, 0, 0]
    ok(run(store, "append", "t", "new", "--partition", 3))
    # with a config change in the same command
    result = ok(run(store, "topics", "alter", "t", "--partitions", 5, "--config", "retention.ms=5000"))
    assert json.loads(result.stdout) == {"topic": "t", "partitions": 5, "overrides": {"retention.ms": "5000"}}
    # no increase: one line, exit 1, nothing changed
    assert_one_line_error(run(store, "topics", "alter", "t", "--partitions", 5), "already has 5 partition")
    assert_one_line_error(run(store, "topics", "alter", "t", "--partitions", 2), "would not be an increase")
    assert run(store, "topics", "alter", "t", "--partitions", 0).exit_code == 2
    with LogManager([str(store)], read_only=True) as view:
        assert view.partitions("t") == 5


def test_topics_delete_removes_partition_dirs(store):
    ok(run(store, "append", "t", "v", "--partition", 1))
    assert (store / "t-0").is_dir() and (store / "t-1").is_dir()
    ok(run(store, "topics", "delete", "t"))
    assert not glob.glob(str(store / "t-*"))
    assert ok(run(store, "topics", "list")).stdout.splitlines() == ["one"]


def test_store_wide_setting_with_broker_name(tmp_path):
    path = tmp_path / "data"
    ok(run(path, "--set", "log.segment.bytes=2048", "topics", "create", "t"))
    config = json.loads(ok(run(path, "--set", "log.segment.bytes=2048", "topics", "describe", "t")).stdout)["config"]
    assert config["segment.bytes"] == "2048"
    assert json.loads(ok(run(path, "topics", "describe", "t")).stdout)["config"]["segment.bytes"] == str(1 << 30)


def test_dirs_from_environment_spread_partitions(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    env = {"LOGSTORE_DIRS": f"{first}:{second}"}
    ok(run(None, "topics", "create", "t", "--partitions", 2, env=env))
    assert (first / "t-0").is_dir() and (second / "t-1").is_dir()
    described = json.loads(ok(run(None, "topics", "describe", "t", env=env)).stdout)
    assert [p["log_dir"] for p in described["partitions"]] == [str(first), str(second)]


# --- append and read -----------------------------------------------------------------------------


def test_append_value_then_read_returns_it(store):
    out = jsonl(run(store, "append", "one", "hello", "--key", "k1", "--header", "h1=x", "--header", "h2=",
                    "--timestamp", 1234))
    assert out == [{"topic": "one", "partition": 0, "first_offset": 0, "last_offset": 0, "record_count": 1}]
    jsonl(run(store, "append", "one", "--key", "k1", "--tombstone"))
    records = jsonl(run(store, "read", "one"))
    assert records[0] == {"topic": "one", "partition": 0, "offset": 0, "timestamp": 1234, "key": "k1",
                          "value": "hello", "headers": {"h1": "x", "h2": ""}}
    assert (records[1]["offset"], records[1]["key"], records[1]["value"], records[1]["headers"]) == (1, "k1", None, {})


def test_append_stdin_lines_in_batches_and_read_values(store):
    lines = "".join(f"line {i}\n" for i in range(2500))
    out = jsonl(run(store, "append", "one", "--batch-size", 1000, input=lines))
    assert [(o["first_offset"], o["last_offset"], o["record_count"]) for o in out] == [
        (0, 999, 1000), (1000, 1999, 1000), (2000, 2499, 500)]
    values = ok(run(store, "read", "one", "--format", "value")).stdout.splitlines()
    assert values == [f"line {i}" for i in range(2500)]
    assert ok(run(store, "read", "one", "--format", "value", "--max-records", 3)).stdout.splitlines() == [
        "line 0", "line 1", "line 2"]


def test_append_keys_choose_partitions_and_read_all_partitions(store):
    out = jsonl(run(store, "append", "t", "--key", "alpha", input="a1\na2\na3\n"))
    assert len(out) == 1 and out[0]["record_count"] == 3
    keyed_partition = out[0]["partition"]
    jsonl(run(store, "append", "t", "other", "--partition", 1 - keyed_partition))
    records = jsonl(run(store, "read", "t"))
    by_partition = {p: [r["value"] for r in records if r["partition"] == p] for p in (0, 1)}
    assert by_partition[keyed_partition] == ["a1", "a2", "a3"]
    assert by_partition[1 - keyed_partition] == ["other"]
    assert len(jsonl(run(store, "read", "t", "--max-records", 2))) == 2


def test_append_jsonl_with_nulls_headers_tombstones_and_partitions(store):
    lines = [
        {"key": "k", "value": "v", "headers": {"a": "1", "n": None}, "timestamp": 100, "partition": 1},
        {"value": "no key", "partition": 1},
        {"key": "k", "value": None, "partition": 1},
        {"key": "dup", "value": "x", "headers": [["h", "1"], ["h", "2"]], "partition": 0},
        {"key": "k"},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + "\n\n"  # a trailing blank line is skipped
    out = jsonl(run(store, "append", "t", "--input-format", "jsonl", "--timestamp", 50, input=text))
    assert sum(o["record_count"] for o in out) == 5
    by_partition = {p: [r for r in jsonl(run(store, "read", "t", "--partition", p))] for p in (0, 1)}
    first, second, third = by_partition[1][:3]
    assert (first["offset"], first["key"], first["value"], first["headers"], first["timestamp"]) == (
        0, "k", "v", {"a": "1", "n": None}, 100)
    assert (second["key"], second["value"], second["timestamp"]) == (None, "no key", 50)
    assert (third["key"], third["value"]) == ("k", None)  # a tombstone
    dup = next(r for r in by_partition[0] if r["key"] == "dup")
    assert dup["headers"] == [["h", "1"], ["h", "2"]]  # a repeated header name is kept as pairs
    last = by_partition[partition_for_key(b"k", 2)][-1]  # no partition: the key chooses; no value: a tombstone
    assert (last["key"], last["value"], last["timestamp"]) == ("k", None, 50)


def test_base64_encoding_round_trips_binary_data(store):
    binary = bytes([0, 255, 128, 10, 13])
    line = json.dumps({"key": base64.b64encode(b"\xfe").decode(), "value": base64.b64encode(binary).decode(),
                       "headers": {"h": base64.b64encode(b"\x80").decode()}})
    jsonl(run(store, "append", "one", "--input-format", "jsonl", "--encoding", "base64", input=line + "\n"))
    (record,) = jsonl(run(store, "read", "one", "--encoding", "base64"))
    assert base64.b64decode(record["value"]) == binary
    assert base64.b64decode(record["key"]) == b"\xfe"
    assert base64.b64decode(record["headers"]["h"]) == b"\x80"
    assert_one_line_error(run(store, "read", "one"), "not valid UTF-8", "--encoding base64")


def test_read_from_timestamp_and_offset(store):
    lines = "".join(json.dumps({"value": f"v{ts}", "timestamp": ts}) + "\n" for ts in (1000, 2000, 3000, 4000))
    jsonl(run(store, "append", "one", "--input-format", "jsonl", "--batch-size", 1, input=lines))
    found = jsonl(run(store, "read", "one", "--from-timestamp", 2500))
    assert [(r["offset"], r["timestamp"]) for r in found] == [(2, 3000), (3, 4000)]
    assert [r["offset"] for r in jsonl(run(store, "read", "one", "--from-timestamp", 2000))] == [1, 2, 3]
    assert jsonl(run(store, "read", "one", "--from-timestamp", 9999)) == []
    assert [r["value"] for r in jsonl(run(store, "read", "one", "--partition", 0, "--offset", 3))] == ["v4000"]
    assert [r["offset"] for r in jsonl(run(store, "read", "one", "--from-beginning", "--max-records", 2))] == [0, 1]


def test_read_in_chunks_across_segments(tmp_path):
    path = tmp_path / "data"
    ok(run(path, "topics", "create", "big", "--config", "segment.bytes=4096"))
    values = [f"{i:05d}" + "x" * 300 for i in range(3000)]
    jsonl(run(path, "append", "big", "--batch-size", 500, input="\n".join(values) + "\n"))
    assert ok(run(path, "read", "big", "--format", "value")).stdout.splitlines() == values


# --- errors ---------------------------------------------------------------------------------------


BAD_INPUT = {
    "unknown topic (append)": (["append", "nope", "v"], "unknown topic"),
    "unknown topic (read)": (["read", "nope"], "unknown topic"),
    "unknown topic (describe)": (["topics", "describe", "nope"], "unknown topic"),
    "unknown topic (alter)": (["topics", "alter", "nope", "--config", "retention.ms=1"], "unknown topic"),
    "unknown topic (delete)": (["topics", "delete", "nope"], "unknown topic"),
    "offset out of range": (["read", "t", "--partition", 0, "--offset", 5], "out of range"),
    "unknown partition (read)": (["read", "t", "--partition", 7], "no partition 7"),
    "unknown partition (append)": (["append", "t", "v", "--partition", 2], "no partition 2"),
    "invalid config (create)": (["topics", "create", "new", "--config", "retention.ms=soon"], "retention.ms"),
    "unknown config (create)": (["topics", "create", "new", "--config", "no.such.key=1"], "no.such.key"),
    "malformed config pair": (["topics", "create", "new", "--config", "retention.ms"], "KEY=VALUE"),
    "invalid config (alter)": (["topics", "alter", "t", "--config", "segment.bytes=1"], "segment.bytes"),
    "unknown store setting": (["--set", "log.nonsense=1", "topics", "list"], "log.nonsense"),
    "existing topic": (["topics", "create", "t"], "already exists"),
    "illegal topic name": (["topics", "create", "a/b"], "illegal topic name"),
    "bad header": (["append", "t", "v", "--header", "nokey"], "NAME=VALUE"),
    "bad base64 value": (["append", "t", "***", "--encoding", "base64"], "base64"),
    # A timeout that no timer holds was an OverflowError after appending (a retry duplicated it)
    "huge timeout (acks all)": (["append", "t", "v", "--acks", "all", "--timeout-ms", 2**70], "--timeout-ms"),
    "huge timeout (acks 1)": (["append", "t", "v", "--timeout-ms", 2**31], "--timeout-ms"),
}


@pytest.mark.parametrize("args, fragment", list(BAD_INPUT.values()), ids=list(BAD_INPUT))
def test_bad_input_is_a_one_line_error_and_changes_nothing(store, args, fragment):
    jsonl(run(store, "append", "t", "v", "--partition", 0))
    before = snapshot(store)
    assert_one_line_error(run(store, *args), fragment)
    assert snapshot(store) == before


def test_malformed_jsonl_line_appends_nothing(store):
    before = snapshot(store)
    text = '{"value": "a"}\n{"value": "b"}\n{"value": oops}\n{"value": "d"}\n'
    result = run(store, "append", "t", "--input-format", "jsonl", input=text)
    assert_one_line_error(result, "line 3", "invalid JSON")
    assert result.stdout == ""
    assert snapshot(store) == before == {"one": ({}, [0]), "t": ({}, [0, 0])}


def test_deeply_nested_jsonl_line_is_a_one_line_error(store):
    """json.loads recursing too deep was a RecursionError traceback."""
    text = '{"value": "a"}\n' + '{"value": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    result = run(store, "append", "t", "--input-format", "jsonl", input=text)
    assert_one_line_error(result, "line 2", "nested too deeply")
    assert snapshot(store)["t"] == ({}, [0, 0])


@pytest.mark.parametrize("line, fragment", [
    ('["not", "an", "object"]', "expected a JSON object"),
    ('{"value": "v", "color": "red"}', "unknown field 'color'"),
    ('{"value": 5}', "value must be a string"),
    ('{"value": "v", "timestamp": -3}', "timestamp must be an integer"),
    ('{"value": "v", "partition": 9}', "no partition 9"),
    ('{"value": "v", "headers": "h"}', "headers must be"),
])
def test_bad_jsonl_field_names_the_line(store, line, fragment):
    text = '{"value": "fine"}\n' + line + "\n"
    assert_one_line_error(run(store, "append", "t", "--input-format", "jsonl", input=text), "line 2", fragment)
    assert snapshot(store)["t"] == ({}, [0, 0])


def test_compacted_topic_needs_keys_before_anything_is_appended(store):
    ok(run(store, "topics", "create", "c", "--config", "cleanup.policy=compact"))
    result = run(store, "append", "c", "--input-format", "jsonl", input='{"key": "a", "value": "1"}\n{"value": "2"}\n')
    assert_one_line_error(result, "line 2", "key")
    assert snapshot(store)["c"] == ({"cleanup.policy": "compact"}, [0])


def test_oversized_record_is_refused_before_anything_is_appended(store):
    ok(run(store, "topics", "alter", "one", "--config", "max.message.bytes=200"))
    result = run(store, "append", "one", input="small\n" + "x" * 500 + "\n")
    assert_one_line_error(result, "line 2", "larger than")
    assert snapshot(store)["one"][1] == [0]
    assert jsonl(run(store, "append", "one", input="y" * 100 + "\n"))[0]["record_count"] == 1


def test_missing_dir_is_an_error_for_reading_commands(tmp_path):
    missing = tmp_path / "nowhere"
    for args in (["topics", "list"], ["read", "t"], ["topics", "describe", "t"], ["check"]):
        assert_one_line_error(run(missing, *args), "does not exist")
    assert not missing.exists()


@pytest.mark.parametrize("args, fragment", [
    (["read", "t", "--offset", 1], "--offset needs --partition"),
    (["read", "one", "--offset", 0, "--partition", 0, "--from-beginning"], "at most one of"),
    (["append", "one", "v", "--tombstone"], "not both"),
    (["topics", "alter", "t"], "nothing to change"),
    (["read", "one", "--from-timestamp", -5], "--from-timestamp"),
    (["dump", "/no/such/file"], "does not exist"),
    (["--bogus", "topics", "list"], "No such option '--bogus'"),
    (["nosuchcommand"], "No such command 'nosuchcommand'"),
    (["topics", "create"], "Missing argument 'NAME'"),
    (["topics", "create", "new", "--partitions", 0], "--partitions"),
    (["perf", "read", "--lookups", 0], "--lookups"),
])
def test_usage_errors_are_one_line_and_exit_2(store, args, fragment):
    result = run(store, *args)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and fragment in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


# click 8.2+ prints a group's help for a missing subcommand on stderr with exit code 2; before, stdout and 0.
NO_ARGS_HELP_EXIT = 2 if hasattr(click.exceptions, "NoArgsIsHelpError") else 0


@pytest.mark.parametrize("args, commands", [
    ([], ["append", "dump", "perf", "read", "topics"]),
    (["topics"], ["alter", "create", "delete", "describe", "list"]),
    (["perf"], ["append", "read"]),
])
def test_a_group_without_a_subcommand_prints_its_help(args, commands):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == NO_ARGS_HELP_EXIT, (result.stdout, result.stderr, result.exc_info)
    shown = result.stdout + result.stderr
    assert shown == ok(CliRunner().invoke(main, [*args, "-h"])).stdout  # the same page as -h
    assert shown.startswith("Usage: ") and "Commands:" in shown
    for command in commands:
        assert f"\n  {command} " in shown, shown


def test_locked_store_refuses_writers_and_serves_readers(store):
    jsonl(run(store, "append", "one", "before"))
    with LogManager([str(store)]) as writer:
        writer.append("one", [Record(value=b"while locked")])
        result = run(store, "append", "one", "v")
        assert_one_line_error(result, "locked", f"process {os.getpid()}")
        assert_one_line_error(run(store, "topics", "create", "x"), "locked")
        values = ok(run(store, "read", "one", "--format", "value")).stdout.splitlines()
        assert values == ["before", "while locked"]
        assert ok(run(store, "topics", "list")).stdout.splitlines() == ["one", "t"]
        assert json.loads(ok(run(store, "topics", "describe", "one")).stdout)["partitions"][0]["log_end_offset"] == 2
        ok(run(store, "check"))
    assert snapshot(store)["one"][1] == [2]


# --- check, dump, demo -----------------------------------------------------------------------------


def test_check_passes_on_a_healthy_store(store):
    jsonl(run(store, "append", "t", input="".join(f"{i}\n" for i in range(100))))
    result = ok(run(store, "check"))
    assert result.stdout.startswith("OK: checked 3 partitions, 3 segments")
    assert "100 records" in result.stdout


def test_dump_prints_a_segment(store):
    jsonl(run(store, "append", "one", "hello", "--key", "k"))
    result = ok(run(None, "dump", store / "one-0" / "00000000000000000000.log", "--records"))
    assert "base_offset: 0 last_offset: 0 count: 1" in result.stdout
    assert "key: b'k' value: b'hello'" in result.stdout
    assert_one_line_error(run(None, "dump", store / "topics.json"), "cannot tell what kind of file")


def test_demo_runs_twice_on_the_default_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOGSTORE_DIRS", raising=False)
    first = ok(run(None, "demo"))
    assert "created with 3 partitions" in first.stdout
    assert "0 errors, 0 warnings" in first.stdout
    second = ok(run(None, "demo"))
    assert "exists already" in second.stdout
    assert "0 errors, 0 warnings" in second.stdout
    described = json.loads(ok(run(None, "topics", "describe", "demo-orders")).stdout)
    assert sum(p["log_end_offset"] for p in described["partitions"]) == 12
    assert (tmp_path / "logstore-data" / "demo-orders-0").is_dir()


# --- the installed command ------------------------------------------------------------------------


def logstore_command() -> list[str]:
    for candidate in (shutil.which("logstore"), os.path.join(os.path.dirname(sys.executable), "logstore")):
        if candidate and os.access(candidate, os.X_OK):
            return [candidate]
    return [sys.executable, "-m", "logstore.cli"]


def test_installed_command_end_to_end(tmp_path):
    command = [*logstore_command(), "--dir", str(tmp_path / "data")]

    def call(*args, input=None):
        return subprocess.run([*command, *args], input=input, capture_output=True, text=True, timeout=60)

    assert call("topics", "create", "t").returncode == 0
    appended = call("append", "t", "--key", "k", input="one\ntwo\n")
    assert appended.returncode == 0, appended.stderr
    assert json.loads(appended.stdout) == {"topic": "t", "partition": 0, "first_offset": 0, "last_offset": 1,
                                           "record_count": 2}
    read = call("read", "t")
    assert [json.loads(line)["value"] for line in read.stdout.splitlines()] == ["one", "two"]
    failed = call("read", "missing-topic")
    assert failed.returncode == 1
    assert failed.stderr.strip() == "Error: unknown topic 'missing-topic'"
    assert failed.stdout == ""


def test_installed_command_usage_error_is_one_line():
    result = subprocess.run([*logstore_command(), "dump", "/no/such/file"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "'/no/such/file' does not exist" in lines[0]


def test_dump_of_a_fifo_is_refused_at_once(tmp_path):
    """`logstore dump` of a FIFO named *.log hung on the read; it is refused with one line (a
    subprocess with a timeout, so a regression fails instead of hanging the run)."""
    fifo = tmp_path / "00000000000000000000.log"
    os.mkfifo(fifo)
    # cwd: from the repository root, its logstore/ (which has no cli/) would shadow the installed one
    result = subprocess.run([sys.executable, "-m", "logstore.cli", "dump", str(fifo)], capture_output=True,
                            text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"Error: {fifo} is not a regular file (a directory, FIFO, socket "
                                                  "or device): only the store's own files can be dumped"]


def test_a_failing_writable_command_leaves_the_clean_shutdown_marker_as_it_was(store):
    """Item 5: a writable command that fails and changes nothing does not rewrite the marker (its
    shutdown time) that the previous clean shutdown left."""
    marker = os.path.join(str(store), ".kafka_cleanshutdown")
    before = open(marker, "rb").read()
    assert_one_line_error(run(store, "topics", "alter", "nope", "--config", "retention.ms=1"), "unknown topic")
    assert_one_line_error(run(store, "append", "nope", "v"), "unknown topic")
    assert open(marker, "rb").read() == before
    ok(run(store, "append", "t", "v", "--partition", 0))
    assert open(marker, "rb").read() != before
