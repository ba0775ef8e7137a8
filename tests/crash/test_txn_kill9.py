"""Transactions through kill -9 of ``logstore serve``: a committed transaction is visible whole or
was not acknowledged, an aborted one is never visible, an open one is aborted whole by its timeout.

Each round starts ``logstore serve`` (127.0.0.1, a free port) on one data dir and runs two of three
transactional ids (the round picks which, so an id left with an open transaction is sometimes not
taken up again and only its timeout ends it), each a thread with our client's ``Producer``: small
transactions over 2 topics x 2 partitions (1-3 records on 1-4 partitions, each transaction's offset
for a group of its own id sent with it), committed or aborted at random, recording which commits
were acknowledged. The server is SIGKILLed (by pid) at a random moment. In even rounds the threads
then give up on their dead server (short client timeouts; the next server listens on another port,
so a late retry never reaches it). In odd rounds the server is started again on the same port,
once or twice, while the producers run on: their requests in flight are retried by the next server
(a produce, AddPartitionsToTxn, EndTxn found prepared or complete after the restart), with client
timeouts and a transaction timeout long enough to outlive a restart; then they stop and the server
is killed once more. After the rounds, one more server gets a transaction with records in every
partition and its offsets, acknowledged but neither committed nor aborted, and is killed under it
(its id never comes back: only the timeout can end it). Then the server is started once more, no
producer runs, and:

- within ``transaction.timeout.ms`` plus the abort scanner's interval (small here) and a margin,
  every partition's last stable offset reaches its log end offset (ListOffsets read_committed =
  read_uncommitted): nothing is left open forever;
- a read_committed consumer reads every partition: each record's value names its transaction and
  its place in it, so every acknowledged transaction is there whole (every record it sent, in every
  partition, once); any transaction found is there whole and had its commit asked for; an aborted
  one is never there;
- each id's group has as its committed offset that of its last transaction found (or none).

Settings: ``LOGSTORE_TXN_KILL9_SECONDS`` (default 10: rounds are run until then, at least
``LOGSTORE_TXN_KILL9_MIN_ROUNDS``, default 3, at most 12) and ``LOGSTORE_TXN_KILL9_SEED``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from logstore import LogManager
from logstore.client.consumer import Consumer
from logstore.client.errors import BrokerResponseError
from logstore.client.producer import Producer

BUDGET_S = float(os.environ.get("LOGSTORE_TXN_KILL9_SECONDS", "10"))
MIN_ROUNDS = int(os.environ.get("LOGSTORE_TXN_KILL9_MIN_ROUNDS", "3"))
MAX_ROUNDS = 12
TIMEOUT_MS = 2000  # the producers' transaction.timeout.ms
CLEANUP_INTERVAL_MS = 200
TOPICS = ("ka", "kb")
PARTITIONS = [(topic, p) for topic in TOPICS for p in range(2)]
IDS = ("tx0", "tx1", "tx2")
OPEN_ID = "tx-open"
SETTINGS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": CLEANUP_INTERVAL_MS,
            "transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3,
            "group.initial.rebalance.delay.ms": 0}
CLIENT = {"transaction_timeout_ms": TIMEOUT_MS, "request_timeout_ms": 2000, "max_block_ms": 3000,
          "delivery_timeout_ms": 4000, "retry_backoff_ms": 50, "reconnect_backoff_ms": 20,
          "reconnect_backoff_max_ms": 200}
# Producers that live through restarts on the same port: they wait for the next server (their requests
# are retried there) and their transactions outlive a restart.
ACROSS_TIMEOUT_MS = 15000
CLIENT_ACROSS = {**CLIENT, "transaction_timeout_ms": ACROSS_TIMEOUT_MS, "max_block_ms": 20000,
                 "delivery_timeout_ms": 20000}


class Serve:
    """``logstore serve`` as a child process, stopped only by its pid."""

    def __init__(self, data: Path, log_path: Path, port: int = 0) -> None:
        command = [sys.executable, "-P", "-m", "logstore.cli", "--dir", str(data)]
        for key, value in SETTINGS.items():
            command += ["--set", f"{key}={value}"]
        command += ["serve", "--listen", f"127.0.0.1:{port}"]
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                            text=True)
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(60)
        line = got[0] if got else ""
        if not line.startswith("logstore serve: listening on "):
            self.kill9()
            raise AssertionError(f"logstore serve did not start: {line!r}\n{self.log_tail()}")
        self.address = line.split("listening on ", 1)[1].split()[0]
        self.port = int(self.address.rsplit(":", 1)[1])

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def kill9(self) -> None:
        """SIGKILL (by pid) and reap; nothing once it has ended."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        self.process.stdout.close()

    def stop(self) -> int:
        """SIGTERM (a clean shutdown) and its exit code; SIGKILL after 30 s."""
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"logstore serve ignored SIGTERM\n{self.log_tail()}") from None
        finally:
            self.process.stdout.close()


