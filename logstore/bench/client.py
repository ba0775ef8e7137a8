"""``logstore perf client``: producer and consumer rates of our client against kafka-python (the other
pure-Python client) and confluent-kafka (librdkafka, C), on one broker in one run.
The goal: ours at least 1.5x kafka-python's producer and consumer rates.

The broker is a ``logstore serve`` subprocess on a temporary dir (``bench.serve.BrokerProcess``),
Tansu (the same, ``broker="tansu"``), or one already running (``bootstrap_server``). Every run is one
client producing ``records`` records to a fresh topic of its own (created first, deleted afterwards,
so disk and Tansu's memory stay bounded), ending with ``flush()``, then reading that topic from
offset 0 without a consumer group (assign every partition, seek to 0) until it has seen every record.

Fairness:
- kafka-python checksums the batches it sends and reads (CRC-32C) in pure Python unless the
  ``crc32c`` package is installed, its documented fast path: its row names which it used;
- the same settings for every client: ``acks``, ``linger.ms``, ``batch.size``, no compression, no
  idempotence, 5 requests in flight per connection, 32 MiB of producer buffer (kafka-python 3 has no
  such bound: its accumulator grows); on the consumer side
  Kafka's default fetch sizes and waits, and at most 10,000 records per poll;
- the same loops: record ``i`` (value ``i % 1024`` of a pool of distinct values, built before the
  clock starts) goes to partition ``i % partitions``; a consumer adds up the length of every value,
  and checks the first and last record of each poll against what was produced there (every record,
  in order, with ``check="all"``); any mismatch, loss or duplicate fails the run;
- each run in a fresh interpreter (``bench.child``), so no client inherits another's threads,
  garbage or heap; what is timed is the send loop plus ``flush()``, and the poll loop, not the
  imports, the construction or ``close()``;
- rounds interleave the clients (round 1: every client once, round 2: again, ...) in an order that
  rotates each round, so a slow spell of this shared machine hits every client, and no client always
  goes first; each rate is the best of its rounds, and each round's ratios are kept, as
  ``logstore perf paths`` does.

kafka-python and confluent-kafka (the ``clients`` extra) are imported only inside the runs.
"""

from __future__ import annotations

import importlib.util
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

CLIENTS = ("logstore", "kafka-python", "confluent-kafka")
MODULES = {"kafka-python": "kafka", "confluent-kafka": "confluent_kafka"}
INSTALL_HINT = "pip install 'kafka-logstore[clients]'"
BASELINE = "kafka-python"
GOAL = 1.5  # ours ÷ kafka-python, producer and consumer
POOL = 1024  # distinct values; record i carries pool[i % POOL]
MB = 10**6
POLL_RECORDS = 10_000
BUFFER_BYTES = 32 * 1024 * 1024  # Kafka's buffer.memory default, for all three
FETCH = {"fetch.min.bytes": 1, "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 1_048_576,
         "fetch.max.wait.ms": 500}  # Kafka's consumer defaults, given to all three
Say = Callable[[str], None]


class ClientBenchmarkError(Exception):
    """A run that could not be measured: a client missing, a broker that did not start, records
    lost, duplicated or changed."""


@dataclass(frozen=True)
class ClientWorkload:
    """What every client does: ``records`` values of ``value_bytes`` over ``partitions``, produced
    with ``acks``, ``linger_ms`` and ``batch_size`` (bytes), then consumed; a phase taking longer
    than ``timeout_s`` fails the run. ``check``: ``sample`` (the first and last record of each poll)
    or ``all`` (every record, in order)."""

    records: int = 1_000_000
    value_bytes: int = 100
    partitions: int = 1
    acks: str = "1"
    linger_ms: int = 5
    batch_size: int = 16384
    check: str = "sample"
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.records < 1 or self.value_bytes < 0 or self.partitions < 1 or self.linger_ms < 0:
            raise ValueError(f"records and partitions must be >= 1, value_bytes and linger_ms >= 0: {self}")
        if self.batch_size < max(1, self.value_bytes):
            raise ValueError(f"batch_size must hold one record ({self.value_bytes} B), got {self.batch_size}")
        if self.acks not in ("1", "all"):
            raise ValueError(f"acks must be '1' or 'all', got {self.acks!r}")
        if self.check not in ("sample", "all"):
            raise ValueError(f"check must be 'sample' or 'all', got {self.check!r}")


