"""Power-loss states at scale (docs/design.md §7, §12).

A deterministic single-threaded workload runs once on a ``RecordingFileSystem``
(``logstore.testing``): two topics in one data dir, a plain one of 2 partitions with time-based
retention and a compacted one; small segments and indexes, so every step touches few small files.
Steps: appends with ``acks=1`` and ``acks="all"``, ``flush()``, rolls, ``truncate_to``,
``delete_records``, retention (``delete_old_segments``), compaction (``LogManager.compact``),
checkpoints, and clean close + reopen. The workload marks in the recording what it intends and what
each call acknowledged.

Then, for every cut point of the recording (a power loss just before that file operation), worker
processes draw states a power loss can leave there (``crash_states.DiskModel``: every file keeps its
fsynced content plus a prefix of its unsynced writes, the last one possibly torn, independently of
the other files; every directory keeps a prefix of its changes since its last fsync), always
including the two extremes (everything kept: a process crash; nothing unsynced kept). Each distinct
state is written into a scratch directory (/dev/shm when there is one) and opened by a real
``LogManager`` (recovery), then every partition is read end to end and checked
(``crash_helpers.verify_partition``):

- every record acknowledged as durable (an ``acks="all"`` append returned, or below the recovery
  point a ``flush()`` or a clean close returned) is there with its exact key, value, headers and
  timestamp, at its offset;
- offsets are contiguous from the log start offset to the log end offset (on the compacted topic a
  missing offset must have been superseded by a later record with the same key that is there);
- nothing is there that no writer attempted (phantoms), and records removed by a returned
  ``truncate_to`` or ``delete_records`` stay removed;
- the open succeeds and no partition is missing or unreadable (a "damaged" partition after a state a
  real power loss can leave is a recovery bug).

Engine bugs this test found have regression tests at the end of this file: a clean close did not
sync the final time index entry; recovery kept a later segment after one that lost its unsynced tail
(a hole in the offsets, also in compacted topics); a roll's final time index entry was never synced
once the recovery point had passed the segment.

Each state is counted once however many cut points produce it (a digest of every file and dir); a
state is checked again only against a stronger set of acknowledgements. The run goes on until it has
spent its budget and checked ``LOGSTORE_POWER_LOSS_MIN_STATES`` (default 10,000) distinct states,
and fails if it could not within the hard cap. The figure is printed and written to
``test-results/power_loss_states.txt`` (details in ``power_loss_states.json``).

Settings: ``LOGSTORE_POWER_LOSS_SECONDS`` (default 40), ``LOGSTORE_POWER_LOSS_MIN_STATES``,
``LOGSTORE_POWER_LOSS_WORKERS`` (default 2), ``LOGSTORE_POWER_LOSS_SEED`` (the sampling; the
workload is fixed), ``LOGSTORE_POWER_LOSS_KEEP=<dir>`` keeps failing states.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
import traceback
from collections import Counter
from pathlib import Path

import pytest
from crash_helpers import (
    T0_MS,
    VIOLATIONS,
    PartitionModel,
    PayloadSpec,
    collect_child,
    fork_child,
    verify_partition,
)
from crash_states import DiskModel, State, fingerprint, materialise, scratch_root

from logstore import LogManager, Record
from logstore.testing import RecordingFileSystem, SimulatedCrashFileSystem

BUDGET_S = float(os.environ.get("LOGSTORE_POWER_LOSS_SECONDS", "40"))
MIN_STATES = int(os.environ.get("LOGSTORE_POWER_LOSS_MIN_STATES", "10000"))
WORKERS = int(os.environ.get("LOGSTORE_POWER_LOSS_WORKERS", "2"))
HARD_CAP_S = max(3 * BUDGET_S, BUDGET_S + 120)  # give up reaching the minimum after this
RESULTS_DIR = Path(__file__).resolve().parents[2] / "test-results"

WORKLOAD_SEED = 20261125
WORKLOAD_STEPS = 160
RETENTION_MS = 1000  # records are stamped T0_MS + offset: retention.ms removes offsets below a point
STORE_CONFIG = {"log.cleaner.threads": 0}
TOPICS = {
    "p": (2, {"segment.bytes": 2048, "segment.index.bytes": 96, "index.interval.bytes": 256,
              "retention.ms": RETENTION_MS, "file.delete.delay.ms": 0}),
    "c": (1, {"segment.bytes": 2048, "segment.index.bytes": 96, "index.interval.bytes": 256,
              "cleanup.policy": "compact", "file.delete.delay.ms": 0}),
}
SPECS = {topic: PayloadSpec(7 + n, partitions, null_keys=topic != "c", large_values=False)
         for n, (topic, (partitions, _)) in enumerate(TOPICS.items())}
KEYS = [(topic, p) for topic, (partitions, _) in TOPICS.items() for p in range(partitions)]
STEPS = [("append", 30), ("append-durable", 22), ("flush", 10), ("roll", 5), ("truncate", 5), ("delete", 3),
         ("retention", 5), ("compaction", 5), ("checkpoint", 3), ("close+reopen", 2)]


# --- the workload, recorded ----------------------------------------------------------------------

def run_workload(root: str) -> list[tuple]:
    """Run the workload on a ``RecordingFileSystem`` rooted at ``root``; return the recording."""
    rng = random.Random(WORKLOAD_SEED)
    fs = RecordingFileSystem(root)
    data = os.path.join(root, "data")
    store = LogManager([data], fs=fs, config=STORE_CONFIG)
    for topic, (partitions, config) in TOPICS.items():
        store.create_topic(topic, partitions, config)
    fs.mark(("ready",))
    nxt = dict.fromkeys(KEYS, 0)
    epochs = dict.fromkeys(KEYS, 0)
    compacted_end = dict.fromkeys(KEYS, 0)
    next_epoch = 1
    names, weights = zip(*STEPS)
    for _ in range(WORKLOAD_STEPS):
        step = rng.choices(names, weights)[0]
        key = rng.choice(KEYS) if step != "compaction" else ("c", 0)
        topic, p = key
        log = store.get_log(topic, p)
        fs.mark(("phase", step))
        if step.startswith("append"):
            count = rng.choice([1, 1, 2, 4, 8, 16, 30])
            start = nxt[key]
            records = [SPECS[topic].record(p, start + i, epochs[key])._replace(offset=None) for i in range(count)]
            fs.mark(("intent", key, start, start + count, epochs[key]))
            durable = step == "append-durable"
            info = log.append(records, acks="all" if durable else 1)
            assert (info.first_offset, info.last_offset) == (start, start + count - 1), info
            nxt[key] = start + count
            if durable:
                fs.mark(("durable", key, nxt[key]))
            if nxt[key] - log.log_start_offset > 120:  # keep the logs small
                target = nxt[key] - 60
                fs.mark(("lso_intent", key, target))
                fs.mark(("lso_acked", key, log.delete_records(target)))
        elif step == "flush":
            fs.mark(("durable", key, log.flush()))
        elif step == "roll":
            if log.active_segment.base_offset < log.log_end_offset:
                log.roll()
        elif step == "truncate":
            # Not below a compaction's end (as Kafka truncates above the high watermark and cleans
            # below it): the records that superseded what the cleaner removed must stay.
            floor = max(log.log_start_offset, compacted_end[key])
            if nxt[key] > floor:
                target = rng.randint(max(floor, nxt[key] - 30), nxt[key] - 1)
                fs.mark(("trunc_intent", key, target, next_epoch))
                log.truncate_to(target)
                fs.mark(("truncated", key, target, next_epoch))
                nxt[key], epochs[key] = target, next_epoch
                next_epoch += 1
        elif step == "delete":
            target = log.log_start_offset + int((nxt[key] - log.log_start_offset) * rng.random() ** 2)
            fs.mark(("lso_intent", key, target))
            fs.mark(("lso_acked", key, log.delete_records(target)))
        elif step == "retention":
            fs.mark(("lso_intent", key, nxt[key]))  # whole segments may go, up to the log end
            log.delete_old_segments(now_ms=T0_MS + nxt[key] + RETENTION_MS - rng.randint(0, 80))
        elif step == "compaction":
            compacted_end[key] = nxt[key]
            store.compact(topic, p, now_ms=T0_MS + nxt[key])
        elif step == "checkpoint":
            store.checkpoint()
        elif step == "close+reopen":
            store.close()
            for other in KEYS:
                fs.mark(("durable", other, nxt[other]))
            store = LogManager([data], fs=fs, config=STORE_CONFIG)
    store.close()
    return fs.operations


# --- what must be there, from the marks ----------------------------------------------------------

class AckModel:
    """The ``PartitionModel`` of every partition after the marks seen so far. Under a power loss only
    what was acknowledged as durable must survive (``appended`` = ``flushed``)."""

    def __init__(self) -> None:
        self.models = {key: PartitionModel() for key in KEYS}
        self.phase = "open"
        self.ready = False

    def apply(self, mark: tuple) -> None:
        kind = mark[0]
        if kind == "ready":
            self.ready = True
            return
        if kind == "phase":
            self.phase = mark[1]
            return
        model = self.models[mark[1]]
        if kind == "intent":
            model.intend(mark[2], mark[3], mark[4])
        elif kind == "durable":
            model.flushed = model.appended = max(model.flushed, mark[2])
        elif kind == "trunc_intent":
            model.flushed = model.appended = min(model.flushed, mark[2])
        elif kind == "truncated":
            # Returned: the records at and above the target are gone for good. A record of an older
            # epoch found there now is a resurrection (a payload mismatch).
            target, epoch = mark[2], mark[3]
            model.epochs = [bound for bound in model.epochs if bound[0] < target] + [(target, epoch)]
            model.cur_epoch = epoch
        elif kind == "lso_intent":
            model.lso_max = max(model.lso_max, mark[2])
        elif kind == "lso_acked":
            model.lso_min = max(model.lso_min, mark[2])
            model.lso_max = max(model.lso_max, mark[2])

    def signature(self) -> tuple:
        return tuple((m.flushed, m.lso_min, m.lso_max, m.max_end, tuple(map(tuple, m.epochs)))
                     for m in self.models.values())


# --- checking one state --------------------------------------------------------------------------

def check_state(path: str, files: dict, dirs: list, acks: AckModel, rng: random.Random) -> dict:
    """Materialise a state, recover it with a real ``LogManager`` and verify every partition."""
    materialise(path, files, dirs)
    fs = SimulatedCrashFileSystem()  # a real file system; abandon() releases what the open holds
    result = {"counts": Counter(), "examples": [], "records": 0, "durable": 0}
    try:
        store = LogManager([os.path.join(path, "data")], fs=fs, config=STORE_CONFIG)
        missing = [key for key in KEYS if key in store.missing_partitions]
        if missing or store.offline_dirs:
            result["counts"]["recovery_failures"] += 1
            result["examples"].append(f"missing partitions {missing}, offline dirs {store.offline_dirs}; "
                                      f"problems: {store.problems}")
            return result
        for topic, p in KEYS:
            model = acks.models[(topic, p)]
            part = verify_partition(store.get_log(topic, p), SPECS[topic], p, model, rng, probes=2,
                                    compacted=topic == "c")
            result["records"] += part["records"]
            result["durable"] += max(0, model.flushed - min(part["lso"], model.lso_max))
            for kind, amount in part["counts"].items():
                result["counts"][kind] += amount
            result["examples"] += [f"{topic}-{p} {text}" for text in part["examples"]]
    except Exception:  # noqa: BLE001 - a recovery or a read that raises on a legitimate state is a bug
        result["counts"]["recovery_failures"] += 1
        result["examples"].append(traceback.format_exc()[-1500:])
    finally:
        fs.abandon()
    return result


def run_worker(ops: list[tuple], worker: int, seed: int, share: int) -> dict:
    """Check this worker's share of the states (those whose digest falls to it) until the budget is
    spent and ``share`` distinct states were checked (or the hard cap)."""
    rng = random.Random(f"{seed}/{worker}")
    started = time.monotonic()
    scratch = os.path.join(scratch_root(), f"logstore-power-loss-{os.getpid()}")
    keep = os.environ.get("LOGSTORE_POWER_LOSS_KEEP")
    ready_at = next(i for i, op in enumerate(ops) if op == ("mark", ("ready",)))
    cuts = [i for i in range(ready_at, len(ops) + 1) if i == len(ops) or ops[i][0] != "mark"]
    # Every worker draws states at every cut point but checks only those whose digest falls to it, so
    # the workers' distinct states never overlap (their sum is the run's count).
    # The first pass stays below the minimum so that it reaches every cut point; later passes draw
    # more random states at every cut until the minimum and the budget are both reached.
    per_cut = max(1, int(0.6 * share * WORKERS / max(1, len(cuts))))
    cut_set = set(cuts)
    distinct: set[bytes] = set()
    checked: set[tuple] = set()
    out = {"counts": Counter(), "examples": [], "records": 0, "durable": 0, "checks": 0, "cuts": 0, "passes": 0,
           "by_phase": Counter(), "by_op": Counter(), "torn": 0, "undone": 0}

    def done() -> bool:
        elapsed = time.monotonic() - started
        return (elapsed >= BUDGET_S and len(distinct) >= share) or elapsed >= HARD_CAP_S

    try:
        while not done():
            disk, acks = DiskModel(), AckModel()
            extra = out["passes"] > 0  # later passes draw more random states at every cut
            for i in range(len(ops) + 1):
                if i in cut_set and not done():
                    out["cuts"] += not extra
                    next_op = ops[i][0] if i < len(ops) else "end"
                    modes = ["random"] * per_cut if extra else ["all", "none"] + ["random"] * per_cut
                    if disk.uncertainty() == 0:
                        modes = modes[:1]
                    signature = acks.signature()
                    for mode in modes:
                        state = disk.sample(rng, mode)
                        files, dirs = disk.files(state)
                        digest = fingerprint(files, dirs)
                        if digest[0] % WORKERS != worker or (digest, signature) in checked:
                            continue
                        checked.add((digest, signature))
                        new = digest not in distinct
                        distinct.add(digest)
                        result = check_state(scratch, files, dirs, acks, rng)
                        out["checks"] += 1
                        if new:
                            out["by_phase"][acks.phase] += 1
                            out["by_op"][next_op] += 1
                            out["torn"] += any(tear for _, _, tear in state.files)
                            out["undone"] += any(kept < len(disk.pending.get(d, ())) for d, kept in state.dirs)
                        out["records"] += result["records"]
                        out["durable"] += result["durable"]
                        out["counts"].update(result["counts"])
                        listed = out["examples"]
                        if result["examples"] and len(listed) < (200 if keep else 12):
                            listed.append(f"cut {i} (before {next_op}, during "
                                          f"{acks.phase}, {mode}): " + " | ".join(result["examples"][:3]))
                            if keep:
                                materialise(os.path.join(keep, f"w{worker}-cut{i}-{len(listed)}"), files, dirs)
                if i < len(ops):
                    if ops[i][0] == "mark":
                        acks.apply(ops[i][1])
                    disk.step(ops[i])
            out["passes"] += 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    out["distinct"] = [digest.hex() for digest in distinct]
    out["seconds"] = time.monotonic() - started
    return out


@pytest.mark.slow
def test_power_loss_states(tmp_path: Path, record_property) -> None:
    seed = int(os.environ.get("LOGSTORE_POWER_LOSS_SEED", random.SystemRandom().getrandbits(32)))
    started = time.monotonic()
    recording = tmp_path / "recording"
    recording.mkdir()
    ops = run_workload(str(recording))
    op_counts = Counter(op[0] for op in ops if op[0] != "mark")
    steps = Counter(op[1][1] for op in ops if op[0] == "mark" and op[1][0] == "phase")
    share = math.ceil(MIN_STATES / WORKERS)
    children = [fork_child(lambda w=w: run_worker(ops, w, seed, share)) for w in range(WORKERS)]
    outcomes = [collect_child(child, HARD_CAP_S + 120) for child in children]
    broken = [f"worker {w}: {o.status} {o.result or o.detail}" for w, o in enumerate(outcomes) if o.status != "ok"]
    assert not broken, "\n".join(broken)
    parts = [outcome.result for outcome in outcomes]
    distinct = len(set().union(*(part["distinct"] for part in parts)))
    counts, by_phase, by_op = Counter(), Counter(), Counter()
    for part in parts:
        counts.update(part["counts"])
        by_phase.update(part["by_phase"])
        by_op.update(part["by_op"])
    examples = [text for part in parts for text in part["examples"]]
    seconds = time.monotonic() - started
    lost = counts["flushed_lost"]
    phantoms = counts["phantoms"] + counts["mismatches"]
    line = (f"power-loss states: {distinct} distinct, acknowledged-durable records lost: {lost}, phantoms: {phantoms} "
            f"(cut points: {max(p['cuts'] for p in parts)} of {sum(op_counts.values())} file operations "
            f"[{', '.join(f'{k} {v}' for k, v in op_counts.most_common())}] of {WORKLOAD_STEPS} workload steps "
            f"[{', '.join(f'{k} {v}' for k, v in steps.most_common())}]; states by step: "
            f"{', '.join(f'{k} {v}' for k, v in by_phase.most_common())}; by next operation: "
            f"{', '.join(f'{k} {v}' for k, v in by_op.most_common())}; with a torn write: "
            f"{sum(p['torn'] for p in parts)}, with directory changes undone: {sum(p['undone'] for p in parts)}); "
            f"offset gaps: {counts['gaps']}; duplicates: {counts['duplicates']}; "
            f"deleted records resurrected: {counts['lso_resurrected']}; log start overshoot: {counts['lso_overshoot']}; "
            f"log end inconsistencies: {counts['leo_inconsistent']}; index probe failures: "
            f"{counts['index_probe_failures']}; recovery failures: {counts['recovery_failures']}; "
            f"time index probe failures: {counts['time_index_probe_failures']}; "
            f"checks: {sum(p['checks'] for p in parts)}, records verified: {sum(p['records'] for p in parts)}, "
            f"durable offsets checked: {sum(p['durable'] for p in parts)}; workers: {WORKERS}; {seconds:.1f} s")
    print(f"\n{line}\nseed: {seed}")
    for text in examples:
        print("  " + text)
    record_property("power_loss_states", line)
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "power_loss_states.txt").write_text(line + "\n")
    (RESULTS_DIR / "power_loss_states.json").write_text(json.dumps({
        "figure": line, "seed": seed, "seconds": seconds, "distinct_states": distinct, "operations": op_counts,
        "steps": steps, "by_step": by_phase, "by_next_operation": by_op,
        "violations": {kind: counts[kind] for kind in (*VIOLATIONS, "recovery_failures")},
        "examples": examples}, indent=2) + "\n")
    failures = {kind: counts[kind] for kind in (*VIOLATIONS, "recovery_failures") if counts[kind]}
    context = f"{line}\nseed {seed} (replay with LOGSTORE_POWER_LOSS_SEED={seed})\n" + "\n".join(examples)
    assert not failures, f"{failures}\n{context}"
    assert distinct >= MIN_STATES, f"only {distinct} distinct states\n{context}"


# --- engine bugs found by this test, reduced to minimal reproductions --------------------------------

def _power_loss_state(root: Path, build, choose) -> str:
    """Run ``build(store, fs)`` on a recording, let ``choose(disk, inos)`` pick a power-loss state at the
    end (``inos``: file name -> ino), write it out and return its data dir."""
    (root / "recording").mkdir()
    fs = RecordingFileSystem(str(root / "recording"))
    build(LogManager([str(root / "recording" / "data")], fs=fs), fs)
    disk, inos = DiskModel(), {}
    for op in fs.operations:
        if op[0] == "create":
            inos[op[2]] = op[3]
        disk.step(op)
    files, dirs = disk.files(choose(disk, inos))
    materialise(str(root / "state"), files, dirs)
    return str(root / "state" / "data")


def test_clean_close_makes_the_final_time_index_entry_durable(tmp_path: Path) -> None:
    """Regression: ``LogSegment.close`` wrote the final time index entry and trimmed the indexes
    without an fsync, then the clean-shutdown marker was written. After a power loss the next clean
    open trusted an index missing its last entry: ``offset_for_timestamp`` of the last record of a
    segment below the recovery point returned the next segment's first offset."""

    def build(store: LogManager, fs) -> None:
        store.create_topic("t", 1, {"segment.bytes": 4096, "index.interval.bytes": 256, "segment.index.bytes": 96})
        log = store.get_log("t", 0)
        for i in range(6):
            log.append([Record(b"k", b"v" * 100, (), T0_MS + i)])
        log.flush()
        store.close()  # the final entry (5, T0_MS + 5) is written here
        store = LogManager(store.log_dirs, fs=fs)
        log = store.get_log("t", 0)
        log.roll()
        log.append([Record(b"k", b"x" * 100, (), T0_MS + 6)])
        log.flush()  # the recovery point passes every record: a power loss keeps them all

    data = _power_loss_state(tmp_path, build, lambda disk, inos: disk.sample(random.Random(1), "none"))
    with LogManager([data]) as store:
        log = store.get_log("t", 0)
        assert [log.offset_for_timestamp(T0_MS + o) for o in range(7)] == list(range(7))


