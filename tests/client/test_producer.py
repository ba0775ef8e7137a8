"""``Producer`` (``logstore.client.producer``) against ``logstore serve``: what is sent is stored, each
key in Kafka's partition, each future with the offset the store gave its record; null keys spread
over the partitions batch by batch; acks 0/1/all; flush and close; bad settings and arguments refused
with the offending value."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from logstore import Record
from logstore.client.accumulator import RecordAccumulator
from logstore.client.cluster import NetworkClient
from logstore.client.partitioner import partition_for_key
from logstore.client.produce import apply_response, produce_request
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
    for connection in list(producer._network._connections.values()):
        connection.close()  # its sockets only: the client itself (its poll selector) is the sender thread's
    stuck = producer.send("closing-unreachable", b"never")
    began = time.monotonic()
    producer.close(0.5)
    assert time.monotonic() - began < 15
    with pytest.raises(StoreClosedError, match="closed before"):
        stuck.result(0)


def test_idempotence_is_on_with_acks_all_and_off_otherwise(server):
    with Producer(bootstrap_servers=server.bootstrap_servers, linger_ms=0) as producer:
        producer.send("idempotent-default", b"v").result(10)
        assert producer.config["enable.idempotence"] and producer.producer_id >= 0
    with Producer(bootstrap_servers=server.bootstrap_servers, acks=1, linger_ms=0) as producer:
        producer.send("idempotent-default", b"v").result(10)
        assert not producer.config["enable.idempotence"] and producer.producer_id == -1
    with pytest.raises(ValueError, match="needs acks=all"):
        Producer(bootstrap_servers=server.bootstrap_servers, acks=1, enable_idempotence=True)


def test_a_batch_sent_again_with_its_sequence_is_stored_once(server):
    # What a retry after a lost response does: the same batch, the same producer id, epoch and
    # sequence. The broker answers it with the first copy's offsets and stores nothing new.
    server.store.create_topic("sent-twice", 1)
    with NetworkClient(server.bootstrap_servers) as client:
        client.refresh_metadata(["sent-twice"])
        connection = client.connection(client.leader_for("sent-twice", 0))
        ids = connection.request("InitProducerId", {"transactional_id": None, "transaction_timeout_ms": 60_000})
        accumulator = RecordAccumulator(linger_ms=0)
        futures = [accumulator.append("sent-twice", 0, Record(b"k", b"%d" % i, (), 1)) for i in range(5)]
        (batch,) = accumulator.drain([("sent-twice", 0)], 0)
        batch.base_sequence = 0
        body = produce_request([batch], -1, 5000, ids["producer_id"], ids["producer_epoch"])
        first = connection.request("Produce", body)
        second = connection.request("Produce", body)  # the retry
        offsets = [r["responses"][0]["partition_responses"][0]["base_offset"] for r in (first, second)]
        assert offsets[0] == offsets[1] == 0
        apply_response([batch], second, lambda batch: False)
    assert [future.result(0).offset for future in futures] == [0, 1, 2, 3, 4]
    assert [r.value for r in server.store.get_log("sent-twice", 0).iter_records()] == [b"%d" % i for i in range(5)]
