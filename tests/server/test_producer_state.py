"""ProducerStateManager against a plain model: Kafka's sequence rules, the last five batches per
producer and partition, producer ids never handed out twice, and the journal surviving a crash
(with a batch journaled but never appended dropped at the next load) and a clean close; ids never
handed out refused, out-of-range journal lines ignored and reported, producers expiring by a manual
clock, and the journal's bytes per batch independent of the producers held."""

import os

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from logstore.clock import ManualClock
from logstore.fs import FileSystem
from logstore.server.handlers import producer_state
from logstore.server.handlers.producer_state import (_line, BATCHES_TO_RETAIN, JOURNAL_NAME, ProducerStateManager,
                                                     next_sequence)
from logstore.server.protocol import errors

PARTITIONS = [("orders", 0), ("orders", 1), ("audit", 0)]


def test_sequences_follow_kafkas_rules(tmp_path):
    state = ProducerStateManager(str(tmp_path))
    state.load(lambda topic, partition: 0)
    pid = state.new_producer_id()
    assert state.check("t", 0, pid, 0, 0, 4).error_code == errors.NONE
    state.will_append("t", 0, pid, 0, 0, 4, 0, 4)
    assert state.check("t", 0, pid, 0, 5, 9).error_code == errors.NONE
    state.will_append("t", 0, pid, 0, 5, 9, 5, 9)
    duplicate = state.check("t", 0, pid, 0, 0, 4)
    assert duplicate.duplicate is not None and duplicate.duplicate.first_offset == 0
    assert state.check("t", 0, pid, 0, 12, 13).error_code == errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert state.check("t", 0, pid, 1, 3, 3).error_code == errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert state.check("t", 0, pid, 1, 0, 0).error_code == errors.NONE
    state.will_append("t", 0, pid, 1, 0, 0, 10, 10)
    assert state.check("t", 0, pid, 0, 10, 10).error_code == errors.INVALID_PRODUCER_EPOCH
    assert next_sequence(2**31 - 1) == 0
    state.close()


def test_producer_ids_are_never_reused_across_restarts_and_crashes(tmp_path):
    seen = set()
    for clean in (True, False, True, False):
        state = ProducerStateManager(str(tmp_path))
        state.load(lambda topic, partition: 0)
        for _ in range(3):
            producer_id = state.new_producer_id()
            assert producer_id not in seen
            seen.add(producer_id)
        if clean:
            state.close()
        # else: dropped without close, as after kill -9 (the journal lines are in the OS already)


def test_a_damaged_journal_line_is_ignored_not_fatal(tmp_path, caplog):
    state = ProducerStateManager(str(tmp_path))
    state.load(lambda topic, partition: 100)
    state.will_append("t", 0, 7, 0, 0, 0, 0, 0)
    state.close()
    with open(tmp_path / JOURNAL_NAME, "ab") as journal:
        journal.write(b"B t zero 7 0 1 1 1 1 00000000\n" + _line("B t 0 7 0 1 1 1 1").encode())
    again = ProducerStateManager(str(tmp_path))
    again.load(lambda topic, partition: 100)
    assert "damaged" in caplog.text and len(again.problems) == 1
    assert again.check("t", 0, 7, 0, 1, 1).duplicate is not None


def test_a_journal_of_version_0_is_still_read(tmp_path):
    (tmp_path / JOURNAL_NAME).write_bytes(b"P 1000\nB t 0 7 0 0 4 10 14\n")
    state = ProducerStateManager(str(tmp_path))
    state.load(lambda topic, partition: 100)
    assert state.problems == [] and state.check("t", 0, 7, 0, 0, 4).duplicate.first_offset == 10
    assert state.new_producer_id() >= 1000
    state.close()
    assert (tmp_path / JOURNAL_NAME).read_bytes().startswith(b"V 2 ")  # rewritten in version 2


class _NoSync(FileSystem):
    def fsync(self, fd):
        pass

    def fsync_dir(self, path):
        pass


