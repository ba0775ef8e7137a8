"""Logs written before batch magic 2 (headers as length-prefixed pairs, magic 1) stay readable, and
everything that reads batches handles both magics side by side: reads with a byte budget, point
reads, appends after them, compaction, ``logstore check`` and ``dump``, and the damage scan that
looks for the next valid batch by its magic byte.

A store of magic-1 batches is written by this code with the encoder's default magic switched to 1
(``encode_batch(magic=1)`` writes the old bytes exactly: the magic-1 golden fixtures pin them).
"""

from __future__ import annotations

import glob
import os

import pytest

from logstore import LogManager, Record
from logstore.log.damage import valid_batch_after
from logstore.records import encoder
from logstore.records.decoder import MAGIC, read_header, record_charge
from logstore.tools.check import verify_store
from logstore.tools.dump import dump_file

T0 = 1_700_000_000_000


@pytest.fixture
def writing_magic(monkeypatch):
    """``writing_magic(1)``: from then on every batch the engine encodes is magic 1 (as an older
    logstore wrote them); ``writing_magic(MAGIC)`` switches back (and the test's end does)."""
    def switch(magic: int) -> None:
        monkeypatch.setitem(encoder.encode_columns_parts.__kwdefaults__, "magic", magic)
        monkeypatch.setitem(encoder.encode_batch_parts.__kwdefaults__, "magic", magic)
    return switch


def make_records(start: int, count: int, keys: int | None = None) -> list[Record]:
    out = []
    for i in range(start, start + count):
        headers = () if i % 3 == 0 else (("trace", b"%016d" % i), ("src", b"svc"), ("n", None if i % 5 == 0 else b""))
        key = b"k%d" % (i % keys if keys else i)
        out.append(Record(key, b"v%d" % i * (i % 7), headers[: 1 + i % 3] if headers else (), T0 + i))
    return out


def magics(log_dir: str) -> set[int]:
    found = set()
    for path in glob.glob(os.path.join(log_dir, "*.log")):
        data = open(path, "rb").read()
        position = 0
        while position < len(data):
            header = read_header(data, position)
            found.add(header.magic)
            position += header.size_bytes
    return found


def model_read(entries: list[Record], offset: int, max_bytes: int) -> list[int]:
    """Offsets ``read(offset, max_bytes)`` returns: whole batches not needed; records charged one by
    one, at least one (Kafka's rule), as the charge of each record is the same for both magics."""
    out, used = [], 0
    for record in entries:
        if record.offset < offset:
            continue
        charge = record_charge(record)
        if out and used + charge > max_bytes:
            break
        out.append(record.offset)
        used += charge
    return out


@pytest.mark.parametrize("compression", ["uncompressed", "gzip"])
def test_a_magic_1_log_reads_appends_checks_and_dumps_like_a_new_one(tmp_path, writing_magic, compression):
    data_dir = str(tmp_path / "data")
    config = {"segment.bytes": 4096, "compression.type": compression}
    old = make_records(0, 60)
    writing_magic(1)
    with LogManager([data_dir]) as store:
        store.create_topic("t", 1, config)
        for start in range(0, 60, 7):
            store.get_log("t", 0).append(old[start : start + 7])
    log_dir = os.path.join(data_dir, "t-0")
    assert magics(log_dir) == {1}
    new = make_records(60, 40)
    writing_magic(MAGIC)
    with LogManager([data_dir]) as store:
        log = store.get_log("t", 0)
        for start in range(0, 40, 9):
            log.append(new[start : start + 9])
        assert magics(log_dir) == {1, MAGIC}
        everything = [r._replace(headers=tuple(r.headers), offset=i) for i, r in enumerate(old + new)]
        assert list(log.iter_records()) == everything
        for offset in (0, 13, 59, 60, 77):
            for max_bytes in (1, 60, 200, 1 << 20):
                got = log.read(offset, max_bytes)
                assert [r.offset for r in got] == model_read(everything, offset, max_bytes), (offset, max_bytes)
                assert got == everything[offset : offset + len(got)]
            assert log.read(offset, max_records=1) == [everything[offset]]
        report = verify_store(store)
        assert report.ok, report.problems
    lines = [line for path in sorted(glob.glob(os.path.join(log_dir, "*.log"))) for line in dump_file(path, records=True)]
    assert sum(line.startswith("| offset:") for line in lines) == 100
    assert any("headers: [trace=" in line for line in lines)


