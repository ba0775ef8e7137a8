"""Records on the wire (logstore.server.wire_records) against plain models.

- Produce: any records (null and empty keys and values, headers with null values and unicode
  names, any timestamps, large values) encoded as a producer does, with every codec, decode to the
  same records; several batches back to back decode in order.
- Fetch: a store written through ``LogManager`` (plain, compacted with sparse offsets, LogAppendTime,
  gzip-stored, with headers and nulls), each batch of ``Log.iter_batch_slices`` encoded with
  ``encode_fetch_batch`` and read back with ``decode_fetch``, equals ``Log.iter_records`` record for
  record; an emptied batch becomes Kafka's empty batch.
- Validation: each rule of Kafka's produce validation raises its error with Kafka's code.
- Robustness: a flipped bit anywhere in a valid batch raises a ``WireRecordError`` (the CRC covers
  all but the base offset, length and leader epoch, which give a defined result); damaged records
  under a recomputed CRC, and random bytes, raise ``WireRecordError`` and nothing else.
- ``FetchBatchCache``: hits, misses, LRU eviction by bytes, threads.
"""

from __future__ import annotations

import random
import struct
import threading

import pytest
from hypothesis import given, settings, strategies as st

from logstore import LogManager, ManualClock, Record
from logstore.records.decoder import RecordBatch
from logstore.server.wire_records import (CorruptMessageError, FetchBatchCache, InvalidRecordError,
                                          InvalidTimestampError, MessageTooLargeError, UnsupportedCompressionError,
                                          WireBatch, WireRecordError, decode_fetch, decode_produce, encode_fetch_batch,
                                          encode_produce_batch, encode_records)
from logstore.server.wire_records.batch import (HEADER_STRUCT, VARINT_TABLE_SIZE, VARINTS, ZIGZAG_BYTE, ZIGZAG_PAIR,
                                               encode_varint, read_varint)
from logstore.server.wire_records.crc32c import crc32c
from logstore.timer.scheduler import Scheduler

T0 = 1_700_000_000_000
MAX = 1 << 20
CODECS = [0, 1, 2, 3, 4]

keys_or_values = st.one_of(st.none(), st.binary(max_size=40), st.just(b""))
headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12))), max_size=3).map(tuple)
records_strategy = st.lists(st.builds(Record, keys_or_values, keys_or_values, headers,
                                      st.integers(0, 2**42)), min_size=1, max_size=40)


def plain(records):
    """The model: records as decode_produce returns them (headers a tuple of tuples, no offset)."""
    return [Record(r.key, r.value, tuple(tuple(pair) for pair in r.headers), r.timestamp_ms) for r in records]


def rewrite(batch: bytes, position: int, fmt: str, value) -> bytes:
    """``batch`` with a big-endian field at ``position`` replaced and the CRC recomputed."""
    data = bytearray(batch)
    struct.pack_into(">" + fmt, data, position, value)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


# --- varints -----------------------------------------------------------------------------------------


@given(st.integers(-(2**63), 2**63 - 1))
def test_varints_round_trip(value):
    encoded = encode_varint(value)
    assert read_varint(encoded + b"\xff", 0, 10) == (value, len(encoded))
    if len(encoded) == 1:
        assert ZIGZAG_BYTE[encoded[0]] == value
    if len(encoded) == 2:
        assert ZIGZAG_PAIR[(encoded[1] << 8) | encoded[0]] == value


def test_the_varint_tables_hold_every_small_varint():
    """Each entry of the encoding table (built from slices at import) is the varint read_varint
    decodes back, and the two-byte decoding table holds the value of every two-byte varint and zeros
    elsewhere."""
    assert len(VARINTS) == VARINT_TABLE_SIZE
    for number, encoded in enumerate(VARINTS):
        value = (number >> 1) ^ -(number & 1)
        assert read_varint(encoded, 0) == (value, len(encoded)), number
    for index, value in enumerate(ZIGZAG_PAIR):
        first, second = index & 0xFF, index >> 8
        if first >= 0x80 and second < 0x80:  # a two-byte varint, overlong ones (second == 0) included
            assert value == read_varint(bytes((first, second)), 0)[0], index
        else:
            assert value == 0, index


