"""``GroupAdmin`` through its API: the parsers of the CLI's arguments, and the refusal to run a second
coordinator over a store whose consumers' coordinator runs in this process. (The rest is exercised
through the CLI in tests/cli/test_groups_cli.py.)"""

from __future__ import annotations

import datetime

import pytest

from logstore import LogManager, Record, RequestError
from logstore.group.admin import GroupAdmin, parse_datetime_ms, parse_topic_partitions
from logstore.group.consumer import Consumer

FAST = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}


def test_parse_topic_partitions():
    assert parse_topic_partitions("orders") == ("orders", None)
    assert parse_topic_partitions("orders:2,0,2") == ("orders", [0, 2])
    for bad in ("", ":1", "orders:", "orders:a", "orders:-1"):
        with pytest.raises(ValueError):
            parse_topic_partitions(bad)


def test_parse_datetime_ms():
    assert parse_datetime_ms("2024-05-01T12:00:00Z") == 1714564800000
    assert parse_datetime_ms("2024-05-01T14:00:00.250+02:00") == 1714564800250
    local = datetime.datetime(2024, 5, 1, 12, 0).astimezone()
    assert parse_datetime_ms("2024-05-01T12:00:00") == int(local.timestamp() * 1000)
    with pytest.raises(ValueError, match="ISO 8601"):
        parse_datetime_ms("yesterday")


def test_a_store_served_by_a_running_coordinator_is_refused(tmp_path):
    with LogManager([str(tmp_path / "data")]) as store:
        store.create_topic("t")
        store.append("t", [Record(value=b"x")])
        with Consumer(store, "g", ["t"], coordinator_config=FAST, session_timeout_ms=6000,
                      heartbeat_interval_ms=100) as consumer:
            consumer.poll(2000)
            with GroupAdmin(store) as admin, pytest.raises(RequestError, match="running coordinator"):
                admin.list_groups()
    # The consumers' coordinator stopped with its store: a GroupAdmin over the store reopened works.
    with GroupAdmin.open([str(tmp_path / "data")], FAST, read_only=True) as admin:
        assert [group.group_id for group in admin.list_groups()] == ["g"]
