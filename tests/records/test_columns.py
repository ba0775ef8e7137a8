"""Invariants checked: ``logstore.records.columns`` (a stored batch's records in range as columns).

- Every field of every record a ``ColumnBatch`` covers equals what ``RecordBatch.iter_records``
  gives for the same range, read through each way the columns offer (typed ends with
  ``key_start``/``value_start``, ``key_offsets``/``value_offsets`` with the null masks, ``keys()``
  and ``values()``, offsets as a range or an array, timestamps as a column or a constant, headers
  decoded), for: dense and sparse (compacted) offsets, per-record and constant timestamps,
  LogAppendTime, null and empty keys and values, headers in magic 1, 2 and 3, gzip and the optional
  codecs, a producer block; every [start, stop) of the batch. Over random batches too (hypothesis).
- ``ColumnTaker`` takes what ``records.fetch.take_records`` takes: the same records, the same
  charge, the same place to start again (at least one record; ``max_bytes``, ``max_records``).
- ``to_arrow`` (skipped without pyarrow, which CI installs): the same values, a valid Arrow batch of
  ``arrow_schema``, and the key and value bytes shared with the read buffer, not copied.
"""

from __future__ import annotations

import importlib.util

import pytest
from hypothesis import given, settings, strategies as st

from logstore.records.codecs import COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_NONE, COMPRESSION_ZSTD
from logstore.records.columns import ColumnBatch, ColumnTaker, take_columns
from logstore.records.decoder import Record, RecordBatch
from logstore.records.encoder import encode_batch
from logstore.records.fetch import take_records

T0 = 1_700_000_000_000
HAS_CRAMJAM = importlib.util.find_spec("cramjam") is not None
HAS_PYARROW = importlib.util.find_spec("pyarrow") is not None


def make_batch(records, base_offset: int = 1000, **options) -> RecordBatch:
    batch = RecordBatch.decode(bytes(encode_batch(records, base_offset=base_offset, **options)))
    assert batch is not None
    return batch


def cut(data, ends, start: int, nulls=None) -> list[bytes | None]:
    """Values from a data buffer and ends (``~end`` for a null) beginning at ``start``."""
    out, previous = [], start
    for end in ends:
        if end < 0:
            out.append(None)
            previous = ~end
        else:
            out.append(bytes(data[previous:end]))
            previous = end
    return out


def by_offsets(data, offsets, nulls) -> list[bytes | None]:
    return [None if nulls is not None and nulls[i] else bytes(data[offsets[i]:offsets[i + 1]])
            for i in range(len(offsets) - 1)]


def check(cb: ColumnBatch, records: list[Record]) -> None:
    """Every field of every record, read every way the columns offer."""
    n = len(records)
    assert len(cb) == n
    offsets = [r.offset for r in records]
    assert list(cb.offsets()) == offsets and cb.offset_array().tolist() == offsets
    assert cb.offset_array().typecode == "q"
    if n:
        assert (cb.first_offset, cb.last_offset) == (offsets[0], offsets[-1])
    if cb.dense:
        assert isinstance(cb.offsets(), range) and cb.offset_deltas is None
    else:
        assert [cb.base_offset + delta for delta in cb.offset_deltas] == offsets
    timestamps = [r.timestamp_ms for r in records]
    assert cb.timestamp_array().tolist() == timestamps
    if cb.timestamps is None:
        assert set(timestamps) <= {cb.timestamp_default}
    else:
        assert list(cb.timestamps) == timestamps
    for name, data, ends, start, nulls, offsets_of, size, listed in (
            ("key", cb.keys_data, cb.key_ends, cb.key_start, cb.key_nulls(), cb.key_offsets(), cb.key_bytes,
             cb.keys()),
            ("value", cb.values_data, cb.value_ends, cb.value_start, cb.value_nulls(), cb.value_offsets(),
             cb.value_bytes, cb.values())):
        want = [getattr(r, name) for r in records]
        assert cut(data, ends, start) == want, name
        assert by_offsets(data, offsets_of, nulls) == want, name
        assert len(offsets_of) == n + 1 and offsets_of[0] == start
        assert list(listed) == want, name
        assert size == sum(len(v or b"") for v in want)
        if nulls is None:
            assert None not in want
        else:
            assert len(nulls) == n and [bool(b) for b in nulls] == [v is None for v in want]
    assert cb.headers() == [r.headers for r in records]
    if cb.header_ends is None:
        assert not any(r.headers for r in records)
    else:
        assert len(cb.header_ends) == n
    assert cb.records() == records


