"""``Producer`` (``logstore.client.producer``) against ``logstore serve``: what is sent is stored, each
key in Kafka's partition, each future with the offset the store gave its record; null keys spread
over the partitions batch by batch; acks 0/1/all; flush and close; bad settings and arguments refused
with the offending value."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from logstore.client.partitioner import partition_for_key
from logstore.client.producer import Producer
from logstore.errors import StoreClosedError


def _stored(server, topic: str) -> dict[int, list]:
    store = server.store
    return {p: list(store.get_log(topic, p).iter_records()) for p in range(store.partitions(topic))}


@pytest.mark.parametrize("acks", ["all", 1])
def test_sent_records_are_stored_where_kafka_would_put_them(server, acks):
    topic = f"produced-{acks}"
    server.store.create_topic(topic, 3)
    with Producer(bootstrap_servers=server.bootstrap_servers, acks=acks, linger_ms=2, batch_size=2048) as producer:
        sent = []
        for i in range(1500):
            key = None if i % 3 == 0 else b"key-%d" % (i % 50)
            headers = [("i", b"%d" % i)] if i % 5 == 0 else None
            sent.append((key, b"value-%d" % i, producer.send(topic, b"value-%d" % i, key=key, headers=headers,
                                                             timestamp_ms=1_700_000_000_000 + i)))
        producer.flush(30)
        assert all(future.done() for _, _, future in sent)
    stored = _stored(server, topic)
    assert sum(map(len, stored.values())) == 1500
    for key, value, future in sent:
        metadata = future.result(0)
        if key is not None:
            assert metadata.partition == partition_for_key(key, 3)
        record = stored[metadata.partition][metadata.offset]
        assert (record.key, record.value) == (key, value)
    unkeyed = Counter(future.result(0).partition for key, _, future in sent if key is None)
    assert len(unkeyed) > 1, "null keys stayed on one partition"


def test_acks_0_stores_without_offsets(server):
    server.store.create_topic("fire-and-forget", 2)
    with Producer({"bootstrap.servers": server.bootstrap_servers, "acks": 0, "linger.ms": 0}) as producer:
        futures = [producer.send("fire-and-forget", b"%d" % i, key=b"k%d" % i) for i in range(200)]
        producer.flush(30)
    assert {future.result(0).offset for future in futures} == {-1}
    deadline = time.monotonic() + 10
    while sum(map(len, _stored(server, "fire-and-forget").values())) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sum(map(len, _stored(server, "fire-and-forget").values())) == 200


def test_a_topic_the_broker_creates_on_demand(server):
    with Producer(bootstrap_servers=server.bootstrap_servers, linger_ms=0) as producer:
        metadata = producer.send("created-by-producing", b"hello").result(10)
    assert (metadata.partition, metadata.offset) == (0, 0)
    assert [r.value for r in server.store.get_log("created-by-producing", 0).iter_records()] == [b"hello"]


def test_close_flushes_then_refuses(server):
    server.store.create_topic("closing", 1)
    producer = Producer(bootstrap_servers=server.bootstrap_servers, linger_ms=1000)  # only close sends them
    futures = [producer.send("closing", b"%d" % i) for i in range(10)]
    producer.close(30)
    assert [future.result(0).offset for future in futures] == list(range(10))
    with pytest.raises(StoreClosedError):
        producer.send("closing", b"late")
    producer.close()  # twice: nothing


def test_bad_arguments_name_the_value(server):
    with pytest.raises(ValueError, match="linger.mss"):
        Producer(bootstrap_servers=server.bootstrap_servers, **{"linger_mss": 5})
    with pytest.raises(ValueError, match="acks"):
        Producer(bootstrap_servers=server.bootstrap_servers, acks=2)
    with pytest.raises(ValueError, match="bootstrap.servers"):
        Producer()
    server.store.create_topic("two-partitions", 2)
    with Producer(bootstrap_servers=server.bootstrap_servers) as producer:
        with pytest.raises(ValueError, match=r"partition must be in \[0, 2\)"):
            producer.send("two-partitions", b"v", partition=2)


def test_close_with_a_timeout_fails_what_an_unreachable_broker_never_took(server):
    producer = Producer(bootstrap_servers=server.bootstrap_servers, linger_ms=0, retry_backoff_ms=10)
    producer.send("closing-unreachable", b"first").result(10)  # metadata known, topic created
    # The broker goes away for this producer: its address now refuses connections.
    producer._network.metadata.brokers = {node: ("127.0.0.1", 1) for node in producer._network.metadata.brokers}
    producer._network.bootstrap = [("127.0.0.1", 1)]
    producer._network.close()
    stuck = producer.send("closing-unreachable", b"never")
    began = time.monotonic()
    producer.close(0.5)
    assert time.monotonic() - began < 15
    with pytest.raises(StoreClosedError, match="closed before"):
        stuck.result(0)
