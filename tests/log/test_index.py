"""Offset and time indexes, alone against a plain sorted list, and damaged on disk under a real store.

Invariants checked: ``OffsetIndex`` and ``TimeIndex`` behave like a sorted list searched with
``bisect`` through any sequence of appends (strictly increasing offsets; a time entry only when the
timestamp grows), floor lookups (below the first entry, between, above the last), ``truncate_to``,
``truncate``, ``resize``, ``trim_to_valid_size``, ``reset``, ``is_full`` (the time index keeps its last
slot free), clean close and reopen (entries come back from the trimmed file), reopen of a
never-trimmed preallocated file (the zero-filled tail is ignored), read-only opens (``pread``, no
mapping, no descriptor kept), a 0-byte index (never mapped); ``lookup_position`` equals
``lookup(...).position``; ``sanity_check`` accepts every well-formed index and rejects broken ones; the
file length on disk always equals the mapped length. Through a real store: a deleted, partially
truncated, emptied or overwritten ``.index``/``.timeindex`` is rebuilt (or harmless) on reopen: every
record reads back, ``read(o, 1)`` for every offset and ``offset_for_timestamp`` for every timestamp
agree with a brute-force scan, and the indexes then pass ``sanity_check`` (a wrong entry in the middle
is caught when a read uses it, and the index rebuilt then).
"""

from __future__ import annotations

import bisect
import os
import shutil
import struct
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from logstore import CorruptIndexError, FileSystem, LogManager, ManualClock, Record
from logstore.log.index import OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset

MAX_POSITION = 2**31 - 1


class SpyFS(FileSystem):
    """Counts mappings made, so tests can assert that read-only and empty indexes map nothing."""

    def __init__(self) -> None:
        self.maps = 0

    def map_file(self, fd, length, *, writable):
        self.maps += 1
        return super().map_file(fd, length, writable=writable)


def file_size(path: str) -> int:
    return os.path.getsize(path)


# --- the stateful model ----------------------------------------------------------------------------

