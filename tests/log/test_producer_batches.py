"""A segment reads batches with a producer block (magic 3) on every read path: whole, partially
from a cached head (the block shifts the body by 14 bytes) and by the point-read fast path."""

from __future__ import annotations

from logstore.clock import SYSTEM_CLOCK
from logstore.fs import FileSystem
from logstore.log.segment import PARTIAL_READ_MIN_BYTES, LogSegment
from logstore.records.decoder import Record, RecordBatch, read_header
from logstore.records.encoder import encode_batch

T0 = 1_700_000_000_000


def test_a_large_producer_batch_reads_the_same_records_whole_partially_and_by_point_reads(tmp_path):
    records = [Record(b"key-%04d" % i, bytes([i % 251]) * 600, (("h", b"%d" % i),) if i % 3 else (), T0 + i)
               for i in range(120)]
    first = encode_batch(records[:60], base_offset=0, producer=(77, 4, 0), transactional=True)
    second = encode_batch(records[60:], base_offset=60, producer=(77, 4, 60), transactional=True)
    assert len(first) > PARTIAL_READ_MIN_BYTES
    segment = LogSegment(FileSystem(), SYSTEM_CLOCK, str(tmp_path), 0, index_interval_bytes=4096,
                         max_index_size_bytes=1 << 20, create=True)
    segment.append(0, 59, T0 + 59, bytes(first))
    segment.append(60, 119, T0 + 119, bytes(second))
    expected = [record._replace(headers=tuple(record.headers), offset=i) for i, record in enumerate(records)]
    whole, _, _ = segment.read(0, 1 << 30, 1000)
    assert whole == expected
    for _ in range(2):  # the first read of a batch verifies it and caches its head; then partial and point reads
        for offset in (0, 1, 33, 59, 60, 61, 100, 119):
            got, _, _ = segment.read(offset, 10, 1)
            assert got == [expected[offset]], offset
            cached = segment.read_one_cached(offset)
            assert cached in (None, expected[offset]), offset
    assert any(segment.read_one_cached(offset) == expected[offset] for offset in range(120))
    data = open(segment.log_path, "rb").read()
    assert RecordBatch.decode(data).producer[:3] == (77, 4, 0)
    assert read_header(data, len(first)).base_offset == 60
    segment.close()
