"""The machinery of the kill -9 crash harness (tests/crash/test_kill9.py describes what it does and
checks): the stores ("lineages") and their models, the writer child and its workload, the parent's
side (acknowledgements, kills, checks, the idempotence comparison), a worker's loop, and the figure.
"""

from __future__ import annotations

import json
import math
import os
import random
import select
import shutil
import signal
import statistics
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from crash_helpers import (
    OP_NAMES,
    T0_MS,
    CrashFS,
    PartitionModel,
    PayloadSpec,
    describe_status,
    fork_call,
    pack,
    partition_files_fingerprint,
    unpack_all,
    verify_partition,
)

from logstore import LogManager
from logstore.log.checkpoint import CLEAN_SHUTDOWN_MARKER

BUDGET_S = float(os.environ.get("LOGSTORE_KILL9_SECONDS", "40"))
MIN_CRASH_POINTS = int(os.environ.get("LOGSTORE_KILL9_MIN_POINTS", "1000"))
WORKERS = int(os.environ.get("LOGSTORE_KILL9_WORKERS", "2"))  # worker processes, each with its own stores
HARD_CAP_S = max(3 * BUDGET_S, BUDGET_S + 120)  # give up reaching the minimum after this
CHILD_TIMEOUT_S = 30.0  # a recovery or a check taking longer is reported as a hang
WRITER_MAX_LIFE_S = 20.0  # a writer never outlives a broken parent for long
ROUNDS_PER_LINEAGE = 30
# The share of crash points checked by a separate checker child, whose recovery the next writer's
# open (a second recovery of the same state) must reproduce exactly (idempotence); the others are
# checked by the next writer itself, right after its open: one recovery per crash point, not two.
SEPARATE_CHECKS = float(os.environ.get("LOGSTORE_KILL9_SEPARATE_CHECKS", "0.3"))

# acknowledgement kinds (pipe records, see crash_helpers.ACK)
READY, PHASE, INTENT, APPENDED, FLUSHED, TRUNC_INTENT, TRUNCATED, DEL_INTENT, DELETED, KILLING, COMPACT_INTENT = range(1, 12)
# workload phases
APPEND, FLUSH, ROLL, CHECKPOINT, TRUNCATE, DELETE, REOPEN, RETENTION, COMPACT = range(1, 10)
PHASE_NAMES = {0: "open", APPEND: "append", FLUSH: "flush", ROLL: "roll", CHECKPOINT: "checkpoint",
               TRUNCATE: "truncate", DELETE: "delete", REOPEN: "close+reopen", RETENTION: "retention",
               COMPACT: "compaction"}
STEP_WEIGHTS = [(APPEND, 55), (FLUSH, 22), (ROLL, 5), (CHECKPOINT, 6), (TRUNCATE, 4), (DELETE, 2), (REOPEN, 2),
                (RETENTION, 4)]
COMPACT_STEP_WEIGHTS = STEP_WEIGHTS + [(COMPACT, 6)]  # a compacted topic's writer also compacts
RETENTION_MS = 1000  # records are stamped T0_MS + offset: time-based retention removes offsets below a point
LINEAGE_KINDS = ("multi", "single", "compacted")
LIVE_LIMITS = {"multi": 600, "single": 2000, "compacted": 800}  # records per partition: small stores check fast


@dataclass
class Lineage:
    """One store that lives through many crash points."""

    number: int
    dirs: list[str]
    topic: str
    partitions: int
    multi: bool  # written with LogManager.append (keys spread the records)
    compacted: bool  # cleanup.policy has "compact": the writer compacts, the checker allows superseded gaps
    config: dict
    spec: PayloadSpec
    live_limit: int
    models: list[PartitionModel]
    rounds: int = 0
    pending: bool = False  # killed since the last check
    check_in_writer: bool = False  # the next writer checks what its own open recovered
    expected_open: dict | None = None  # what the checker saw; the next writer's open must match
    open_truncations: dict = field(default_factory=dict)  # partition -> truncate_to target under way at the kill
    last_kill: tuple | None = None  # (phase, fs op, torn) of the last self-inflicted kill
    last_acks: list = field(default_factory=list)  # the last writer's acknowledgements (debugging)
    # partition -> the log end offset when a compaction last started: truncations stay at or above it,
    # as Kafka's cleaner stays below the high watermark and truncation above it (a truncation below
    # it could remove the records that superseded what the cleaner removed: the older values would
    # be gone for good, by design, not by a crash)
    compacted_end: dict = field(default_factory=dict)


