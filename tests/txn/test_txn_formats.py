"""The ``__transaction_state`` records, byte for byte Kafka's.

The golden bytes are written field by field from Kafka's message specs (TransactionLogKey.json and
TransactionLogValue.json of the transaction coordinator), in the specs' field order, each record
prefixed with its int16 version as Kafka's ``TransactionLog`` writes it; then round trips over any
value, and damaged or hostile bytes refused with a ``CorruptRecordError`` that says what is wrong.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstore.errors import CorruptRecordError
from logstore.txn.formats import (TransactionLogFormatError, TransactionLogValue, TransactionState,
                                  UnknownKeyVersionError, decode_key, decode_value, encode_key, encode_value,
                                  partition_for)


def i8(v): return struct.pack(">b", v)
def i16(v): return struct.pack(">h", v)
def i32(v): return struct.pack(">i", v)
def i64(v): return struct.pack(">q", v)
def string(s): return i16(len(s.encode())) + s.encode()                  # classic: int16 length
def compact_string(s): return bytes([len(s.encode()) + 1]) + s.encode()  # flexible: uvarint length + 1


ONGOING = TransactionLogValue(producer_id=4000, producer_epoch=3, transaction_timeout_ms=60000,
                              state=TransactionState.ONGOING, partitions=[("out", 1), ("in", 0), ("out", 0)],
                              last_update_timestamp_ms=1700000000123, start_timestamp_ms=1700000000000)


# --- golden bytes ---------------------------------------------------------------------------------


def test_key_version_0():
    # TransactionLogKey v0: TransactionalId string.
    assert encode_key("my-txn") == i16(0) + string("my-txn")
    assert decode_key(i16(0) + string("my-txn")) == "my-txn"


def test_value_version_0_ongoing():
    # TransactionLogValue v0: ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs int32,
    # TransactionStatus int8, TransactionPartitions [Topic string, PartitionIds [int32]] (int32 counts),
    # TransactionLastUpdateTimestampMs int64, TransactionStartTimestampMs int64.
    expected = (i16(0) + i64(4000) + i16(3) + i32(60000) + i8(1)
                + i32(2) + string("in") + i32(1) + i32(0) + string("out") + i32(2) + i32(0) + i32(1)
                + i64(1700000000123) + i64(1700000000000))
    assert encode_value(ONGOING) == expected
    assert decode_value(expected) == ONGOING


def test_value_version_0_empty_has_null_partitions():
    value = TransactionLogValue(7, 0, 60000, TransactionState.EMPTY, (), 5, -1)
    expected = i16(0) + i64(7) + i16(0) + i32(60000) + i8(0) + i32(-1) + i64(5) + i64(-1)
    assert encode_value(value) == expected
    assert decode_value(expected) == value


def test_value_version_1_flexible_with_tagged_fields():
    value = TransactionLogValue(4000, 3, 60000, TransactionState.PREPARE_COMMIT, [("in", 0), ("out", 1)],
                                1700000000123, 1700000000000, previous_producer_id=3999, next_producer_id=-1,
                                client_transaction_version=2)
    # v1: the same fields, compact arrays and strings (uvarint length + 1), an empty tag section after
    # each partitions entry, then the tagged fields in tag order: PreviousProducerId (tag 0, int64),
    # NextProducerId (tag 1: at its default -1, so not written), ClientTransactionVersion (tag 2, int16).
    expected = (i16(1) + i64(4000) + i16(3) + i32(60000) + i8(2)
                + bytes([3]) + compact_string("in") + bytes([2]) + i32(0) + b"\x00"
                + compact_string("out") + bytes([2]) + i32(1) + b"\x00"
                + i64(1700000000123) + i64(1700000000000)
                + bytes([2]) + bytes([0, 8]) + i64(3999) + bytes([2, 2]) + i16(2))
    assert encode_value(value) == expected
    assert decode_value(expected) == value


def test_value_version_1_empty_and_no_tags():
    value = TransactionLogValue(7, 0, 60000, TransactionState.EMPTY, (), 5, -1)
    expected = i16(1) + i64(7) + i16(0) + i32(60000) + i8(0) + b"\x00" + i64(5) + i64(-1) + b"\x00"
    assert encode_value(value, version=1) == expected
    assert decode_value(expected) == value


def test_version_0_is_written_unless_a_tagged_field_is_set():
    assert encode_value(ONGOING)[:2] == i16(0)
    for field in ({"previous_producer_id": 1}, {"next_producer_id": 2}, {"client_transaction_version": 1}):
        value = TransactionLogValue(**{**_fields(ONGOING), **field})
        assert encode_value(value)[:2] == i16(1)
        assert decode_value(encode_value(value)) == value
        with pytest.raises(ValueError, match="version 0 cannot hold"):
            encode_value(value, version=0)


def test_unknown_tags_are_skipped_and_empty_partitions_ignored():
    # A tag this version does not know (5, 3 bytes) is skipped, as Kafka's readers do.
    data = (i16(1) + i64(7) + i16(0) + i32(60000) + i8(4) + bytes([1]) + i64(5) + i64(-1)
            + bytes([2]) + bytes([2, 2]) + i16(1) + bytes([5, 3]) + b"abc")
    assert decode_value(data) == TransactionLogValue(7, 0, 60000, TransactionState.COMPLETE_COMMIT, (), 5, -1,
                                                     client_transaction_version=1)
    # Kafka ignores the partitions it reads for an Empty state.
    data = i16(0) + i64(7) + i16(0) + i32(1) + i8(0) + i32(1) + string("t") + i32(1) + i32(3) + i64(5) + i64(-1)
    assert decode_value(data).partitions == ()


def test_tombstone_and_state_ids():
    assert decode_value(None) is None
    assert [state.value for state in TransactionState] == list(range(8))
    assert [state.name for state in TransactionState] == [
        "EMPTY", "ONGOING", "PREPARE_COMMIT", "PREPARE_ABORT", "COMPLETE_COMMIT", "COMPLETE_ABORT", "DEAD",
        "PREPARE_EPOCH_FENCE"]


# --- the partition of an id -----------------------------------------------------------------------


def test_partition_for_is_kafkas_rule():
    # Expected partitions computed by Java (String.hashCode, Utils.abs, % 50). The two negative hashes
    # tell Utils.abs (Math.abs except at -2**31) from a 0x7fffffff mask, which gives 2 and 41.
    assert partition_for("my-transactional-id") == 46    # hashCode -959806496
    assert partition_for("txn-zzzzzzzz") == 7            # hashCode -579848957
    assert partition_for("polygenelubricants") == 0      # hashCode -2**31
    assert partition_for("é-txn") == 44                  # hashCode 216636294
    assert partition_for("my-transactional-id", 7) == 959806496 % 7
    with pytest.raises(ValueError):
        partition_for("x", 0)


# --- round trips ----------------------------------------------------------------------------------


def _fields(value):
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


int16s = st.integers(-(2**15), 2**15 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
values = st.builds(
    lambda pid, epoch, timeout, state, partitions, last, start, prev, nxt, ctv: TransactionLogValue(
        pid, epoch, timeout, state, () if state == TransactionState.EMPTY else partitions, last, start, prev, nxt,
        ctv),
    int64s, int16s, int32s, st.sampled_from(TransactionState),
    st.lists(st.tuples(st.text(max_size=20), int32s), max_size=8), int64s, int64s, int64s, int64s, int16s)


@given(values, st.sampled_from([None, 1]))
def test_values_round_trip(value, version):
    data = encode_value(value, version=version)
    assert decode_value(data) == value
    assert encode_value(decode_value(data), version=version) == data


@given(st.text(max_size=100))
def test_keys_round_trip(transactional_id):
    assert decode_key(encode_key(transactional_id)) == transactional_id


# --- malformed bytes ------------------------------------------------------------------------------


@given(values, st.data())
def test_every_truncation_is_refused(value, data):
    encoded = encode_value(value)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(CorruptRecordError):
        decode_value(encoded[:cut])


@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_are_refused(data):
    for decode in (decode_key, decode_value):
        try:
            decode(data)
        except TransactionLogFormatError:
            pass


@pytest.mark.parametrize("data, message", [
    (i16(0) + string("a") + b"x", "1 bytes left after the last field"),
    (i16(0) + i16(-2), "has length -2"),
    (i16(0) + i16(5) + b"ab", "needs 5 bytes, 2 left"),
    (i16(0) + i16(2) + b"\xff\xfe", "not valid UTF-8"),
])
def test_bad_keys_are_refused(data, message):
    with pytest.raises(TransactionLogFormatError, match=message):
        decode_key(data)


def test_a_key_of_an_unknown_version_is_told_apart():
    with pytest.raises(UnknownKeyVersionError) as info:
        decode_key(i16(1) + string("a"))
    assert info.value.version == 1 and isinstance(info.value, CorruptRecordError)


HEAD0 = i16(0) + i64(7) + i16(0) + i32(60000)
HEAD1 = i16(1) + i64(7) + i16(0) + i32(60000)
TAIL0 = i64(5) + i64(-1)


@pytest.mark.parametrize("data, message", [
    (i16(2) + b"\x00" * 40, "unknown value version 2"),
    (HEAD0 + i8(8) + i32(0) + TAIL0, "state 8 is not a transaction state"),
    (HEAD0 + i8(1) + i32(-1) + TAIL0, "partitions are null in state ONGOING"),
    (HEAD0 + i8(1) + i32(-2) + TAIL0, "count -2"),
    # hostile counts: refused before anything is allocated for them
    (HEAD0 + i8(1) + i32(2**31 - 1) + TAIL0, "claims 2147483647 elements"),
    (HEAD0 + i8(1) + i32(1) + string("t") + i32(2**30) + TAIL0, "claims 1073741824 elements"),
    (HEAD1 + i8(1) + b"\xff\xff\xff\xff\x07" + TAIL0 + b"\x00", "claims 2147483646 elements"),
    (HEAD1 + i8(1) + b"\xff\xff\xff\xff\xff\x01", "longer than 5 bytes"),
    (HEAD1 + i8(1) + b"\x02" + b"\x00" + b"\x01" + b"\x00" + TAIL0 + b"\x00", "topic is null"),
    (HEAD1 + i8(1) + b"\x02" + b"\xff\xff\x02" + TAIL0, "length 49150, more than a string holds"),
    (HEAD1 + i8(0) + b"\x00" + TAIL0 + b"\x7f", "claims 127 tagged fields"),
    (HEAD1 + i8(0) + b"\x00" + TAIL0 + b"\x01\x05\xff\xff\x03" + b"x", "needs 65535 bytes"),
    (HEAD1 + i8(0) + b"\x00" + TAIL0 + b"\x01\x00\x04" + i32(1), r"previous_producer_id \(tag 0\) has size 4, not 8"),
    (HEAD1 + i8(0) + b"\x00" + TAIL0 + b"\x02\x02\x02" + i16(1) + b"\x00\x08" + i64(1), "tag 0 follows tag 2"),
    (HEAD0 + i8(0) + i32(-1) + TAIL0 + b"\x00", "1 bytes left after the last field"),
])
def test_bad_values_are_refused(data, message):
    with pytest.raises(TransactionLogFormatError, match=message):
        decode_value(data)


def test_encoders_name_bad_fields():
    with pytest.raises(ValueError, match="producer_epoch 40000 does not fit in an int16"):
        encode_value(TransactionLogValue(1, 40000, 1, 0, (), 0, 0))
    with pytest.raises(TypeError, match="producer_id must be an int"):
        encode_value(TransactionLogValue(True, 0, 1, 0, (), 0, 0))
    with pytest.raises(ValueError, match="an Empty transaction has no partitions"):
        encode_value(TransactionLogValue(1, 0, 1, TransactionState.EMPTY, [("t", 0)], 0, 0))
    with pytest.raises(ValueError, match="more than a string holds"):
        encode_key("x" * 40000)
    with pytest.raises(ValueError, match="state 9 is not a transaction state"):
        TransactionLogValue(1, 0, 1, 9, (), 0, 0)
    with pytest.raises(TypeError, match="pairs"):
        TransactionLogValue(1, 0, 1, 1, [("t", "0")], 0, 0)
