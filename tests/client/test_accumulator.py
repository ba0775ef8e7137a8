"""The producer's ``RecordAccumulator`` (``logstore.client.accumulator``) against a plain model, on a
manual clock: batches fill up to ``batch.size`` in append order, a partition's first batch is ready
when full, when ``linger.ms`` passed, during a flush or on close, one batch per partition is in flight,
a retried batch stays first and takes no more records, futures get consecutive offsets in append order, and the memory held is
exactly the queued batches' and never more than ``buffer.memory``. Then the blocking rules of
``max.block.ms`` in real time. (The accumulator keeps nothing on disk: there is no crash to model.)"""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logstore import Record
from logstore.client.accumulator import BATCH_OVERHEAD_BYTES, RecordAccumulator, record_size_bytes
from logstore.client.errors import BufferExhaustedError
from logstore.clock import ManualClock

PARTITIONS = [("a", 0), ("a", 1), ("b", 0)]
BATCH_SIZE, LINGER_MS, BUFFER_MEMORY = 400, 50, 100_000


class AccumulatorModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.accumulator = RecordAccumulator(batch_size=BATCH_SIZE, linger_ms=LINGER_MS, buffer_memory=BUFFER_MEMORY,
                                             max_block_ms=0, clock=self.clock)
        # per partition: batches as {"values", "size", "created", "in_flight"}
        self.model = {key: [] for key in PARTITIONS}
        self.futures = {key: [] for key in PARTITIONS}  # (value, future) in append order
        self.next_offset = {key: 1000 * n for n, key in enumerate(PARTITIONS)}
        self.completed = {key: 0 for key in PARTITIONS}
        self.flushing = False
        self.serial = 0

    @rule(key=st.sampled_from(PARTITIONS), value_bytes=st.integers(0, 500))
    def append(self, key, value_bytes):
        self.serial += 1
        value = b"%d-" % self.serial + b"x" * value_bytes
        record = Record(b"k", value, (), 1_700_000_000_000 + self.serial)
        size = record_size_bytes(record)
        future = self.accumulator.append(*key, record)
        batches = self.model[key]
        # A batch once sent takes no more records (its retries must carry the same ones)
        last = batches[-1] if batches and not batches[-1]["in_flight"] and not batches[-1].get("sent") else None
        if last is not None and last["size"] + size <= BATCH_SIZE:
            last["values"].append(value)
            last["size"] += size
        else:
            batches.append({"values": [value], "size": BATCH_OVERHEAD_BYTES + size, "created": self.clock.monotonic_ms(),
                            "in_flight": False})
        self.futures[key].append((value, record.timestamp_ms, future))

    @rule(ms=st.integers(0, 80))
    def advance(self, ms):
        self.clock.advance(ms)

    def expected_ready(self):
        now = self.clock.monotonic_ms()
        return {key for key, batches in self.model.items()
                if batches and not batches[0]["in_flight"]
                and (self.flushing or len(batches) > 1 or batches[0]["size"] >= BATCH_SIZE
                     or now - batches[0]["created"] >= LINGER_MS)}

    @rule(data=st.data())
    def drain_some_ready(self, data):
        ready, next_ms = self.accumulator.ready(self.clock.monotonic_ms())
        assert ready == self.expected_ready()
        waiting = [key for key, batches in self.model.items() if batches and not batches[0]["in_flight"]
                   and key not in ready]
        assert (next_ms is None) == (not waiting)
        chosen = data.draw(st.lists(st.sampled_from(PARTITIONS), unique=True))
        drained = self.accumulator.drain(chosen, self.clock.monotonic_ms())
        expected = [key for key in chosen if self.model[key] and not self.model[key][0]["in_flight"]]
        assert [(b.topic, b.partition) for b in drained] == expected
        for batch in drained:
            first = self.model[(batch.topic, batch.partition)][0]
            assert [r.value for r in batch.records] == first["values"] and batch.size_bytes == first["size"]
            first["in_flight"] = first["sent"] = True
            first["batch"] = batch

    @precondition(lambda self: any(b and b[0]["in_flight"] for b in self.model.values()))
    @rule(data=st.data(), succeed=st.booleans())
    def answer(self, data, succeed):
        key = data.draw(st.sampled_from([k for k, b in self.model.items() if b and b[0]["in_flight"]]))
        first = self.model[key][0]
        batch = first["batch"]
        if succeed:
            batch.complete(self.next_offset[key])
            self.next_offset[key] += len(first["values"])
            self.accumulator.deallocate(batch)
            self.model[key].pop(0)
            done = self.futures[key][self.completed[key] : self.completed[key] + len(first["values"])]
            offsets = [future.result(0).offset for _, _, future in done]
            assert offsets == list(range(offsets[0], offsets[0] + len(done)))
            assert [value for value, _, _ in done] == first["values"]
            assert [future.result(0).timestamp_ms for _, _, future in done] == [ts for _, ts, _ in done]
            self.completed[key] += len(done)
        else:  # a retriable error: back in front, same records
            self.accumulator.reenqueue(batch)
            first["in_flight"] = False

    @rule()
    def toggle_flush(self):
        if self.flushing:
            self.accumulator.end_flush()
        else:
            self.accumulator.begin_flush()
        self.flushing = not self.flushing

    @invariant()
    def memory_is_the_batches(self):
        held = sum(batch["size"] for batches in self.model.values() for batch in batches)
        assert self.accumulator.used_bytes == held <= BUFFER_MEMORY
        assert self.accumulator.pending() == sum(len(b) for b in self.model.values())

    @invariant()
    def batches_respect_batch_size(self):
        for batches in self.model.values():
            for batch in batches:
                assert batch["size"] <= BATCH_SIZE or len(batch["values"]) == 1