def missing_clients(clients: tuple[str, ...] = CLIENTS) -> list[str]:
    """The peer clients among ``clients`` that are not installed (ours always is)."""
    return [name for name in clients if name in MODULES and importlib.util.find_spec(MODULES[name]) is None]


def value_pool(value_bytes: int) -> list[bytes]:
    """``POOL`` values of ``value_bytes`` each, distinct when there is room for a number."""
    return [(b"%08d." % j + b"v" * value_bytes)[:value_bytes] for j in range(POOL)]


# --- one run (in a child interpreter) ---------------------------------------------------------------


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()  # process-wide CPU: librdkafka's threads count too


def _since(started: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _clock()
    return wall - started[0], cpu - started[1]


class _Tally:
    """What a consumer has seen: a count, the value bytes, and the checks against what was produced."""

    def __init__(self, w: ClientWorkload) -> None:
        self.w, self.pool = w, value_pool(w.value_bytes)
        self.count = self.bytes = self.checked = 0
        self.next_offset = [0] * w.partitions

    def expect(self, partition: int, offset: int, value: bytes | None) -> None:
        """The record at ``partition``/``offset`` carries what record ``offset * partitions + partition`` was given."""
        self.checked += 1
        want = self.pool[(offset * self.w.partitions + partition) % POOL]
        if value != want:
            raise ClientBenchmarkError(f"partition {partition} offset {offset}: value {value!r:.40}, "
                                       f"produced {want!r:.40}")
        if self.w.check == "all":  # every record is checked: they must come in order, each once
            if offset != self.next_offset[partition]:
                raise ClientBenchmarkError(f"partition {partition}: offset {offset} after "
                                           f"{self.next_offset[partition] - 1} (lost, duplicated or reordered)")
            self.next_offset[partition] = offset + 1

    def finish(self, client: str) -> None:
        w = self.w
        if self.count != w.records or self.bytes != w.records * w.value_bytes:
            raise ClientBenchmarkError(f"{client}: consumed {self.count:,} records ({self.bytes:,} value bytes), "
                                       f"produced {w.records:,} ({w.records * w.value_bytes:,})")
        if w.check == "all":
            want = [w.records // w.partitions + (p < w.records % w.partitions) for p in range(w.partitions)]
            if self.next_offset != want:
                raise ClientBenchmarkError(f"{client}: end offsets {self.next_offset}, produced {want}")


def _send_loop(send: Callable, topic: str, w: ClientWorkload, pool: list[bytes]) -> None:
    partitions = w.partitions
    for i in range(w.records):
        send(topic, pool[i % POOL], partition=i % partitions)


def _produce_logstore(address: str, topic: str, w: ClientWorkload, pool: list[bytes]) -> tuple[float, float]:
    from ..client.producer import Producer
    producer = Producer(bootstrap_servers=address, client_id="logstore-perf", acks=w.acks, linger_ms=w.linger_ms,
                        batch_size=w.batch_size, buffer_memory=BUFFER_BYTES, enable_idempotence=False,
                        max_in_flight_requests_per_connection=5)
    try:
        started = _clock()
        _send_loop(producer.send, topic, w, pool)
        producer.flush(w.timeout_s)
        return _since(started)
    finally:
        producer.close(30)


def _produce_kafka_python(address: str, topic: str, w: ClientWorkload, pool: list[bytes]) -> tuple[float, float]:
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=address, client_id="logstore-perf", acks=1 if w.acks == "1" else "all",
                             linger_ms=w.linger_ms, batch_size=w.batch_size, compression_type=None,
                             enable_idempotence=False,
                             max_in_flight_requests_per_connection=5)
    try:
        started = _clock()
        _send_loop(producer.send, topic, w, pool)
        producer.flush(w.timeout_s)
        return _since(started)
    finally:
        producer.close(30)


def _produce_confluent(address: str, topic: str, w: ClientWorkload, pool: list[bytes]) -> tuple[float, float]:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": address, "client.id": "logstore-perf", "acks": w.acks,
                         "linger.ms": w.linger_ms, "batch.size": w.batch_size, "compression.type": "none",
                         "enable.idempotence": False, "max.in.flight.requests.per.connection": 5,
                         "queue.buffering.max.kbytes": BUFFER_BYTES // 1024,
                         "queue.buffering.max.messages": 2_147_483_647})  # bounded by bytes, as the others
    produce, poll, partitions = producer.produce, producer.poll, w.partitions
    started = _clock()
    for i in range(w.records):
        while True:  # a full buffer: librdkafka raises where the others block
            try:
                produce(topic, pool[i % POOL], partition=i % partitions)
                break
            except BufferError:
                poll(0.005)
    left = producer.flush(w.timeout_s)
    elapsed = _since(started)
    if left:
        raise ClientBenchmarkError(f"confluent-kafka: {left:,} records not delivered within {w.timeout_s:g} s")
    return elapsed


