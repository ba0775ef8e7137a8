"""``logstore perf scale``: how the store and the server grow with partitions and connections.

For each partition count (10, 1,000, 10,000 by default) a store of that many partitions (topics of at
most 1,000 partitions, one record in each) is built in a child process and closed cleanly; then, each
in a fresh interpreter:

- **clean open**: ``LogManager`` open time (wall and CPU), the RSS it adds and the descriptors it
  holds after the open (``/proc/self/fd``);
- **open after kill -9**: a writer opens the store, appends one record to every partition (past the
  recovery point, unflushed) and is SIGKILLed; the next open recovers every partition from its
  recovery point (timed the same way);
- **the server**: ``logstore serve`` on the clean store (127.0.0.1, a free port): its RSS and
  descriptors idle, the latency of a Metadata request for all topics (median of a few), a consumer of
  up to 1,000 partitions (raw Fetch v7 rounds, ``max.wait.ms`` 0: request and response bytes and the
  round latency when nothing changed and when one partition changed; asked with a KIP-227 session
  (epoch 0 asks the server for one, later rounds send only what changed) and without one
  (``SessionEpoch`` -1: a full request each round, as librdkafka sends), produce throughput with
  acks=1 spread over every partition (one batch of ``records_per_partition`` records per partition,
  100 partitions per request), and the server's RSS and descriptors after it.

For each connection count (10, 100, 1,000) a server of 10 partitions is started, its RSS and
descriptors taken, then that many plain sockets connect and each does one ApiVersions round (the
time to open them all), and the server's RSS and descriptors are taken again.

Each figure is printed per size with its growth exponent ``b`` (least squares of log figure against
log size: figure ∝ size^b) and the goals judged as ``perf paths`` does. Only 127.0.0.1 and the
processes started here are used; each server is stopped by its pid.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

from .child import child_main, run_child
from .report import text_table
from .wire import RawClient

DEFAULT_PARTITIONS = (10, 1000, 10_000)
DEFAULT_CONNECTIONS = (10, 100, 1000)
PARTITIONS_PER_TOPIC = 1000
FETCH_PARTITIONS = 1000
CONNECTION_STORE_PARTITIONS = 10
GOAL_OPEN_S = 2.0  # at 10,000 partitions
GOAL_DESCRIPTORS_PER_PARTITION = 1.0
GOAL_CONNECTION_MB_PER_1000 = 100.0
GOAL_IDLE_FETCH_BYTES = 1000  # sent + received by an idle round of a 1,000-partition session
Say = Callable[[str], None]

# Kafka's documented limits, printed next to the figures (sources in docs/guide/benchmarks.md).
KAFKA_LIMITS = {
    "partitions": "Kafka (ZooKeeper era): up to 4,000 partitions per broker, 200,000 per cluster (Confluent)",
    "descriptors": "Kafka keeps every segment's files open: ≥ 3 descriptors and 2 mmaps per segment; ops docs "
                   "ask for ≥ 100,000 descriptors and vm.max_map_count above 65,536",
    "connections": "Kafka max.connections and max.connections.per.ip default to 2^31-1 (no bound)",
    "fetch": "Kafka fetch sessions (KIP-227): an incremental fetch lists only changed partitions",
}


class ScaleBenchmarkError(Exception):
    """A child or a server failed: the measurement is not valid."""


# --- the process's own figures ------------------------------------------------------------------------

def _status_kb(pid: int | str, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_mb(pid: int | str = "self") -> float:
    return _status_kb(pid, "VmRSS") / 1024


def descriptors(pid: int | str = "self") -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _raise_descriptor_limit() -> None:
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))


def growth_exponent(sizes: list[int], values: list[float]) -> float | None:
    """``b`` of value ∝ size^b, least squares over the points with positive values (None: < 2)."""
    points = [(math.log(s), math.log(v)) for s, v in zip(sizes, values) if s > 0 and v is not None and v > 0]
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return None if not spread else sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def _topics(partitions: int) -> list[tuple[str, int]]:
    """The (topic, partition count) of a store of ``partitions`` partitions."""
    full, rest = divmod(partitions, PARTITIONS_PER_TOPIC)
    return [(f"scale-{n}", PARTITIONS_PER_TOPIC) for n in range(full)] + ([(f"scale-{full}", rest)] if rest else [])


# --- children -----------------------------------------------------------------------------------------

def build(path: str, partitions: int) -> dict:
    """A store of ``partitions`` partitions, one record each, closed cleanly."""
    from ..manager.log_manager import LogManager
    from ..records.decoder import Record
    _raise_descriptor_limit()
    began = time.perf_counter()
    with LogManager([path]) as store:
        for topic, count in _topics(partitions):
            store.create_topic(topic, count)
            for partition in range(count):
                log = store.get_log(topic, partition)
                log.append([Record(b"k", b"v" * 100)])
                log.release_idle_descriptors()  # as the idle job would: a build of 10,000 holds none
                log.release_idle_descriptors()
    return {"build_s": time.perf_counter() - began}


def crash(path: str) -> None:
    """Open the store, append one unflushed record to every partition, then SIGKILL this process."""
    from ..manager.log_manager import LogManager
    from ..records.decoder import Record
    _raise_descriptor_limit()
    store = LogManager([path])
    for topic in store.topics():
        for partition in range(store.partitions(topic)):
            store.get_log(topic, partition).append([Record(b"k", b"tail")])
    print(json.dumps({"crashed": True}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def open_store(path: str) -> dict:
    """Time an open of the store at ``path``: wall, CPU, RSS and descriptors it adds."""
    from ..manager.log_manager import LogManager
    _raise_descriptor_limit()
    fds, rss = descriptors(), rss_mb()
    wall, cpu = time.perf_counter(), time.process_time()
    store = LogManager([path])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    try:
        clean = all(status.clean_shutdown for status in store.status())
        partitions = sum(store.partitions(topic) for topic in store.topics())
        return {"open_s": wall, "open_cpu_s": cpu, "descriptors": descriptors() - fds, "rss_mb": rss_mb() - rss,
                "clean": clean, "partitions": partitions, "problems": len(store.problems)}
    finally:
        store.close()


# --- the wire -----------------------------------------------------------------------------------------

API_VERSIONS, METADATA, FETCH, PRODUCE = 18, 3, 1, 0


class Server:
    """``logstore serve`` on ``data`` (127.0.0.1, a free port) in its own process, stopped by pid."""

    def __init__(self, data: str, work_dir: str, max_connections: int) -> None:
        self._log = open(os.path.join(work_dir, "serve.log"), "w")
        began = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-m", "logstore.cli", "--dir", data, "--set", f"max.connections={max_connections}",
             "serve", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=self._log, text=True)
        line = self.process.stdout.readline()
        if "listening on" not in line:
            self.stop()
            raise ScaleBenchmarkError(f"logstore serve did not start: {line!r} (see {self._log.name})")
        self.address = line.split("listening on ", 1)[1].split()[0]
        self.ready_s = time.perf_counter() - began
        self.pid = self.process.pid

    def figures(self) -> dict:
        return {"rss_mb": rss_mb(self.pid), "descriptors": descriptors(self.pid)}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # this pid only
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()


def _batch(records: int, value: bytes) -> bytes:
    from ..records.decoder import Record
    from ..server.wire_records.encode import encode_produce_batch
    return bytes(encode_produce_batch([Record(None, value, (), int(time.time() * 1000))] * records))


def metadata_latency(client: RawClient, rounds: int) -> dict:
    times, size = [], 0
    for _ in range(rounds):
        began = time.perf_counter()
        _body, _sent, size = client.call(METADATA, 1, {"topics": None})
        times.append(time.perf_counter() - began)
    return {"metadata_ms": statistics.median(times) * 1000, "metadata_bytes": size}


def fetch_rounds(client: RawClient, partitions: list[tuple[str, int]], producer: RawClient, session: bool,
                 idle_rounds: int) -> dict:
    """Fetch v7 rounds over ``partitions`` from their ends: one to start, ``idle_rounds`` with nothing
    new, then one after a record is produced to the first partition. ``session``: ask for a KIP-227
    session (then send only what changed); else every round is a full fetch without one."""
    offsets = {tp: 1 for tp in partitions}  # one record each: the end
    session_id, epoch = 0, 0 if session else -1

    def round_trip(changed: list[tuple[str, int]] | None) -> tuple[dict, int, int, float]:
        listed = partitions if changed is None else changed
        topics: dict[str, list] = {}
        for topic, partition in listed:
            topics.setdefault(topic, []).append({"partition": partition, "fetch_offset": offsets[(topic, partition)],
                                                 "log_start_offset": -1, "partition_max_bytes": 1 << 20})
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 50 << 20, "isolation_level": 0,
                "session_id": session_id, "session_epoch": epoch, "forgotten_topics_data": [],
                "topics": [{"topic": topic, "partitions": parts} for topic, parts in topics.items()]}
        began = time.perf_counter()
        response, sent, received = client.call(FETCH, 7, body)
        return response, sent, received, time.perf_counter() - began

    response, first_sent, first_received, _ = round_trip(None)
    for topic in response["responses"]:  # from the ends as they are now (an earlier run may have produced)
        for part in topic["partitions"]:
            offsets[(topic["topic"], part["partition_index"])] = part["high_watermark"]
    if session and response.get("session_id"):
        session_id, epoch = response["session_id"], 1
    incremental = bool(session_id)
    idle = []
    for _ in range(idle_rounds):
        _response, sent, received, seconds = round_trip([] if incremental else None)
        idle.append((sent, received, seconds))
        if incremental:
            epoch += 1
    first = partitions[0]
    producer.call(PRODUCE, 3, {"transactional_id": None, "acks": 1, "timeout_ms": 30000, "topic_data": [
        {"name": first[0], "partition_data": [{"index": first[1], "records": _batch(1, b"changed")}]}]})
    _response, changed_sent, changed_received, changed_s = round_trip([] if incremental else None)
    if incremental:
        epoch += 1
    offsets[first] += 1
    return {"session": session, "session_granted": incremental, "first_sent": first_sent,
            "first_received": first_received,
            "idle_sent": statistics.median(s for s, _, _ in idle), "idle_received": statistics.median(r for _, r, _ in idle),
            "idle_ms": statistics.median(t for _, _, t in idle) * 1000,
            "changed_sent": changed_sent, "changed_received": changed_received, "changed_ms": changed_s * 1000}


def produce_spread(client: RawClient, partitions: list[tuple[str, int]], records_per_partition: int) -> dict:
    """acks=1 Produce v3 requests of 100 partitions each, one batch of ``records_per_partition``
    100-byte records per partition, over every partition: records/s."""
    batch = _batch(records_per_partition, b"p" * 100)
    began = time.perf_counter()
    for start in range(0, len(partitions), 100):
        topics: dict[str, list] = {}
        for topic, partition in partitions[start:start + 100]:
            topics.setdefault(topic, []).append({"index": partition, "records": batch})
        response, _sent, _received = client.call(PRODUCE, 3, {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
                                                               "topic_data": [{"name": t, "partition_data": p}
                                                                             for t, p in topics.items()]})
        errors = [p["error_code"] for t in response["responses"] for p in t["partition_responses"] if p["error_code"]]
        if errors:
            raise ScaleBenchmarkError(f"produce failed with error codes {sorted(set(errors))}")
    seconds = time.perf_counter() - began
    return {"produce_records_per_s": len(partitions) * records_per_partition / seconds}


def _partition_list(partitions: int) -> list[tuple[str, int]]:
    return [(topic, p) for topic, count in _topics(partitions) for p in range(count)]


def serve_figures(data: str, work_dir: str, partitions: int, records_per_partition: int, metadata_rounds: int,
                  idle_rounds: int) -> dict:
    server = Server(data, work_dir, max_connections=64)
    try:
        result = {"serve_ready_s": server.ready_s, **{f"serve_{k}": v for k, v in server.figures().items()}}
        client, producer = RawClient(server.address), RawClient(server.address)
        try:
            client.call(API_VERSIONS, 0, {})
            result.update(metadata_latency(client, metadata_rounds))
            fetched = _partition_list(partitions)[:FETCH_PARTITIONS]
            result["fetch_partitions"] = len(fetched)
            result["fetch_session"] = fetch_rounds(client, fetched, producer, True, idle_rounds)
            result["fetch_full"] = fetch_rounds(client, fetched, producer, False, idle_rounds)
            cpu = _cpu_s(server.pid)
            result.update(produce_spread(producer, _partition_list(partitions), records_per_partition))
            result["produce_server_cpu_s"] = _cpu_s(server.pid) - cpu
        finally:
            client.close()
            producer.close()
        result.update({f"serve_after_produce_{k}": v for k, v in server.figures().items()})
        return result
    finally:
        server.stop()


def connection_figures(data: str, work_dir: str, connections: int) -> dict:
    server = Server(data, work_dir, max_connections=connections + 16)
    sockets: list[RawClient] = []
    try:
        time.sleep(0.2)
        before = server.figures()
        began = time.perf_counter()
        for _ in range(connections):
            sockets.append(RawClient(server.address))
            sockets[-1].call(API_VERSIONS, 0, {})
        open_s = time.perf_counter() - began
        time.sleep(0.2)
        after = server.figures()
        return {"connections": connections, "open_s": open_s, "rss_before_mb": before["rss_mb"],
                "rss_growth_mb": after["rss_mb"] - before["rss_mb"],
                "descriptor_growth": after["descriptors"] - before["descriptors"]}
    finally:
        for client in sockets:
            client.close()
        server.stop()


# --- the run ------------------------------------------------------------------------------------------

def _child(workload: str, **kwargs) -> dict:
    expected = (0, -signal.SIGKILL) if workload == "crash" else (0,)
    return run_child("logstore.bench.scale", workload, kwargs, ScaleBenchmarkError, returncodes=expected)


def bench_scale(partitions: tuple[int, ...] = DEFAULT_PARTITIONS, connections: tuple[int, ...] = DEFAULT_CONNECTIONS,
                records_per_partition: int = 10, metadata_rounds: int = 5, idle_rounds: int = 3,
                work_dir: str | None = None, say: Say | None = None) -> dict:
    """Every figure per partition count and per connection count, their growth exponents and the goals."""
    if not partitions or min(partitions) < 1 or (connections and min(connections) < 1):
        raise ValueError(f"partition counts {partitions!r} and connection counts {connections!r} must be >= 1")
    if max(partitions) > 10_000:
        raise ValueError(f"at most 10,000 partitions (the store's limit per topic count here), got {max(partitions)}")
    if records_per_partition < 1 or metadata_rounds < 1 or idle_rounds < 1:
        raise ValueError("records_per_partition, metadata_rounds and idle_rounds must be >= 1")
    say = say or (lambda _: None)
    began = time.perf_counter()
    if work_dir:
        os.makedirs(work_dir, exist_ok=True)
    root = tempfile.mkdtemp(prefix="logstore-perf-scale-", dir=work_dir)
    rows, connection_rows = [], []
    try:
        for count in sorted(partitions):
            clean = os.path.join(root, f"p{count}")
            say(f"scale: building a store of {count:,} partitions")
            row = {"partitions": count, **_child("build", path=clean, partitions=count)}
            opened = _child("open_store", path=clean)
            if not opened["clean"] or opened["partitions"] != count:
                raise ScaleBenchmarkError(f"the clean store did not open cleanly with {count} partitions: {opened}")
            row["clean"] = opened
            crashed = clean + "-crashed"
            shutil.copytree(clean, crashed)
            say(f"scale: {count:,} partitions: kill -9 of a writer, then recovery")
            _child("crash", path=crashed)
            recovered = _child("open_store", path=crashed)
            if recovered["clean"]:
                raise ScaleBenchmarkError("the open after SIGKILL was a clean open")
            row["unclean"] = recovered
            shutil.rmtree(crashed, ignore_errors=True)
            say(f"scale: {count:,} partitions: logstore serve")
            row.update(serve_figures(clean, root, count, records_per_partition, metadata_rounds, idle_rounds))
            shutil.rmtree(clean, ignore_errors=True)
            rows.append(row)
        if connections:
            data = os.path.join(root, "connections")
            _child("build", path=data, partitions=CONNECTION_STORE_PARTITIONS)
            for count in sorted(connections):
                say(f"scale: {count:,} idle connections")
                connection_rows.append(connection_figures(data, root, count))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {"settings": {"partitions": sorted(partitions), "connections": sorted(connections),
                           "records_per_partition": records_per_partition, "metadata_rounds": metadata_rounds,
                           "idle_rounds": idle_rounds, "python": sys.version.split()[0],
                           "load_average": os.getloadavg()},
              "partition_rows": rows, "connection_rows": connection_rows,
              "elapsed_s": time.perf_counter() - began}
    result["growth"] = _growth(rows, connection_rows)
    result["goals"] = _goals(rows, connection_rows)
    return result


PARTITION_FIGURES = (
    ("clean open s", lambda r: r["clean"]["open_s"]),
    ("clean open CPU s", lambda r: r["clean"]["open_cpu_s"]),
    ("open after kill -9 s", lambda r: r["unclean"]["open_s"]),
    ("open after kill -9 CPU s", lambda r: r["unclean"]["open_cpu_s"]),
    ("RSS added by the open MB", lambda r: r["clean"]["rss_mb"]),
    ("descriptors after a clean open", lambda r: r["clean"]["descriptors"]),
    ("server RSS idle MB", lambda r: r["serve_rss_mb"]),
    ("server descriptors idle", lambda r: r["serve_descriptors"]),
    ("Metadata (all topics) ms", lambda r: r["metadata_ms"]),
    ("Metadata response bytes", lambda r: r["metadata_bytes"]),
    ("fetch: partitions", lambda r: r["fetch_partitions"]),
    ("fetch, full: idle round bytes sent", lambda r: r["fetch_full"]["idle_sent"]),
    ("fetch, full: idle round bytes received", lambda r: r["fetch_full"]["idle_received"]),
    ("fetch, full: idle round ms", lambda r: r["fetch_full"]["idle_ms"]),
    ("fetch, full: one changed: bytes received", lambda r: r["fetch_full"]["changed_received"]),
    ("fetch, full: one changed ms", lambda r: r["fetch_full"]["changed_ms"]),
    ("fetch, session: granted", lambda r: r["fetch_session"]["session_granted"]),
    ("fetch, session: idle round bytes sent", lambda r: r["fetch_session"]["idle_sent"]),
    ("fetch, session: idle round bytes received", lambda r: r["fetch_session"]["idle_received"]),
    ("fetch, session: idle round ms", lambda r: r["fetch_session"]["idle_ms"]),
    ("fetch, session: one changed: bytes sent", lambda r: r["fetch_session"]["changed_sent"]),
    ("fetch, session: one changed: bytes received", lambda r: r["fetch_session"]["changed_received"]),
    ("produce over every partition rec/s", lambda r: r["produce_records_per_s"]),
    ("server descriptors after produce", lambda r: r["serve_after_produce_descriptors"]),
    ("server RSS after produce MB", lambda r: r["serve_after_produce_rss_mb"]),
)
CONNECTION_FIGURES = (
    ("time to open them (ApiVersions each) s", lambda r: r["open_s"]),
    ("server RSS growth MB", lambda r: r["rss_growth_mb"]),
    ("server descriptor growth", lambda r: r["descriptor_growth"]),
)


def _growth(rows: list[dict], connection_rows: list[dict]) -> dict:
    sizes = [r["partitions"] for r in rows]
    growth = {name: growth_exponent(sizes, [float(figure(r)) for r in rows]) for name, figure in PARTITION_FIGURES}
    counts = [r["connections"] for r in connection_rows]
    growth.update({name: growth_exponent(counts, [float(figure(r)) for r in connection_rows])
                   for name, figure in CONNECTION_FIGURES})
    return growth


def _goals(rows: list[dict], connection_rows: list[dict]) -> list[dict]:
    goals = []
    largest = rows[-1]
    goals.append({"goal": f"clean open of {largest['partitions']:,} partitions (goal set at 10,000)",
                  "measured": f"{largest['clean']['open_s']:.2f} s", "target": f"≤ {GOAL_OPEN_S:g} s",
                  "passed": largest["clean"]["open_s"] <= GOAL_OPEN_S if largest["partitions"] >= 10_000 else None})
    worst = max(r["clean"]["descriptors"] / r["partitions"] for r in rows)
    goals.append({"goal": "descriptors per inactive partition after a clean open (worst size)",
                  "measured": f"{worst:.3f}", "target": f"≤ {GOAL_DESCRIPTORS_PER_PARTITION:g}",
                  "passed": worst <= GOAL_DESCRIPTORS_PER_PARTITION})
    fetched = [r for r in rows if r["fetch_partitions"] >= FETCH_PARTITIONS] or rows[-1:]
    idle = fetched[-1]["fetch_session"]
    idle_bytes = idle["idle_sent"] + idle["idle_received"]
    goals.append({"goal": f"idle fetch round of a {fetched[-1]['fetch_partitions']:,}-partition consumer with a "
                          "KIP-227 session: bytes sent + received",
                  "measured": f"{idle_bytes:,} B" + ("" if idle["session_granted"] else " (no session granted)"),
                  "target": f"≤ {GOAL_IDLE_FETCH_BYTES:,} B", "passed": idle_bytes <= GOAL_IDLE_FETCH_BYTES})
    if connection_rows:
        top = connection_rows[-1]
        per_1000 = top["rss_growth_mb"] * 1000 / top["connections"]
        goals.append({"goal": f"server RSS growth with {top['connections']:,} idle connections, per 1,000",
                      "measured": f"{per_1000:.1f} MB", "target": f"≤ {GOAL_CONNECTION_MB_PER_1000:g} MB",
                      "passed": per_1000 <= GOAL_CONNECTION_MB_PER_1000})
    return goals


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _b(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def render_scale(result: dict) -> str:
    """The run as text: a row per figure (a column per size, the exponent), then the goals."""
    s, rows, crows = result["settings"], result["partition_rows"], result["connection_rows"]
    out = [f"scale (Python {s['python']}, load average {', '.join(f'{x:.2f}' for x in s['load_average'])}): "
           f"stores of {', '.join(f'{n:,}' for n in s['partitions'])} partitions (one record each); the whole "
           f"run took {result['elapsed_s']:.0f} s"]
    header = ("figure", *(f"{r['partitions']:,} partitions" for r in rows), "b (∝ size^b)")
    out += text_table(header, [(name, *(_fmt(figure(r)) for r in rows), _b(result["growth"][name]))
                               for name, figure in PARTITION_FIGURES])
    if crows:
        out += ["", "idle connections to logstore serve (a store of 10 partitions)"]
        header = ("figure", *(f"{r['connections']:,} connections" for r in crows), "b (∝ size^b)")
        out += text_table(header, [(name, *(_fmt(figure(r)) for r in crows), _b(result["growth"][name]))
                                   for name, figure in CONNECTION_FIGURES])
    out += ["", "Kafka's documented limits (sources: docs/guide/benchmarks.md)"]
    out += [f"- {text}" for text in KAFKA_LIMITS.values()]
    out += ["", "goals", *text_table(("goal", "measured", "target", "result"),
                                     [(g["goal"], g["measured"], g["target"],
                                       "n/a" if g["passed"] is None else "PASS" if g["passed"] else "FAIL")
                                      for g in result["goals"]])]
    return "\n".join(out)


if __name__ == "__main__":
    child_main(sys.argv[1:], {"build": build, "crash": crash, "open_store": open_store})
