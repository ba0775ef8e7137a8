"""Model test of a transactional partition through reopens: a hypothesis state machine drives a real
store (on a file system that can simulate power loss) side by side with a list of batches.

Steps: transactional data of a few producers, COMMIT and ABORT markers (also for a producer with no
open transaction: a coordinator's resend), plain appends, rolls, truncations (inside batches too),
``delete_records``, flushes, a clean close and reopen, a power loss and reopen (unsynced writes and
directory changes dropped or torn). After every step: the last stable offset, the producers' open
transactions, the aborted transactions of the log (``aborted_transactions``), read_committed (the
committed and plain records below the LSO, aborted data left out) and read_uncommitted (every data
record, never a marker) equal what the model says; after a power loss the log is a prefix of the
model that keeps everything flushed.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logstore import LogManager, ManualClock, Record
from logstore.log.txn_index import AbortedTxn
from logstore.records.batching import ProducerBatch
from logstore.testing import SimulatedCrashFileSystem

TOPIC = "t"
CONFIG = {"segment.bytes": 500, "segment.index.bytes": 120, "index.interval.bytes": 64}
T0 = 1_700_000_000_000
PIDS = st.integers(1, 3)


class TxnRecoveryModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="logstore-txn-model-")
        self.fs = SimulatedCrashFileSystem()
        self.clock = ManualClock(T0)
        self.store = self._open()
        self.store.create_topic(TOPIC, 1, CONFIG)
        # One entry per offset: ("data", pid or None, transactional, value) or ("marker", pid, commit).
        self.model: list[tuple] = []
        self.batch_starts: list[int] = []  # base offsets of the batches (a crash cuts between batches)
        self.flushed = 0
        self.log_start_offset = 0
        # Transactions open below the log start that a crash made unknowable (see crash_reopen).
        self.carried: dict[int, int] = {}

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

    # --- the model's view ------------------------------------------------------------------------

    def expected(self) -> tuple[int, dict[int, int], list[AbortedTxn], list[bytes], list[bytes]]:
        """LSO, open transactions, aborted transactions (marker at or after the log start), the
        read_committed and read_uncommitted values from the log start."""
        open_txns: dict[int, int] = dict(self.carried)
        aborted_ranges: list[tuple[int, int, int]] = []  # (pid, first, marker)
        for offset, entry in enumerate(self.model):
            if entry[0] == "data" and entry[2]:
                open_txns.setdefault(entry[1], offset)
            elif entry[0] == "marker":
                first = open_txns.pop(entry[1], None)
                if first is not None and not entry[2]:
                    aborted_ranges.append((entry[1], first, offset))
        end = len(self.model)
        lso = max(min(open_txns.values()), self.log_start_offset) if open_txns else end
        aborted = [AbortedTxn(pid, first) for pid, first, marker in aborted_ranges if marker >= self.log_start_offset]
        committed, uncommitted = [], []
        for offset in range(self.log_start_offset, end):
            entry = self.model[offset]
            if entry[0] != "data":
                continue
            uncommitted.append(entry[3])
            dropped = entry[2] and any(pid == entry[1] and first <= offset < marker
                                       for pid, first, marker in aborted_ranges)
            if offset < lso and not dropped:
                committed.append(entry[3])
        return lso, open_txns, aborted, committed, uncommitted

    def _add(self, entries: list[tuple]) -> None:
        self.batch_starts.append(len(self.model))
        self.model.extend(entries)

    # --- writes ----------------------------------------------------------------------------------

    @rule(pid=PIDS, count=st.integers(1, 4))
    def produce_txn(self, pid, count):
        first = len(self.model)
        records = [Record(b"k", b"v%d" % (first + i), (), T0 + first + i) for i in range(count)]
        info = self.log.append(records, producer=ProducerBatch(pid, 0, 0, transactional=True))
        assert info.first_offset == first
        for i in range(count):
            entry = ("data", pid, True, b"v%d" % (first + i))
            if i == 0:
                self._add([entry])
            else:
                self.model.append(entry)

    @rule(count=st.integers(1, 4))
    def non_txn_append(self, count):
        first = len(self.model)
        self.log.append([Record(b"k", b"v%d" % (first + i), (), T0 + first + i) for i in range(count)])
        self._add([("data", None, False, b"v%d" % (first + i)) for i in range(count)])

    @rule(pid=PIDS)
    def commit(self, pid):
        assert self.log.append_marker(pid, 0, 0, commit=True) == len(self.model)
        self._add([("marker", pid, True)])

    @rule(pid=PIDS)
    def abort(self, pid):
        assert self.log.append_marker(pid, 0, 0, commit=False) == len(self.model)
        self._add([("marker", pid, False)])

    @rule()
    def roll(self):
        self.log.roll()

    @rule()
    def flush(self):
        self.flushed = self.log.flush()

    @precondition(lambda self: len(self.model) > self.log_start_offset)
    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(self.log_start_offset, len(self.model) - 1), label="offset")
        assert self.log.truncate_to(offset)
        del self.model[offset:]
        self.batch_starts = [start for start in self.batch_starts if start < offset]
        self.flushed = min(self.flushed, offset)

    @rule(data=st.data())
    def retention(self, data):
        # Up to what is flushed: delete_records moves the recovery point up to its offset without an
        # fsync, so a power loss could tear records below the recovery point (damage). That is the
        # engine's, with or without transactions, and not what this model is about.
        offset = data.draw(st.integers(self.log_start_offset, max(self.flushed, self.log_start_offset)),
                           label="offset")
        assert self.log.delete_records(offset) == offset
        self.log_start_offset = offset

    @rule()
    def close_reopen(self):
        self.store.close()
        self.store = self._open()

    @rule(seed=st.integers(0, 2**32 - 1))
    def crash_reopen(self, seed):
        self.store = None
        self.fs.crash(random.Random(seed))
        self.store = self._open()
        survived = self.log.log_end_offset
        if any("restarting empty" in problem for problem in self.log.load_problems):
            # The crash lost unflushed records up to a delete_records: the log restarts empty at its
            # start, and what lay below it (an open transaction's data among it) is gone.
            # A transaction whose ABORT marker was lost with them may stay open there, as the
            # producer snapshots say (its marker will come again): the model takes those.
            assert survived == self.log_start_offset <= len(self.model)
            self.model = [("gone",)] * survived
            self.batch_starts = []
            self.carried = self.log.producer_state.open_transactions()
            assert all(first < survived for first in self.carried.values())
            return
        assert self.flushed <= survived <= len(self.model)
        assert survived == len(self.model) or survived in self.batch_starts, "a crash cuts between batches"
        del self.model[survived:]
        self.batch_starts = [start for start in self.batch_starts if start < survived]

    # --- invariants ------------------------------------------------------------------------------

    @invariant()
    def transactions_match(self):
        log = self.log
        lso, open_txns, aborted, committed, uncommitted = self.expected()
        assert log.log_end_offset == len(self.model)
        assert log.last_stable_offset == lso
        assert {pid: first for pid, first in log.producer_state.open_transactions().items()} == open_txns
        assert log.aborted_transactions(self.log_start_offset, log.log_end_offset) == aborted
        assert [r.value for r in log.iter_records(isolation="read_committed")] == committed
        assert [r.value for r in log.iter_records()] == uncommitted
        # A fetch never stops at a marker: read_committed from the log start reaches the LSO.
        offset, seen = self.log_start_offset, []
        while offset < lso:
            result = log.fetch(offset, max_bytes=200, isolation="read_committed")
            assert result.next_offset > offset
            seen.extend(record.value for record in result.records)
            offset = result.next_offset
        assert seen == committed


TxnRecoveryModel.TestCase.settings = settings(
    max_examples=int(os.environ.get("LOGSTORE_TXN_MODEL_EXAMPLES", "40")), stateful_step_count=30, deadline=None)
TestTxnRecoveryModel = TxnRecoveryModel.TestCase