@dataclass
class Stats:
    crash_points: int = 0
    by_mode: Counter = field(default_factory=Counter)
    by_phase: Counter = field(default_factory=Counter)
    by_op: Counter = field(default_factory=Counter)
    recovery_kill_attempts: int = 0
    recovery_kills: int = 0  # the recovery was really interrupted
    checks: int = 0
    records_verified: int = 0
    flushed_checked: int = 0
    violations: Counter = field(default_factory=Counter)
    idempotence_violations: int = 0
    recovery_exceptions: int = 0
    workload_exceptions: int = 0
    hangs: int = 0
    recovery_ms: list = field(default_factory=list)
    recovery_ops: list = field(default_factory=list)
    lineages: int = 0
    examples: list = field(default_factory=list)

    def example(self, text: str) -> None:
        if len(self.examples) < 20:
            self.examples.append(text)


# --- the writer child ----------------------------------------------------------------------------

def readable_within(fd: int, timeout_s: float) -> bool:
    """Whether ``fd`` becomes readable within ``timeout_s`` (poll, not select: a test process may
    hold more than 1024 descriptors)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))


def _batch_size(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.2:
        return 1
    if roll < 0.7:
        return rng.randint(2, 50)
    if roll < 0.95:
        return rng.randint(51, 400)
    return rng.randint(401, 1500)


def _plan_batch(lin: Lineage, rng: random.Random, nxt: list[int], epochs: list[int], rr: int):
    """Records for one ``append`` and the offsets they will get. For a multi-partition topic the
    store sends a keyed record to its key's partition (``partition_for_key``) and a null-keyed one
    round-robin, so each record is built for the partition it will land in."""
    n = _batch_size(rng)
    ends = list(nxt)
    records = []
    spec = lin.spec
    if not lin.multi:
        for _ in range(n):
            records.append(spec.record(0, ends[0], epochs[0])._replace(offset=None))
            ends[0] += 1
        return records, ends, rr
    parts = range(lin.partitions)
    for _ in range(n):
        target = rr % lin.partitions
        target_null = spec.key_is_none(target, ends[target], epochs[target])
        keyed = [p for p in parts if not spec.key_is_none(p, ends[p], epochs[p])]
        if target_null and (not keyed or rng.random() < 0.5):
            p = target
            rr += 1
        else:
            p = rng.choice(keyed)
        records.append(spec.record(p, ends[p], epochs[p])._replace(offset=None))
        ends[p] += 1
    return records, ends, rr


def verify_store(lin: Lineage, store: LogManager, seed: int) -> list[dict]:
    """Every partition of a just-recovered store checked against the models."""
    probe_rng = random.Random(seed)
    return [verify_partition(store.get_log(lin.topic, p), lin.spec, p, lin.models[p], probe_rng,
                             compacted=lin.compacted) for p in range(lin.partitions)]


def writer_main(lin: Lineage, ack_fd: int, fs: CrashFS, rng: random.Random, epoch_base: int,
                open_report: str, check_seed: int | None) -> None:
    """The workload. With ``check_seed`` the writer first checks what its own open recovered (as the
    separate checker does) and reports it before READY, so the parent applies it to the models before
    any acknowledgement of this life."""
    phase = [0]

    def send(*messages: bytes) -> None:
        data = b"".join(messages)
        assert len(data) <= 4096  # atomic pipe write
        os.write(ack_fd, data)

    fs.before_kill = lambda op, torn: send(pack(KILLING, 0, phase[0], OP_NAMES.index(op), int(torn)))
    kill_at, fs.kill_at = fs.kill_at, None
    fs.armed, fs.count = True, 0  # counting only (no kill yet): the recovery's operations
    started = time.monotonic()
    store = LogManager(lin.dirs, fs=fs)
    open_ms = (time.monotonic() - started) * 1000
    fs.armed = False
    logs = [store.get_log(lin.topic, p) for p in range(lin.partitions)]
    if check_seed is not None:
        report = {"check": {"open_ms": open_ms, "ops": fs.count, "parts": verify_store(lin, store, check_seed),
                            "problems": store.problems}}
    else:
        report = {"lso": [log.log_start_offset for log in logs], "leo": [log.log_end_offset for log in logs],
                  "files": partition_files_fingerprint(lin.dirs), "problems": store.problems}
    with open(open_report, "w") as handle:
        json.dump(report, handle)
    nxt = [log.log_end_offset for log in logs]
    epochs = [model.cur_epoch for model in lin.models]
    next_epoch = epoch_base
    rr = store.round_robin_start(lin.topic) if lin.multi else 0  # keyless records start there
    flush_on_append = "flush.messages" in lin.config
    steps, weights = zip(*(COMPACT_STEP_WEIGHTS if lin.compacted else STEP_WEIGHTS))
    send(pack(READY))
    fs.count, fs.kill_at = 0, kill_at
    fs.armed = True
    deadline = time.monotonic() + WRITER_MAX_LIFE_S
    while time.monotonic() < deadline:
        step = rng.choices(steps, weights)[0]
        phase[0] = step
        p = rng.randrange(lin.partitions)
        log = logs[p]
        if step == APPEND:
            records, ends, rr = _plan_batch(lin, rng, nxt, epochs, rr)
            touched = [q for q in range(lin.partitions) if ends[q] > nxt[q]]
            send(pack(PHASE, 0, step), *(pack(INTENT, q, epochs[q], nxt[q], ends[q]) for q in touched))
            if lin.multi:
                infos = store.append(lin.topic, records)
            else:
                infos = {0: log.append(records)}
            for q in touched:
                info = infos.get(q)
                if info is None or (info.first_offset, info.last_offset) != (nxt[q], ends[q] - 1):
                    raise AssertionError(f"partition {q}: expected offsets {nxt[q]}..{ends[q] - 1}, got {info}")
            nxt = ends
            acks = [pack(APPENDED, q, 0, ends[q]) for q in touched]
            if flush_on_append:
                acks += [pack(FLUSHED, q, 0, logs[q].recovery_point) for q in touched]
            send(*acks)
            for q in touched:
                if nxt[q] - logs[q].log_start_offset > lin.live_limit:  # keep the logs small
                    phase[0] = DELETE
                    target = nxt[q] - lin.live_limit // 2
                    send(pack(PHASE, 0, DELETE), pack(DEL_INTENT, q, 0, target))
                    send(pack(DELETED, q, 0, logs[q].delete_records(target)))
        elif step == FLUSH:
            send(pack(PHASE, 0, step))
            if lin.multi and rng.random() < 0.5:
                store.flush()
                send(*(pack(FLUSHED, q, 0, logs[q].recovery_point) for q in range(lin.partitions)))
            else:
                send(pack(FLUSHED, p, 0, log.flush()))
        elif step == ROLL:
            send(pack(PHASE, 0, step))
            log.roll()
        elif step == CHECKPOINT:
            send(pack(PHASE, 0, step))
            store.checkpoint()
        elif step == TRUNCATE:
            floor = max(log.log_start_offset, lin.compacted_end.get(p, 0))
            if nxt[p] <= floor:
                continue
            target = rng.randint(max(floor, nxt[p] - 400), nxt[p] - 1)
            epoch = next_epoch
            next_epoch += 1
            send(pack(PHASE, 0, step), pack(TRUNC_INTENT, p, epoch, target))
            log.truncate_to(target)
            nxt[p] = target
            epochs[p] = epoch
            send(pack(TRUNCATED, p, epoch, target))
        elif step == DELETE:
            target = log.log_start_offset + int((nxt[p] - log.log_start_offset) * rng.random() ** 3)
            send(pack(PHASE, 0, step), pack(DEL_INTENT, p, 0, target))
            send(pack(DELETED, p, 0, log.delete_records(target)))
        elif step == RETENTION:
            # Time-based (retention.ms against the records' timestamps, T0_MS + offset) and, for
            # some stores, size-based (retention.bytes): whole segments leave the start of the log,
            # so the log start offset may rise up to the log end offset until the call returns.
            now_ms = T0_MS + nxt[p] + RETENTION_MS - rng.randint(0, lin.live_limit)
            send(pack(PHASE, 0, step), pack(DEL_INTENT, p, 0, nxt[p]))
            send(pack(DELETED, p, 0, log.delete_old_segments(now_ms=now_ms).log_start_offset))
        elif step == COMPACT:
            # LogManager.compact: the cleaner recopies the non-active segments into .cleaned files and
            # swaps them in (.swap, .deleted); with "compact,delete" retention runs after it.
            which = None if rng.random() < 0.5 else p
            parts = range(lin.partitions) if which is None else [p]
            now_ms = T0_MS + min(nxt) + RETENTION_MS - rng.randint(0, lin.live_limit)
            with_retention = "delete" in lin.config["cleanup.policy"]
            for q in parts:
                lin.compacted_end[q] = nxt[q]  # this writer's own truncations; the parent's copy below
            send(pack(PHASE, 0, step), *(pack(COMPACT_INTENT, q, 0, nxt[q]) for q in parts),
                 *(pack(DEL_INTENT, q, 0, nxt[q]) for q in parts if with_retention))
            store.compact(lin.topic, which, now_ms=now_ms)
            if with_retention:
                send(*(pack(DELETED, q, 0, logs[q].log_start_offset) for q in parts))
        elif step == REOPEN:
            send(pack(PHASE, 0, step))
            store.close()
            send(*(pack(FLUSHED, q, 0, nxt[q]) for q in range(lin.partitions)))
            store = LogManager(lin.dirs, fs=fs)
            logs = [store.get_log(lin.topic, q) for q in range(lin.partitions)]
            if [log.log_end_offset for log in logs] != nxt:
                raise AssertionError(f"after a clean close and reopen the log end offsets are "
                                     f"{[log.log_end_offset for log in logs]}, expected {nxt}")
            rr = store.round_robin_start(lin.topic) if lin.multi else 0
    raise AssertionError("the writer outlived its maximum life: the parent never killed it")


# --- the parent side -----------------------------------------------------------------------------

def new_lineage(root: Path, number: int, rng: random.Random) -> Lineage:
    kind = LINEAGE_KINDS[number % len(LINEAGE_KINDS)]
    multi, compacted = kind != "single", kind == "compacted"
    base = root / f"lineage-{number}"
    dirs = [str(base / "a"), str(base / "b")] if kind == "multi" else [str(base / "a")]
    partitions = {"multi": 4, "single": 1, "compacted": 3}[kind]
    config = {
        "segment.bytes": rng.choice([8 * 1024, 16 * 1024] if compacted else [8 * 1024, 16 * 1024, 64 * 1024]),
        "segment.index.bytes": rng.choice([96, 512, 4096]),
        "index.interval.bytes": rng.choice([0, 512, 4096]),
        "retention.ms": RETENTION_MS,
        "file.delete.delay.ms": 0,
    }
    if rng.random() < 0.5:
        config["retention.bytes"] = config["segment.bytes"] * rng.choice([3, 6])
    if compacted:
        config["cleanup.policy"] = rng.choice(["compact", "compact", "compact,delete"])
    if rng.random() < 0.25:
        config["compression.type"] = "gzip"
    if rng.random() < 0.25:
        config["flush.messages"] = rng.choice([50, 500])
    topic = kind

    def create() -> None:
        with LogManager(dirs) as store:
            store.create_topic(topic, partitions, config)

    outcome = fork_call(create, CHILD_TIMEOUT_S)
    assert outcome.status == "ok", f"creating the topic failed: {outcome.status} {outcome.result or outcome.detail}"
    return Lineage(number, dirs, topic, partitions, multi, compacted, config,
                   PayloadSpec(rng.getrandbits(32), partitions, null_keys=not compacted),
                   live_limit=LIVE_LIMITS[kind], models=[PartitionModel() for _ in range(partitions)])


def apply_acks(lin: Lineage, messages, state: dict) -> None:
    for kind, p, epoch, a, b in messages:
        if kind == READY:
            continue
        if kind == PHASE:
            state["phase"] = epoch
            continue
        if kind == KILLING:
            state["killing"] = (epoch, OP_NAMES[a], bool(b))
            continue
        model = lin.models[p]
        if kind == INTENT:
            model.intend(a, b, epoch)
        elif kind == APPENDED:
            model.appended = max(model.appended, a)
        elif kind == FLUSHED:
            model.flushed = max(model.flushed, a)
            model.appended = max(model.appended, a)
        elif kind == TRUNC_INTENT:
            model.truncating(a, epoch)
            state["next_epoch"] = max(state["next_epoch"], epoch + 1)
            lin.open_truncations[p] = a
        elif kind == TRUNCATED:
            lin.open_truncations.pop(p, None)  # the epochs tell a stale survivor from its replacement
        elif kind == DEL_INTENT:
            model.lso_max = max(model.lso_max, a)
        elif kind == COMPACT_INTENT:
            lin.compacted_end[p] = max(lin.compacted_end.get(p, 0), a)
        elif kind == DELETED:
            # The call returned: the log start offset is exactly ``a`` now (calls are sequential),
            # and durable (delete_records checkpoints it; retention removed the segments below it).
            model.lso_min = max(model.lso_min, a)
            model.lso_max = model.lso_min


def recovery_failed(lin: Lineage, where: str, text: str, state: dict, stats: Stats) -> None:
    """Count a recovery that raised (or died)."""
    stats.recovery_exceptions += 1
    stats.example(f"lineage {lin.number} {lin.config}: {where} failed: {text[-1500:]}")
    lin.rounds = ROUNDS_PER_LINEAGE  # the store cannot be opened any more: retire it


def run_writer(lin: Lineage, rng: random.Random, stats: Stats, state: dict, work: Path) -> None:
    """Fork a writer, let it run, SIGKILL it (or let it kill itself), record what it acknowledged."""
    keep = os.environ.get("LOGSTORE_KILL9_KEEP")
    snapshot = Path(lin.dirs[0]).parent.with_name(f"checked-{lin.number}")
    if keep and lin.expected_open is not None:
        shutil.rmtree(snapshot, ignore_errors=True)
        shutil.copytree(Path(lin.dirs[0]).parent, snapshot)
    op_mode = rng.random() < 0.35
    kill_at = int(math.exp(rng.uniform(0, math.log(800)))) if op_mode else None
    open_report = work / "writer-open.json"
    error_file = work / "writer-error.txt"
    for path in (open_report, error_file):
        path.unlink(missing_ok=True)
    child_seed = rng.getrandbits(64)
    check_seed = rng.getrandbits(64) if lin.check_in_writer else None
    epoch_base = state["next_epoch"]
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the writer: never returns into pytest
        try:
            os.close(read_fd)
            child_rng = random.Random(child_seed)
            writer_main(lin, write_fd, CrashFS(kill_at=kill_at, rng=child_rng), child_rng, epoch_base,
                        str(open_report), check_seed)
        except BaseException:  # noqa: BLE001 - reported through the error file
            error_file.write_text(traceback.format_exc())
        finally:
            os._exit(3)
    os.close(write_fd)
    buffer = bytearray()
    ready = False
    state["phase"], state["killing"] = 0, None
    lin.last_acks, lin.open_truncations, lin.last_kill = [], {}, None

    def pump(timeout: float) -> bool:
        """Read acknowledgements for up to ``timeout`` s; False at end of file (the writer died)."""
        nonlocal ready
        end = time.monotonic() + timeout
        while True:
            remaining = end - time.monotonic()
            if remaining <= 0:
                return True
            readable = readable_within(read_fd, remaining)
            if not readable:
                return True
            chunk = os.read(read_fd, 65536)
            if not chunk:
                return False
            buffer.extend(chunk)
            whole = len(buffer) - len(buffer) % 24
            messages = list(unpack_all(bytes(buffer[:whole])))
            del buffer[:whole]
            lin.last_acks.extend(messages)
            if not ready and messages and messages[0][0] == READY:  # READY is the writer's first message
                ready = True
                if check_seed is not None:  # the writer checked its own recovery: the models' new baseline
                    stats.checks += 1
                    lin.pending = lin.check_in_writer = False
                    record_check(lin, json.loads(open_report.read_text())["check"], stats)
            apply_acks(lin, messages, state)

    alive = True
    started = time.monotonic()
    while alive and not ready and time.monotonic() - started < CHILD_TIMEOUT_S:
        alive = pump(0.05)
    if alive and not ready:
        stats.hangs += 1
        stats.example(f"lineage {lin.number}: the writer's open did not finish within {CHILD_TIMEOUT_S} s")
    if alive and ready:
        # Short writer lives: most crash points fall within a few dozen file operations of the open.
        if op_mode:
            delay = 0.25  # a kill point past the workload's reach becomes a timed kill
        else:
            roll = rng.random()
            delay = (rng.uniform(0, 0.01) if roll < 0.6 else rng.uniform(0.01, 0.05) if roll < 0.9
                     else rng.uniform(0.05, 0.25))
        limit = time.monotonic() + delay
        while alive and time.monotonic() < limit:
            alive = pump(limit - time.monotonic())
    killed_by_parent = alive
    if alive:
        os.kill(pid, signal.SIGKILL)
    while pump(5.0):
        pass
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    lin.pending = ready
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        if ready:
            stats.crash_points += 1
            if state["killing"] and not killed_by_parent:
                lin.last_kill = state["killing"]
                phase, op, torn = state["killing"]
                stats.by_mode["fs-op"] += 1
                stats.by_phase[PHASE_NAMES[phase]] += 1
                stats.by_op[op + (" (torn)" if torn else "")] += 1
            else:
                stats.by_mode["timer"] += 1
                stats.by_phase[PHASE_NAMES[state["phase"]]] += 1
    else:
        detail = error_file.read_text() if error_file.exists() else describe_status(status)
        if ready:
            stats.workload_exceptions += 1
            stats.example(f"lineage {lin.number} {lin.config}: writer workload failed: {detail[-1500:]}")
            lin.rounds = ROUNDS_PER_LINEAGE
        else:
            recovery_failed(lin, "the writer's open", detail, state, stats)
    if (ready and lin.expected_open is not None
            and not compare_open(lin, json.loads(open_report.read_text()), stats) and keep):
            shutil.copytree(snapshot, Path(keep) / f"idempotence-{stats.checks}-lineage-{lin.number}")
    lin.expected_open = None


def compare_open(lin: Lineage, seen: dict, stats: Stats) -> bool:
    """The writer's open (a second recovery of the checked state) must find exactly what the
    checker's recovery left."""
    expected = lin.expected_open
    differences = []
    for key in ("lso", "leo"):
        if seen[key] != expected[key]:
            differences.append(f"{key}: checker {expected[key]}, writer {seen[key]}")
    files_a, files_b = expected["files"], seen["files"]
    for name in sorted(set(files_a) | set(files_b)):
        if files_a.get(name) == files_b.get(name):
            continue
        if name not in files_a or name not in files_b:
            differences.append(f"{name} only in the {'checker' if name in files_a else 'writer'}'s view")
        elif expected["clean"] and not name.endswith(".log"):
            # The checker found a clean-shutdown marker and rebuilt nothing; the writer's open (unclean:
            # the checker removed the marker) rebuilds indexes from the data, which legitimately gives
            # other entries than the ones made while appending.
            continue
        else:
            differences.append(f"{name} differs")
    if differences:
        stats.idempotence_violations += 1
        stats.example(f"lineage {lin.number}: a second recovery changed the store: {'; '.join(differences[:6])}")
    return not differences