class _IndexMachine(RuleBasedStateMachine):
    """Shared rules; subclasses say how to append and what an entry looks like."""

    CLS = OffsetIndex
    E = 8

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="logstore-index-")
        self.path = os.path.join(self.dir, "00000000000000000000.idx")
        self.fs = SpyFS()
        self.index = None
        self.entries: list[tuple[int, int]] = []  # what the index should hold, in order
        self.length = 0  # bytes the file should have (and the mapping cover)

    @initialize(base=st.sampled_from([0, 1, 1000, 2**33 + 7]), slots=st.integers(1, 12), extra=st.integers(0, 11))
    def open_new(self, base, slots, extra):
        self.base = base
        self.max_bytes = slots * self.E + extra % self.E  # rounded down on creation
        self.index = self.CLS(self.fs, self.path, base, self.max_bytes)
        self.length = slots * self.E

    def teardown(self) -> None:
        if self.index is not None:
            self.index.close_handlers()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- the model -------------------------------------------------------------------------------

    @property
    def slots(self) -> int:
        return self.length // self.E

    def model_full(self) -> bool:
        return len(self.entries) >= self.slots

    def keys(self) -> list[int]:
        return [entry[0] for entry in self.entries]

    def offsets(self) -> list[int]:
        raise NotImplementedError

    def default(self):
        raise NotImplementedError

    def model_lookup(self, key: int):
        slot = bisect.bisect_right(self.keys(), key) - 1
        return self.entries[slot] if slot >= 0 else self.default()

    # --- rules shared by both kinds --------------------------------------------------------------

    @rule(data=st.data())
    def lookup(self, data):
        keys = self.keys()
        low = (keys[0] if keys else self._lookup_floor()) - 3
        high = (keys[-1] if keys else self._lookup_floor()) + 3
        for _ in range(4):
            target = data.draw(st.one_of(st.integers(low, high), st.sampled_from(keys or [low])), label="target")
            got = self.index.lookup(target)
            assert tuple(got) == tuple(self.model_lookup(target)), (target, self.entries)
            self._check_lookup_extra(target, got)

    def _lookup_floor(self) -> int:
        return self.base

    def _check_lookup_extra(self, target, got) -> None:
        pass

    @rule(data=st.data())
    def truncate_to(self, data):
        offsets = self.offsets()
        candidates = st.integers(self.base, (offsets[-1] if offsets else self.base) + 3)
        target = data.draw(st.one_of(candidates, st.sampled_from(offsets or [self.base])), label="offset")
        self.index.truncate_to(target)
        self.entries = [entry for entry, offset in zip(self.entries, offsets) if offset < target]
        # The removed slots are zeroed: a reopen of the untrimmed file must not see them.
        self._assert_tail_zero()

    @rule()
    def truncate(self):
        self.index.truncate()
        self.entries = []
        self._assert_tail_zero()

    @rule(slots=st.integers(0, 14), extra=st.integers(0, 11))
    def resize(self, slots, extra):
        requested = slots * self.E + extra % self.E
        new_length = max(slots * self.E, len(self.entries) * self.E)
        assert self.index.resize(requested) == (new_length != self.length)
        self.length = new_length

    @rule()
    def trim_to_valid_size(self):
        self.index.trim_to_valid_size()
        self.length = len(self.entries) * self.E

    @rule()
    def reset(self):
        self.index.reset()
        self.entries = []
        self.length = self.max_bytes // self.E * self.E

    @rule()
    def close_and_reopen(self):
        self.index.close()
        self.index.close()  # safe twice
        self.length = len(self.entries) * self.E
        assert file_size(self.path) == self.length, "close trims the file to its entries"
        maps = self.fs.maps
        self.index = self.CLS(self.fs, self.path, self.base, self.max_bytes)
        assert self.fs.maps == maps, "a reopened index is mapped only once written"
        assert not self.index.mapped, "a reopened index holds no mapping until written"

    @rule()
    def reopen_untrimmed(self):
        """A crash: nothing trimmed; the zero-filled tail of the preallocated file is ignored."""
        self.index.close_handlers()
        assert file_size(self.path) == self.length
        self.index = self.CLS(self.fs, self.path, self.base, self.max_bytes)

    @rule()
    def read_only_view(self):
        maps = self.fs.maps
        view = self.CLS(self.fs, self.path, self.base, self.max_bytes, writable=False)
        assert self.fs.maps == maps, "a read-only index is read with pread, never mapped"
        assert not view.mapped, "a read-only index keeps no mapping"
        assert view.entries == len(self.entries)
        assert [tuple(view.entry(slot)) for slot in range(view.entries)] == self.entries
        keys = self.keys()
        for target in {self.base - 1, *keys, *(key + 1 for key in keys), 2**62}:
            assert tuple(view.lookup(target)) == tuple(self.model_lookup(target))
        with pytest.raises(ValueError):
            view.truncate()
        view.close()

    # --- invariants ------------------------------------------------------------------------------

    @invariant()
    def matches_model(self):
        if self.index is None:
            return
        index = self.index
        assert index.entries == len(self.entries)
        assert index.size_bytes == len(self.entries) * self.E
        assert index.max_entries == self.slots
        assert file_size(self.path) == self.length
        assert index.is_full() == self.model_full()
        assert [tuple(index.entry(slot)) for slot in range(index.entries)] == self.entries
        with pytest.raises(IndexError):
            index.entry(index.entries)
        index.sanity_check(MAX_POSITION)

    def _assert_tail_zero(self) -> None:
        with open(self.path, "rb") as handle:
            data = handle.read()
        assert not any(data[len(self.entries) * self.E :]), "removed entries must be zeroed"


