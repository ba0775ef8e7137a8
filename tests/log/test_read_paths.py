"""The read paths that large batches take: CRC verified once per process, point reads served from a
cached batch head plus two small reads, partial reads of a batch, streaming scans.

Invariants checked: every path returns exactly the records that were appended (keys, values,
headers, timestamps, offsets); a point read after the batch was cut or rewritten never serves stale
cached bytes; a segment closed under a reader fails that read instead of returning another file's
bytes; ``iter_records`` honours its start and end offsets across segments; a byte flipped on disk
is reported as corruption (CorruptRecordError), never returned.
"""

from __future__ import annotations

import os
import random

import pytest

from logstore import CorruptRecordError, LogManager, Record
from logstore.records.fetch import HEAD_CACHE

BATCH = 400  # records per append: about 45 KB, above the 32 KiB partial-read threshold


def payload(offset: int) -> Record:
    rng = random.Random(offset)
    headers = [("n", str(offset).encode())] if offset % 7 == 0 else []
    key = None if offset % 11 == 0 else f"key-{offset}".encode()
    value = None if offset % 13 == 0 else rng.randbytes(rng.randrange(60, 160))
    return Record(key, value, headers, 1_700_000_000_000 + offset * 3)


def expected(offset: int) -> tuple:
    record = payload(offset)
    return (record.key, record.value, tuple(map(tuple, record.headers)), record.timestamp_ms, offset)


def as_tuple(record: Record) -> tuple:
    return (record.key, record.value, record.headers, record.timestamp_ms, record.offset)


@pytest.fixture
def big_log(tmp_path):
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", 1, {"segment.bytes": 150_000})
        log = store.get_log("t", 0)
        for start in range(0, 4000, BATCH):
            log.append([payload(offset) for offset in range(start, start + BATCH)])
        assert len(log.segments) > 2
        yield log


def test_point_reads_are_exact_cold_and_cached(big_log):
    rng = random.Random(5)
    offsets = [rng.randrange(4000) for _ in range(1500)]
    for offset in offsets:  # first touches verify whole batches; repeats go through the head cache
        (record,) = big_log.read(offset, max_bytes=1)
        assert as_tuple(record) == expected(offset)
    assert any(key[0] is big_log.segments[0]._token for key in HEAD_CACHE._entries), "the cache was used"
    for offset in offsets:
        (record,) = big_log.read(offset, max_bytes=1)
        assert as_tuple(record) == expected(offset)


def test_small_reads_inside_large_batches(big_log):
    rng = random.Random(6)
    for _ in range(300):
        offset = rng.randrange(4000)
        budget = rng.randrange(1, 3000)
        got = big_log.read(offset, max_bytes=budget)
        assert got and [as_tuple(r) for r in got] == [expected(o) for o in range(offset, offset + len(got))]


def test_iter_records_bounds_across_segments(big_log):
    rng = random.Random(7)
    for _ in range(20):
        start = rng.randrange(4000)
        end = rng.randrange(start, 4001)
        got = [as_tuple(r) for r in big_log.iter_records(start, end)]
        assert got == [expected(offset) for offset in range(start, end)]
    assert [r.offset for r in big_log.iter_records()] == list(range(4000))


def test_cached_heads_are_not_served_after_truncation(big_log):
    for offset in range(3000, 4000, 37):  # warm the head cache on the last batches
        big_log.read(offset, max_bytes=1)
    big_log.truncate_to(3500)  # cuts inside a batch: the segment is rewritten
    replacements = [Record(b"new", f"v{offset}".encode(), (), 5) for offset in range(3500, 3900)]
    big_log.append(replacements)
    for offset in range(3000, 3900, 13):
        (record,) = big_log.read(offset, max_bytes=1)
        if offset < 3500:
            assert as_tuple(record) == expected(offset)
        else:
            assert (record.key, record.value, record.offset) == (b"new", f"v{offset}".encode(), offset)


def test_a_closed_segment_never_serves_another_files_bytes(big_log):
    segment = big_log.segments[0]
    segment.read(5, 1, 1)  # verify the batch, then cache its head
    segment.read(5, 1, 1)
    batch = segment._batch_for_read(0, segment.translate_offset(0)[1], memoryview(b""), 0, 1)
    segment.close_handlers()
    with pytest.raises(ValueError):
        batch.record_at(3)


