"""Transactional batches and transaction markers on the wire (``wire_records``), without a server:

- a stored transactional batch becomes a v2 batch with its producer id, epoch and base sequence and
  Kafka's transactional bit (0x10); a stored marker becomes a control batch (0x10 | 0x20) holding
  Kafka's end-transaction marker record; plain and idempotent batches keep their bytes (no producer
  fields, no bits). kafka-python's and aiokafka's own batch readers check the CRC and read the fields;
- a produced transactional batch decodes only for a request with a transactional id and with a
  producer id and epoch; a control batch never does.
"""

from __future__ import annotations

import struct

import aiokafka.record.default_records as aio_records
import kafka.record.default_records as kafka_records
import pytest

from logstore import Record
from logstore.records.decoder import RecordBatch
from logstore.records.encoder import assign_base_offset, encode_batch, encode_marker_batch
from logstore.server.wire_records import (InvalidRecordError, decode_fetch, decode_produce, encode_fetch_batch,
                                          encode_produce_batch)
from logstore.server.wire_records.crc32c import crc32c

T0 = 1_700_000_000_000
MAX = 1 << 20
READERS = {"kafka-python": kafka_records.DefaultRecordBatch, "aiokafka": aio_records.DefaultRecordBatch,
           "aiokafka-py": aio_records._DefaultRecordBatchPy}


def records(count: int, prefix: bytes = b"v") -> list[Record]:
    return [Record(b"k%d" % i, prefix + b"%d" % i, (("h", b"x"),) if i == 1 else (), T0 + i) for i in range(count)]


def stored(data: bytearray, base_offset: int) -> RecordBatch:
    """The batch ``data`` as the store holds it at ``base_offset``."""
    assign_base_offset(data, base_offset)
    batch = RecordBatch.decode(bytes(data))
    assert batch is not None
    return batch


def test_a_stored_transactional_batch_carries_its_producer_and_bit_4():
    batch = stored(encode_batch(records(3), producer=(4711, 3, 17), transactional=True), 40)
    wire = encode_fetch_batch(batch)
    [(header, decoded)] = decode_fetch(wire)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4711, 3, 17)
    assert header.attributes == 0x10 and header.is_transactional and not header.is_control
    assert [(r.offset, r.key, r.value) for r in decoded] == [(40 + i, b"k%d" % i, b"v%d" % i) for i in range(3)]


def test_a_stored_marker_is_a_control_batch_with_kafkas_record():
    for commit, kind in ((True, 1), (False, 0)):
        batch = stored(encode_marker_batch(commit, 7, 4711, 3, T0 + 50), 43)
        wire = encode_fetch_batch(batch)
        [(header, decoded)] = decode_fetch(wire)
        assert header.attributes == 0x30 and header.is_control and header.is_transactional
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4711, 3, -1)
        assert header.record_count == 1 and header.base_offset == 43
        [record] = decoded
        assert record.offset == 43 and record.timestamp_ms == T0 + 50
        assert record.key == struct.pack(">hh", 0, kind) and record.value == struct.pack(">hi", 0, 7)


def test_plain_batches_keep_no_producer_fields_and_no_bits():
    plain = stored(encode_batch(records(2)), 5)
    [(header, _)] = decode_fetch(encode_fetch_batch(plain))
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.attributes) == (-1, -1, -1, 0)
    # a producer block without the transactional bit (an idempotent batch): fields, no bit
    idempotent = stored(encode_batch(records(2), producer=(9, 0, 4)), 5)
    [(header, _)] = decode_fetch(encode_fetch_batch(idempotent))
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.attributes) == (9, 0, 4, 0)
    # the keyword fields are for batches without a block; a block wins
    [(header, _)] = decode_fetch(encode_fetch_batch(plain, producer_id=8, producer_epoch=1, base_sequence=2))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (8, 1, 2)
    [(header, _)] = decode_fetch(encode_fetch_batch(idempotent, producer_id=8, producer_epoch=1, base_sequence=2))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 0, 4)


def test_an_emptied_transactional_batch_keeps_its_producer():
    """What compaction leaves of a producer's last batch: no records, its producer and offsets."""
    batch = stored(encode_batch([], last_offset_delta=4, producer=(12, 2, 30), transactional=True), 100)
    [(header, decoded)] = decode_fetch(encode_fetch_batch(batch))
    assert decoded == [] and header.record_count == 0 and header.last_offset_delta == 4
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.attributes) == (12, 2, 30, 0x10)


@pytest.mark.parametrize("client", list(READERS))
def test_clients_read_transactional_batches_and_markers(client):
    data = stored(encode_batch(records(4), producer=(4711, 3, 17), transactional=True), 40)
    marker = stored(encode_marker_batch(False, 7, 4711, 3, T0 + 50), 44)
    reader = READERS[client](encode_fetch_batch(data))
    assert reader.validate_crc()
    assert reader.is_transactional and not reader.is_control_batch
    assert (reader.producer_id, reader.producer_epoch, reader.base_sequence) == (4711, 3, 17)
    assert [(r.offset, r.key, r.value) for r in reader] == [(40 + i, b"k%d" % i, b"v%d" % i) for i in range(4)]
    reader = READERS[client](encode_fetch_batch(marker))
    assert reader.validate_crc()
    assert reader.is_transactional and reader.is_control_batch
    assert (reader.producer_id, reader.producer_epoch, reader.base_offset) == (4711, 3, 44)


def test_a_transactional_produce_batch_needs_a_transactional_request_and_a_producer():
    data = encode_produce_batch(records(3), producer_id=5, producer_epoch=1, base_sequence=0, transactional=True)
    with pytest.raises(InvalidRecordError, match="transactional id"):
        decode_produce(data, max_message_bytes=MAX)
    [(header, decoded)] = decode_produce(data, max_message_bytes=MAX, transactional=True)
    assert header.is_transactional and (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 0)
    assert [(r.key, r.value) for r in decoded] == [(b"k%d" % i, b"v%d" % i) for i in range(3)]
    for pid, epoch in ((-1, -1), (5, -1), (-1, 0)):
        bad = encode_produce_batch(records(1), producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                   transactional=True)
        with pytest.raises(InvalidRecordError, match="producer id and epoch") as caught:
            decode_produce(bad, max_message_bytes=MAX, transactional=True)
        assert caught.value.error_code == 87
    # a request with a transactional id may still carry non-transactional batches
    plain = encode_produce_batch(records(2), producer_id=5, producer_epoch=1, base_sequence=3)
    assert decode_produce(plain, max_message_bytes=MAX, transactional=True)[0][0].producer_id == 5


def test_clients_may_never_produce_a_control_batch():
    marker = bytearray(encode_produce_batch(records(1), producer_id=5, producer_epoch=1, base_sequence=0,
                                            transactional=True))
    marker[22] |= 0x20  # the control bit in the attributes' low byte, then the CRC again
    marker[17:21] = struct.pack(">I", crc32c(bytes(marker[21:])))
    for transactional in (False, True):
        with pytest.raises(InvalidRecordError, match="control batches"):
            decode_produce(bytes(marker), max_message_bytes=MAX, transactional=transactional)