class OffsetIndexMachine(_IndexMachine):
    CLS = OffsetIndex
    E = 8

    def offsets(self):
        return self.keys()

    def default(self):
        return (self.base, 0)

    def _check_lookup_extra(self, target, got):
        assert isinstance(got, OffsetPosition)
        assert self.index.lookup_position(target) == got.position

    @rule(data=st.data())
    def append(self, data):
        last_offset = self.entries[-1][0] if self.entries else self.base
        last_position = self.entries[-1][1] if self.entries else 0
        valid = data.draw(st.booleans(), label="valid") if self.entries else True
        if valid:
            offset = last_offset + data.draw(st.integers(1, 50), label="delta")
        else:
            offset = max(self.base, last_offset - data.draw(st.integers(0, 3), label="back"))  # not larger
        position = last_position + data.draw(st.integers(1, 5000), label="position delta")
        if not valid or self.model_full():
            with pytest.raises(ValueError):
                self.index.append(offset, position)
        else:
            self.index.append(offset, position)
            self.entries.append((offset, position))
        assert self.index.last_offset == (self.entries[-1][0] if self.entries else self.base)


class TimeIndexMachine(_IndexMachine):
    CLS = TimeIndex
    E = 12

    def offsets(self):
        return [entry[1] for entry in self.entries]

    def default(self):
        return (-1, self.base)

    def _lookup_floor(self) -> int:
        return 0

    def model_full(self) -> bool:
        return len(self.entries) >= self.slots - 1  # the last slot is kept free

    def _check_lookup_extra(self, target, got):
        assert isinstance(got, TimestampOffset)

    @rule(data=st.data(), skip_full_check=st.booleans())
    def maybe_append(self, data, skip_full_check):
        last_ts, last_offset = self.entries[-1] if self.entries else (-1, self.base)
        backwards = last_offset > self.base and data.draw(st.integers(0, 5), label="kind") == 0
        offset = (max(self.base, last_offset - data.draw(st.integers(1, 3), label="back")) if backwards
                  else last_offset + data.draw(st.integers(0, 40), label="delta"))
        # Timestamps start at 1: an all-zero entry (timestamp 0 at the base offset) in slot 0 is
        # documented to read as an empty slot.
        timestamp = max(1, last_ts + data.draw(st.integers(-3, 100), label="ts delta"))
        grows = timestamp > last_ts
        slots_left = len(self.entries) < self.slots
        expect_error = ((not skip_full_check and self.model_full()) or backwards
                        or (grows and not slots_left))
        before = self.index.last_entry
        if expect_error:
            with pytest.raises(ValueError):
                self.index.maybe_append(timestamp, offset, skip_full_check=skip_full_check)
            assert self.index.last_entry == before
            return
        self.index.maybe_append(timestamp, offset, skip_full_check=skip_full_check)
        if grows:
            self.entries.append((timestamp, offset))
        assert tuple(self.index.last_entry) == (self.entries[-1] if self.entries else (-1, self.base))

    @invariant()
    def last_entry_matches(self):
        if self.index is not None:
            assert tuple(self.index.last_entry) == (self.entries[-1] if self.entries else (-1, self.base))


OffsetIndexMachine.TestCase.settings = settings(max_examples=120, stateful_step_count=40)
TimeIndexMachine.TestCase.settings = settings(max_examples=120, stateful_step_count=40)
TestOffsetIndexModel = OffsetIndexMachine.TestCase
TestTimeIndexModel = TimeIndexMachine.TestCase


# --- direct cases ----------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", [OffsetIndex, TimeIndex])
def test_empty_index_file_is_never_mapped(tmp_path, cls):
    path = str(tmp_path / "00000000000000000100.idx")
    open(path, "wb").close()
    fs = SpyFS()
    for writable in (True, False):
        index = cls(fs, path, 100, 1024, writable=writable)
        assert fs.maps == 0
        assert index.entries == 0 and index.max_entries == 0 and index.is_full()
        default = (100, 0) if cls is OffsetIndex else (-1, 100)
        assert tuple(index.lookup(5000)) == default
        if cls is OffsetIndex:
            assert index.lookup_position(5000) == 0
        index.close()
    assert file_size(path) == 0
    index = cls(fs, path, 100, 1024)
    with pytest.raises(ValueError):  # full: no capacity
        index.append(101, 10) if cls is OffsetIndex else index.maybe_append(5, 101)
    assert index.resize(1024)
    assert fs.maps == 1 and not index.is_full()
    index.append(101, 10) if cls is OffsetIndex else index.maybe_append(5, 101)
    index.close()
    assert file_size(path) == cls.ENTRY_BYTES
    assert cls(fs, path, 100, 1024, writable=False).entries == 1