def test_a_flipped_byte_below_the_recovery_point_is_reported(tmp_path):
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        log.append([payload(offset) for offset in range(BATCH)])
        log.flush()
        path = log.segments[0].log_path
    with open(path, "r+b") as handle:  # flip a byte inside the values of the first batch
        handle.seek(30_000)
        byte = handle.read(1)
        handle.seek(30_000)
        handle.write(bytes([byte[0] ^ 0x40]))
    with LogManager([str(tmp_path)]) as store:  # a clean open trusts the data below the recovery point
        log = store.get_log("t", 0)
        with pytest.raises(CorruptRecordError):
            log.read(0, max_bytes=1)
        with pytest.raises(CorruptRecordError):
            list(log.iter_records())


@pytest.mark.parametrize("sizes", [
    [16] * 50,  # fixed size: one struct call cuts them all out
    [16] * 49 + [17],  # one differs at the end
    [17] + [16] * 49,
    [8, 24] * 25,  # the same total as 16 each, but not fixed
    [0] * 50,  # all empty
])
def test_fixed_and_almost_fixed_sizes_decode_exactly(sizes):
    from logstore.records.decoder import RecordBatch
    from logstore.records.encoder import encode_batch
    records = [Record(bytes([i % 251]) * size, bytes([(i * 7) % 251]) * size, (), 1000 + i)
               for i, size in enumerate(sizes)]
    batch = RecordBatch.decode(bytes(encode_batch(records)))
    assert [(r.key, r.value, r.timestamp_ms, r.offset) for r in batch.records()] == [
        (r.key, r.value, r.timestamp_ms, offset) for offset, r in enumerate(records)]
    assert batch.records(3, 7) == batch.records()[3:7]


def test_a_mapped_segment_is_rewritten_not_cut(big_log):
    sealed = big_log.segments[0]
    offset = sealed.base_offset + 5
    for _ in range(2):  # the second point read goes through the cached head and the mapping
        (record,) = big_log.read(offset, max_bytes=1)
    assert sealed.mapped and as_tuple(record) == expected(offset)
    inode = os.stat(sealed.log_path).st_ino
    boundary = big_log.segments[1].base_offset - BATCH  # a batch boundary inside the mapped segment
    assert big_log.truncate_to(boundary)
    assert sealed.closed and not sealed.mapped
    assert os.stat(big_log.segments[-1].log_path).st_ino != inode, "rewritten into a new file"
    assert [as_tuple(r) for r in big_log.iter_records()] == [expected(o) for o in range(boundary)]


def test_point_reads_race_truncation_without_faults(tmp_path):
    """Reader threads point-read sealed (mapped) segments while the main thread truncates and
    appends: never a SIGBUS (the child would die of a signal), only records that are right."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            code = _race_truncation(str(tmp_path))
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"the child died of signal {os.WTERMSIG(status)}"
    assert os.WEXITSTATUS(status) == 0


def _race_truncation(data_dir: str) -> int:
    import sys
    import threading
    from logstore import OffsetOutOfRangeError
    sys.setswitchinterval(1e-5)
    errors = []
    stop = threading.Event()
    with LogManager([data_dir]) as store:
        store.create_topic("t", 1, {"segment.bytes": 150_000})
        log = store.get_log("t", 0)
        for start in range(0, 4000, BATCH):
            log.append([payload(offset) for offset in range(start, start + BATCH)])

        def reader(seed: int) -> None:
            rng = random.Random(seed)
            while not stop.is_set():
                offset = rng.randrange(max(log.log_end_offset, 1))
                try:
                    got = log.read(offset, max_bytes=1)
                except OffsetOutOfRangeError:
                    continue
                except Exception as exc:  # noqa: BLE001 - any other failure is the finding
                    errors.append(repr(exc))
                    return
                if got and got[0].offset == offset and got[0].key not in (payload(offset).key, b"again"):
                    errors.append(f"wrong record at {offset}: {got[0]!r:.80}")

        threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(3)]
        for thread in threads:
            thread.start()
        rng = random.Random(9)
        for _ in range(12):
            point = rng.choice([BATCH * rng.randrange(1, 8), rng.randrange(100, 3000)])
            log.truncate_to(min(point, log.log_end_offset))
            while log.log_end_offset < 4000:
                start = log.log_end_offset
                log.append([Record(b"again", b"x" * 100, (), 5) for _ in range(min(BATCH, 4000 - start))])
        stop.set()
        for thread in threads:
            thread.join()
    print("\n".join(errors[:5]))
    return 0 if not errors else 2