def test_overlong_and_cut_varints_are_corrupt():
    with pytest.raises(CorruptMessageError):
        read_varint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(CorruptMessageError):
        read_varint(b"\x80\x80", 0)
    assert read_varint(encode_varint(-(2**31)), 0) == (-(2**31), 5)
    with pytest.raises(CorruptMessageError):
        read_varint(encode_varint(2**31), 0)  # 5 bytes, but more than an int32
    with pytest.raises(CorruptMessageError):
        read_varint(b"\xff" * 9 + b"\x7f", 0, 10)  # 10 bytes, more than an int64


# --- produce -----------------------------------------------------------------------------------------


@settings(max_examples=80)
@given(records_strategy, st.sampled_from(CODECS))
def test_produce_round_trip_every_codec(records, codec):
    data = encode_produce_batch(records, compression=codec)
    [(batch, decoded)] = decode_produce(data, max_message_bytes=MAX)
    assert decoded == plain(records)
    assert batch.compression == codec and batch.record_count == len(records) == batch.last_offset_delta + 1
    assert batch.size_bytes == len(data) and batch.magic == 2 and not batch.is_control
    assert batch.max_timestamp == max(r.timestamp_ms for r in records)
    assert decode_produce(memoryview(data), max_message_bytes=MAX) == decode_produce(bytearray(data),
                                                                                   max_message_bytes=MAX)


def test_large_values_long_varints_and_negative_timestamp_deltas():
    records = [Record(b"k" * 9000, b"v" * 70_000, (("h" * 200, b"x" * 300),), T0),
               Record(None, b"", (), T0 - 5_000_000_000), Record(b"", None, (("é✓", None),), T0 + 1)]
    records += [Record(b"%d" % i, b"v" * (i * 37), (), T0 + i) for i in range(300)]  # offset deltas past 64, 8192 B
    for codec in CODECS:
        [(batch, decoded)] = decode_produce(encode_produce_batch(records, compression=codec),
                                            max_message_bytes=8 * MAX)
        assert decoded == plain(records)


def test_several_batches_back_to_back_and_empty_input():
    first = [Record(b"a", b"1", (), T0)]
    second = [Record(b"b", b"2", (), T0 + 1), Record(None, b"3", (), T0 + 2)]
    data = encode_produce_batch(first) + encode_produce_batch(second, compression=1, producer_id=7, producer_epoch=0,
                                                              base_sequence=4)
    decoded = decode_produce(data, max_message_bytes=MAX)
    assert [records for _batch, records in decoded] == [plain(first), plain(second)]
    assert (decoded[1][0].producer_id, decoded[1][0].producer_epoch, decoded[1][0].base_sequence) == (7, 0, 4)
    assert decode_produce(b"", max_message_bytes=MAX) == decode_produce(None, max_message_bytes=MAX) == []


# --- validation, with Kafka's codes -----------------------------------------------------------------

GOOD = encode_produce_batch([Record(b"k", b"v", (("h", b"1"),), T0), Record(b"k2", None, (), T0 + 3)])


def codes_of(data, **kwargs):
    with pytest.raises(WireRecordError) as raised:
        decode_produce(data, max_message_bytes=kwargs.get("max_message_bytes", MAX))
    return type(raised.value), raised.value.error_code, str(raised.value)