def test_new_index_is_preallocated_and_rounded(tmp_path):
    index = TimeIndex(FileSystem(), str(tmp_path / "t"), 0, 100)
    assert file_size(index.path) == 96 and index.max_entries == 8 and index.entries == 0
    index.close()
    assert file_size(index.path) == 0
    with pytest.raises(ValueError):
        OffsetIndex(FileSystem(), str(tmp_path / "o"), 0, 7)


def test_offset_overflow_is_refused(tmp_path):
    from logstore import LogSegmentOffsetOverflowError

    index = OffsetIndex(FileSystem(), str(tmp_path / "o"), 10, 80)
    assert index.can_append_offset(10 + 2**31 - 1) and not index.can_append_offset(10 + 2**31)
    assert not index.can_append_offset(9)
    with pytest.raises(LogSegmentOffsetOverflowError):
        index.append(10 + 2**31, 5)
    index.append(10 + 2**31 - 1, 5)
    assert index.lookup(2**40) == (10 + 2**31 - 1, 5)
    index.close()


def test_sanity_check_rejects_broken_files(tmp_path):
    fs = FileSystem()
    path = str(tmp_path / "o")
    with open(path, "wb") as handle:
        handle.write(struct.pack("<iiii", 5, 100, 3, 200))  # offsets go backwards
    with pytest.raises(CorruptIndexError):
        OffsetIndex(fs, path, 0, 80).sanity_check(1000)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<ii", 5, 100) + b"\1\2\3")  # a partial entry
    index = OffsetIndex(fs, path, 0, 80)
    assert index.entries == 1
    with pytest.raises(CorruptIndexError):
        index.quick_check(1000)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<ii", 5, 5000))  # past the segment's data
    with pytest.raises(CorruptIndexError):
        OffsetIndex(fs, path, 0, 80).sanity_check(1000)
    tpath = str(tmp_path / "t")
    with open(tpath, "wb") as handle:
        handle.write(struct.pack("<qiqi", 50, 1, 40, 2))  # timestamps go backwards
    with pytest.raises(CorruptIndexError):
        TimeIndex(fs, tpath, 0, 120).sanity_check(1000)


# --- damaged index files under a real store ----------------------------------------------------

TOPIC = "t"
T0 = 1_700_000_000_000
STORE_CONFIG = {"segment.bytes": 4096, "index.interval.bytes": 200, "segment.index.bytes": 4096}

def _records(count: int) -> list[Record]:
    # Timestamps rise, with dips (so the time index is not simply the offset order).
    return [Record(b"k%d" % (i % 7), b"v%05d" % i + b"x" * (i % 90), (("h", b"%d" % i),),
                   T0 + 10 * i - (25 if i % 5 == 0 else 0)) for i in range(count)]


def _build(data_dir: str, records, config=STORE_CONFIG, per_append: int = 3) -> None:
    with LogManager([data_dir], clock=ManualClock(T0)) as store:
        store.create_topic(TOPIC, 1, config)
        log = store.get_log(TOPIC, 0)
        for start in range(0, len(records), per_append):
            log.append(records[start : start + per_append])


