"""Batch magic 3: the producer block, the transactional and control bits, and the control record
of a transaction marker (docs/FORMAT.md 1.12). The golden fixtures (``*_v3``) are checked by
test_format.py with the others; here: round trips with random producer fields and flags, the byte
relation to a batch without a block, each structural rule refused (in crafted batches whose
checksums are intact, so only the rule can refuse them), and the marker's key and value against
Kafka's end-transaction marker bytes."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.config import LogConfig
from logstore.errors import CorruptRecordError
from logstore.records import control
from logstore.records.batching import ProducerBatch, encode_records
from logstore.records.codecs import COMPRESSION_GZIP, COMPRESSION_NONE
from logstore.records.decoder import (BODY_AT, CONTROL, CRC_AT, HAS_PRODUCER, HEADER_BYTES, MAGIC,
                                      PRODUCER_BYTES, TRANSACTIONAL, ProducerFields, Record, RecordBatch, body_at,
                                      read_header)
from logstore.records.encoder import assign_base_offset, encode_batch, encode_marker_batch

T0 = 1_700_000_000_000
ATTRIBUTES_AT = 21

blobs = st.one_of(st.none(), st.binary(max_size=16))
headers = st.one_of(st.just(()), st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=4))),
                                          max_size=2).map(tuple))
records_strategy = st.builds(Record, key=blobs, value=blobs, headers=headers,
                             timestamp_ms=st.one_of(st.none(), st.integers(T0, T0 + 5)))
producers = st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**15), 2**15 - 1),
                      st.integers(-(2**31), 2**31 - 1))


def reseal(data: bytearray) -> bytes:
    """Both checksums recomputed: a batch that is intact but says what the test made it say."""
    struct.pack_into("<I", data, CRC_AT, zlib.crc32(data[BODY_AT:]))
    assign_base_offset(data, struct.unpack_from("<q", data)[0])
    return bytes(data)


def with_attributes(data: bytes, set_bits: int = 0, clear_bits: int = 0) -> bytes:
    changed = bytearray(data)
    attributes = struct.unpack_from("<H", changed, ATTRIBUTES_AT)[0]
    struct.pack_into("<H", changed, ATTRIBUTES_AT, (attributes | set_bits) & ~clear_bits)
    return reseal(changed)


@settings(max_examples=150, deadline=None)
@given(st.lists(records_strategy, max_size=12), producers, st.booleans(),
       st.sampled_from([COMPRESSION_NONE, COMPRESSION_GZIP]), st.integers(0, 2**40))
def test_a_producer_batch_reads_back_its_records_and_producer_fields(records, producer, transactional, compression,
                                                                    base_offset):
    plain = bytes(encode_batch(records, default_timestamp_ms=T0, compression=compression, base_offset=base_offset))
    data = bytes(encode_batch(records, default_timestamp_ms=T0, compression=compression, base_offset=base_offset,
                              producer=producer, transactional=transactional))
    batch = RecordBatch.decode(data)
    plain_batch = RecordBatch.decode(plain)
    assert batch.records() == plain_batch.records()
    assert batch.producer == ProducerFields(*producer, transactional, False)
    assert plain_batch.producer is None
    # The block sits between the header and an unchanged body; only the length, the attribute bits
    # and the checksums differ in the header.
    header, plain_header = batch.header, plain_batch.header
    assert header.attributes == plain_header.attributes | HAS_PRODUCER | (TRANSACTIONAL if transactional else 0)
    assert header.batch_length == plain_header.batch_length + PRODUCER_BYTES
    assert header._replace(batch_length=0, crc=0, attributes=0) == plain_header._replace(batch_length=0, crc=0,
                                                                                          attributes=0)
    assert data[HEADER_BYTES : HEADER_BYTES + PRODUCER_BYTES] == struct.pack("<qhi", *producer)
    assert data[HEADER_BYTES + PRODUCER_BYTES :] == plain[HEADER_BYTES:]
    assert body_at(header.attributes) == HEADER_BYTES + PRODUCER_BYTES
    assert read_header(data[:HEADER_BYTES], whole=False) == header  # the 55-byte header alone still reads


@settings(max_examples=100, deadline=None)
@given(st.lists(records_strategy, max_size=12), st.sampled_from([COMPRESSION_NONE, COMPRESSION_GZIP]))
def test_without_a_producer_magic_3_is_magic_2_but_the_magic_and_the_checksums(records, compression):
    new = bytes(encode_batch(records, default_timestamp_ms=T0, compression=compression))
    old = bytes(encode_batch(records, default_timestamp_ms=T0, compression=compression, magic=2))
    assert (new[12], old[12]) == (MAGIC, 2) == (3, 2)
    assert new[:12] == old[:12] and new[BODY_AT:] == old[BODY_AT:]
    assert RecordBatch.decode(new).records() == RecordBatch.decode(old).records()


@settings(max_examples=100, deadline=None)
@given(st.booleans(), st.integers(-(2**31), 2**31 - 1), producers, st.integers(-(2**63), 2**63 - 1))
def test_a_marker_round_trips(commit, coordinator_epoch, producer, timestamp):
    producer_id, producer_epoch, _ = producer
    data = bytes(encode_marker_batch(commit, coordinator_epoch, producer_id, producer_epoch, timestamp))
    batch = RecordBatch.decode(data)
    assert batch.producer == ProducerFields(producer_id, producer_epoch, -1, True, True)
    (record,) = batch.records()
    assert (record.offset, record.timestamp_ms, record.headers) == (0, timestamp, ())
    assert control.decode_marker(record.key, record.value) == control.Marker(commit, coordinator_epoch)


def test_the_marker_key_and_value_are_kafkas_end_transaction_marker_bytes():
    # Kafka: key = ControlRecordType (version int16 = 0, type int16: 0 ABORT, 1 COMMIT); value =
    # EndTransactionMarker (version int16 = 0, coordinator_epoch int32), all big-endian.
    assert control.encode_marker(True, 5) == (bytes.fromhex("0000 0001"), bytes.fromhex("0000 00000005"))
    assert control.encode_marker(False, 0x01020304) == (bytes.fromhex("0000 0000"), bytes.fromhex("0000 01020304"))
    assert control.encode_marker(False, -1) == (bytes.fromhex("0000 0000"), bytes.fromhex("0000 ffffffff"))


def _marker(commit: bool = True) -> bytes:
    return bytes(encode_marker_batch(commit, 3, 42, 1, T0))


def _encoded(records, **options) -> bytes:
    return bytes(encode_batch(records, default_timestamp_ms=T0, producer=(42, 1, -1), transactional=True, **options))


COMMIT = control.encode_marker(True, 3)


@pytest.mark.parametrize("data, message", [
    (lambda: with_attributes(bytes(encode_batch([Record(b"k", b"v")])), TRANSACTIONAL), "without a producer block"),
    (lambda: with_attributes(bytes(encode_batch([Record(*COMMIT)])), TRANSACTIONAL | CONTROL),
     "without a producer block"),
    (lambda: with_attributes(_marker(), clear_bits=TRANSACTIONAL), "not transactional"),
    (lambda: with_attributes(_encoded([Record(*COMMIT)], compression=COMPRESSION_GZIP), CONTROL), "compressed"),
    (lambda: with_attributes(_encoded([Record(*COMMIT, (("h", b""),))]), CONTROL), "with headers"),
    (lambda: with_attributes(_encoded([Record(*COMMIT)], offset_deltas=[0]), CONTROL), "offset deltas"),
    (lambda: with_attributes(_encoded([Record(*COMMIT), Record(*COMMIT)]), CONTROL), "2 records"),
    (lambda: with_attributes(_encoded([]), CONTROL), "0 records"),
    (lambda: with_attributes(_encoded([Record(b"\x00\x01\x00\x01", COMMIT[1])]), CONTROL), "key version 1"),
    (lambda: with_attributes(_encoded([Record(b"\x00\x00\x00\x02", COMMIT[1])]), CONTROL), "type 2"),
    (lambda: with_attributes(_encoded([Record(b"\x00\x00\x00\x01\x00", COMMIT[1])]), CONTROL), "not 4 bytes"),
    (lambda: with_attributes(_encoded([Record(None, COMMIT[1])]), CONTROL), "not 4 bytes"),
    (lambda: with_attributes(_encoded([Record(COMMIT[0], b"\x00\x01\x00\x00\x00\x03")]), CONTROL),
     "value version 1"),
    (lambda: with_attributes(_encoded([Record(COMMIT[0], COMMIT[1][:5])]), CONTROL), "not 6 bytes"),
    (lambda: with_attributes(_encoded([Record(COMMIT[0], None)]), CONTROL), "not 6 bytes"),
])
def test_each_structural_rule_refuses_an_intact_batch(data, message):
    with pytest.raises(CorruptRecordError, match=message):
        RecordBatch.decode(data())


@pytest.mark.parametrize("name", ["txn_data", "marker"])
def test_the_producer_bits_are_unknown_in_magic_2(name):
    data = bytearray(_encoded([Record(b"k", b"v")]) if name == "txn_data" else _marker())
    data[12] = 2
    with pytest.raises(CorruptRecordError, match="unknown attribute bits"):
        RecordBatch.decode(reseal(data))


def test_a_producer_batch_shorter_than_its_block_is_impossible():
    data = bytearray(with_attributes(bytes(encode_batch([], last_offset_delta=0)), HAS_PRODUCER))
    with pytest.raises(CorruptRecordError, match="impossible batch length"):
        read_header(reseal(data))


@pytest.mark.parametrize("options, message", [
    (dict(transactional=True), "needs producer"),
    (dict(control=True, producer=(1, 0, -1)), "control batch"),
    (dict(control=True, transactional=True, producer=(1, 0, -1), compression=COMPRESSION_GZIP), "control batch"),
    (dict(producer=(1, 0, -1), magic=2), "magic 2 has no producer block"),
    (dict(producer=(1, 2**15, -1)), "producer must be"),
    (dict(producer=(1, 0)), "producer must be"),
])
def test_the_encoder_refuses_what_the_format_forbids(options, message):
    with pytest.raises(ValueError, match=message):
        encode_batch([Record(*COMMIT)], **options)
    with pytest.raises(ValueError, match="headers"):
        encode_batch([Record(*COMMIT, (("h", b""),))], producer=(1, 0, -1), transactional=True, control=True)
    with pytest.raises(ValueError, match="coordinator_epoch"):
        control.encode_marker(True, 2**31)


def test_a_split_append_gives_each_part_the_sequence_of_its_first_record():
    config = LogConfig.from_properties({"max.message.bytes": 700})
    records = [Record(b"k%03d" % i, bytes(40), (), T0) for i in range(40)]
    batches = encode_records(records, config, T0, "t", producer=ProducerBatch(7, 2, 2**31 - 5, True))
    assert len(batches) > 2
    decoded = [RecordBatch.decode(bytes(header) + b"".join(parts)) for header, parts in batches]
    first = 0
    for batch in decoded:
        assert batch.producer == ProducerFields(7, 2, (2**31 - 5 + first) % 2**31, True, False)
        assert len(bytes(batch.buffer)) <= 700
        first += batch.record_count
    assert first == 40
    assert [record.key for batch in decoded for record in batch.records()] == [r.key for r in records]
    plain = encode_records(records[:1], config, T0, "t")[0]
    assert RecordBatch.decode(bytes(plain[0]) + b"".join(plain[1])).producer is None


@pytest.mark.parametrize("transactional", [False, True])
def test_a_truncation_inside_a_producer_batch_keeps_its_block(transactional):
    from logstore.records.encoder import encode_batch_prefix

    records = [Record(b"k%d" % i, b"v%d" % i, (), T0 + i) for i in range(5)]
    data = bytes(encode_batch(records, base_offset=70, producer=(9, 3, 100), transactional=transactional))
    kept = RecordBatch.decode(bytes(encode_batch_prefix(RecordBatch.decode(data), 73)))
    assert kept.producer == ProducerFields(9, 3, 100, transactional, False)
    assert [r.offset for r in kept.records()] == [70, 71, 72] and kept.next_offset == 73
