"""Real clients grow topics (CreatePartitions) and follow them: each admin client (kafka-python,
confluent-kafka, aiokafka, kafkajs; kcat has none) adds partitions, validate_only changes nothing and
a count that is no increase is INVALID_PARTITIONS; a live confluent-kafka producer, producing while
the topic grows, starts writing to the new partitions; kafka-python group members get the new
partitions assigned after the growth (their leader sees the new count and the group rebalances)."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import logstore_only

from clients import ClientError
from clients.registry import ADMINS
from logstore import Record

pytestmark = pytest.mark.kafka_clients


@logstore_only("the store's partition counts are checked")
@pytest.mark.parametrize("driver", ADMINS, indirect=True)
def test_admin_clients_grow_a_topic(broker, driver, topic):
    broker.create_topic(topic, 2)
    broker.store.append(topic, [Record(b"k", b"kept")], partition=1)
    driver.create_partitions(broker.bootstrap_servers, topic, 4, validate_only=True)
    assert broker.store.partitions(topic) == 2
    driver.create_partitions(broker.bootstrap_servers, topic, 4)
    assert broker.store.partitions(topic) == 4
    assert [r.value for r in broker.store.read(topic, 1, 0)] == [b"kept"]
    with pytest.raises(ClientError) as refused:
        driver.create_partitions(broker.bootstrap_servers, topic, 3)
    assert refused.value.error == "INVALID_PARTITIONS"
    with pytest.raises(ClientError) as unknown:
        driver.create_partitions(broker.bootstrap_servers, topic + "-missing", 3)
    assert unknown.value.error == "UNKNOWN_TOPIC_OR_PARTITION"
    assert broker.store.partitions(topic) == 4


@logstore_only("the store's partition counts are checked")
@pytest.mark.parametrize("driver", ["kafka-python", "confluent-kafka"], indirect=True)
def test_an_assignment_to_this_broker_is_taken_and_to_another_refused(broker, driver, topic):
    broker.create_topic(topic, 1)
    with pytest.raises(ClientError) as refused:
        driver.create_partitions(broker.bootstrap_servers, topic, 2, assignments=[[7]])
    assert refused.value.error == "INVALID_REPLICA_ASSIGNMENT"
    node = 0  # the broker's node.id (the default)
    driver.create_partitions(broker.bootstrap_servers, topic, 3, assignments=[[node], [node]])
    assert broker.store.partitions(topic) == 3


@logstore_only("the topic is grown through the store")
def test_a_live_confluent_producer_writes_to_partitions_added_while_it_produces(broker, topic):
    from confluent_kafka import Producer

    broker.create_topic(topic, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0,
                         "topic.metadata.refresh.interval.ms": 100, "partitioner": "random"})
    delivered: list[int] = []
    failures: list = []

    def on_delivery(err, msg):
        (failures.append(err) if err else delivered.append(msg.partition()))

    try:
        for _ in range(20):
            producer.produce(topic, b"v", on_delivery=on_delivery)
        producer.flush(30)
        assert set(delivered) <= {0, 1} and not failures
        broker.store.create_partitions(topic, 4)
        deadline = time.monotonic() + 30
        sent = 0
        while time.monotonic() < deadline and not {2, 3} <= set(delivered) and sent < 5000:
            producer.produce(topic, b"v", on_delivery=on_delivery)
            sent += 1
            producer.poll(0.01)
        producer.flush(30)
    finally:
        producer.flush(10)
    assert {2, 3} <= set(delivered) and not failures
    assert broker.store.get_log(topic, 3).log_end_offset == delivered.count(3)


# A poll (in which kafka-python rejoins) longer than a rebalance of two members on a loaded host
# (heartbeat 100 ms, a rejoin each): see the test.
REBALANCE_POLL_MS = 5000


@logstore_only("the topic is grown through the store")
def test_kafka_python_group_members_get_the_new_partitions(group_broker, topic):
    from kafka import KafkaConsumer

    group_broker.create_topic(topic, 2)
    settings = dict(bootstrap_servers=group_broker.bootstrap_servers, group_id=f"{topic}-g",
                    auto_offset_reset="earliest", metadata_max_age_ms=200, heartbeat_interval_ms=100,
                    session_timeout_ms=6000, max_poll_interval_ms=10_000, consumer_timeout_ms=100)
    consumers = [KafkaConsumer(topic, **settings) for _ in range(2)]
    # kafka-python 3.0.12 loses a leader's rejoin that its snapshot of the topic's metadata started
    # (the leader's assignment in flight makes need_rejoin() false) when a poll's timeout ends during
    # the rejoin: that member never takes its new assignment and keeps its old partitions. So the
    # members get the topic's metadata before their first join (no rejoin at start: what members
    # of a long-lived topic have), and each poll may wait for a whole rebalance (growing the topic
    # does make the leader rejoin; the rebalance is done within one poll, not across two).
    for consumer in consumers:
        assert consumer.partitions_for_topic(topic) == {0, 1}
    stop = threading.Event()
    got: list = []

    def keep_polling(consumer) -> None:
        while not stop.is_set():
            for records in consumer.poll(timeout_ms=REBALANCE_POLL_MS).values():
                got.extend(records)

    threads = [threading.Thread(target=keep_polling, args=(c,)) for c in consumers]

    def assigned():
        return sorted((tp.topic, tp.partition) for c in consumers for tp in c.assignment())

    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and assigned() != [(topic, 0), (topic, 1)]:
            time.sleep(0.05)
        assert assigned() == [(topic, 0), (topic, 1)]
        group_broker.store.create_partitions(topic, 4)
        group_broker.store.append(topic, [Record(None, b"in-3")], partition=3)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
                assigned() == [(topic, p) for p in range(4)] and any(r.partition == 3 for r in list(got))):
            time.sleep(0.05)
        assert assigned() == [(topic, p) for p in range(4)]
        assert [r.value for r in list(got) if r.partition == 3] == [b"in-3"]
    finally:
        stop.set()
        for thread in threads:
            if thread.is_alive():
                thread.join(30)
        for consumer in consumers:
            consumer.close()
