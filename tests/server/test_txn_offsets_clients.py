"""A real client against offsets a transaction holds: librdkafka (confluent-kafka), whose consumer
reads with ``isolation.level=read_committed`` by default and so asks OffsetFetch v7 for stable
offsets (KIP-447). While a transaction holds an offset for its partition the server answers
UNSTABLE_OFFSET_COMMIT and the consumer keeps asking; once the transaction commits it starts from
the transaction's offset, never from the older commit it replaces.

The server binds 127.0.0.1 and is stopped by its fixture; every wait is bounded.
"""

from __future__ import annotations

import time

import pytest

from logstore import LogManager, Record
from logstore.group.coordinator import GroupCoordinator
from logstore.group.formats import OFFSETS_TOPIC
from logstore.group.results import OffsetCommit
from logstore.server.server import KafkaServer

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

PID = 9100
SETTINGS = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}


@pytest.fixture
def running(tmp_path):
    with LogManager([str(tmp_path / "data")]) as store, \
            KafkaServer(store, listen="127.0.0.1:0", config=SETTINGS) as server:
        store.create_topic("in", partitions=1)
        store.append("in", [Record(key=b"k", value=b"v%d" % i) for i in range(10)], 0)
        yield server, store


def test_a_read_committed_consumer_waits_for_the_transaction_and_starts_from_its_offset(running):
    server, store = running
    coordinator = GroupCoordinator.running(store)
    key = ("in", 0)
    answers = []
    coordinator.commit_offsets("stable", -1, "", {key: OffsetCommit(2)}, callback=answers.append)
    assert coordinator.txn_offset_commit("stable", "tx", PID, 0, -1, "", None, {key: OffsetCommit(7)}) == {key: 0}
    deadline = time.monotonic() + 10
    while not answers and time.monotonic() < deadline:
        time.sleep(0.01)
    assert answers == [{key: 0}]

    unstable_answers = []
    real_unstable = coordinator.unstable_offsets

    def recording(group_id, partitions):
        found = real_unstable(group_id, partitions)
        if found:
            unstable_answers.append(found)
        return found

    coordinator.unstable_offsets = recording
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": server.bootstrap_servers, "group.id": "stable", "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
    try:
        consumer.assign([confluent_kafka.TopicPartition("in", 0)])  # starts from the committed offset
        deadline = time.monotonic() + 20
        while not unstable_answers and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            assert message is None or message.error() is not None, "consumed before the transaction ended"
        assert unstable_answers, "the consumer never asked for stable offsets"
        partition = coordinator.partition_for("stable")
        log = store.get_log(OFFSETS_TOPIC, partition)
        offset = log.append_marker(PID, 0, 0, True)
        log.flush()
        coordinator.complete_transaction(partition, PID, True, offset)
        first = None
        deadline = time.monotonic() + 20
        while first is None and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                first = message
        assert first is not None and first.offset() == 7
    finally:
        consumer.close()
        del coordinator.unstable_offsets