def kill_a_recovery(lin: Lineage, rng: random.Random, stats: Stats, state: dict) -> None:
    """Compound failure: start a recovery and SIGKILL it in the middle (after a random delay, or
    just before its N-th mutating file operation)."""
    stats.recovery_kill_attempts += 1
    if rng.random() < 0.5 and stats.recovery_ops:
        typical_ops = max(1, int(statistics.median(stats.recovery_ops[-20:])))
        kill_at, delay = rng.randint(1, typical_ops + 1), None
    else:
        typical_s = statistics.median(stats.recovery_ms[-20:]) / 1000 if stats.recovery_ms else 0.02
        kill_at, delay = None, rng.uniform(0, typical_s * 1.2)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # never returns into pytest
        try:
            os.close(read_fd)
            fs = CrashFS(kill_at=kill_at)
            fs.armed = True
            try:
                LogManager(lin.dirs, fs=fs)  # recovery, left unclosed
                os.write(write_fd, b"o")
            except BaseException:  # noqa: BLE001 - reported to the parent
                os.write(write_fd, b"e" + traceback.format_exc().encode()[-3000:])
        finally:
            os._exit(0)
    os.close(write_fd)
    if delay is not None:
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
    readable = readable_within(read_fd, CHILD_TIMEOUT_S)
    answer = os.read(read_fd, 4096) if readable else b""
    os.close(read_fd)
    if not readable:
        os.kill(pid, signal.SIGKILL)
        stats.hangs += 1
        stats.example(f"lineage {lin.number}: a recovery did not finish within {CHILD_TIMEOUT_S} s")
    _, status = os.waitpid(pid, 0)
    if answer.startswith(b"e"):
        recovery_failed(lin, "a recovery (before the compound kill)", answer[1:].decode(errors="replace"),
                        state, stats)
    elif not answer and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        stats.recovery_kills += 1


