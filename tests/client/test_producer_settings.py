"""The producer's settings beyond the basics (``logstore.client.producer``): ``compression.type``
(every codec this process has, stored and read back by ``logstore serve``; the batch on the wire
carries the codec; unknown or unavailable codecs refused with the value), ``delivery.timeout.ms``
(at least ``linger.ms + request.timeout.ms``, as Kafka requires), and
``max.in.flight.requests.per.connection`` against idempotence (at most 5, as Kafka requires)."""

from __future__ import annotations

import struct

import pytest

from logstore import Record
from logstore.client import produce
from logstore.client.accumulator import RecordAccumulator
from logstore.client.produce import compression_codec, produce_request
from logstore.client.producer import Producer, producer_config
from logstore.server.wire_records.compression import AVAILABLE_CODECS, CODEC_NAMES

CODECS = sorted(CODEC_NAMES[codec] for codec in AVAILABLE_CODECS)
_ATTRIBUTES_AT = 8 + 4 + 4 + 1 + 4  # a v2 batch: base offset, length, leader epoch, magic, crc


@pytest.mark.parametrize("name", CODECS)
def test_each_codec_is_stored_and_read_back(server, name, monkeypatch):
    topic = f"compressed-{name}"
    server.store.create_topic(topic, 2)
    codecs_sent = set()
    encode = produce.encode_produce_batch

    def spy(records, **settings):
        codecs_sent.add(settings["compression"])
        return encode(records, **settings)
    monkeypatch.setattr(produce, "encode_produce_batch", spy)
    with Producer(bootstrap_servers=server.bootstrap_servers, compression_type=name, linger_ms=2) as producer:
        futures = [(i, producer.send(topic, b"value %d " % i * 20, key=b"k%d" % (i % 7), headers=[("h", b"%d" % i)]))
                   for i in range(400)]
        producer.flush(30)
    assert codecs_sent == {compression_codec(name)}
    for i, future in futures:
        metadata = future.result(0)
        record = server.store.get_log(topic, metadata.partition).read(metadata.offset, 1)[0]
        assert (record.key, record.value, record.headers) == (b"k%d" % (i % 7), b"value %d " % i * 20, (("h", b"%d" % i),))


@pytest.mark.parametrize("name", CODECS)
def test_the_batch_on_the_wire_carries_the_codec(name):
    codec = compression_codec(name)
    accumulator = RecordAccumulator(linger_ms=0)
    for i in range(50):
        accumulator.append("t", 0, Record(b"k", b"the same words again and again %d" % i, (), 1))
    (batch,) = accumulator.drain([("t", 0)], 0)
    plain, packed = (produce_request([batch], 1, 1000, compression=c)["topic_data"][0]["partition_data"][0]["records"]
                     for c in (0, codec))
    assert struct.unpack_from(">h", packed, _ATTRIBUTES_AT)[0] & 0x7 == codec
    if codec:
        assert len(packed) < len(plain)


def test_unknown_and_unavailable_codecs_are_refused_with_the_value(monkeypatch):
    with pytest.raises(ValueError, match="'brotli'"):
        Producer(bootstrap_servers="127.0.0.1:1", compression_type="brotli")
    with pytest.raises(ValueError, match="compression.type"):
        producer_config({"bootstrap.servers": "127.0.0.1:1", "compression.type": 1}, {})
    monkeypatch.setattr(produce, "AVAILABLE_CODECS", frozenset({0, 1}))  # as without the server extra
    with pytest.raises(ValueError, match="'zstd' is not available.*cramjam"):
        Producer(bootstrap_servers="127.0.0.1:1", compression_type="zstd")
    assert producer_config({"bootstrap.servers": "x:1", "compression.type": "gzip"}, {})["compression.type"] == "gzip"


def test_delivery_timeout_must_cover_linger_and_one_request():
    with pytest.raises(ValueError, match=r"delivery.timeout.ms must be at least .* \(30005\), got 1000"):
        producer_config({"bootstrap.servers": "x:1", "delivery.timeout.ms": 1000, "linger.ms": 5}, {})
    with pytest.raises(ValueError, match="delivery.timeout.ms must be an int"):
        producer_config({"bootstrap.servers": "x:1"}, {"delivery_timeout_ms": "soon"})
    # Left to its default, it is raised to fit, as Kafka's producer does
    assert producer_config({"bootstrap.servers": "x:1", "request.timeout.ms": 200_000}, {})["delivery.timeout.ms"] == 200_005
    assert producer_config({"bootstrap.servers": "x:1"}, {})["delivery.timeout.ms"] == 120_000


def test_idempotence_allows_at_most_five_requests_in_flight():
    with pytest.raises(ValueError, match="at most|<= 5, got 6"):
        producer_config({"bootstrap.servers": "x:1", "enable.idempotence": True,
                         "max.in.flight.requests.per.connection": 6}, {})
    # Not asked for, it is off with more (Kafka 3.2+ turns the default off for conflicting settings)
    config = producer_config({"bootstrap.servers": "x:1", "max.in.flight.requests.per.connection": 6}, {})
    assert config["enable.idempotence"] is False
    assert producer_config({"bootstrap.servers": "x:1"}, {})["enable.idempotence"] is True
    with pytest.raises(ValueError, match="max.in.flight.requests.per.connection must be an int >= 1, got 0"):
        producer_config({"bootstrap.servers": "x:1", "max.in.flight.requests.per.connection": 0}, {})
