"""Every append acknowledged with ``acks="all"`` (or by the future of ``append_future``) survives a
crash: a kill -9 of the writing process at a random moment, and a simulated power loss (unsynced
data dropped through the file-ops seam) at a random file operation while several threads append
durably. A control run with ``acks=1`` shows
that the power-loss harness does lose unsynced acknowledged appends, so it can catch a broken
group commit."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

from logstore import LogManager, Record
from logstore.testing import OperationHookFileSystem, SimulatedCrashFileSystem

THREADS = 4
TOPIC = "t"


def value_of(thread: int, n: int) -> bytes:
    return b"t%d-n%d-" % (thread, n) + b"x" * 60


def check_acknowledged(data_dir: str, acknowledged: set[tuple[int, int, bytes]]) -> int:
    """Reopen the store normally; return how many acknowledged records are missing or wrong."""
    with LogManager([data_dir]) as store:
        found = {(partition, record.offset): record.value
                 for partition in range(store.partitions(TOPIC))
                 for record in store.get_log(TOPIC, partition).iter_records()}
    return sum(1 for partition, offset, value in acknowledged if found.get((partition, offset)) != value)


# --- simulated power loss ------------------------------------------------------------------------


class FreezingCrashFS(OperationHookFileSystem, SimulatedCrashFileSystem):
    """At the ``freeze_at``-th file operation the "machine" stops: that operation and every later
    one block forever (daemon threads), so no state changes after the snapshot; ``crash`` then
    drops what was not fsynced."""

    def __init__(self, freeze_at: int) -> None:
        SimulatedCrashFileSystem.__init__(self)
        self.freeze_at = freeze_at
        self.operations = 0
        self.frozen = threading.Event()
        self._never = threading.Event()
        self._count_lock = threading.Lock()

    def before(self, operation, path):
        with self._count_lock:
            self.operations += 1
            if self.operations >= self.freeze_at:
                self.frozen.set()
        if self.frozen.is_set():
            self._never.wait()


def power_loss_round(data_dir: str, seed: int, acks) -> tuple[int, int]:
    """One round: THREADS threads append single records durably until the freeze; returns
    (acknowledged, lost)."""
    rng = random.Random(seed)
    with LogManager([data_dir]) as store:
        if TOPIC not in store.topics():
            store.create_topic(TOPIC, 2, {"segment.bytes": 4096})
    fs = FreezingCrashFS(freeze_at=rng.randrange(20, 400))
    store = LogManager([data_dir], fs=fs)
    store.startup()
    acknowledged: set[tuple[int, int, bytes]] = set()
    guard = threading.Lock()

    def writer(thread: int) -> None:
        for n in range(10_000):
            if fs.frozen.is_set():
                return
            value = value_of(thread, n + seed * 100_000)
            partition = (thread + n) % 2
            try:
                info = store.append(TOPIC, [Record(None, value)], partition=partition, acks=acks, timeout_ms=60_000)
            except Exception:  # noqa: BLE001 - an append cut by the crash is not acknowledged
                return
            if fs.frozen.is_set() and acks != "all":
                return  # acks=1 returns without fsync: only count acks from before the freeze
            with guard:
                acknowledged.add((partition, info[partition].first_offset, value))

    threads = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    fs.frozen.wait(20)
    time.sleep(0.02)  # let every thread reach the frozen operation
    with guard:
        snapshot = set(acknowledged)
    fs.crash(random.Random(seed))  # the threads stay blocked forever: the process is "gone"
    return len(snapshot), check_acknowledged(data_dir, snapshot)


def test_durable_appends_survive_power_loss(tmp_path, capsys):
    rounds, acknowledged, lost = 25, 0, 0
    for seed in range(rounds):
        data_dir = str(tmp_path / f"r{seed}")
        got, missing = power_loss_round(data_dir, seed, "all")
        acknowledged += got
        lost += missing
    with capsys.disabled():
        print(f"\npower-loss points: {rounds}, acks=all appends acknowledged: {acknowledged}, lost: {lost}")
    assert acknowledged > rounds, "the harness must acknowledge appends before the crash"
    assert lost == 0


def power_loss_round_futures(data_dir: str, seed: int, in_flight: int = 8) -> tuple[int, int]:
    """One round with ``append_future``: THREADS threads keep ``in_flight`` single-record appends
    each waiting for their fsync until the freeze; an append counts as acknowledged once its future
    completed with its ``AppendInfo`` (a done callback, on the flusher thread). Returns
    (acknowledged, lost)."""
    rng = random.Random(seed)
    with LogManager([data_dir]) as store:
        if TOPIC not in store.topics():
            store.create_topic(TOPIC, 2, {"segment.bytes": 4096})
    fs = FreezingCrashFS(freeze_at=rng.randrange(20, 400))
    store = LogManager([data_dir], fs=fs)
    store.startup()
    acknowledged: set[tuple[int, int, bytes]] = set()
    guard = threading.Lock()

    def acknowledge(partition: int, value: bytes, future) -> None:
        if future.exception() is None:
            with guard:
                acknowledged.add((partition, future.result().first_offset, value))

    def writer(thread: int) -> None:
        window = []
        for n in range(10_000):
            if fs.frozen.is_set():
                return
            value = value_of(thread, n + seed * 100_000)
            partition = (thread + n) % 2
            try:
                future = store.get_log(TOPIC, partition).append_future([Record(None, value)], timeout_ms=60_000)
            except Exception:  # noqa: BLE001 - an append cut by the crash is not acknowledged
                return
            future.add_done_callback(lambda done, p=partition, v=value: acknowledge(p, v, done))
            window.append(future)
            if len(window) >= in_flight:
                try:
                    window.pop(0).exception(timeout=30)  # wait for the oldest; the others stay in flight
                except TimeoutError:  # the file system froze under it (the crash): never acknowledged
                    return
                if fs.frozen.is_set():
                    return

    threads = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    fs.frozen.wait(20)
    time.sleep(0.02)  # let every thread reach the frozen operation
    with guard:
        snapshot = set(acknowledged)
    fs.crash(random.Random(seed))  # the threads stay blocked forever: the process is "gone"
    return len(snapshot), check_acknowledged(data_dir, snapshot)


def test_appends_acknowledged_by_their_future_survive_power_loss(tmp_path, capsys):
    rounds, acknowledged, lost = 10, 0, 0
    for seed in range(rounds):
        got, missing = power_loss_round_futures(str(tmp_path / f"r{seed}"), 500 + seed)
        acknowledged += got
        lost += missing
    with capsys.disabled():
        print(f"\npower-loss points: {rounds}, append_future appends acknowledged: {acknowledged}, lost: {lost}")
    assert acknowledged > rounds, "the harness must acknowledge appends before the crash"
    assert lost == 0


def test_the_power_loss_harness_catches_unsynced_acknowledgements(tmp_path):
    """acks=1 does not wait for fsync: the same harness must see some acknowledged appends lost,
    or it could not catch a group commit that acknowledges too early."""
    lost = 0
    for seed in range(12):
        lost += power_loss_round(str(tmp_path / f"r{seed}"), 1000 + seed, 1)[1]
        if lost:
            break
    assert lost > 0


# --- kill -9 -------------------------------------------------------------------------------------


def _child(data_dir: str, write_fd: int) -> None:
    store = LogManager([data_dir])
    store.startup()
    guard = threading.Lock()

    def writer(thread: int) -> None:
        for n in range(1_000_000):
            value = value_of(thread, n)
            partition = (thread + n) % 2
            info = store.append(TOPIC, [Record(None, value)], partition=partition, acks="all")
            line = b"%d %d %s\n" % (partition, info[partition].first_offset, value)
            with guard:
                os.write(write_fd, line)

    threads = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_durable_appends_survive_kill_9(tmp_path, capsys):
    rng = random.Random(7)
    data_dir = str(tmp_path / "d")
    with LogManager([data_dir]) as store:
        store.create_topic(TOPIC, 2, {"segment.bytes": 8192})
    acknowledged: set[tuple[int, int, bytes]] = set()
    kills = 8
    for _ in range(kills):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(read_fd)
            try:
                _child(data_dir, write_fd)
            finally:
                os._exit(0)
        os.close(write_fd)
        deadline = time.monotonic() + rng.uniform(0.2, 0.8)
        buffer = b""
        os.set_blocking(read_fd, False)
        while time.monotonic() < deadline:
            try:
                buffer += os.read(read_fd, 1 << 16)
            except BlockingIOError:
                time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.set_blocking(read_fd, True)
        while chunk := os.read(read_fd, 1 << 16):
            buffer += chunk
        os.close(read_fd)
        for line in buffer.split(b"\n"):
            if line.count(b" ") == 2:
                partition, offset, value = line.split(b" ")
                acknowledged.add((int(partition), int(offset), value))
    lost = check_acknowledged(data_dir, acknowledged)
    with capsys.disabled():
        print(f"\nkill -9 points: {kills}, acks=all appends acknowledged: {len(acknowledged)}, lost: {lost}")
    assert len(acknowledged) > kills
    assert lost == 0