def _consume_logstore(address: str, topic: str, w: ClientWorkload, tally: _Tally) -> tuple[float, float]:
    from ..client import consumer as consumer_module
    settings = {key.replace(".", "_"): value for key, value in FETCH.items()}
    with consumer_module.Consumer(bootstrap_servers=address, client_id="logstore-perf", group_id=None,
                                  enable_auto_commit=False, auto_offset_reset="earliest",
                                  max_poll_records=POLL_RECORDS, **settings) as consumer:
        consumer.assign([(topic, p) for p in range(w.partitions)])
        for p in range(w.partitions):
            consumer.seek(topic, p, 0)
        poll, expect, sample = consumer.poll, tally.expect, w.check == "sample"
        started, deadline = _clock(), time.monotonic() + w.timeout_s
        while tally.count < w.records and time.monotonic() < deadline:
            records = poll(timeout_ms=1000)
            if not records:
                continue
            size = 0
            for record in records:
                size += len(record.value)
            tally.count += len(records)
            tally.bytes += size
            for record in ((records[0], records[-1]) if sample else records):
                expect(record.partition, record.offset, record.value)
        return _since(started)


def _consume_kafka_python(address: str, topic: str, w: ClientWorkload, tally: _Tally) -> tuple[float, float]:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=address, client_id="logstore-perf", group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=POLL_RECORDS,
                             **{key.replace(".", "_"): value for key, value in FETCH.items()})
    try:
        partitions = [TopicPartition(topic, p) for p in range(w.partitions)]
        consumer.assign(partitions)
        for partition in partitions:
            consumer.seek(partition, 0)
        poll, expect, sample = consumer.poll, tally.expect, w.check == "sample"
        started, deadline = _clock(), time.monotonic() + w.timeout_s
        while tally.count < w.records and time.monotonic() < deadline:
            for records in poll(timeout_ms=1000).values():
                size = 0
                for record in records:
                    size += len(record.value)
                tally.count += len(records)
                tally.bytes += size
                for record in ((records[0], records[-1]) if sample else records):
                    expect(record.partition, record.offset, record.value)
        return _since(started)
    finally:
        consumer.close()


def _consume_confluent(address: str, topic: str, w: ClientWorkload, tally: _Tally) -> tuple[float, float]:
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    # librdkafka wants a group.id even with assign(): a unique one, never committed to
    consumer = Consumer({"bootstrap.servers": address, "client.id": "logstore-perf",
                         "group.id": f"logstore-perf-{uuid.uuid4().hex}", "enable.auto.commit": False,
                         "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
                         "fetch.min.bytes": FETCH["fetch.min.bytes"], "fetch.max.bytes": FETCH["fetch.max.bytes"],
                         "max.partition.fetch.bytes": FETCH["max.partition.fetch.bytes"],
                         "fetch.wait.max.ms": FETCH["fetch.max.wait.ms"]})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(w.partitions)])
        consume, expect, sample = consumer.consume, tally.expect, w.check == "sample"
        started, deadline = _clock(), time.monotonic() + w.timeout_s
        while tally.count < w.records and time.monotonic() < deadline:
            # consume() waits until it has num_messages (or the timeout): never ask past the end
            messages = consume(num_messages=min(POLL_RECORDS, w.records - tally.count), timeout=1.0)
            if not messages:
                continue
            size = count = 0
            for message in messages:
                if message.error() is not None:
                    raise KafkaException(message.error())
                size += len(message.value())
                count += 1
            tally.count += count
            tally.bytes += size
            for message in ((messages[0], messages[-1]) if sample else messages):
                expect(message.partition(), message.offset(), message.value())
        return _since(started)
    finally:
        consumer.close()


