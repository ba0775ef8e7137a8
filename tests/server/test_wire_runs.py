"""The record decoder's fast path (``wire_runs.take_run``) against its general loop.

The model is the general loop itself: the same bytes decoded with ``take_run`` switched off must give
the same records, or the same error (type, Kafka code and message), for

- batches built record by record here, with runs of one layout broken by other shapes (headers,
  other lengths, long timestamp deltas), offset deltas past 64 and 8192, null and empty keys and
  values, and varints in non-canonical (padded) forms that only the general loop takes;
- the same batches damaged under a recomputed CRC (bytes overwritten, the record count changed),
  decoded for produce and for fetch, one batch or two back to back.

And the fast path does engage: a producer's uniform batch is taken as the runs its offset-delta
widths make (0..63, 64..8191, 8192..), and a record that differs ends a run there.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st

from logstore import Record
from logstore.server.wire_records import decode as wire_decode, runs as wire_runs
from logstore.server.wire_records import decode_fetch, decode_produce, encode_produce_batch
from logstore.server.wire_records.batch import HEADER_STRUCT, WireRecordError
from logstore.server.wire_records.crc32c import crc32c

T0 = 1_700_000_000_000
MAX = 1 << 24


def varint(value: int, pad: int = 0) -> bytes:
    """Kafka's varint of ``value``, with ``pad`` extra (non-canonical, still valid) bytes."""
    number = value << 1 if value >= 0 else ((-value) << 1) - 1
    out = bytearray()
    while number > 0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    for _ in range(pad):
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def raw_record(key, value, headers, stamp_delta, offset_delta, pads=(0, 0, 0, 0, 0)) -> bytes:
    """One record's bytes, each varint (length excepted) padded by the matching entry of ``pads``."""
    body = [b"\x00", varint(stamp_delta, pads[0]), varint(offset_delta, pads[1])]
    for field, pad in ((key, pads[2]), (value, pads[3])):
        body += [varint(-1, pad)] if field is None else [varint(len(field), pad), field]
    body.append(varint(len(headers), pads[4]))
    for name, header_value in headers:
        body += [varint(len(name)), name]
        body += [varint(-1)] if header_value is None else [varint(len(header_value)), header_value]
    body = b"".join(body)
    return varint(len(body)) + body


def batch(records: bytes, count: int, base_timestamp: int = T0) -> bytes:
    """A v2 produce batch around ready-made records (CRC computed)."""
    data = bytearray(HEADER_STRUCT.pack(0, 49 + len(records), -1, 2, 0, 0, count - 1, base_timestamp,
                                        base_timestamp, -1, -1, -1, count) + records)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def outcome(decode, data):
    try:
        return decode(data)
    except WireRecordError as exc:
        return type(exc), exc.error_code, str(exc)


def both_paths(decode, data):
    """(fast path outcome, general loop outcome) of ``decode(data)``."""
    fast = outcome(decode, data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wire_decode, "take_run", lambda buffer, position, *_rest: (0, position))
        general = outcome(decode, data)
    return fast, general


def produce(data):
    return decode_produce(data, max_message_bytes=MAX)


lengths = st.sampled_from([None, 0, 1, 5, 63, 64, 100, 8191, 8192])
shapes = st.tuples(lengths, lengths)


@st.composite
def batches(draw) -> bytes:
    """Runs of records of one shape each, with odd records between them."""
    count = draw(st.sampled_from([1, 3, 4, 5, 40, 63, 64, 65, 70, 130]))
    stamp_steps = draw(st.sampled_from([(0,), (0, 1), (0, 0, 0, 5), (0, 70), (-3, 4), (0, 9000)]))
    base_timestamp = draw(st.sampled_from([T0, T0, 2**63 - 70, -(2**63) + 70, 2**63 - 9000]))
    shape = draw(shapes)
    parts = []
    stamp = 0
    for index in range(count):
        stamp += stamp_steps[index % len(stamp_steps)]
        key_length, value_length = shape
        headers = ()
        pads = (0, 0, 0, 0, 0)
        odd = draw(st.integers(0, 30))
        if odd == 0:
            shape = draw(shapes)  # a new run from here
        elif odd == 1:
            headers = ((b"h", b"v"),)
        elif odd == 2:
            pads = draw(st.tuples(*[st.integers(0, 2)] * 5))
        elif odd == 3:
            value_length = draw(lengths)
        key = None if key_length is None else bytes([index % 251]) * key_length
        value = None if value_length is None else bytes([(index * 7) % 253]) * value_length
        parts.append(raw_record(key, value, headers, stamp, index, pads))
    return batch(b"".join(parts), count, base_timestamp)


