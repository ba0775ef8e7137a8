"""Real clients' read_committed and read_uncommitted consumers against transactional data in
``logstore serve`` (kafka-python, confluent-kafka, aiokafka). The transactions are written through
the store (``Log.append(producer=...)`` and ``Log.append_marker``, what the coordinator's marker
writer calls), so these tests need no transaction coordinator.

The partition holds plain records, an aborted transaction, a committed one and an open one with a
plain record behind it. A read_committed consumer stops at the open transaction's first offset (its
position reaches it and goes no further in the same read), never sees the aborted records (a
read_uncommitted consumer sees them, and the open transaction's), and never sees a marker as a
record; once the open transaction commits, the consumer moves past the trailing marker to the end.
Each read ends when the client's position reaches the offset it should reach (bounded by a deadline
that only a failure meets)."""

from __future__ import annotations

import asyncio
import time
import uuid

import aiokafka
import confluent_kafka
import kafka
import pytest

from conftest import logstore_only
from logstore import Record
from logstore.records.batching import ProducerBatch

T0 = 1_700_000_000_000
DEADLINE_S = 30.0
pytestmark = logstore_only("transactions are written through our store")


def kafka_python_read(bootstrap, topic, isolation, until):
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                   auto_offset_reset="earliest", isolation_level=isolation)
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out = []
        deadline = time.monotonic() + DEADLINE_S
        while consumer.position(tp) < until and time.monotonic() < deadline:
            out += [(message.offset, message.value) for message in consumer.poll(timeout_ms=200).get(tp, ())]
        return out, consumer.position(tp)
    finally:
        consumer.close(autocommit=False)


def confluent_read(bootstrap, topic, isolation, until):
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"txnwire-{uuid.uuid4().hex}",
                                         "enable.auto.commit": False, "isolation.level": isolation,
                                         "auto.offset.reset": "earliest"})
    try:
        tp = confluent_kafka.TopicPartition(topic, 0)
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        out = []
        position = -1
        deadline = time.monotonic() + DEADLINE_S
        while position < until and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                out.append((message.offset(), message.value()))
            position = consumer.position([tp])[0].offset
        return out, position
    finally:
        consumer.close()


def aiokafka_read(bootstrap, topic, isolation, until):
    async def run():
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                             auto_offset_reset="earliest", isolation_level=isolation)
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            out = []
            deadline = time.monotonic() + DEADLINE_S
            while await consumer.position(tp) < until and time.monotonic() < deadline:
                batches = await consumer.getmany(tp, timeout_ms=200)
                out += [(message.offset, message.value) for message in batches.get(tp, ())]
            return out, await consumer.position(tp)
        finally:
            await consumer.stop()
    return asyncio.run(asyncio.wait_for(run(), DEADLINE_S + 15))


READERS = {"kafka-python": kafka_python_read, "confluent-kafka": confluent_read, "aiokafka": aiokafka_read}


def record(value: bytes) -> Record:
    return Record(b"k", value, (), T0)


@pytest.mark.parametrize("client", list(READERS))
def test_read_committed_consumers_stop_at_open_transactions_and_skip_aborted_data(broker, client):
    read = READERS[client]
    topic = broker.create_topic(f"txn-{client}-{uuid.uuid4().hex[:8]}")
    log = broker.store.get_log(topic, 0)
    aborted, committed, open_ = 9001, 9002, 9003
    log.append([record(b"a0"), record(b"a1")])                                       # 0-1
    log.append([record(b"x0"), record(b"x1")], producer=ProducerBatch(aborted, 0, 0, True))  # 2-3
    log.append([record(b"a2")])                                                      # 4
    log.append_marker(aborted, 0, 0, False)                                          # 5 ABORT
    log.append([record(b"c0"), record(b"c1")], producer=ProducerBatch(committed, 0, 0, True))  # 6-7
    log.append_marker(committed, 0, 0, True)                                         # 8 COMMIT
    log.append([record(b"o0")], producer=ProducerBatch(open_, 0, 0, True))           # 9 (open)
    log.append([record(b"a3")])                                                      # 10
    assert (log.last_stable_offset, log.log_end_offset) == (9, 11)

    seen, position = read(broker.bootstrap_servers, topic, "read_committed", 9)
    assert seen == [(0, b"a0"), (1, b"a1"), (4, b"a2"), (6, b"c0"), (7, b"c1")] and position == 9
    seen, position = read(broker.bootstrap_servers, topic, "read_uncommitted", 11)
    assert seen == [(0, b"a0"), (1, b"a1"), (2, b"x0"), (3, b"x1"), (4, b"a2"), (6, b"c0"), (7, b"c1"),
                    (9, b"o0"), (10, b"a3")] and position == 11

    log.append_marker(open_, 0, 0, True)                                             # 11 COMMIT (trailing)
    seen, position = read(broker.bootstrap_servers, topic, "read_committed", 12)
    assert [value for _offset, value in seen] == [b"a0", b"a1", b"a2", b"c0", b"c1", b"o0", b"a3"]
    assert position == 12