_RUNS = {"logstore": (_produce_logstore, _consume_logstore),
         "kafka-python": (_produce_kafka_python, _consume_kafka_python),
         "confluent-kafka": (_produce_confluent, _consume_confluent)}


def client_version(client: str) -> str:
    """The client's version as it names itself (librdkafka's too, for confluent-kafka)."""
    if client == "kafka-python":
        import kafka
        from kafka.record import util
        # without the crc32c package kafka-python checksums every batch it sends or reads in pure
        # Python (about 8 MB/s here): half its cost per record, so the table says which it used
        return f"{kafka.__version__} ({'C' if getattr(util, 'crc32c_c', None) else 'pure-Python'} CRC-32C)"
    if client == "confluent-kafka":
        import confluent_kafka
        return f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"
    from .. import __version__
    return __version__


def run_client(client: str, address: str, topic: str, **workload) -> dict:
    """One run in this process: ``client`` produces ``ClientWorkload(**workload)`` to ``topic`` (which
    exists, empty) on the broker at ``address``, then consumes it from offset 0. Seconds and CPU
    seconds of each phase; raises ``ClientBenchmarkError`` when the records read back are wrong."""
    w = ClientWorkload(**workload)
    produce, consume = _RUNS[client]
    pool = value_pool(w.value_bytes)
    produce_s, produce_cpu_s = produce(address, topic, w, pool)
    tally = _Tally(w)
    consume_s, consume_cpu_s = consume(address, topic, w, tally)
    tally.finish(client)
    return {"client": client, "version": client_version(client), "produce_s": produce_s,
            "produce_cpu_s": produce_cpu_s, "consume_s": consume_s, "consume_cpu_s": consume_cpu_s,
            "consumed": tally.count, "value_bytes": tally.bytes, "checked": tally.checked}


# --- the broker and its topics -----------------------------------------------------------------------


@contextmanager
def broker_address(broker: str, bootstrap_server: str | None, work_dir: str | None, say: Say) -> Iterator[str]:
    """The address of the broker to measure on: ``bootstrap_server`` as given, else a ``logstore
    serve`` or Tansu subprocess on a temporary dir, stopped (and the dir removed) afterwards."""
    if bootstrap_server:
        yield bootstrap_server
        return
    from .serve import BrokerProcess
    root = tempfile.mkdtemp(prefix="logstore-perf-client-", dir=work_dir)
    try:
        try:
            process = BrokerProcess(broker, root)
        except (RuntimeError, TimeoutError, ValueError) as exc:
            raise ClientBenchmarkError(f"{broker} broker: {exc}") from None
        try:
            say(f"{broker} broker ready in {process.ready_s:.2f} s at {process.address}")
            yield process.address
        finally:
            process.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def create_topic(address: str, topic: str, partitions: int, timeout_s: float = 30.0) -> None:
    """Create ``topic`` (replication factor 1) and wait until the metadata gives every partition a leader."""
    from ..client.cluster import NetworkClient
    from ..client.errors import NetworkError
    with NetworkClient(address, client_id="logstore-perf") as network:
        body = network.request_any("CreateTopics", {
            "topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout_ms": int(timeout_s * 1000), "validate_only": False})
        error = body["topics"][0]["error_code"]
        if error:
            raise ClientBenchmarkError(f"CreateTopics {topic}: error {error}")
        deadline = time.monotonic() + timeout_s
        while True:  # a broker may create a topic after answering (Kafka's controller does)
            try:
                leaders = network.refresh_metadata([topic]).leaders.get(topic, {})
            except NetworkError:
                leaders = {}
            if len(leaders) == partitions and min(leaders.values()) >= 0:
                return
            if time.monotonic() > deadline:
                raise ClientBenchmarkError(f"{topic}: no leader for every partition within {timeout_s:g} s")
            time.sleep(0.05)


def delete_topic(address: str, topic: str) -> None:
    """Delete ``topic``, best effort: a broker that cannot only keeps it (the run is measured already)."""
    from ..client.cluster import NetworkClient
    from ..client.errors import BrokerResponseError, NetworkError
    try:
        with NetworkClient(address, client_id="logstore-perf") as network:
            network.request_any("DeleteTopics", {"topic_names": [topic], "timeout_ms": 30_000})
    except (NetworkError, BrokerResponseError):
        pass


