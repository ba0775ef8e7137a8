"""The loader's passes over hand-made partition directories, and crashes inside ``truncate_to``.

Invariants checked: on open a writer removes ``.deleted`` and ``.cleaned`` files, discards a ``.swap``
whose base offset is at or above the lowest ``.cleaned`` base (an interrupted group) and a ``.swap``
without its data file, completes a valid ``.swap`` (the originals in its offset range are removed and
it takes their place, with or without its own index files), and removes index files that have no
``.log``; the records read back are exactly the expected mix of original and swapped-in data, with
contiguous offsets; a read-only open sees the same records the writer will, yet changes no file (names,
sizes, hashes, mtimes) and creates none. Crash matrices of ``Log.truncate_to`` (kill -9 of a forked
writer right before each of its mutating file operations, and simulated power loss at each of them
with several seeds): a truncation inside a batch of the active segment (``_rewrite_around`` +
``replace_segments``) leaves exactly the old log or exactly the truncated one, never a mix; truncations
that also delete later segments leave a gap-free prefix of the old log at least as long as the
truncation point; every record below the truncation point survives; no ``.cleaned``/``.swap``/
``.deleted`` file remains after the reopen; a second reopen changes nothing. A loader killed before
any of its own file operations leaves a directory the next loader completes identically (regression:
invalid ``.swap`` files must go, durably, before the ``.cleaned`` files that mark them invalid).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile

import pytest

from crash_helpers import CrashFS, fork_call
from logstore import FileSystem, LogManager, Record
from crash_helpers import read_all, file_snapshot as snapshot
from crash_helpers import PowerCut as _PowerCut, PowerCutFS

TOPIC = "t"
T0 = 1_700_000_000_000
CONFIG = {"segment.bytes": 2048, "index.interval.bytes": 100}
BATCH = 5
TEMP_SUFFIXES = (".deleted", ".cleaned", ".swap")


# --- helpers -----------------------------------------------------------------------------------------

def make_records(count: int, tag: bytes) -> list[Record]:
    return [Record(b"k%d" % (i % 5), tag + b"%04d" % i + b"x" * 40, (("tag", tag),), T0 + i, i)
            for i in range(count)]


def build(data_dir: str, records: list[Record]) -> None:
    with LogManager([data_dir]) as store:
        store.create_topic(TOPIC, 1, CONFIG)
        log = store.get_log(TOPIC, 0)
        for start in range(0, len(records), BATCH):
            log.append([r._replace(offset=None) for r in records[start : start + BATCH]])


def part(data_dir: str) -> str:
    return os.path.join(data_dir, f"{TOPIC}-0")


def name(base: int, kind: str, status: str = "") -> str:
    return f"{base:020d}{kind}{status}"


def open_and_read(data_dir: str, *, read_only: bool = False, fs: FileSystem | None = None):
    with LogManager([data_dir], read_only=read_only, fs=fs) as store:
        log = store.get_log(TOPIC, 0)
        records = read_all(log)
        bases = [segment.base_offset for segment in log.segments]
        assert log.log_start_offset == 0
        assert [r.offset for r in records] == list(range(len(records))), "offsets are contiguous"
        assert log.log_end_offset == len(records)
        return records, bases


def temp_files(data_dir: str) -> list[str]:
    return sorted(n for n in os.listdir(part(data_dir)) if n.endswith(TEMP_SUFFIXES))


# --- the loader's passes on hand-made directories ----------------------------------------------------

@pytest.fixture(scope="module")
def twin_stores(tmp_path_factory):
    """Two stores with the same offsets, batches and segment boundaries, different values."""
    root = tmp_path_factory.mktemp("twins")
    old, new = make_records(120, b"a"), make_records(120, b"b")
    build(str(root / "a"), old)
    build(str(root / "b"), new)
    with LogManager([str(root / "a")], read_only=True) as store_a, \
            LogManager([str(root / "b")], read_only=True) as store_b:
        bases = [s.base_offset for s in store_a.get_log(TOPIC, 0).segments]
        assert bases == [s.base_offset for s in store_b.get_log(TOPIC, 0).segments]
    assert len(bases) >= 5
    return str(root / "a"), str(root / "b"), old, new, bases


def _copy(src_dir, base, dst_dir, dst_base, status, kinds=(".log", ".index", ".timeindex")):
    for kind in kinds:
        shutil.copyfile(os.path.join(src_dir, name(base, kind)), os.path.join(dst_dir, name(dst_base, kind, status)))


def _mix(old, new, start, stop):
    """``old`` with offsets [start, stop) taken from ``new``."""
    return old[:start] + new[start:stop] + old[stop:]


def scenario_deleted(a, b, old, new, bases):
    _copy(a, bases[1], a, bases[1], ".deleted")
    with open(os.path.join(a, name(99_999, ".log", ".deleted")), "wb") as handle:
        handle.write(b"not a segment")
    return old, bases, []


def scenario_cleaned(a, b, old, new, bases):
    _copy(b, bases[1], a, bases[1], ".cleaned")
    with open(os.path.join(a, name(99_999, ".log", ".cleaned")), "wb") as handle:
        handle.write(b"half-written")
    return old, bases, []


def scenario_swap_of_two_originals(a, b, old, new, bases):
    """One ``.log.swap`` (no index files) replacing the two originals in [bases[1], bases[3])."""
    with open(os.path.join(a, name(bases[1], ".log", ".swap")), "wb") as out:
        for base in bases[1:3]:
            with open(os.path.join(b, name(base, ".log")), "rb") as handle:
                out.write(handle.read())
    return _mix(old, new, bases[1], bases[3]), [base for base in bases if base != bases[2]], []


def scenario_swap_with_indexes(a, b, old, new, bases):
    _copy(b, bases[2], a, bases[2], ".swap")
    return _mix(old, new, bases[2], bases[3]), bases, []


def scenario_swap_at_or_above_lowest_cleaned(a, b, old, new, bases):
    """Renames .cleaned -> .swap go newest first: a crash leaves higher .swap, lower .cleaned."""
    _copy(b, bases[1], a, bases[1], ".cleaned")
    _copy(b, bases[2], a, bases[2], ".swap")
    _copy(b, bases[3], a, bases[3], ".swap", kinds=(".log",))
    return old, bases, []


def scenario_swap_below_lowest_cleaned(a, b, old, new, bases):
    _copy(b, bases[1], a, bases[1], ".swap")
    _copy(b, bases[2], a, bases[2], ".cleaned")
    return _mix(old, new, bases[1], bases[2]), bases, []


def scenario_swap_without_data_file(a, b, old, new, bases):
    _copy(b, bases[2], a, bases[2], ".swap", kinds=(".index", ".timeindex"))
    return old, bases, []


def scenario_orphan_indexes(a, b, old, new, bases):
    """Index files at a base inside a segment's offsets never had data: removed. (Index files
    where a segment is missing are damage: tests/log/test_damage.py.)"""
    _copy(a, bases[1], a, bases[1] + 1, "", kinds=(".index", ".timeindex"))
    _copy(a, bases[2], a, bases[2] + 2, "", kinds=(".index",))
    orphans = [name(bases[1] + 1, ".index"), name(bases[1] + 1, ".timeindex"), name(bases[2] + 2, ".index")]
    return old, bases, orphans


SCENARIOS = {fn.__name__[len("scenario_"):]: fn for fn in (
    scenario_deleted, scenario_cleaned, scenario_swap_of_two_originals, scenario_swap_with_indexes,
    scenario_swap_at_or_above_lowest_cleaned, scenario_swap_below_lowest_cleaned,
    scenario_swap_without_data_file, scenario_orphan_indexes)}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_loader_passes(twin_stores, tmp_path, scenario):
    store_a, store_b, old, new, bases = twin_stores
    data_dir = str(tmp_path / "data")
    shutil.copytree(store_a, data_dir)
    expected, expected_bases, orphans = SCENARIOS[scenario](part(data_dir), part(store_b), old, new, bases)

    # A read-only opener sees what the writer will see, and changes nothing.
    before = snapshot(data_dir)
    viewed, _ = open_and_read(data_dir, read_only=True)
    assert snapshot(data_dir) == before, "a read-only open changed files"
    assert viewed == expected

    # The writer completes or undoes the interrupted work.
    records, segment_bases = open_and_read(data_dir)
    assert records == expected
    assert segment_bases == expected_bases
    assert temp_files(data_dir) == []
    assert not set(orphans) & set(os.listdir(part(data_dir))), "orphan index files remain"
    for base in segment_bases:
        assert os.path.exists(os.path.join(part(data_dir), name(base, ".log")))
    # Idempotent: a second open changes nothing that matters.
    assert open_and_read(data_dir) == (expected, expected_bases)


@pytest.mark.parametrize("scenario", [
    "swap_of_two_originals", "swap_with_indexes", "orphan_indexes",
    "swap_at_or_above_lowest_cleaned"])
def test_kill9_at_every_operation_of_loading(twin_stores, scratch, scenario):
    """Recovery is idempotent: a loader killed before any of its file operations (removals,
    renames, index rebuilds, directory fsyncs) leaves a directory the next loader completes."""
    store_a, store_b, old, new, bases = twin_stores

    def prepare(data_dir):
        shutil.copytree(store_a, data_dir)
        return SCENARIOS[scenario](part(data_dir), part(store_b), old, new, bases)

    def load(data_dir, kill_at):
        def run():
            fs = CrashFS(kill_at=kill_at, rng=random.Random(kill_at))
            fs.armed = True
            LogManager([data_dir], fs=fs)  # never closed: the process ends (or is killed) here
            return fs.count
        return fork_call(run, timeout_s=60)

    counted = os.path.join(scratch, "counted")
    expected, expected_bases, _ = prepare(counted)
    outcome = load(counted, None)
    assert outcome.status == "ok", outcome.result or outcome.detail
    operations = outcome.result
    assert operations >= 3
    for kill_at in range(1, operations + 1):
        data_dir = os.path.join(scratch, f"kill-{kill_at}")
        prepare(data_dir)
        outcome = load(data_dir, kill_at)
        assert outcome.status == "died", f"kill at op {kill_at}/{operations}: {outcome}"
        assert open_and_read(data_dir) == (expected, expected_bases), f"killed before op {kill_at}/{operations}"
        assert temp_files(data_dir) == []
        shutil.rmtree(data_dir)


class _Stop(BaseException):
    """The process dies here."""


class _DieBeforeRemovingASwap(FileSystem):
    def remove(self, path):
        if path.endswith(".swap"):
            raise _Stop()
        super().remove(path)


def test_crash_while_discarding_an_interrupted_swap_group(twin_stores, tmp_path):
    store_a, store_b, old, new, bases = twin_stores
    data_dir = str(tmp_path / "data")
    shutil.copytree(store_a, data_dir)
    _copy(part(store_b), bases[1], part(data_dir), bases[1], ".cleaned", kinds=(".log",))
    _copy(part(store_b), bases[2], part(data_dir), bases[2], ".swap", kinds=(".log",))
    with pytest.raises(_Stop):  # the .cleaned file is already gone, the invalid .swap not yet
        LogManager([data_dir], fs=_DieBeforeRemovingASwap())
    assert open_and_read(data_dir)[0] == old  # offsets 40..59 come from the aborted swap


def test_read_only_open_of_an_unclean_store_changes_nothing(twin_stores, tmp_path):
    """A crashed writer (no clean-shutdown marker, torn tail, untrimmed indexes): a read-only
    open reads the valid prefix and still changes no file."""
    store_a, _, old, _, bases = twin_stores
    data_dir = str(tmp_path / "data")
    shutil.copytree(store_a, data_dir)
    os.remove(os.path.join(data_dir, ".kafka_cleanshutdown"))
    last = os.path.join(part(data_dir), name(bases[-1], ".log"))
    with open(last, "ab") as handle:
        handle.write(b"\x00\x01torn")
    for kind in (".index", ".timeindex"):
        os.truncate(os.path.join(part(data_dir), name(bases[-1], kind)), 1200)  # zero-filled tail
    _copy(part(data_dir), bases[1], part(data_dir), bases[1], ".deleted")
    before = snapshot(data_dir)
    viewed, _ = open_and_read(data_dir, read_only=True)
    assert snapshot(data_dir) == before
    assert viewed == old
    assert open_and_read(data_dir)[0] == old
    assert temp_files(data_dir) == []


# --- crash matrices of truncate_to ------------------------------------------------------------------

# Three truncations of one store (records 0..119, 5 per batch, segments of 20 records at
# 0, 20, 40, ...), each a kind of truncate_to:
#   "swap": inside a batch of the active segment: rewrite + replace_segments only -> old or new;
#   "swap+deletes": inside a batch of a sealed segment: later segments deleted, then the swap;
#   "boundary": at a batch boundary two segments below the active one: deletes, then an in-place cut.
CASES = {"swap": 107, "swap+deletes": 33, "boundary": 45}
SEEDS = 4  # power cuts per operation


@pytest.fixture
def scratch(tmp_path):
    """A scratch dir on tmpfs when there is one (fsync costs nothing there; these tests make their
    crashes themselves and never rely on the disk), else ``tmp_path``."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = tempfile.mkdtemp(prefix="logstore-loader-", dir="/dev/shm")
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield str(tmp_path)