@pytest.fixture(scope="module")
def pristine_store(tmp_path_factory):
    """A cleanly closed store with several segments, each with several index entries."""
    data_dir = str(tmp_path_factory.mktemp("indexed-store") / "data")
    records = _records(400)
    _build(data_dir, records)
    with LogManager([data_dir], read_only=True) as view:
        segments = view.get_log(TOPIC, 0).segments
        assert len(segments) >= 4
        assert all(segment.offset_index.entries >= 2 and segment.time_index.entries >= 2
                   for segment in segments[:-1])
    return data_dir, records


def _expected_offset_for_timestamp(records, target):
    return next((offset for offset, record in enumerate(records) if record.timestamp_ms >= target), None)


def _check_store(data_dir, records, *, check_indexes: bool = True):
    """Reopen; every record, every ``read(o, 1)`` and every ``offset_for_timestamp`` must agree
    with a brute-force scan of ``records``; the indexes then pass ``sanity_check``."""
    with LogManager([data_dir], clock=ManualClock(T0)) as store:
        log = store.get_log(TOPIC, 0)
        assert log.log_end_offset == len(records)
        got = list(log.iter_records())
        assert [r.offset for r in got] == list(range(len(records)))
        assert [r._replace(offset=None) for r in got] == records
        for offset in range(len(records)):
            one = log.read(offset, 1)
            assert [r.offset for r in one] == [offset] and one[0].value == records[offset].value
        timestamps = sorted({r.timestamp_ms for r in records})
        for target in [T0 - 100, *timestamps, *(t + 1 for t in timestamps[::7]), timestamps[-1] + 1]:
            assert log.offset_for_timestamp(target) == _expected_offset_for_timestamp(records, target), target
        if check_indexes:
            for segment in log.segments:
                segment.offset_index.sanity_check(segment.size_bytes)
                segment.time_index.sanity_check(segment.size_bytes)
        return [segment.base_offset for segment in log.segments]


def _segment_files(data_dir: str, suffix: str) -> list[str]:
    part = os.path.join(data_dir, f"{TOPIC}-0")
    return sorted(os.path.join(part, name) for name in os.listdir(part) if name.endswith(suffix))


def _entry_bytes(path: str) -> int:
    return 8 if path.endswith(".index") else 12


def _delete(path):
    os.remove(path)


def _partial_entry(path):
    os.truncate(path, file_size(path) - 3)


def _empty(path):
    os.truncate(path, 0)


def _garbage_last(path):
    """The last entry: an offset far past the segment, at an impossible position (.index), or a
    timestamp below the first entry's (.timeindex)."""
    with open(path, "r+b") as handle:
        handle.seek(file_size(path) - _entry_bytes(path))
        if path.endswith(".index"):
            handle.write(struct.pack("<ii", 5_000_000, 0x7F13))
        else:
            handle.write(struct.pack("<qi", 0x1420000137F, 5))


def _garbage_middle(path):
    """The second entry: (.index) its position moved to the start of the batch after the one it
    names; (.timeindex) its offset moved to the segment's last entry's offset."""
    entry = _entry_bytes(path)
    with open(path, "r+b") as handle:
        data = handle.read()
        if entry == 8:
            (o1, _p1), (_o2, p2) = struct.unpack_from("<ii", data, 8), struct.unpack_from("<ii", data, 16)
            handle.seek(8)
            handle.write(struct.pack("<ii", o1, p2))
        else:
            last_offset = struct.unpack_from("<qi", data, len(data) - 12)[1]
            ts = struct.unpack_from("<qi", data, 12)[0]
            handle.seek(12)
            handle.write(struct.pack("<qi", ts, last_offset))


DAMAGES = {"deleted": _delete, "partial entry": _partial_entry, "emptied": _empty,
           "garbage last entry": _garbage_last, "garbage middle entry": _garbage_middle}
CASES = [pytest.param(damage, suffix, id=f"{damage}-{suffix}")
         for damage in DAMAGES for suffix in (".index", ".timeindex")]


def test_pristine_store_reads_back(pristine_store):
    source, records = pristine_store
    _check_store(source, records)