NO_SYNC = _NoSync()


def test_every_flip_and_cut_of_the_journal_is_survived_or_reported(tmp_path):
    """Each line carries a CRC; the id reservation is written twice. A damaged line is reported
    and never used with wrong values; no producer id is handed out twice; a kept batch is exact."""
    state = ProducerStateManager(str(tmp_path), fs=NO_SYNC)
    state.load(lambda topic, partition: 100)
    first = state.new_producer_id()
    state.will_append("t", 0, first, 0, 0, 4, 10, 14)
    state.close()
    path = tmp_path / JOURNAL_NAME
    data = path.read_bytes()
    variants = [data[:n] + bytes([data[n] ^ mask]) + data[n + 1:] for n in range(len(data)) for mask in (1, 0x80)]
    variants += [data[:n] for n in range(len(data))]
    reported = 0
    for damaged in variants:
        path.write_bytes(damaged)
        again = ProducerStateManager(str(tmp_path), fs=NO_SYNC)
        again.load(lambda topic, partition: 100)
        if any("no intact producer id reservation" in problem for problem in again.problems):
            reported += 1
        assert again.new_producer_id() > first  # never handed out twice
        found = again.check("t", 0, first, 0, 0, 4).duplicate
        assert found is None or (found.first_offset, found.last_offset) == (10, 14)  # never wrong
        if found is None:
            assert again.problems, repr(damaged)  # a lost batch is reported, a cut tail too
        again.close()
    assert 0 < reported < len(data)  # only cuts that leave no P line


def _journal_with_batches(tmp_path) -> tuple[int, bytes]:
    state = ProducerStateManager(str(tmp_path), fs=NO_SYNC)
    state.load(lambda topic, partition: 100)
    os.makedirs(tmp_path / "__consumer_offsets-0")  # the server's first start makes it after the journal
    producer_id = state.new_producer_id()
    for number in range(4):
        state.will_append("t", 0, producer_id, 0, 3 * number, 3 * number + 2, 20 + 3 * number, 22 + 3 * number)
    state.close()
    return producer_id, (tmp_path / JOURNAL_NAME).read_bytes()


def test_a_missing_journal_never_hands_an_id_out_twice_and_is_reported(tmp_path):
    """A file-fuzz finding: the journal removed from a dir a server used: reported, and the next id
    comes from a block no earlier id can have reached."""
    producer_id, _ = _journal_with_batches(tmp_path)
    os.remove(tmp_path / JOURNAL_NAME)
    again = ProducerStateManager(str(tmp_path), fs=NO_SYNC)
    again.load(lambda topic, partition: 100)
    assert any("missing" in problem for problem in again.problems)
    assert producer_id == 0 and again.new_producer_id() >= 1000
    again.close()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    new = ProducerStateManager(str(fresh), fs=NO_SYNC)  # a dir no server used: no word, ids from 0
    new.load(lambda topic, partition: 100)
    assert new.problems == [] and new.new_producer_id() == 0


def test_a_journal_cut_by_whole_lines_is_reported(tmp_path):
    """A file-fuzz finding: a cut that takes the last batch lines (and the closing P line) looks like
    a crash's tail: the lost state is reported as possibly incomplete, never silently."""
    producer_id, data = _journal_with_batches(tmp_path)
    lines = data.splitlines(keepends=True)
    for keep in range(2, len(lines)):  # from V and P on, each cut at a line end
        (tmp_path / JOURNAL_NAME).write_bytes(b"".join(lines[:keep]))
        again = ProducerStateManager(str(tmp_path), fs=NO_SYNC)
        again.load(lambda topic, partition: 100)
        assert any("may be incomplete" in problem for problem in again.problems), keep
        assert again.new_producer_id() > producer_id
        again.close()

