"""The transactional producer (``Producer(transactional_id=...)``) against brokers with transactions
(``txn_broker``: Tansu, then ``logstore serve`` once it offers the transaction APIs): commits and
aborts across partitions and topics, what read_committed and read_uncommitted consumers see, a
read_committed consumer held at an open transaction's first offset, zombie fencing (two producers,
one transactional id), offsets committed inside a transaction, a refused record (abortable: abort,
new epoch, go on), a mirror that copies no aborted record, ``logstore mirror --exactly-once``
killed inside a transaction and started again (each record once), and the call-order, settings
and usage errors (no broker needed).

What a transaction left in a partition is checked by a reference reader (``committed_view``): the
raw batches read uncommitted, each producer's transactional records held until its COMMIT marker
(kept) or ABORT marker (dropped). Tansu 0.6 answers a read_committed Fetch with an empty
AbortedTransactions list, so its read_committed consumers get aborted records: that check runs on the
brokers that list them (the consumer's filtering itself is tested on hand-made answers in
``test_fetcher``)."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.cli.main import main
from logstore.client.admin import BrokerAdmin
from logstore.client.admin import BrokerGroupAdmin
from logstore.client.connection import BrokerConnection
from logstore.client.consumer import Consumer
from logstore.client.errors import (AbortableTransactionError, BrokerResponseError, FatalTransactionError,
                                    ProducerFencedError, TransactionError, TransactionStateError)
from logstore.client.producer import Producer
from logstore.server.wire_records.decode import decode_fetch

LOGSTORE_ONLY = pytest.mark.parametrize("txn_broker", ["logstore"], indirect=True)
_MAX_POLLS = 200  # bounds every read loop (each poll waits at most 200 ms for records)
_names = itertools.count()


def _topic(broker, partitions: int) -> str:
    name = f"txn-{next(_names)}"
    with BrokerAdmin(broker.address) as admin:
        admin.create_topic(name, partitions)
    return name


def _producer(broker, transactional_id: str, **settings) -> Producer:
    return Producer(bootstrap_servers=broker.address, transactional_id=transactional_id, linger_ms=1, **settings)


def committed_view(address: str, topic: str, partition: int, *, open_ok: bool = False) -> tuple[list[bytes], int]:
    """The values a correct read_committed reader returns from ``topic``/``partition`` (decided from
    the markers in the log itself), and the partition's high watermark. A transaction left open
    (no marker yet) fails the check unless ``open_ok``."""
    host, _, port = address.rpartition(":")
    out: list[bytes] = []
    pending: dict[int, list[bytes]] = {}  # producer id -> records of its open transaction
    offset, high_watermark = 0, None
    with BrokerConnection(host, int(port)) as connection:
        connection.connect()
        for _ in range(_MAX_POLLS):
            body = connection.request("Fetch", {
                "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                "topics": [{"topic": topic, "topic_id": None, "partitions": [{
                    "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                    "log_start_offset": -1, "partition_max_bytes": 1 << 20, "last_fetched_epoch": -1}]}]})
            if not body["responses"]:  # Tansu answers a fetch that found nothing yet without the partition
                continue
            data = body["responses"][0]["partitions"][0]
            assert data["error_code"] == 0, data
            high_watermark = data["high_watermark"]
            if offset >= high_watermark:
                break
            for batch, records in decode_fetch(data["records"] or b""):
                if batch.is_control:
                    kind = int.from_bytes(records[0].key[2:4], "big")
                    kept = pending.pop(batch.producer_id, [])
                    if kind == 1:  # COMMIT
                        out.extend(kept)
                elif batch.is_transactional:
                    pending.setdefault(batch.producer_id, []).extend(r.value for r in records if r.offset >= offset)
                else:
                    out.extend(r.value for r in records if r.offset >= offset)
                offset = max(offset, batch.base_offset + batch.last_offset_delta + 1)
    assert open_ok or not pending, f"{topic}-{partition}: transactions without a marker below the high watermark: {pending}"
    return out, high_watermark


def _consume(address: str, partitions: list[tuple[str, int]], isolation: str,
             ends: dict[tuple[str, int], int] | None = None) -> dict[tuple[str, int], list[bytes]]:
    """Everything ``partitions`` hold up to ``ends`` (default: their end offsets at ``isolation``,
    the last stable offset for read_committed), read by our consumer; with ``ends`` given, a few
    more polls must return nothing past them."""
    with Consumer(bootstrap_servers=address, isolation_level=isolation, auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        consumer.assign(partitions)
        given = ends is not None
        ends = ends if given else consumer.end_offsets(partitions)
        got: dict[tuple[str, int], list[bytes]] = {tp: [] for tp in partitions}
        for _ in range(_MAX_POLLS):
            if all(consumer.position(*tp) >= ends[tp] for tp in partitions):
                break
            for record in consumer.poll(200):
                got[(record.topic, record.partition)].append(record.value)
        assert all(consumer.position(*tp) >= ends[tp] for tp in partitions), (ends, got)
        if given:
            for _ in range(3):
                assert consumer.poll(200) == []
            assert {tp: consumer.position(*tp) for tp in partitions} == ends
    return got


def _transaction(producer: Producer, writes: dict[tuple[str, int], list[bytes]], *, commit: bool) -> None:
    producer.begin_transaction()
    futures = [producer.send(topic, value, partition=partition)
               for (topic, partition), values in writes.items() for value in values]
    producer.flush()
    assert [future.exception(0) for future in futures if future.exception(0)] == []
    if commit:
        producer.commit_transaction()
    else:
        producer.abort_transaction()


# --- against a broker ----------------------------------------------------------------------------


def test_commit_and_abort_across_partitions_and_topics(txn_broker):
    orders, payments = _topic(txn_broker, 2), _topic(txn_broker, 1)
    partitions = [(orders, 0), (orders, 1), (payments, 0)]
    with _producer(txn_broker, "across") as producer:
        producer.init_transactions()
        first = {tp: [b"first-%s-%d-%d" % (tp[0].encode(), tp[1], i) for i in range(3)] for tp in partitions}
        aborted = {tp: [b"aborted-%s-%d-%d" % (tp[0].encode(), tp[1], i) for i in range(2)] for tp in partitions}
        last = {(orders, 1): [b"last-1"], (payments, 0): [b"last-p"]}
        _transaction(producer, first, commit=True)
        _transaction(producer, aborted, commit=False)
        _transaction(producer, last, commit=True)
    for tp in partitions:
        values, _ = committed_view(txn_broker.address, *tp)
        assert values == first[tp] + last.get(tp, [])
    uncommitted = _consume(txn_broker.address, partitions, "read_uncommitted")
    for tp in partitions:  # read_uncommitted returns aborted records (as Kafka's consumers do), no markers
        assert uncommitted[tp] == first[tp] + aborted[tp] + last.get(tp, [])


# Tansu 0.6 answers read_committed fetches with no AbortedTransactions: its read_committed consumers
# get aborted records. So this runs against logstore serve only.
@LOGSTORE_ONLY
def test_read_committed_consumer_leaves_out_aborted_records(txn_broker):
    topic = _topic(txn_broker, 2)
    partitions = [(topic, 0), (topic, 1)]
    with _producer(txn_broker, "leave-out") as producer:
        producer.init_transactions()
        _transaction(producer, {tp: [b"a%d" % tp[1]] for tp in partitions}, commit=False)
        _transaction(producer, {tp: [b"c%d" % tp[1]] for tp in partitions}, commit=True)
        _transaction(producer, {tp: [b"x%d" % tp[1]] for tp in partitions}, commit=False)
    assert _consume(txn_broker.address, partitions, "read_committed") == {tp: [b"c%d" % tp[1]] for tp in partitions}


def test_a_read_committed_consumer_stops_at_an_open_transaction(txn_broker):
    topic = _topic(txn_broker, 1)
    tp = (topic, 0)
    with Producer(bootstrap_servers=txn_broker.address, linger_ms=0) as plain, \
            _producer(txn_broker, "open") as producer:
        plain.send(topic, b"before", partition=0).result(30)
        producer.init_transactions()
        producer.begin_transaction()
        first = producer.send(topic, b"in-transaction", partition=0)
        producer.flush()
        plain.send(topic, b"after", partition=0).result(30)  # not transactional, but behind the open one
        stable = first.result(0).offset  # the last stable offset: the open transaction's first
        with Consumer(bootstrap_servers=txn_broker.address, isolation_level="read_committed",
                      auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
            consumer.assign([tp])
            assert consumer.end_offsets([tp])[tp] == stable
        assert _consume(txn_broker.address, [tp], "read_committed", {tp: stable})[tp] == [b"before"]
        assert _consume(txn_broker.address, [tp], "read_uncommitted")[tp] == [b"before", b"in-transaction", b"after"]
        producer.commit_transaction()
    ends = {tp: committed_view(txn_broker.address, topic, 0)[1]}
    assert _consume(txn_broker.address, [tp], "read_committed", ends)[tp] == [b"before", b"in-transaction", b"after"]


def test_a_second_producer_with_the_same_id_fences_the_first(txn_broker):
    topic = _topic(txn_broker, 1)
    zombie = _producer(txn_broker, "fenced")
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(topic, b"zombie", partition=0)
        zombie.flush()
        with _producer(txn_broker, "fenced") as successor:
            successor.init_transactions()  # aborts the zombie's open transaction, bumps the epoch
            assert successor.producer_id == zombie.producer_id and successor.producer_epoch > zombie.producer_epoch
            late = zombie.send(topic, b"late", partition=0)  # refused: an old epoch
            zombie.flush()
            assert late.exception(0) is not None
            # Kafka's partition leaders refuse the old epoch with INVALID_PRODUCER_EPOCH (abortable: the
            # abort's EndTxn is then refused PRODUCER_FENCED), Tansu with PRODUCER_FENCED at once
            with pytest.raises(TransactionError) as failure:
                zombie.commit_transaction()
            if not isinstance(failure.value, ProducerFencedError):
                assert isinstance(failure.value, AbortableTransactionError)
                with pytest.raises(ProducerFencedError):
                    zombie.abort_transaction()
            with pytest.raises(FatalTransactionError):  # and every later call
                zombie.begin_transaction()
            with pytest.raises(FatalTransactionError):
                zombie.send(topic, b"later", partition=0)
            _transaction(successor, {(topic, 0): [b"successor"]}, commit=True)
    finally:
        zombie.close()
    assert committed_view(txn_broker.address, topic, 0)[0] == [b"successor"]


def test_offsets_sent_to_a_transaction_are_committed_with_it(txn_broker):
    source, sink = _topic(txn_broker, 2), _topic(txn_broker, 1)
    group = f"txn-group-{next(_names)}"
    with _producer(txn_broker, "offsets") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(sink, b"out-1", partition=0)
        producer.send_offsets_to_transaction({(source, 0): 5, (source, 1): 7}, group)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(sink, b"out-2", partition=0)
        producer.send_offsets_to_transaction({(source, 0): 9}, group)
        producer.abort_transaction()
        with BrokerGroupAdmin.connect(txn_broker.address) as groups:
            assert groups.committed_entries(group, [(source, 0), (source, 1)], require_stable=True) == {
                (source, 0): (5, ""), (source, 1): (7, "")}
        with Consumer(bootstrap_servers=txn_broker.address, group_id=group, enable_auto_commit=False) as consumer:
            assert consumer.committed(source, 0) == 5 and consumer.committed(source, 1) == 7
    assert committed_view(txn_broker.address, sink, 0)[0] == [b"out-1"]


# --- without a broker ----------------------------------------------------------------------------


def test_transaction_calls_out_of_order_are_refused_and_name_the_state():
    producer = Producer(bootstrap_servers="127.0.0.1:9", transactional_id="order", max_block_ms=100)
    try:
        with pytest.raises(TransactionStateError, match="uninitialized"):
            producer.begin_transaction()
        with pytest.raises(TransactionStateError, match="send: not allowed while the producer is uninitialized"):
            producer.send("t", b"v", partition=0)
        with pytest.raises(TransactionStateError):
            producer.commit_transaction()
        assert isinstance(TransactionStateError("x"), (TransactionError, ValueError))
    finally:
        producer.close(0)
    with Producer(bootstrap_servers="127.0.0.1:9") as plain, pytest.raises(TransactionStateError, match="transactional.id"):
        plain.init_transactions()


@pytest.mark.parametrize("settings, message", [
    ({"transactional_id": ""}, "transactional.id must be a non-empty str"),
    ({"transactional_id": "t", "enable_idempotence": False}, "transactional.id needs idempotence"),
    ({"transactional_id": "t", "acks": 1}, "transactional.id needs idempotence, so acks=all"),
    ({"transactional_id": "t", "transaction_timeout_ms": 0}, "transaction.timeout.ms must be an int >= 1"),
])
def test_transactional_settings_are_checked(settings, message):
    with pytest.raises(ValueError, match=message):
        Producer(bootstrap_servers="127.0.0.1:9", **settings)


def test_the_transactional_defaults_are_kafkas():
    with Producer(bootstrap_servers="127.0.0.1:9", transactional_id="defaults") as producer:
        assert producer.config["transaction.timeout.ms"] == 60_000 and producer.config["enable.idempotence"] is True
        assert producer.transactional_id == "defaults"


# --- logstore mirror --exactly-once --------------------------------------------------------------

# A mirror in its own process, made to stop inside its fifth transaction: records sent and flushed,
# the group's offset sent, the commit not made. It prints a line there and waits to be killed.
_MIRROR_THAT_HANGS = """
import sys, time
from logstore.client import mirror as module
module._CHUNK_RECORDS = 50
original = module.BrokerEnd.write_transaction
calls = []

