"""The record batch format (docs/FORMAT.md): round trips, partial reads, torn prefixes, single-byte
damage, the golden fixtures that pin the bytes, batch scanning, encoder input checks, and a smoke run
of ``logstore perf format``.

The golden fixtures (fixtures/batches/*.bin, fixtures/manifest.json) are never regenerated here: the
encoder's output must equal the committed bytes, and the committed bytes must decode into the
manifest's records. A format change therefore fails these tests until ``records.MAGIC`` is changed
and ``python fixtures/make_golden.py`` is run on purpose.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import struct
import zlib

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.bench import batch_format as perf_format
from logstore.cli.perf import perf
from logstore.errors import CorruptRecordError
from logstore.records.decoder import (BODY_AT, COMPRESSION_GZIP, COMPRESSION_NONE, CRC_AT, HAS_HEADERS, HAS_NULL_KEYS,
                              HAS_NULL_VALUES, HAS_OFFSET_DELTAS, HAS_TIMESTAMPS, HEADER_BYTES, HEADER_CRC_AT, MAGIC,
                              NO_TIMESTAMP, TIMESTAMP_TYPE_LOG_APPEND, Record, RecordBatch, columns_bytes,
                              iter_batches, iter_headers, read_header, record_charge)
from logstore.records.encoder import assign_base_offset, encode_batch, encode_batch_parts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "fixtures")
with open(os.path.join(FIXTURES, "manifest.json"), encoding="utf-8") as _file:
    MANIFEST = json.load(_file)
GOLDEN = {entry["name"]: entry for entry in MANIFEST["batches"]}
INT64 = (-(2**63), 2**63 - 1)


def golden_bytes(name: str) -> bytes:
    with open(os.path.join(FIXTURES, GOLDEN[name]["file"]), "rb") as file:
        return file.read()


def _unhex(text):
    return None if text is None else bytes.fromhex(text)


def record_from_json(data: dict) -> Record:
    return Record(_unhex(data["key"]), _unhex(data["value"]),
                  tuple((name, _unhex(value)) for name, value in data["headers"]), data["timestamp_ms"],
                  data.get("offset"))


# --- the model: what decoding an encoded batch must give back ------------------------------------------


def expected_records(records, base_offset=0, default_timestamp_ms=NO_TIMESTAMP, log_append_time=False,
                     offset_deltas=None, **_options) -> list[Record]:
    deltas = range(len(records)) if offset_deltas is None else offset_deltas
    return [Record(None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value),
                   tuple((name, None if value is None else bytes(value)) for name, value in r.headers),
                   default_timestamp_ms if log_append_time or r.timestamp_ms is None else r.timestamp_ms,
                   base_offset + delta)
            for delta, r in zip(deltas, records)]


blobs = st.one_of(st.none(), st.binary(max_size=24), st.binary(max_size=8).map(bytearray))
header_lists = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=6))), max_size=3)
timestamps = st.one_of(st.none(), st.integers(*INT64), st.integers(1_700_000_000_000, 1_700_000_000_010))
records_strategy = st.builds(Record, key=blobs, value=blobs, headers=st.one_of(st.just(()), header_lists),
                             timestamp_ms=timestamps)


@st.composite
def batch_cases(draw, allow_gzip=True, min_records=0, max_records=25):
    """``(records, options)`` for ``encode_batch``: any size (incl. 0 and 1), gzip or not,
    LogAppendTime or not, dense or sparse offsets, any base offset."""
    records = draw(st.lists(records_strategy, min_size=min_records, max_size=max_records))
    options = {"default_timestamp_ms": draw(st.integers(*INT64)),
               "compression": draw(st.sampled_from([COMPRESSION_NONE, COMPRESSION_GZIP] if allow_gzip
                                                   else [COMPRESSION_NONE])),
               "log_append_time": draw(st.booleans()),
               "base_offset": draw(st.one_of(st.just(0), st.integers(0, 2**62))),
               "delete_horizon_ms": draw(st.one_of(st.just(-1), st.integers(*INT64)))}
    if draw(st.booleans()):  # sparse, as compaction leaves them
        deltas = sorted(draw(st.sets(st.integers(0, 2**20), min_size=len(records), max_size=len(records))))
        options["offset_deltas"] = deltas
        options["last_offset_delta"] = (deltas[-1] if deltas else 0) + draw(st.integers(0, 5))
    elif not records:
        options["last_offset_delta"] = draw(st.integers(0, 1000))
    return records, options


def encode(records, options) -> bytes:
    return bytes(encode_batch(records, **options))


# --- round trips -----------------------------------------------------------------------------------------


@settings(max_examples=300)
@given(batch_cases())
def test_round_trip_gives_back_the_records_offsets_and_timestamps(case):
    records, options = case
    data = encode(records, options)
    batch = RecordBatch.decode(data)
    assert batch is not None and batch.size_bytes == len(data)
    expected = expected_records(records, **options)
    assert batch.records() == expected
    assert list(batch.offsets()) == [r.offset for r in expected]
    header = batch.header
    count = len(records)
    effective = [r.timestamp_ms for r in expected] or [options["default_timestamp_ms"]]
    last_offset_delta = options.get("last_offset_delta", count - 1)
    assert (header.base_offset, header.magic, header.record_count, header.last_offset_delta) == (
        options["base_offset"], MAGIC, count, last_offset_delta)
    assert batch.next_offset == options["base_offset"] + last_offset_delta + 1
    assert (header.base_timestamp, header.max_timestamp, header.delete_horizon_ms) == (
        min(effective), max(effective), options["delete_horizon_ms"])
    attributes = header.attributes
    assert attributes & 0x07 == options["compression"]
    assert bool(attributes & TIMESTAMP_TYPE_LOG_APPEND) == options["log_append_time"]
    assert bool(attributes & HAS_OFFSET_DELTAS) == ("offset_deltas" in options)
    assert bool(attributes & HAS_TIMESTAMPS) == (min(effective) != max(effective))
    assert bool(attributes & HAS_HEADERS) == any(r.headers for r in records)
    assert bool(attributes & HAS_NULL_KEYS) == any(r.key is None for r in records)
    assert bool(attributes & HAS_NULL_VALUES) == any(r.value is None for r in records)
    # index_of: the first record at or after an offset
    for record_index, record in enumerate(expected):
        assert batch.index_of(record.offset) == record_index
        assert batch.index_of(record.offset + 1) == record_index + 1
    # the parts form (what Log.append writes with pwritev) is the same bytes
    header_bytes, parts = encode_batch_parts(records, **{k: v for k, v in options.items() if k != "base_offset"})
    joined = bytearray(header_bytes + b"".join(parts))
    assign_base_offset(joined, options["base_offset"])
    assert bytes(joined) == data


@settings(max_examples=150)
@given(batch_cases(min_records=1), st.data())
def test_records_iter_records_record_at_and_payload_bytes_agree(case, data):
    records, options = case
    encoded = encode(records, options)
    expected = expected_records(records, **options)
    count = len(expected)
    start = data.draw(st.integers(0, count), label="start")
    stop = data.draw(st.integers(start, count), label="stop")
    assert RecordBatch.decode(encoded).records(start, stop) == expected[start:stop]
    assert list(RecordBatch.decode(encoded).iter_records(start, stop)) == expected[start:stop]
    assert RecordBatch.decode(encoded).payload_bytes(start, stop) == sum(map(record_charge, expected[start:stop]))
    index = data.draw(st.integers(0, count - 1), label="index")
    assert RecordBatch.decode(encoded).record_at(index) == expected[index]  # columns not unpacked yet
    warm = RecordBatch.decode(encoded)
    warm.records()  # every column unpacked and cached
    assert [warm.record_at(i) for i in range(count)] == expected
    assert list(warm.iter_records(start, stop)) == expected[start:stop]
    assert warm.records(start) == expected[start:]


def partial_batch(encoded: bytes, reads: list | None = None) -> RecordBatch:
    """A partial batch as ``LogSegment._batch_for_read`` builds one: the header and the columns in
    memory, key/value/header bytes fetched from the rest of the body on demand."""
    header = read_header(encoded)
    head = bytes(encoded[: HEADER_BYTES + columns_bytes(header)])
    body_bytes = len(encoded) - HEADER_BYTES

    def fetch(at_in_body: int, size: int) -> bytes:
        assert 0 <= at_in_body and size >= 0 and at_in_body + size <= body_bytes, (at_in_body, size)
        if reads is not None:
            reads.append(size)
        return encoded[HEADER_BYTES + at_in_body : HEADER_BYTES + at_in_body + size]

    return RecordBatch(header, head, fetch)


@settings(max_examples=150)
@given(batch_cases(allow_gzip=False, min_records=1), st.data())
def test_a_partial_batch_reads_the_same_records_as_the_whole_one(case, data):
    records, options = case
    encoded = encode(records, options)
    expected = expected_records(records, **options)
    count = len(expected)
    start = data.draw(st.integers(0, count), label="start")
    stop = data.draw(st.integers(start, count), label="stop")
    index = data.draw(st.integers(0, count - 1), label="index")
    assert partial_batch(encoded).records(start, stop) == expected[start:stop]
    assert list(partial_batch(encoded).iter_records(start, stop)) == expected[start:stop]
    assert partial_batch(encoded).payload_bytes(start, stop) == sum(map(record_charge, expected[start:stop]))
    assert list(partial_batch(encoded).offsets()) == [r.offset for r in expected]
    reads: list[int] = []
    assert partial_batch(encoded, reads).record_at(index) == expected[index]
    # a point read fetches only that record's own bytes
    own = len(expected[index].key or b"") + len(expected[index].value or b"")
    own += sum(8 + len(name.encode()) + len(value or b"") for name, value in expected[index].headers)
    assert sum(reads) == own


def test_a_partial_batch_refuses_to_verify_and_gzip_cannot_be_partial():
    with pytest.raises(ValueError):
        partial_batch(golden_bytes("example")).verify()
    with pytest.raises(ValueError):
        partial_batch(golden_bytes("gzip")).records()


def test_assign_base_offset_rewrites_8_bytes_and_the_header_checksum_only():
    original = golden_bytes("dense_default_timestamps")
    changed = bytearray(original)
    assign_base_offset(changed, 123_456_789_012)
    differing = {i for i in range(len(original)) if original[i] != changed[i]}
    assert differing and differing <= set(range(8)) | set(range(HEADER_CRC_AT, BODY_AT))
    batch = RecordBatch.decode(bytes(changed))
    assert [r.offset for r in batch.records()] == [123_456_789_012 + i for i in range(3)]
    assert batch.header.crc == read_header(original).crc


# --- torn prefixes and single-byte damage ----------------------------------------------------------------


def _assert_every_strict_prefix_is_incomplete(data: bytes) -> None:
    full_header = read_header(data)
    for size in range(len(data)):
        prefix = data[:size]
        assert read_header(prefix, whole=True) is None, size
        assert RecordBatch.decode(prefix) is None, size
        assert list(iter_batches(prefix)) == [] and list(iter_headers(prefix)) == [], size
        # a header alone can be read from a prefix that holds it
        assert read_header(prefix, whole=False) == (full_header if size >= HEADER_BYTES else None), size


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_every_strict_prefix_of_a_golden_batch_is_incomplete(name):
    _assert_every_strict_prefix_is_incomplete(golden_bytes(name))


@settings(max_examples=40)
@given(batch_cases(max_records=8))
def test_every_strict_prefix_of_any_batch_is_incomplete(case):
    _assert_every_strict_prefix_is_incomplete(encode(*case))


def _damage_batches() -> list[tuple[str, bytes]]:
    rng = random.Random(20240607)
    batches = [(name, golden_bytes(name)) for name in sorted(GOLDEN)]
    for number, compression in enumerate([COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_NONE]):
        records = [Record(rng.randbytes(rng.randrange(0, 12)) if rng.random() < 0.9 else None,
                          rng.randbytes(rng.randrange(0, 40)) if rng.random() < 0.9 else None,
                          (("h", rng.randbytes(3)),) if rng.random() < 0.3 else (), 1_700_000_000_000 + rng.randrange(99))
                   for _ in range(40)]
        batches.append((f"random-{number}", encode(records, {"compression": compression, "base_offset": 7})))
    return batches


MASKS = (0x01, 0x80, 0xFF, 0x5A)


def test_every_single_changed_byte_is_detected_as_corrupt():
    """Any one changed byte, anywhere, is reported as corrupt: the body CRC covers [21, end), the
    header CRC covers [0, 17) and sits at [17, 21). It is never read as a batch, never raises
    anything else, and (because the header CRC is checked before the length is trusted) is never
    even mistaken for a torn tail."""
    tried = 0
    for name, data in _damage_batches():
        following = golden_bytes("single_record")
        for position in range(len(data)):
            for mask in MASKS:
                damaged = bytearray(data)
                damaged[position] ^= mask
                damaged = bytes(damaged)
                with pytest.raises(CorruptRecordError):
                    RecordBatch.decode(damaged)
                # inside a log: the batches before it are read, then the damage is reported
                stream = following + damaged + following
                scanned = []
                with pytest.raises(CorruptRecordError, match=f"position {len(following)}"):
                    for position_in_stream, _batch in iter_batches(stream):
                        scanned.append(position_in_stream)
                assert scanned == [0], (name, position, mask)
                tried += 1
    assert tried > 10_000


def _reseal(data: bytearray) -> bytes:
    """Recompute both checksums (to craft batches that are intact but say something unknown)."""
    struct.pack_into("<I", data, CRC_AT, zlib.crc32(data[BODY_AT:]))
    assign_base_offset(data, struct.unpack_from("<q", data)[0])
    return bytes(data)


@pytest.mark.parametrize("change, message", [
    (lambda data: data.__setitem__(12, MAGIC + 1), "unknown batch magic"),
    (lambda data: struct.pack_into("<H", data, 21, 0x200), "unknown attribute bits"),
    (lambda data: struct.pack_into("<H", data, 21, 0x05), "unknown compression codec"),
    (lambda data: struct.pack_into("<i", data, 8, HEADER_BYTES - 13), "impossible batch length"),
])
def test_an_intact_batch_in_an_unknown_format_is_refused_not_misread(change, message):
    data = bytearray(golden_bytes("dense_default_timestamps"))
    change(data)
    with pytest.raises(CorruptRecordError, match=message):
        RecordBatch.decode(_reseal(data))


# --- golden fixtures ---------------------------------------------------------------------------------------


def test_the_magic_is_the_one_the_golden_fixtures_pin():
    assert MAGIC == MANIFEST["magic"], "a changed format must change the magic and regenerate the fixtures"
    assert HEADER_BYTES == MANIFEST["header_bytes"]
    on_disk = {f"batches/{name}" for name in os.listdir(os.path.join(FIXTURES, "batches"))}
    assert on_disk == {entry["file"] for entry in MANIFEST["batches"]}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_batch_decodes_into_the_manifest_records(name):
    entry = GOLDEN[name]
    data = golden_bytes(name)
    assert len(data) == entry["size_bytes"] and hashlib.sha256(data).hexdigest() == entry["sha256"]
    batch = RecordBatch.decode(data)
    assert batch.records() == [record_from_json(r) for r in entry["records"]]
    header = batch.header._asdict()
    assert {key: header[key] for key in entry["header"] if key != "header_crc"} == {
        key: value for key, value in entry["header"].items() if key != "header_crc"}
    assert int.from_bytes(data[HEADER_CRC_AT:BODY_AT], "little") == entry["header"]["header_crc"]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_encoder_output_equals_the_golden_bytes(name):
    entry = GOLDEN[name]
    spec = entry["input"]
    records = [record_from_json(r) for r in spec["records"]]
    data = bytearray(encode_batch(records, **spec["options"]))
    if spec["base_offset"]:
        assign_base_offset(data, spec["base_offset"])
    golden = golden_bytes(name)
    if spec["options"].get("compression") == COMPRESSION_GZIP and zlib.ZLIB_RUNTIME_VERSION != MANIFEST[
            "zlib_runtime_version"]:
        # Another zlib may compress the same body differently: compare what was compressed.
        ours, theirs = read_header(bytes(data))._asdict(), read_header(golden)._asdict()
        for varying in ("batch_length", "crc"):
            ours.pop(varying), theirs.pop(varying)
        assert ours == theirs
        assert zlib.decompress(bytes(data[HEADER_BYTES:]), wbits=31) == zlib.decompress(golden[HEADER_BYTES:], wbits=31)
    else:
        assert bytes(data) == golden, f"the format of {name!r} changed: change MAGIC and regenerate the fixtures"


def test_the_worked_example_in_the_format_doc_is_the_golden_example():
    with open(os.path.join(ROOT, "docs", "FORMAT.md"), encoding="utf-8") as file:
        doc = file.read()
    block = re.search(r"<!-- golden: fixtures/batches/example\.bin -->\s*```text\n(.*?)```", doc, re.S)
    assert block, "docs/FORMAT.md lost its worked example"
    dumped = bytearray()
    for line in block.group(1).splitlines():
        position = int(line[:5])
        assert position == len(dumped), line
        dumped += bytes.fromhex(line[7:54])
    assert bytes(dumped) == golden_bytes("example")


# --- scanning concatenated batches -------------------------------------------------------------------------


def _log() -> tuple[bytes, list[int]]:
    data, positions = b"", []
    for name in sorted(GOLDEN):
        positions.append(len(data))
        data += golden_bytes(name)
    return data, positions


def test_iter_batches_reads_every_batch_and_stops_at_a_torn_tail():
    data, positions = _log()
    assert [p for p, _ in iter_batches(data)] == positions
    assert [p for p, _ in iter_headers(data)] == positions
    assert [b.records() for _, b in iter_batches(data)] == [
        [record_from_json(r) for r in GOLDEN[name]["records"]] for name in sorted(GOLDEN)]
    torn = golden_bytes("example")
    for size in range(1, len(torn)):
        assert [p for p, _ in iter_batches(data + torn[:size])] == positions, size
        assert [p for p, _ in iter_headers(data + torn[:size])] == positions, size
    # from a later position too
    assert [p for p, _ in iter_batches(data, positions[3])] == positions[3:]


def test_iter_batches_stops_quietly_at_up_to_20_zero_bytes_and_reports_more_as_corrupt():
    """A zero-filled tail (a file extended but not written, e.g. after a power loss) shorter than
    the header checksum's end (21 bytes) is incomplete; from 21 bytes on the header checksum of the
    zeros is checked and fails, so the tail is reported as corrupt at its position. Recovery cuts
    either kind of tail."""
    data, positions = _log()
    for zeros in range(1, BODY_AT):
        assert [p for p, _ in iter_batches(data + bytes(zeros))] == positions
    for zeros in (BODY_AT, HEADER_BYTES, 4096):
        seen = []
        with pytest.raises(CorruptRecordError, match=f"header checksum mismatch at position {len(data)}"):
            for position, _batch in iter_batches(data + bytes(zeros)):
                seen.append(position)
        assert seen == positions


def test_iter_batches_raises_at_garbage_after_the_good_batches():
    data, positions = _log()
    rng = random.Random(7)
    for size in (BODY_AT, 64, 1000):
        garbage = rng.randbytes(size)
        seen = []
        with pytest.raises(CorruptRecordError, match=f"position {len(data)}"):
            for position, _batch in iter_batches(data + garbage + golden_bytes("example")):
                seen.append(position)
        assert seen == positions
        with pytest.raises(CorruptRecordError):
            list(iter_headers(data + garbage))


def test_a_damaged_body_is_found_by_iter_batches_but_not_by_iter_headers():
    data, positions = _log()
    damaged = bytearray(data)
    damaged[positions[2] + HEADER_BYTES] ^= 1  # first body byte of the third batch
    assert [p for p, _ in iter_headers(bytes(damaged))] == positions  # headers only: no body CRC
    with pytest.raises(CorruptRecordError, match=f"batch checksum mismatch at position {positions[2]}"):
        list(iter_batches(bytes(damaged)))


# --- encoder input validation ------------------------------------------------------------------------------


WRONG_TYPES = [
    (Record(5, b"v"), "5"),
    (Record(b"k", "text"), "'text'"),
    (Record("key", b"v"), "'key'"),
    (Record(b"k", 1.5), "1.5"),
    (Record(b"k", b"v", (("name", "str-value"),)), "'str-value'"),
    (Record(b"k", b"v", ((b"bytes-name", b"v"),)), "b'bytes-name'"),
    (Record(b"k", b"v", (("lonely",),)), "('lonely',)"),
    (Record(b"k", b"v", (), 1.5), "1.5"),
    (Record(b"k", b"v", (), "yesterday"), "'yesterday'"),
]
@pytest.mark.parametrize("record, shown, where", [
    (record, shown, where) for record, shown in WRONG_TYPES for where in (0, 1, 2)])
def test_a_wrong_type_raises_type_error_naming_the_value(record, shown, where):
    records = [Record(b"a", b"1", (), 1), Record(None, None, (), 2), Record(b"c", b"3", (), 3)]
    records[where] = record
    if where == 2 and record.timestamp_ms == 1.5:
        records[2] = record._replace(timestamp_ms=3.5)  # above the int maximum: caught
        shown = "3.5"
    with pytest.raises(TypeError) as caught:
        encode_batch(records)
    assert shown in str(caught.value)


def test_inconsistent_offset_options_raise_value_error():
    records = [Record(b"a", b"1"), Record(b"b", b"2")]
    with pytest.raises(ValueError, match="3 offset deltas for 2 records"):
        encode_batch(records, offset_deltas=[0, 1, 2])
    with pytest.raises(ValueError, match="1 offset deltas for 2 records"):
        encode_batch(records, offset_deltas=[0])
    with pytest.raises(ValueError, match="needs offset_deltas"):
        encode_batch(records, last_offset_delta=5)
    with pytest.raises(ValueError, match="unknown compression"):
        encode_batch(records, compression=5)
    with pytest.raises(ValueError, match="int64"):
        encode_batch([Record(b"a", b"1", (), 0), Record(b"b", b"2", (), 2**63)])


# --- encoder input the decoder would reject is refused when encoding ---------------------------------------


@pytest.mark.parametrize("options", [dict(offset_deltas=[0, 0]), dict(offset_deltas=[-1, 5]),
                                     dict(offset_deltas=[0, 5], last_offset_delta=3)])
def test_encoder_refuses_offsets_the_decoder_would_call_corrupt(options):
    records = [Record(b"a", b"1"), Record(b"b", b"2")]
    try:
        data = encode_batch(records, **options)
    except ValueError:
        return  # refused when encoding
    RecordBatch.decode(bytes(data))  # else it must at least decode (never a corrupt batch written)


def test_encoder_refuses_a_negative_last_offset_delta():
    with pytest.raises(ValueError):
        RecordBatch.decode(bytes(encode_batch([], last_offset_delta=-1)))


@pytest.mark.parametrize("index", [3, -1])
def test_record_at_outside_the_batch_raises_index_error(index):
    batch = RecordBatch.decode(golden_bytes("dense_default_timestamps"))
    with pytest.raises(IndexError):
        batch.record_at(index)


def test_memoryview_values_are_accepted_at_any_size():
    value = memoryview(b"x" * 5000)
    assert RecordBatch.decode(bytes(encode_batch([Record(b"k", value)]))).records()[0].value == bytes(value)


@pytest.mark.parametrize("records, options", [([Record(b"k", b"v", (), 2**63)], {}),
                                              ([], {"last_offset_delta": 2**31})])
def test_out_of_range_header_fields_raise_value_error(records, options):
    with pytest.raises(ValueError):
        encode_batch(records, **options)


def test_non_iterable_headers_raise_type_error_naming_them():
    with pytest.raises(TypeError, match="12345"):
        encode_batch([Record(b"k", b"v", 12345)])


# --- logstore perf format (smoke, never timed) ---------------------------------------------------------------

TINY = perf_format.FormatWorkload(records=60, batch_size=20, lookups=15, repeats=1)


def test_perf_format_runs_every_case_and_checks_its_answers():
    results = perf_format.bench_format(TINY)
    assert [r.case for r in results] == list(perf_format.CASE_NAMES)
    for result in results:
        assert result.records > 0 and result.best_s >= 0 and result.batch_bytes > 0
        assert (result.payload_bytes > 0) == (result.unit != "batch")
    point = next(r for r in results if r.case == "point")
    assert point.records == TINY.lookups
    assert next(r for r in results if r.case == "decode").records == TINY.batches_per_repeat * TINY.batch_size
    assert "records/s" in perf_format.render_format_table(results, TINY)
    with pytest.raises(ValueError, match="unknown format case"):
        perf_format.bench_format(TINY, ["nope"])


def test_perf_format_baselines_are_right():
    assert perf_format.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    records = perf_format.make_records(TINY, 0, headers=True, timestamps=True, nulls=True)
    data = perf_format.kafka_encode_records(records, perf_format.BASE_TIMESTAMP_MS)
    assert perf_format.kafka_decode_records(data, len(records), 5, perf_format.BASE_TIMESTAMP_MS) == [
        r._replace(headers=tuple(r.headers), offset=5 + i) for i, r in enumerate(records)]


def test_logstore_perf_format_command():
    runner = CliRunner()
    result = runner.invoke(perf, ["format", "--records", "40", "--batch-size", "20", "--lookups", "5",
                                  "--repeats", "1", "--cases", "encode,decode,point", "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    output = json.loads(result.stdout)
    assert [r["case"] for r in output["results"]] == ["encode", "decode", "point"]
    assert all(r["records_per_s"] > 0 for r in output["results"])
    result = runner.invoke(perf, ["format", "--records", "20", "--batch-size", "10", "--lookups", "5",
                                  "--repeats", "1", "--cases", "encode"])
    assert result.exit_code == 0 and "encode" in result.stdout and "MB/s" in result.stdout
    result = runner.invoke(perf, ["format", "--cases", "bogus"])
    assert result.exit_code != 0 and "unknown format case" in result.output
