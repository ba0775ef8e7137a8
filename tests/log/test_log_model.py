"""Model test of a partition: a hypothesis state machine drives a real store (on a file system that
can simulate power loss) side by side with a plain list.

Invariants checked: offsets are contiguous and monotonic; every record below the last flush survives
any crash intact; after a crash the log is a prefix of what was appended (no phantoms, no damage);
reads return exactly the model's records (at least one when any exists, then as many as fit
``max_bytes`` and ``max_records``); out-of-range reads raise; offset-for-timestamp lookups agree with
a scan; log start offset, recovery point and segment layout stay consistent; a read-only view sees
the same records; recovery is idempotent.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logstore import LogManager, ManualClock, OffsetOutOfRangeError, Record
from logstore.records.decoder import RECORD_OVERHEAD_BYTES
from logstore.testing import SimulatedCrashFileSystem

TOPIC = "t"
TOPIC_CONFIG = {
    "segment.bytes": 2048,  # frequent rolls on size
    "segment.index.bytes": 120,  # 15 offset / 10 time index entries: rolls on full indexes
    "index.interval.bytes": 64,
    "segment.ms": 50_000,  # rolls on record time
    "max.message.bytes": 900,  # appends split into several batches
}
BASE_TS = 1_700_000_000_000

keys = st.one_of(st.none(), st.binary(max_size=8))
values = st.one_of(st.none(), st.binary(max_size=60))
headers = st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=4))), max_size=2)
timestamps = st.one_of(st.none(), st.integers(BASE_TS - 10_000, BASE_TS + 200_000))
records = st.builds(Record, key=keys, value=values, headers=headers, timestamp_ms=timestamps)


def charge(entry) -> int:
    key, value, record_headers, _ts = entry
    header_bytes = sum(8 + len(name.encode()) + len(data or b"") for name, data in record_headers)
    return len(key or b"") + len(value or b"") + header_bytes + RECORD_OVERHEAD_BYTES


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="logstore-model-")
        self.fs = SimulatedCrashFileSystem()
        self.clock = ManualClock(BASE_TS)
        self.store = self._open()
        self.store.create_topic(TOPIC, partitions=1, config=TOPIC_CONFIG)
        self.model: list[tuple] = []  # (key, value, headers, timestamp) per offset
        self.flushed = 0  # offsets below this are durable
        self.log_start_offset = 0

    def _open(self) -> LogManager:
        return LogManager([self.dir], fs=self.fs, clock=self.clock)

    @property
    def log(self):
        return self.store.get_log(TOPIC, 0)

    def teardown(self) -> None:
        try:
            if self.store is not None:
                self.store.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- writes ----------------------------------------------------------------------------------

    @rule(batch=st.lists(records, min_size=1, max_size=25))
    def append(self, batch):
        info = self.log.append(batch)
        assert info.first_offset == len(self.model)
        assert info.last_offset == len(self.model) + len(batch) - 1
        now = self.clock.time_ms()
        for record in batch:
            stamp = now if record.timestamp_ms is None else record.timestamp_ms
            self.model.append((record.key, record.value, tuple(map(tuple, record.headers)), stamp))

    @rule()
    def roll(self):
        before = len(self.log.segments)
        self.log.roll()
        assert len(self.log.segments) in (before, before + 1)
        assert self.log.active_segment.base_offset == len(self.model)

    @rule()
    def flush(self):
        assert self.log.flush() == len(self.model)
        self.flushed = len(self.model)

    @rule(data=st.data())
    def truncate_to(self, data):
        offset = data.draw(st.integers(0, len(self.model) + 2), label="offset")
        changed = self.log.truncate_to(offset)
        assert changed == (offset < len(self.model))
        if changed:
            del self.model[offset:]
            self.flushed = min(self.flushed, offset)
            self.log_start_offset = min(self.log_start_offset, offset)

    @rule(data=st.data())
    def delete_records(self, data):
        offset = data.draw(st.integers(self.log_start_offset, len(self.model)), label="offset")
        assert self.log.delete_records(offset) == offset
        self.log_start_offset = offset

    @rule(delta_ms=st.integers(0, 30_000))
    def tick(self, delta_ms):
        self.clock.advance(delta_ms)

    # --- reads -----------------------------------------------------------------------------------

    @rule(data=st.data(), max_bytes=st.integers(0, 2500), max_records=st.one_of(st.none(), st.integers(1, 40)))
    def read(self, data, max_bytes, max_records):
        offset = data.draw(st.integers(self.log_start_offset, len(self.model)), label="offset")
        got = self.log.read(offset, max_bytes=max_bytes, max_records=max_records)
        expected = self.model[offset : offset + len(got)]
        assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in got] == expected
        assert [r.offset for r in got] == list(range(offset, offset + len(got)))
        if offset < len(self.model):
            assert got, "a read below the log end offset returns at least one record"
        limit = max_records if max_records is not None else len(self.model)
        charged = sum(charge(entry) for entry in expected)
        assert len(got) <= limit
        assert len(got) == 1 or charged <= max_bytes
        following = offset + len(got)
        if got and following < len(self.model) and len(got) < limit:
            assert charged + charge(self.model[following]) > max_bytes, "a read stops only when full"

    @rule(data=st.data())
    def read_out_of_range(self, data):
        below = list(range(max(0, self.log_start_offset - 3), self.log_start_offset))
        offset = data.draw(st.sampled_from(below + [len(self.model) + 1, len(self.model) + 50]), label="offset")
        with pytest.raises(OffsetOutOfRangeError):
            self.log.read(offset)

    @rule(target_ms=st.integers(BASE_TS - 20_000, BASE_TS + 400_000))
    def offset_for_timestamp(self, target_ms):
        expected = next((offset for offset in range(self.log_start_offset, len(self.model))
                         if self.model[offset][3] >= target_ms), None)
        assert self.log.offset_for_timestamp(target_ms) == expected

    @rule()
    def read_only_view(self):
        with LogManager([self.dir], read_only=True, clock=self.clock) as view:
            log = view.get_log(TOPIC, 0)
            assert log.log_end_offset == len(self.model), (log, [s.base_offset for s in log.segments])
            assert log.log_start_offset == self.log_start_offset, (log, self.log_start_offset, self.log)
            self._assert_contents(log, len(self.model))

    # --- crashes ---------------------------------------------------------------------------------

    @rule()
    def clean_reopen(self):
        self.store.close()
        self.store = self._open()
        assert self.log.recovery_point == len(self.model)
        self.flushed = len(self.model)

    @rule()
    def process_crash(self):
        """kill -9: nothing the OS accepted is lost."""
        self.store = None
        self.fs.crash(random.Random(0), lose_unsynced=False)
        self.store = self._open()
        assert self.log.log_end_offset == len(self.model)

    @rule(seed=st.integers(0, 2**32 - 1))
    def power_loss(self, seed):
        """Unsynced writes and directory changes are dropped or torn."""
        self.store = None
        report = self.fs.crash(random.Random(seed))
        self.store = self._open()
        survived = self.log.log_end_offset
        assert survived >= self.flushed, f"flushed records lost: {survived} < {self.flushed} ({report})"
        assert survived <= len(self.model), "phantom records after a crash"
        del self.model[survived:]
        assert self.log.log_start_offset == self.log_start_offset

    @precondition(lambda self: len(self.model) > 0)
    @rule()
    def reopen_is_idempotent(self):
        self.store = None
        self.fs.crash(random.Random(1), lose_unsynced=False)
        first = self._open()
        state = (first.get_log(TOPIC, 0).log_end_offset, [s.base_offset for s in first.get_log(TOPIC, 0).segments])
        self.fs.crash(random.Random(2), lose_unsynced=False)
        self.store = self._open()
        assert (self.log.log_end_offset, [s.base_offset for s in self.log.segments]) == state

    # --- invariants ------------------------------------------------------------------------------

    @invariant()
    def offsets_are_consistent(self):
        log = self.log
        assert log.log_end_offset == len(self.model)
        assert log.log_start_offset == self.log_start_offset
        assert log.log_start_offset <= log.recovery_point <= log.log_end_offset or (
            log.recovery_point <= log.log_end_offset)
        bases = [segment.base_offset for segment in log.segments]
        assert bases == sorted(set(bases))
        assert bases[-1] <= log.log_end_offset

    @invariant()
    def contents_match(self):
        self._assert_contents(self.log, len(self.model))

    def _assert_contents(self, log, end):
        offset = self.log_start_offset
        while offset < end:
            got = log.read(offset, max_bytes=4096)
            assert got
            for record in got:
                assert record.offset == offset
                assert (record.key, record.value, record.headers, record.timestamp_ms) == self.model[offset]
                offset += 1
        assert log.read(end) == []


LogModel.TestCase.settings = settings(max_examples=int(os.environ.get("LOGSTORE_MODEL_EXAMPLES", "60")),
                                      stateful_step_count=40)
TestLogModel = LogModel.TestCase
