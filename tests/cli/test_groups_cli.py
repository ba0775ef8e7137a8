"""``logstore groups`` (list, describe, reset-offsets, delete) and ``logstore read --group`` through
click's CliRunner, on groups made by the real coordinator and the in-process ``Consumer``: a live
group beside its store, groups left in a stopped store, and a store held by another process.

Consumers run a threaded coordinator on the real clock, so every wait here is bounded in time."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.cli.main import main
from logstore.group import formats
from logstore.group.consumer import Consumer

FAST = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}
CONSUMER = {"coordinator_config": FAST, "session_timeout_ms": 6000, "heartbeat_interval_ms": 100}
SETS = ["--set", "offsets.topic.num.partitions=3"]
BASE_MS = 1_700_000_000_000  # record i of a partition has timestamp BASE_MS + i seconds


def run(store_dir, *args, group_settings=True):
    """The CLI on ``store_dir``; group commands get the group settings (the store refuses them)."""
    return CliRunner().invoke(main, ["--dir", str(store_dir), *(SETS if group_settings else ()), *map(str, args)])


def ok(result):
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exc_info)
    return result


def one_line_error(result, *fragments, exit_code=1):
    assert result.exit_code == exit_code, (result.stdout, result.stderr, result.exc_info)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def rows(text: str) -> list[list[str]]:
    """The whitespace-split lines of a table's output."""
    return [line.split() for line in text.splitlines() if line.strip()]


def described(path, group="g") -> dict:
    return json.loads(ok(run(path, "groups", "describe", group, "--json")).stdout)


def committed(path, group="g") -> dict:
    return {(entry["topic"], entry["partition"]): entry["committed_offset"]
            for entry in described(path, group)["partitions"]}


def fill(store, topic="t", partitions=2, count=10):
    store.create_topic(topic, partitions=partitions)
    for partition in range(partitions):
        store.append(topic, [Record(key=b"k", value=f"{partition}-{i}".encode(), timestamp_ms=BASE_MS + i * 1000)
                             for i in range(count)], partition=partition)


def consume(consumer, count, timeout_s=20.0):
    """Poll until ``count`` records arrived (bounded)."""
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} records in {timeout_s} s"
        got.extend(consumer.poll(200))
    return got


@pytest.fixture
def empty_group(tmp_path):
    """A stopped store: topic ``t`` (2 partitions of 10 records) and consumer group ``g``, which
    committed t-0 at 4 and t-1 at 7 and then left (Empty)."""
    path = tmp_path / "data"
    with LogManager([str(path)]) as store:
        fill(store)
        with Consumer(store, "g", ["t"], **CONSUMER) as consumer:
            consume(consumer, 20)
            consumer.commit({("t", 0): 4, ("t", 1): 7})
    return path


# --- list and describe ---------------------------------------------------------------------------


def test_list_and_describe_a_live_group_with_lag_right_after_appends(tmp_path):
    path = tmp_path / "data"
    with LogManager([str(path)]) as store:
        fill(store)
        store.create_topic("other")
        with Consumer(store, "g", ["t"], client_id="billing", **CONSUMER) as consumer:
            consume(consumer, 20)
            consumer.commit({("t", 0): 4, ("t", 1): 7})
            # The store is open here (this process holds the lock): the CLI reads a read-only view.
            listed = ok(run(path, "groups", "list")).stdout
            assert rows(listed) == [["GROUP", "PROTOCOL-TYPE", "STATE"], ["g", "consumer", "Stable"]]
            assert json.loads(ok(run(path, "groups", "list", "--json")).stdout) == [
                {"group_id": "g", "protocol_type": "consumer", "state": "Stable"}]
            text = ok(run(path, "groups", "describe", "g")).stdout
            lines = text.splitlines()
            assert lines[0] == "Group g: state Stable, generation 1, protocol consumer/range, 1 member"
            assert [consumer.member_id, "-", "billing", "in-process", "t-0,t-1"] in rows(text)
            assert ["t", "0", "4", "10", "6", consumer.member_id] in rows(text)
            assert ["t", "1", "7", "10", "3", consumer.member_id] in rows(text)
            assert lines[-1].startswith("Members are those of the group's last record")

            store.append("t", [Record(key=b"k", value=b"more") for _ in range(5)], partition=0)
            data = described(path)
            assert data["state"] == "Stable" and data["protocol_name"] == "range"
            assert data["members"] == [{"member_id": consumer.member_id, "group_instance_id": None,
                                        "client_id": "billing", "client_host": "in-process",
                                        "partitions": [["t", 0], ["t", 1]],
                                        "assignment_bytes": len(consumer.coordinator.describe_group("g")
                                                                .members[0].assignment)}]
            lags = [(p["partition"], p["committed_offset"], p["log_end_offset"], p["lag"]) for p in data["partitions"]]
            assert lags == [(0, 4, 15, 11), (1, 7, 10, 3)]
    # Stopped, after the consumer left: Empty, no members, the same offsets.
    text = ok(run(path, "groups", "describe", "g")).stdout
    assert text.splitlines()[0] == "Group g: state Empty, generation 2, protocol consumer, 0 members"
    assert ["t", "0", "4", "15", "11", "-"] in rows(text) and "Members are" not in text
    assert rows(ok(run(path, "groups", "list")).stdout)[1] == ["g", "consumer", "Empty"]