def check(lin: Lineage, rng: random.Random, stats: Stats, state: dict) -> None:
    """Recover in a fresh child, verify every partition against the model, and keep what it saw
    for the next writer's open to compare."""
    seed = rng.getrandbits(64)
    clean = any(os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_MARKER)) for path in lin.dirs)

    def verify() -> dict:
        fs = CrashFS()
        fs.armed = True  # count only
        started = time.monotonic()
        store = LogManager(lin.dirs, fs=fs)
        open_ms = (time.monotonic() - started) * 1000
        ops = fs.count
        parts = verify_store(lin, store, seed)
        # Exit without close(): the dirs stay unclean, so the writer's open recovers a second time.
        return {"open_ms": open_ms, "ops": ops, "parts": parts, "files": partition_files_fingerprint(lin.dirs),
                "problems": store.problems}

    keep = os.environ.get("LOGSTORE_KILL9_KEEP")  # debugging: keep the crashed state of a failing check
    snapshot = Path(lin.dirs[0]).parent.with_name(f"snapshot-{lin.number}")
    if keep:
        shutil.rmtree(snapshot, ignore_errors=True)
        shutil.copytree(Path(lin.dirs[0]).parent, snapshot)
    outcome = fork_call(verify, CHILD_TIMEOUT_S)
    stats.checks += 1
    lin.pending = False
    if keep and (outcome.status != "ok" or any(any(part["counts"].values()) for part in outcome.result["parts"])):
        target = Path(keep) / f"check-{stats.checks}-lineage-{lin.number}"
        shutil.copytree(snapshot, target / "before-recovery")
        shutil.copytree(Path(lin.dirs[0]).parent, target / "after-recovery")
        (target / "model.json").write_text(json.dumps({
            "config": lin.config, "seed": lin.spec.seed, "partitions": lin.partitions,
            "models": [vars(model) for model in lin.models], "result": outcome.result or outcome.detail,
            "last_kill": lin.last_kill, "last_writer_acks": lin.last_acks}, indent=1, default=str))
    if outcome.status == "hang":
        stats.hangs += 1
        stats.example(f"lineage {lin.number}: recovery/check hung: {outcome.detail}")
        lin.rounds = ROUNDS_PER_LINEAGE
        return
    if outcome.status != "ok":
        recovery_failed(lin, "recovery/check", outcome.result or outcome.detail, state, stats)
        return
    result = outcome.result
    record_check(lin, result, stats)
    lin.expected_open = {"lso": [part["lso"] for part in result["parts"]],
                         "leo": [part["leo"] for part in result["parts"]], "files": result["files"], "clean": clean}


