"""Every way a read builds ``Record`` objects, field by field, against the records that were encoded.

Reads build records on several paths, each tuned for its case: a whole batch or a range of it
(``RecordBatch.iter_records``: whole-column ``struct`` calls, fixed-size values cut by one call),
one record (``record_at``), a *partial* batch that fetches only the bytes it needs, a cached batch
head (``record_builder.PointHead``), and runs of one-record batches
(``record_builder.take_single_record_batches``). Over random batches (nulls, empty and fixed-size
keys and values, headers in magic 1, 2 and 3, gzip, sparse offset deltas, log-append time,
transactional batches and markers) each path must give exactly the records the encoder was given,
with their offsets and resolved timestamps. The records must also behave as the public ``Record``
does: equal to a ``Record`` built by hand and to a plain 5-tuple, the same hash, repr, pickle and
JSON (bytes as lists of ints) as one.
"""

from __future__ import annotations

import json
import pickle

from hypothesis import given, settings, strategies as st

from logstore.records import control
from logstore.records.codecs import COMPRESSION_GZIP, COMPRESSION_NONE
from logstore.records.decoder import HEADER_BYTES, Record, RecordBatch, body_at, columns_bytes, read_header
from logstore.records.encoder import encode_batch, encode_marker_batch, encode_one
from logstore.records.record_builder import NO_LIMIT, PointHead, take_single_record_batches

NOW = 1_700_000_000_000

blobs = st.one_of(st.none(), st.just(b""), st.binary(max_size=24))
header_lists = st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=6))), max_size=3)
records = st.lists(st.builds(Record, blobs, blobs, header_lists.map(tuple),
                             st.one_of(st.none(), st.integers(-1, NOW + 10**6))), min_size=1, max_size=12)
fixed = st.integers(0, 8).flatmap(lambda size: st.lists(
    st.builds(Record, st.binary(min_size=size, max_size=size), st.binary(min_size=size, max_size=size),
              st.just(()), st.integers(0, NOW)), min_size=2, max_size=12))


def expected(given_records, base_offset: int, deltas, log_append: bool, max_timestamp: int) -> list[Record]:
    """What a read must return for ``given_records`` encoded at ``base_offset``."""
    out = []
    for index, record in enumerate(given_records):
        timestamp = max_timestamp if log_append else (NOW if record.timestamp_ms is None else record.timestamp_ms)
        out.append(Record(record.key, record.value, tuple(map(tuple, record.headers)), timestamp,
                          base_offset + (index if deltas is None else deltas[index])))
    return out


def check_record(got, want: Record) -> None:
    assert type(got) is Record
    assert (got.key, got.value, got.headers, got.timestamp_ms, got.offset) == tuple(want)
    assert got == want and want == got and got == tuple(want) and tuple(want) == got
    assert hash(got) == hash(want) == hash(tuple(want)) and repr(got) == repr(want)
    assert pickle.loads(pickle.dumps(got)) == want and type(pickle.loads(pickle.dumps(got))) is Record
    as_lists = json.dumps(got, default=list)  # bytes as lists of ints: the tuple's items, in order
    assert as_lists == json.dumps(want, default=list) == json.dumps(list(want), default=list)
    key, value, headers, timestamp, offset = got
    assert (key, value, headers, timestamp, offset) == (got[0], got[1], got[2], got[3], got[4])
    assert got._replace(offset=None) == want._replace(offset=None) and got._asdict() == want._asdict()
    assert got._fields == Record._fields and len(got) == 5 and isinstance(got, tuple)


def read_every_way(buffer: bytes, want: list[Record]) -> None:
    """Decode the batch in ``buffer`` by every path that applies and compare with ``want``."""
    batch = RecordBatch.decode(buffer)
    assert batch is not None
    count = len(want)
    for got, w in zip(batch.records(), want, strict=True):
        check_record(got, w)
    for start in range(count):  # every range that starts there, and every record alone
        assert batch.records(start, count) == want[start:]
        assert batch.records(0, start + 1) == want[: start + 1]
        check_record(batch.record_at(start), want[start])
    header = batch.header
    if header.attributes & 0x07 == COMPRESSION_NONE:
        # A partial batch: header and columns only, the key, value and header bytes fetched.
        head = bytes(buffer[: body_at(header.attributes) + columns_bytes(header)])
        body = body_at(header.attributes)

        def fetch(at: int, size: int) -> bytes:
            assert at + size <= len(buffer) - body
            return bytes(buffer[body + at : body + at + size])

        partial = RecordBatch(read_header(head, whole=False), head, fetch)
        assert partial.records() == want
        for index in range(count):
            check_record(partial.record_at(index), want[index])
        point = PointHead(partial, body, lambda size, at: bytes(buffer[at : at + size]))
        for w in want:
            check_record(point.record(w.offset), w)


@settings(max_examples=120, deadline=None)
@given(st.one_of(records, fixed), st.sampled_from([3, 2, 1]), st.booleans(), st.booleans(), st.booleans(),
       st.integers(0, 2**40))
def test_every_read_path_gives_the_encoded_records(given_records, magic, gzip, sparse, log_append, base_offset):
    count = len(given_records)
    deltas = [index * 3 + (index % 2) for index in range(count)] if sparse else None
    buffer = bytes(encode_batch(given_records, default_timestamp_ms=NOW, magic=magic, log_append_time=log_append,
                                compression=COMPRESSION_GZIP if gzip else COMPRESSION_NONE, offset_deltas=deltas,
                                base_offset=base_offset))
    header = read_header(buffer)
    read_every_way(buffer, expected(given_records, base_offset, deltas, log_append, header.max_timestamp))


@settings(max_examples=40, deadline=None)
@given(records, st.booleans(), st.integers(0, 2**40))
def test_transactional_batches_and_markers_read_alike(given_records, commit, base_offset):
    buffer = bytes(encode_batch(given_records, default_timestamp_ms=NOW, producer=(7, 1, 0), transactional=True,
                                base_offset=base_offset))
    read_every_way(buffer, expected(given_records, base_offset, None, False, 0))
    marker = encode_marker_batch(commit, 3, 7, 1, NOW)
    batch = RecordBatch.decode(bytes(marker))
    record = batch.record_at(0)
    key, value = control.encode_marker(commit, 3)
    check_record(record, Record(key, value, (), NOW, 0))
    assert control.decode_marker(record.key, record.value).commit is commit


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(blobs, blobs, st.integers(0, NOW)), min_size=1, max_size=40), st.integers(0, 2**40))
def test_runs_of_one_record_batches_read_alike(fields, base_offset):
    """``take_single_record_batches`` (uniform stretches included) against the general path."""
    buffer = b"".join(bytes(encode_one(base_offset + index, key, value, (), timestamp, 0))
                      for index, (key, value, timestamp) in enumerate(fields))
    want = [Record(key, value, (), timestamp, base_offset + index)
            for index, (key, value, timestamp) in enumerate(fields)]
    got: list = []
    at, _charged, _done = take_single_record_batches(buffer, 0, len(buffer), 0, 2**62, NO_LIMIT, NO_LIMIT, got, False)
    assert at == len(buffer)
    for record, w in zip(got, want, strict=True):
        check_record(record, w)
    position = 0
    for w in want:  # and the general path, batch by batch
        batch = RecordBatch.decode(buffer, position)
        check_record(batch.record_at(0), w)
        position += batch.size_bytes
    assert HEADER_BYTES < len(buffer)
