"""Recovery that resumes from the index entry at or below the recovery point.

``LogSegment.recover(recovery_point=...)`` re-verifies and re-indexes only the bytes from the offset
index's floor entry for the recovery point on (once that entry and the time index's last entry before
it are confirmed by the data); without a recovery point it rebuilds from the segment's start. Pinned
here against the full rebuild on random segments (nulls, empty keys and values, headers, timestamps
out of order, gzip batches, truncations that leave the index sparser than a rebuild, torn or garbage
tails, lying index entries):

- both return the same number of invalid bytes (the same verdict on the data);
- every offset lookup (``translate_offset``) and timestamp lookup gives the same answer, or, after a
  lying entry below the resume point was kept, raises ``CorruptIndexError`` (never a wrong answer);
- the segment's max timestamp and the time index's last entry are the same;
- a second recovery, with the same recovery point or a later one, leaves identical index files
  (the idempotence the kill -9 harness checks), and so does a full rebuild followed by a resume.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore import LogManager, Record
from logstore.clock import SYSTEM_CLOCK
from logstore.errors import CorruptIndexError
from logstore.fs import FileSystem
from logstore.log.segment import LogSegment
from logstore.log.time_lookup import find_offset_by_timestamp

TOPIC = "t"
T0 = 1_700_000_000_000
INDEX_BYTES = 64 * 1024

_bytes = st.one_of(st.none(), st.just(b""), st.binary(min_size=1, max_size=60))
_record = st.builds(
    lambda key, value, headers, ts: Record(key, value, headers, T0 + ts),
    _bytes, _bytes,
    st.one_of(st.just(()), st.lists(st.tuples(st.sampled_from(["a", "bb"]), _bytes), max_size=2).map(tuple)),
    st.integers(0, 50))
_batches = st.lists(st.lists(_record, min_size=1, max_size=12), min_size=1, max_size=40)


def _build(data_dir: str, batches: list[list[Record]], interval: int, gzip: bool, truncate_at: int | None) -> int:
    """One partition in one segment; returns its log end offset."""
    config = {"segment.bytes": 1 << 24, "index.interval.bytes": interval, "segment.index.bytes": INDEX_BYTES}
    if gzip:
        config["compression.type"] = "gzip"
    with LogManager([data_dir]) as store:
        store.create_topic(TOPIC, 1, config)
        log = store.get_log(TOPIC, 0)
        for number, batch in enumerate(batches):
            log.append(batch)
            if truncate_at is not None and number == len(batches) // 2:
                log.truncate_to(min(truncate_at, log.log_end_offset))  # the byte count restarts: sparser entries
        return log.log_end_offset


def _segment(path: str, interval: int) -> LogSegment:
    return LogSegment(FileSystem(), SYSTEM_CLOCK, path, 0, index_interval_bytes=interval,
                      max_index_size_bytes=INDEX_BYTES)


def _files(path: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith((".index", ".timeindex", ".log")):
            with open(os.path.join(path, name), "rb") as handle:
                out[name] = handle.read()
    return out


def _answers(segment: LogSegment, end_offset: int, timestamps: list[int]) -> list:
    """Every offset and timestamp lookup, a lie showing as the exception's type."""
    answers = []
    for offset in range(end_offset + 2):
        try:
            found = segment.translate_offset(offset)
            answers.append(None if found is None else (found[0], found[1].base_offset))
        except CorruptIndexError:
            answers.append(CorruptIndexError)
    for timestamp in timestamps:
        try:
            answers.append(find_offset_by_timestamp(segment, timestamp, 0))
        except CorruptIndexError:
            answers.append(CorruptIndexError)
    return answers


@settings(max_examples=100)
@given(batches=_batches, interval=st.sampled_from([1, 64, 200, 700]), gzip=st.booleans(),
       truncate_at=st.one_of(st.none(), st.integers(0, 200)), point=st.floats(0, 1.2),
       later=st.floats(0, 1), tail=st.sampled_from(["none", "torn", "garbage", "zeros"]),
       lie=st.one_of(st.none(), st.tuples(st.sampled_from([".index", ".timeindex"]), st.floats(0, 1),
                                          st.binary(min_size=4, max_size=4))))