@st.composite
def damaged(draw) -> bytes:
    data = bytearray(draw(batches()))
    for _ in range(draw(st.integers(0, 3))):
        position = draw(st.integers(61, len(data) - 1))
        data[position] = draw(st.sampled_from([0, 1, 2, 0x7F, 0x80, 0x81, 0xFF, draw(st.integers(0, 255))]))
    if draw(st.booleans()):  # another record count (and the last offset delta to match)
        count = draw(st.integers(1, 140))
        struct.pack_into(">i", data, 23, count - 1)
        struct.pack_into(">i", data, 57, count)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


@settings(max_examples=400)
@given(batches())
def test_fast_path_gives_the_general_loops_records(data):
    fast, general = both_paths(produce, data)
    assert fast == general
    fast, general = both_paths(decode_fetch, data)
    assert fast == general


@settings(max_examples=600)
@given(damaged(), st.booleans())
def test_fast_path_gives_the_general_loops_errors_on_damaged_batches(data, twice):
    if twice:
        data += data
    fast, general = both_paths(produce, data)
    assert fast == general
    fast, general = both_paths(decode_fetch, data)
    assert fast == general


def test_a_producers_batch_is_taken_as_three_runs_and_matches_the_general_loop():
    records = [Record(None, b"v" * 100, (), T0 + i // 1000) for i in range(9000)]
    data = encode_produce_batch(records)
    columns = ([], [], [], [], None)
    runs = []
    position, index = 61, 0
    while index < 9000:
        taken, position = wire_runs.take_run(data, position, len(data), index, 9000, T0, None, *columns)
        assert taken
        runs.append(taken)
        index += taken
    assert runs == [64, 8192 - 64, 9000 - 8192]
    assert position == len(data)
    fast, general = both_paths(produce, data)
    assert fast == general and fast[0][1] == records


def test_a_run_ends_at_the_first_record_that_differs():
    parts = [raw_record(b"k", b"value", (), 0, index) for index in range(20)]
    parts[12] = raw_record(b"k", b"value", (), 64, 12)  # a two-byte timestamp delta: one byte longer
    data = batch(b"".join(parts), 20)
    columns = ([], [], [], [], None)
    assert wire_runs.take_run(data, 61, len(data), 0, 20, T0, None, *columns)[0] == 12
    assert columns[0] == [b"k"] * 12 and columns[3] == [T0] * 12
    # a record with headers, or an offset delta out of order, ends a run just the same
    for odd in (raw_record(b"k", b"value", ((b"h", None),), 0, 5), raw_record(b"k", b"value", (), 0, 6)):
        parts = [raw_record(b"k", b"value", (), 0, index) for index in range(20)]
        parts[5] = odd
        data = batch(b"".join(parts), 20)
        assert wire_runs.take_run(data, 61, len(data), 0, 20, T0, None, [], [], [], [], None)[0] == 5


@pytest.mark.parametrize("first,count", [(0, 64), (5, 50), (64, 8128), (100, 300), (8192, 9000), (16000, 500),
                                         (1 << 19, 1 << 13)])
def test_delta_columns_are_the_varints_bytes(first, count):
    width = 1 if first + count <= 64 else 2 if first + count <= 8192 else 3
    encoded = [varint(delta) for delta in range(first, first + count)]
    assert {len(item) for item in encoded} == {width}
    for j in range(width):
        assert wire_runs._delta_column(first, count, width, j) == bytes(item[j] for item in encoded)