def test_validation_errors_and_codes():
    assert codes_of(rewrite(GOOD, 16, "b", 1))[:2] == (CorruptMessageError, 2)  # magic 1
    bad_crc = bytearray(GOOD)
    bad_crc[-1] ^= 1
    assert codes_of(bytes(bad_crc))[:2] == (CorruptMessageError, 2)
    assert codes_of(GOOD[:-1])[:2] == (CorruptMessageError, 2)  # truncated
    assert codes_of(GOOD[:30])[:2] == (CorruptMessageError, 2)  # truncated inside the header
    assert codes_of(GOOD + GOOD[:40])[:2] == (CorruptMessageError, 2)  # a second batch cut short
    assert codes_of(rewrite(GOOD, 8, "i", 20))[:2] == (CorruptMessageError, 2)  # impossible length
    assert codes_of(GOOD, max_message_bytes=len(GOOD) - 1)[:2] == (MessageTooLargeError, 10)
    assert decode_produce(GOOD, max_message_bytes=len(GOOD))
    assert codes_of(rewrite(GOOD, 0, "q", 5))[:2] == (InvalidRecordError, 87)  # base offset
    assert codes_of(rewrite(GOOD, 21, "h", 0x20 | 0x10))[:2] == (InvalidRecordError, 87)  # control
    kind, code, message = codes_of(encode_produce_batch([Record(b"k", b"v", (), T0)], transactional=True,
                                                        producer_id=1, producer_epoch=0, base_sequence=0))
    assert (kind, code) == (InvalidRecordError, 87) and "needs a produce request with a transactional id" in message
    assert codes_of(rewrite(GOOD, 21, "h", 0x08))[:2] == (InvalidTimestampError, 32)  # LogAppendTime
    assert codes_of(rewrite(GOOD, 21, "h", 5))[:2] == (UnsupportedCompressionError, 76)  # codec 5
    assert codes_of(rewrite(GOOD, 27, "q", 2**63 - 1))[:2] == (InvalidTimestampError, 32)  # base at int64's edge
    late = encode_produce_batch([Record(b"k", b"v", (), 2**63 - 100), Record(b"k", b"v", (), -(2**62))])
    assert codes_of(rewrite(late, 27, "q", 2**63 - 100))[:2] == (CorruptMessageError, 2)  # delta overflows int64
    assert codes_of(rewrite(GOOD, 23, "i", 5))[:2] == (InvalidRecordError, 87)  # last offset delta != count - 1
    zero = rewrite(rewrite(GOOD, 57, "i", 0), 23, "i", -1)
    assert codes_of(zero)[:2] == (InvalidRecordError, 87)  # no records
    assert codes_of(encode_produce_batch([Record(b"k", b"v", (), T0)], producer_id=3, producer_epoch=0,
                                         base_sequence=-1))[:2] == (InvalidRecordError, 87)
    # record count 3 with records for 2 (and the offset delta fixed to match)
    assert codes_of(rewrite(rewrite(GOOD, 57, "i", 3), 23, "i", 2))[:2] == (CorruptMessageError, 2)
    compressed = encode_produce_batch([Record(b"k", b"v", (), T0)] * 3, compression=1)
    assert codes_of(rewrite(rewrite(compressed, 57, "i", 4), 23, "i", 3))[:2] == (CorruptMessageError, 2)
    # offset deltas 0, 2 instead of 0, 1
    body = encode_records([b"a", b"b"], [b"1", b"2"], None, None, [0, 2])
    assert codes_of(_wrap(body, 2))[:2] == (InvalidRecordError, 87)
    body = encode_records([b"a"], [b"1"], [(("x", b"1"),)], None, None)
    assert decode_produce(_wrap(body, 1), max_message_bytes=MAX)
    bad_utf8 = body.replace(b"\x02x", b"\x02\xff")
    assert codes_of(_wrap(bad_utf8, 1))[:2] == (InvalidRecordError, 87)


def _reference_records(keys, values, headers, timestamp_deltas, offset_deltas) -> bytes:
    """Kafka's record layout written one record and one field at a time (the model for
    ``encode_records``, which builds the same bytes column-wise)."""
    out = []
    for index, (key, value) in enumerate(zip(keys, values)):
        body = b"\x00" + encode_varint(timestamp_deltas[index] if timestamp_deltas else 0)
        body += encode_varint(offset_deltas[index] if offset_deltas else index)
        for field in (key, value):
            body += encode_varint(-1) if field is None else encode_varint(len(field)) + field
        pairs = headers[index] if headers else ()
        body += encode_varint(len(pairs))
        for name, header_value in pairs:
            body += encode_varint(len(name.encode())) + name.encode()
            body += encode_varint(-1) if header_value is None else encode_varint(len(header_value)) + header_value
        out += (encode_varint(len(body)), body)
    return b"".join(out)


