"""Model test of compaction: a hypothesis state machine drives a real compacted partition (on a file
system that can simulate power loss, with a manual clock) side by side with a plain model, "the
records that must be there", kept by the rule that defines compaction:

- a round that ends at ``end`` (``CleanerStats.end_offset``) keeps, below ``end``, only the last
  record of each key among the records there, and everything at or above ``end`` as it was;
- a tombstone whose batch was first recopied at time T carries the delete horizon T +
  ``delete.retention.ms``; a later round at or after the horizon drops it (when it is below ``end``);
- offsets never change, a truncation removes a suffix, crashes lose nothing that was flushed
  (every compaction is durable when it returns).

After every step the whole log is read and must equal the model exactly: so for every key its
latest value (or nothing once its tombstone's horizon has passed), offsets unchanged and increasing,
and every record of the dirty head still there, in order. The dedupe buffer is tiny (about 30 keys
for up to 40 distinct keys), so rounds end early and cleaning to completion takes several passes.
"""

from __future__ import annotations

import random
import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logstore import LogManager, ManualClock, Record
from logstore.testing import SimulatedCrashFileSystem
from logstore.timer.scheduler import Scheduler

TOPIC = "c"
DELETE_RETENTION_MS = 10_000
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": 700,  # a few batches per segment: many segments, several groups per round
    "index.interval.bytes": 100,
    "delete.retention.ms": DELETE_RETENTION_MS,
    "file.delete.delay.ms": 0,
}
STORE_CONFIG = {"log.cleaner.threads": 0, "log.cleaner.dedupe.buffer.size": 4096}  # ~33 keys per pass
BASE_TS = 1_700_000_000_000

keys = st.integers(0, 39).map(lambda k: b"key-%02d" % k)
values = st.one_of(st.none(), st.binary(min_size=1, max_size=30))  # None: a tombstone
batches = st.lists(st.tuples(keys, values), min_size=1, max_size=8)


class CompactionModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="logstore-cleaner-model-")
        self.fs = SimulatedCrashFileSystem()
        self.clock = ManualClock(BASE_TS)
        self.store = self._open()
        self.store.create_topic(TOPIC, 1, TOPIC_CONFIG)
        self.visible: dict[int, tuple[bytes, bytes | None, int]] = {}  # offset -> (key, value, batch base)
        self.horizon: dict[int, int] = {}  # batch base -> delete horizon (ms) set by a round
        self.end_offset = 0
        self.rounds = 0

    def _open(self) -> LogManager:
        return LogManager([self.dir], fs=self.fs, clock=self.clock, config=STORE_CONFIG,
                          scheduler=Scheduler(self.clock, threaded=False))

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

    @rule(batch=batches)
    def append(self, batch):
        info = self.log.append([Record(key, value, (), self.clock.time_ms()) for key, value in batch])
        assert info.first_offset == self.end_offset
        for slot, (key, value) in enumerate(batch):
            self.visible[self.end_offset + slot] = (key, value, info.first_offset)
        self.end_offset += len(batch)

    @rule()
    def roll(self):
        self.log.roll()

    @rule(delta_ms=st.sampled_from([0, 1, 3_000, 9_999, 10_000, 25_000]))
    def tick(self, delta_ms):
        self.clock.advance(delta_ms)

    @precondition(lambda self: self.end_offset > 0)
    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(0, self.end_offset - 1))
        self.log.truncate_to(offset)
        self.visible = {o: entry for o, entry in self.visible.items() if o < offset}
        # Batches wholly removed take their horizons with them (their base offsets will be reused);
        # a batch cut inside keeps its horizon.
        self.horizon = {base: horizon for base, horizon in self.horizon.items() if base < offset}
        self.end_offset = offset

    # --- cleaning --------------------------------------------------------------------------------

    @rule()
    def compact_to_completion(self):
        stats = self.store.compact(TOPIC)[(TOPIC, 0)]
        if stats is not None:
            self._apply_rounds(stats.passes, stats.end_offset)
            assert stats.end_offset == self.log.active_segment.base_offset, "not cleaned to completion"

    @rule()
    def one_round_if_dirty_enough(self):
        """What a cleaner thread does: one round, only when the dirty ratio is above 0.5."""
        stats = self.store.cleaner.clean_filthiest_log()
        if stats is not None:
            self._apply_rounds(1, stats.end_offset)

    def _apply_rounds(self, passes: int, final_end: int) -> None:
        # The intermediate ends of a multi-pass clean are not reported; rounds at one instant
        # compose: deduplicating below e1 then below e2 >= e1 equals deduplicating below e2, and
        # horizons set by the first pass cannot pass before the second (same clock reading).
        self.rounds += passes
        self._round(final_end)

    def _round(self, end: int) -> None:
        now = self.clock.time_ms()
        last_of_key = {}
        for offset in sorted(self.visible):
            if offset < end:
                last_of_key[self.visible[offset][0]] = offset
        for offset in [o for o in self.visible if o < end]:
            key, value, base = self.visible[offset]
            if last_of_key[key] != offset:
                del self.visible[offset]  # superseded
            elif value is None and base in self.horizon and self.horizon[base] <= now:
                del self.visible[offset]  # a tombstone past its delete horizon
        bases_with_tombstones = {base for key, value, base in self.visible.values() if value is None}
        for base in list(self.horizon):
            if base < end and base not in bases_with_tombstones:
                del self.horizon[base]  # rebuilt without tombstones: no horizon any more
        for base in bases_with_tombstones:
            if base < end and base not in self.horizon:
                self.horizon[base] = now + DELETE_RETENTION_MS

    # --- crashes ---------------------------------------------------------------------------------

    @rule()
    def clean_reopen(self):
        self.store.close()
        self.store = self._open()

    @rule()
    def process_crash(self):
        """kill -9: everything the OS accepted survives, and the store recovers."""
        self.store = None
        self.fs.crash(random.Random(0), lose_unsynced=False)
        self.store = self._open()

    @rule(seed=st.integers(0, 2**32 - 1))
    def power_loss_after_flush(self, seed):
        """A power loss after a flush: every record and every finished compaction survives."""
        self.log.flush()
        self.store = None
        self.fs.crash(random.Random(seed))
        self.store = self._open()

    # --- invariants ------------------------------------------------------------------------------

    @invariant()
    def log_equals_model(self):
        got = [(record.offset, record.key, record.value) for record in self.log.iter_records()]
        expected = [(offset, key, value) for offset, (key, value, _base) in sorted(self.visible.items())]
        assert got == expected
        assert self.log.log_end_offset == self.end_offset

    @invariant()
    def clean_section_has_one_record_per_key(self):
        checkpoint = self.store.cleaner.cleaner_manager.read_checkpoints().get((TOPIC, 0), 0)
        checkpoint = min(checkpoint, self.end_offset)
        below = [key for offset, (key, _value, _base) in self.visible.items() if offset < checkpoint]
        assert len(below) == len(set(below)), "a key twice below the cleaner checkpoint"


CompactionModel.TestCase.settings = settings(max_examples=50, stateful_step_count=35, deadline=None)
test_compaction_model = CompactionModel.TestCase