@dataclass
class Ledger:
    """What the producers did, by transaction name ("<id>.<serial>")."""

    sent: dict[str, dict[tuple[str, int], list[bytes]]] = field(default_factory=dict)
    commit_asked: set[str] = field(default_factory=set)
    acknowledged: set[str] = field(default_factory=set)
    abort_asked: set[str] = field(default_factory=set)
    serials: dict[str, int] = field(default_factory=lambda: dict.fromkeys(IDS, 0))
    errors: Counter = field(default_factory=Counter)
    details: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def produce(address: str, transactional_id: str, rng: random.Random, stop: threading.Event, ledger: Ledger,
            client: dict) -> None:
    """Transactions of one transactional id until ``stop`` or an error (the server died)."""
    producer = None
    try:
        producer = Producer(bootstrap_servers=address, transactional_id=transactional_id, linger_ms=1,
                            client_id=transactional_id, **client)
        producer.init_transactions()
        while not stop.is_set():
            with ledger.lock:
                serial = ledger.serials[transactional_id] = ledger.serials[transactional_id] + 1
            name = f"{transactional_id}.{serial}"
            sent = ledger.sent[name] = {}
            producer.begin_transaction()
            for topic, partition in rng.sample(PARTITIONS, rng.randint(1, len(PARTITIONS))):
                count = rng.randint(1, 3)
                for i in range(count):
                    value = f"{name}|{topic}-{partition}|{i}|{count}".encode()
                    producer.send(topic, value, key=b"k", partition=partition)
                    sent.setdefault((topic, partition), []).append(value)
            producer.send_offsets_to_transaction({("ka", 0): serial}, f"g-{transactional_id}")
            if rng.random() < 0.7:
                ledger.commit_asked.add(name)
                producer.commit_transaction(timeout_s=5)
                ledger.acknowledged.add(name)
            else:
                ledger.abort_asked.add(name)
                producer.abort_transaction(timeout_s=5)
    except Exception as exc:  # noqa: BLE001 - the server was killed under it: counted, checked below
        with ledger.lock:
            ledger.errors[f"{type(exc).__name__}{'' if stop.is_set() else ' (before the stop)'}"] += 1
            if len(ledger.details) < 10:
                ledger.details.append(f"{transactional_id}: {exc!r}")
    finally:
        if producer is not None:
            try:
                producer.close(timeout_s=1)
            except Exception:  # noqa: BLE001 - closing a producer whose server is gone
                pass


def leave_open(address: str, ledger: Ledger) -> Producer:
    """A transaction of ``OPEN_ID`` with records in every partition (acknowledged) and its offsets
    sent, neither committed nor aborted: the server is killed under it and the id never comes back,
    so only the transaction's timeout can end it."""
    producer = Producer(bootstrap_servers=address, transactional_id=OPEN_ID, linger_ms=1, client_id=OPEN_ID,
                        **CLIENT)
    producer.init_transactions()
    producer.begin_transaction()
    name = f"{OPEN_ID}.1"
    sent = ledger.sent[name] = {}
    for topic, partition in PARTITIONS:
        value = f"{name}|{topic}-{partition}|0|1".encode()
        producer.send(topic, value, key=b"k", partition=partition)
        sent[(topic, partition)] = [value]
    producer.send_offsets_to_transaction({("ka", 0): 1}, f"g-{OPEN_ID}")
    producer.flush(10)
    return producer


def offsets(consumer: Consumer) -> dict[tuple[str, int], int]:
    return consumer.end_offsets(PARTITIONS)


def read_committed(address: str) -> dict[tuple[str, int], list[bytes]]:
    """Every record a read_committed consumer gets, per partition, up to the last stable offsets."""
    with Consumer(bootstrap_servers=address, isolation_level="read_committed", auto_offset_reset="earliest",
                  request_timeout_ms=10000) as consumer:
        ends = offsets(consumer)
        consumer.assign(PARTITIONS)
        consumer.seek_to_beginning(*PARTITIONS)
        found: dict[tuple[str, int], list[bytes]] = {tp: [] for tp in PARTITIONS}
        deadline = time.monotonic() + 60
        while any(consumer.position(*tp) < ends[tp] for tp in PARTITIONS):
            assert time.monotonic() < deadline, {tp: (consumer.position(*tp), ends[tp]) for tp in PARTITIONS}
            for record in consumer.poll(500):
                found[(record.topic, record.partition)].append(record.value)
        return found


def wait_until_stable(address: str) -> tuple[dict, dict]:
    """(last stable offsets, log end offsets) once they are equal, or as they are when the bound
    (the transaction timeout, the abort scanner's interval and a margin) has passed."""
    with Consumer(bootstrap_servers=address, isolation_level="read_committed", request_timeout_ms=10000) as stable, \
            Consumer(bootstrap_servers=address, request_timeout_ms=10000) as plain:
        deadline = time.monotonic() + (max(TIMEOUT_MS, ACROSS_TIMEOUT_MS) + CLEANUP_INTERVAL_MS) / 1000 + 20
        while True:
            lso, leo = offsets(stable), offsets(plain)
            if lso == leo or time.monotonic() > deadline:
                return lso, leo
            time.sleep(0.1)


