"""`logstore serve` under a memory cap and a descriptor cap while hostile connections run beside a
well-behaved producer and consumer.

The server runs as its own process with RLIMIT_AS and RLIMIT_NOFILE lowered. For a time budget
(LOGSTORE_HOSTILE_S, default 15 s) attackers: declare 100 MB frames and send a little of each;
send big frames half way and stall; trickle frames a byte at a time (slowloris); pipeline Fetch and
Metadata requests without reading an answer; flood the listener with more connections than the
descriptor limit allows, churning them; and log in with wrong passwords on a SASL listener. Meanwhile
a producer appends numbered batches with acks=all and a consumer follows the topic.

Asserted: the server's peak RSS stays bounded; it does not spin (CPU below wall time); every batch
the producer sent was acknowledged and is read back once, in order; once the attack stops a new
client is answered; the server stops cleanly on SIGTERM; `logstore check` passes on the store. The
figures are printed at the end of the run (tests/conftest.py) and written to
test-results/hostile_load.txt.
"""

from __future__ import annotations

import os
import random
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from logstore import LogManager, Record
from logstore.server.protocol.codec import encode_request
from logstore.server.security.credentials import CredentialStore
from logstore.tools.check import verify_store
from wire_client import WireClient

BUDGET_S = float(os.environ.get("LOGSTORE_HOSTILE_S", "15"))
RESULTS_DIR = Path(__file__).resolve().parents[2] / "test-results"
MEMORY_CAP = 1 << 30  # RLIMIT_AS of the server process
DESCRIPTOR_CAP = 256  # RLIMIT_NOFILE of the server process (soft and hard)
RSS_BOUND = 400 << 20  # what the server may reach under the attack below
PRODUCE, FETCH, METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE = 0, 1, 3, 17, 36

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads RSS and CPU from /proc")


def status(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def capped() -> None:  # runs in the server's process before it starts
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTOR_CAP, DESCRIPTOR_CAP))


class Attack:
    """The hostile connections, each kind on a thread of its own, until ``stop`` is set."""

    def __init__(self, plain: tuple[str, int], sasl: tuple[str, int]) -> None:
        self.plain, self.sasl = plain, sasl
        self.stop = threading.Event()
        self.connections = 0
        self.bytes_sent = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=getattr(self, name), name=name, daemon=True)
                        for name in ("declare_huge", "half_frames", "slowloris", "unread_pipelines", "flood",
                                     "bad_logins")]

    def connect(self, address, timeout_s: float = 1.0) -> socket.socket | None:
        try:
            sock = socket.create_connection(address, timeout=timeout_s)
        except OSError:
            return None
        with self.lock:
            self.connections += 1
        return sock

    def send(self, sock: socket.socket, data: bytes) -> bool:
        try:
            sock.sendall(data)
        except OSError:
            return False
        with self.lock:
            self.bytes_sent += len(data)
        return True

    def run(self) -> None:
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    @staticmethod
    def close_all(sockets) -> None:
        for sock in sockets:
            sock.close()
        sockets.clear()

    def declare_huge(self) -> None:
        """Frames of a declared 100 MB, 32 KiB of each sent, kept open (40 at a time, churned)."""
        held: list[socket.socket] = []
        while not self.stop.is_set():
            sock = self.connect(self.plain)
            if sock is not None and self.send(sock, struct.pack(">i", 100_000_000) + os.urandom(32 << 10)):
                held.append(sock)
            if len(held) > 40:
                held.pop(0).close()
            self.stop.wait(0.02)
        self.close_all(held)

    def half_frames(self) -> None:
        """Frames of 20 MB sent half way, then stalled: they take real memory, and never complete."""
        held: list[socket.socket] = []
        while not self.stop.is_set() and len(held) < 12:
            sock = self.connect(self.plain, timeout_s=5)
            if sock is not None:
                sock.settimeout(5)
                header = struct.pack(">ihhih", 20_000_000, 0, 8, 1, 1) + b"t"
                if self.send(sock, header + os.urandom(10_000_000)):
                    held.append(sock)
                else:
                    sock.close()
        self.stop.wait()
        self.close_all(held)

    def slowloris(self) -> None:
        """20 connections, each trickling a frame one byte every 0.2 s."""
        frame = encode_request(METADATA, 1, 1, "loris", {"topics": None})
        held = [sock for sock in (self.connect(self.plain) for _ in range(20)) if sock is not None]
        position = 0
        while not self.stop.is_set():
            for sock in held:
                self.send(sock, frame[position % len(frame):position % len(frame) + 1])
            position += 1
            self.stop.wait(0.2)
        self.close_all(held)

    def unread_pipelines(self) -> None:
        """10 connections pipelining whole-partition Fetches and Metadata requests, never reading."""
        fetch = encode_request(FETCH, 11, 1, "unread", {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 0x7FFFFFFF, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": "good", "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                         "log_start_offset": -1, "partition_max_bytes": 0x7FFFFFFF}]}]})
        metadata = encode_request(METADATA, 1, 2, "unread", {"topics": None})
        held = [sock for sock in (self.connect(self.plain) for _ in range(10)) if sock is not None]
        for sock in held:
            sock.setblocking(False)
        while not self.stop.is_set():
            for sock in held:
                try:
                    sock.send(fetch + metadata * 20)  # what the kernel takes; the rest is dropped
                except OSError:
                    pass
            self.stop.wait(0.05)
        self.close_all(held)

    def flood(self) -> None:
        """In the second half: more connections than the server has descriptors, opened and closed in
        a churn (the other attackers connect first: once the flood runs, new clients wait)."""
        held: list[socket.socket] = []
        rng = random.Random(1)
        if self.stop.wait(BUDGET_S / 2):
            return
        while not self.stop.is_set():
            sock = self.connect(self.plain, timeout_s=0.3)
            if sock is not None:
                held.append(sock)
            if len(held) > 400 or (held and rng.random() < 0.2):
                held.pop(rng.randrange(len(held))).close()
        self.close_all(held)

    def bad_logins(self) -> None:
        """Wrong PLAIN passwords on the SASL listener, without waiting for the (held) answers."""
        handshake = encode_request(SASL_HANDSHAKE, 1, 1, "bad", {"mechanism": "PLAIN"})
        held: list[socket.socket] = []
        attempt = 0
        while not self.stop.is_set():
            sock = self.connect(self.sasl)
            if sock is not None:
                attempt += 1
                token = b"\0alice\0wrong-%d" % attempt
                self.send(sock, handshake + encode_request(SASL_AUTHENTICATE, 1, 2, "bad", {"auth_bytes": token}))
                held.append(sock)
            if len(held) > 50:
                held.pop(0).close()
            self.stop.wait(0.01)
        self.close_all(held)


