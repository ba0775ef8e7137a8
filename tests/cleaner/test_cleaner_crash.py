"""The crash matrix of the cleaner's swap: a crash after each file operation of ``LogManager.compact``
(which recopies groups of segments into ``.cleaned`` files and swaps each group in with
``Log.replace_segments``: ``.cleaned`` -> ``.swap``, dir fsync, old files -> ``.deleted``, ``.swap`` ->
final names, dir fsync), as a simulated power loss through the file-ops seam (unsynced data and
namespace changes dropped; every operation, with several seeds before each rename and dir fsync), as a
process crash through the same seam (nothing dropped), and as a kill -9 of a forked child just before the
operation (a write crossing a page boundary may be torn first); the last two at every operation of the
swaps (renames, dir fsyncs, removals) and every other one elsewhere.

The store: a compacted topic of small segments (several groups, most of several segments; each group
loses records to compaction, so its old and new contents differ), hot keys overwritten many times, cold
keys, tombstones, a non-empty active segment; closed cleanly before the compaction.

After every crash a plain reopen must find:
- for every group of the compaction, either exactly the old records and segment files or exactly the
  compacted records in one segment (never a mix), and the active segment's records unchanged;
- the same latest value for every key, tombstones included (the clock stays far below the delete
  horizon, so no tombstone may go);
- offsets strictly increasing, the log start and end offsets unchanged, ``read`` and ``iter_records``
  agreeing;
- no ``.cleaned``, ``.swap`` or ``.deleted`` file left;
- a compaction after the reopen ends with exactly the records of an uninterrupted compaction.
A compaction that returned is durable: a crash right after it finds every group compacted.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise

import pytest
from crash_helpers import CrashFS, fork_call

from logstore import LogManager, Record
from logstore.clock import ManualClock
from logstore.testing import OperationHookFileSystem
from logstore.timer.scheduler import Scheduler
from crash_helpers import PowerCut as _PowerCut, PowerCutFS

TOPIC = "t"
T0 = 1_700_000_000_000
COMPACT_AT_MS = T0 + 3_600_000  # far below T0 + delete.retention.ms (24 h): every tombstone stays
STORE_CONFIG = {"log.cleaner.threads": 0}
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 4096, "file.delete.delay.ms": 0,
                "index.interval.bytes": 256}
SEGMENTS = 12
TEMP_SUFFIXES = (".deleted", ".cleaned", ".swap")
SWAP_OPS = ("rename", "fsync_dir", "remove")  # the swap itself (and the cleaner checkpoint's rename)
SEEDED_OPS = ("rename", "fsync_dir")  # where a power cut's seed matters: renames pending in the dir
POWER_SEEDS_SWAP = 3  # power cuts per such operation (each undoes a different part of the namespace)
POWER_SEEDS_OTHER = 1
OTHER_SAMPLE = 2  # kill -9 and process crashes: every swap operation, every 2nd other one


# --- the store -------------------------------------------------------------------------------------

def open_store(data_dir: str, fs=None) -> LogManager:
    clock = ManualClock(COMPACT_AT_MS)
    return LogManager([data_dir], config=STORE_CONFIG, fs=fs, clock=clock,
                      scheduler=Scheduler(clock, threaded=False))


def build_source(data_dir: str) -> None:
    """Hot keys overwritten throughout, per-segment cold keys (some overwritten in the next segment),
    tombstones (some keys deleted for good, some rewritten after), manual rolls at random sizes."""
    rng = random.Random(20240611)
    clock = ManualClock(T0)
    hot = [b"hot-%d" % i for i in range(5)]
    with LogManager([data_dir], config=STORE_CONFIG, clock=clock,
                    scheduler=Scheduler(clock, threaded=False)) as store:
        store.create_topic(TOPIC, 1, TOPIC_CONFIG)
        log = store.get_log(TOPIC, 0)
        n = 0
        for segment in range(SEGMENTS + 1):  # the last one stays active
            cold = [b"cold-%02d-%d" % (segment, i) for i in range(4)]
            previous_cold = [b"cold-%02d-%d" % (segment - 1, i) for i in range(4)] if segment else cold
            for _ in range(rng.randint(2, 7)):
                records = []
                for _ in range(rng.randint(1, 5)):
                    roll = rng.random()
                    key = rng.choice(hot if roll < 0.55 else cold if roll < 0.85 else previous_cold)
                    value = None if rng.random() < 0.12 else key + b"=%d|" % n + b"." * rng.randint(0, 60)
                    records.append(Record(key, value, (("n", b"%d" % n),), T0 + n))
                    n += 1
                log.append(records)
            log.flush()
            if segment < SEGMENTS:
                log.roll()


def read_records(log) -> list[tuple]:
    return [tuple(record) for record in log.iter_records()]


def read_by_fetch(log) -> list[tuple]:
    """The same through ``Log.read`` (reads across the gaps compaction leaves)."""
    out: list[tuple] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        batch = log.read(offset, 1 << 30, 1000)
        if not batch:
            break
        out.extend(map(tuple, batch))
        offset = batch[-1].offset + 1
    return out


def latest_values(records: list[tuple]) -> dict:
    return {record[0]: record[1] for record in records}


def temp_files(data_dir: str) -> list[str]:
    return sorted(name for name in os.listdir(os.path.join(data_dir, f"{TOPIC}-0")) if name.endswith(TEMP_SUFFIXES))


class Recorder(OperationHookFileSystem):
    """Lists the file operations once ``armed``: (operation, file name or None)."""

    def __init__(self) -> None:
        self.armed = False
        self.ops: list[tuple[str, str | None]] = []

    def before(self, operation, path) -> None:
        if self.armed:
            self.ops.append((operation, os.path.basename(path) if path else None))


@dataclass
class Baseline:
    source: str  # the store before compaction (closed cleanly)
    old: list[tuple]
    new: list[tuple]  # after an uninterrupted compaction
    old_bases: list[int]
    new_bases: list[int]
    groups: list[tuple[int, int]]  # [first, next) offsets of each group, one new segment each
    log_end_offset: int
    ops: list[tuple[str, str | None]]  # the file operations of compact(), in order

    def kind(self, point: int) -> str:
        """The operation the crash at ``point`` (1-based: just before op ``point``) precedes."""
        return self.ops[point - 1][0] if point <= len(self.ops) else "returned"

    def in_swap(self, point: int) -> bool:
        return self.kind(point) in SWAP_OPS or self.kind(point) == "returned"


@pytest.fixture(scope="module")
def scratch_root(tmp_path_factory):
    """On tmpfs when there is one (fsyncs cost nothing; the crashes are made by the tests)."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = tempfile.mkdtemp(prefix="logstore-cleaner-crash-", dir="/dev/shm")
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield str(tmp_path_factory.mktemp("cleaner-crash"))


