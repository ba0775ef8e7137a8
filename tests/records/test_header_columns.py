"""Headers as columns (batch magic 2, ``logstore/records/header_columns.py``): round trips of arbitrary
headers against a plain model, the regular fast path pinned to the general path, magic-1 bytes still
read the same, the byte charge unchanged, intact batches with inconsistent header columns refused,
random damage to the header section never misread, and the encoder's type checks.
"""

from __future__ import annotations

import os
import random
import re
import struct
import zlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from logstore.errors import CorruptRecordError
from logstore.records import header_columns
from logstore.records.decoder import (BODY_AT, COMPRESSION_GZIP, COMPRESSION_NONE, CRC_AT, HEADER_BYTES, MAGIC,
                                      Record, RecordBatch, columns_bytes, read_header, record_charge)
from logstore.records.encoder import assign_base_offset, encode_batch

names = st.one_of(st.sampled_from(["trace", "src", "", "ключ", "é", "dup"]), st.text(max_size=8))
values = st.one_of(st.none(), st.binary(max_size=20))
header_lists = st.one_of(st.just(()), st.lists(st.tuples(names, values), max_size=6),
                         st.lists(st.tuples(names, values), min_size=20, max_size=40))
records_strategy = st.builds(Record, key=st.one_of(st.none(), st.binary(max_size=8)), value=st.binary(max_size=8),
                             headers=header_lists, timestamp_ms=st.just(1_700_000_000_000))


def expected(records, base_offset=0):
    return [Record(r.key, r.value, tuple((name, value) for name, value in r.headers), r.timestamp_ms, base_offset + i)
            for i, r in enumerate(records)]


def partial(encoded: bytes, reads: list | None = None) -> RecordBatch:
    """A partial batch as ``LogSegment`` builds one: header and columns in memory, the rest fetched."""
    header = read_header(encoded)
    head = bytes(encoded[: HEADER_BYTES + columns_bytes(header)])

    def fetch(at: int, size: int) -> bytes:
        if reads is not None:
            reads.append(size)
        return encoded[HEADER_BYTES + at : HEADER_BYTES + at + size]

    return RecordBatch(header, head, fetch)


@settings(max_examples=300, deadline=None)
@given(st.lists(records_strategy, min_size=1, max_size=30), st.sampled_from([COMPRESSION_NONE, COMPRESSION_GZIP]),
       st.data())
def test_headers_round_trip_in_every_access_path(records, compression, data):
    encoded = bytes(encode_batch(records, compression=compression, base_offset=9))
    want = expected(records, 9)
    batch = RecordBatch.decode(encoded)
    assert batch.header.magic == MAGIC == 3
    assert batch.records() == want
    assert batch.headers() == [r.headers for r in want]
    count = len(want)
    start = data.draw(st.integers(0, count), label="start")
    stop = data.draw(st.integers(start, count), label="stop")
    assert list(RecordBatch.decode(encoded).iter_records(start, stop)) == want[start:stop]
    assert RecordBatch.decode(encoded).headers(start, stop) == [r.headers for r in want[start:stop]]
    assert [RecordBatch.decode(encoded).record_at(i) for i in range(count)] == want
    assert batch.payload_bytes(start, stop) == sum(map(record_charge, want[start:stop]))
    if compression == COMPRESSION_NONE:
        assert partial(encoded).records(start, stop) == want[start:stop]
        assert partial(encoded).payload_bytes(start, stop) == sum(map(record_charge, want[start:stop]))
        index = data.draw(st.integers(0, count - 1), label="index")
        reads: list[int] = []
        assert partial(encoded, reads).record_at(index) == want[index]
        own = sum(8 + len(name.encode()) + len(value or b"") for name, value in want[index].headers)
        assert sum(reads) == own + len(want[index].key or b"") + len(want[index].value or b"")


@settings(max_examples=200, deadline=None)
@given(st.lists(records_strategy, max_size=30), st.sampled_from([COMPRESSION_NONE, COMPRESSION_GZIP]))
def test_magic_1_and_magic_2_read_the_same_records_and_charge_the_same_bytes(records, compression):
    old = bytes(encode_batch(records, compression=compression, magic=1))
    new = bytes(encode_batch(records, compression=compression))
    old_batch, new_batch = RecordBatch.decode(old), RecordBatch.decode(new)
    assert old_batch.header.magic == 1 and new_batch.header.magic == MAGIC
    assert old_batch.records() == new_batch.records() == expected(records)
    count = len(records)
    assert [old_batch.payload_bytes(0, i) for i in range(count + 1)] == [
        new_batch.payload_bytes(0, i) for i in range(count + 1)]
    if not any(r.headers for r in records):  # no headers: the same bytes but the magic and the checksums
        differing = {i for i in range(len(old)) if old[i] != new[i]}
        assert len(old) == len(new) and differing <= {12} | set(range(CRC_AT, BODY_AT))