def record_check(lin: Lineage, result: dict, stats: Stats) -> None:
    """Count what a check found, and make what the recovery left the models' new baseline."""
    stats.recovery_ms.append(result["open_ms"])
    stats.recovery_ops.append(result["ops"])
    for p, part in enumerate(result["parts"]):
        model = lin.models[p]
        stats.records_verified += part["records"]
        stats.flushed_checked += max(0, model.flushed - min(part["lso"], model.lso_max))
        for kind, amount in part["counts"].items():
            stats.violations[kind] += amount
        for text in part["examples"]:
            stats.example(f"lineage {lin.number} {lin.config}: {text}")
        if any(part["counts"].values()):
            lin.rounds = ROUNDS_PER_LINEAGE  # retire it: the damage would be counted again at every check
        model.recovered(part["lso"], part["leo"])


def figure(stats: Stats, seconds: float) -> str:
    v = stats.violations
    phases = ", ".join(f"{name} {count}" for name, count in stats.by_phase.most_common())
    ops = ", ".join(f"{name} {count}" for name, count in stats.by_op.most_common())
    recovery = (f"median/max recovery {statistics.median(stats.recovery_ms):.0f}/{max(stats.recovery_ms):.0f} ms"
                if stats.recovery_ms else "no recovery timed")
    return (f"crash points: {stats.crash_points}, flushed records lost: {v['flushed_lost']} "
            f"(timer {stats.by_mode['timer']}, fs-op {stats.by_mode['fs-op']}; during: {phases}; fs ops: {ops}; "
            f"recoveries killed mid-way: {stats.recovery_kills}/{stats.recovery_kill_attempts}); "
            f"appended records lost: {v['appended_lost']}; offset gaps: {v['gaps']}; "
            f"duplicates/reorders: {v['duplicates']}; phantoms: {v['phantoms']}; payload mismatches: {v['mismatches']}; "
            f"deleted records resurrected: {v['lso_resurrected']}; log start overshoot: {v['lso_overshoot']}; "
            f"log end inconsistencies: {v['leo_inconsistent']}; index probe failures: {v['index_probe_failures']}; "
            f"time index probe failures: {v['time_index_probe_failures']}; "
            f"idempotence violations: {stats.idempotence_violations}; recovery exceptions: {stats.recovery_exceptions}; "
            f"workload exceptions: {stats.workload_exceptions}; hangs: {stats.hangs}; "
            f"checks: {stats.checks}, records verified: {stats.records_verified}, "
            f"flushed offsets checked: {stats.flushed_checked}; {recovery}; lineages: {stats.lineages}; {seconds:.1f} s")