def test_power_loss_never_leaves_a_hole_between_segments(tmp_path: Path) -> None:
    """Records 0, 1 flushed; 2, 3 appended (unsynced); a roll to segment 4; record 4 appended. A power
    loss keeps segment 0's durable part only, but the new segment's directory entry and data reached
    the disk (another file, written back first). Recovery must give contiguous offsets: [0, 1] (the
    later segment dropped: nothing there was durable), never [0, 1, 4] with a log end offset of 5."""

    def build(store: LogManager, fs) -> None:
        store.create_topic("t", 1, {"segment.bytes": 1024})
        log = store.get_log("t", 0)
        log.append([Record(b"k", b"v" * 100, (), T0_MS + i) for i in range(2)])
        log.flush()
        log.append([Record(b"k", b"w" * 100, (), T0_MS + 2 + i) for i in range(2)])
        log.roll()
        log.append([Record(b"k", b"x" * 100, (), T0_MS + 4)])

    def choose(disk: DiskModel, inos: dict):
        everything = disk.sample(random.Random(1), "all")
        first = inos["00000000000000000000.log"]
        return State(everything.dirs, tuple((ino, 0 if ino == first else kept, tear)
                                            for ino, kept, tear in everything.files))

    data = _power_loss_state(tmp_path, build, choose)
    with LogManager([data]) as store:
        log = store.get_log("t", 0)
        offsets = [record.offset for record in log.iter_records(log.log_start_offset)]
        assert offsets == list(range(log.log_start_offset, log.log_end_offset)), (offsets, log.log_end_offset)


