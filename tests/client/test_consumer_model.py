"""A hypothesis model of ``Consumer`` (``logstore.client.consumer``) against ``logstore serve``:
appends, polls, seeks, commits and a close-and-reopen (the new consumer resumes at the group's
committed offsets, the log start where there is none), checked against a plain model of each
partition's records, the consumer's positions and the group's commits."""

from __future__ import annotations

import itertools
import time

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from logstore import Record
from logstore.client.consumer import Consumer

PARTITIONS = 2
_names = itertools.count()


def test_consumer_against_a_model(server):
    class ConsumerModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            number = next(_names)
            self.topic, self.group = f"model-{number}", f"model-group-{number}"
            server.store.create_topic(self.topic, PARTITIONS)
            self.log = {p: [] for p in range(PARTITIONS)}  # the values appended to each partition
            self.position = dict.fromkeys(range(PARTITIONS), 0)
            self.committed: dict[int, int] = {}
            self.consumer = self._open()

        def _open(self) -> Consumer:
            consumer = Consumer(bootstrap_servers=server.bootstrap_servers, group_id=self.group,
                                enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=7,
                                fetch_max_wait_ms=20)
            consumer.assign([(self.topic, p) for p in range(PARTITIONS)])
            return consumer

        @rule(partition=st.integers(0, PARTITIONS - 1), count=st.integers(1, 30))
        def append(self, partition: int, count: int) -> None:
            values = [b"%d-%d" % (partition, len(self.log[partition]) + i) for i in range(count)]
            server.store.append(self.topic, [Record(None, value) for value in values], partition=partition)
            self.log[partition] += values

        @rule()
        def poll(self) -> None:
            outstanding = sum(len(self.log[p]) - self.position[p] for p in range(PARTITIONS))
            got = []
            deadline = time.monotonic() + 10
            while len(got) < outstanding and time.monotonic() < deadline:
                got += self.consumer.poll(50)
            assert len(got) == outstanding, (len(got), outstanding)
            for record in got:
                p = record.partition
                assert (record.offset, record.value) == (self.position[p], self.log[p][self.position[p]])
                self.position[p] += 1
            assert self.consumer.poll(0) == []

        @rule(data=st.data())
        def poll_once_then_seek(self, data) -> None:
            # One poll may leave fetched records buffered: a seek then must drop them.
            for record in self.consumer.poll(30):
                p = record.partition
                assert (record.offset, record.value) == (self.position[p], self.log[p][self.position[p]])
                self.position[p] += 1
            partition = data.draw(st.integers(0, PARTITIONS - 1))
            offset = data.draw(st.integers(0, len(self.log[partition])))
            self.consumer.seek(self.topic, partition, offset)
            self.position[partition] = offset

        @rule()
        def commit(self) -> None:
            self.consumer.commit()
            self.committed = dict(self.position)

        @rule()
        def reopen(self) -> None:
            self.consumer.close()
            self.consumer = self._open()
            self.position = {p: self.committed.get(p, 0) for p in range(PARTITIONS)}

        @invariant()
        def positions_agree(self) -> None:
            for p in range(PARTITIONS):
                assert self.consumer.position(self.topic, p) == self.position[p]

        def teardown(self) -> None:
            self.consumer.close()

    run_state_machine_as_test(ConsumerModel, settings=settings(max_examples=25, stateful_step_count=20,
                                                               deadline=None))
