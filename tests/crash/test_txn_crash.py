"""Transactions through crashes: producer state, the last stable offset and the aborted transactions
after a power loss or a kill -9 equal a replay of the recovered log from scratch, open transactions
come back open, and a second recovery of the same state gives the same files.

Power loss: a transactional workload (transactions of several producers interleaved with plain
appends, commits and aborts, flushes, rolls on small segments, a truncation, a close and reopen) runs
once on a ``RecordingFileSystem``; the states a power loss can leave (``crash_states.DiskModel``) are
drawn at every cut point around a producer-snapshot write (the flagged one before a producer batch,
those of rolls and of the clean close), around each marker write, and at a sample of the other cut
points: the two extremes (everything kept: a process crash; nothing unsynced kept) and random ones.
Each state is recovered by a real ``LogManager`` and checked; then the store is abandoned (no close)
and opened again, which must find the same files and the same state.

Kill -9: a forked writer appends transactional batches and markers (flushing now and then) and is
SIGKILLed by the parent after a random delay or by itself at its N-th file operation through the
``FileSystem`` seam; the parent recovers the store and checks it the same way.

Settings: ``LOGSTORE_TXN_CRASH_STATES`` (random states per cut, default 1) and
``LOGSTORE_TXN_KILL9_ROUNDS`` (default 12): small, the cores are shared.
"""

from __future__ import annotations

import os
import random
import signal
import time

from crash_states import DiskModel, materialise

from logstore import LogManager, Record
from logstore.fs import FileSystem
from logstore.log.producer_state import ProducerStateTable
from logstore.log.txn_index import AbortedTxn
from logstore.records.batching import ProducerBatch
from logstore.testing import RecordingFileSystem, SimulatedCrashFileSystem

T0 = 1_700_000_000_000
RANDOM_STATES = int(os.environ.get("LOGSTORE_TXN_CRASH_STATES", "1"))
KILL9_ROUNDS = int(os.environ.get("LOGSTORE_TXN_KILL9_ROUNDS", "12"))
TOPIC_CONFIG = {"segment.bytes": 700, "segment.index.bytes": 120, "index.interval.bytes": 64,
                "file.delete.delay.ms": 0}
STORE_CONFIG = {"log.cleaner.threads": 0}


def scratch(log) -> tuple[list, int, list[AbortedTxn]]:
    """Producer entries, LSO and aborted transactions from a replay of the whole log."""
    table = ProducerStateTable()
    aborted = []
    for batch, producer, marker in log.iter_batches_with_control(log.log_start_offset, log.log_end_offset):
        if producer is not None:
            completed = table.on_batch(batch.header, producer, marker)
            if completed is not None and completed.aborted:
                aborted.append(AbortedTxn(completed.producer_id, completed.first_offset))
    first = table.first_unstable_offset
    return list(table.entries()), log.log_end_offset if first is None else first, aborted


def state(log) -> tuple[list, int, list[AbortedTxn]]:
    return (list(log.producer_state.entries()), log.last_stable_offset,
            log.aborted_transactions(log.log_start_offset, log.log_end_offset))