def test_a_batch_naming_a_producer_id_never_handed_out_is_unknown_producer_id(tmp_path):
    state = ProducerStateManager(str(tmp_path), fs=NO_SYNC)
    state.load(lambda topic, partition: 100)
    handed = state.new_producer_id()
    for forged in (2**63 - 1, handed + 1, -5):
        verdict = state.check("t", 0, forged, 0, 0, 0)
        assert verdict.error_code == errors.UNKNOWN_PRODUCER_ID and str(forged) in verdict.message
    assert state.check("t", 0, handed, 0, 0, 0).error_code == errors.NONE
    state.will_append("t", 0, handed, 0, 0, 0, 5, 5)
    state.close()
    again = ProducerStateManager(str(tmp_path), fs=NO_SYNC)
    again.load(lambda topic, partition: 100)
    assert again.check("t", 0, handed, 0, 0, 0).duplicate.first_offset == 5  # still known after a restart
    assert again.check("t", 0, 2**63 - 1, 0, 0, 0).error_code == errors.UNKNOWN_PRODUCER_ID
    again.close()


def test_a_forged_producer_id_journaled_by_an_earlier_version_is_ignored_not_fatal(tmp_path):
    """What an earlier version journaled after a Produce batch naming producer id 2**63 - 1: the
    batch line, and a reservation past the int64 range, which made every later InitProducerId fail.
    The replay ignores and reports both, keeps the other batches, and ids stay in range."""
    forged = 2**63 - 1
    lines = ["V 1", f"P {2**63}", "B t 0 0 0 0 4 10 14", f"B t 1 {forged} 0 0 0 20 20", "B t 2 0 0 -3 0 30 30",
             f"P {2**63}"]
    (tmp_path / JOURNAL_NAME).write_bytes("".join(_line(line) for line in lines).encode())
    state = ProducerStateManager(str(tmp_path), fs=NO_SYNC)
    state.load(lambda topic, partition: 100)
    out_of_range = [problem for problem in state.problems if "out of range" in problem]
    assert len(out_of_range) == 4, state.problems  # both reservations, the forged id, the negative sequence
    assert state.check("t", 0, 0, 0, 0, 4).duplicate.first_offset == 10  # the other batch is kept
    assert state.check("t", 1, forged, 0, 0, 0).error_code == errors.UNKNOWN_PRODUCER_ID
    new_id = state.new_producer_id()
    assert 0 < new_id < 2**63 - 1
    state.close()
    assert f"{forged}".encode() not in (tmp_path / JOURNAL_NAME).read_bytes()
    again = ProducerStateManager(str(tmp_path), fs=NO_SYNC)
    again.load(lambda topic, partition: 100)
    assert again.problems == [] and again.new_producer_id() > new_id
    again.close()


def test_producers_expire_after_producer_id_expiration_ms(tmp_path):
    clock = ManualClock()

    def open_state():
        state = ProducerStateManager(str(tmp_path), fs=NO_SYNC, clock=clock, expiration_ms=1000, check_interval_ms=1)
        state.load(lambda topic, partition: 100)
        return state

    state = open_state()
    old, young = state.new_producer_id(), state.new_producer_id()
    state.will_append("t", 0, old, 0, 0, 0, 0, 0)
    clock.advance(600)
    state.will_append("t", 0, young, 0, 0, 0, 1, 1)
    clock.advance(399)  # old's last batch is 999 ms old
    assert state.expire() == 0 and state.check("t", 0, old, 0, 0, 0).duplicate is not None
    clock.advance(1)
    state.will_append("t", 1, young, 0, 0, 0, 0, 0)  # a batch runs the check (its interval has passed)
    assert state.producer_count == 2  # young on partitions 0 and 1
    assert state.check("t", 0, old, 0, 0, 0).duplicate is None  # a new producer again: any sequence goes
    assert state.check("t", 0, old, 0, 7, 7).error_code == errors.NONE
    state = None  # kill -9: the journal still holds old's line, with its time
    state = open_state()
    assert state.producer_count == 2 and state.check("t", 0, old, 0, 0, 0).duplicate is None
    assert state.check("t", 0, young, 0, 0, 0).duplicate.first_offset == 1
    state.close()
    assert f"B t 0 {old} ".encode() not in (tmp_path / JOURNAL_NAME).read_bytes()
    clock.advance(1000)  # young's batches are 1000 and 1400 ms old at the next open
    state = open_state()
    assert state.producer_count == 0 and state.check("t", 0, young, 0, 0, 0).duplicate is None
    state.close()
    assert b"B " not in (tmp_path / JOURNAL_NAME).read_bytes()


