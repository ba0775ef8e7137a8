"""Real clients and the offsets of transactions: librdkafka (confluent-kafka), kafka-python, aiokafka.

- Its consumer reads with ``isolation.level=read_committed`` by default and so asks OffsetFetch v7
  for stable offsets (KIP-447): while a transaction holds an offset for its partition the server
  answers UNSTABLE_OFFSET_COMMIT and the consumer keeps asking; once the transaction commits it
  starts from the transaction's offset, never from the older commit it replaces.
- Its producer's consume-transform-produce (``send_offsets_to_transaction`` with the consumer's
  group metadata: AddOffsetsToTxn, then TxnOffsetCommit v3) commits the offsets with the
  transaction, or drops them when it aborts; so do kafka-python's and aiokafka's transactional
  producers with a bare group id (no member: the pre-KIP-447 form).

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


def consume(consumer, count, deadline_s=30.0):
    """``count`` messages from a subscribed consumer, within a deadline only a failure meets."""
    got = []
    deadline = time.monotonic() + deadline_s
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            got.append(message)
    assert len(got) == count, f"consumed {len(got)} of {count}"
    return got


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_confluent_kafka_consume_transform_produce_commits_its_offsets_with_its_transaction(running, commit):
    """librdkafka's send_offsets_to_transaction (AddOffsetsToTxn, then TxnOffsetCommit v3 with the
    consumer's group metadata, KIP-447): the offsets become the group's committed offsets when the
    transaction commits, and are dropped when it aborts."""
    server, store = running
    store.create_topic("out", partitions=1)
    group = f"ctp-{commit}"
    coordinator = GroupCoordinator.running(store)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": server.bootstrap_servers, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers,
                                         "transactional.id": f"{group}-tx", "linger.ms": 0})
    try:
        consumer.subscribe(["in"])
        messages = consume(consumer, 4)
        producer.init_transactions(20)
        producer.begin_transaction()
        for message in messages:
            producer.produce("out", key=message.key(), value=message.value().upper())
        next_offset = messages[-1].offset() + 1
        producer.send_offsets_to_transaction([confluent_kafka.TopicPartition("in", 0, next_offset)],
                                             consumer.consumer_group_metadata(), 20)
        assert coordinator.unstable_offsets(group, [("in", 0)]) == {("in", 0)}  # pending until the marker
        if commit:
            producer.commit_transaction(20)
        else:
            producer.abort_transaction(20)
        # EndTxn is answered once the decision is durable; the markers (and so the offsets) follow.
        out = store.get_log("out", 0)
        deadline = time.monotonic() + 20
        while (coordinator.unstable_offsets(group, [("in", 0)]) or out.last_stable_offset < out.log_end_offset) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        assert coordinator.unstable_offsets(group, [("in", 0)]) == set()
        committed = coordinator.fetch_offsets(group, [("in", 0)])[1][("in", 0)]
        assert (committed.offset if committed is not None else None) == (next_offset if commit else None)
        written = out.read(0, isolation="read_committed")
        assert [record.value for record in written] == ([message.value().upper() for message in messages]
                                                         if commit else [])
    finally:
        consumer.close()


def kafka_python_transaction(bootstrap, group, offsets, commit):
    """kafka-python 3.x: a transaction holding ``offsets`` ({partition of "in": offset}) for
    ``group`` (a bare group id: TxnOffsetCommit without a member), committed or aborted."""
    import kafka
    from kafka.structs import OffsetAndMetadata

    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{group}-tx")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("out", b"x").get(timeout=20)
        producer.send_offsets_to_transaction(
            {kafka.TopicPartition("in", p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}, group)
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    finally:
        producer.close(timeout=5)


def aiokafka_transaction(bootstrap, group, offsets, commit):
    """aiokafka: the same through its transactional producer (TxnOffsetCommit v0)."""
    import asyncio

    import aiokafka
    from aiokafka.structs import OffsetAndMetadata

    async def run():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{group}-tx")
        await producer.start()
        try:
            await producer.begin_transaction()
            await producer.send_and_wait("out", b"x")
            await producer.send_offsets_to_transaction(
                {aiokafka.TopicPartition("in", p): OffsetAndMetadata(o, "") for p, o in offsets.items()}, group)
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), 60))


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
@pytest.mark.parametrize("client", [kafka_python_transaction, aiokafka_transaction], ids=["kafka-python", "aiokafka"])
def test_older_transactional_clients_commit_offsets_with_their_transaction(running, client, commit):
    server, store = running
    if "out" not in store.topics():
        store.create_topic("out", partitions=1)
    group = f"{client.__name__}-{commit}"
    coordinator = GroupCoordinator.running(store)
    client(server.bootstrap_servers, group, {0: 6}, commit)
    deadline = time.monotonic() + 20
    while coordinator.unstable_offsets(group, [("in", 0)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert coordinator.unstable_offsets(group, [("in", 0)]) == set()
    committed = coordinator.fetch_offsets(group, [("in", 0)])[1][("in", 0)]
    assert (committed.offset if committed is not None else None) == (6 if commit else None)