def run_worker(root: Path, seed: str, min_points: int) -> dict:
    """One worker's share of the crash points, on stores of its own under ``root``: round after
    round until it has spent the budget and reached ``min_points`` (or hit the hard cap). Returns its
    ``Stats`` as a dict (it runs in a forked child)."""
    rng = random.Random(seed)
    stats = Stats()
    state = {"next_epoch": 1, "phase": 0, "killing": None}
    work = root / "work"
    work.mkdir(parents=True)
    started = time.monotonic()
    lineages = [new_lineage(root, number, rng) for number in range(len(LINEAGE_KINDS))]
    number = stats.lineages = len(lineages)
    turn = 0
    while True:
        elapsed = time.monotonic() - started
        if (elapsed >= BUDGET_S and stats.crash_points >= min_points) or elapsed >= HARD_CAP_S:
            break
        slot = turn % len(lineages)
        turn += 1
        lin = lineages[slot]
        if lin.rounds >= ROUNDS_PER_LINEAGE:  # retire it; a fresh one gets a new random config
            if lin.pending:
                check(lin, rng, stats, state)
            shutil.rmtree(Path(lin.dirs[0]).parent, ignore_errors=True)
            lin = lineages[slot] = new_lineage(root, number + (slot - number) % len(LINEAGE_KINDS), rng)
            number = lin.number + 1
            stats.lineages += 1
        lin.rounds += 1
        if lin.pending:
            if rng.random() < 0.1:
                kill_a_recovery(lin, rng, stats, state)
            if rng.random() < SEPARATE_CHECKS:
                check(lin, rng, stats, state)
                if lin.rounds >= ROUNDS_PER_LINEAGE:
                    continue
            else:
                lin.check_in_writer = True
        run_writer(lin, rng, stats, state, work)
    for lin in lineages:  # the last crash of each store is checked too
        if lin.pending:
            if rng.random() < 0.1:
                kill_a_recovery(lin, rng, stats, state)
            check(lin, rng, stats, state)
    return {name: dict(value) if isinstance(value, Counter) else value for name, value in vars(stats).items()}


def merge_stats(parts: list[dict]) -> Stats:
    """The workers' ``Stats`` added up."""
    total = Stats()
    for part in parts:
        for name, value in part.items():
            mine = getattr(total, name)
            if isinstance(mine, Counter):
                mine.update(value)
            elif isinstance(mine, list):
                mine.extend(value)
            else:
                setattr(total, name, mine + value)
    total.examples = total.examples[:20]
    return total