def check_every_range(batch: RecordBatch) -> None:
    count = batch.record_count
    ranges = {(0, count), (0, 0), (count, count)} | {(a, b) for a in range(min(count, 4)) for b in range(a, count + 1)}
    ranges |= {(a, count) for a in range(count)} | {(count // 2, count // 2 + 1)} if count else set()
    for start, stop in sorted(ranges):
        check(ColumnBatch(batch, start, stop), batch.records(start, stop))


def varied(n: int, nulls: bool = True, headers: bool = False, same_time: bool = False) -> list[Record]:
    out = []
    for i in range(n):
        key = None if nulls and i % 4 == 1 else b"" if i % 5 == 2 else b"k%d" % i
        value = None if nulls and i % 3 == 2 else b"" if i % 7 == 3 else b"v%d" % i * (i % 6 + 1)
        pairs = () if not headers or i % 3 == 0 else (("trace", b"%08d" % i), ("n", None if i % 2 else b""))
        out.append(Record(key, value, pairs[: 1 + i % 2], T0 if same_time else T0 + 7 * i - (i % 3) * 11))
    return out


# --- fields against records ---------------------------------------------------------------------------


@pytest.mark.parametrize("options", [
    {},  # dense offsets, per-record timestamps
    {"compression": COMPRESSION_GZIP},
    {"log_append_time": True, "default_timestamp_ms": T0 + 99},
    {"offset_deltas": [0, 2, 3, 7, 8, 11, 12, 20, 21, 30, 31, 33], "last_offset_delta": 40},  # compacted
    {"offset_deltas": [1, 2, 3, 7, 8, 11, 12, 20, 21, 30, 31, 33], "compression": COMPRESSION_GZIP},
    {"producer": (7, 0, 0), "transactional": True},
], ids=["plain", "gzip", "log-append-time", "compacted", "compacted-gzip", "producer"])
@pytest.mark.parametrize("nulls", [False, True], ids=["no-nulls", "nulls"])
def test_every_field_equals_the_records(options, nulls):
    check_every_range(make_batch(varied(12, nulls=nulls), **options))


@pytest.mark.parametrize("magic", [1, 2, 3])
def test_headers_of_every_magic(magic):
    check_every_range(make_batch(varied(10, headers=True), magic=magic))
    check_every_range(make_batch(varied(10, headers=True), magic=magic, compression=COMPRESSION_GZIP))


def test_one_timestamp_for_all_has_no_column():
    batch = make_batch(varied(6, same_time=True))
    cb = ColumnBatch(batch)
    assert cb.timestamps is None and cb.timestamp_default == T0 and not cb.log_append_time
    check_every_range(batch)
    appended = ColumnBatch(make_batch(varied(3), log_append_time=True, default_timestamp_ms=T0 + 5))
    assert appended.log_append_time and appended.timestamps is None and appended.timestamp_default >= T0


@pytest.mark.skipif(not HAS_CRAMJAM, reason="cramjam (the compression extra) is not installed")
@pytest.mark.parametrize("codec", [COMPRESSION_LZ4, COMPRESSION_ZSTD])
def test_optional_codecs(codec):
    check_every_range(make_batch(varied(9), compression=codec))


def test_one_record_and_empty_batches():
    check_every_range(make_batch([Record(None, None, (), T0)]))
    check_every_range(make_batch([Record(b"k", b"v", (("h", b"x"),), T0)]))
    empty = make_batch([], last_offset_delta=4)
    cb = ColumnBatch(empty)
    assert len(cb) == 0 and list(cb.offsets()) == [] and cb.value_offsets().tolist() == [0]


def test_a_range_outside_the_batch_is_refused():
    batch = make_batch(varied(3))
    for start, stop in ((-1, 2), (2, 1), (0, 4)):
        with pytest.raises(ValueError, match="not within the 3 records"):
            ColumnBatch(batch, start, stop)


def test_a_column_batch_is_cut_like_a_list():
    batch = make_batch(varied(12), offset_deltas=[0, 2, 3, 7, 8, 11, 12, 20, 21, 30, 31, 33])
    cb = ColumnBatch(batch, 2, 11)
    records = batch.records(2, 11)
    for part, want in ((cb[1:4], records[1:4]), (cb[-3:], records[-3:]), (cb[:], records), (cb[5:2], []),
                       (cb[3:100], records[3:])):
        check(part, want)
        assert part.raw is cb.raw  # the columns are not parsed again
    for bad in (1, slice(0, 4, 2)):
        with pytest.raises(TypeError, match="slice of step 1"):
            cb[bad]


def test_views_share_the_batch_bytes():
    batch = make_batch(varied(20, nulls=False))
    cb = ColumnBatch(batch, 5, 15)
    assert cb.values_data.obj is batch.buffer.obj  # the read buffer itself, no copy
    assert cb.value_ends.obj is batch.buffer.obj


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.none() | st.binary(max_size=12), st.none() | st.binary(max_size=40),
                          st.lists(st.tuples(st.sampled_from(["a", "bé", "trace"]), st.none() | st.binary(max_size=6)),
                                   max_size=3),
                          st.integers(-1, 2**41)), min_size=1, max_size=30),
       st.sampled_from([1, 2, 3]), st.sampled_from([COMPRESSION_NONE, COMPRESSION_GZIP]), st.booleans(),
       st.data())