@pytest.fixture(scope="module")
def baseline(scratch_root) -> Baseline:
    source = os.path.join(scratch_root, "source")
    build_source(source)
    reference = os.path.join(scratch_root, "reference")
    shutil.copytree(source, reference)
    recorder = Recorder()
    with open_store(reference, recorder) as store:
        log = store.get_log(TOPIC, 0)
        old = read_records(log)
        old_bases = [segment.base_offset for segment in log.segments]
        log_end_offset = log.log_end_offset
        recorder.armed = True
        store.compact(TOPIC)
        recorder.armed = False
        new = read_records(log)
        new_bases = [segment.base_offset for segment in log.segments]
    shutil.rmtree(reference)
    assert new_bases[-1] == old_bases[-1], "the active segment is not compacted"
    groups = list(pairwise(new_bases))
    sizes = [sum(1 for base in old_bases if first <= base < end) for first, end in groups]
    # The layout the matrix needs: several groups, most of several segments, every one changed.
    assert len(groups) >= 3 and sum(size > 1 for size in sizes) >= 2, (old_bases, new_bases)
    for first, end in groups:
        assert _slice(old, first, end) != _slice(new, first, end), f"group [{first}, {end}) unchanged"
    assert latest_values(new) == latest_values(old)
    assert None in latest_values(old).values() and any(r[1] is None for r in new), "tombstones are kept"
    kinds = Counter(op for op, _ in recorder.ops)
    assert kinds["rename"] >= 9 * len(groups) and kinds["fsync_dir"] >= 2 * len(groups), kinds
    return Baseline(source, old, new, old_bases, new_bases, groups, log_end_offset, recorder.ops)


def _slice(records: list[tuple], first: int, end: int) -> list[tuple]:
    return [record for record in records if first <= record[4] < end]


# --- what a reopen must find -------------------------------------------------------------------------

@dataclass
class Findings:
    """Counts over the whole matrix, and the first few failures in words."""

    points: int = 0
    mixes: int = 0
    wrong_latest: int = 0
    other: int = 0
    new_groups: Counter = field(default_factory=Counter)  # how many groups were compacted -> count
    seen: dict = field(default_factory=dict)  # group -> set of outcomes
    failures: list[str] = field(default_factory=list)

    def fail(self, text: str) -> None:
        if len(self.failures) < 8:
            self.failures.append(text)


