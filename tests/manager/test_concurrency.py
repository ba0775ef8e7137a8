"""Invariants checked: one writer per store, and reads concurrent with writes
(docs/design.md §5, §7).

(f) Second-process safety. While process A holds the store, every second writer (a real subprocess
    started with ``sys.executable -c``, with the dirs in any order or only some of them, and a second
    ``LogManager`` inside this process) raises ``LockedError`` at once, naming A's pid; no refused opener
    changes any file (names, sizes, mtimes and SHA-256 of every file); a refused opener that had already
    locked a free dir releases it. A read-only open works meanwhile and changes nothing. After A is
    SIGKILLed the lock is free: the next writer opens, runs recovery (it cuts a torn tail) and reads
    every record A wrote.
(b) A read-only opener in another process, reopening again and again while a writer process appends,
    rolls and flushes, always reads a contiguous prefix whose every record equals what the writer wrote
    (deterministic payloads, CRC-checked by the engine), never raises, and sees the log end only grow.
(e) Inside one process, with ``sys.setswitchinterval(1e-5)``: a writer thread appending (tiny
    ``segment.bytes``, so rolls are frequent), a flusher thread, and reader threads using ``Log.read``
    from random offsets, a tailing ``Log.read`` and ``Log.iter_records``: readers see strictly
    increasing, contiguous offsets, correct payloads, every offset below a log end they observed, no
    exception; at the end the whole log reads back. A variant adds a thread calling ``delete_records``
    (segments deleted under the readers): reads below the new log start raise only
    ``OffsetOutOfRangeError``. The threads run in a forked child, so a SIGBUS shows as an exit status.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback

import pytest

from crash_helpers import ChildOutcome, collect_child, file_snapshot, fork_call, fork_child
from logstore import LockedError, LogManager, OffsetOutOfRangeError, Record

T0 = 1_700_000_000_000

# The payload function, shared verbatim with the subprocesses.
PAYLOAD_SOURCE = '''
import hashlib
T0 = 1_700_000_000_000
def payload(i):
    return (b"%d|" % i + hashlib.sha256(b"%d" % i).digest() * 5)[: 20 + i % 130]
def make(i):
    return (b"k%d" % (i % 17), payload(i), (("n", b"%d" % i),), T0 + i)
'''
_namespace: dict = {}
exec(PAYLOAD_SOURCE, _namespace)
payload = _namespace["payload"]


def rec(i: int) -> Record:
    return Record(*_namespace["make"](i))


def expected(i: int) -> Record:
    return Record(*_namespace["make"](i), i)


def fork_json(fn, timeout_s: float) -> tuple[str, object]:
    """Run ``fn()`` in a forked child; returns ("ok", value) with its JSON result, ("error", traceback),
    ("died", how) or ("hang", ...). The child never returns into pytest."""
    return _as_pair(fork_call(fn, timeout_s))


def _as_pair(outcome: ChildOutcome) -> tuple[str, object]:
    return outcome.status, outcome.result if outcome.status in ("ok", "error") else outcome.detail


# --- (f) second-process safety ---------------------------------------------------------------------

HOLDER_SCRIPT = PAYLOAD_SOURCE + '''
import sys, time
from logstore import LogManager, Record
dirs = sys.argv[1:]
store = LogManager(dirs)
store.create_topic("t", 2, {"segment.bytes": 4096})
for p in range(2):
    log = store.get_log("t", p)
    log.append([Record(*make(i)) for i in range(100)])
    log.flush()
    log.append([Record(*make(i)) for i in range(100, 150)])  # never flushed
print("ready", flush=True)
time.sleep(120)
'''

OPENER_SCRIPT = '''
import json, sys, time
from logstore import LogManager, LockedError
started = time.monotonic()
try:
    LogManager(sys.argv[1:]).close()
    print(json.dumps({"opened": True}))
except LockedError as exc:
    print(json.dumps({"locked": str(exc), "seconds": time.monotonic() - started}))
'''

RECOVERING_SCRIPT = PAYLOAD_SOURCE + '''
import json, sys
from logstore import LogManager, Record
with LogManager(sys.argv[1:]) as store:
    out = {}
    for p in range(2):
        log = store.get_log("t", p)
        records = []
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            batch = log.read(offset, 1 << 20)
            records += batch
            offset = batch[-1].offset + 1
        out[p] = {"leo": log.log_end_offset, "ok": records == [Record(*make(i), i) for i in range(150)]}
    out["problems"] = list(store.problems)
print(json.dumps(out))
'''


def run_script(script: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_second_writer_refused_until_holder_is_killed(tmp_path):
    root = tmp_path / "store"
    dirs = [str(root / "d0"), str(root / "d1")]
    free_dir = str(tmp_path / "free")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER_SCRIPT, *dirs], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready", holder.stderr.read()
        pid_text = str(holder.pid)
        before = file_snapshot(str(root), include_dirs=True)
        assert ".lock" in {os.path.basename(name) for name in before}
        attempts = refused = 0
        for variant in (dirs, dirs[::-1], dirs[1:], dirs):
            attempts += 1
            result = run_script(OPENER_SCRIPT, *variant)
            assert "locked" in result, result
            assert f"process {pid_text}" in result["locked"], result
            assert result["seconds"] < 5  # "at once": flock with LOCK_NB, never a wait
            refused += 1
        for variant in (dirs, dirs[1:], [free_dir, *dirs]):
            attempts += 1
            started = time.monotonic()
            with pytest.raises(LockedError) as caught:
                LogManager(variant)
            assert time.monotonic() - started < 5
            assert f"process {pid_text}" in str(caught.value)
            assert "locked" in str(caught.value)
            refused += 1
        # The free dir locked by the refused opener was released again.
        with LogManager([free_dir]) as store:
            assert store.topics() == []
        # A read-only open works meanwhile, sees the written prefix, changes nothing.
        with LogManager(dirs, read_only=True) as reader:
            for p in range(2):
                log = reader.get_log("t", p)
                assert log.log_end_offset == 150
                assert list(log.iter_records()) == [expected(i) for i in range(150)]
        after = file_snapshot(str(root), include_dirs=True)
        modified = sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))
        assert modified == []
        assert holder.poll() is None
        # Kill A: the kernel drops its flock; the next writer opens and recovers.
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        active = os.path.join(dirs[0], "t-0", max(n for n in os.listdir(os.path.join(dirs[0], "t-0"))
                                                  if n.endswith(".log")))
        size = os.path.getsize(active)
        with open(active, "ab") as handle:  # a torn batch: only recovery removes it
            handle.write(b"\x00" * 7 + b"\x60" + os.urandom(40))
        result = run_script(RECOVERING_SCRIPT, *dirs)
        assert result["0"] == result["1"] == {"leo": 150, "ok": True}, result
        # Recovery ran: it found and cut the torn tail (and nothing else).
        assert len(result["problems"]) == 1 and "t-0" in result["problems"][0], result
        assert "torn" in result["problems"][0], result
        assert os.path.getsize(active) == size
        released = "yes"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    print(f"\nsecond-open attempts: {attempts}, refused: {refused}, files modified by refused opener: "
          f"{len(modified)}, lock released after SIGKILL: {released}")
    assert attempts == refused == 7


def test_lock_held_within_one_process_until_close(tmp_path):
    dirs = [str(tmp_path / "d0")]
    store = LogManager(dirs)
    with pytest.raises(LockedError, match=f"process {os.getpid()}"):
        LogManager(dirs)
    with pytest.raises(LockedError):  # still refused: the failed attempt did not disturb the lock
        LogManager(dirs)
    store.close()
    with LogManager(dirs):
        pass


# --- (b) a read-only opener in another process while a writer appends -------------------------------

WRITE_SECONDS = 3.0


def _writer(dirs: list[str], seconds: float) -> dict:
    store = LogManager(dirs)
    rng = random.Random(7)
    logs = [store.get_log("t", p) for p in range(2)]
    next_offset = [0, 0]
    appends = flushes = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        p = rng.randrange(2)
        count = rng.randint(1, 40)
        info = logs[p].append([rec(i) for i in range(next_offset[p], next_offset[p] + count)])
        assert info.first_offset == next_offset[p]
        next_offset[p] += count
        appends += 1
        if rng.random() < 0.2:
            logs[p].flush()
            flushes += 1
    segments = [len(log.segments) for log in logs]
    store.close()
    return {"leo": next_offset, "appends": appends, "flushes": flushes, "segments": segments}


def _reader(dirs: list[str], seconds: float) -> dict:
    rng = random.Random(11)
    stats = {"opens": 0, "fetches": 0, "records": 0, "violations": 0, "exceptions": 0, "examples": [],
             "leos": [[], []]}
    last_leo = [0, 0]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with LogManager(dirs, read_only=True) as reader:
                stats["opens"] += 1
                for p in range(2):
                    log = reader.get_log("t", p)
                    leo = log.log_end_offset
                    if leo < last_leo[p] or log.log_start_offset != 0:
                        stats["violations"] += 1
                        stats["examples"].append(f"p{p}: log end {leo} after {last_leo[p]}")
                    last_leo[p] = max(last_leo[p], leo)
                    stats["leos"][p].append(leo)
                    offset = 0 if rng.random() < 0.5 else rng.randrange(0, leo + 1)
                    use_iter = rng.random() < 0.3
                    if use_iter:
                        batches = [list(log.iter_records(offset))]
                    else:
                        batches = []
                        while offset < leo:
                            batch = log.read(offset, rng.choice((1, 500, 5000, 1 << 20)))
                            if not batch:
                                break
                            batches.append(batch)
                            offset = batch[-1].offset + 1
                    expect = None
                    for batch in batches:
                        stats["fetches"] += 1
                        for record in batch:
                            if expect is not None and record.offset != expect:
                                stats["violations"] += 1
                                stats["examples"].append(f"p{p}: offset {record.offset} after {expect - 1}")
                            if record != expected(record.offset) or record.offset >= leo:
                                stats["violations"] += 1
                                stats["examples"].append(f"p{p}: wrong record {record!r:.100}")
                            expect = record.offset + 1
                            stats["records"] += 1
                    if expect is not None and expect != leo:
                        stats["violations"] += 1
                        stats["examples"].append(f"p{p}: read stopped at {expect}, log end {leo}")
        except Exception:  # noqa: BLE001 - counted and reported
            stats["exceptions"] += 1
            stats["examples"].append(traceback.format_exc()[-1500:])
    stats["examples"] = stats["examples"][:5]
    stats["distinct_leos"] = [len(set(leos)) for leos in stats.pop("leos")]
    return stats


def test_read_only_opener_reads_valid_prefix_while_writer_appends(tmp_path):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    with LogManager(dirs) as store:
        store.create_topic("t", 2, {"segment.bytes": 16 * 1024, "segment.index.bytes": 4096,
                                    "index.interval.bytes": 512})
    writer_child = fork_child(lambda: _writer(dirs, WRITE_SECONDS))
    try:
        time.sleep(0.05)
        status, stats = fork_json(lambda: _reader(dirs, WRITE_SECONDS), timeout_s=WRITE_SECONDS + 60)
    finally:
        writer_status, writer = _as_pair(collect_child(writer_child, 60))
    assert writer_status == "ok", writer
    assert status == "ok", stats
    print(f"\nread-only opens: {stats['opens']}; reader fetches: {stats['fetches']}; records verified: "
          f"{stats['records']}; violations: {stats['violations']}; exceptions: {stats['exceptions']}; "
          f"writer appends: {writer['appends']}, flushes: {writer['flushes']}, segments: {writer['segments']}")
    assert stats["exceptions"] == 0 and stats["violations"] == 0, stats["examples"]
    assert stats["opens"] >= 5 and stats["records"] > 1000
    assert min(stats["distinct_leos"]) >= 3  # the reader really raced the writer
    assert min(writer["segments"]) >= 5  # and the writer really rolled
    with LogManager(dirs, read_only=True) as reader:
        for p in range(2):
            log = reader.get_log("t", p)
            assert log.log_end_offset == writer["leo"][p]
            assert list(log.iter_records()) == [expected(i) for i in range(writer["leo"][p])]


# --- (e) threads inside one process ----------------------------------------------------------------

THREAD_SECONDS = 2.5


def _threads_workload(data_dir: str, with_delete: bool) -> dict:
    sys.setswitchinterval(1e-5)
    store = LogManager([data_dir])
    store.create_topic("t", 1, {"segment.bytes": 2048, "segment.index.bytes": 1024, "index.interval.bytes": 256})
    log = store.get_log("t", 0)
    stop = threading.Event()
    lock = threading.Lock()
    stats = {"fetches": 0, "records": 0, "violations": 0, "exceptions": 0, "out_of_range_after_delete": 0,
             "beyond_log_end": 0,
             "appended": 0, "flushes": 0, "deletes": 0, "examples": []}

    def note(kind: str, text: str) -> None:
        with lock:
            stats[kind] += 1
            if len(stats["examples"]) < 6:
                stats["examples"].append(text)

    def add(**counts) -> None:
        with lock:
            for key, value in counts.items():
                stats[key] += value

    def guarded(fn):
        def run() -> None:
            try:
                fn()
            except Exception:  # noqa: BLE001
                note("exceptions", f"{fn.__name__}: {traceback.format_exc()[-1500:]}")
                stop.set()
        return run

    def check(records: list[Record], start: int) -> None:
        expect = start
        for record in records:
            if record.offset != expect:
                note("violations", f"offset {record.offset}, expected {expect}")
            elif record != expected(record.offset):
                note("violations", f"wrong payload at {record.offset}: {record!r:.100}")
            expect = record.offset + 1
        add(fetches=1, records=len(records))

    def committed(records: list[Record]) -> list[Record]:
        """The records below the log end offset read after the fetch. A record at or above it was
        returned before the writer published it (a violation; see
        ``test_read_never_returns_records_at_or_above_the_log_end``)."""
        leo_after = log.log_end_offset
        kept = [record for record in records if record.offset < leo_after]
        if len(kept) != len(records):
            add(beyond_log_end=len(records) - len(kept))
            note("violations", f"{len(records) - len(kept)} records returned at or above the log end {leo_after}")
        return kept

    @guarded
    def writer() -> None:
        rng = random.Random(1)
        offset = 0
        deadline = time.monotonic() + THREAD_SECONDS
        while time.monotonic() < deadline and not stop.is_set():
            count = rng.randint(1, 12)
            info = log.append([rec(i) for i in range(offset, offset + count)])
            if info.first_offset != offset:
                note("violations", f"append got {info.first_offset}, expected {offset}")
            offset += count
        add(appended=offset)
        stop.set()

    @guarded
    def flusher() -> None:
        while not stop.is_set():
            log.flush()
            add(flushes=1)
            time.sleep(0.002)

    @guarded
    def deleter() -> None:
        while not stop.is_set():
            leo = log.log_end_offset
            if leo > 200:
                log.delete_records(leo - 150)
                add(deletes=1)
            time.sleep(0.003)

    def read_checked(offset: int, max_bytes: int) -> list[Record] | None:
        leo_before = log.log_end_offset
        try:
            records = log.read(offset, max_bytes)
        except OffsetOutOfRangeError:
            if with_delete and offset < log.log_start_offset:
                add(out_of_range_after_delete=1)
                return None
            raise
        records = committed(records)
        if offset < leo_before and not records:
            note("violations", f"read({offset}) empty below the observed log end {leo_before}")
        check(records, offset)
        return records

    @guarded
    def random_reader() -> None:
        rng = random.Random(threading.get_ident())
        while not stop.is_set():
            low, high = log.log_start_offset, log.log_end_offset
            read_checked(rng.randint(low, high), rng.choice((1, 300, 4000, 1 << 20)))

    @guarded
    def tail_reader() -> None:
        offset = 0
        while not stop.is_set() or offset < log.log_end_offset:
            if offset < log.log_start_offset:
                offset = log.log_start_offset
            records = read_checked(offset, 1500)
            if records is None:
                continue
            if records:
                offset = records[-1].offset + 1
        if offset != log.log_end_offset:
            note("violations", f"tail reader ended at {offset}, log end {log.log_end_offset}")

    @guarded
    def iter_reader() -> None:
        while not stop.is_set():
            start = log.log_start_offset
            leo_before = log.log_end_offset
            try:
                records = list(log.iter_records(start))
            except OffsetOutOfRangeError:
                if with_delete and start < log.log_start_offset:
                    add(out_of_range_after_delete=1)
                    continue
                raise
            if not with_delete and len(records) < leo_before - start:
                note("violations", f"iter_records({start}) gave {len(records)} below log end {leo_before}")
            if records and records[-1].offset >= log.log_end_offset:
                note("violations", f"iter_records returned offset {records[-1].offset} >= the log end")
            check(records, records[0].offset if records and with_delete else start)

    threads = [threading.Thread(target=fn) for fn in
               (writer, flusher, random_reader, random_reader, tail_reader, iter_reader)
               + ((deleter,) if with_delete else ())]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        if thread.is_alive():
            note("exceptions", f"thread {thread.name} still running after 60 s (watchdog)")
    # Everything reads back, and again after a reopen.
    start = log.log_start_offset
    assert stats["exceptions"] or log.log_end_offset == stats["appended"]
    final = list(log.iter_records())
    if final != [expected(i) for i in range(start, log.log_end_offset)]:
        note("violations", "final read-back differs")
    stats["segments"] = len(log.segments)
    store.close()
    with LogManager([data_dir]) as store:
        reopened = store.get_log("t", 0)
        if list(reopened.iter_records()) != final or reopened.log_start_offset != start:
            note("violations", "read-back after reopen differs")
    return stats


@pytest.mark.parametrize("with_delete", [False, True], ids=["append", "append+delete_records"])
def test_threads_read_while_one_appends(tmp_path, with_delete):
    status, stats = fork_json(lambda: _threads_workload(str(tmp_path / "d0"), with_delete),
                              timeout_s=THREAD_SECONDS + 90)
    assert status == "ok", stats
    print(f"\n[{'append+delete_records' if with_delete else 'append'}] reader fetches: {stats['fetches']}; "
          f"records verified: {stats['records']}; violations: {stats['violations']}; "
          f"exceptions: {stats['exceptions']}; appended: {stats['appended']}; flushes: {stats['flushes']}; "
          f"deletes: {stats['deletes']}; segments at end: {stats['segments']}; records returned before "
          f"the log end covered them: {stats['beyond_log_end']}")
    assert stats["exceptions"] == 0 and stats["violations"] == 0, stats["examples"]
    assert stats["fetches"] > 200 and stats["records"] > 2000 and stats["appended"] > 300
    assert stats["flushes"] >= 1  # a flush ran concurrently with the appends and reads
    if with_delete:
        assert stats["deletes"] >= 3
    else:
        assert stats["segments"] > 10


def test_read_never_returns_records_at_or_above_the_log_end(tmp_path):
    """Deterministic form of the race: a batch is in the active segment (as after LogSegment.append)
    but the log end offset has not moved yet (Log.append has not reached that line)."""
    from logstore.records.encoder import assign_base_offset, encode_batch

    with LogManager([str(tmp_path / "d0")]) as store:
        store.create_topic("t", 1)
        log = store.get_log("t", 0)
        log.append([rec(i) for i in range(5)])
        batch = encode_batch([rec(5)], default_timestamp_ms=T0)
        assign_base_offset(batch, 5)
        log.active_segment.append(5, 5, T0 + 5, bytes(batch))  # the writer is between these two lines
        assert log.log_end_offset == 5
        assert [r.offset for r in log.read(3, 1 << 20)] == [3, 4]
