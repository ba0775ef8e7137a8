"""Real clients' transactional producers against ``logstore serve``: confluent-kafka, kafka-python
and aiokafka commit and abort transactions across several partitions and topics, and a
read_committed consumer sees exactly the committed records (a read_uncommitted one sees the aborted
ones too, never a marker); consume-transform-produce commits the group's offsets with the
transaction (confluent-kafka's send_offsets_to_transaction); a second instance of a transactional id
fences the first (its commit fails in the client); kafka-python's admin client describes and lists
transactions and a partition's producers; kafka-python's and aiokafka's offsets in a
transaction are committed or dropped with it; a transaction left open past its
``transaction.timeout.ms`` is aborted by the server. Every wait is bounded by a deadline that only
a failure meets."""

from __future__ import annotations

import asyncio
import time
import uuid

import aiokafka
import confluent_kafka
import kafka
import pytest
from conftest import logstore_only, start_broker

pytestmark = [pytest.mark.kafka_clients, logstore_only("reads the markers and the coordinator of our server")]

DEADLINE_S = 30.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_topics(broker, count=2, partitions=2):
    return [broker.create_topic(unique("txn"), partitions=partitions) for _ in range(count)]


def read_all(broker, topics, isolation, partitions=2):
    """(topic, partition, value) of every record a confluent-kafka consumer with ``isolation``
    reads from the topics: it reads until its position in every partition reaches the end the store
    says it must reach (the last stable offset for read_committed, the log end otherwise)."""
    targets = {}
    for topic in topics:
        for index in range(partitions):
            log = broker.store.get_log(topic, index)
            targets[(topic, index)] = log.last_stable_offset if isolation == "read_committed" else log.log_end_offset
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": unique("reader"),
                                         "enable.auto.commit": False, "isolation.level": isolation,
                                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, index, confluent_kafka.OFFSET_BEGINNING)
                         for topic, index in targets])
        out = []
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                out.append((message.topic(), message.partition(), message.value()))
            positions = consumer.position([confluent_kafka.TopicPartition(topic, index) for topic, index in targets])
            if all(tp.offset >= targets[(tp.topic, tp.partition)] for tp in positions):
                break
        else:
            raise AssertionError(f"the {isolation} consumer never reached {targets}")
        return sorted(out)
    finally:
        consumer.close()


def markers(broker, topic, partition):
    log = broker.store.get_log(topic, partition)
    return [marker.commit for _batch, _producer, marker in log.iter_batches_with_control() if marker is not None]


def wait_stable(broker, topics, partitions=2):
    """Until every partition's last stable offset is its end (the markers follow EndTxn's answer)."""
    deadline = time.monotonic() + DEADLINE_S
    for topic in topics:
        for index in range(partitions):
            log = broker.store.get_log(topic, index)
            while log.last_stable_offset < log.log_end_offset:
                assert time.monotonic() < deadline, f"{topic}-{index} never became stable"
                time.sleep(0.02)


# --- the three clients' transactional producers ------------------------------------------------


