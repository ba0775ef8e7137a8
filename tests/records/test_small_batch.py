"""The short path of one-record batches (``encoder.encode_one``) against the general encoder it
stands in for.

``encode_one`` builds a one-record batch with a few ``struct`` calls instead of the column machinery,
and declines (None) what it does not take, so the general path encodes it or raises. The bytes must
be the general encoder's, byte for byte, for every kind of record: null and empty keys and values,
headers (null header values, non-ASCII names), given and missing timestamps, LogAppendTime, large
values (written from parts), any base offset. (``tests/log/test_single_appends.py`` checks the
log's use of it, config rules included, against the general path.)
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from logstore.records.decoder import TIMESTAMP_TYPE_LOG_APPEND, Record, RecordBatch
from logstore.records.encoder import LARGE_VALUE_BYTES, assign_base_offset, encode_batch, encode_one

NOW = 1_700_000_000_000

blobs = st.one_of(st.none(), st.just(b""), st.binary(max_size=40),
                  st.binary(min_size=LARGE_VALUE_BYTES - 2, max_size=LARGE_VALUE_BYTES + 2))
header_lists = st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=10))), max_size=3)
headers = st.one_of(st.just(()), st.just([]), header_lists, header_lists.map(tuple))
timestamps = st.one_of(st.none(), st.integers(-1, NOW + 10**6), st.sampled_from([-2**63, 2**63 - 1, 0]))
base_offsets = st.one_of(st.just(0), st.integers(0, 2**40), st.just(2**63 - 1))


def joined(data) -> bytes:
    return data if type(data) is bytes else b"".join(data)


@settings(max_examples=500)
@given(blobs, blobs, headers, timestamps, st.booleans(), base_offsets)
def test_encode_one_gives_the_general_encoders_bytes(key, value, record_headers, timestamp_ms, log_append, base):
    general = encode_batch([Record(key, value, record_headers, timestamp_ms)], default_timestamp_ms=NOW,
                           log_append_time=log_append)
    assign_base_offset(general, base)
    resolved = NOW if timestamp_ms is None or log_append else timestamp_ms
    data = encode_one(base, key, value, record_headers, resolved, TIMESTAMP_TYPE_LOG_APPEND if log_append else 0)
    assert data is not None
    assert joined(data) == bytes(general)
    assert (type(data) is list) == (value is not None and len(value) >= LARGE_VALUE_BYTES)  # large: not copied
    batch = RecordBatch.decode(joined(data))
    assert batch.base_offset == base and batch.max_timestamp == resolved
    assert batch.records() == [Record(key, value, tuple(map(tuple, record_headers)), resolved, base)]


@pytest.mark.parametrize("key, value, record_headers, timestamp_ms", [
    (bytearray(b"k"), b"v", (), NOW), (b"k", memoryview(b"v"), (), NOW), ("text", b"v", (), NOW), (b"k", 5, (), NOW),
    (b"k", b"v", "h", NOW), (b"k", b"v", None, NOW), (b"k", b"v", (), 1.5), (b"k", b"v", (), True),
    (b"k", b"v", (), 2**63), (b"k", b"v", (), -2**63 - 1), (b"k", b"v", [("h", b"x")], 2**64)])
def test_encode_one_declines_what_the_general_path_must_judge(key, value, record_headers, timestamp_ms):
    assert encode_one(0, key, value, record_headers, timestamp_ms, 0) is None


def test_encode_one_raises_the_general_error_for_a_bad_header():
    for bad in ([("h", "text")], [("h",)], [(b"h", b"v")], [5]):
        with pytest.raises(TypeError) as short:
            encode_one(0, b"k", b"v", bad, NOW, 0)
        with pytest.raises(TypeError) as general:
            encode_batch([Record(b"k", b"v", bad, NOW)])
        assert str(short.value) == str(general.value)
