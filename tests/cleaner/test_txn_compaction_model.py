"""Model test of compaction with transactions: a hypothesis state machine appends plain and
transactional keyed records (three producers), commits and aborts (also markers of transactions
without data here), rolls segments, moves a manual clock past ``delete.retention.ms`` and compacts
(to completion, or one round when dirty enough; the dedupe buffer is tiny, so rounds are mapped in
passes), side by side with a model of what was appended and how each transaction ended.

After every step:

- read_committed of the compacted log gives, per key, the model's latest committed (or plain) value
  below the last stable offset (tombstones counting as absent), and the LSO is the model's;
- every record read (either isolation) is the one appended at its offset; read_committed never
  returns aborted data, and no aborted record is left below the end of any finished round;
- an open transaction's data, and every record after its first offset, is untouched;
- a marker is removed only once no data batch of its transaction is left, not while it is its
  producer's last batch, and only by a round at or after the delete horizon it was given (itself
  given, now + ``delete.retention.ms``, by the first round that found its data gone);
- a replay of the compacted log (``rebuild_producer_state``) finds the same producers, epochs and
  open transactions as the live table.
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logstore import LogManager, ManualClock, Record
from logstore.records.batching import ProducerBatch
from logstore.timer.scheduler import Scheduler

TOPIC = "c"
RETENTION_MS = 10_000
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 500, "index.interval.bytes": 100,
                "delete.retention.ms": RETENTION_MS, "file.delete.delay.ms": 0}
STORE_CONFIG = {"log.cleaner.threads": 0, "log.cleaner.dedupe.buffer.size": 4096}  # ~33 keys per pass
BASE_TS = 1_700_000_000_000
PIDS = (1, 2, 3)
RC = "read_committed"

keys = st.one_of(st.integers(0, 5), st.integers(0, 39)).map(lambda k: b"k%02d" % k)  # often shadowed, up to 40
records = st.lists(st.tuples(keys, st.binary(min_size=1, max_size=12)), min_size=1, max_size=5)
plain_records = st.lists(st.tuples(keys, st.one_of(st.binary(min_size=1, max_size=12), st.just(None))),
                         min_size=1, max_size=5)


class TxnCompactionModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="logstore-txn-compaction-")
        self.clock = ManualClock(BASE_TS)
        self.store = LogManager([self.dir], clock=self.clock, config=STORE_CONFIG,
                                scheduler=Scheduler(self.clock, threaded=False))
        self.store.create_topic(TOPIC, 1, TOPIC_CONFIG)
        self.log = self.store.get_log(TOPIC, 0)
        self.appended: dict[int, tuple[bytes, bytes | None, int | None]] = {}  # offset -> key, value, txn
        self.batch_txn: dict[int, int | None] = {}  # data batch base offset -> its txn (None: plain)
        self.txn_state: dict[int, str] = {}  # txn -> "open" / "commit" / "abort"
        self.open: dict[int, tuple[int, int]] = {}  # pid -> (txn, first offset)
        self.markers: dict[int, tuple[int, int | None]] = {}  # marker offset -> (pid, txn or None)
        self.horizons: dict[int, int] = {}  # marker offset -> the horizon a round gave it
        self.removed_markers: set[int] = set()
        self.sequences = {pid: 0 for pid in PIDS}
        self.cleaned_below = 0  # every finished round ended at or above this
        self.next_txn = 0

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- writes ----------------------------------------------------------------------------------

    def _append(self, batch, producer, txn_id):
        info = self.log.append([Record(key, value, (), self.clock.time_ms()) for key, value in batch],
                               producer=producer)
        for slot, (key, value) in enumerate(batch):
            self.appended[info.first_offset + slot] = (key, value, txn_id)
        self.batch_txn[info.first_offset] = txn_id
        return info

    @rule(batch=plain_records)
    def plain_append(self, batch):
        self._append(batch, None, None)

    @rule(pid=st.sampled_from(PIDS), batch=records)
    def txn_append(self, pid, batch):
        if pid not in self.open:
            self.open[pid] = (self.next_txn, self.log.log_end_offset)
            self.txn_state[self.next_txn] = "open"
            self.next_txn += 1
        txn_id = self.open[pid][0]
        self._append(batch, ProducerBatch(pid, 0, self.sequences[pid], transactional=True), txn_id)
        self.sequences[pid] += len(batch)

    @rule(pid=st.sampled_from(PIDS), commit=st.booleans())
    def end_transaction(self, pid, commit):
        txn_id = self.open.pop(pid, (None, None))[0]
        offset = self.log.append_marker(pid, 0, 0, commit=commit, timestamp_ms=self.clock.time_ms())
        self.markers[offset] = (pid, txn_id)
        if txn_id is not None:
            self.txn_state[txn_id] = "commit" if commit else "abort"

    @rule()
    def roll(self):
        self.log.roll()

    @rule(delta_ms=st.sampled_from([0, 1, 4_000, 9_999, 10_000, 30_000]))
    def tick(self, delta_ms):
        self.clock.advance(delta_ms)

    # --- compaction ------------------------------------------------------------------------------

    def _compacted(self, stats) -> None:
        if stats is None:
            return
        now = self.clock.time_ms()
        self.cleaned_below = max(self.cleaned_below, stats.end_offset)
        present = {}
        data_txns = set()
        for batch, producer, marker in self.log.iter_batches_with_control():
            base = batch.header.base_offset
            if marker is not None:
                present[base] = batch.header.delete_horizon_ms
            elif base in self.batch_txn and self.batch_txn[base] is not None:
                data_txns.add(self.batch_txn[base])
        last_batches = {entry.last_offset for entry in self.log.producer_state.entries()}
        for offset, (pid, txn_id) in self.markers.items():
            if offset in self.removed_markers:
                assert offset not in present
                continue
            if offset not in present:  # removed by this round
                assert offset in self.horizons, f"marker {offset} removed without a delete horizon"
                assert self.horizons[offset] <= now, f"marker {offset} removed before its horizon"
                assert txn_id not in data_txns, f"marker {offset} removed while its data is left"
                assert offset not in last_batches, f"marker {offset} removed while its producer's last batch"
                self.removed_markers.add(offset)
                continue
            horizon = present[offset]
            if horizon >= 0 and offset not in self.horizons:  # given by this round
                assert horizon == now + RETENTION_MS
                assert txn_id is None or txn_id not in data_txns, f"marker {offset} given a horizon with data left"
                self.horizons[offset] = horizon
            elif offset in self.horizons:
                assert horizon == self.horizons[offset]

    @rule()
    def compact_to_completion(self):
        self._compacted(self.store.compact(TOPIC)[(TOPIC, 0)])

    @rule(key=keys)
    def after_the_horizon(self, key):
        """Past any horizon given so far, with something dirty, and compacted: markers can go."""
        self.clock.advance(RETENTION_MS)
        self._append([(key, b"later")], None, None)
        self.log.roll()
        self.compact_to_completion()

    @rule()
    def one_round_if_dirty_enough(self):
        self._compacted(self.store.cleaner.clean_filthiest_log())

    @rule()
    def replay(self):
        live = sorted((e.producer_id, e.epoch, e.coordinator_epoch, e.last_offset, e.txn_first_offset)
                      for e in self.log.producer_state.entries())
        lso = self.log.last_stable_offset
        self.log.rebuild_producer_state()
        replayed = sorted((e.producer_id, e.epoch, e.coordinator_epoch, e.last_offset, e.txn_first_offset)
                          for e in self.log.producer_state.entries())
        assert replayed == live
        assert self.log.last_stable_offset == lso

    # --- invariants ------------------------------------------------------------------------------

    def _lso(self) -> int:
        firsts = [first for _txn, first in self.open.values()]
        return min(firsts) if firsts else self.log.log_end_offset

    def _decided_visible(self, txn_id) -> bool:
        return txn_id is None or self.txn_state[txn_id] == "commit"

    @invariant()
    def read_committed_gives_the_latest_committed_values(self):
        lso = self._lso()
        assert self.log.last_stable_offset == lso
        expected = {}
        for offset in sorted(self.appended):
            key, value, txn_id = self.appended[offset]
            if offset < lso and self._decided_visible(txn_id):
                expected[key] = value
        got_records = list(self.log.iter_records(isolation=RC))
        got = {}
        for record in got_records:
            key, value, txn_id = self.appended[record.offset]
            assert (record.key, record.value) == (key, value)
            assert self._decided_visible(txn_id), f"aborted record at {record.offset} read committed"
            got[record.key] = record.value
        assert {k: v for k, v in got.items() if v is not None} == {k: v for k, v in expected.items() if v is not None}

    @invariant()
    def no_aborted_data_below_a_finished_round_and_open_transactions_untouched(self):
        lso = self._lso()
        read = {}
        for record in self.log.iter_records():
            key, value, txn_id = self.appended[record.offset]
            assert (record.key, record.value) == (key, value)
            if txn_id is not None and self.txn_state[txn_id] == "abort":
                assert record.offset >= self.cleaned_below, f"aborted record {record.offset} left by a round"
            read[record.offset] = (key, value)
        from_lso = {offset: entry[:2] for offset, entry in self.appended.items() if offset >= lso}
        assert {offset: entry for offset, entry in read.items() if offset >= lso} == from_lso


TxnCompactionModel.TestCase.settings = settings(max_examples=40, stateful_step_count=50, deadline=None)
test_txn_compaction_model = TxnCompactionModel.TestCase