class _CountingFs(FileSystem):
    """Counts the bytes written (appends and rewrites both go through ``pwrite``); no fsync."""

    def __init__(self):
        self.written = 0

    def pwrite(self, fd, data, position):
        self.written += len(data)
        super().pwrite(fd, data, position)

    def fsync(self, fd):
        pass

    def fsync_dir(self, path):
        pass


def test_the_journal_bytes_per_batch_do_not_grow_with_the_producers_held(tmp_path, monkeypatch):
    """The probe's finding: past 100,000 entries every idempotent batch rewrote the whole journal.
    Here with the rewrite threshold lowered to 50 lines: one producer's batches, with 100 and 1,000
    other producers held, cost the same few lines each."""
    monkeypatch.setattr(producer_state, "COMPACT_AFTER_LINES", 50)
    per_batch = {}
    for held in (100, 1000):
        fs = _CountingFs()
        state = ProducerStateManager(str(tmp_path / str(held)), fs=fs)
        (tmp_path / str(held)).mkdir()
        state.load(lambda topic, partition: 10**9)
        for offset in range(held):
            state.will_append("t", 0, state.new_producer_id(), 0, 0, 0, offset, offset)
        producer_id = state.new_producer_id()
        fs.written = 0
        batches = 2 * held
        for sequence in range(batches):
            state.will_append("t", 1, producer_id, 0, sequence, sequence, sequence, sequence)
        per_batch[held] = fs.written / batches
        state.close()
    line = len(_line(f"B t 1 {producer_id} 0 {batches} {batches} {batches} {batches} 1700000000000"))
    assert per_batch[1000] <= 4 * line, per_batch
    assert per_batch[1000] <= 1.5 * per_batch[100], per_batch