@pytest.fixture(scope="module")
def truncation_store(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("truncation") / "data")
    records = make_records(120, b"a")
    build(data_dir, records)
    with LogManager([data_dir], read_only=True) as view:
        bases = [s.base_offset for s in view.get_log(TOPIC, 0).segments]
    assert bases == [0, 20, 40, 60, 80, 100], bases  # CASES depends on this layout
    assert all((point % BATCH != 0) == case.startswith("swap") for case, point in CASES.items())
    return data_dir, records


def _check_after_truncation_crash(data_dir, records, point, case, context):
    """What a reopen after a crash inside ``truncate_to(point)`` must find."""
    got, _ = open_and_read(data_dir)
    context = f"{case} truncate_to({point}) {context}: {len(got)} records"
    assert temp_files(data_dir) == [], context
    assert got == records[: len(got)], f"not a prefix of the old log: {context}"
    assert len(got) >= point, f"records below the truncation point lost: {context}"
    if case == "swap":
        assert len(got) in (point, len(records)), f"neither the old nor the truncated log: {context}"
    assert open_and_read(data_dir)[0] == got, f"a second reopen changed the log: {context}"
    return len(got)


def _kill9_writer(data_dir, point, kill_at, seed):
    def run():
        fs = CrashFS(kill_at=kill_at, rng=random.Random(seed))
        store = LogManager([data_dir], fs=fs)
        log = store.get_log(TOPIC, 0)
        fs.armed = True
        log.truncate_to(point)
        return fs.count  # the process then ends without closing the store (a crash after the call)
    return fork_call(run, timeout_s=60)