def test_unsynced_final_time_index_entry_is_not_trusted(tmp_path: Path) -> None:
    """Records 0..5 flushed; ``roll()`` writes segment 0's final time index entry (5, T0_MS + 5) through
    the mapping, but no flush covers segment 0 again (the recovery point is already at 6); record 6
    appended to segment 6 and flushed, the recovery point checkpointed at 7. A power loss keeps every
    synced byte, not the unsynced mapping write. Recovery trusts segment 0's index (below the recovery
    point): the segment's max timestamp is understated and ``offset_for_timestamp(T0_MS + 5)`` gives 6."""

    def build(store: LogManager, fs) -> None:
        store.create_topic("t", 1, {"segment.bytes": 4096, "index.interval.bytes": 256, "segment.index.bytes": 96})
        log = store.get_log("t", 0)
        for i in range(6):
            log.append([Record(b"k", b"v" * 100, (), T0_MS + i)])
        log.flush()
        log.roll()
        log.append([Record(b"k", b"x" * 100, (), T0_MS + 6)])
        log.flush()
        store.checkpoint()

    data = _power_loss_state(tmp_path, build, lambda disk, inos: disk.sample(random.Random(1), "all"))
    with LogManager([data]) as store:
        log = store.get_log("t", 0)
        assert [log.offset_for_timestamp(T0_MS + o) for o in range(7)] == list(range(7))