class ProducerStateMachine(RuleBasedStateMachine):
    """Idempotent appends, retries, out-of-order batches, epoch bumps, crashes between the journal
    write and the append, crashes and clean restarts, against a model of what was appended."""

    def __init__(self):
        super().__init__()
        import tempfile
        self.dir = tempfile.mkdtemp(prefix="producer-state-")
        self.log_end = {key: 0 for key in PARTITIONS}
        # (topic, partition, pid) -> (epoch, [(first_seq, last_seq, first_off, last_off)])
        self.model: dict = {}
        self.pids: list[int] = []
        self.state = None

    def _open(self):
        self.state = ProducerStateManager(self.dir)
        self.state.load(lambda topic, partition: self.log_end.get((topic, partition)))

    @initialize()
    def start(self):
        self._open()

    @rule()
    def new_producer(self):
        pid = self.state.new_producer_id()
        assert pid not in self.pids
        self.pids.append(pid)

    def _expected(self, key, epoch, first, last):
        entry = self.model.get(key)
        if entry is None:
            return "append", None
        known_epoch, batches = entry
        if epoch < known_epoch:
            return "error", errors.INVALID_PRODUCER_EPOCH
        if epoch > known_epoch:
            return ("append", None) if first == 0 else ("error", errors.OUT_OF_ORDER_SEQUENCE_NUMBER)
        for batch in batches:
            if batch[0] == first and batch[1] == last:
                return "duplicate", batch
        if batches and first != batches[-1][1] + 1:
            return "error", errors.OUT_OF_ORDER_SEQUENCE_NUMBER
        return "append", None

    @precondition(lambda self: self.pids)
    @rule(data=st.data(), count=st.integers(1, 5), kind=st.sampled_from(["next", "retry", "gap", "bump", "old"]),
          torn=st.booleans())
    def produce(self, data, count, kind, torn):
        pid = data.draw(st.sampled_from(self.pids))
        topic, partition = data.draw(st.sampled_from(PARTITIONS))
        key = (topic, partition, pid)
        epoch, batches = self.model.get(key, (0, []))
        first = batches[-1][1] + 1 if batches else 0
        if kind == "retry" and batches:
            first, last = data.draw(st.sampled_from([(b[0], b[1]) for b in batches]))
            count = last - first + 1
        elif kind == "gap":
            first += data.draw(st.integers(1, 3))
        elif kind == "bump":
            epoch, first = epoch + 1, 0
        elif kind == "old" and epoch > 0:
            epoch -= 1
        last = first + count - 1
        expected, detail = self._expected(key, epoch, first, last)
        verdict = self.state.check(topic, partition, pid, epoch, first, last)
        if expected == "duplicate":
            assert verdict.duplicate is not None and verdict.duplicate.first_offset == detail[2]
            return
        if expected == "error":
            assert verdict.error_code == detail and verdict.duplicate is None
            return
        assert verdict.error_code == errors.NONE and verdict.duplicate is None
        start = self.log_end[(topic, partition)]
        self.state.will_append(topic, partition, pid, epoch, first, last, start, start + count - 1)
        if torn:
            # The process dies between the journal line and the append: the batch is not in the log.
            self.state = None
            self._open()
            return
        self.log_end[(topic, partition)] = start + count
        if key not in self.model or epoch > self.model[key][0]:
            self.model[key] = (epoch, [])
        self.model[key][1].append((first, last, start, start + count - 1))
        del self.model[key][1][:-BATCHES_TO_RETAIN]

    @rule()
    def crash(self):
        self.state = None  # kill -9: nothing is closed, the OS keeps what was written
        self._open()

    @rule()
    def restart_cleanly(self):
        self.state.close()
        self._open()

    @invariant()
    def every_retained_batch_is_recognised_as_a_retry(self):
        if self.state is None:
            return
        for (topic, partition, pid), (epoch, batches) in self.model.items():
            for first, last, first_offset, _last_offset in batches:
                verdict = self.state.check(topic, partition, pid, epoch, first, last)
                assert verdict.duplicate is not None and verdict.duplicate.first_offset == first_offset

    def teardown(self):
        if self.state is not None:
            self.state.close()
        for name in os.listdir(self.dir):
            os.remove(os.path.join(self.dir, name))
        os.rmdir(self.dir)


ProducerStateMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestProducerState = ProducerStateMachine.TestCase


def test_a_server_says_the_journal_is_missing_only_when_a_server_ran_on_the_dir(tmp_path):
    """An in-process group consumer creates ``__consumer_offsets`` without any server: a first server
    on that store has no journal to miss. One removed after a server ran is reported."""
    from logstore import LogManager, Record
    from logstore.group.consumer import Consumer
    from logstore.server import KafkaServer
    path = str(tmp_path / "store")
    with LogManager([path]) as store:
        store.create_topic("t", 1)
        store.append("t", [Record(None, b"v")], partition=0)
        with Consumer(store, "g", ["t"], coordinator_config={"group.initial.rebalance.delay.ms": 0}) as consumer:
            consumer.poll(100)
            consumer.commit()
        assert any(name.startswith("__consumer_offsets") for name in os.listdir(path))
        with KafkaServer(store, listen="127.0.0.1:0"):
            assert not [problem for problem in store.problems if "missing" in problem]
    os.remove(os.path.join(path, JOURNAL_NAME))
    with LogManager([path]) as store, KafkaServer(store, listen="127.0.0.1:0"):
        assert any("is missing although a server used this data dir" in problem for problem in store.problems)
