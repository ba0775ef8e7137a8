"""A crash during the compaction of a transactional log keeps each segment's ``.txnindex`` with its
segment: a simulated power loss (unsynced data and namespace changes dropped, two seeds before each
rename and dir fsync) and a process crash (nothing dropped) before every file operation of
``LogManager.compact``, whose round drops aborted data, gives markers horizons, drops markers past
theirs (and with them their aborted-transaction entries) and writes the cleaned segments'
``<base>.txnindex.cleaned`` files, swapped in with the segments.

The source: small segments of plain records, committed and aborted transactions of three producers
(aborted ones in several segments, so several segments have a ``.txnindex``), compacted once, then
more appended and the clock moved past ``delete.retention.ms``, closed cleanly.

After every crash a reopen must find, for every group of the compaction, either exactly its old
batches (markers included) and aborted transactions or exactly its new ones (never a mix: in
particular never an entry without its ABORT marker, which would hide a producer's later committed
data, nor an ABORT marker of aborted data without its entry, which would show that data);
read_committed giving the same latest values; no temporary file left; and a compaction after the
reopen ending with the batches (but emptied ones) and aborted transactions of an uninterrupted one.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise

import pytest
from crash_helpers import PowerCut, PowerCutFS

from logstore import LogManager, Record
from logstore.clock import ManualClock
from logstore.records.batching import ProducerBatch
from logstore.testing import OperationHookFileSystem
from logstore.timer.scheduler import Scheduler

TOPIC = "t"
T0 = 1_700_000_000_000
RETENTION_MS = 60_000
COMPACT_AT_MS = T0 + 2 * RETENTION_MS  # past the horizons the first compaction gave
STORE_CONFIG = {"log.cleaner.threads": 0}
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 1024, "file.delete.delay.ms": 0,
                "index.interval.bytes": 256, "delete.retention.ms": RETENTION_MS}
TEMP_SUFFIXES = (".deleted", ".cleaned", ".swap")
SEEDED_OPS = ("rename", "fsync_dir")
RC = "read_committed"


def open_store(data_dir: str, fs=None, now_ms: int = COMPACT_AT_MS) -> LogManager:
    clock = ManualClock(now_ms)
    return LogManager([data_dir], config=STORE_CONFIG, fs=fs, clock=clock, scheduler=Scheduler(clock, threaded=False))


def build_source(data_dir: str) -> None:
    rng = random.Random(29)
    with open_store(data_dir, now_ms=T0) as store:
        store.create_topic(TOPIC, 1, TOPIC_CONFIG)
        log = store.get_log(TOPIC, 0)
        sequences = Counter()
        n = 0
        for phase in range(2):
            for segment in range(5):
                for _ in range(rng.randint(2, 4)):
                    pid = rng.choice((0, 1, 2, 3))
                    batch = [Record(b"k%d" % rng.randrange(8), b"v%d" % n + b"." * rng.randrange(30), (), T0 + n)
                             for _ in range(rng.randint(1, 3))]
                    n += len(batch)
                    if pid == 0:
                        log.append(batch)
                        continue
                    log.append(batch, producer=ProducerBatch(pid, 0, sequences[pid], transactional=True))
                    sequences[pid] += len(batch)
                    log.append_marker(pid, 0, 0, commit=rng.random() < 0.5)
                log.roll()
            if phase == 0:
                store.compact(TOPIC)  # markers without data get their horizons (T0 + retention)
        log.append([Record(b"k0", b"active", (), T0 + n)])


def group_view(log) -> list[tuple]:
    """Every batch as (base, last, record count, marker) and the aborted transactions, by offset."""
    rows = [(b.header.base_offset, b.header.last_offset, b.header.record_count, m)
            for b, _p, m in log.iter_batches_with_control()]
    return rows, [tuple(t) for t in log.aborted_transactions(0, log.log_end_offset)]


def latest_committed(log) -> dict:
    return {record.key: record.value for record in log.iter_records(isolation=RC)}


def temp_files(data_dir: str) -> list[str]:
    return sorted(name for name in os.listdir(os.path.join(data_dir, f"{TOPIC}-0")) if name.endswith(TEMP_SUFFIXES))


class Recorder(OperationHookFileSystem):
    def __init__(self) -> None:
        self.armed = False
        self.ops: list[tuple[str, str | None]] = []

    def before(self, operation, path) -> None:
        if self.armed:
            self.ops.append((operation, os.path.basename(path) if path else None))


@dataclass
class Baseline:
    source: str
    old: tuple
    new: tuple
    groups: list[tuple[int, int]]
    latest: dict
    ops: list


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    root = tempfile.mkdtemp(prefix="logstore-txn-crash-", dir="/dev/shm") if os.access("/dev/shm", os.W_OK) \
        else str(tmp_path_factory.mktemp("txn-crash"))
    source = os.path.join(root, "source")
    build_source(source)
    reference = os.path.join(root, "reference")
    shutil.copytree(source, reference)
    recorder = Recorder()
    with open_store(reference, recorder) as store:
        log = store.get_log(TOPIC, 0)
        old, latest = group_view(log), latest_committed(log)
        recorder.armed = True
        stats = store.compact(TOPIC)[(TOPIC, 0)]
        recorder.armed = False
        new = group_view(log)
        bases = [segment.base_offset for segment in log.segments]
        assert latest_committed(log) == latest
    # The round the matrix cuts must do all of it: drop markers and their entries, keep others.
    assert stats.markers_removed >= 1 and new[1] and len(new[1]) < len(old[1]), (stats, old[1], new[1])
    txn_indexes = [name for name in os.listdir(os.path.join(source, f"{TOPIC}-0")) if name.endswith(".txnindex")]
    assert len(txn_indexes) >= 2, txn_indexes
    assert any(name.endswith(".txnindex.cleaned") for _op, name in recorder.ops if name)
    yield Baseline(source, old, new, list(pairwise(bases)), latest, recorder.ops)
    shutil.rmtree(root, ignore_errors=True)


def not_empty(rows: list[tuple]) -> list[tuple]:
    """The batches but emptied data batches (where a group ends, which a round after a reopen may
    choose differently, is where one stays)."""
    return [row for row in rows if row[2] or row[3] is not None]


def _in(rows, first, stop):
    return [row for row in rows if first <= row[0] < stop]


def check_reopen(data_dir: str, base: Baseline, outcomes: dict, context: str, expect_new: bool) -> list[str]:
    problems = []
    with open_store(data_dir) as store:
        log = store.get_log(TOPIC, 0)
        rows, aborted = group_view(log)
        if latest_committed(log) != base.latest:
            problems.append("read_committed latest values changed")
    if temp_files(data_dir):
        problems.append(f"leftover files {temp_files(data_dir)}")
    old_rows, old_aborted = base.old
    new_rows, new_aborted = base.new
    # An aborted transaction belongs to the group of its ABORT marker (the old log's position).
    marker_of = {}
    for txn in old_aborted:
        marker_of[txn] = min(row[0] for row in old_rows if row[3] is not None and not row[3].commit
                             and row[0] >= txn[1])
    compacted = 0
    for first, stop in base.groups:
        got = (_in(rows, first, stop), [t for t in aborted if first <= marker_of.get(t, -1) < stop])
        old = (_in(old_rows, first, stop), [t for t in old_aborted if first <= marker_of[t] < stop])
        new = (_in(new_rows, first, stop), [t for t in new_aborted if first <= marker_of[t] < stop])
        outcome = "new" if got == new else "old" if got == old else "mix"
        outcomes.setdefault((first, stop), set()).add(outcome)
        compacted += outcome == "new"
        if outcome == "mix":
            problems.append(f"group [{first}, {stop}) is a mix: {got}")
    if set(aborted) - set(marker_of):
        problems.append(f"unknown aborted transactions {set(aborted) - set(marker_of)}")
    if expect_new and compacted != len(base.groups):
        problems.append("a returned compaction is not durable")
    with open_store(data_dir) as store:
        store.compact(TOPIC)
        again = group_view(store.get_log(TOPIC, 0))
        if (not_empty(again[0]), again[1]) != (not_empty(new_rows), new_aborted):
            problems.append("compacting after the reopen does not give the uninterrupted result")
    return [f"{context}: {problem}" for problem in problems]


@pytest.mark.parametrize("lose_unsynced", [True, False], ids=["power-loss", "process-crash"])
def test_a_crash_at_every_operation_of_a_transactional_compaction_keeps_txnindex_with_its_segment(
        baseline, lose_unsynced, tmp_path):
    failures: list[str] = []
    outcomes: dict = {}
    total = len(baseline.ops) + 1
    for cut_at in range(1, total + 1):
        kind = baseline.ops[cut_at - 1][0] if cut_at <= len(baseline.ops) else "returned"
        for seed in range(2 if lose_unsynced and kind in SEEDED_OPS else 1):
            data_dir = str(tmp_path / f"cut-{cut_at}-{seed}")
            shutil.copytree(baseline.source, data_dir)
            fs = PowerCutFS(cut_at)
            store = open_store(data_dir, fs)
            fs.armed = True
            try:
                store.compact(TOPIC)
                returned = True
            except PowerCut:
                returned = False
            assert returned == (cut_at == total), f"cut at {cut_at}: the run did not follow the dry run"
            fs.crash(random.Random(seed * 7919 + cut_at), lose_unsynced=lose_unsynced)
            failures += check_reopen(data_dir, baseline, outcomes,
                                     f"cut before op {cut_at}/{len(baseline.ops)} {baseline.ops[cut_at - 1:cut_at]} "
                                     f"(seed {seed})", returned)
            shutil.rmtree(data_dir)
    assert not failures, "\n".join(failures[:8])
    assert all(outcomes[group] == {"old", "new"} for group in baseline.groups), outcomes
