"""The fast read paths pinned to the general path.

The fast paths: runs of one-record batches (``record_builder.take_single_record_batches`` and its bulk
stretch ``_take_uniform``), point reads through a cached batch head (``PointHead``), fixed-size
columns cut for part of a batch, and reads built with the collector paused. The general path is the
batch-by-batch one: ``read_header`` + ``RecordBatch.decode`` + ``fetch.take_records``, and
``Log.iter_batch_slices`` with ``RecordBatch.records``.

Invariants checked, for random logs (nulls, empty keys and values, headers, one-record and larger
batches, uniform stretches, gzip, LogAppendTime, sparse offsets after compaction, several segments):
- the fast loop over a buffer, resumed by the general path wherever it stops, gives exactly the
  records, charged bytes and stopping decision of the general path alone, for random start and end
  offsets, budgets (cutting mid-batch), ``max_records`` and the min-one rule;
- ``Log.iter_records(start, end)`` equals the general scan; every ``Log.read`` equals the plain model
  (a greedy prefix of the records at or after the offset, at least one); a point read of every offset,
  cold and cached, with ``max_bytes=1`` and with ``max_records=1``, gives the record there;
- a flipped byte in a file of one-record batches raises the very ``CorruptRecordError`` the general
  path raises (same message), from ``iter_records`` and from ``read``;
- a read leaves the garbage collector as it found it (enabled, or disabled by the program).
"""

from __future__ import annotations

import gc
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from logstore import CorruptRecordError, LogManager, Record
from logstore.fs import FileSystem
from logstore.records.decoder import COMPRESSION_MASK
from logstore.records.decoder import HEADER_BYTES as BATCH_HEADER_BYTES
from logstore.records.decoder import RecordBatch, read_header, record_charge
from logstore.records.encoder import encode_batch
from logstore.records.fetch import take_records
from logstore.records.record_builder import PointHead, take_single_record_batches

T0 = 1_700_000_000_000
_keys = st.one_of(st.none(), st.binary(max_size=6))
_values = st.one_of(st.none(), st.binary(max_size=40))
_header_pairs = st.tuples(st.sampled_from(["a", "é"]), st.one_of(st.none(), st.binary(max_size=4)))
_headers = st.one_of(st.just(()), st.lists(_header_pairs, max_size=2).map(tuple))
_records = st.builds(lambda key, value, headers, ts: Record(key, value, headers, ts),
                     _keys, _values, _headers, st.integers(T0, T0 + 5))


@st.composite
def _batch_specs(draw):
    """One batch: kind (single, uniform stretch, multi, gzip, log-append, sparse, empty) and records."""
    kind = draw(st.sampled_from(["single", "single", "uniform", "multi", "gzip", "log_append", "sparse", "empty"]))
    if kind == "uniform":  # many equal-sized one-record batches: the bulk path
        key_size, value_size, count = draw(st.integers(0, 5)), draw(st.integers(0, 30)), draw(st.integers(8, 40))
        return [(kind, [Record(bytes([i % 256]) * key_size, bytes([i % 7]) * value_size, (), T0 + i)])
                for i in range(count)]
    if kind == "empty":
        return [(kind, [])]
    count = 1 if kind in ("single", "log_append") else draw(st.integers(1, 6))
    return [(kind, draw(st.lists(_records, min_size=count, max_size=count)))]


def _encode(specs, rng: random.Random) -> tuple[bytes, list[int]]:
    """The batches back to back with increasing (sometimes gapped) base offsets, and their positions."""
    data, positions, offset = bytearray(), [], rng.randrange(0, 1000)
    for kind, records in specs:
        options: dict = {"base_offset": offset}
        if kind == "gzip":
            options["compression"] = 1
        elif kind == "log_append":
            options.update(log_append_time=True, default_timestamp_ms=T0 + 99)
        elif kind == "sparse":
            deltas = sorted(rng.sample(range(len(records) + 3), len(records)))
            options.update(offset_deltas=deltas, last_offset_delta=deltas[-1] + rng.randrange(0, 2))
        elif kind == "empty":
            options["last_offset_delta"] = rng.randrange(0, 3)
        batch = encode_batch(records, **options)
        positions.append(len(data))
        data += batch
        offset = read_header(batch).next_offset + (rng.randrange(0, 3) if rng.random() < 0.2 else 0)
    return bytes(data), positions