@pytest.mark.slow
def test_kill9_during_transactions(tmp_path: Path) -> None:
    seed = int(os.environ.get("LOGSTORE_TXN_KILL9_SEED", random.SystemRandom().getrandbits(32)))
    rng = random.Random(seed)
    data = tmp_path / "data"
    log_path = tmp_path / "serve.log"
    with LogManager([str(data)]) as store:
        for topic in TOPICS:
            store.create_topic(topic, partitions=2)
    ledger = Ledger()
    started = time.monotonic()
    rounds = 0
    restarts_under_producers = 0
    while rounds < MIN_ROUNDS or (time.monotonic() - started < BUDGET_S and rounds < MAX_ROUNDS):
        # Odd rounds: the producers live through one or two kills, each server followed by the next
        # on the same port; even rounds: they give up on their dead server.
        across = rounds % 2 == 1
        server = Serve(data, log_path)
        stop = threading.Event()
        chosen = [IDS[(rounds + k) % len(IDS)] for k in (0, 1)]
        threads = [threading.Thread(target=produce, args=(server.address, tid, random.Random(rng.random()), stop,
                                                          ledger, CLIENT_ACROSS if across else CLIENT), daemon=True)
                   for tid in chosen]
        try:
            for thread in threads:
                thread.start()
            time.sleep(rng.uniform(0.3, 1.5))
            for _ in range(rng.randint(1, 2) if across else 0):
                server.kill9()
                server = Serve(data, log_path, server.port)
                restarts_under_producers += 1
                time.sleep(rng.uniform(0.5, 1.5))
            if across:
                stop.set()  # they end their transaction with this server, then stop
                for thread in threads:
                    thread.join(60)
        finally:
            server.kill9()
            stop.set()
        for thread in threads:
            thread.join(30)
            assert not thread.is_alive(), "a producer thread did not give up on its dead server"
        rounds += 1

    server = Serve(data, log_path)
    try:
        left_open = leave_open(server.address, ledger)
    finally:
        server.kill9()
    left_open.close(timeout_s=1)

    server = Serve(data, log_path)
    try:
        lso, leo = wait_until_stable(server.address)
        found = read_committed(server.address)
        committed = {}
        for tid in (*IDS, OPEN_ID):
            with Consumer(bootstrap_servers=server.address, group_id=f"g-{tid}", enable_auto_commit=False,
                          isolation_level="read_committed", request_timeout_ms=10000) as consumer:
                try:
                    committed[tid] = consumer.committed("ka", 0)
                except BrokerResponseError as exc:  # UNSTABLE_OFFSET_COMMIT: a transaction left open
                    committed[tid] = repr(exc)
    finally:
        code = server.stop()
    assert code == 0, f"logstore serve exited {code}\n{server.log_tail()}"

    problems = []
    if lso != leo:
        problems.append(f"transactions left open: last stable offsets {lso}, log end offsets {leo}")
    shown: dict[str, dict[tuple[str, int], list[bytes]]] = {}
    for tp, values in found.items():
        for value in values:
            name, where, _i, _count = value.decode().split("|")
            if where != f"{tp[0]}-{tp[1]}":
                problems.append(f"{value!r} read from {tp}")
            shown.setdefault(name, {}).setdefault(tp, []).append(value)
    for name, parts in shown.items():
        if parts != ledger.sent.get(name):
            problems.append(f"{name} visible in part or twice: {parts}, sent {ledger.sent.get(name)}")
        if name not in ledger.commit_asked:
            problems.append(f"{name} visible though its commit was never asked for"
                            f"{' (it was aborted)' if name in ledger.abort_asked else ''}")
    for name in sorted(ledger.acknowledged - set(shown)):
        problems.append(f"{name}: its commit was acknowledged but it is not visible")
    for tid in (*IDS, OPEN_ID):
        serials = [int(name.split(".")[1]) for name in shown if name.split(".")[0] == tid]
        if committed[tid] != (max(serials) if serials else None):
            problems.append(f"group g-{tid}: committed offset {committed[tid]}, its last visible transaction "
                            f"{max(serials) if serials else None}")
    print(f"\ntransactions through kill -9: {rounds} rounds, {restarts_under_producers} restarts under running "
          f"producers, {len(ledger.sent)} transactions, "
          f"{len(ledger.acknowledged)} commits acknowledged, {len(ledger.abort_asked)} aborts asked, "
          f"{len(ledger.commit_asked - ledger.acknowledged)} commits in flight at a kill, {len(shown)} visible; "
          f"producer errors {dict(ledger.errors)}; seed {seed}")
    for text in ledger.details:
        print("  " + text)
    assert not problems, f"seed {seed} (LOGSTORE_TXN_KILL9_SEED)\n" + "\n".join(problems[:20])
    assert ledger.acknowledged and ledger.abort_asked, "too little happened to check anything"
