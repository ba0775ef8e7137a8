"""Shared pieces of the crash harnesses (docs/design.md §12).

- ``PayloadSpec``: deterministic records. The key, value, headers and timestamp of the record at
  ``(partition, offset)`` written in truncation ``epoch`` are a pure function of those three numbers and
  a run seed, so a checker verifies a record without keeping a copy, and a record that a truncation
  should have removed (an older epoch) is told apart from the one written after it.
- ``PartitionModel``: what a crashed writer acknowledged, and so what must be there after recovery.
- ``verify_partition``: reads a recovered log end to end and counts violations against a model.
- ``CrashFS``: the ``FileSystem`` seam, counting mutating operations and, when armed, SIGKILLing the
  process just before the N-th one (a data write that crosses a page boundary may be torn first, as a
  SIGKILL between two page copies of one ``write`` leaves it).
- ``fork_call``: run a function in a forked child that reports JSON through a pipe, with a timeout,
  so a crash or hang in recovery never takes the test process down.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import random
import select
import signal
import struct
import time
import traceback
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

from logstore import FileSystem, Record
from logstore.manager.topics import parse_partition_dir_name, partition_for_key
from logstore.testing import OperationHookFileSystem, SimulatedCrashFileSystem

T0_MS = 1_700_000_000_000
_MASK64 = (1 << 64) - 1
_BLOB = random.Random(20240611).randbytes(1 << 16)
KEYSPACE = [b"key-%02d" % i for i in range(48)]


def _mix(partition: int, offset: int, epoch: int, seed: int) -> int:
    x = (partition * 0x9E3779B97F4A7C15 ^ offset * 0xBF58476D1CE4E5B9 ^ epoch * 0x94D049BB133111EB ^ seed) & _MASK64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class PayloadSpec:
    """Deterministic records for a topic of ``partitions`` partitions (keys always map to the
    partition they are written to, so ``LogManager.append`` spreading by key is predictable)."""

    def __init__(self, seed: int, partitions: int, null_keys: bool = True, large_values: bool = True) -> None:
        self.seed = seed
        self.partitions = partitions
        self.null_keys = null_keys  # False for a compacted topic (it refuses null keys)
        self.large_values = large_values  # some values of 1.5-7.5 KB (they span pages); False: all < 160 bytes
        self.keys = [[key for key in KEYSPACE if partition_for_key(key, partitions) == p] for p in range(partitions)]
        if not all(self.keys):
            raise ValueError("the keyspace does not cover every partition")

    def key_is_none(self, partition: int, offset: int, epoch: int) -> bool:
        return self.null_keys and _mix(partition, offset, epoch, self.seed) % 13 == 0

    def record(self, partition: int, offset: int, epoch: int) -> Record:
        """The record at ``offset`` of ``partition`` in ``epoch`` (with its offset filled in)."""
        h = _mix(partition, offset, epoch, self.seed)
        keys = self.keys[partition]
        key = None if self.null_keys and h % 13 == 0 else keys[(h >> 8) % len(keys)]
        choice = (h >> 16) & 0xFF
        if choice < 8:
            value = None  # a tombstone
        else:
            size = (h >> 24) % 160 if choice < 246 or not self.large_values else 1500 + (h >> 24) % 6000
            start = (h >> 40) % 4096
            value = b"%d:%d:%d:%d|" % (partition, offset, epoch, self.seed) + _BLOB[start:start + size]
        pick = (h >> 32) & 0xF
        if pick < 10:
            headers: tuple = ()
        elif pick < 14:
            headers = (("o", b"%d" % offset),)
        else:
            headers = (("o", b"%d" % offset), ("tomb", None))
        return Record(key, value, headers, T0_MS + offset, offset)


@dataclass
class PartitionModel:
    """What the parent knows about one partition of a store whose writer may be killed.

    ``flushed``: offsets below it were acknowledged by ``flush()`` (or a clean close) and must
    survive with their payload. ``appended``: offsets below it were written by a returned
    ``append`` or found by a recovery: a process crash must not lose them either (docs/design.md §7).
    ``lso_min``/``lso_max``: bounds of the legitimate log start offset (a returned ``delete_records``
    raises the floor, an attempted one the ceiling). ``max_end``: one past the highest offset any
    writer attempted (anything above is a phantom). ``epochs``: (first offset, epoch) boundaries: the
    payload of offset o comes from the epoch of the last boundary at or below o."""

    flushed: int = 0
    appended: int = 0
    lso_min: int = 0
    lso_max: int = 0
    max_end: int = 0
    cur_epoch: int = 0
    epochs: list = field(default_factory=lambda: [(0, 0)])

    def epoch_at(self, offset: int) -> int:
        starts = [start for start, _ in self.epochs]
        return self.epochs[bisect.bisect_right(starts, offset) - 1][1]

    def intend(self, start: int, end: int, epoch: int) -> None:
        """A writer is about to write offsets [start, end) in ``epoch``."""
        while self.epochs and self.epochs[-1][0] >= start:
            self.epochs.pop()
        if not self.epochs or self.epochs[-1][1] != epoch:
            self.epochs.append((start, epoch))
        self.max_end = max(self.max_end, end)

    def truncating(self, offset: int, new_epoch: int) -> None:
        self.flushed = min(self.flushed, offset)
        self.appended = min(self.appended, offset)
        self.cur_epoch = new_epoch

    def recovered(self, log_start_offset: int, log_end_offset: int) -> None:
        """After a checked recovery: what is there now is the new baseline."""
        self.flushed = min(self.flushed, log_end_offset)
        self.appended = log_end_offset
        self.lso_min = self.lso_max = log_start_offset
        self.max_end = log_end_offset


VIOLATIONS = ("flushed_lost", "appended_lost", "gaps", "duplicates", "phantoms", "mismatches",
              "lso_resurrected", "lso_overshoot", "leo_inconsistent", "index_probe_failures", "time_index_probe_failures")


def verify_partition(log, spec: PayloadSpec, partition: int, model: PartitionModel,
                     rng: random.Random, probes: int = 8, compacted: bool = False) -> dict[str, Any]:
    """Read ``log`` end to end and count violations of ``model``. Returns counts, the observed
    offsets and up to a few examples.

    ``compacted``: the log is of a compacted topic, so an offset may be missing when, and only when,
    the record written there was superseded by a later record with the same key that is present (the
    cleaner keeps the latest record of every key, tombstones included: the tests keep the clock below
    the delete horizon). Every other missing offset is a gap, and a lost record if it was acknowledged."""
    counts = dict.fromkeys(VIOLATIONS, 0)
    examples: list[str] = []
    lso, leo = log.log_start_offset, log.log_end_offset

    def note(kind: str, amount: int, text: str) -> None:
        counts[kind] += amount
        if len(examples) < 6:
            examples.append(f"p{partition} {kind}: {text}")

    if lso < model.lso_min:
        note("lso_resurrected", model.lso_min - lso, f"log start {lso} < acknowledged {model.lso_min}")
    good: set[int] = set()
    gap_ranges: list[tuple[int, int]] = []
    expected = lso
    offset = lso
    last_seen = lso - 1
    records_read = 0
    latest_by_key: dict[bytes | None, int] = {}
    while offset < leo:
        # Bounded by records, not bytes, so that a read-path bug (Log.read(max_bytes=...) once skipped
        # records across a segment boundary: test_kill9.py::test_read_with_max_bytes_is_contiguous)
        # is not mistaken for lost data.
        batch = log.read(offset, 1 << 50, 1000)
        if not batch:
            note("leo_inconsistent", 1, f"read({offset}) returned nothing below log end {leo}")
            break
        for record in batch:
            records_read += 1
            o = record.offset
            if o <= last_seen:
                note("duplicates", 1, f"offset {o} after {last_seen}")
                continue
            if o != expected:
                if not compacted:
                    note("gaps", o - expected, f"offsets {expected}..{o - 1} missing")
                gap_ranges.append((expected, o))
            if o >= model.max_end:
                note("phantoms", 1, f"offset {o} >= max attempted end {model.max_end}")
            elif record != spec.record(partition, o, model.epoch_at(o)):
                note("mismatches", 1, f"offset {o}: {record!r:.200}")
            else:
                good.add(o)
                if compacted:
                    latest_by_key[record.key] = o
            last_seen = o
            expected = o + 1
        offset = last_seen + 1
    if compacted and lso < last_seen + 1 < leo:
        gap_ranges.append((last_seen + 1, leo))  # the tail of a compacted segment before an empty active one
    elif last_seen + 1 != leo and lso != leo:
        note("leo_inconsistent", 1, f"last offset read {last_seen}, log end offset {leo}")
    legit_start = min(lso, model.lso_max)
    if lso > model.lso_max:
        note("lso_overshoot", lso - model.lso_max, f"log start {lso} > highest requested {model.lso_max}")
    superseded: set[int] = set()  # missing offsets that compaction may have removed
    if compacted:
        for start, end in gap_ranges:
            unexplained = []
            for o in range(start, end):
                if latest_by_key.get(spec.record(partition, o, model.epoch_at(o)).key, -1) > o:
                    superseded.add(o)
                else:
                    unexplained.append(o)
            if unexplained:
                note("gaps", len(unexplained), f"offsets {unexplained[:5]}... missing and not superseded")
    kept = good | superseded
    lost_flushed = sum(1 for o in range(legit_start, model.flushed) if o not in kept)
    lost_appended = sum(1 for o in range(max(legit_start, model.flushed), model.appended) if o not in kept)
    if lost_flushed:
        note("flushed_lost", lost_flushed, f"{lost_flushed} of [{legit_start}, {model.flushed}) missing or wrong "
             f"(log {lso}..{leo})")
    if lost_appended:
        note("appended_lost", lost_appended, f"{lost_appended} of [{max(legit_start, model.flushed)}, "
             f"{model.appended}) missing or wrong (log {lso}..{leo})")
    # The indexes rebuilt by recovery must agree with the scan: offset and time lookups of records
    # the scan found (a missing offset is already counted as a gap).
    present = sorted(good)
    for o in rng.sample(present, min(probes, len(present))):
        found = log.read(o, 1, 1)
        if not found or found[0].offset != o:
            note("index_probe_failures", 1, f"read({o}) gave {found[:1]!r:.120}")
        by_time = log.offset_for_timestamp(T0_MS + o)
        if by_time != o:
            note("time_index_probe_failures", 1, f"offset_for_timestamp({T0_MS + o}) = {by_time}, expected {o}")
    return {"lso": lso, "leo": leo, "records": records_read, "counts": counts, "examples": examples,
            "gap_ranges": gap_ranges[:50]}


def partition_files_fingerprint(log_dirs: list[str]) -> dict[str, int]:
    """``{"<dir#>/<topic-partition>/<file>": crc32}`` of every file of every partition dir."""
    prints: dict[str, int] = {}
    for number, dir_path in enumerate(log_dirs):
        for name in sorted(os.listdir(dir_path)):
            path = os.path.join(dir_path, name)
            if not os.path.isdir(path) or parse_partition_dir_name(name) is None:
                continue
            for file_name in sorted(os.listdir(path)):
                with open(os.path.join(path, file_name), "rb") as handle:
                    prints[f"{number}/{name}/{file_name}"] = zlib.crc32(handle.read())
    return prints


# --- the file-ops seam: counting, and SIGKILL at the N-th mutating operation -------------------

OP_NAMES = ("create", "pwrite", "fsync", "truncate", "rename", "remove", "fsync_dir", "remove_dir", "msync",
            "mkdir", "set_mtime", "allocate")
PAGE = 4096


class CrashFS(OperationHookFileSystem):
    """``FileSystem`` that counts mutating operations; when ``armed`` and ``kill_at`` is set, it
    SIGKILLs its own process just before operation ``kill_at`` (after calling
    ``before_kill(op_name, torn)``). Half of the time a ``pwrite`` crossing a page boundary is torn
    first: a prefix ending at a page boundary is written (``torn`` is then True)."""

    def __init__(self, kill_at: int | None = None, rng: random.Random | None = None,
                 before_kill: Callable[[str, bool], None] | None = None) -> None:
        self.kill_at = kill_at
        self.armed = False
        self.count = 0
        self.rng = rng or random.Random()
        self.before_kill = before_kill

    def before(self, operation: str, path: str | None, tear: Callable[[], bool] | None = None) -> None:
        if not self.armed:
            return
        self.count += 1
        if self.kill_at is not None and self.count >= self.kill_at:
            torn = tear is not None and self.rng.random() < 0.5 and tear()
            if self.before_kill is not None:
                self.before_kill(operation, torn)
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # pragma: no cover - never reached

    def _tear(self, fd: int, data, position: int) -> Callable[[], bool]:
        def tear() -> bool:
            view = memoryview(data)
            first_boundary = PAGE - position % PAGE
            if len(view) <= first_boundary:
                return False  # within one page: all or nothing
            cut = first_boundary + PAGE * self.rng.randrange(0, (len(view) - first_boundary - 1) // PAGE + 1)
            os.pwrite(fd, view[:cut], position)
            return True
        return tear

    def pwrite(self, fd: int, data, position: int) -> None:
        self.before("pwrite", None, self._tear(fd, data, position))
        FileSystem.pwrite(self, fd, data, position)  # counted above, with its tear

    def pwritev(self, fd: int, buffers: list, position: int) -> None:
        self.before("pwrite", None, self._tear(fd, b"".join(bytes(buffer) for buffer in buffers), position))
        FileSystem.pwritev(self, fd, buffers, position)


# --- forked children ---------------------------------------------------------------------------

@dataclass
class ChildOutcome:
    status: str  # "ok", "error" (exception, result holds the traceback), "died" (signal/exit), "hang"
    result: Any = None
    detail: str = ""
    seconds: float = 0.0


def fork_call(fn: Callable[[], Any], timeout_s: float) -> ChildOutcome:
    """Run ``fn()`` in a forked child; its return value comes back as JSON through a pipe. The
    child always leaves with ``os._exit`` and never returns into the caller (pytest)."""
    return collect_child(fork_child(fn), timeout_s)


@dataclass
class Child:
    """A forked child started by ``fork_child``, to be collected with ``collect_child``."""

    pid: int
    read_fd: int
    started: float


def fork_child(fn: Callable[[], Any]) -> Child:
    """Start ``fn()`` in a forked child that reports its JSON result (or traceback) through a pipe."""
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # child
        code = 70
        try:
            os.close(read_fd)
            try:
                payload = {"ok": fn()}
            except BaseException:  # noqa: BLE001 - everything is reported to the parent
                payload = {"error": traceback.format_exc()}
            data = json.dumps(payload).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write_fd, view):]
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    return Child(pid, read_fd, started)


def collect_child(child: Child, timeout_s: float) -> ChildOutcome:
    """Wait up to ``timeout_s`` for the child's answer (SIGKILL on a hang) and reap it."""
    pid, read_fd = child.pid, child.read_fd
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    hung = False
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                hung = True
                break
            poller = select.poll()  # (not select: a test process may hold more than 1024 descriptors)
            poller.register(read_fd, select.POLLIN)
            ready = poller.poll(remaining * 1000)
            if ready:
                chunk = os.read(read_fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(read_fd)
    if hung:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    seconds = time.monotonic() - child.started
    if hung:
        return ChildOutcome("hang", detail=f"no answer within {timeout_s} s", seconds=seconds)
    data = b"".join(chunks)
    if not data:
        return ChildOutcome("died", detail=describe_status(status), seconds=seconds)
    payload = json.loads(data)
    if "error" in payload:
        return ChildOutcome("error", payload["error"], seconds=seconds)
    return ChildOutcome("ok", payload["ok"], seconds=seconds)


def describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"


# --- the acknowledgement pipe: fixed 24-byte records --------------------------------------------

ACK = struct.Struct("<BBHIqq")  # kind, partition, unused, epoch/phase, a, b


def pack(kind: int, partition: int = 0, epoch: int = 0, a: int = 0, b: int = 0) -> bytes:
    return ACK.pack(kind, partition, 0, epoch, a, b)


def unpack_all(data: bytes):
    if len(data) % ACK.size:
        raise AssertionError(f"torn acknowledgement: {len(data)} bytes is not a multiple of {ACK.size}")
    for position in range(0, len(data), ACK.size):
        kind, partition, _, epoch, a, b = ACK.unpack_from(data, position)
        yield kind, partition, epoch, a, b


# --- shared by the test files ------------------------------------------------------------------


def read_all(log, start: int | None = None) -> list[Record]:
    """Every record of ``log`` from ``start`` (default: the log start offset) to its end, checking
    that no read comes back empty below the end and that offsets are contiguous."""
    offset = log.log_start_offset if start is None else start
    first = offset
    out: list[Record] = []
    while offset < log.log_end_offset:
        batch = log.read(offset, 1 << 30, 1000)
        assert batch, f"read({offset}) returned nothing below the log end offset {log.log_end_offset}"
        out.extend(batch)
        offset = batch[-1].offset + 1
    assert [record.offset for record in out] == list(range(first, log.log_end_offset))
    return out


def file_snapshot(root: str, include_dirs: bool = False) -> dict[str, tuple]:
    """Every file under ``root`` as (size, mtime_ns, sha256), and every dir as ``"name/": ()`` when
    ``include_dirs``: compare two snapshots to prove nothing changed."""
    out: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root):
        if include_dirs:
            for name in dirs:
                out[os.path.relpath(os.path.join(folder, name), root) + "/"] = ()
        for name in files:
            path = os.path.join(folder, name)
            stat = os.stat(path)
            with open(path, "rb") as handle:
                out[os.path.relpath(path, root)] = (stat.st_size, stat.st_mtime_ns,
                                                    hashlib.sha256(handle.read()).hexdigest())
    return out


class PowerCut(BaseException):
    """The simulated process or machine stopped here: nothing after this point reaches the files."""


class PowerCutFS(OperationHookFileSystem, SimulatedCrashFileSystem):
    """``SimulatedCrashFileSystem`` that counts mutating file operations once ``armed`` and, at the
    ``cut_at``-th (None: never), raises ``PowerCut`` for it and for every later one (the process is
    gone: even cleanup code changes nothing). ``crash`` then leaves a power loss's state (or, with
    ``lose_unsynced=False``, a process crash's)."""

    def __init__(self, cut_at: int | None = None) -> None:
        super().__init__()
        self.cut_at = cut_at
        self.armed = False
        self.count = 0
        self.dead = False

    def before(self, operation, path) -> None:
        if self.dead:
            raise PowerCut()
        if not self.armed:
            return
        self.count += 1
        if self.cut_at is not None and self.count >= self.cut_at:
            self.dead = True
            raise PowerCut()
