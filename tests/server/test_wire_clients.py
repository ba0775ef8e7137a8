"""Cross-checks of logstore.server.wire_records with real Kafka clients' own record code.

- Batches built by kafka-python 3's ``DefaultRecordBatchBuilder`` and by aiokafka's builders (its C
  extension and its pure-Python one) decode with ``decode_produce`` into the records they were
  given, for every codec the client has here (kafka-python: gzip, plus snappy/lz4/zstd when their
  optional libraries are installed; aiokafka: all four through cramjam), also idempotent ones.
- Batches ``encode_fetch_batch`` makes from a real store (plain, compacted with sparse offsets,
  LogAppendTime, headers and nulls) pass those clients' CRC checks (``validate_crc``) and read back
  through their readers as exactly the store's records: offsets, keys, values, headers, timestamps
  and timestamp type.
"""

from __future__ import annotations

import random

# The clients extra (installed by .ci/run): a missing client fails these tests, it never skips them.
import aiokafka.record.default_records as aio_records
import kafka.codec as kafka_codec
import kafka.record.default_records as kafka_records
import pytest

from logstore import LogManager, ManualClock, Record
from logstore.server.wire_records import (
    decode_produce,
    encode_fetch_batch,
    encode_produce_batch,
)
from logstore.timer.scheduler import Scheduler

T0 = 1_700_000_000_000
MAX = 1 << 22
GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4


def sample_records(seed: int, count: int = 40) -> list[Record]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        key = None if i % 7 == 3 else (b"" if i % 11 == 5 else b"key-%d" % rng.randrange(1000))
        # compressible (a builder keeps a batch uncompressed when compression does not pay), with
        # a few non-text bytes
        value = None if i % 9 == 4 else b"value-\xff\x00-%d;" % rng.randrange(10) * rng.choice((0, 1, 10, 30))
        headers = (("trace-é", b"%d" % i), ("null", None)) if i % 4 == 0 else ()
        out.append(Record(key, value, headers, T0 + rng.randrange(-1000, 1000)))
    return out


def expected(records):
    return [Record(r.key, r.value, tuple(r.headers), r.timestamp_ms) for r in records]


def kafka_python_codecs():
    codecs = [0, GZIP]
    codecs += [codec for codec, available in ((SNAPPY, kafka_codec.has_snappy()), (LZ4, kafka_codec.has_lz4()),
                                              (ZSTD, kafka_codec.has_zstd())) if available]
    return codecs


BUILDERS = {
    "kafka-python": (kafka_records.DefaultRecordBatchBuilder, kafka_python_codecs()),
    "aiokafka": (aio_records.DefaultRecordBatchBuilder, [0, GZIP, SNAPPY, LZ4, ZSTD]),
    "aiokafka-py": (aio_records._DefaultRecordBatchBuilderPy, [0, GZIP, SNAPPY, LZ4, ZSTD]),
}
READERS = {
    "kafka-python": kafka_records.DefaultRecordBatch,
    "aiokafka": aio_records.DefaultRecordBatch,
    "aiokafka-py": aio_records._DefaultRecordBatchPy,
}


@pytest.mark.parametrize("client,codec", [(client, codec) for client, (_b, codecs) in BUILDERS.items()
                                          for codec in codecs])
@pytest.mark.parametrize("idempotent", [False, True])
def test_client_built_batches_decode(client, codec, idempotent):
    builder_type = BUILDERS[client][0]
    records = sample_records(codec * 10 + idempotent)
    producer = (4711, 2, 17) if idempotent else (-1, -1, -1)
    builder = builder_type(2, codec, 0, *producer, batch_size=MAX)
    for offset, record in enumerate(records):
        assert builder.append(offset, record.timestamp_ms, record.key, record.value, list(record.headers)) is not None
    data = bytes(builder.build())
    [(batch, decoded)] = decode_produce(data, max_message_bytes=MAX)
    assert decoded == expected(records)
    assert batch.compression == codec and batch.record_count == len(records)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == producer
    # and ours, built for the same records, is what the client's reader sees too
    ours = encode_produce_batch(records, compression=codec)
    reader = READERS[client](ours)
    assert reader.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in reader] == [
        (i, r.timestamp_ms, r.key, r.value, tuple(r.headers)) for i, r in enumerate(records)]


def open_store(tmp_path):
    clock = ManualClock(T0)
    store = LogManager([str(tmp_path)], config={"log.cleaner.threads": 0}, clock=clock,
                       scheduler=Scheduler(clock, threaded=False))
    return store, clock


def fill_store(store, clock):
    store.create_topic("plain", 1)
    store.create_topic("zipped", 1, {"compression.type": "gzip"})
    store.create_topic("appended", 1, {"message.timestamp.type": "LogAppendTime"})
    store.create_topic("compacted", 1, {"cleanup.policy": "compact", "segment.bytes": 3000, "file.delete.delay.ms": 0})
    for topic in ("plain", "zipped", "appended"):
        log = store.get_log(topic, 0)
        for seed in range(4):
            log.append(sample_records(seed, 25))
            clock.advance(10)
    rng = random.Random(9)
    log = store.get_log("compacted", 0)
    for i in range(50):
        log.append([Record(b"k%d" % rng.randrange(20), b"v%d-%d" % (i, j), (("j", b"%d" % j),) if j % 2 else (),
                           T0 + i * 10 + j) for j in range(rng.randint(1, 6))])
    log.roll()
    store.compact("compacted")


@pytest.mark.parametrize("client", list(READERS))
def test_clients_read_our_fetch_batches_with_crc_checks(tmp_path, client):
    store, clock = open_store(tmp_path)
    with store:
        fill_store(store, clock)
        for topic in ("plain", "zipped", "appended", "compacted"):
            log = store.get_log(topic, 0)
            append_time = topic == "appended"
            theirs = []
            for batch, _first, _stop in log.iter_batch_slices():
                reader = READERS[client](encode_fetch_batch(batch))
                assert reader.validate_crc(), (client, topic)
                assert reader.base_offset == batch.base_offset
                assert reader.timestamp_type == (1 if append_time else 0)
                theirs += [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in reader]
            ours = [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp_ms) for r in log.iter_records()]
            assert theirs == ours and ours, (client, topic)
            if topic == "compacted":
                offsets = [entry[0] for entry in ours]
                assert offsets != list(range(offsets[0], offsets[0] + len(offsets)))