def files_of(path: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as handle:
            out[name] = handle.read()
    return out


def record(tag: str, i: int) -> Record:
    return Record(f"{tag}-{i}".encode(), f"value-{tag}-{i}".encode() * 3, (), T0 + i)


def transactional_steps(log, rng: random.Random, steps: int, mark=lambda payload: None) -> None:
    """Transactions of producers 1..4 interleaved with plain appends, markers and flushes."""
    epochs = {pid: 0 for pid in range(1, 5)}
    for entry in log.producer_state.entries():  # after a reopen: the epochs the log knows
        epochs[entry.producer_id] = entry.epoch
    for i in range(steps):
        choice = rng.random()
        pid = rng.randint(1, 4)
        if choice < 0.35:
            log.append([record(f"t{pid}", i + k) for k in range(rng.randint(1, 3))],
                       producer=ProducerBatch(pid, epochs[pid], 0, transactional=True))
        elif choice < 0.55:
            log.append([record("plain", i)])
        elif choice < 0.8:
            mark(("marker", pid))
            log.append_marker(pid, epochs[pid], 1, commit=rng.random() < 0.5)
        elif choice < 0.9:
            mark(("durable", log.flush()))
        else:
            epochs[pid] += 1  # a new epoch: its marker aborts whatever the old one left open
            mark(("marker", pid))
            log.append_marker(pid, epochs[pid], 1, commit=False)


# --- power loss ----------------------------------------------------------------------------------


def run_workload(root: str) -> list[tuple]:
    rng = random.Random(29)
    fs = RecordingFileSystem(root)
    data = os.path.join(root, "data")
    store = LogManager([data], fs=fs, config=STORE_CONFIG)
    store.create_topic("t", 1, TOPIC_CONFIG)
    log = store.get_log("t", 0)
    log.append([record("plain", i) for i in range(3)])
    fs.mark(("ready",))
    transactional_steps(log, rng, 30, fs.mark)
    fs.mark(("durable", log.flush()))
    fs.mark(("truncated", log.log_end_offset - 3))  # from the start of the truncation, records above may go
    log.truncate_to(log.log_end_offset - 3)
    store.close()
    fs.mark(("durable", -1))
    store = LogManager([data], fs=fs, config=STORE_CONFIG)
    log = store.get_log("t", 0)
    transactional_steps(log, rng, 15, fs.mark)
    store.close()
    return fs.operations


def interesting_cuts(ops: list[tuple], rng: random.Random) -> list[int]:
    """Cut points around snapshot operations and marker writes, and a sample of the others."""
    names: dict[int, str] = {}
    cuts = set()
    for i, op in enumerate(ops):
        if op[0] == "create":
            names[op[3]] = op[2]
        touches = (op[0] in ("create", "rename", "remove") and "snapshot" in " ".join(map(str, op[2:])))
        touches = touches or (op[0] in ("write", "fsync") and "snapshot" in names.get(op[1], ""))
        if touches or (op[0] == "mark" and op[1][0] == "marker"):
            cuts.update(range(max(i - 1, 0), min(i + 4, len(ops) + 1)))
    others = [i for i in range(len(ops) + 1) if i not in cuts]
    cuts.update(rng.sample(others, min(len(others), 40)))
    return sorted(cuts)


def check_state(path: str, files: dict, dirs: list, durable: int) -> list[str]:
    materialise(path, files, dirs)
    data = os.path.join(path, "data")
    if not os.path.isdir(os.path.join(data, "t-0")):
        return []  # before the partition was durable
    fs = SimulatedCrashFileSystem()
    store = LogManager([data], fs=fs, config=STORE_CONFIG)
    log = store.get_log("t", 0)
    problems = []
    found = state(log)
    if found != scratch(log):
        problems.append(f"state {found} != replay {scratch(log)}")
    if log.log_end_offset < durable:
        problems.append(f"log end {log.log_end_offset} below the durable {durable}")
    if log.damage is not None:
        problems.append(f"damaged: {log.damage}")
    fs.crash(random.Random(0), lose_unsynced=False)  # abandon: no close
    after_first = files_of(os.path.join(data, "t-0"))
    fs = SimulatedCrashFileSystem()
    store = LogManager([data], fs=fs, config=STORE_CONFIG)
    log = store.get_log("t", 0)
    if state(log) != found:
        problems.append(f"a second recovery found {state(log)}, the first {found}")
    fs.crash(random.Random(0), lose_unsynced=False)
    after_second = files_of(os.path.join(data, "t-0"))
    if after_second != after_first:
        changed = sorted(name for name in set(after_first) | set(after_second)
                         if after_first.get(name) != after_second.get(name))
        problems.append(f"a second recovery changed the partition's files {changed}")
    return problems


def test_power_loss_states_around_snapshots_and_markers(tmp_path):
    root = tmp_path / "recording"
    root.mkdir()
    ops = run_workload(str(root))
    rng = random.Random(7)
    cuts = set(interesting_cuts(ops, rng))
    disk = DiskModel()
    durable = 0
    seen: set = set()
    checked = 0
    failures = []
    ready = False
    for i in range(len(ops) + 1):
        if i in cuts and ready:
            modes = ["all", "none"] + ["random"] * RANDOM_STATES
            for mode in modes if disk.uncertainty() else modes[:1]:
                files, dirs = disk.files(disk.sample(rng, mode))
                key = tuple(sorted((path, hash(content)) for path, content in files.items()))
                if key in seen:
                    continue
                seen.add(key)
                checked += 1
                for problem in check_state(str(tmp_path / "state"), files, dirs, durable):
                    failures.append(f"cut {i} ({mode}): {problem}")
        if i < len(ops):
            op = ops[i]
            if op[0] == "mark":
                if op[1][0] == "ready":
                    ready = True
                elif op[1][0] == "durable":
                    durable = op[1][1] if op[1][1] >= 0 else durable
                elif op[1][0] == "truncated":
                    durable = min(durable, op[1][1])
            disk.step(op)
    assert checked >= 100, checked
    assert failures == [], failures[:5]
    print(f"\ntransactional power-loss states checked: {checked} at {len(cuts)} cut points of {len(ops)}")


# --- kill -9 -------------------------------------------------------------------------------------


class KillAtOp(FileSystem):
    """Kills its own process just before its N-th mutating file operation."""

    def __init__(self, countdown: int) -> None:
        self.countdown = countdown

    def _tick(self) -> None:
        self.countdown -= 1
        if self.countdown == 0:
            os.kill(os.getpid(), signal.SIGKILL)

    def pwrite(self, fd, data, position):
        self._tick()
        super().pwrite(fd, data, position)

    def pwritev(self, fd, buffers, position):
        self._tick()
        super().pwritev(fd, buffers, position)

    def fsync(self, fd):
        self._tick()
        super().fsync(fd)

    def rename(self, source, target):
        self._tick()
        super().rename(source, target)

    def truncate(self, fd, size):
        self._tick()
        super().truncate(fd, size)


def _writer(data: str, seed: int, countdown: int | None) -> None:
    fs = KillAtOp(countdown) if countdown else FileSystem()
    store = LogManager([data], fs=fs, config=STORE_CONFIG)
    if "t" not in store.topics():
        store.create_topic("t", 1, TOPIC_CONFIG)
    log = store.get_log("t", 0)
    rng = random.Random(seed)
    while True:  # until killed (the log stays small: each writer lives well under a second)
        transactional_steps(log, rng, 20)


def test_kill9_during_transactional_appends(tmp_path):
    data = str(tmp_path / "data")
    rng = random.Random(91)
    failures = []
    open_transactions = aborted = 0  # recoveries that found an open transaction, aborted ones
    for round_ in range(KILL9_ROUNDS):
        countdown = rng.randint(5, 400) if round_ % 2 else None
        pid = os.fork()
        if pid == 0:  # the writer: never returns
            try:
                _writer(data, round_, countdown)
            finally:
                os._exit(1)
        if countdown is None:
            time.sleep(rng.uniform(0.05, 0.4))
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        assert os.WIFSIGNALED(status), f"round {round_}: the writer ended with {status}"
        if not os.path.isdir(os.path.join(data, "t-0")):
            continue
        fs = SimulatedCrashFileSystem()
        store = LogManager([data], fs=fs, config=STORE_CONFIG)
        log = store.get_log("t", 0)
        found = state(log)
        if found != scratch(log):
            failures.append(f"round {round_}: state {found} != replay {scratch(log)}")
        open_transactions += bool(log.producer_state.open_transactions())
        aborted += bool(found[2])
        fs.crash(random.Random(0), lose_unsynced=False)
        files = files_of(os.path.join(data, "t-0"))
        fs = SimulatedCrashFileSystem()
        store = LogManager([data], fs=fs, config=STORE_CONFIG)
        log = store.get_log("t", 0)
        if state(log) != found:
            failures.append(f"round {round_}: a second recovery found another state")
        fs.crash(random.Random(0), lose_unsynced=False)
        if files_of(os.path.join(data, "t-0")) != files:
            failures.append(f"round {round_}: a second recovery changed the files")
    assert failures == [], failures[:5]
    assert open_transactions and aborted, (open_transactions, aborted)