def write_then_hang(self, topic, partition, records, group, next_offset):
    calls.append(topic)
    if len(calls) < 5:
        return original(self, topic, partition, records, group, next_offset)
    producer = self._transactional
    producer.begin_transaction()
    for r in records:
        producer.send(topic, r.value, key=r.key, headers=r.headers, partition=partition, timestamp_ms=r.timestamp_ms)
    producer.send_offsets_to_transaction({(topic, partition): next_offset}, group)
    producer.flush()
    print("inside the transaction", flush=True)
    time.sleep(600)

module.BrokerEnd.write_transaction = write_then_hang
from logstore.cli.main import main
main(sys.argv[1:])
"""


def _source_store(path: str) -> dict[int, list[bytes]]:
    with LogManager([path]) as store:
        store.create_topic("events", 2)
        for partition in range(2):
            store.append("events", [Record(b"k%d" % i, b"e%d-%d" % (partition, i), (), 1_700_000_000_000 + i)
                                    for i in range(150)], partition=partition)
    return {partition: [b"e%d-%d" % (partition, i) for i in range(150)] for partition in range(2)}


def test_a_killed_exactly_once_mirror_restarted_copies_each_record_once(txn_broker, tmp_path):
    source = str(tmp_path / "source")
    expected = _source_store(source)
    group = f"mirror-{txn_broker.kind}"
    arguments = ["mirror", "--from", source, "--to", txn_broker.address, "--exactly-once", "--group", group, "events"]
    process = subprocess.Popen([sys.executable, "-P", "-c", _MIRROR_THAT_HANGS, *arguments], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line == "inside the transaction\n", (line, process.stderr.read() if process.poll() is not None else "")
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
        process.stdout.close()
        process.stderr.close()
    # Four transactions of 50 committed (partition 0: 150 records in 3, then 50 of partition 1); the
    # fifth left its records in the log, uncommitted
    assert committed_view(txn_broker.address, "events", 0)[0] == expected[0]
    assert committed_view(txn_broker.address, "events", 1, open_ok=True)[0] == expected[1][:50]
    assert _consume(txn_broker.address, [("events", 1)], "read_uncommitted")[("events", 1)] == expected[1][:100]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 0, (result.output, result.exception)
    assert "events: copied 100 records" in result.output
    for partition in range(2):  # every record once: the killed run's transaction was aborted
        assert committed_view(txn_broker.address, "events", partition)[0] == expected[partition]
    with BrokerGroupAdmin.connect(txn_broker.address) as groups:
        committed = groups.committed_entries(group, [("events", 0), ("events", 1)], require_stable=True)
    assert {tp: entry[0] for tp, entry in committed.items()} == {("events", 0): 150, ("events", 1): 150}
    again = CliRunner().invoke(main, arguments)
    assert again.exit_code == 0 and "events: copied 0 records" in again.output


def test_mirror_exactly_once_into_a_data_dir_is_a_usage_error(tmp_path):
    source = str(tmp_path / "source")
    _source_store(source)
    result = CliRunner().invoke(main, ["mirror", "--from", source, "--to", str(tmp_path / "copy"), "--exactly-once"])
    assert result.exit_code == 2
    assert "--exactly-once needs a Kafka broker (HOST:PORT) as the destination" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "copy").exists()


# Tansu 0.6 stores a batch larger than max.message.bytes: nothing is refused there. So this runs
# against logstore serve only.
@LOGSTORE_ONLY
def test_a_refused_record_makes_the_transaction_abortable_and_the_producer_goes_on(txn_broker):
    topic = f"txn-small-{next(_names)}"
    with BrokerAdmin(txn_broker.address) as admin:
        admin.create_topic(topic, 1, {"max.message.bytes": "1024"})
    with _producer(txn_broker, "refused", batch_size=64) as producer:  # a batch per record
        producer.init_transactions()
        epoch = producer.producer_epoch
        producer.begin_transaction()
        producer.send(topic, b"fits", partition=0).result(30)
        too_large = producer.send(topic, b"x" * 4096, partition=0)
        behind = []
        for index in range(3):
            try:
                behind.append(producer.send(topic, b"behind-%d" % index, partition=0))
            except AbortableTransactionError:  # the refusal came back first: abortable already
                break
        producer.flush(60)  # the batches behind the refused one fail at once, not after delivery.timeout.ms
        assert isinstance(too_large.exception(0), BrokerResponseError)  # MESSAGE_TOO_LARGE itself
        assert all(isinstance(future.exception(0), TransactionError) for future in behind)
        with pytest.raises(AbortableTransactionError, match="MESSAGE_TOO_LARGE"):
            producer.commit_transaction()
        with pytest.raises(AbortableTransactionError):  # nothing more until the abort
            producer.send(topic, b"more", partition=0)
        producer.abort_transaction()
        assert producer.producer_epoch > epoch  # a new epoch: the partition's sequences start again
        _transaction(producer, {(topic, 0): [b"after"]}, commit=True)
    assert committed_view(txn_broker.address, topic, 0)[0] == [b"after"]


# Tansu 0.6 answers read_committed fetches with no AbortedTransactions: its aborted records cannot be
# told apart. So this runs against logstore serve only.
@LOGSTORE_ONLY
def test_a_mirror_copies_no_aborted_record(txn_broker, tmp_path):
    topic = _topic(txn_broker, 2)
    partitions = [(topic, 0), (topic, 1)]
    with _producer(txn_broker, "mirrored") as producer:
        producer.init_transactions()
        _transaction(producer, {tp: [b"kept-%d" % tp[1]] for tp in partitions}, commit=True)
        _transaction(producer, {tp: [b"aborted-%d" % tp[1]] for tp in partitions}, commit=False)
        _transaction(producer, {(topic, 1): [b"kept-again"]}, commit=True)
    copy = str(tmp_path / "copy")
    result = CliRunner().invoke(main, ["mirror", "--from", txn_broker.address, "--to", copy, topic])
    assert result.exit_code == 0, (result.output, result.exception)
    with LogManager([copy], read_only=True) as store:
        assert [r.value for r in store.get_log(topic, 0).iter_records()] == [b"kept-0"]
        assert [r.value for r in store.get_log(topic, 1).iter_records()] == [b"kept-1", b"kept-again"]


# Tansu 0.6 ignores OffsetFetch's require_stable (it answers the offset committed before). So this runs
# against logstore serve only.
@LOGSTORE_ONLY
def test_a_read_committed_consumer_does_not_start_from_offsets_a_transaction_holds(txn_broker):
    source = _topic(txn_broker, 1)
    group = f"txn-stable-{next(_names)}"
    settings = dict(bootstrap_servers=txn_broker.address, group_id=group, enable_auto_commit=False,
                    default_api_timeout_ms=300)
    with _producer(txn_broker, "stable") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({(source, 0): 3}, group)  # pending until the commit
        with Consumer(isolation_level="read_uncommitted", **settings) as uncommitted:
            assert uncommitted.committed(source, 0) is None
        with Consumer(isolation_level="read_committed", **settings) as committed:
            try:
                found = committed.committed(source, 0)
            except BrokerResponseError as exc:  # asked again until default.api.timeout.ms
                assert exc.error_name == "UNSTABLE_OFFSET_COMMIT"
            else:
                pytest.fail(f"{txn_broker.kind} answered {found} for an offset a transaction holds pending")
        producer.commit_transaction()
    with Consumer(isolation_level="read_committed", **settings) as committed:
        assert committed.committed(source, 0) == 3