def test_random_batches_match_their_records(rows, magic, compression, sparse, data):
    records = [Record(key, value, tuple(headers), timestamp) for key, value, headers, timestamp in rows]
    options = {"magic": magic, "compression": compression}
    if sparse:
        deltas = sorted(data.draw(st.sets(st.integers(0, 3 * len(records)), min_size=len(records),
                                          max_size=len(records))))
        options["offset_deltas"] = deltas
    batch = make_batch(records, base_offset=data.draw(st.integers(0, 2**40)), **options)
    start = data.draw(st.integers(0, len(records)))
    stop = data.draw(st.integers(start, len(records)))
    check(ColumnBatch(batch, start, stop), batch.records(start, stop))


# --- the fetch rule --------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_bytes", [0, 1, 40, 100, 333, 1000, 10**6])
@pytest.mark.parametrize("max_records", [1, 3, 7, 2**62])
def test_the_taker_takes_what_a_read_takes(max_bytes, max_records):
    batches = [make_batch(varied(n, headers=True), base_offset=base)
               for n, base in ((5, 10), (1, 15), (8, 16), (3, 24))]
    for first_offset in (10, 12, 16, 20, 26):
        slices = [(b, b.index_of(first_offset) if b.base_offset < first_offset else 0, b.record_count)
                  for b in batches if b.last_offset >= first_offset]
        records: list[Record] = []
        charged, resume = 0, -1
        for batch, _first, _stop in slices:
            cost, done = take_records(batch, first_offset, 2**62, max_bytes - charged, max_records, records,
                                      not records)
            charged += cost
            if done:
                resume = records[-1].offset + 1
                break
        got, got_resume = take_columns(slices, max_bytes, max_records)
        assert [r for cb in got for r in cb.records()] == records
        assert got_resume == resume  # where the next read starts: after the last record taken
        taker = ColumnTaker(max_bytes, max_records)
        for slice_ in slices:
            if taker.take(*slice_) >= 0:
                break
        assert [r for cb in taker.batches for r in cb.records()] == records
        assert taker.charged == charged


# --- Arrow -------------------------------------------------------------------------------------------------


needs_arrow = pytest.mark.skipif(not HAS_PYARROW, reason="pyarrow (the spark extra) is not installed")


def arrow_rows(cb: ColumnBatch, records: list[Record], headers: bool) -> None:
    import pyarrow as pa

    from logstore.records.columns import arrow_schema

    table = cb.to_arrow(headers=headers)
    table.validate(full=True)
    assert table.schema == arrow_schema(headers) and table.num_rows == len(records)
    assert table.column("key").to_pylist() == [r.key for r in records]
    assert table.column("value").to_pylist() == [r.value for r in records]
    assert table.column("offset").to_pylist() == [r.offset for r in records]
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [r.timestamp_ms for r in records]
    assert set(table.column("timestampType").to_pylist()) <= {1 if cb.log_append_time else 0}
    if headers:
        assert table.column("headers").to_pylist() == [[{"key": k, "value": v} for k, v in r.headers]
                                                      for r in records]


@needs_arrow
@pytest.mark.parametrize("options", [{}, {"compression": COMPRESSION_GZIP},
                                     {"offset_deltas": [0, 2, 3, 7, 8, 11, 12, 20, 21, 30]},
                                     {"log_append_time": True, "default_timestamp_ms": T0}, {"magic": 1}],
                         ids=["plain", "gzip", "compacted", "log-append-time", "magic-1"])
@pytest.mark.parametrize("nulls", [False, True], ids=["no-nulls", "nulls"])
def test_to_arrow_equals_the_records(options, nulls):
    batch = make_batch(varied(10, nulls=nulls, headers=True), **options)
    for start, stop in ((0, 10), (0, 1), (3, 10), (4, 7), (9, 10), (5, 5)):
        arrow_rows(ColumnBatch(batch, start, stop), batch.records(start, stop), headers=(start + stop) % 2 == 0)
    arrow_rows(ColumnBatch(make_batch(varied(4, same_time=True))), make_batch(varied(4, same_time=True)).records(),
               False)


@needs_arrow
def test_to_arrow_shares_the_key_and_value_bytes():
    import pyarrow as pa

    batch = make_batch(varied(20, nulls=False))
    for start in (0, 6):
        cb = ColumnBatch(batch, start, 20)
        table = cb.to_arrow()
        for name, data in (("key", cb.keys_data), ("value", cb.values_data)):
            buffer = table.column(name).buffers()[2]
            assert buffer.address == pa.py_buffer(data).address  # the same memory: not copied
        offsets = table.column("value").buffers()[1]
        # from the second record on, the offsets are the ends column itself (start - 1 .. stop)
        ends_address = pa.py_buffer(batch.raw_columns().value_ends).address
        assert (offsets.address == ends_address + 4 * (start - 1)) is (start > 0)
