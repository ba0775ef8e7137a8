"""Model test of the transaction coordinator: a hypothesis state machine of producers (epochs,
begin/add/commit/abort), time passing (timeout aborts), coordinator restarts (a new coordinator
loading the same state log) and crashes between the prepare record and the markers, checking Kafka's
invariants: a producer's epoch never goes back, a fenced producer gets PRODUCER_FENCED, markers carry
the prepared outcome, a transaction past its timeout is aborted, after a restart nothing stays half
done, the coordinator's state is the state log's."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from logstore.clock import ManualClock
from logstore.errors import StorageError
from logstore.txn import errors as E
from logstore.txn.formats import TransactionState as S
from txn_coordinator_fakes import FakeMarkers, FakeStateLog, ProducerIds, make_coordinator

IDS = ["a", "b"]
PARTITIONS = [("t", 0), ("t", 1), ("u", 0)]
TIMEOUT_MS = 20000
INTERVAL_MS = 10000  # the default scanner period
PREPARED = (S.PREPARE_COMMIT, S.PREPARE_ABORT)


class CheckingMarkers(FakeMarkers):
    """Every marker request must carry the outcome, producer and partitions of the transaction's
    durable Prepare* record."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def __call__(self, request, done):
        value = self.log.last(request.transactional_id)
        assert value.state in PREPARED, value
        assert request.commit == (value.state == S.PREPARE_COMMIT)
        assert (request.producer_id, request.producer_epoch) == (value.producer_id, value.producer_epoch)
        assert request.partitions <= set(value.partitions)
        super().__call__(request, done)


class CoordinatorModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.clock = ManualClock()
        self.log = FakeStateLog()
        self.markers = CheckingMarkers(self.log)
        self.pids = ProducerIds()
        self.c = make_coordinator(self.log, self.markers, clock=self.clock, pids=self.pids)
        self.producers = []  # [tid, pid, epoch]; the newest per id is its live instance
        self.live = {}  # tid -> index of the live producer
        self.open = {}  # tid -> (start_ms, set of partitions) of the live producer's open transaction
        self.issued = {}  # tid -> (pid, epoch) last answered
        self.started_at = self.clock.time_ms()

    # --- producers ------------------------------------------------------------------------------

    @rule(tid=st.sampled_from(IDS))
    def init(self, tid):
        count = len(self.log.records)
        result = self.c.init_producer_id(tid, TIMEOUT_MS)
        if result.error_code == E.CONCURRENT_TRANSACTIONS:
            if len(self.log.records) > count:  # the open transaction is being aborted, its producer fenced
                assert self.log.last(tid).state == S.PREPARE_ABORT
                self.open.pop(tid)
                self.live.pop(tid)
            else:  # the previous outcome's markers are being written
                assert self.c.transactions[tid].state in PREPARED
            return
        assert result.error_code == E.NONE, result
        before = self.issued.get(tid)
        if before is not None and before[0] == result.producer_id:
            assert result.producer_epoch > before[1], (before, result)  # an epoch never goes back
        self.issued[tid] = (result.producer_id, result.producer_epoch)
        self.producers.append([tid, result.producer_id, result.producer_epoch])
        self.live[tid] = len(self.producers) - 1
        self.open.pop(tid, None)

    def _pick(self, data):
        return data.draw(st.integers(0, len(self.producers) - 1)) if self.producers else None

    @rule(data=st.data(), parts=st.sets(st.sampled_from(PARTITIONS), min_size=1))
    def add(self, data, parts):
        index = self._pick(data)
        if index is None:
            return
        tid, pid, epoch = self.producers[index]
        codes = set(self.c.add_partitions(tid, pid, epoch, parts).values())
        if self.live.get(tid) != index:
            assert codes <= {E.PRODUCER_FENCED, E.INVALID_PRODUCER_ID_MAPPING, E.CONCURRENT_TRANSACTIONS}, codes
            if self.issued.get(tid, (None,))[0] == pid and (tid, pid) and codes != {E.CONCURRENT_TRANSACTIONS}:
                assert codes == {E.PRODUCER_FENCED}
            return
        if codes == {E.NONE}:
            start, current = self.open.get(tid, (self.clock.time_ms(), set()))
            self.open[tid] = (start, current | parts)
        else:
            assert codes == {E.CONCURRENT_TRANSACTIONS}, codes  # the previous outcome's markers
            assert self.c.transactions[tid].state in PREPARED

    @rule(data=st.data(), commit=st.booleans())
    def end(self, data, commit):
        index = self._pick(data)
        if index is None:
            return
        tid, pid, epoch = self.producers[index]
        code = self.c.end_txn(tid, pid, epoch, commit)
        if self.live.get(tid) != index:
            assert code in (E.PRODUCER_FENCED, E.INVALID_PRODUCER_ID_MAPPING, E.CONCURRENT_TRANSACTIONS), code
            return
        if tid in self.open:
            assert code == E.NONE, code
            self.open.pop(tid)
            assert self.log.last(tid).state == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)
        else:
            assert code in (E.NONE, E.INVALID_TXN_STATE, E.CONCURRENT_TRANSACTIONS), code

    # --- the world ------------------------------------------------------------------------------

    @rule()
    def markers_written(self):
        self.markers.complete_all()
        self.c.scheduler.run_due()
        for tid, meta in self.c.transactions.items():
            assert meta.state not in PREPARED, (tid, meta)

    @rule(ms=st.sampled_from([1000, 5000, 10000, 25000]))
    def time_passes(self, ms):
        self.c.scheduler.advance(ms)
        now = self.clock.time_ms()
        for tid, (start, _parts) in list(self.open.items()):
            meta = self.c.transactions[tid]
            if meta.state != S.ONGOING:  # aborted by the scanner under a bumped epoch
                assert meta.state in (S.PREPARE_ABORT, S.COMPLETE_ABORT), meta
                assert meta.producer_epoch == self.producers[self.live[tid]][2] + 1
                self.open.pop(tid)
                self.live.pop(tid)
            else:  # an expired transaction does not outlive a scanner period (which restarts with the coordinator)
                assert now - max(start + TIMEOUT_MS, self.started_at) <= INTERVAL_MS, (now, start)

    @rule(crash=st.booleans())
    def restart(self, crash):
        if crash:
            self.markers.drop_all()  # the process died between the prepare records and the markers
        self.c.shutdown()
        self.markers.complete_all()  # a deposed coordinator's markers do not write Complete*
        self.c = make_coordinator(self.log, self.markers, clock=self.clock, pids=self.pids)
        self.started_at = self.clock.time_ms()
        self.markers.complete_all()
        self.c.scheduler.run_due()
        for tid, meta in self.c.transactions.items():  # nothing half done
            assert meta.state not in PREPARED, (tid, meta)

    @rule(tid=st.sampled_from(IDS))
    def append_fails(self, tid):
        self.log.fail_next(StorageError("disk full"))
        count = len(self.log.records)
        result = self.c.init_producer_id(tid, TIMEOUT_MS)
        if result.error_code == E.NOT_COORDINATOR:
            assert len(self.log.records) == count
        else:  # nothing was written (a lost-response retry, or a transition in progress)
            self.log.fail_next(None)
            assert result.error_code in (E.CONCURRENT_TRANSACTIONS, E.NONE), result
            assert self.c.transactions[tid].state in PREPARED

    # --- invariants -----------------------------------------------------------------------------

    @invariant()
    def memory_is_the_log(self):
        durable = self.log.load()
        for tid, meta in self.c.transactions.items():
            if meta.pending is None and tid in durable:
                value = durable[tid]
                assert (meta.state, meta.producer_id, meta.producer_epoch, tuple(sorted(meta.partitions))) == (
                    value.state, value.producer_id, value.producer_epoch, value.partitions)

    @invariant()
    def epochs_never_go_back_in_the_log(self):
        last = {}
        for tid, value in self.log.records:
            if value is None:
                continue
            key = (tid, value.producer_id)
            assert value.producer_epoch >= last.get(key, -1), (tid, value)
            last[key] = value.producer_epoch

    @invariant()
    def committed_markers_match_the_outcome(self):
        # Per (producer, epoch, partition) a marker's outcome is the outcome of a prepared record
        # holding that partition (checked at request time); written ones must come from requests.
        requested = {(p, r.producer_id, r.producer_epoch, r.commit) for r in self.markers.requests for p in r.partitions}
        assert set(self.markers.written) <= requested


CoordinatorModel.TestCase.settings = settings(stateful_step_count=40, max_examples=150)
TestCoordinatorModel = CoordinatorModel.TestCase
