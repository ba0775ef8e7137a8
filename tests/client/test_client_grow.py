"""A topic that grows under our own clients: ``BrokerAdmin.create_partitions`` and the CLI's ``topics
alter --partitions`` over a broker; our producer partitions by the new count once its metadata is
``metadata.max.age.ms`` old; our group's leader notices the new count and rejoins, so the group
rebalances and the new partitions are assigned."""

from __future__ import annotations

import json
import threading
import time

import pytest
from click.testing import CliRunner

from logstore import Record
from logstore.cli.main import main
from logstore.client import Consumer, Producer
from logstore.client.admin import BrokerAdmin
from logstore.client.errors import BrokerResponseError
from logstore.client.partitioner import partition_for_key


def test_broker_admin_and_the_cli_grow_a_topic(server):
    server.store.create_topic("grown-admin", 2)
    with BrokerAdmin(server.bootstrap_servers) as admin:
        admin.create_partitions("grown-admin", 3, validate_only=True)
        assert admin.partitions("grown-admin") == 2
        admin.create_partitions("grown-admin", 3)
        assert admin.partitions("grown-admin") == 3
        with pytest.raises(BrokerResponseError, match="INVALID_PARTITIONS"):
            admin.create_partitions("grown-admin", 3)
    result = CliRunner().invoke(main, ["--bootstrap-server", server.bootstrap_servers, "topics", "alter",
                                       "grown-admin", "--partitions", "5"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"topic": "grown-admin", "partitions": 5, "overrides": {}}
    assert server.store.partitions("grown-admin") == 5
    refused = CliRunner().invoke(main, ["--bootstrap-server", server.bootstrap_servers, "topics", "alter",
                                        "grown-admin", "--partitions", "4"])
    assert refused.exit_code == 1 and "INVALID_PARTITIONS" in refused.stderr and "Traceback" not in refused.output
    assert len(refused.stderr.strip().splitlines()) == 1


def test_our_producer_writes_to_new_partitions_once_its_metadata_is_old(server):
    server.store.create_topic("grown-produce", 3)
    key = next(k for k in (b"key-%d" % i for i in range(1000)) if partition_for_key(k, 6) >= 3)
    with Producer(bootstrap_servers=server.bootstrap_servers, linger_ms=0, metadata_max_age_ms=0) as producer:
        before = producer.send("grown-produce", b"before", key=key).result(30)
        assert before.partition == partition_for_key(key, 3)
        server.store.create_partitions("grown-produce", 6)
        after = producer.send("grown-produce", b"after", key=key).result(30)
    assert after.partition == partition_for_key(key, 6)
    assert [r.value for r in server.store.read("grown-produce", after.partition, 0)] == [b"after"]


def test_a_producer_with_the_default_age_keeps_the_count_it_knows(server):
    """The control: metadata younger than ``metadata.max.age.ms`` is not asked for again."""
    server.store.create_topic("grown-young", 3)
    key = next(k for k in (b"key-%d" % i for i in range(1000)) if partition_for_key(k, 6) >= 3)
    with Producer(bootstrap_servers=server.bootstrap_servers, linger_ms=0) as producer:
        producer.send("grown-young", b"before", key=key).result(30)
        server.store.create_partitions("grown-young", 6)
        assert producer.send("grown-young", b"after", key=key).result(30).partition == partition_for_key(key, 3)


def test_our_group_rebalances_when_a_subscribed_topic_grows(server):
    server.store.create_topic("grown-group", 2)
    settings = dict(bootstrap_servers=server.bootstrap_servers, group_id="grown-g", auto_offset_reset="earliest",
                    heartbeat_interval_ms=100, session_timeout_ms=6000, max_poll_interval_ms=10_000,
                    metadata_max_age_ms=0)
    first, second = Consumer(**settings), Consumer(**settings)
    stop = threading.Event()
    got: list = []

    def keep_polling(consumer: Consumer) -> None:  # each member polls on its own, as its own process would
        while not stop.is_set():
            got.extend(consumer.poll(50))

    threads = [threading.Thread(target=keep_polling, args=(c,)) for c in (first, second)]
    try:
        first.subscribe(["grown-group"])
        second.subscribe(["grown-group"])
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (len(first.assignment()) == len(second.assignment()) == 1):
            time.sleep(0.05)
        assert sorted(first.assignment() + second.assignment()) == [("grown-group", 0), ("grown-group", 1)]
        server.store.create_partitions("grown-group", 4)
        server.store.append("grown-group", [Record(None, b"in-3")], partition=3)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
                sorted(first.assignment() + second.assignment()) == [("grown-group", p) for p in range(4)]
                and any(r.partition == 3 for r in list(got))):
            time.sleep(0.05)
        assert sorted(first.assignment() + second.assignment()) == [("grown-group", p) for p in range(4)]
        assert len(first.assignment()) == len(second.assignment()) == 2
        assert [r.value for r in list(got) if r.partition == 3] == [b"in-3"]
    finally:
        stop.set()
        for thread in threads:
            if thread.is_alive():
                thread.join(30)
        first.close()
        second.close()
