"""A hypothesis state machine: a log taking transactional and plain appends, commits, aborts
(markers for open transactions and resent ones), rolls and truncations, against a plain model (a
list of what each offset holds, replayed from the start for every question). After each step:
the last stable offset, read_uncommitted (all data, no marker), read_committed from every offset
(committed and plain data below the LSO), a consumer following ``next_offset``, ``iter_records``
and ``aborted_transactions`` over ranges."""

from __future__ import annotations

import shutil
import tempfile

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logstore import LogManager, ManualClock, Record
from logstore.log.txn_index import AbortedTxn
from logstore.records.batching import ProducerBatch

T0 = 1_700_000_000_000
PIDS = st.integers(1, 3)


class TxnLogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="logstore-txn-model-")
        self.store = LogManager([self.dir], clock=ManualClock(T0))
        self.store.create_topic("t", 1, {"segment.bytes": 4096})
        self.log = self.store.get_log("t", 0)
        # Per offset: ("data", pid or None, value) or ("marker", pid, commit).
        self.entries: list[tuple] = []
        self.counter = 0

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- the model ---------------------------------------------------------------------------------

    def replay(self):
        """(open: pid -> first offset, status per data offset, aborted: [(pid, first, marker, lso)])."""
        open_txns: dict[int, int] = {}
        members: dict[int, list[int]] = {}
        status: dict[int, str] = {}
        aborted = []
        for offset, entry in enumerate(self.entries):
            if entry[0] == "data":
                pid = entry[1]
                if pid is None:
                    status[offset] = "plain"
                    continue
                open_txns.setdefault(pid, offset)
                members.setdefault(pid, []).append(offset)
                status[offset] = "open"
            else:
                _, pid, commit = entry
                if pid not in open_txns:
                    continue
                first = open_txns.pop(pid)
                for member in members.pop(pid):
                    status[member] = "committed" if commit else "aborted"
                if not commit:
                    lso = min(open_txns.values(), default=offset + 1)
                    aborted.append((pid, first, offset, lso))
        return open_txns, status, aborted

    def model_lso(self, open_txns) -> int:
        return min(open_txns.values(), default=len(self.entries))

    def value(self) -> bytes:
        self.counter += 1
        return b"v%d" % self.counter

    # --- rules -----------------------------------------------------------------------------------

    @rule(pid=PIDS, count=st.integers(1, 3))
    def produce_transactional(self, pid, count):
        values = [self.value() for _ in range(count)]
        info = self.log.append([Record(None, value, (), T0) for value in values],
                               producer=ProducerBatch(pid, 0, 0, transactional=True))
        assert info.first_offset == len(self.entries)
        self.entries += [("data", pid, value) for value in values]

    @rule(count=st.integers(1, 3), one_by_one=st.booleans())
    def produce_plain(self, count, one_by_one):
        values = [self.value() for _ in range(count)]
        if one_by_one:  # the one-record fast path
            for value in values:
                self.log.append([Record(None, value, (), T0)])
        else:
            self.log.append([Record(None, value, (), T0) for value in values])
        self.entries += [("data", None, value) for value in values]

    @rule(pid=PIDS, commit=st.booleans())
    def end_transaction(self, pid, commit):
        """A marker, for an open transaction or not (a coordinator resending its markers)."""
        offset = self.log.append_marker(pid, 0, 0, commit=commit)
        assert offset == len(self.entries)
        self.entries.append(("marker", pid, commit))

    @rule()
    def roll(self):
        self.log.roll()

    @precondition(lambda self: self.entries)
    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(0, len(self.entries)))
        self.log.truncate_to(offset)
        del self.entries[offset:]

    # --- what a reader sees ------------------------------------------------------------------------

    @invariant()
    def offsets_and_lso(self):
        open_txns, _, _ = self.replay()
        assert self.log.log_end_offset == len(self.entries)
        assert self.log.last_stable_offset == self.model_lso(open_txns)
        assert self.log.producer_state.open_transactions() == open_txns

    @invariant()
    def reads_at_both_isolation_levels(self):
        open_txns, status, _ = self.replay()
        lso = self.model_lso(open_txns)
        data = [(offset, entry[2]) for offset, entry in enumerate(self.entries) if entry[0] == "data"]
        everything = [value for _, value in data]
        assert [record.value for record in self.log.read(0, max_bytes=1 << 30)] == everything
        assert [record.value for record in self.log.iter_records()] == everything
        for start in range(len(self.entries) + 1):
            committed = [value for offset, value in data
                         if start <= offset < lso and status[offset] in ("plain", "committed")]
            got = self.log.read(start, max_bytes=1 << 30, isolation="read_committed")
            assert [record.value for record in got] == committed, start
            assert [r.value for r in self.log.iter_records(start, isolation="read_committed")] == committed
        # A consumer taking two records at a time, following next_offset, from the start to the LSO.
        offset, seen = 0, []
        for _ in range(len(self.entries) + 1):
            if offset >= lso:
                break
            result = self.log.fetch(offset, max_records=2, isolation="read_committed")
            seen += [record.value for record in result.records]
            assert result.last_stable_offset == lso and result.next_offset > offset
            offset = result.next_offset
        assert offset == lso
        assert seen == [value for offset, value in data if offset < lso and status[offset] in ("plain", "committed")]

    @invariant()
    def aborted_transactions_per_range(self):
        _, _, aborted = self.replay()
        end = len(self.entries)
        for start in range(0, end + 1, 2):
            for upper in range(start, end + 1, 3):
                expected = [AbortedTxn(pid, first) for pid, first, marker, _ in aborted
                            if marker >= start and first < upper]
                assert self.log.aborted_transactions(start, upper) == expected, (start, upper)
        indexed = [(e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
                   for segment in self.log.segments for e in segment.txn_index.entries]
        assert indexed == aborted


TxnLogModel.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
test_txn_log_model = TxnLogModel.TestCase
