"""``--format json``, the one spelling of machine-readable output: every command that prints takes
it and prints one JSON document of the documented fields and types; the commands that work on a
store and over a broker print the same schema both ways (a ``logstore serve`` of the same store);
the deprecated ``--json`` flags still work, hidden from the help."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from logstore.cli.main import main

INT, STR, BOOL, LIST, DICT, NONE = int, str, bool, list, dict, type(None)


def invoke(*args: str, input: str | None = None):
    result = CliRunner().invoke(main, list(args), input=input)
    assert result.exit_code in (0, 1), (result.exit_code, result.stderr, result.exception)
    return result


def document(*args: str, input: str | None = None):
    result = invoke(*args, input=input)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def assert_fields(row: dict, fields: dict) -> None:
    """``row`` has exactly ``fields``' keys, each value of one of its types."""
    assert set(row) == set(fields), (sorted(row), sorted(fields))
    for name, types in fields.items():
        types = types if isinstance(types, tuple) else (types,)
        value = row[name]
        assert isinstance(value, types) and not (isinstance(value, bool) and BOOL not in types), (name, value)


def shape(value):
    """The field names and types of a JSON document, its values left out (a list: its first item's)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


@pytest.fixture
def store(tmp_path):
    d = str(tmp_path / "d")
    invoke("--dir", d, "topics", "create", "t", "--partitions", "2")
    invoke("--dir", d, "append", "t", "--partition", "0", input="a\nb\n")
    invoke("--dir", d, "append", "t", "--partition", "1", "c")
    invoke("--dir", d, "read", "t", "--group", "g", "--partition", "0")  # a group with committed offsets
    return d


PARTITION = {"partition": INT, "leader": (INT, NONE), "log_start_offset": INT, "log_end_offset": INT,
             "dir": (STR, NONE), "log_dir": (STR, NONE), "size_bytes": (INT, NONE), "segments": (INT, NONE),
             "recovery_point": (INT, NONE), "missing": BOOL, "damaged": (STR, NONE)}


def test_topic_commands(store):
    assert_fields(document("--dir", store, "topics", "create", "u", "--format", "json"),
                  {"topic": STR, "partitions": INT, "created": BOOL})
    assert document("--dir", store, "topics", "create", "u", "--if-not-exists", "--format", "json") == {
        "topic": "u", "partitions": None, "created": False}
    assert document("--dir", store, "topics", "list", "--exclude-internal", "--format", "json") == ["t", "u"]
    described = document("--dir", store, "topics", "describe", "t", "--format", "json")
    assert_fields(described, {"topic": STR, "partition_count": INT, "config": DICT, "overrides": DICT,
                              "partitions": LIST})
    assert all(isinstance(value, str) for value in described["config"].values())
    assert described["config"]["segment.bytes"] == "1073741824"
    for row in described["partitions"]:
        assert_fields(row, PARTITION)
    assert [row["log_end_offset"] for row in described["partitions"]] == [2, 1]
    altered = document("--dir", store, "topics", "alter", "u", "--config", "retention.ms=1000")
    assert altered == {"topic": "u", "partitions": 1, "overrides": {"retention.ms": "1000"}}
    assert invoke("--dir", store, "topics", "alter", "u", "--partitions", "2", "--format", "text").stdout == (
        "Topic u: 2 partitions, overrides: retention.ms=1000\n")
    assert document("--dir", store, "topics", "delete", "u", "--format", "json") == {"topic": "u", "deleted": True}
    assert document("--dir", store, "topics", "delete", "u", "--if-exists", "--format", "json") == {
        "topic": "u", "deleted": False}


def test_append_formats(store):
    rows = document("--dir", store, "append", "t", "--partition", "1", "--format", "json", input="x\ny\n")
    assert rows == [{"topic": "t", "partition": 1, "first_offset": 1, "last_offset": 2, "record_count": 2}]
    lines = invoke("--dir", store, "append", "t", "--partition", "1", input="z\n").stdout.splitlines()
    assert [json.loads(line)["first_offset"] for line in lines] == [3]  # jsonl stays the default
    assert invoke("--dir", store, "append", "t", "-p", "0", "v", "--format", "text").stdout == (
        "t-0: offsets 2..2 (1 record)\n")


def test_maintenance_commands(store, tmp_path):
    checked = document("--dir", store, "check", "--format", "json")
    assert_fields(checked, {"ok": BOOL, "partitions": INT, "segments": INT, "batches": INT, "records": INT,
                            "bytes_checked": INT, "errors": INT, "warnings": INT, "problems": LIST})
    assert checked["ok"] and checked["records"] == 4  # 3 in t, and group g's commit
    retention = document("--dir", store, "retention", "--dry-run", "--format", "json")
    assert_fields(retention, {"dry_run": BOOL, "segments": INT, "size_bytes": INT, "partitions": LIST})
    assert {(row["topic"], row["partition"]) for row in retention["partitions"]} >= {("t", 0), ("t", 1)}
    for row in retention["partitions"]:
        assert_fields(row, {"topic": STR, "partition": INT, "log_start_offset": INT, "deleted": LIST})
    invoke("--dir", store, "topics", "create", "c", "--config", "cleanup.policy=compact")
    compacted = document("--dir", store, "compact", "c", "--format", "json")
    assert_fields(compacted, {"engine": STR, "compacted": INT, "partitions": LIST})
    assert [(row["topic"], row["partition"], row["compacted"]) for row in compacted["partitions"]] == [("c", 0, False)]
    repaired = document("--dir", store, "repair", "t", "--format", "json")
    assert repaired["done"] is False and [row["partition"] for row in repaired["partitions"]] == [0, 1]
    for row in repaired["partitions"]:
        assert_fields(row, {"topic": STR, "partition": INT, "damaged": BOOL, "reason": (STR, NONE),
                            "cut_offset": (INT, NONE), "removed_first_offset": INT, "removed_end_offset": INT,
                            "removed_records": INT, "removed_bytes": INT, "removed_files": LIST,
                            "log_start_offset": INT})
    status = document("--dir", store, "status", "--format", "json")
    assert_fields(status["dirs"][0]["logs"][0], {"topic": STR, "partition": INT, "recovery_point": (INT, NONE),
                                                 "log_end_offset": INT, "damaged": (STR, NONE)})
    dumped = document("dump", f"{store}/t-0/00000000000000000000.log", "--records", "--format", "json")
    assert dumped["kind"] == "log" and dumped["tail"] is None
    assert [record["value"] for batch in dumped["batches"] for record in batch["records"]] == ["YQ==", "Yg=="]
    index = document("dump", f"{store}/t-0/00000000000000000000.index", "--format", "json")
    assert_fields(index, {"path": STR, "kind": STR, "base_offset": INT, "size_bytes": INT, "entries": LIST,
                          "trailing_bytes": INT})
    mirrored = document("mirror", "--from", store, "--to", str(tmp_path / "copy"), "t", "--format", "json")
    assert mirrored == {"topics": [{"topic": "t", "records": 3}], "records": 3}


def test_groups_users_and_acls(store):
    listed = document("--dir", store, "groups", "list", "--format", "json")
    assert listed == [{"group_id": "g", "protocol_type": listed[0]["protocol_type"], "state": "Empty"}]
    described = document("--dir", store, "groups", "describe", "g", "--format", "json")
    assert [(row["topic"], row["partition"], row["committed_offset"]) for row in described["partitions"]] == [
        ("t", 0, 2)]
    reset = document("--dir", store, "groups", "reset-offsets", "g", "--topic", "t:0", "--to-earliest",
                     "--format", "json")
    assert reset == {"group": "g", "executed": False,
                     "offsets": [{"topic": "t", "partition": 0, "current_offset": 2, "new_offset": 0}]}
    assert document("--dir", store, "groups", "delete", "g", "--format", "json") == {"group": "g", "deleted": True}
    added = document("--dir", store, "users", "add", "alice", "--password-stdin", "--iterations", "4096",
                     "--format", "json", input="secret\n")
    assert added["user"] == "alice" and added["iterations"] == 4096 and added["mechanisms"]
    users = document("--dir", store, "users", "list", "--format", "json")
    assert {row["mechanism"] for row in users} == set(added["mechanisms"])
    for row in users:
        assert_fields(row, {"user": STR, "mechanism": STR, "iterations": INT, "usable": BOOL})
    assert document("--dir", store, "users", "delete", "alice", "--format", "json") == {
        "user": "alice", "deleted": len(added["mechanisms"])}
    acl = document("--dir", store, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                   "--topic", "t", "--format", "json")
    assert acl == {"added": [{"resource_type": "Topic", "pattern_type": "Literal", "resource_name": "t",
                              "principal": "User:alice", "host": "*", "operation": "Read", "permission": "Allow"}],
                   "present": []}
    assert document("--dir", store, "acls", "list", "--format", "json") == {"acls": acl["added"]}
    assert document("--dir", store, "acls", "remove", "--topic", "t", "--format", "json") == {"removed": acl["added"]}


def test_deprecated_json_flags_still_work_and_are_hidden(store):
    assert document("--dir", store, "groups", "list", "--json") == document(
        "--dir", store, "groups", "list", "--format", "json")
    assert document("--dir", store, "groups", "describe", "g", "--json")["group_id"] == "g"
    assert "dirs" in document("--dir", store, "status", "--json")
    for command in (["status"], ["groups", "list"], ["groups", "describe"], ["perf", "append"]):
        text = invoke(*command, "--help").stdout
        assert "--format" in text and "--json" not in text, command


def test_perf_json_alias(tmp_path):
    args = ["perf", "append", "--records", "10", "--dir", str(tmp_path)]
    assert document(*args, "--json")["results"] and document(*args, "--format", "json")["results"]


# What both ways must agree on: the values of these fields (sizes, directories and leaders are the
# store's or the broker's only, and null on the other side).
AGREE = ("partition", "log_start_offset", "log_end_offset")


def test_store_and_broker_print_the_same_schema(store):
    commands = [["topics", "list", "--format", "json"], ["topics", "describe", "t"], ["topics", "describe"],
                ["groups", "list", "--format", "json"], ["groups", "describe", "g", "--format", "json"],
                ["offsets", "t", "--format", "json"], ["offsets", "--format", "json", "--time", "earliest"],
                ["read", "t"]]
    on_store = [invoke("--dir", store, *command) for command in commands]
    for result in on_store:
        assert result.exit_code == 0, result.stderr
    process = subprocess.Popen([sys.executable, "-P", "-m", "logstore.cli", "--dir", store, "serve", "--listen",
                                "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("logstore serve: listening on 127.0.0.1:"), (line, process.stderr.read())
        address = line.split("listening on ", 1)[1].split()[0]
        over_broker = [invoke("--bootstrap-server", address, *command) for command in commands]
        deleted = [document("--bootstrap-server", address, "delete-records", "t", "-p", "1", "--before", "1",
                            "--format", "json")]
        versions = document("--bootstrap-server", address, "api-versions", "--format", "json")
    finally:
        process.terminate()
        process.wait(30)
        process.stdout.close()
        process.stderr.close()
    deleted.append(document("--dir", store, "delete-records", "t", "-p", "1", "--before", "1", "--format", "json"))
    assert deleted[0] == deleted[1] == [{"topic": "t", "partition": 1, "low_watermark": 1}]
    assert_fields(versions[0], {"node_id": INT, "host": STR, "port": INT, "rack": (STR, NONE), "apis": LIST})
    for command, local, remote in zip(commands, on_store, over_broker):
        assert remote.exit_code == 0, (command, remote.stderr)
        if command[0] == "read":
            local_rows = [json.loads(line) for line in local.stdout.splitlines()]
            remote_rows = [json.loads(line) for line in remote.stdout.splitlines()]
            assert [shape(row) for row in local_rows] == [shape(row) for row in remote_rows]
            assert local_rows == remote_rows
            continue
        local_doc, remote_doc = json.loads(local.stdout), json.loads(remote.stdout)
        assert shape(local_doc) == shape(remote_doc) or _same_up_to_nulls(local_doc, remote_doc), command
        if command[0] == "topics" and command[1] == "describe":
            for mine, theirs in zip(*(doc if isinstance(doc, list) else [doc] for doc in (local_doc, remote_doc))):
                assert {key: mine[key] for key in ("topic", "partition_count", "config", "overrides")} == {
                    key: theirs[key] for key in ("topic", "partition_count", "config", "overrides")}
                for a, b in zip(mine["partitions"], theirs["partitions"]):
                    assert_fields(a, PARTITION)
                    assert_fields(b, PARTITION)
                    assert {key: a[key] for key in AGREE} == {key: b[key] for key in AGREE}
        elif command[0] == "groups" and command[1] == "describe":
            assert local_doc["partitions"] == remote_doc["partitions"]
        else:
            assert local_doc == remote_doc, command


def _same_up_to_nulls(mine, theirs) -> bool:
    """The same fields, and the same types wherever neither side is null (a store knows no leader,
    a broker no directory)."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        return set(mine) == set(theirs) and all(_same_up_to_nulls(mine[key], theirs[key]) for key in mine)
    if isinstance(mine, list) and isinstance(theirs, list):
        return len(mine) == len(theirs) and all(_same_up_to_nulls(a, b) for a, b in zip(mine, theirs))
    return mine is None or theirs is None or type(mine) is type(theirs)