def check_reopen(data_dir: str, base: Baseline, findings: Findings, context: str, *,
                 expect_all_new: bool = False) -> None:
    findings.points += 1
    with open_store(data_dir) as store:
        log = store.get_log(TOPIC, 0)
        records = read_records(log)
        fetched = read_by_fetch(log)
        bases = [segment.base_offset for segment in log.segments]
        start, end = log.log_start_offset, log.log_end_offset
    leftovers = temp_files(data_dir)
    problems = []
    if leftovers:
        problems.append(f"leftover files {leftovers}")
    if (start, end) != (0, base.log_end_offset):
        problems.append(f"log start/end offsets {start}/{end}, expected 0/{base.log_end_offset}")
    offsets = [record[4] for record in records]
    if any(b <= a for a, b in pairwise(offsets)):
        problems.append("offsets not strictly increasing")
    if fetched != records:
        problems.append(f"read() gives {len(fetched)} records, iter_records() {len(records)}")
    tail = base.groups[-1][1]
    if _slice(records, tail, end + 1) != _slice(base.old, tail, end + 1):
        problems.append("the active segment's records changed")
    compacted = 0
    for first, stop in base.groups:
        got = _slice(records, first, stop)
        layout = [b for b in bases if first <= b < stop]
        if got == _slice(base.old, first, stop) and layout == [b for b in base.old_bases if first <= b < stop]:
            outcome = "old"
        elif got == _slice(base.new, first, stop) and layout == [first]:
            outcome = "new"
            compacted += 1
        else:
            outcome = "mix"
            findings.mixes += 1
            findings.fail(f"{context}: group [{first}, {stop}) is a mix: segments {layout}, "
                          f"{len(got)} records (old {len(_slice(base.old, first, stop))}, "
                          f"new {len(_slice(base.new, first, stop))})")
        findings.seen.setdefault((first, stop), set()).add(outcome)
    findings.new_groups[compacted] += 1
    if expect_all_new and compacted != len(base.groups):
        problems.append(f"a returned compaction is not durable: {compacted}/{len(base.groups)} groups compacted")
    expected_latest, latest = latest_values(base.old), latest_values(records)
    wrong = sum(1 for key in expected_latest.keys() | latest.keys()
                if expected_latest.get(key, 0) != latest.get(key, 0))
    if wrong:
        findings.wrong_latest += wrong
        findings.fail(f"{context}: {wrong} keys with a wrong latest value")
    # Compacting again reaches the uninterrupted result (and a reopen after it keeps it).
    with open_store(data_dir) as store:
        store.compact(TOPIC)
        again = read_records(store.get_log(TOPIC, 0))
    if again != base.new:
        problems.append(f"compacting after the reopen gives {len(again)} records, not the {len(base.new)} "
                        "of an uninterrupted compaction")
    if temp_files(data_dir):
        problems.append(f"leftover files after compacting again: {temp_files(data_dir)}")
    if problems:
        findings.other += len(problems)
        findings.fail(f"{context}: " + "; ".join(problems))


def assert_clean(findings: Findings, base: Baseline, label: str, detail: str = "") -> None:
    print(f"\n{label}: crash points: {findings.points}{detail}, mixes found: {findings.mixes}, "
          f"keys with a wrong latest value: {findings.wrong_latest}, other violations: {findings.other}, "
          f"groups compacted at reopen: {dict(sorted(findings.new_groups.items()))}")
    assert not findings.failures, "\n".join(findings.failures)
    assert findings.mixes == findings.wrong_latest == findings.other == 0
    # The matrix reaches both outcomes of every group (so it does cut inside every swap).
    assert all(findings.seen[group] == {"old", "new"} for group in base.groups), findings.seen


def points_to_crash(base: Baseline) -> list[int]:
    """Every swap operation (and the point after the call returned), every OTHER_SAMPLE-th other one."""
    total = len(base.ops) + 1
    return [point for point in range(1, total + 1) if base.in_swap(point) or point % OTHER_SAMPLE == 0]


# --- simulated power loss and process crash through the file-ops seam -------------------------------