# --- the benchmark ---------------------------------------------------------------------------------


def bench_client(workload: ClientWorkload | None = None, *, rounds: int = 3, clients: tuple[str, ...] = CLIENTS,
                 broker: str = "logstore", bootstrap_server: str | None = None, skip_missing: bool = False,
                 isolate: bool = True, work_dir: str | None = None, say: Say | None = None) -> dict:
    """``rounds`` interleaved rounds of every client in ``clients`` (see the module docstring) on one
    broker; the result as plain data (``render_client`` formats it). A missing peer client raises
    ``ClientBenchmarkError`` unless ``skip_missing`` (then its row says so). ``isolate=False`` runs
    each client in this process (for a profiler; the rates then share one heap)."""
    w = workload or ClientWorkload()
    say = say or (lambda _message: None)
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    unknown = [name for name in clients if name not in CLIENTS]
    if unknown or not clients:
        raise ValueError(f"clients must be among {', '.join(CLIENTS)}, got {clients!r}")
    clients = tuple(dict.fromkeys(clients))
    missing = missing_clients(clients)
    if missing and not skip_missing:
        raise ClientBenchmarkError(f"not installed: {', '.join(missing)} ({INSTALL_HINT}; or --skip-missing)")
    running = [name for name in clients if name not in missing]
    runs: dict[str, list[dict]] = {name: [] for name in running}
    orders = []
    token = uuid.uuid4().hex[:8]
    with broker_address(broker, bootstrap_server, work_dir, say) as address:
        for number in range(rounds):
            shift = number % len(running)
            order = running[shift:] + running[:shift]  # each client takes its turn going first
            orders.append(order)
            for name in order:
                topic = f"perf-client-{token}-{number + 1}-{name}"
                create_topic(address, topic, w.partitions)
                say(f"round {number + 1}/{rounds}: {name} produces {w.records:,} records, then consumes them")
                try:
                    run = _run(name, address, topic, w, isolate)
                finally:
                    delete_topic(address, topic)
                runs[name].append(run)
                say(f"round {number + 1}/{rounds}: {name}: produce {_rate(w.records / run['produce_s'])}, "
                    f"consume {_rate(w.records / run['consume_s'])}")
    broker_name = "external" if bootstrap_server else broker
    return summarize(w, runs, orders, missing, broker=broker_name, address=address)


def _run(name: str, address: str, topic: str, w: ClientWorkload, isolate: bool) -> dict:
    kwargs = asdict(w)
    if not isolate:
        return run_client(name, address, topic, **kwargs)
    from .child import run_child
    return run_child(__name__, "run", {"client": name, "address": address, "topic": topic, **kwargs},
                     ClientBenchmarkError, label=f"{name} on {topic}")


def summarize(w: ClientWorkload, runs: dict[str, list[dict]], orders: list[list[str]], missing: list[str], *,
              broker: str, address: str) -> dict:
    """The result: per client its runs, best rates and ratios to kafka-python; per round the ratios
    within it; the verdicts against the goal (None when ours or kafka-python did not run)."""
    def rates(name: str, phase: str) -> list[float]:
        return [w.records / run[f"{phase}_s"] for run in runs.get(name, [])]

    rows = []
    for name in CLIENTS:
        if name in missing:
            rows.append({"client": name, "missing": True, "install": INSTALL_HINT})
        if name not in runs:
            continue
        row = {"client": name, "version": runs[name][0]["version"], "missing": False,
               "consumed": [run["consumed"] for run in runs[name]], "checked": [run["checked"] for run in runs[name]]}
        for phase in ("produce", "consume"):
            mine, base = rates(name, phase), rates(BASELINE, phase)
            best = max(mine)
            row[phase] = {"runs": mine, "best": best, "mb_per_s": best * w.value_bytes / MB,
                          "cpu_us_per_record": min(run[f"{phase}_cpu_s"] for run in runs[name]) / w.records * 1e6,
                          "vs_kafka_python": best / max(base) if base else None}
        rows.append(row)
    per_round = []
    for number, order in enumerate(orders):
        entry = {"round": number + 1, "order": order}
        for phase in ("produce", "consume"):
            entry[phase] = {name: w.records / runs[name][number][f"{phase}_s"] for name in runs}
            ours, base = entry[phase].get("logstore"), entry[phase].get(BASELINE)
            entry[f"{phase}_ratio"] = ours / base if ours and base else None
        per_round.append(entry)
    ours = next((row for row in rows if row["client"] == "logstore" and not row["missing"]), None)
    verdicts = {}
    for phase in ("produce", "consume"):
        ratio = ours[phase]["vs_kafka_python"] if ours else None
        verdicts[phase] = {"ratio": ratio, "passed": None if ratio is None else ratio >= GOAL}
    judged = [v["passed"] for v in verdicts.values()]
    return {"workload": asdict(w), "broker": broker, "address": address, "rounds": len(orders),
            "python": platform.python_version(), "goal": {"bound": GOAL, "baseline": BASELINE, **verdicts},
            "passed": None if None in judged else all(judged), "clients": rows, "per_round": per_round}