TestAccumulatorModel = AccumulatorModel.TestCase
TestAccumulatorModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def _record(value_bytes: int) -> Record:
    return Record(b"k", bytes(value_bytes), (), 1)


def test_an_append_blocks_until_memory_is_freed():
    accumulator = RecordAccumulator(batch_size=200, linger_ms=0, buffer_memory=400, max_block_ms=5000)
    accumulator.append("t", 0, _record(200))  # 283 bytes with the overheads
    accumulator.append("t", 1, _record(20))  # 103: 386 of 400 held
    (first,) = accumulator.drain([("t", 0)], 0)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (accumulator.append("t", 2, _record(150)), done.set()))
    thread.start()
    time.sleep(0.1)
    assert not done.is_set(), "the append should wait: the buffer is full"
    assert ("t", 1) in accumulator.ready(0)[0]  # an append waiting for memory makes every batch ready
    first.complete(0)
    accumulator.deallocate(first)
    thread.join(5)
    assert done.is_set() and accumulator.used_bytes <= 400


def test_an_append_gives_up_after_max_block_ms():
    accumulator = RecordAccumulator(batch_size=500, linger_ms=0, buffer_memory=400, max_block_ms=150)
    accumulator.append("t", 0, _record(300))
    began = time.monotonic()
    with pytest.raises(BufferExhaustedError, match="max_block_ms"):
        accumulator.append("t", 1, _record(100))
    assert 0.14 <= time.monotonic() - began < 3
    assert accumulator.pending() == 1  # nothing queued for the refused record


def test_close_releases_a_waiting_append():
    accumulator = RecordAccumulator(batch_size=500, linger_ms=0, buffer_memory=400, max_block_ms=60_000)
    accumulator.append("t", 0, _record(300))
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(pytest.raises(BufferExhaustedError, accumulator.append,
                                                                           "t", 1, _record(100))))
    thread.start()
    time.sleep(0.1)
    accumulator.close()
    thread.join(5)
    assert outcome and not thread.is_alive()
    assert accumulator.ready(0)[0] == {("t", 0)}


def test_a_record_larger_than_the_buffer_is_refused_at_once():
    accumulator = RecordAccumulator(buffer_memory=1000)
    with pytest.raises(ValueError, match="larger than buffer_memory"):
        accumulator.append("t", 0, _record(2000))
    with pytest.raises(TypeError):
        accumulator.append("t", 0, (b"k", b"v"))


def test_a_failed_batch_fails_every_future():
    accumulator = RecordAccumulator(linger_ms=0)
    futures = [accumulator.append("t", 0, _record(10)) for _ in range(3)]
    (batch,) = accumulator.drain([("t", 0)], 0)
    error = RuntimeError("refused")
    batch.fail(error)
    accumulator.deallocate(batch)
    assert all(future.exception(0) is error for future in futures) and accumulator.used_bytes == 0
