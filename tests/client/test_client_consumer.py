"""``Consumer`` (``logstore.client.consumer``) against ``logstore serve``, and against Tansu: records
read in order with their keys, values, headers and timestamps; positions, seeks and resets;
ListOffsets lookups; fetching ahead; consumer groups (partitions split among members, handed over
when one leaves, committed offsets resumed; a partition kept through a rebalance keeps its
position); a coordinator that cannot be reached waited out; bad settings refused with the offending
value."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from logstore import Record
from logstore.bench.serve import BrokerProcess
from logstore.clock import ManualClock
from logstore.client.consumer import Consumer
from logstore.client.errors import NoOffsetForPartitionError
from logstore.client.producer import Producer
from logstore.errors import RequestError, StoreClosedError

BASE_MS = 1_700_000_000_000


def _fill(server, topic: str, partitions: int, per_partition: int) -> dict[int, list[Record]]:
    server.store.create_topic(topic, partitions)
    written = {}
    for partition in range(partitions):
        records = [Record(b"k%d" % i, b"%s-%d-%d" % (topic.encode(), partition, i),
                          (("n", b"%d" % i),) if i % 3 == 0 else (), BASE_MS + i) for i in range(per_partition)]
        for start in range(0, per_partition, 100):  # several batches
            server.store.append(topic, records[start:start + 100], partition=partition)
        written[partition] = records
    return written


def _poll_until(consumer: Consumer, count: int, timeout_s: float = 20) -> list:
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.poll(200)
    return got


def test_assigned_partitions_are_read_in_order_with_every_field(server):
    written = _fill(server, "read-all", 3, 450)
    with Consumer(bootstrap_servers=server.bootstrap_servers, auto_offset_reset="earliest",
                  max_poll_records=100) as consumer:
        consumer.assign([("read-all", 0), ("read-all", 2)])
        got = _poll_until(consumer, 900)
        for partition in (0, 2):
            mine = [r for r in got if r.partition == partition]
            assert [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp_ms) for r in mine] == \
                [(i, w.key, w.value, tuple(w.headers), w.timestamp_ms) for i, w in enumerate(written[partition])]
            assert consumer.position("read-all", partition) == 450
        assert {r.topic for r in got} == {"read-all"} and len(got) == 900
        assert consumer.poll(50) == []  # nothing more
        server.store.append("read-all", [Record(None, b"late")], partition=2)
        late = _poll_until(consumer, 1)
        assert [(r.partition, r.offset, r.value) for r in late] == [(2, 450, b"late")]


def test_max_poll_records_bounds_each_poll_and_the_next_fetch_is_already_in_flight(server):
    _fill(server, "ahead", 1, 300)
    with Consumer(bootstrap_servers=server.bootstrap_servers, auto_offset_reset="earliest",
                  max_poll_records=40, max_partition_fetch_bytes=1 << 20) as consumer:
        consumer.assign([("ahead", 0)])
        sizes, offsets = [], []
        while len(offsets) < 300:
            records = consumer.poll(2000)
            assert records, "no records within 2 s"
            sizes.append(len(records))
            offsets += [r.offset for r in records]
        assert offsets == list(range(300)) and max(sizes) == 40
        # All 300 came in one fetch (1 MiB per partition): the rest were handed out from the buffer,
        # and once it ran dry a Fetch for offset 300 went out before poll returned.
        assert consumer._fetcher._in_flight and not consumer._fetcher.has_buffered()


def test_seek_position_and_the_offset_lookups(server):
    written = _fill(server, "seeking", 2, 200)
    with Consumer(bootstrap_servers=server.bootstrap_servers, auto_offset_reset="latest") as consumer:
        consumer.assign([("seeking", 0), ("seeking", 1)])
        assert consumer.position("seeking", 1) == 200  # latest: the end
        consumer.seek("seeking", 1, 150)
        got = _poll_until(consumer, 50)
        assert [(r.partition, r.offset) for r in got] == [(1, i) for i in range(150, 200)]
        consumer.seek_to_beginning(("seeking", 0))
        assert consumer.position("seeking", 0) == 0
        assert consumer.beginning_offsets([("seeking", 0)]) == {("seeking", 0): 0}
        assert consumer.end_offsets([("seeking", 0), ("seeking", 1)]) == {("seeking", 0): 200, ("seeking", 1): 200}
        found = consumer.offsets_for_times({("seeking", 0): BASE_MS + 120, ("seeking", 1): BASE_MS + 10_000})
        assert found == {("seeking", 0): (120, written[0][120].timestamp_ms), ("seeking", 1): None}
        with pytest.raises(ValueError, match="-1"):
            consumer.seek("seeking", 0, -1)
        with pytest.raises(ValueError, match="not assigned"):
            consumer.seek("seeking", 5, 0)


def test_a_position_below_the_log_start_is_reset_and_none_refuses_to_guess(server):
    _fill(server, "trimmed", 1, 100)
    server.store.get_log("trimmed", 0).delete_records(60)
    with Consumer(bootstrap_servers=server.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([("trimmed", 0)])
        consumer.seek("trimmed", 0, 10)  # deleted: OFFSET_OUT_OF_RANGE, then earliest
        got = _poll_until(consumer, 40)
        assert [r.offset for r in got] == list(range(60, 100))
    with Consumer(bootstrap_servers=server.bootstrap_servers, auto_offset_reset="none") as consumer:
        consumer.assign([("trimmed", 0)])
        with pytest.raises(NoOffsetForPartitionError, match="trimmed-0"):
            consumer.poll(100)


def test_a_group_splits_the_partitions_hands_them_over_and_resumes_from_commits(server):
    _fill(server, "grouped", 4, 100)
    settings = dict(bootstrap_servers=server.bootstrap_servers, group_id="g1", auto_offset_reset="earliest",
                    enable_auto_commit=False, heartbeat_interval_ms=100, session_timeout_ms=6000,
                    max_poll_interval_ms=10_000)
    first, second = Consumer(**settings), Consumer(**settings)
    stop = threading.Event()

    def keep_polling(consumer: Consumer) -> None:  # a member that polls, as its own process would
        while not stop.is_set():
            consumer.poll(50)

    try:
        first.subscribe(["grouped"])
        first.poll(500)  # joins alone: all four partitions
        assert len(first.assignment()) == 4
        first_thread = threading.Thread(target=keep_polling, args=(first,))
        first_thread.start()
        second.subscribe(["grouped"])
        # The second join starts a rebalance; the first member learns it from its heartbeats.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(second.assignment()) != 2:
            second.poll(100)
        stop.set()
        first_thread.join(10)
        assert sorted(first.assignment() + second.assignment()) == [("grouped", p) for p in range(4)]
        assert len(first.assignment()) == len(second.assignment()) == 2  # range: two each
        mine = second.assignment()
        second.seek(*mine[0], 0)
        second.seek(*mine[1], 0)
        read = _poll_until(second, 200)
        assert sorted((r.partition, r.offset) for r in read) == sorted((p, i) for _, p in mine for i in range(100))
        second.commit({tp: 50 for tp in mine})
        assert second.committed(*mine[0]) == 50
        future = second.commit_async({mine[1]: 70})
        deadline = time.monotonic() + 10
        while not future.done() and time.monotonic() < deadline:  # answers are read by poll, as Kafka's
            second.poll(50)
        assert future.result(0) == {mine[1]: 70}
        stop.clear()
        second_thread = threading.Thread(target=keep_polling, args=(second,))
        second_thread.start()
        # The first member rejoins and takes its two partitions back (they keep their positions).
        first.poll(100)
        stop.set()
        second_thread.join(10)
    finally:
        stop.set()
        second.close()  # leaves: the first member takes its partitions over
    try:
        deadline = time.monotonic() + 20
        got = []  # the poll that completes the rejoin may return the first records already
        while time.monotonic() < deadline and len(first.assignment()) < 4:
            got += first.poll(100)
        assert len(first.assignment()) == 4
        # The partitions handed over start at the commits made for them: 50 and 70 (its own two go
        # on from its positions, 100: nothing more there).
        got += _poll_until(first, 80 - len(got), 10)  # 50 + 30
        resumed = {}
        for record in got:
            resumed.setdefault((record.topic, record.partition), record.offset)
        assert mine[0] in resumed and mine[1] in resumed, (
            resumed, mine, first.assignment(), {tp: first.position(*tp) for tp in first.assignment()},
            {tp: first.committed(*tp) for tp in mine})
        assert resumed[mine[0]] == 50 and resumed[mine[1]] == 70
    finally:
        first.close()


def test_bad_settings_and_calls_are_refused_naming_the_value(server):
    with pytest.raises(ValueError, match="'sometimes'"):
        Consumer(bootstrap_servers=server.bootstrap_servers, auto_offset_reset="sometimes")
    with pytest.raises(ValueError, match="fetch.max.byte"):
        Consumer(bootstrap_servers=server.bootstrap_servers, fetch_max_byte=10)
    with pytest.raises(ValueError, match="sticky"):
        Consumer(bootstrap_servers=server.bootstrap_servers, partition_assignment_strategy="sticky")
    consumer = Consumer(bootstrap_servers=server.bootstrap_servers)
    with pytest.raises(RequestError, match="group.id"):
        consumer.subscribe(["t"])
    with pytest.raises(ValueError, match="no partition 9"):
        consumer.assign([("t", 9)])
    with pytest.raises(TypeError, match="'t'"):
        consumer.assign(["t"])
    consumer.close()
    consumer.close()
    with pytest.raises(StoreClosedError):
        consumer.poll(0)


def test_against_tansu_our_producer_and_consumer_group_round_trip(tmp_path):
    broker = BrokerProcess("tansu", str(tmp_path))
    try:
        # acks=1: Tansu's memory engine answers InitProducerId with UNKNOWN_SERVER_ERROR (-1), so
        # the idempotent producer (acks=all's default) cannot start there.
        with Producer(bootstrap_servers=broker.address, linger_ms=2, acks=1) as producer:
            futures = [producer.send("round-trip", b"value-%d" % i, key=b"key-%d" % (i % 7),
                                     headers=[("i", b"%d" % i)], timestamp_ms=BASE_MS + i) for i in range(500)]
            producer.flush(30)
        sent = {(f.result(0).partition, f.result(0).offset): i for i, f in enumerate(futures)}
        with Consumer(bootstrap_servers=broker.address, group_id="tansu-group", auto_offset_reset="earliest",
                      heartbeat_interval_ms=200, session_timeout_ms=10_000) as consumer:
            consumer.subscribe(["round-trip"])
            got = _poll_until(consumer, 500, 30)
            consumer.commit()
            assert consumer.committed("round-trip", got[0].partition) is not None
        assert len(got) == 500
        for record in got:
            i = sent[(record.partition, record.offset)]
            assert (record.key, record.value, tuple(record.headers), record.timestamp_ms) == \
                (b"key-%d" % (i % 7), b"value-%d" % i, (("i", b"%d" % i),), BASE_MS + i)
    finally:
        broker.stop()


def test_a_poll_with_the_broker_gone_waits_instead_of_spinning(tmp_path):
    """With every broker unreachable no Fetch can be sent; poll must still wait out its timeout
    quietly (a `read --follow` left running against a stopped broker burned a whole core)."""
    from logstore.server import KafkaServer
    server = KafkaServer(str(tmp_path / "data"), listen="127.0.0.1:0").start()
    try:
        server.store.create_topic("gone", 1)
        consumer = Consumer(bootstrap_servers=server.bootstrap_servers, auto_offset_reset="earliest",
                            retry_backoff_ms=100, request_timeout_ms=2000)
        consumer.assign([("gone", 0)])
        assert consumer.poll(300) == []
    finally:
        server.stop()
    try:
        consumer.poll(200)  # learns that the connection is gone
        wall, cpu = time.monotonic(), time.process_time()
        assert consumer.poll(1500) == []
        wall, cpu = time.monotonic() - wall, time.process_time() - cpu
        assert wall >= 1.4, wall
        assert cpu < 0.5 * wall, (cpu, wall)  # spinning costs a core: cpu == wall
    finally:
        consumer.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_group_consumer_waits_out_an_unreachable_coordinator_then_joins(tmp_path):
    """A subscribed consumer whose coordinator cannot be reached (a broker restarting) goes on
    trying, poll after poll, returning no records: it once gave up after 50 join rounds (5 s) with
    an error out of poll. Time is a manual clock here: each back-off moves it."""
    from logstore.server import KafkaServer
    port = _free_port()
    clock = ManualClock()
    consumer = Consumer(bootstrap_servers=f"127.0.0.1:{port}", group_id="late", auto_offset_reset="earliest",
                        request_timeout_ms=2000, clock=clock)
    try:
        consumer.subscribe(["back"])
        for _ in range(3):
            started = clock.monotonic_ms()
            assert consumer.poll(30_000) == [] and consumer.assignment() == []
            assert clock.monotonic_ms() - started <= 30_000  # the poll's timeout bounds the rounds
        with KafkaServer(str(tmp_path / "data"), listen=f"127.0.0.1:{port}",
                         config={"group.initial.rebalance.delay.ms": 0}) as server:
            server.store.create_topic("back", 1)
            server.store.append("back", [Record(None, b"v%d" % i) for i in range(5)], partition=0)
            got = []
            for _ in range(200):
                got += consumer.poll(100)
                if len(got) >= 5:
                    break
            assert [record.value for record in got] == [b"v%d" % i for i in range(5)]
            consumer.close()
    finally:
        consumer.close()


def test_commit_with_a_timeout_looks_for_the_coordinator_that_long(tmp_path):
    """``commit(offsets, timeout_ms=)`` (Kafka's commitSync with a timeout) bounds how long a
    coordinator that cannot be reached is looked for: 0 is one try, the default is
    default.api.timeout.ms. Time is a manual clock: each back-off moves it."""
    from logstore.client.errors import NetworkError
    clock = ManualClock()
    consumer = Consumer(bootstrap_servers=f"127.0.0.1:{_free_port()}", group_id="away", clock=clock,
                        default_api_timeout_ms=20_000)
    try:
        with pytest.raises(ValueError, match="-1"):
            consumer.commit({("t", 0): 1}, timeout_ms=-1)
        waited = []
        for timeout_ms in (0, 3000, None):
            started = clock.monotonic_ms()
            with pytest.raises(NetworkError, match="FindCoordinator"):
                consumer.commit({("t", 0): 1}, timeout_ms=timeout_ms)
            waited.append(clock.monotonic_ms() - started)
        assert waited[0] == 0
        assert 1000 <= waited[1] <= 3000
        assert 10_000 <= waited[2] <= 20_000
    finally:
        consumer.close()


def test_a_partition_kept_through_a_rebalance_keeps_its_position(server):
    """A member that read records it has not committed yet and keeps the partition through a
    rebalance goes on from its own position (it once went back to the group's commits and returned
    those records twice); the partition it hands over starts from the commits (none here: the start)."""
    _fill(server, "kept", 2, 20)
    settings = dict(bootstrap_servers=server.bootstrap_servers, group_id="g-kept", auto_offset_reset="earliest",
                    enable_auto_commit=False, heartbeat_interval_ms=100, session_timeout_ms=6000,
                    max_poll_interval_ms=10_000)
    first, second = Consumer(**settings), Consumer(**settings)
    stop = threading.Event()
    read_by_first: list = []

    def keep_polling() -> None:
        while not stop.is_set():
            read_by_first.extend(first.poll(50))

    thread = threading.Thread(target=keep_polling)
    try:
        first.subscribe(["kept"])
        read_by_first.extend(_poll_until(first, 40))
        assert len(read_by_first) == 40 and len(first.assignment()) == 2
        thread.start()
        second.subscribe(["kept"])
        read_by_second = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(second.assignment()) != 1:
            read_by_second += second.poll(100)
        read_by_second += _poll_until(second, 20 - len(read_by_second), 10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(first.assignment()) != 1:
            time.sleep(0.05)
        kept = first.assignment()
        assert len(kept) == 1 and second.assignment() != kept
        server.store.append("kept", [Record(None, b"late")], partition=kept[0][1])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(r.value == b"late" for r in read_by_first):
            time.sleep(0.05)
        stop.set()
        thread.join(10)
        seen = [(r.partition, r.offset) for r in read_by_first]
        assert sorted(seen) == sorted({*seen}), "records returned twice"
        assert (kept[0][1], 20) in seen  # the new record came, after the rebalance
        # The partition handed over starts from the group's commits: none, so the start.
        assert sorted(r.offset for r in read_by_second) == list(range(20))
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(10)
        second.close()
        first.close()