# --- text ------------------------------------------------------------------------------------------


def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1e6:.2f} M" if value >= 1e6 else f"{value / 1e3:.1f} k"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _verdict(passed: bool | None) -> str:
    return "n/a" if passed is None else ("PASS" if passed else "FAIL")


def render_client(result: dict) -> str:
    """The result as text: the settings, one row per client (best of the rounds), the verdicts, and
    each round's rates and ratios."""
    from .report import text_table
    w = result["workload"]
    title = (f"logstore perf client: {w['records']:,} records of {w['value_bytes']} B, {w['partitions']} "
             f"partition(s), acks={w['acks']}, linger.ms={w['linger_ms']}, batch.size={w['batch_size']}, no "
             f"compression; broker: {result['broker']} at {result['address']}; best of {result['rounds']} "
             f"interleaved round(s); Python {result['python']}")
    lines = [title]
    table = []
    for row in result["clients"]:
        if row["missing"]:
            table.append((row["client"], "not installed", "", "", "", "", ""))
            continue
        p, c = row["produce"], row["consume"]
        table.append((f"{row['client']} {row['version']}", f"{_rate(p['best'])}", f"{p['mb_per_s']:.1f}",
                      f"{_rate(c['best'])}", f"{c['mb_per_s']:.1f}", _ratio(p["vs_kafka_python"]),
                      _ratio(c["vs_kafka_python"])))
    lines += text_table(("client", "produce rec/s", "MB/s", "consume rec/s", "MB/s", "produce ÷ kafka-python",
                         "consume ÷ kafka-python"), table)
    goal = result["goal"]
    verdict = (f"goal: logstore >= {goal['bound']:g}x kafka-python: produce {_ratio(goal['produce']['ratio'])} "
               f"{_verdict(goal['produce']['passed'])}, consume {_ratio(goal['consume']['ratio'])} "
               f"{_verdict(goal['consume']['passed'])}; overall {_verdict(result['passed'])}")
    lines += ["", verdict, "", "rounds (rec/s produce / consume; ratio = logstore ÷ kafka-python within the round):"]
    for entry in result["per_round"]:
        cells = ", ".join(f"{name} {_rate(entry['produce'][name])} / {_rate(entry['consume'][name])}"
                          for name in entry["order"])
        lines.append(f"  {entry['round']}: {cells}; ratios {_ratio(entry['produce_ratio'])} / "
                     f"{_ratio(entry['consume_ratio'])}")
    cpu = ", ".join(f"{row['client']} {row['produce']['cpu_us_per_record']:.1f} / "
                    f"{row['consume']['cpu_us_per_record']:.1f}" for row in result["clients"] if not row["missing"])
    lines += ["", f"client CPU per record, µs (produce / consume, least of the rounds): {cpu}",
              "MB = 10^6 bytes of values; each run in its own interpreter, on its own fresh topic."]
    if any("pure-Python CRC-32C" in row.get("version", "") for row in result["clients"]):
        lines.append("kafka-python ran without the crc32c package, its documented fast path (pip install crc32c): "
                     "it was slower than it can be.")
    return "\n".join(lines)


if __name__ == "__main__":
    from .child import child_main
    child_main(sys.argv[1:], {"run": run_client})