@pytest.mark.parametrize("damage, suffix", CASES)
def test_damaged_index_is_rebuilt(pristine_store, tmp_path, damage, suffix):
    """The damage is done to every sealed segment's file, after a clean shutdown (so only the
    loader's checks stand between the damage and the reads)."""
    source, records = pristine_store
    data_dir = str(tmp_path / "data")
    shutil.copytree(source, data_dir)
    files = _segment_files(data_dir, suffix)
    assert len(files) >= 4
    for path in files[:-1]:
        DAMAGES[damage](path)
    assert _check_store(data_dir, records) == _check_store(source, records), "same segment layout"
    _check_store(data_dir, records)  # a second open of the repaired store


def test_damaged_index_of_the_active_segment_after_a_crash(pristine_store, tmp_path):
    """Unclean shutdown: the active segment's indexes are rebuilt whatever their state."""
    source, records = pristine_store
    data_dir = str(tmp_path / "data")
    shutil.copytree(source, data_dir)
    os.remove(os.path.join(data_dir, ".kafka_cleanshutdown"))
    for suffix in (".index", ".timeindex"):
        with open(_segment_files(data_dir, suffix)[-1], "r+b") as handle:
            handle.write(os.urandom(24))  # whole entries of both kinds: garbage, not a partial entry
    _check_store(data_dir, records)


# --- the bugs above, reduced -----------------------------------------------------------------------

def _small_store(tmp_path, count=12):
    """Two sealed segments of 4 single-record batches, then the active one; index entries every
    batch after the first."""
    data_dir = str(tmp_path / "data")
    records = [Record(b"k", b"v%d" % i, (), T0 + i) for i in range(count)]
    with LogManager([data_dir], clock=ManualClock(T0)) as store:
        store.create_topic(TOPIC, 1, {"index.interval.bytes": 0})
        log = store.get_log(TOPIC, 0)
        for i, record in enumerate(records):
            log.append([record])
            if i % 4 == 3:
                log.roll()
    return data_dir, records


def test_missing_timeindex_is_rebuilt(tmp_path):
    data_dir, records = _small_store(tmp_path)
    os.remove(_segment_files(data_dir, ".timeindex")[0])
    with LogManager([data_dir]) as store:
        assert store.get_log(TOPIC, 0).offset_for_timestamp(T0) == 0  # returns 4


def test_garbage_last_time_entry_is_rebuilt(tmp_path):
    data_dir, records = _small_store(tmp_path)
    path = _segment_files(data_dir, ".timeindex")[0]
    with open(path, "r+b") as handle:
        handle.seek(file_size(path) - 12)
        handle.write(struct.pack("<qi", 7, 3))  # timestamp 7 ms, offset 3
    with LogManager([data_dir]) as store:
        assert store.get_log(TOPIC, 0).offset_for_timestamp(T0 + 1) == 1  # returns 4


def test_rebuilt_index_forgets_the_partial_entry(tmp_path):
    path = str(tmp_path / "00000000000000000000.index")
    with open(path, "wb") as handle:
        handle.write(struct.pack("<ii", 1, 50) + b"\1")
    index = OffsetIndex(FileSystem(), path, 0, 80)
    with pytest.raises(CorruptIndexError):
        index.quick_check(100)
    index.reset()  # what LogSegment.recover does before rebuilding
    index.append(1, 50)
    index.quick_check(100)  # raises the stale "ends with a partial entry"


def test_wrong_middle_index_entry_is_not_trusted(tmp_path):
    data_dir, records = _small_store(tmp_path)
    path = _segment_files(data_dir, ".index")[0]  # entries (1, p1) (2, p2) (3, p3)
    with open(path, "r+b") as handle:
        data = handle.read()
        handle.seek(0)
        handle.write(struct.pack("<ii", 1, struct.unpack_from("<ii", data, 8)[1]))  # (1, p2)
    with LogManager([data_dir]) as store:
        assert [r.offset for r in store.get_log(TOPIC, 0).read(1, 1)] == [1]  # returns [2]