def cut_compaction(base: Baseline, data_dir: str, cut_at: int, seed: int, lose_unsynced: bool):
    shutil.copytree(base.source, data_dir)
    fs = PowerCutFS(cut_at)
    store = open_store(data_dir, fs)
    fs.armed = True
    try:
        store.compact(TOPIC)
        returned = True
    except _PowerCut:
        returned = False
    report = fs.crash(random.Random(seed), lose_unsynced=lose_unsynced)  # the store is never closed
    return returned, fs.count, report


def test_power_loss_at_every_operation_of_compaction(baseline, scratch_root):
    findings = Findings()
    kinds: Counter = Counter()
    undone = 0
    total = len(baseline.ops) + 1
    for cut_at in range(1, total + 1):
        seeds = POWER_SEEDS_SWAP if baseline.kind(cut_at) in SEEDED_OPS + ("returned",) else POWER_SEEDS_OTHER
        for seed in range(seeds):
            data_dir = os.path.join(scratch_root, f"cut-{cut_at}-{seed}")
            returned, count, report = cut_compaction(baseline, data_dir, cut_at, seed * 7919 + cut_at, True)
            assert returned == (cut_at == total), f"cut at {cut_at}: the run did not follow the dry run"
            if returned:
                assert count == len(baseline.ops), "the operations differ from the dry run"
            undone += bool(report.undone_renames or report.vanished)
            check_reopen(data_dir, baseline, findings,
                         f"power cut before op {cut_at}/{len(baseline.ops)} {baseline.ops[cut_at - 1:cut_at]} "
                         f"(seed {seed}): {report}", expect_all_new=returned)
            kinds[baseline.kind(cut_at)] += 1
            shutil.rmtree(data_dir)
    assert undone >= total // 3, "the power cuts undid directory changes at many points"
    assert_clean(findings, baseline, "power loss during compaction",
                 f" ({total} points; {POWER_SEEDS_SWAP} seeds before a rename or dir fsync, "
                 f"{POWER_SEEDS_OTHER} elsewhere; "
                 f"{undone} with namespace changes undone; by op {dict(sorted(kinds.items()))})")


def test_process_crash_at_every_swap_operation_of_compaction(baseline, scratch_root):
    """The same seam without losing anything (the page cache survives a process crash)."""
    findings = Findings()
    for cut_at in points_to_crash(baseline):
        data_dir = os.path.join(scratch_root, f"stop-{cut_at}")
        returned, _, _ = cut_compaction(baseline, data_dir, cut_at, cut_at, False)
        check_reopen(data_dir, baseline, findings, f"process crash before op {cut_at}/{len(baseline.ops)} "
                     f"{baseline.ops[cut_at - 1:cut_at]}", expect_all_new=returned)
        shutil.rmtree(data_dir)
    assert_clean(findings, baseline, "process crash during compaction")


# --- kill -9 of a forked compaction ------------------------------------------------------------------

def _kill9_compaction(data_dir: str, kill_at: int | None, seed: int):
    def run():
        fs = CrashFS(kill_at=kill_at, rng=random.Random(seed))
        store = open_store(data_dir, fs)
        fs.armed = True
        store.compact(TOPIC)
        return fs.count  # then the child ends without closing the store
    return fork_call(run, timeout_s=60)


def test_kill9_at_every_swap_operation_of_compaction(baseline, scratch_root):
    findings = Findings()
    counted = os.path.join(scratch_root, "kill-none")
    shutil.copytree(baseline.source, counted)
    outcome = _kill9_compaction(counted, None, 0)
    assert outcome.status == "ok", outcome.result or outcome.detail
    assert outcome.result == len(baseline.ops), "the child's operations differ from the dry run"
    check_reopen(counted, baseline, findings, "killed after compact() returned", expect_all_new=True)
    shutil.rmtree(counted)
    kinds: Counter = Counter()
    for kill_at in points_to_crash(baseline):
        if kill_at > len(baseline.ops):
            continue  # done above
        data_dir = os.path.join(scratch_root, f"kill-{kill_at}")
        shutil.copytree(baseline.source, data_dir)
        outcome = _kill9_compaction(data_dir, kill_at, kill_at)
        assert outcome.status == "died", f"kill at op {kill_at}/{len(baseline.ops)}: {outcome}"
        check_reopen(data_dir, baseline, findings,
                     f"killed before op {kill_at}/{len(baseline.ops)} {baseline.ops[kill_at - 1]}")
        kinds[baseline.kind(kill_at)] += 1
        shutil.rmtree(data_dir)
    assert_clean(findings, baseline, "kill -9 during compaction", f" (by op {dict(sorted(kinds.items()))})")