class GoodClients:
    """A producer (acks=all, numbered batches of 10) and a consumer following the topic."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.stop = threading.Event()
        self.acknowledged: list[int] = []
        self.failures: list[str] = []
        self.read: list[int] = []
        self.latencies_ms: list[float] = []

    def connect(self) -> None:
        """Connect both before the attack (during a connection flood, new clients wait in the backlog)."""
        self.producer_client = WireClient(self.address, timeout_s=30)
        self.consumer_client = WireClient(self.address, timeout_s=30)

    def produce(self) -> None:
        client = self.producer_client
        batch = 0
        try:
            while not self.stop.is_set():
                values = [b"%d" % (batch * 10 + index) for index in range(10)]
                started = time.monotonic()
                answer = client.produce("good", 0, [Record(key=b"k", value=value) for value in values], acks=-1)
                self.latencies_ms.append((time.monotonic() - started) * 1000)
                if answer["error_code"] != 0:
                    self.failures.append(f"batch {batch}: error {answer['error_code']}")
                    return
                self.acknowledged.extend(range(batch * 10, batch * 10 + 10))
                batch += 1
        except OSError as exc:
            self.failures.append(f"producer: {exc!r}")
        finally:
            client.close()

    def consume(self, until_count=None, timeout_s: float = 60) -> None:
        client = self.consumer_client if until_count is None else WireClient(self.address, timeout_s=30)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if until_count is None and self.stop.is_set():
                    return
                if until_count is not None and len(self.read) >= until_count():
                    return
                partition, records = client.fetch("good", 0, len(self.read), max_wait_ms=200)
                if partition["error_code"] != 0:
                    self.failures.append(f"fetch: error {partition['error_code']}")
                    return
                self.read.extend(int(record.value) for record in records)
        except OSError as exc:
            self.failures.append(f"consumer: {exc!r}")
        finally:
            client.close()


def start_server(data: str) -> tuple[subprocess.Popen, tuple[str, int], tuple[str, int]]:
    command = [sys.executable, "-P", "-m", "logstore.cli", "--dir", data,
               "--set", "authorizer.enable=false", "--set", "queued.max.request.bytes=16777216",
               "--set", "fetch.max.bytes=4194304", "--set", "connections.max.idle.ms=60000",
               "serve", "--listen", "PLAINTEXT://127.0.0.1:0", "--listen", "SASL_PLAINTEXT://127.0.0.1:0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=capped)
    lines = [process.stdout.readline() for _ in range(3)]
    if not all(line.startswith("logstore serve: ") for line in lines):
        process.kill()
        raise AssertionError(f"serve did not start: {lines!r} {process.stderr.read()[-3000:]}")
    addresses = [line.split("listening on ", 1)[1].split()[0].rsplit("//", 1)[-1] for line in lines[:2]]
    plain, sasl = ((host, int(port)) for host, port in (address.rsplit(":", 1) for address in addresses))
    return process, plain, sasl, lines[2].strip()


@pytest.mark.slow
def test_the_server_under_hostile_load_keeps_its_bounds_and_serves_a_good_client(tmp_path, record_property):
    data = str(tmp_path / "data")
    with LogManager([data]) as store:
        store.create_topic("good", partitions=1)
        for index in range(300):  # something for the unread fetches to fetch: ~3 MB
            store.append("good", [Record(key=None, value=b"p" * 1000)] * 10, partition=0)
    CredentialStore(data).set("alice", "SCRAM-SHA-256", "right-password")
    with LogManager([data]) as store:
        preloaded = store.get_log("good", 0).log_end_offset
    process, plain, sasl, descriptors_line = start_server(data)
    pid = process.pid
    stderr_lines: list[str] = []
    reader = threading.Thread(target=lambda: stderr_lines.extend(process.stderr), daemon=True)
    reader.start()
    attack = Attack(plain, sasl)
    good = GoodClients(f"{plain[0]}:{plain[1]}")
    good.read = [-1] * preloaded  # the preloaded records are not the producer's
    try:
        good.connect()
        producer = threading.Thread(target=good.produce, daemon=True)
        consumer = threading.Thread(target=good.consume, daemon=True)
        producer.start()
        consumer.start()
        rss_samples = []
        cpu_start, wall_start = cpu_seconds(pid), time.monotonic()
        attack.run()
        while time.monotonic() - wall_start < BUDGET_S and process.poll() is None:
            rss_samples.append(status(pid, "VmRSS"))
            time.sleep(0.2)
        cpu, wall = cpu_seconds(pid) - cpu_start, time.monotonic() - wall_start
        peak_rss = status(pid, "VmHWM")
        good.stop.set()
        attack.finish()
        producer.join(60)
        consumer.join(60)
        assert process.poll() is None, f"the server died: {''.join(stderr_lines)[-3000:]}"
        # The attack stopped: a new client is answered.
        answered_after_s = None
        started = time.monotonic()
        while time.monotonic() - started < 30:
            try:
                client = WireClient(f"{plain[0]}:{plain[1]}", timeout_s=5)
                try:
                    client.call(METADATA, 1, {"topics": None})
                finally:
                    client.close()
                answered_after_s = time.monotonic() - started
                break
            except OSError:
                time.sleep(0.2)
        assert answered_after_s is not None, "no answer once the attack stopped"
        follower = GoodClients(f"{plain[0]}:{plain[1]}")
        follower.read = list(good.read)
        follower.consume(until_count=lambda: preloaded + len(good.acknowledged), timeout_s=60)
        latencies = sorted(good.latencies_ms) or [0.0]
        figures = [f"  {descriptors_line}"]
        figures.append(f"  hostile load for {wall:.1f} s: {attack.connections} hostile connections, "
              f"{attack.bytes_sent / 1e6:.0f} MB sent by them")
        figures.append(f"  server: peak RSS {peak_rss / 2**20:.0f} MiB (bound {RSS_BOUND >> 20} MiB, RLIMIT_AS "
              f"{MEMORY_CAP >> 20} MiB, RLIMIT_NOFILE {DESCRIPTOR_CAP}), median RSS "
              f"{sorted(rss_samples)[len(rss_samples) // 2] / 2**20:.0f} MiB, CPU {cpu:.1f} s in {wall:.1f} s")
        figures.append(f"  good producer: {len(good.acknowledged)} records acknowledged (acks=all), p50/p99 "
              f"{latencies[len(latencies) // 2]:.1f}/{latencies[int(len(latencies) * 0.99)]:.1f} ms; consumer read "
              f"{len(follower.read) - preloaded}; a new client answered {answered_after_s:.2f} s after the attack")
        kinds: dict[str, int] = {}
        for line in stderr_lines:
            kind = line.split(": ", 2)[-1].split(" from ")[0].split(":")[0][:60].strip()
            kinds[kind] = kinds.get(kind, 0) + 1
        figures.append(f"  server log: {len(stderr_lines)} lines; "
                       + "; ".join(f"{count} x {kind}" for kind, count in sorted(kinds.items(), key=lambda item: -item[1])[:8]))
        text = "\n".join(figures)
        print(text)
        record_property("figures", text)
        RESULTS_DIR.mkdir(exist_ok=True)
        (RESULTS_DIR / "hostile_load.txt").write_text(text + "\n")
        assert not good.failures and not follower.failures, good.failures + follower.failures
        assert peak_rss < RSS_BOUND, f"peak RSS {peak_rss >> 20} MiB"
        assert cpu < wall, f"{cpu:.1f} s of CPU in {wall:.1f} s"
        assert len(good.acknowledged) >= 50, "the good producer hardly got through"
        assert follower.read[preloaded:] == good.acknowledged  # each once, in order
    finally:
        attack.finish()
        good.stop.set()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    reader.join(10)
    assert process.returncode == 0, "".join(stderr_lines)[-3000:]
    with LogManager([data], read_only=True) as view:
        report = verify_store(view)
    assert report.ok, report