_one_size = st.sampled_from([None, b"", b"v", b"x" * 100, b"y" * 300])


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 80), st.data())
def test_encode_records_gives_the_reference_bytes(count, data):
    """Every shape the column-wise encoder treats apart (keyless records, values of one size, nulls
    among them, no timestamp deltas, dense or sparse offsets, counts past the one-byte varints,
    headers) gives the bytes of the record-at-a-time model."""
    def column():
        if data.draw(st.booleans()):  # one value for every record (what producers send)
            return [data.draw(_one_size)] * count
        return data.draw(st.lists(keys_or_values, min_size=count, max_size=count))
    keys, values = column(), column()
    record_headers = data.draw(st.one_of(st.none(), st.lists(headers, min_size=count, max_size=count)))
    deltas = data.draw(st.one_of(st.none(), st.lists(st.integers(-2**40, 2**40), min_size=count, max_size=count)))
    offsets = None
    if data.draw(st.booleans()):
        gaps = data.draw(st.lists(st.integers(1, 20000), min_size=count, max_size=count))
        offsets = [sum(gaps[:index + 1]) - 1 for index in range(count)]
    if count <= 20 and data.draw(st.booleans()):
        keys, values = keys * 120, values * 120  # past 64 and 2,400 offset deltas: wider varints
        record_headers = record_headers * 120 if record_headers else record_headers
        deltas = deltas * 120 if deltas else deltas
        offsets = None
    promise = {"null_keys": None in keys or data.draw(st.booleans()),
               "null_values": None in values or data.draw(st.booleans())}
    assert encode_records(keys, values, record_headers, deltas, offsets, **promise) == _reference_records(
        keys, values, record_headers, deltas, offsets)


def _wrap(records: bytes, count: int, attributes: int = 0) -> bytes:
    """A produce batch around ready-made records."""
    header = HEADER_STRUCT.pack(0, 49 + len(records), -1, 2, 0, attributes, count - 1, T0, T0, -1, -1, -1, count)
    return rewrite(header + records, 21, "h", attributes)


# --- robustness ------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_every_bit_flip_is_refused_or_well_defined(codec):
    records = [Record(b"key-%d" % i, b"value-%d" % i * 3, (("h", b"%d" % i),) if i % 2 else (), T0 + i)
               for i in range(6)]
    data = encode_produce_batch(records, compression=codec)
    expected = plain(records)
    for position in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            flipped = bytearray(data)
            flipped[position] ^= mask
            try:
                result = decode_produce(bytes(flipped), max_message_bytes=MAX)
            except WireRecordError:
                assert not 12 <= position < 16  # the leader epoch is not checked (the broker overwrites it)
                continue
            # only the partition leader epoch lies outside both the CRC and the checks
            assert 12 <= position < 16, position
            assert result[0][1] == expected


@settings(max_examples=300)
@given(st.data())
def test_damaged_records_under_a_valid_crc_only_raise_wire_record_errors(data):
    records = data.draw(records_strategy)
    codec = data.draw(st.sampled_from([0, 0, 0, 1, 3]))
    batch = bytearray(encode_produce_batch(records, compression=codec))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(21, len(batch) - 1))
        batch[position] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    try:
        decoded = decode_produce(bytes(batch), max_message_bytes=MAX)
    except WireRecordError:
        return
    assert all(isinstance(record, Record) for _batch, records in decoded for record in records)