def test_describe_an_unknown_group_and_list_a_store_without_groups(tmp_path):
    path = tmp_path / "data"
    with LogManager([str(path)]) as store:
        fill(store)
    assert ok(run(path, "groups", "list")).stdout == "No groups.\n"
    assert json.loads(ok(run(path, "groups", "list", "--json")).stdout) == []
    one_line_error(run(path, "groups", "describe", "nope"), "group 'nope' does not exist", "GROUP_ID_NOT_FOUND")
    with LogManager([str(path)], read_only=True) as store:
        assert formats.OFFSETS_TOPIC not in store.topics(), "read-only commands create nothing"


def test_group_settings_go_to_the_coordinator_and_unknown_keys_are_still_refused(empty_group):
    with LogManager([str(empty_group)], read_only=True) as store:
        assert store.partitions(formats.OFFSETS_TOPIC) == 3
    one_line_error(run(empty_group, "--set", "offsets.retention.minutes=0", "groups", "list"),
                   "offsets.retention.minutes")
    one_line_error(run(empty_group, "--set", "no.such.key=1", "groups", "list"), "no.such.key")


# --- reset-offsets -------------------------------------------------------------------------------


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat()


@pytest.mark.parametrize("args, expected", [
    (["--to-earliest"], {0: 3, 1: 0}),
    (["--to-latest"], {0: 10, 1: 10}),
    (["--to-offset", 6], {0: 6, 1: 6}),
    (["--to-offset", 1], {0: 3, 1: 1}),  # below t-0's log start (3): moved to it
    (["--to-offset", 99], {0: 10, 1: 10}),  # past the log end: moved to it
    (["--to-datetime", iso(BASE_MS + 5000)], {0: 5, 1: 5}),
    (["--to-datetime", iso(BASE_MS + 4500)], {0: 5, 1: 5}),  # the first record at or after the time
    (["--to-datetime", iso(BASE_MS + 60_000)], {0: 10, 1: 10}),  # none after it: the log end
    (["--shift-by", 2], {0: 6, 1: 9}),
    (["--shift-by", -3], {0: 3, 1: 4}),  # t-0: 4 - 3 = 1, below its log start
    (["--shift-by", 5], {0: 9, 1: 10}),  # t-1: 7 + 5 = 12, past its log end
])
def test_reset_offsets_dry_run_then_execute(empty_group, args, expected):
    with LogManager([str(empty_group)]) as store:
        store.get_log("t", 0).delete_records(3)
    before = committed(empty_group)
    assert before == {("t", 0): 4, ("t", 1): 7}
    dry = ok(run(empty_group, "groups", "reset-offsets", "g", "--topic", "t", *args)).stdout.splitlines()
    assert rows("\n".join(dry[:-1])) == [["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
                                         ["t", "0", "4", str(expected[0])], ["t", "1", "7", str(expected[1])]]
    assert dry[-1] == "Dry run: nothing committed (add --execute to commit these offsets)."
    assert committed(empty_group) == before
    done = ok(run(empty_group, "groups", "reset-offsets", "g", "--topic", "t", *args, "--execute")).stdout.splitlines()
    assert done[:-1] == dry[:-1] and done[-1] == "Committed 2 offsets for group g."
    assert committed(empty_group) == {("t", 0): expected[0], ("t", 1): expected[1]}
    # The commit is in __consumer_offsets: the group's partition ends with one record per partition.
    with LogManager([str(empty_group)], read_only=True) as store:
        log = store.get_log(formats.OFFSETS_TOPIC, formats.partition_for("g", 3))
        last = list(log.iter_records())[-2:]
    assert [(formats.decode_key(r.key).partition, formats.decode_offset_value(r.value).offset) for r in last] \
        == [(0, expected[0]), (1, expected[1])]


def test_reset_offsets_of_listed_partitions_several_topics_and_a_new_group(empty_group):
    with LogManager([str(empty_group)]) as store:
        fill(store, "u", partitions=3, count=4)
    out = ok(run(empty_group, "groups", "reset-offsets", "g", "--topic", "t:1", "--topic", "u:0,2", "--topic", "u:2",
                 "--to-latest", "--execute")).stdout
    assert rows(out)[1:4] == [["t", "1", "7", "10"], ["u", "0", "-", "4"], ["u", "2", "-", "4"]]
    assert committed(empty_group) == {("t", 0): 4, ("t", 1): 10, ("u", 0): 4, ("u", 2): 4}
    # A group that does not exist yet is created by the commit (as Kafka's tool does).
    ok(run(empty_group, "groups", "reset-offsets", "fresh", "--topic", "t", "--to-offset", 2, "--execute"))
    assert committed(empty_group, "fresh") == {("t", 0): 2, ("t", 1): 2}
    assert ["fresh", "-", "Empty"] in rows(ok(run(empty_group, "groups", "list")).stdout)


def test_reset_offsets_refusals_are_one_line(empty_group):
    reset = ("groups", "reset-offsets", "g", "--topic")
    one_line_error(run(empty_group, *reset, "t"), "exactly one of --to-earliest", exit_code=2)
    one_line_error(run(empty_group, *reset, "t", "--to-earliest", "--to-latest"), "exactly one of", exit_code=2)
    one_line_error(run(empty_group, *reset, "t:5", "--to-earliest"), "no partition 5")
    one_line_error(run(empty_group, *reset, "t:x", "--to-earliest"), "t:x")
    one_line_error(run(empty_group, *reset, "nope", "--to-earliest"), "nope")
    one_line_error(run(empty_group, *reset, "t", "--to-datetime", "yesterday"), "--to-datetime", "yesterday", "ISO 8601",
                   exit_code=2)
    one_line_error(run(empty_group, "groups", "reset-offsets", "other", "--topic", "t", "--shift-by", 1),
                   "cannot shift t-0", "no committed offset")
    assert committed(empty_group) == {("t", 0): 4, ("t", 1): 7}


# --- a group with members in a stopped store -----------------------------------------------------


def test_a_member_left_in_a_stopped_store_blocks_every_write(tmp_path):
    """A static member does not leave on close: the group's last record keeps it, so a CLI run sees a
    Stable group with one member, and every write is refused without printing or committing anything."""
    path = tmp_path / "data"
    with LogManager([str(path)]) as store:
        fill(store)
        with Consumer(store, "g", ["t"], group_instance_id="worker-1", **CONSUMER) as consumer:
            consume(consumer, 20)
            consumer.commit({("t", 0): 4, ("t", 1): 7})
    text = ok(run(path, "groups", "describe", "g")).stdout
    assert "state Stable" in text and "worker-1" in text and "Members are those of the group's last record" in text
    for args in (["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest"],
                 ["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--execute"]):
        result = run(path, *args)
        one_line_error(result, "group 'g' has 1 member (state Stable)", "stop its consumers", "NON_EMPTY_GROUP")
        assert result.stdout == ""
    # Reading without joining (a partition given) is refused; joining would wait out the member's
    # session, as a Kafka consumer joining such a group does.
    result = run(path, "read", "t", "--group", "g", "--partition", "0")
    one_line_error(result, "group 'g' has 1 member", "before reading as the group", "NON_EMPTY_GROUP")
    assert result.stdout == ""
    one_line_error(run(path, "groups", "delete", "g"), "cannot delete group 'g'", "NON_EMPTY_GROUP")
    assert committed(path) == {("t", 0): 4, ("t", 1): 7}
    # The way out on a stopped store: remove the members the last record holds.
    one_line_error(run(path, "groups", "remove-members", "g", "--member", "nobody"), "no member 'nobody'",
                   "UNKNOWN_MEMBER_ID")
    one_line_error(run(path, "groups", "remove-members", "nothing"), "does not exist", "GROUP_ID_NOT_FOUND")
    assert ok(run(path, "groups", "remove-members", "g")).stdout == "Removed 1 member from group g.\n"
    assert described(path)["state"] == "Empty" and described(path)["members"] == []
    ok(run(path, "groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--execute"))
    assert committed(path) == {("t", 0): 0, ("t", 1): 0}


# --- delete --------------------------------------------------------------------------------------


def test_delete_an_empty_group_then_it_is_gone(empty_group):
    assert ok(run(empty_group, "groups", "delete", "g")).stdout == "Deleted group g.\n"
    assert ok(run(empty_group, "groups", "list")).stdout == "No groups.\n"
    one_line_error(run(empty_group, "groups", "delete", "g"), "does not exist", "GROUP_ID_NOT_FOUND")
    one_line_error(run(empty_group, "groups", "describe", "g"), "GROUP_ID_NOT_FOUND")


def test_refusals_in_a_store_that_never_had_groups_create_nothing(tmp_path):
    path = tmp_path / "data"
    with LogManager([str(path)]) as store:
        fill(store)
    one_line_error(run(path, "groups", "delete", "g"), "GROUP_ID_NOT_FOUND")
    one_line_error(run(path, "groups", "reset-offsets", "g", "--topic", "nope", "--to-earliest", "--execute"), "nope")
    one_line_error(run(path, "groups", "reset-offsets", "g", "--topic", "t:2", "--to-earliest", "--execute"),
                   "no partition 2")
    one_line_error(run(path, "read", "nope", "--group", "g"), "nope")
    with LogManager([str(path)], read_only=True) as store:
        assert formats.OFFSETS_TOPIC not in store.topics()


def test_compacting_consumer_offsets_keeps_every_group_as_it_was(empty_group):
    """__consumer_offsets is a compacted topic like any other: the store's cleaner keeps the last
    record per key, and the replay of what is left gives the same groups."""
    for _ in range(30):
        ok(run(empty_group, "groups", "reset-offsets", "g", "--topic", "t", "--shift-by", -1, "--execute"))
        ok(run(empty_group, "groups", "reset-offsets", "g", "--topic", "t", "--shift-by", 1, "--execute"))
    ok(run(empty_group, "read", "t", "--group", "reader", "--max-records", 3))
    before = described(empty_group), described(empty_group, "reader")
    with LogManager([str(empty_group)], config={"log.cleaner.enable": False}) as store:
        partition = formats.partition_for("g", 3)
        store.alter_topic_config(formats.OFFSETS_TOPIC, {"segment.bytes": 1024})
        log = store.get_log(formats.OFFSETS_TOPIC, partition)
        log.roll()
        count = sum(1 for _ in log.iter_records())
        store.compact(formats.OFFSETS_TOPIC, partition)
        assert sum(1 for _ in log.iter_records()) < count / 10
    assert (described(empty_group), described(empty_group, "reader")) == before


# --- read --group --------------------------------------------------------------------------------


def test_read_group_continues_where_the_last_read_stopped(tmp_path):
    path = tmp_path / "data"
    with LogManager([str(path)]) as store:
        fill(store, count=5)
    lines = lambda result: [json.loads(line) for line in ok(result).stdout.splitlines()]  # noqa: E731
    first = lines(run(path, "read", "t", "--group", "r", "--max-records", 3))
    second = lines(run(path, "read", "t", "--group", "r", "--max-records", 4))
    assert [(r["partition"], r["offset"]) for r in first] == [(0, 0), (0, 1), (0, 2)]
    assert [(r["partition"], r["offset"]) for r in second] == [(0, 3), (0, 4), (1, 0), (1, 1)]
    # The same lines `logstore read` prints for those records.
    plain = lines(run(path, "read", "t", group_settings=False))
    assert first + second == plain[:7]
    assert committed(path, "r") == {("t", 0): 5, ("t", 1): 2}
    rest = ok(run(path, "read", "t", "--group", "r", "--format", "value")).stdout
    assert rest == "1-2\n1-3\n1-4\n"
    assert ok(run(path, "read", "t", "--group", "r")).stdout == ""  # nothing new: nothing printed
    assert committed(path, "r") == {("t", 0): 5, ("t", 1): 5}
    # New records, one partition: only they are printed, and only that partition's offset moves.
    with LogManager([str(path)]) as store:
        store.append("t", [Record(key=b"k", value=b"new")], partition=1)
    assert ok(run(path, "read", "t", "--group", "r", "--partition", 1, "--format", "value")).stdout == "new\n"
    assert committed(path, "r") == {("t", 0): 5, ("t", 1): 6}


def test_read_group_starts_at_the_log_start_below_a_deleted_commit(empty_group):
    with LogManager([str(empty_group)]) as store:
        store.get_log("t", 0).delete_records(6)  # the group's committed 4 is gone
    out = ok(run(empty_group, "read", "t", "--group", "g", "--partition", 0, "--format", "value")).stdout
    assert out == "0-6\n0-7\n0-8\n0-9\n"
    assert committed(empty_group)[("t", 0)] == 10


def test_read_group_usage_errors(empty_group):
    one_line_error(run(empty_group, "read", "t", "--group", "g", "--partition", 0, "--follow"), "--follow",
                   exit_code=2)
    one_line_error(run(empty_group, "read", "t", "--group", "g", "--from-beginning"), "--group", exit_code=2)
    one_line_error(run(empty_group, "read", "t", "--group", "g", "--partition", 0, "--offset", 1), "--group",
                   exit_code=2)
    one_line_error(run(empty_group, "read", "t", "--group", "g", "--partition", 9), "9")
    assert committed(empty_group) == {("t", 0): 4, ("t", 1): 7}


# --- a store held by another process -------------------------------------------------------------

HOLDER = """
import sys, time
from logstore import LogManager
from logstore.group.consumer import Consumer
with LogManager([sys.argv[1]]) as store:
    with Consumer(store, "live", ["t"], client_id="holder", coordinator_config={
            "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3},
            session_timeout_ms=6000, heartbeat_interval_ms=100) as consumer:
        got, deadline = [], time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            got += consumer.poll(200)
        consumer.commit({("t", 0): 3, ("t", 1): 5})
        print("ready", len(got), flush=True)
        sys.stdin.readline()
"""


def test_a_store_held_by_another_process_reads_but_refuses_writes(tmp_path, empty_group):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(empty_group)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path))
    watchdog = threading.Timer(90, holder.kill)  # a hung holder fails the test, never the run
    watchdog.start()
    try:
        assert holder.stdout.readline() == "ready 20\n", holder.stderr.read() if holder.poll() is not None else ""
        listed = rows(ok(run(empty_group, "groups", "list")).stdout)
        assert ["g", "consumer", "Empty"] in listed and ["live", "consumer", "Stable"] in listed
        text = ok(run(empty_group, "groups", "describe", "live")).stdout
        assert "state Stable" in text and "holder" in text
        assert any(row[:5] == ["t", "0", "3", "10", "7"] for row in rows(text))
        # A dry run reads only: it works here, for a group without members.
        assert rows(ok(run(empty_group, "groups", "reset-offsets", "g", "--topic", "t", "--to-earliest")).stdout)[1] \
            == ["t", "0", "4", "0"]
        for args in (["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--execute"],
                     ["groups", "delete", "g"], ["read", "t", "--group", "g"]):
            result = run(empty_group, *args)
            one_line_error(result, "is locked by process", str(holder.pid))
            assert result.stdout == ""
    finally:
        if holder.poll() is None:
            holder.stdin.write("\n")
            holder.stdin.flush()
        assert holder.wait(30) == 0, holder.stderr.read()
        watchdog.cancel()
    assert committed(empty_group) == {("t", 0): 4, ("t", 1): 7}
    assert committed(empty_group, "live") == {("t", 0): 3, ("t", 1): 5}