@st.composite
def regular_batches(draw):
    """Records that all have the same header names and sizes (the fast path), some values equal in
    every record, sometimes names that vary with the same sizes."""
    k = draw(st.integers(1, 4))
    shape = [(draw(st.text(max_size=6)), draw(st.integers(0, 20))) for _ in range(k)]
    constant = [draw(st.booleans()) for _ in range(k)]
    count = draw(st.integers(1, 40))
    rng = random.Random(draw(st.integers(0, 2**32)))
    fixed_values = [rng.randbytes(size) for _, size in shape]
    vary_names = draw(st.booleans())
    records = []
    for i in range(count):
        headers = []
        for (name, size), same, fixed in zip(shape, constant, fixed_values):
            if vary_names and name:
                name = "".join(rng.choice("ab") for _ in name)
            headers.append((name, fixed if same else rng.randbytes(size)))
        records.append(Record(b"k%d" % i, b"v", tuple(headers), 5))
    return records


@settings(max_examples=200, deadline=None)
@given(regular_batches())
def test_the_regular_fast_path_gives_what_the_general_path_gives(records):
    """Every decoding path of header_columns, each forced whatever the batch size: the regular fast
    path (whole batches and ranges of full bodies), the column-wise general path and the loop for a
    few headers (partial batches), and the one-record path."""
    encoded = bytes(encode_batch(records))
    count = len(records)
    want = [r.headers for r in expected(records)]
    answers = {}
    for name, regular_from, loop_up_to in (("regular", 1, 0), ("columns", 10**9, 0), ("loop", 10**9, 10**9)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(header_columns, "_REGULAR_MIN_RECORDS", regular_from)
            patch.setattr(header_columns, "_LOOP_MAX_HEADERS", loop_up_to)
            answers[name + " whole"] = RecordBatch.decode(encoded).headers()
            answers[name + " partial"] = partial(encoded).headers()
            answers[name + " ranges"] = [RecordBatch.decode(encoded).headers(start, count) for start in range(count)]
            answers[name + " one by one"] = [h for i in range(count) for h in RecordBatch.decode(encoded).headers(i, i + 1)]
    ranges = [want[start:] for start in range(count)]
    assert answers == {name: ranges if name.endswith("ranges") else want for name in answers}


@settings(max_examples=150, deadline=None)
@given(st.lists(records_strategy, min_size=1, max_size=40), st.data())
def test_every_decoding_path_reads_arbitrary_headers_the_same(records, data):
    encoded = bytes(encode_batch(records))
    want = [r.headers for r in expected(records)]
    count = len(want)
    start = data.draw(st.integers(0, count - 1), label="start")
    stop = data.draw(st.integers(start + 1, count), label="stop")
    for regular_from, loop_up_to in ((1, 0), (10**9, 0), (10**9, 10**9)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(header_columns, "_REGULAR_MIN_RECORDS", regular_from)
            patch.setattr(header_columns, "_LOOP_MAX_HEADERS", loop_up_to)
            assert RecordBatch.decode(encoded).headers() == want
            assert RecordBatch.decode(encoded).headers(start, stop) == want[start:stop]
            assert partial(encoded).headers(start, stop) == want[start:stop]


def test_a_batch_with_a_null_header_value_or_mixed_counts_takes_the_general_path_and_reads_right():
    records = [Record(b"a", b"1", (("n", b"x"),)), Record(b"b", b"2", (("n", None),)), Record(b"c", b"3", ())]
    batch = RecordBatch.decode(bytes(encode_batch(records)))
    assert batch.headers() == [(("n", b"x"),), (("n", None),), ()]


def test_headers_given_as_lists_or_generators_are_encoded_like_tuples():
    records = [Record(b"k", b"v", [["a", b"1"], ("b", None)]), Record(b"k", b"v", (pair for pair in [("c", b"")]))]
    assert RecordBatch.decode(bytes(encode_batch(records))).headers() == [(("a", b"1"), ("b", None)), (("c", b""),)]
    empty = RecordBatch.decode(bytes(encode_batch([Record(b"k", b"v", iter(()))])))  # truthy, yet no pair
    assert empty.records()[0].headers == () and empty.columns.at[4] < 0  # no header columns at all


@pytest.mark.parametrize("headers, shown", [
    ((("name", "str-value"),), "'str-value'"),
    (((b"bytes-name", b"v"),), "b'bytes-name'"),
    ((("lonely",),), "('lonely',)"),
    ((("a", b"1", "b"), (b"c",)), "('a', b'1', 'b')"),  # a 3-tuple and a 1-tuple must not pair up
    ((("m", memoryview(b"v")),), "memory"),
    ("just-a-string", "just-a-string"),
    ((("\ud800", b"v"),), "\\ud800"),
    (([], b"v"), "[]"),
])
def test_bad_headers_raise_type_error_naming_them(headers, shown):
    with pytest.raises(TypeError) as caught:
        encode_batch([Record(b"k", b"v", (("fine", b"1"),)), Record(b"k", b"v", headers)])
    assert shown in str(caught.value)


def test_an_unknown_magic_to_encode_is_refused():
    with pytest.raises(ValueError, match="magic"):
        encode_batch([Record(b"k", b"v", (("a", b"1"),))], magic=MAGIC + 1)
    with pytest.raises(ValueError, match="magic"):
        encode_batch([Record(b"k", b"v")], magic=0)


# --- intact batches whose header columns do not agree are refused ---------------------------------------


def _reseal(data: bytearray) -> bytes:
    struct.pack_into("<I", data, CRC_AT, zlib.crc32(data[BODY_AT:]))
    assign_base_offset(data, struct.unpack_from("<q", data)[0])
    return bytes(data)


def _layout(encoded: bytes) -> dict:
    batch = RecordBatch.decode(encoded)
    columns = batch.columns
    return {"ends": HEADER_BYTES + columns.at[4], "counts": HEADER_BYTES + columns.at[5],
            "section": HEADER_BYTES + columns.blob_at[2], "count": columns.count}


REGULAR = [Record(b"k%d" % i, b"v", (("trace", bytes([i]) * 4), ("src", b"svc")), 5) for i in range(4)]
MIXED = [Record(b"a", b"1", (("n", b"xy"),)), Record(b"b", b"2", ()), Record(b"c", b"3", (("m", None), ("o", b"z")))]


@pytest.mark.parametrize("records", [REGULAR, MIXED], ids=["regular", "mixed"])
@pytest.mark.parametrize("change", [
    lambda data, at: struct.pack_into("<ii", data, at["counts"], 2, 1),  # counts decrease
    lambda data, at: struct.pack_into("<i", data, at["counts"], -1),  # a negative count
    lambda data, at: struct.pack_into("<ii", data, at["ends"], 7, 3),  # ends decrease
    lambda data, at: struct.pack_into("<i", data, at["section"], -2),  # a null name
    lambda data, at: struct.pack_into("<i", data, at["section"] + 4, 0),  # a value ending before its name
    lambda data, at: struct.pack_into("<i", data, at["ends"], 1),  # record 0's data end disagrees
    # header 0's value marked null yet still ending past its name: bytes no name or value holds
    lambda data, at: struct.pack_into("<i", data, at["section"] + 4,
                                      ~struct.unpack_from("<i", data, at["section"] + 4)[0]),
], ids=["counts-decrease", "negative-count", "ends-decrease", "null-name", "value-before-name", "record-end",
        "null-value-keeps-bytes"])
def test_an_intact_batch_with_inconsistent_header_columns_is_corrupt(records, change):
    encoded = bytes(encode_batch(records))
    data = bytearray(encoded)
    change(data, _layout(encoded))
    with pytest.raises(CorruptRecordError):
        RecordBatch.decode(_reseal(data))


def test_an_intact_batch_with_an_undecodable_header_name_is_corrupt_when_read():
    for records in (REGULAR, MIXED):
        encoded = bytes(encode_batch(records))
        at = _layout(encoded)
        data = bytearray(encoded)
        total = sum(len(r.headers) for r in records)
        data[at["section"] + 8 * total] = 0xFF  # the first byte of the first name
        batch = RecordBatch.decode(_reseal(data))
        with pytest.raises(CorruptRecordError, match="undecodable"):
            batch.records()


def _changeable(records) -> list[int]:
    """Positions of the header columns and of the headers section in the batch of ``records``."""
    encoded = bytes(encode_batch(records))
    at = _layout(encoded)
    return list(range(at["ends"], at["counts"] + 4 * at["count"])) + list(range(at["section"], len(encoded)))


changed_batches = st.sampled_from([REGULAR, MIXED]).flatmap(lambda records: st.tuples(
    st.just(records), st.lists(st.tuples(st.sampled_from(_changeable(records)), st.integers(0, 255)),
                               min_size=1, max_size=3)))


@settings(max_examples=300, deadline=None)
@given(changed_batches)
# MIXED's third header ("m", null) gets name end 3 instead of 4: its name reads as "" while the null
# value's end (~4) still covers the "m", a byte neither read nor charged to a record but counted
# by header_ends, so payload_bytes said 84 and the records' charges 83
@example((MIXED, [(111, 3)]))
def test_random_changes_to_the_header_bytes_are_refused_or_read_consistently(case):
    """With both checksums redone (so only the columns' consistency stands between the bytes and the
    reader), changed header columns or entries either raise CorruptRecordError or read the same
    records by every path (whole, one at a time, partially) and charge what payload_bytes says:
    never another exception, never two answers."""
    records, changes = case
    changed = bytearray(encode_batch(records))
    for position, byte in changes:
        changed[position] = byte
    try:
        batch = RecordBatch.decode(_reseal(changed))
        whole = batch.records()
    except CorruptRecordError:
        return
    resealed = _reseal(changed)
    assert [RecordBatch.decode(resealed).record_at(i) for i in range(len(whole))] == whole
    assert partial(resealed).records() == whole
    assert sum(map(record_charge, whole)) == RecordBatch.decode(resealed).payload_bytes(0, len(whole))


def test_the_magic_2_worked_example_in_the_format_doc_is_the_golden_example_v2():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "FORMAT.md"), encoding="utf-8") as file:
        doc = file.read()
    block = re.search(r"<!-- golden: fixtures/batches/example_v2\.bin -->\s*```text\n(.*?)```", doc, re.S)
    assert block, "docs/FORMAT.md lost its magic-2 worked example"
    dumped = bytearray()
    for line in block.group(1).splitlines():
        assert int(line[:5]) == len(dumped), line
        dumped += bytes.fromhex(line[7:54])
    with open(os.path.join(root, "fixtures", "batches", "example_v2.bin"), "rb") as file:
        assert bytes(dumped) == file.read()
    batch = RecordBatch.decode(bytes(dumped))
    assert batch.header.magic == 2 and batch.records()[2].headers == (("src", b"web"), ("gone", None))
    assert record_charge(batch.records()[2]) == 51 == batch.payload_bytes(2, 3)


