"""Readers that take no lock, while transactions open, commit and abort: a read_committed reader
never sees data of a transaction whose marker was not yet being written, never sees aborted data,
and a consumer that follows ``next_offset`` never skips committed data (the publication order of
the end offset, the first unstable offset and the aborted-transaction index). Bounded in count and
time; nothing is timed."""

from __future__ import annotations

import random
import sys
import threading
import time

from logstore import LogManager, Record
from logstore.records.batching import ProducerBatch

CYCLES = 1500
READS = 20_000
SWITCH_INTERVAL_S = 1e-5  # threads switch often: the windows between two publications get visited
DEADLINE_S = 60  # a bound on the loops, not a timing assertion


def test_read_committed_readers_never_see_undecided_or_aborted_data(tmp_path):
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        _hammer(tmp_path)
    finally:
        sys.setswitchinterval(interval)


def _hammer(tmp_path) -> None:
    rng = random.Random(29)
    store = LogManager([str(tmp_path)])
    store.create_topic("t", 1, {"segment.bytes": 16_384})
    log = store.get_log("t", 0)
    marking: set[int] = set()  # transactions whose marker is being (or was) written
    expected: list[bytes] = []  # the committed values, in offset order, as the writer decides them
    done = threading.Event()
    failures: list[str] = []

    def writer() -> None:
        try:
            open_txns: dict[int, tuple[int, bool, list[bytes]]] = {}  # pid -> (txn id, commits, values)
            pending: list[tuple[int, bytes]] = []  # (offset, value) of decided data, for ``expected``
            txn_id = 0
            for cycle in range(CYCLES):
                pid = rng.randrange(3)
                if pid not in open_txns:
                    txn_id += 1
                    open_txns[pid] = (txn_id, rng.random() < 0.6, [])
                tid, commits, values = open_txns[pid]
                count = rng.randrange(1, 4)
                batch = [Record(None, b"%s-%d-%d" % (b"C" if commits else b"A", tid, i), ()) for i in range(count)]
                info = log.append(batch, producer=ProducerBatch(pid, 0, 0, transactional=True))
                values.extend((info.first_offset + i, record.value) for i, record in enumerate(batch))
                if rng.random() < 0.3:
                    plain = Record(None, b"P-%d" % cycle, ())
                    offset = log.append([plain]).first_offset
                    pending.append((offset, plain.value))
                if rng.random() < 0.4:
                    marking.add(tid)
                    log.append_marker(pid, 0, 0, commit=commits)
                    if commits:
                        pending.extend(values)
                    del open_txns[pid]
            for pid, (tid, commits, values) in open_txns.items():
                marking.add(tid)
                log.append_marker(pid, 0, 0, commit=commits)
                if commits:
                    pending.extend(values)
            expected.extend(value for _, value in sorted(pending))
        except BaseException as exc:  # reported by the main thread
            failures.append(f"writer: {exc!r}")
        finally:
            done.set()

    def check(values, where: str) -> None:
        for value in values:
            kind, _, rest = value.partition(b"-")
            if kind == b"A":
                failures.append(f"{where}: aborted {value!r} seen")
            elif kind == b"C" and int(rest.split(b"-")[0]) not in marking:
                failures.append(f"{where}: {value!r} seen before its transaction's marker")

    consumed: list[bytes] = []

    def consumer() -> None:
        rng = random.Random(1)
        offset, deadline = 0, time.monotonic() + DEADLINE_S
        reads = 0
        while reads < READS and time.monotonic() < deadline and not failures:
            reads += 1
            result = log.fetch(offset, max_records=rng.randrange(1, 20), isolation="read_committed")
            values = [record.value for record in result.records]
            check(values, "consumer")
            consumed.extend(values)
            if result.next_offset < offset:
                failures.append(f"next_offset went back from {offset} to {result.next_offset}")
            offset = result.next_offset
            if done.is_set() and offset == log.log_end_offset:
                break

    def scanner() -> None:
        rng = random.Random(2)
        deadline = time.monotonic() + DEADLINE_S
        for reads in range(READS // 10):
            if done.is_set() or time.monotonic() > deadline or failures:
                break
            start = rng.randrange(0, log.log_end_offset + 1)
            check([record.value for record in log.read(start, isolation="read_committed")], "read")
            if reads % 5 == 0:
                check([record.value for record in log.iter_records(start, isolation="read_committed")], "iter")

    threads = [threading.Thread(target=target) for target in (writer, consumer, scanner)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_S * 2)
    assert not failures, failures[:5]
    # Whatever the consumer got, in order and without a gap; then the rest, to the end.
    assert consumed == expected[: len(consumed)]
    offset = 0
    everything = []
    while offset < log.log_end_offset:
        result = log.fetch(offset, isolation="read_committed")
        everything += [record.value for record in result.records]
        offset = result.next_offset
    assert everything == expected
    assert [r.value for r in log.iter_records(isolation="read_committed")] == expected
    assert log.last_stable_offset == log.log_end_offset and len(log.segments) > 2
    store.close()
