"""``Log.max_timestamp_offset`` (ListOffsets' max-timestamp, KIP-734; ``logstore offsets --time
max-timestamp``) against a brute-force scan of the readable records: the first record with the
largest timestamp at or above the log start offset, across batches and segments, with ties, with the
log start moved into the middle of a segment or of a batch (``delete_records``), read-only too."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from logstore import LogManager, Record

BASE_MS = 1_700_000_000_000


def brute_force(log) -> tuple[int, int] | None:
    best = None
    for record in log.read(log.log_start_offset, 1 << 30, 1 << 20):
        if record.timestamp_ms >= 0 and (best is None or record.timestamp_ms > best[0]):
            best = (record.timestamp_ms, record.offset)
    return best


def test_a_largest_timestamp_below_the_log_start_does_not_count(tmp_path):
    with LogManager([str(tmp_path / "data")], config={"log.segment.bytes": 10_000}) as store:
        store.create_topic("t")
        store.append("t", [Record(None, b"v", (), BASE_MS + stamp) for stamp in (1, 9, 3, 9, 2)], partition=0)
        store.append("t", [Record(None, b"v", (), BASE_MS + stamp) for stamp in (5, 7, 7)], partition=0)
        log = store.get_log("t", 0)
        assert log.max_timestamp_offset() == (BASE_MS + 9, 1)
        log.delete_records(2)  # inside the batch: its other 9 is next
        assert log.max_timestamp_offset() == (BASE_MS + 9, 3)
        log.delete_records(4)  # both 9s gone: the 7s of the next batch, the first of them
        assert log.max_timestamp_offset() == (BASE_MS + 7, 6)
        log.delete_records(8)
        assert log.max_timestamp_offset() is None


batches = st.lists(st.lists(st.integers(0, 20), min_size=1, max_size=6), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(batches=batches, cut=st.integers(0, 80), segment_bytes=st.sampled_from([150, 400, 1 << 20]))
def test_max_timestamp_offset_is_the_first_readable_record_with_the_largest_timestamp(
        tmp_path_factory, batches, cut, segment_bytes):
    path = str(tmp_path_factory.mktemp("data"))
    with LogManager([path], config={"log.segment.bytes": segment_bytes}) as store:
        store.create_topic("t")
        for stamps in batches:
            store.append("t", [Record(None, b"v", (), BASE_MS + stamp) for stamp in stamps], partition=0)
        log = store.get_log("t", 0)
        assert log.max_timestamp_offset() == brute_force(log)
        log.delete_records(min(cut, log.log_end_offset))
        expected = brute_force(log)
        assert log.max_timestamp_offset() == expected
    with LogManager([path], read_only=True) as view:  # loaded from the files: the same answer
        assert view.get_log("t", 0).max_timestamp_offset() == expected