def _general(buffer: bytes, at: int, limit: int, start: int, end: int, budget: int, room: int, need_one: bool):
    records: list = []
    charged = 0
    while True:
        header = read_header(buffer, at, whole=False)
        if header is None or at + header.size_bytes > limit:
            return records, charged, False
        if header.base_offset >= end:
            return records, charged, True
        if header.last_offset >= start:
            batch = RecordBatch.decode(buffer, at)
            if header.record_count:
                cost, done = take_records(batch, start, end, budget - charged, room, records, need_one and not records)
                charged += cost
                if done:
                    return records, charged, True
        at += header.size_bytes


def _fast_then_general(buffer: bytes, at: int, limit: int, start: int, end: int, budget: int, room: int,
                       need_one: bool):
    """What ``LogSegment.read`` does: the fast loop, and one general batch wherever it stops."""
    records: list = []
    charged = 0
    while True:
        at, cost, done = take_single_record_batches(buffer, at, limit, start, end, budget - charged,
                                                    room - len(records), records, need_one and not records)
        charged += cost
        if done:
            return records, charged, True
        header = read_header(buffer, at, whole=False)
        if header is None or at + header.size_bytes > limit:
            return records, charged, False
        if header.base_offset >= end:
            return records, charged, True
        if header.last_offset >= start:
            batch = RecordBatch.decode(buffer, at)
            if header.record_count:
                cost, done = take_records(batch, start, end, budget - charged, room, records, need_one and not records)
                charged += cost
                if done:
                    return records, charged, True
        at += header.size_bytes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_batch_specs(), min_size=1, max_size=12), st.randoms(use_true_random=False), st.data())
def test_single_record_fast_loop_matches_the_general_path(spec_lists, rng, data):
    specs = [spec for specs in spec_lists for spec in specs]
    buffer, positions = _encode(specs, rng)
    at = positions[data.draw(st.integers(0, len(positions) - 1))]
    limit = data.draw(st.integers(at, len(buffer)))
    first_offset = read_header(buffer, at).base_offset
    start = first_offset + data.draw(st.integers(-2, 60))
    end = start + data.draw(st.integers(0, 80))
    budget = data.draw(st.one_of(st.integers(0, 40), st.integers(0, 4000), st.just(2**62)))
    room = data.draw(st.one_of(st.integers(1, 10), st.just(2**62)))
    need_one = data.draw(st.booleans())
    expected = _general(buffer, at, limit, start, end, budget, room, need_one)
    assert _fast_then_general(buffer, at, limit, start, end, budget, room, need_one) == expected


# --- whole logs --------------------------------------------------------------------------------


def _greedy(records: list, offset: int, max_bytes: int, max_records: int | None) -> list:
    """The model of ``Log.read``: records at or after ``offset``, the first always, then while the
    charges fit ``max_bytes`` and the count ``max_records``."""
    out, charged = [], 0
    for record in records:
        if record.offset < offset:
            continue
        charge = record_charge(record)
        if out and (charged + charge > max_bytes or (max_records is not None and len(out) >= max_records)):
            break
        out.append(record)
        charged += charge
        if charged >= max_bytes or (max_records is not None and len(out) >= max_records):
            break
    return out


def _general_scan(log, start: int | None = None, end: int | None = None) -> list:
    return [record for batch, first, stop in log.iter_batch_slices(start, end) for record in batch.records(first, stop)]


def _check_log(log, rng: random.Random) -> None:
    everything = _general_scan(log)
    assert list(log.iter_records()) == everything
    start_offset, end_offset = log.log_start_offset, log.log_end_offset
    for _ in range(5):
        start = rng.randrange(start_offset, end_offset + 1)
        end = rng.randrange(start, end_offset + 2)
        assert list(log.iter_records(start, end)) == [r for r in everything if start <= r.offset < end]
    for _ in range(3):  # consumer loops with random budgets
        offset = start_offset
        max_bytes = rng.choice([0, 1, 20, 100, 700, 5000, 1 << 20])
        max_records = rng.choice([None, 1, 3, 50])
        while offset < end_offset:
            got = log.read(offset, max_bytes, max_records)
            assert got == _greedy(everything, offset, max_bytes, max_records)
            offset = got[-1].offset + 1 if got else end_offset
    for _round in range(2):  # cold, then through any cached heads
        for offset in range(start_offset, end_offset):
            model = _greedy(everything, offset, 0, 1)
            assert log.read(offset, max_bytes=1) == model
            assert log.read(offset, max_records=1) == model