@settings(max_examples=300)
@given(st.binary(max_size=300), st.integers(-3, 3), st.sampled_from([0, 0, 1, 2, 3, 4]))
def test_random_bytes_only_raise_wire_record_errors(body, count_shift, codec):
    count = max(1, len(body) // 8 + count_shift)
    framed = _wrap(body, count, codec)
    for data in (body, framed, framed[:-1]):
        for decode in (lambda d: decode_produce(d, max_message_bytes=MAX), decode_fetch):
            try:
                decode(data)
            except WireRecordError:
                pass


# --- fetch -----------------------------------------------------------------------------------------


def open_store(tmp_path):
    clock = ManualClock(T0)
    store = LogManager([str(tmp_path)], config={"log.cleaner.threads": 0}, clock=clock,
                       scheduler=Scheduler(clock, threaded=False))
    return store, clock


def fetched(log) -> list[Record]:
    """Every record of ``log`` through encode_fetch_batch and decode_fetch, checking each batch."""
    out = []
    for batch, _first, _stop in log.iter_batch_slices():
        wire = encode_fetch_batch(batch)
        [(header, records)] = decode_fetch(wire)
        assert (header.base_offset, header.last_offset_delta) == (batch.base_offset, batch.header.last_offset_delta)
        assert header.record_count == batch.record_count and header.producer_id == -1
        assert header.partition_leader_epoch == 0 and header.compression == 0
        out.extend(records)
    return out


def expected_records(log) -> list[Record]:
    return [record._replace(headers=tuple(record.headers)) for record in log.iter_records()]


@settings(max_examples=15)
@given(st.lists(records_strategy, min_size=1, max_size=5), st.sampled_from(["uncompressed", "gzip"]))
def test_fetch_round_trip_against_iter_records(tmp_path_factory, appends, stored_codec):
    store, _clock = open_store(tmp_path_factory.mktemp("store"))
    with store:
        store.create_topic("t", 1, {"compression.type": stored_codec})
        log = store.get_log("t", 0)
        for records in appends:
            log.append(records)
        assert fetched(log) == expected_records(log) and len(expected_records(log)) == sum(map(len, appends))


def test_fetch_of_a_compacted_log_with_sparse_offsets(tmp_path):
    store, clock = open_store(tmp_path)
    rng = random.Random(5)
    with store:
        store.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": 2000, "file.delete.delay.ms": 0})
        log = store.get_log("c", 0)
        for i in range(60):
            log.append([Record(b"k%d" % rng.randrange(25), None if rng.random() < 0.1 else b"v%d-%d" % (i, j),
                               (("n", b"%d" % j),) if j % 3 == 0 else (), T0 + rng.randrange(-50, 50))
                        for j in range(rng.randint(1, 8))])
        log.roll()
        store.compact("c")
        offsets = [record.offset for record in log.iter_records()]
        assert offsets != list(range(offsets[0], offsets[0] + len(offsets)))  # sparse
        sparse_batches = [batch for batch, _f, _s in log.iter_batch_slices()
                          if batch.record_count != batch.header.last_offset_delta + 1]
        assert sparse_batches
        assert fetched(log) == expected_records(log)


def test_fetch_of_log_append_time_topics(tmp_path):
    store, clock = open_store(tmp_path)
    with store:
        store.create_topic("a", 1, {"message.timestamp.type": "LogAppendTime"})
        log = store.get_log("a", 0)
        log.append([Record(b"x", b"1", (), 5), Record(None, b"2", (("h", None),), 6)])
        clock.advance(1000)
        log.append([Record(b"y", b"3", (), 7)])
        wires = [encode_fetch_batch(batch) for batch, _f, _s in log.iter_batch_slices()]
        headers = [decode_fetch(wire)[0][0] for wire in wires]
        assert [header.timestamp_type for header in headers] == [1, 1]
        assert [header.max_timestamp for header in headers] == [T0, T0 + 1000]
        assert fetched(log) == expected_records(log)
        assert [record.timestamp_ms for record in fetched(log)] == [T0, T0, T0 + 1000]


def test_an_emptied_batch_becomes_kafkas_empty_batch():
    empty = _stored_empty_batch(base_offset=40, last_offset_delta=9, max_timestamp=T0 + 7)
    wire = encode_fetch_batch(empty)
    [(header, records)] = decode_fetch(wire)
    assert records == [] and header.record_count == 0 and header.last_offset_delta == 9
    assert (header.base_offset, header.base_timestamp, header.max_timestamp) == (40, -1, T0 + 7)
    assert header.next_offset == 50 and len(wire) == 61


def _stored_empty_batch(base_offset: int, last_offset_delta: int, max_timestamp: int) -> RecordBatch:
    """A stored batch with no records that takes offsets (as the cleaner leaves them)."""
    from logstore.records.decoder import BatchHeader
    header = BatchHeader(base_offset, 43, 1, 0, 0, last_offset_delta, 0, max_timestamp, max_timestamp, -1)
    return RecordBatch(header, b"\x00" * 55)


def test_fetch_batches_carry_producer_fields_and_epoch_when_given(tmp_path):
    store, _clock = open_store(tmp_path)
    with store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        log.append([Record(b"k", b"v", (), T0)])
        [(batch, _f, _s)] = list(log.iter_batch_slices())
        wire = encode_fetch_batch(batch, partition_leader_epoch=3, producer_id=9, producer_epoch=1, base_sequence=0)
        [(header, _records)] = decode_fetch(wire)
        assert (header.partition_leader_epoch, header.producer_id, header.producer_epoch, header.base_sequence) == (
            3, 9, 1, 0)


def test_decode_fetch_tolerates_a_truncated_last_batch_and_checks_crcs():
    first = encode_produce_batch([Record(b"a", b"1", (), T0)], base_offset=10)
    second = encode_produce_batch([Record(b"b", b"2", (), T0)], base_offset=11)
    for cut in range(1, len(second)):
        decoded = decode_fetch(first + second[:cut])
        assert [records[0].offset for _batch, records in decoded] == [10]
    assert [records[0].offset for _b, records in decode_fetch(first + second)] == [10, 11]
    damaged = bytearray(first)
    damaged[-1] ^= 1
    with pytest.raises(CorruptMessageError):
        decode_fetch(bytes(damaged))


def test_record_batch_values_match_records():
    from logstore.records.encoder import encode_batch
    records = [Record(b"k", b"v1", (), T0), Record(b"k", None, (), T0), Record(None, b"", (), T0)]
    batch = RecordBatch.decode(bytes(encode_batch(records)))
    assert list(batch.values()) == [record.value for record in batch.records()] == [b"v1", None, b""]


# --- the cache -------------------------------------------------------------------------------------


def test_fetch_batch_cache_hits_misses_and_evicts_by_bytes(tmp_path):
    store, _clock = open_store(tmp_path)
    with store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        for i in range(6):
            log.append([Record(b"k%d" % i, b"x" * 1000, (), T0)] * 3)
        batches = [batch for batch, _f, _s in log.iter_batch_slices()]
        size = len(encode_fetch_batch(batches[0]))
        cache = FetchBatchCache(capacity_bytes=size * 4)
        keys = [("t", 0, batch.base_offset, batch.header.crc) for batch in batches]
        for key, batch in zip(keys, batches):
            assert cache.get_or_encode(key, batch) == encode_fetch_batch(batch)
        assert (cache.hits, cache.misses, cache.evictions, len(cache)) == (0, 6, 2, 4)
        assert cache.size_bytes <= cache.capacity_bytes
        assert cache.get_or_encode(keys[5], batches[5]) is cache.get_or_encode(keys[5], batches[5])
        assert cache.hits == 2 and keys[0] not in cache and keys[2] in cache
        cache.get_or_encode(keys[2], batches[2])  # now the most recently used
        cache.get_or_encode(keys[0], batches[0])  # evicts keys[3], the least recently used
        assert keys[3] not in cache and keys[2] in cache
        tiny = FetchBatchCache(capacity_bytes=size)  # a batch over a quarter of the capacity is not kept
        tiny.get_or_encode(keys[0], batches[0])
        assert len(tiny) == 0


def test_fetch_batch_cache_is_thread_safe(tmp_path):
    store, _clock = open_store(tmp_path)
    with store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        for i in range(20):
            log.append([Record(b"k", b"v%d" % i, (), T0)])
        batches = [batch for batch, _f, _s in log.iter_batch_slices()]
        expected = [encode_fetch_batch(batch) for batch in batches]
        cache = FetchBatchCache(capacity_bytes=len(expected[0]) * 8)
        errors = []

        def reader(seed):
            rng = random.Random(seed)
            for _ in range(400):
                index = rng.randrange(len(batches))
                if cache.get_or_encode(("t", 0, index), batches[index]) != expected[index]:
                    errors.append(index)

        threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors and cache.hits + cache.misses == 1600 and len(cache) <= 8
        assert cache.size_bytes == sum(map(len, (cache.get(key) for key in list(cache._entries))))


def test_wire_batch_properties():
    header = WireBatch(0, 100, 0, 2, 0, 0x08 | 0x10 | 0x20 | 3, 4, T0, T0, -1, -1, -1, 5)
    assert (header.size_bytes, header.compression, header.timestamp_type, header.is_transactional,
            header.is_control) == (112, 3, 1, True, True)
