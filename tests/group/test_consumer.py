"""The in-process ``Consumer``: group membership through the same coordinator the server uses, the
partitions shared between members, positions from committed offsets, commits that survive a reopen.

These run a threaded coordinator on the real clock (a consumer is a client with a heartbeat thread),
so each wait is bounded in time."""

from __future__ import annotations

import threading
import time

import pytest

from logstore.errors import OffsetOutOfRangeError
from logstore.group.consumer import Consumer, GroupRequestError
from logstore.group.coordinator import GroupCoordinator
from logstore.manager.log_manager import LogManager
from logstore.records.decoder import Record

FAST = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}
CONSUMER = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 100, "rebalance_timeout_ms": 10000}


@pytest.fixture
def store(tmp_path):
    with LogManager([str(tmp_path / "store")]) as opened:
        opened.create_topic("t", partitions=4)
        for partition in range(4):
            opened.append("t", [Record(key=b"k", value=f"{partition}-{i}".encode()) for i in range(10)],
                          partition=partition)
        yield opened


def poll_until(consumers, condition, timeout_s=20.0):
    """Poll every consumer, each on its own thread as applications do, until ``condition()``; returns
    the records each got. Not in lock-step rounds: a member blocked in JoinGroup would hold its round
    while the other, already done polling, never rejoins, so the rebalance would wait out its timeout
    and evict it."""
    return poll_independently(consumers, lambda _records: condition(), timeout_s)


def test_two_consumers_split_four_partitions_and_one_takes_all_after_the_other_leaves(store):
    coordinator = GroupCoordinator.of(store, FAST)
    first = Consumer(store, "g", ["t"], coordinator=coordinator, **CONSUMER)
    second = Consumer(store, "g", ["t"], coordinator=coordinator, **CONSUMER)
    try:
        got = poll_until([first, second], lambda: len(first.assignment()) == len(second.assignment()) == 2)
        assert sorted(first.assignment() + second.assignment()) == [("t", p) for p in range(4)]
        consumed = got[id(first)] + got[id(second)]
        assert len({(r.partition, r.offset) for r in consumed}) <= 40
        second.close()
        poll_until([first], lambda: len(first.assignment()) == 4)
    finally:
        first.close()
        second.close()


def poll_independently(consumers, condition, timeout_s=30.0):
    """Each consumer polls on its own thread without waiting for the others (a rebalance holds a
    member's JoinGroup until every member rejoined: lock-step rounds would stall it) until
    ``condition(records)`` (all records got so far) holds; returns the records each got."""
    got = {id(consumer): [] for consumer in consumers}
    done = threading.Event()

    def loop(consumer):
        while not done.is_set():
            got[id(consumer)].extend(consumer.poll(100))

    threads = [threading.Thread(target=loop, args=(c,), daemon=True) for c in consumers]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    try:
        while not condition([r for records in list(got.values()) for r in list(records)]):
            if time.monotonic() >= deadline:
                raise AssertionError(f"not reached in {timeout_s} s: {[c.assignment() for c in consumers]}")
            time.sleep(0.05)
    finally:
        done.set()
        for thread in threads:
            thread.join(30)
    return got


def test_partitions_added_to_a_subscribed_topic_are_assigned_after_a_rebalance(store):
    coordinator = GroupCoordinator.of(store, FAST)
    first = Consumer(store, "grow", ["t"], coordinator=coordinator, **CONSUMER)
    second = Consumer(store, "grow", ["t"], coordinator=coordinator, **CONSUMER)
    try:
        poll_until([first, second], lambda: len(first.assignment()) == len(second.assignment()) == 2)
        generation = first.generation_id
        store.create_partitions("t", 6)
        store.append("t", [Record(key=None, value=b"in-5")], partition=5)
        got = poll_independently([first, second], lambda records: sorted(first.assignment() + second.assignment())
                                 == [("t", p) for p in range(6)] and any(r.partition == 5 for r in records))
        assert first.generation_id > generation and len(first.assignment()) == len(second.assignment()) == 3
        assert any((r.partition, r.value) == (5, b"in-5") for records in got.values() for r in records)
    finally:
        first.close()
        second.close()


def test_positions_start_at_the_committed_offsets_and_commits_survive_a_reopen(tmp_path):
    path = str(tmp_path / "store")
    with LogManager([path]) as store:
        store.create_topic("t", partitions=1)
        store.append("t", [Record(value=str(i).encode()) for i in range(100)], partition=0)
        with Consumer(store, "g", ["t"], coordinator_config=FAST, **CONSUMER) as consumer:
            records = []
            while len(records) < 30:
                records.extend(consumer.poll(200))
            consumer.commit({("t", 0): 30})
            assert consumer.committed("t", 0) == 30
    with LogManager([path]) as store:
        with Consumer(store, "g", ["t"], coordinator_config=FAST, **CONSUMER) as consumer:
            records = consumer.poll(2000)
            assert records and records[0].offset == 30 and records[0].value == b"30"


def test_a_commit_by_a_stale_generation_is_refused_and_the_consumer_rejoins(store):
    coordinator = GroupCoordinator.of(store, FAST)
    with Consumer(store, "g", ["t"], coordinator=coordinator, **CONSUMER) as consumer:
        consumer.poll(100)
        consumer.generation_id -= 1  # as if a rebalance happened behind its back
        with pytest.raises(GroupRequestError, match="ILLEGAL_GENERATION"):
            consumer.commit({("t", 0): 1})
        consumer.poll(100)  # rejoins
        consumer.commit({("t", 0): 1})
        assert consumer.committed("t", 0) == 1


def test_bad_arguments_name_the_value(store):
    with pytest.raises(ValueError, match="auto_offset_reset"):
        Consumer(store, "g", ["t"], auto_offset_reset="middle")
    with pytest.raises(ValueError, match="group_id"):
        Consumer(store, "", ["t"])
    with pytest.raises(ValueError, match="assignors"):
        Consumer(store, "g", ["t"], assignors=["sticky"])


def test_auto_offset_reset_none_raises_offset_out_of_range_with_the_numbers(store):
    # Without a committed offset (or with one outside the log) a consumer with auto_offset_reset
    # "none" refuses to guess: OffsetOutOfRangeError naming the partition and giving the numbers
    # (it raised a TypeError, the error built without them).
    coordinator = GroupCoordinator.of(store, FAST)
    with Consumer(store, "g", ["t"], coordinator=coordinator, auto_offset_reset="none", **CONSUMER) as consumer:
        with pytest.raises(OffsetOutOfRangeError, match="no committed offset for group g") as caught:
            consumer.poll(100)
        assert (caught.value.offset, caught.value.log_start_offset, caught.value.log_end_offset) == (-1, 0, 10)
        consumer.commit({("t", p): 50 for p in range(4)})
    with Consumer(store, "g", ["t"], coordinator=coordinator, auto_offset_reset="none", **CONSUMER) as consumer:
        with pytest.raises(OffsetOutOfRangeError, match=r"committed offset 50 of group g is out of range \[0, 10\]"):
            consumer.poll(100)