@st.composite
def _appends(draw):
    out = []
    for _ in range(draw(st.integers(1, 25))):
        if draw(st.booleans()):
            out.append(draw(st.lists(_records, min_size=1, max_size=1)))
        elif draw(st.booleans()):  # a uniform stretch of one-record appends
            size = draw(st.integers(0, 20))
            out.extend([[Record(b"k%d" % (i % 5), b"v" * size, (), T0)] for i in range(draw(st.integers(8, 30)))])
        else:
            out.append(draw(st.lists(_records, min_size=1, max_size=12)))
    return out


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(_appends(), st.sampled_from(["producer", "gzip"]), st.sampled_from(["CreateTime", "LogAppendTime"]),
       st.sampled_from([600, 1 << 20]), st.booleans(), st.randoms(use_true_random=False))
def test_reads_match_the_general_path_and_the_model(tmp_path_factory, appends, compression, timestamp_type,
                                                    segment_bytes, compact, rng):
    directory = str(tmp_path_factory.mktemp("log"))
    with LogManager([directory]) as store:
        store.create_topic("t", 1, {"segment.bytes": segment_bytes, "compression.type": compression,
                                    "message.timestamp.type": timestamp_type,
                                    "cleanup.policy": "compact" if compact else "delete"})
        log = store.get_log("t", 0)
        for records in appends:  # a compacted topic wants a key on every record
            log.append([r._replace(key=b"") if compact and r.key is None else r for r in records])
        if compact:
            log.roll()
            store.compact("t")
        _check_log(log, rng)


def test_point_reads_in_large_compacted_batches(tmp_path):
    """Sparse offsets in batches large enough for the head cache: every offset, cold and cached."""
    rng = random.Random(3)
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": 1 << 20})
        log = store.get_log("t", 0)
        for batch in range(6):
            log.append([Record(b"" if i % 37 == 0 else b"key-%d" % rng.randrange(500),
                               None if i % 41 == 0 else rng.randbytes(rng.randrange(0, 150)),
                               (("h", b"x"),) if i % 29 == 0 else (), T0 + i) for i in range(600)])
        log.roll()
        store.compact("t")
        assert any(batch.offsets() != range(batch.base_offset, batch.base_offset + batch.record_count)
                   for batch, _, _ in log.iter_batch_slices()), "compaction left sparse batches"
        _check_log(log, rng)


class _CountingFS(FileSystem):
    """Counts the bytes read with ``pread``."""

    def __init__(self) -> None:
        super().__init__()
        self.read_bytes = 0

    def pread(self, fd: int, size_bytes: int, position: int) -> bytes:
        data = super().pread(fd, size_bytes, position)
        self.read_bytes += len(data)
        return data


@pytest.mark.parametrize("point", [{"max_records": 1}, {"max_bytes": 1}])
def test_a_point_read_asked_either_way_caches_the_batch_head(tmp_path, point):
    # A point read takes the cached path whatever asks for one record, so
    # after the first read into a large batch (which verifies all of it) the next ones read little.
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", 1)
        for start in range(0, 4000, 1000):
            store.get_log("t", 0).append([Record(b"k%06d" % i, bytes(100), (), T0 + i)
                                          for i in range(start, start + 1000)])
    fs = _CountingFS()
    with LogManager([str(tmp_path)], fs=fs, read_only=True) as store:  # a reader: no mapping
        log = store.get_log("t", 0)
        assert log.read(2100, **point)[0].offset == 2100
        first = fs.read_bytes
        assert first >= 1000 * 100  # the whole batch, verified
        for offset in (2500, 2999, 2000):
            before = fs.read_bytes
            (record,) = log.read(offset, **point)
            assert (record.offset, record.key) == (offset, b"k%06d" % offset)
            assert fs.read_bytes - before <= 4096, (offset, fs.read_bytes - before)


