"""An embedded consumer (``logstore.group.consumer.Consumer``) and a network consumer (kafka-python)
in one group: they share the topic's partitions and the group's committed offsets, because the
server and the application use the same coordinator of the same store.

The server binds 127.0.0.1 and is stopped by its fixture; every loop is bounded in time."""

from __future__ import annotations

import threading
import time

import pytest

from logstore import LogManager, Record
from logstore.group.consumer import Consumer
from logstore.group.coordinator import GroupCoordinator
from logstore.server.server import KafkaServer

kafka = pytest.importorskip("kafka")  # the clients extra; CI installs it

SETTINGS = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}


@pytest.fixture
def served(tmp_path):
    with LogManager([str(tmp_path / "data")]) as store:
        store.create_topic("shared", partitions=4)
        for partition in range(4):
            store.append("shared", [Record(value=f"{partition}:{i}".encode()) for i in range(5)], partition=partition)
        with KafkaServer(store, listen="127.0.0.1:0", config=SETTINGS) as server:
            yield server, store


def test_an_embedded_and_a_network_consumer_split_a_group_and_share_its_offsets(served):
    server, store = served
    embedded = Consumer(store, "mixed", ["shared"], coordinator=GroupCoordinator.of(store), assignors=["range"],
                        session_timeout_ms=10000, heartbeat_interval_ms=200, rebalance_timeout_ms=20000)
    remote = kafka.KafkaConsumer("shared", bootstrap_servers=server.bootstrap_servers, group_id="mixed",
                                 partition_assignment_strategy=[kafka.coordinator.assignors.range.RangePartitionAssignor],
                                 session_timeout_ms=10000, heartbeat_interval_ms=500, max_poll_interval_ms=20000,
                                 enable_auto_commit=False, auto_offset_reset="earliest", consumer_timeout_ms=200)
    stop = threading.Event()

    def run_embedded():
        while not stop.is_set():
            embedded.poll(100)

    thread = threading.Thread(target=run_embedded, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            remote.poll(200)
            held = {(tp.topic, tp.partition) for tp in remote.assignment()}
            if len(held) == 2 and len(embedded.assignment()) == 2:
                break
        else:
            pytest.fail(f"no 2/2 split: remote {remote.assignment()}, embedded {embedded.assignment()}")
        assert sorted(held | set(embedded.assignment())) == [("shared", p) for p in range(4)]
        # The network consumer commits its partitions; the embedded one sees the commits.
        remote.commit({kafka.TopicPartition(t, p): kafka.OffsetAndMetadata(3, "", -1) for t, p in held})
        for key in held:
            assert embedded.committed(*key) == 3
    finally:
        stop.set()
        thread.join(10)
        remote.close()
        embedded.close()