@settings(max_examples=100, deadline=None)
@given(st.lists(records_strategy, min_size=1, max_size=20))
def test_the_kafka_server_converts_both_magics_to_the_same_wire_batch(records):
    from logstore.server.wire_records import decode_fetch, encode_fetch_batch
    old = RecordBatch.decode(bytes(encode_batch(records, magic=1, base_offset=5)))
    new = RecordBatch.decode(bytes(encode_batch(records, base_offset=5)))
    wire = bytes(encode_fetch_batch(new))
    assert bytes(encode_fetch_batch(old)) == wire
    ((_, decoded),) = decode_fetch(wire)
    assert [(r.key, r.value, tuple(r.headers), r.offset) for r in decoded] == [
        (r.key, r.value, r.headers, r.offset) for r in expected(records, 5)]


def test_more_than_65535_headers_take_int32_counts():
    records = [Record(b"k%d" % i, b"v", (("trace", b"%d" % i), ("src", b"svc")), 5) for i in range(33_000)]
    records[5] = records[5]._replace(headers=(("n", None),))
    encoded = bytes(encode_batch(records))
    batch = RecordBatch.decode(encoded)
    assert batch.header.attributes & header_columns.WIDE_COUNTS
    want = expected(records)
    assert batch.records() == want
    assert partial(encoded).records(32_990, 33_000) == want[32_990:]
    assert [RecordBatch.decode(encoded).record_at(i) for i in (0, 5, 32_999)] == [want[0], want[5], want[32_999]]
    assert batch.payload_bytes(0, 33_000) == sum(map(record_charge, want))
    narrow = RecordBatch.decode(bytes(encode_batch(records[:1000])))
    assert not narrow.header.attributes & header_columns.WIDE_COUNTS


@pytest.mark.parametrize("records, magic", [([Record(b"k", b"v")], 2), ([Record(b"k", b"v", (("a", b"1"),))], 1)])
def test_the_wide_counts_bit_is_unknown_without_magic_2_headers(records, magic):
    data = bytearray(encode_batch(records, magic=magic))
    attributes = struct.unpack_from("<H", data, 21)[0]
    struct.pack_into("<H", data, 21, attributes | header_columns.WIDE_COUNTS)
    with pytest.raises(CorruptRecordError, match="unknown attribute bits"):
        RecordBatch.decode(_reseal(data))