# --- corruption --------------------------------------------------------------------------------


def _error(action) -> str | None:
    try:
        action()
    except CorruptRecordError as exc:
        return str(exc)
    return None


def _read_all(log) -> None:
    offset = 0
    while offset < log.log_end_offset:
        offset = log.read(offset, 1 << 20)[-1].offset + 1


@pytest.mark.parametrize("seed", range(12))
def test_a_flipped_byte_in_one_record_batches_raises_as_the_general_path_does(tmp_path, seed):
    rng = random.Random(seed)
    directory = str(tmp_path)
    with LogManager([directory]) as store:
        store.create_topic("t", 1, {})
        log = store.get_log("t", 0)
        for i in range(300):
            log.append([Record(b"k%03d" % i, b"v" * (100 if i < 200 else rng.randrange(0, 30)), (), T0)])
        segment = log.segments[0]
        path, size = segment.log_path, segment.size_bytes
    position = rng.randrange(size // 3, size)
    with open(path, "r+b") as file:
        file.seek(position)
        byte = file.read(1)[0]
        file.seek(position)
        file.write(bytes([byte ^ (1 << rng.randrange(8))]))
    with LogManager([directory]) as store:  # opened cleanly: no recovery rescans the flipped batch
        log = store.get_log("t", 0)
        expected = _error(lambda: list(log.segments[0].iter_batches()))
        assert expected is not None
        assert _error(lambda: list(log.iter_records())) == expected
        assert _error(lambda: _read_all(log)) == expected


# --- the collector ------------------------------------------------------------------------------


def test_reads_leave_the_collector_as_they_found_it(tmp_path):
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", 1, {})
        log = store.get_log("t", 0)
        for base in range(0, 3000, 1000):
            log.append([Record(b"k%d" % i, b"v" * 50, (), T0) for i in range(base, base + 1000)])
        for _ in range(50):
            log.append([Record(b"s", b"v" * 20, (), T0)])
        assert gc.isenabled()
        assert len(log.read(0, 1 << 20)) > 256 and gc.isenabled()
        assert len(list(log.iter_records())) == 3050 and gc.isenabled()
        gc.disable()
        try:
            assert len(log.read(0, 1 << 20)) > 256
            assert len(list(log.iter_records())) == 3050
            assert not gc.isenabled()
        finally:
            gc.enable()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_batch_specs(), st.randoms(use_true_random=False))
def test_point_head_gives_what_record_at_gives_at_every_offset(specs, rng):
    # PointHead repacks the ends and timestamps into rows of its own; every offset the batch may hold
    # (and one either side) must give RecordBatch's record, or None where it holds none.
    data, _positions = _encode(specs[:1], rng)
    batch = RecordBatch.decode(data, 0)
    header = batch.header
    assume(not header.attributes & COMPRESSION_MASK)  # compressed batches never get a cached head
    head = PointHead(batch, BATCH_HEADER_BYTES, lambda size, position: data[position : position + size])
    expected = {record.offset: record for record in batch.iter_records()}
    for offset in range(header.base_offset - 1, header.last_offset + 2):
        assert head.record(offset) == expected.get(offset)


def test_iter_records_over_thousands_of_one_record_batches_in_runs(tmp_path):
    # iter_records yields one-record batches in runs of at most 512 records (the collector's young
    # generation stays below its threshold); every run boundary must neither drop nor repeat a record.
    rng = random.Random(7)
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        expected = []
        for i in range(2600):
            size = 100 if i < 1500 or i % 3 else rng.randrange(0, 200)  # uniform, then mixed sizes
            record = Record(b"k%05d" % i, rng.randbytes(size), (), T0 + i)
            log.append([record])
            expected.append(record._replace(offset=i))
        assert list(log.iter_records(0)) == expected
        for start, stop in ((0, 512), (1, 513), (511, 1025), (600, 2600), (1999, 2001), (2599, None)):
            assert list(log.iter_records(start, stop)) == expected[start:stop]