@pytest.mark.parametrize("case", sorted(CASES))
def test_kill9_at_every_operation_of_truncate_to(truncation_store, scratch, case):
    source, records = truncation_store
    point = CASES[case]
    counted = os.path.join(scratch, "counted")
    shutil.copytree(source, counted)
    outcome = _kill9_writer(counted, point, None, 0)
    assert outcome.status == "ok", outcome.result or outcome.detail
    operations = outcome.result
    assert operations >= 10
    # The call returned: the truncation is durable even though the store was never closed.
    assert _check_after_truncation_crash(counted, records, point, case, "after return") == point
    results = set()
    for kill_at in range(1, operations + 1):
        data_dir = os.path.join(scratch, f"kill-{kill_at}")
        shutil.copytree(source, data_dir)
        outcome = _kill9_writer(data_dir, point, kill_at, kill_at)
        assert outcome.status == "died", f"kill at op {kill_at}/{operations}: {outcome}"
        results.add(_check_after_truncation_crash(data_dir, records, point, case,
                                                  f"killed before op {kill_at}/{operations}"))
        shutil.rmtree(data_dir)
    if case == "swap":
        assert results == {point, len(records)}, "both outcomes occur across the matrix"
    else:
        assert min(results) == point and max(results) == len(records)
    print(f"\nkill -9 in truncate_to ({case}): crash points: {operations + 1}, "
          f"records below the truncation point lost: 0, outcomes (records): {sorted(results)}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_power_loss_at_every_operation_of_truncate_to(truncation_store, scratch, case):
    source, records = truncation_store
    point = CASES[case]
    operations = None
    cut_at = 1
    points = undone = 0
    results = set()
    while operations is None or cut_at <= operations + 1:
        for seed in range(SEEDS):
            data_dir = os.path.join(scratch, f"cut-{cut_at}-{seed}")
            shutil.copytree(source, data_dir)
            fs = PowerCutFS(cut_at)
            store = LogManager([data_dir], fs=fs)
            log = store.get_log(TOPIC, 0)
            fs.armed = True
            try:
                log.truncate_to(point)
                returned = True
            except _PowerCut:
                returned = False
            if operations is None and returned:
                operations = fs.count
            report = fs.crash(random.Random(seed * 1000 + cut_at))
            undone += bool(report.undone_renames or report.vanished)
            survived = _check_after_truncation_crash(
                data_dir, records, point, case, f"power cut before op {cut_at} (seed {seed}): {report}")
            if returned:
                assert survived == point, "a returned truncate_to is durable"
            results.add(survived)
            points += 1
            shutil.rmtree(data_dir)
        cut_at += 1
    assert operations is not None and operations >= 10 and points == SEEDS * (operations + 1)
    assert undone >= operations // 2, "the power cuts undid directory changes at some points"
    assert min(results) == point and max(results) == len(records)
    print(f"\npower loss in truncate_to ({case}): crash points: {points} ({operations + 1} ops x {SEEDS} seeds), "
          f"flushed records lost: 0, outcomes (records): {sorted(results)}")