def confluent_transactions(bootstrap, transactional_id, plan):
    """``plan``: [(commit, [(topic, partition, value), ...]), ...], one transaction each."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(DEADLINE_S)
    for commit, records in plan:
        producer.begin_transaction()
        for topic, partition, value in records:
            producer.produce(topic, value=value, key=b"k", partition=partition)
        if commit:
            producer.commit_transaction(DEADLINE_S)
        else:
            producer.flush(DEADLINE_S)  # the records are in the log before the abort
            producer.abort_transaction(DEADLINE_S)
    producer.flush(DEADLINE_S)


def kafka_python_transactions(bootstrap, transactional_id, plan):
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                   max_block_ms=int(DEADLINE_S * 1000))
    try:
        producer.init_transactions()
        for commit, records in plan:
            producer.begin_transaction()
            for topic, partition, value in records:
                producer.send(topic, value=value, key=b"k", partition=partition)
            producer.flush(timeout=DEADLINE_S)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=5)


def aiokafka_transactions(bootstrap, transactional_id, plan):
    async def run():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                             enable_idempotence=True)
        await producer.start()
        try:
            for commit, records in plan:
                await producer.begin_transaction()
                for topic, partition, value in records:
                    await producer.send_and_wait(topic, value=value, key=b"k", partition=partition)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()
    asyncio.run(asyncio.wait_for(run(), DEADLINE_S + 15))


PRODUCERS = {"confluent-kafka": confluent_transactions, "kafka-python": kafka_python_transactions,
             "aiokafka": aiokafka_transactions}


@pytest.mark.parametrize("client", list(PRODUCERS))
def test_commit_and_abort_across_partitions_and_topics(broker, client):
    first, second = make_topics(broker)
    committed = [(first, 0, b"c0"), (first, 1, b"c1"), (second, 1, b"c2")]
    aborted = [(first, 0, b"a0"), (second, 0, b"a1"), (second, 1, b"a2")]
    later = [(second, 0, b"c3")]
    PRODUCERS[client](broker.bootstrap_servers, unique(client), [(True, committed), (False, aborted), (True, later)])
    wait_stable(broker, [first, second])
    assert read_all(broker, [first, second], "read_committed") == sorted(committed + later)
    assert read_all(broker, [first, second], "read_uncommitted") == sorted(
        committed + aborted + later)
    # Each partition holds the markers of the transactions that touched it, in order.
    assert markers(broker, first, 0) == [True, False] and markers(broker, first, 1) == [True]
    assert markers(broker, second, 0) == [False, True] and markers(broker, second, 1) == [True, False]


def test_consume_transform_produce_commits_the_offsets_with_the_transaction(broker):
    """confluent-kafka's exactly-once loop: read from a source topic in a group, write to a sink in a
    transaction that also carries the group's offsets; an aborted round leaves the offsets where the
    last committed one put them."""
    source, sink = make_topics(broker, partitions=1)
    group = unique("eos-group")
    # Another test's group may share this group's __consumer_offsets partition (and its markers)
    earlier = (len(markers(broker, "__consumer_offsets", broker_offsets_partition(broker, group)))
               if "__consumer_offsets" in broker.store.topics() else 0)
    seed = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})
    for index in range(6):
        seed.produce(source, value=b"in%d" % index, partition=0)
    seed.flush(DEADLINE_S)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                                         "enable.auto.commit": False, "isolation.level": "read_committed",
                                         "auto.offset.reset": "earliest"})
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers,
                                         "transactional.id": unique("eos")})
    try:
        producer.init_transactions(DEADLINE_S)
        consumer.assign([confluent_kafka.TopicPartition(source, 0, confluent_kafka.OFFSET_BEGINNING)])
        for round_, commit in enumerate((True, False)):
            taken = []
            deadline = time.monotonic() + DEADLINE_S
            while len(taken) < 3 and time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    taken.append(message)
            assert len(taken) == 3
            producer.begin_transaction()
            for message in taken:
                producer.produce(sink, value=message.value().replace(b"in", b"out"), partition=0)
            producer.send_offsets_to_transaction(
                [confluent_kafka.TopicPartition(source, 0, taken[-1].offset() + 1)],
                consumer.consumer_group_metadata(), DEADLINE_S)
            if commit:
                producer.commit_transaction(DEADLINE_S)
            else:
                producer.abort_transaction(DEADLINE_S)
        committed = consumer.committed([confluent_kafka.TopicPartition(source, 0)], timeout=DEADLINE_S)
        assert committed[0].offset == 3  # the first round's; the aborted round's offsets were dropped
    finally:
        consumer.close()
    wait_stable(broker, [sink], partitions=1)
    assert [value for _t, _p, value in read_all(broker, [sink], "read_committed", partitions=1)] == [b"out0", b"out1", b"out2"]
    assert markers(broker, "__consumer_offsets", broker_offsets_partition(broker, group))[earlier:] == [True, False]


def broker_offsets_partition(broker, group):
    from logstore.group.formats import partition_for
    return partition_for(group, broker.store.partitions("__consumer_offsets"))


def test_a_second_instance_fences_the_first(broker):
    [topic] = make_topics(broker, count=1, partitions=1)
    transactional_id = unique("zombie")
    zombie = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers,
                                       "transactional.id": transactional_id})
    zombie.init_transactions(DEADLINE_S)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"from the zombie", partition=0)
    zombie.flush(DEADLINE_S)
    successor = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers,
                                          "transactional.id": transactional_id})
    successor.init_transactions(DEADLINE_S)  # aborts the zombie's transaction, bumps the epoch
    successor.begin_transaction()
    successor.produce(topic, value=b"from the successor", partition=0)
    successor.commit_transaction(DEADLINE_S)
    with pytest.raises(confluent_kafka.KafkaException) as fenced:
        zombie.commit_transaction(DEADLINE_S)
    error = fenced.value.args[0]
    assert error.fatal() and error.code() in (confluent_kafka.KafkaError._FENCED,
                                              confluent_kafka.KafkaError.PRODUCER_FENCED,
                                              confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH)
    wait_stable(broker, [topic], partitions=1)
    assert [value for _t, _p, value in read_all(broker, [topic], "read_committed", partitions=1)] == [b"from the successor"]
    assert markers(broker, topic, 0) == [False, True]


def test_a_transaction_left_open_is_aborted_at_its_timeout(tmp_path):
    settings = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 100}
    with start_broker(tmp_path, settings) as broker:
        [topic] = make_topics(broker, count=1, partitions=1)
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers,
                                             "transactional.id": unique("slow"), "transaction.timeout.ms": 3000})
        producer.init_transactions(DEADLINE_S)
        producer.begin_transaction()
        producer.produce(topic, value=b"never committed", partition=0)
        producer.flush(DEADLINE_S)
        log = broker.store.get_log(topic, 0)
        assert log.last_stable_offset == 0
        deadline = time.monotonic() + DEADLINE_S
        while markers(broker, topic, 0) != [False]:
            assert time.monotonic() < deadline, "the open transaction was never aborted"
            time.sleep(0.05)
        assert log.last_stable_offset == log.log_end_offset
        with pytest.raises(confluent_kafka.KafkaException):
            producer.commit_transaction(DEADLINE_S)
        assert read_all(broker, [topic], "read_committed", partitions=1) == []


def kafka_python_offsets_rounds(bootstrap, transactional_id, sink, source, group, rounds):
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                   max_block_ms=int(DEADLINE_S * 1000))
    try:
        producer.init_transactions()
        for commit, values, next_offset in rounds:
            producer.begin_transaction()
            for value in values:
                producer.send(sink, value=value, partition=0)
            producer.send_offsets_to_transaction(
                {kafka.TopicPartition(source, 0): kafka.structs.OffsetAndMetadata(next_offset, "", -1)}, group)
            producer.flush(timeout=DEADLINE_S)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=5)


def aiokafka_offsets_rounds(bootstrap, transactional_id, sink, source, group, rounds):
    async def run():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                             enable_idempotence=True)
        await producer.start()
        try:
            for commit, values, next_offset in rounds:
                await producer.begin_transaction()
                for value in values:
                    await producer.send_and_wait(sink, value=value, partition=0)
                await producer.send_offsets_to_transaction({aiokafka.TopicPartition(source, 0): next_offset}, group)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()
    asyncio.run(asyncio.wait_for(run(), DEADLINE_S + 15))


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_offsets_sent_in_a_transaction_commit_and_abort_with_it(broker, client):
    """The offsets a transaction carries (AddOffsetsToTxn, TxnOffsetCommit) become the group's
    committed offsets with its COMMIT, and are dropped with its ABORT."""
    source, sink = make_topics(broker, partitions=1)
    group = unique("offsets-group")
    rounds = [(True, [b"out0", b"out1"], 2), (False, [b"out2"], 3)]
    run = kafka_python_offsets_rounds if client == "kafka-python" else aiokafka_offsets_rounds
    # Another test's group may share this group's __consumer_offsets partition (and its markers)
    earlier = (len(markers(broker, "__consumer_offsets", broker_offsets_partition(broker, group)))
               if "__consumer_offsets" in broker.store.topics() else 0)
    run(broker.bootstrap_servers, unique(client), sink, source, group, rounds)
    # read_committed: OffsetFetch with require_stable waits for the markers that follow EndTxn's answer.
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        committed = consumer.committed([confluent_kafka.TopicPartition(source, 0)], timeout=DEADLINE_S)
    finally:
        consumer.close()
    assert committed[0].offset == 2
    wait_stable(broker, [sink], partitions=1)
    assert [value for _t, _p, value in read_all(broker, [sink], "read_committed", partitions=1)] == [b"out0", b"out1"]
    assert markers(broker, "__consumer_offsets", broker_offsets_partition(broker, group))[earlier:] == [True, False]


def test_kafka_python_admin_describes_transactions_and_producers(broker):
    """kafka-python's admin client (kafka-transactions.sh's calls): DescribeTransactions and
    ListTransactions through the coordinator FindCoordinator names, DescribeProducers of a
    partition with an open transaction, find_hanging_transactions finding none."""
    [topic] = make_topics(broker, count=1, partitions=1)
    transactional_id = unique("described")
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers,
                                         "transactional.id": transactional_id})
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=0)
    producer.flush(DEADLINE_S)
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        described = admin.describe_transactions([transactional_id])[transactional_id]
        assert described.state.value == "Ongoing"
        assert described.topic_partitions == {kafka.TopicPartition(topic, 0)}
        [(_node, listings)] = admin.list_transactions(state_filters=["Ongoing"]).items()  # one broker
        listed = {listing.transactional_id: listing for listing in listings}
        assert listed[transactional_id].producer_id == described.producer_id
        tp = kafka.TopicPartition(topic, 0)
        [active] = admin.describe_producers([tp])[tp].active_producers
        assert (active.producer_id, active.producer_epoch, active.current_transaction_start_offset) == (
            described.producer_id, described.producer_epoch, 0)
        assert transactional_id not in {txn["transactional_id"] for txn in admin.find_hanging_transactions()}
        producer.commit_transaction(DEADLINE_S)
        deadline = time.monotonic() + DEADLINE_S
        while True:
            state = admin.describe_transactions([transactional_id])[transactional_id].state
            if state.value == "CompleteCommit":
                break
            assert time.monotonic() < deadline, f"still {state}"
            time.sleep(0.05)
        [active] = admin.describe_producers([tp])[tp].active_producers
        assert active.current_transaction_start_offset == -1
    finally:
        admin.close()
        producer.flush(DEADLINE_S)