def test_compaction_keeps_the_headers_of_magic_1_and_magic_2_records(tmp_path, writing_magic):
    data_dir = str(tmp_path / "data")
    config = {"cleanup.policy": "compact", "segment.bytes": 1000, "file.delete.delay.ms": 0}
    settings = {"log.cleaner.threads": 0}
    old = make_records(0, 50, keys=7)
    writing_magic(1)
    with LogManager([data_dir], config=settings) as store:
        store.create_topic("c", 1, config)
        for start in range(0, 50, 5):
            store.get_log("c", 0).append(old[start : start + 5])
    writing_magic(MAGIC)
    new = make_records(50, 50, keys=7)
    with LogManager([data_dir], config=settings) as store:
        log = store.get_log("c", 0)
        for start in range(0, 50, 5):
            log.append(new[start : start + 5])
        everything = [r._replace(headers=tuple(r.headers), offset=i) for i, r in enumerate(old + new)]
        store.compact("c", 0)
        end = log.segments[-1].base_offset  # the active segment is never cleaned
        last = {r.key: r.offset for r in everything if r.offset < end}
        kept = [r for r in everything if r.offset >= end or last[r.key] == r.offset]
        assert list(log.iter_records()) == kept
        assert len(kept) < len(everything)


def test_the_damage_scan_finds_magic_1_batches(tmp_path, writing_magic):
    data_dir = str(tmp_path / "data")
    writing_magic(1)
    with LogManager([data_dir]) as store:
        store.create_topic("t", 1, {"segment.bytes": 1 << 20})
        log = store.get_log("t", 0)
        for start in range(0, 30, 10):
            log.append(make_records(start, 10))
        segment = log.segments[0]
        data = open(segment.log_path, "rb").read()
        second = read_header(data).size_bytes
        third = second + read_header(data, second).size_bytes
        assert valid_batch_after(segment, 0, -1, len(data)) == second
        assert valid_batch_after(segment, second, 9, len(data)) == third


def test_a_magic_2_log_of_one_record_batches_reads_through_the_fast_path_and_takes_magic_3_appends(
        tmp_path, writing_magic, monkeypatch):
    """Magic 3 lays out a batch without a producer block as magic 2 did, so the one-record fast path
    (``take_single_record_batches`` and its uniform stretches) takes a log written before magic 3
    as it takes a new one, and both side by side."""
    from logstore.log import segment as segment_module
    from logstore.records import record_builder

    data_dir = str(tmp_path / "data")
    writing_magic(2)
    monkeypatch.setattr(encoder, "MAGIC", 2)  # one-record appends (``encode_one``) as magic 2 wrote them
    one = [Record(b"k%03d" % i, b"v%05d" % i, (), T0 + i) for i in range(60)]
    with LogManager([data_dir]) as store:
        store.create_topic("t", 1, {"segment.bytes": 1 << 20})
        for record in one[:40]:
            store.get_log("t", 0).append([record])
    log_dir = os.path.join(data_dir, "t-0")
    assert magics(log_dir) == {2}
    writing_magic(MAGIC)
    monkeypatch.setattr(encoder, "MAGIC", MAGIC)
    taken = []
    uniform = []
    original, original_uniform = segment_module.take_single_record_batches, record_builder._take_uniform

    def spy(buffer, at, limit, start_offset, end_offset, budget, room, records, need_one):
        before = len(records)
        result = original(buffer, at, limit, start_offset, end_offset, budget, room, records, need_one)
        taken.extend(records[before:])
        return result

    def spy_uniform(*args):
        result = original_uniform(*args)
        uniform.append(result[3])
        return result

    monkeypatch.setattr(segment_module, "take_single_record_batches", spy)
    monkeypatch.setattr(record_builder, "_take_uniform", spy_uniform)
    with LogManager([data_dir]) as store:
        log = store.get_log("t", 0)
        everything = [r._replace(headers=(), offset=i) for i, r in enumerate(one)]
        assert log.read(0, 1 << 20) == everything[:40]
        # every old batch after the first (which starts the read) by the fast path, most in bulk
        assert taken == everything[1:40] and sum(uniform) >= 8
        for record in one[40:]:
            log.append([record])
        assert magics(log_dir) == {2, MAGIC}
        del taken[:]
        assert log.read(0, 1 << 20) == everything
        assert taken == everything[1:]
        assert list(log.iter_records()) == everything
        assert verify_store(store).ok