def test_resumed_recovery_matches_the_full_rebuild(batches, interval, gzip, truncate_at, point, later, tail, lie):
    root = tempfile.mkdtemp()
    try:
        end_offset = _build(os.path.join(root, "data"), batches, interval, gzip, truncate_at)
        source = os.path.join(root, "data", f"{TOPIC}-0")
        log_path = os.path.join(source, f"{0:020d}.log")
        size = os.path.getsize(log_path)
        with open(log_path, "r+b") as handle:  # what a crash (or damage) can leave past the recovery point
            if tail == "torn" and size > 30:
                handle.truncate(size - 1 - size % 29)
            elif tail == "garbage":
                handle.seek(0, 2)
                handle.write(b"\x01\x02garbage" * 5)
            elif tail == "zeros":
                handle.seek(0, 2)
                handle.write(bytes(100))
        lied = False
        if lie is not None:
            suffix, where, raw = lie
            path = os.path.join(source, f"{0:020d}{suffix}")
            entry_bytes = 8 if suffix == ".index" else 12
            entries = os.path.getsize(path) // entry_bytes
            if entries:
                with open(path, "r+b") as handle:  # one field of one entry overwritten
                    handle.seek(min(int(where * entries), entries - 1) * entry_bytes + (entry_bytes - 4) * (where > 0.5))
                    handle.write(raw)
                lied = True
        recovery_point = int(point * end_offset)
        copies = {}
        for which in ("full", "resumed"):
            copies[which] = os.path.join(root, which)
            shutil.copytree(source, copies[which])
        full, resumed = _segment(copies["full"], interval), _segment(copies["resumed"], interval)
        try:
            invalid = full.recover()  # the tail cut, as the loader does once it is judged a torn one
            assert resumed.recover(recovery_point=recovery_point) == invalid
            assert resumed.max_timestamp_so_far == full.max_timestamp_so_far
            assert resumed.time_index.last_entry == full.time_index.last_entry
            stamps = sorted({r.timestamp_ms for batch in batches for r in batch}) + [T0 - 1, T0 + 99]
            expected = _answers(full, end_offset, stamps)
            seen = _answers(resumed, end_offset, stamps)
            if lied:  # a kept lying entry is found by the lookup that uses it; nothing else differs
                seen = [b if a is CorruptIndexError else a for a, b in zip(seen, expected)]
            assert seen == expected
        finally:
            full.close()
            resumed.close()
        if lied:
            return
        # Idempotence: again with the same recovery point, with a later one, and after a full rebuild.
        after_first = _files(copies["resumed"])
        for again in (recovery_point, recovery_point + int(later * (end_offset - recovery_point))):
            segment = _segment(copies["resumed"], interval)
            try:
                segment.recover(cut_tail=False, recovery_point=again)
            finally:
                segment.close()
            assert _files(copies["resumed"]) == after_first, again
        full_files = _files(copies["full"])
        segment = _segment(copies["full"], interval)
        try:
            segment.recover(cut_tail=False, recovery_point=recovery_point)
        finally:
            segment.close()
        assert _files(copies["full"]) == full_files  # a resume leaves a full rebuild's files as they are
    finally:
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=60)
@given(base=st.integers(0, 1000), first=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 900)), max_size=5),
       bulk=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 900), st.integers(0, 3)), max_size=30))
def test_bulk_index_appends_write_what_single_appends_write(base, first, bulk):
    """``append_all`` of both indexes leaves the bytes (and last entries) ``append`` and
    ``maybe_append`` one by one leave; increasing keys are required of both."""
    from logstore.log.index import OffsetIndex, TimeIndex
    root = tempfile.mkdtemp()
    try:
        made = {}
        for how in ("single", "bulk"):
            offsets = OffsetIndex(FileSystem(), os.path.join(root, f"{how}.index"), base, 4096)
            times = TimeIndex(FileSystem(), os.path.join(root, f"{how}.timeindex"), base, 4096)
            offset, position, stamp = base, 0, T0
            for step, gap in first:  # entries already there, one by one
                offset, position, stamp = offset + step, position + gap, stamp + step
                offsets.append(offset, position)
                times.maybe_append(stamp, offset)
            new_offsets, new_positions, new_stamps, new_time_offsets = [], [], [], []
            for step, gap, rise in bulk:
                offset, position, stamp = offset + step, position + gap, stamp + rise
                new_offsets.append(offset)
                new_positions.append(position)
                if stamp > max([times.last_entry.timestamp_ms] + new_stamps):
                    new_stamps.append(stamp)
                    new_time_offsets.append(offset)
            if how == "single":
                for offset_, position_ in zip(new_offsets, new_positions):
                    offsets.append(offset_, position_)
                for stamp_, offset_ in zip(new_stamps, new_time_offsets):
                    times.maybe_append(stamp_, offset_)
            else:
                offsets.append_all(new_offsets, new_positions)
                times.append_all(new_stamps, new_time_offsets)
                if new_offsets:
                    with pytest.raises(ValueError):
                        offsets.append_all([new_offsets[-1]], [position + 1])
                if new_stamps:
                    with pytest.raises(ValueError):
                        times.append_all([new_stamps[-1]], [offset + 1])
            made[how] = (offsets.entries, offsets.last_offset, times.last_entry)
            offsets.close()
            times.close()
        assert made["single"] == made["bulk"]
        for suffix in (".index", ".timeindex"):
            with open(os.path.join(root, "single" + suffix), "rb") as a, open(os.path.join(root, "bulk" + suffix), "rb") as b:
                assert a.read() == b.read()
    finally:
        shutil.rmtree(root, ignore_errors=True)