def test_disk_model_enumerates_only_what_a_power_loss_can_leave(tmp_path: Path) -> None:
    """The state model on a small recording: fsynced bytes and durable names are in every state; of
    the unsynced writes a prefix survives (the last possibly torn); a rename not yet made durable by a
    directory fsync is kept or undone, never half done; both extremes are drawn."""
    root = tmp_path / "recording"
    root.mkdir()
    fs = RecordingFileSystem(str(root))
    folder = str(root / "d")
    fs.make_dirs(folder)
    fd = fs.open_file(os.path.join(folder, "a"), create=True)
    fs.pwrite(fd, b"x" * 10, 0)
    fs.fsync(fd)
    fs.fsync_dir(folder)  # "a" and its 10 bytes are durable
    fs.pwrite(fd, b"y" * 600, 10)
    fs.pwrite(fd, b"z" * 4, 610)
    temp = fs.open_file(os.path.join(folder, "b.tmp"), create=True)
    fs.pwrite(temp, b"new", 0)
    fs.fsync(temp)
    fs.rename(os.path.join(folder, "b.tmp"), os.path.join(folder, "b"))
    for handle in (fd, temp):
        fs.close(handle)
    disk = DiskModel()
    for op in fs.operations:
        disk.step(op)
    rng = random.Random(5)
    states = [disk.files(disk.sample(rng, mode)) for mode in ["all", "none"] + ["random"] * 400]
    assert states[0] == ({"d/a": b"x" * 10 + b"y" * 600 + b"z" * 4, "d/b": b"new"}, ["d"])
    assert states[1] == ({"d/a": b"x" * 10}, ["d"])
    names = set()
    for files, dirs in states:
        assert dirs == ["d"]
        a = files["d/a"]
        assert a[:10] == b"x" * 10 and len(a) <= 614
        tail = a[10:].rstrip(b"\0")  # a torn write may end in zeros
        assert (b"y" * 600 + b"z" * 4).startswith(tail) or tail.startswith(b"y" * 600), a
        names.add(tuple(sorted(files)))
        assert files.get("d/b", b"new") == b"new" and files.get("d/b.tmp", b"new") == b"new"
    assert names == {("d/a",), ("d/a", "d/b.tmp"), ("d/a", "d/b")}  # never both names
    assert len({fingerprint(*state) for state in states}) > 20
