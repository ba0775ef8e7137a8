"""``logstore read --isolation`` and ``logstore dump`` / ``check`` on a store with real transactions
(written with ``Log.append(producer=...)`` and ``Log.append_marker``): read_committed prints only
committed records up to the last stable offset, read_uncommitted (the default) aborted and open
ones too, and neither ever prints a marker."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.cli.main import main
from logstore.records.batching import ProducerBatch

COMMITTED = ["plain-0", "committed-1", "committed-2", "plain-6"]
EVERYTHING = ["plain-0", "committed-1", "committed-2", "aborted-4", "plain-6", "open-7", "plain-8"]


def run(store_dir, *args):
    return CliRunner().invoke(main, ["--dir", str(store_dir), *map(str, args)])


def values(result):
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exc_info)
    return [json.loads(line)["value"] for line in result.stdout.splitlines()]


@pytest.fixture
def store_dir(tmp_path):
    """``t-0``: plain 0, producer 1 committed 1..2 (COMMIT at 3), producer 2 aborted 4 (ABORT at 5),
    plain 6, producer 3's transaction open from 7, plain 8: LSO 7, LEO 9."""
    path = tmp_path / "store"
    with LogManager([str(path)]) as store:
        store.create_topic("t", partitions=1)
        log = store.get_log("t", 0)
        log.append([Record(value=b"plain-0")])
        log.append([Record(value=b"committed-1"), Record(value=b"committed-2")], producer=ProducerBatch(1, 0, 0, True))
        log.append_marker(1, 0, 0, True)
        log.append([Record(value=b"aborted-4")], producer=ProducerBatch(2, 0, 0, True))
        log.append_marker(2, 0, 0, False)
        log.append([Record(value=b"plain-6")])
        log.append([Record(value=b"open-7")], producer=ProducerBatch(3, 0, 0, True))
        log.append([Record(value=b"plain-8")])
    return path


def test_read_uncommitted_is_the_default_and_prints_no_marker(store_dir):
    assert values(run(store_dir, "read", "t")) == EVERYTHING
    assert values(run(store_dir, "read", "t", "--isolation", "read_uncommitted")) == EVERYTHING


def test_read_committed_prints_committed_records_up_to_the_last_stable_offset(store_dir):
    assert values(run(store_dir, "read", "t", "--isolation", "read_committed")) == COMMITTED
    # from an offset inside the aborted transaction, and one record at a time past the markers
    assert values(run(store_dir, "read", "t", "-p", "0", "--offset", "4", "--isolation", "read_committed")) == \
        ["plain-6"]
    assert values(run(store_dir, "read", "t", "--max-records", "3", "--isolation", "read_committed")) == COMMITTED[:3]
    # -N counts back from the end this reader sees: the last stable offset
    assert values(run(store_dir, "read", "t", "--offset", "-2", "--isolation", "read_committed")) == ["plain-6"]


def test_a_group_read_commits_past_the_markers(store_dir):
    first = run(store_dir, "read", "t", "-p", "0", "--group", "g", "--isolation", "read_committed")
    assert values(first) == COMMITTED
    with LogManager([str(store_dir)]) as store:
        store.get_log("t", 0).append_marker(3, 0, 0, False)  # the open transaction aborts: 7 is never shown
    assert values(run(store_dir, "read", "t", "-p", "0", "--group", "g", "--isolation", "read_committed")) == \
        ["plain-8"]
    offsets = json.loads(run(store_dir, "groups", "describe", "g", "--format", "json").stdout)
    assert [(p["partition"], p["committed_offset"]) for p in offsets["partitions"]] == [(0, 10)]


def test_an_unknown_isolation_is_a_usage_error(store_dir):
    result = run(store_dir, "read", "t", "--isolation", "serializable")
    assert result.exit_code == 2 and "'serializable' is not one of" in result.stderr


def test_dump_and_check_of_a_transactional_store(store_dir):
    dumped = run(store_dir, "dump", store_dir / "t-0" / "00000000000000000000.log")
    assert dumped.exit_code == 0
    lines = [line for line in dumped.stdout.splitlines() if line.startswith("position: ")]
    assert [line.split(" producer=")[1].split(" crc:")[0] for line in lines if " producer=" in line] == [
        "1/0 seq=0 txn", "1/0 seq=-1 txn COMMIT marker coordinator_epoch=0", "2/0 seq=0 txn",
        "2/0 seq=-1 txn ABORT marker coordinator_epoch=0", "3/0 seq=0 txn"]
    checked = run(store_dir, "check")
    assert checked.exit_code == 0, checked.stdout + checked.stderr
    assert "0 errors" in checked.stdout


def test_over_a_broker_isolation_sets_the_consumers_isolation_level(tmp_path):
    pytest.importorskip("logstore.server.server")
    from logstore.server.server import KafkaServer

    with LogManager([str(tmp_path / "store")]) as store:
        store.create_topic("t", partitions=1)
        log = store.get_log("t", 0)
        log.append([Record(value=b"plain-0")])
        log.append([Record(value=b"aborted-1")], producer=ProducerBatch(2, 0, 0, True))
        log.append_marker(2, 0, 0, False)
        log.append([Record(value=b"committed-3")], producer=ProducerBatch(1, 0, 0, True))
        log.append_marker(1, 0, 0, True)
        log.append([Record(value=b"open-5")], producer=ProducerBatch(3, 0, 0, True))
        log.append([Record(value=b"plain-6")])
        with KafkaServer(store, listen=["127.0.0.1:0"]) as server:
            broker = ["--bootstrap-server", server.bootstrap_servers]
            committed = CliRunner().invoke(main, [*broker, "read", "t", "--isolation", "read_committed"])
            assert values(committed) == ["plain-0", "committed-3"]
            everything = CliRunner().invoke(main, [*broker, "read", "t"])
            assert values(everything) == ["plain-0", "aborted-1", "committed-3", "open-5", "plain-6"]
