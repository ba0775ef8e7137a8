"""Rows 7-9 of the issue-15 table (``paths``), each measured in fresh interpreters (``child``) so
that one run's heap, threads and page of imports do not carry into the next.

7. Durable single-record appends (``acks="all"``) from 8 and 64 threads against an fsync per append
   and SQLite ``synchronous=FULL``: ``durable.bench_durable`` as ``logstore perf durable`` runs it
   (its modes interleaved per repeat, each run in its own process); the best run of each mode.
8. Compaction of ``compact_records`` records over ``compact_keys`` keys with a dedupe buffer for a
   quarter of the keys (many passes) against the default buffer (one pass), on copies of one log
   built by ``compact.build_log``, timed by ``compact.run_logstore`` in a child, checked by
   ``compact.verify_log``; the runs alternate (single pass, multi-pass, single pass, ...).
9. Opening after kill -9: a child writes ``recovery_base_bytes`` (1 KB values, 64 MiB segments),
   flushes and checkpoints, appends ``recovery_tail_bytes`` more without a flush and SIGKILLs
   itself (the page cache keeps the tail, so recovery must re-verify it all and keep every record);
   another child times the unclean open; a third times a clean open of the same store plus a
   verified batch scan (``Log.iter_batch_slices``: every batch's CRC) from the recovery point to the
   end, the work recovery cannot avoid. A fresh store per run, so every run recovers the same bytes.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys

from ..clock import Stopwatch
from ..manager.log_manager import LogManager
from ..records.decoder import Record
from . import compact as perf_compact
from . import durable as perf_durable
from .child import child_main, run_child
from .core import BenchmarkError
from .paths import PathSizes, Say
from .paths_report import Goal, Measurement, measurement_line

RECOVERY_TOPIC = "recovery"
RECOVERY_SEGMENT_BYTES = 64 << 20  # as `logstore perf open-recovery`, where the figure comes from
RECOVERY_VALUE_BYTES = 1000
DURABLE_GOALS = (3.0, 5.0)  # the lower thread count, the higher one
COMPACT_GOAL = 2.0
RECOVERY_GOAL = 1.5


def _child(workload: str, **kwargs) -> dict:
    expected = (0, -signal.SIGKILL) if workload == "crash" else (0,)
    return run_child(__name__, workload, kwargs, BenchmarkError, label=f"paths {workload}", returncodes=expected)


# --- row 7 -----------------------------------------------------------------------------------------


def durable_row(sizes: PathSizes, root: str, say: Say) -> list[Measurement]:
    """Group commit against fsync per append and SQLite FULL at each thread count."""
    result = perf_durable.bench_durable(tuple(sizes.durable_threads), seconds=sizes.durable_seconds,
                                        repeats=sizes.repeats, count=None, work_dir=root, say=say)
    by_mode = {(row["mode"], row["threads"]): row for row in result["rows"]}
    out = []
    for threads, bound in zip(sorted(sizes.durable_threads), DURABLE_GOALS):
        ours = by_mode[("group-commit", threads)]
        runs = list(ours["runs"])  # one list for both comparisons: the table shows it once
        for mode, name in (("fsync-per-append", "fsync per append"), ("sqlite", "SQLite synchronous=FULL")):
            other = by_mode.get((mode, threads))
            m = Measurement(7, f"{threads} threads, acks=all vs {name}", "appends/s", Goal("faster", bound),
                            runs, name if other else "", list(other["runs"]) if other else None)
            if mode == "fsync-per-append":
                m.notes.append(f"row 7, {threads} threads: group commit p99 {ours['p99_ms']:.2f} ms, "
                               f"{ours['records_per_flush'] or 0:.1f} appends per fsync (best run)")
            say(measurement_line(m))
            out.append(m)
    return out


# --- row 8 -----------------------------------------------------------------------------------------


def compaction_row(sizes: PathSizes, root: str, say: Say) -> list[Measurement]:
    """A dedupe buffer for a quarter of the keys against the default buffer, alternating."""
    workload = perf_compact.CompactWorkload(sizes.compact_records, sizes.compact_keys, seed=sizes.seed)
    base = os.path.join(root, "compact-base")
    say(f"writing {workload.records:,} records over {workload.keys:,} keys to a compacted topic (untimed)")
    perf_compact.build_log(base, workload)
    latest = workload.latest()
    small = workload.small_buffer_bytes()
    m = Measurement(8, f"compact {workload.records:,} records, {workload.keys:,} keys: buffer for ¼ of the keys "
                       "vs the default", "s", Goal("time", COMPACT_GOAL), [], "single pass (default buffer)", [])
    passes = set()
    for run in range(sizes.repeats):
        for buffer, runs in ((small, m.logstore), (perf_compact.DEFAULT_DEDUPE_BUFFER_BYTES, m.baseline)):
            path = os.path.join(root, f"compact-{run}-{buffer}")
            shutil.copytree(base, path)  # the same uncleaned log every time
            say(f"compaction run {run + 1} of {sizes.repeats}, dedupe buffer {buffer:,} bytes")
            timed = _child("compact", path=path, dedupe_buffer_bytes=buffer)
            perf_compact.verify_log(path, workload, latest)  # one record per key, each the latest
            shutil.rmtree(path, ignore_errors=True)
            runs.append(timed["elapsed_s"])
            if buffer == small:
                passes.add(timed["stats"].get("passes"))
    m.notes.append(f"row 8: dedupe buffer {small:,} bytes (room for about ¼ of {workload.keys:,} keys): "
                   f"{', '.join(str(p) for p in sorted(passes, key=str))} pass(es); the default buffer takes one")
    say(measurement_line(m))
    return [m]


def compact_child(path: str, dedupe_buffer_bytes: int) -> dict:
    """Child: ``compact.run_logstore`` (its ``stats`` as plain data)."""
    return perf_compact.run_logstore(path, dedupe_buffer_bytes)


# --- row 9 -----------------------------------------------------------------------------------------


def recovery_row(sizes: PathSizes, root: str, say: Say) -> list[Measurement]:
    """Unclean open after SIGKILL against a clean open plus a verified scan of the same tail."""
    tail_mb = sizes.recovery_tail_bytes / 1e6
    m = Measurement(9, f"open after kill -9, {tail_mb:g} MB past the recovery point", "s",
                    Goal("time", RECOVERY_GOAL), [], f"clean open + {tail_mb:g} MB scan", [])
    facts, parts = {}, []
    for run in range(sizes.repeats):
        path = os.path.join(root, f"recovery-{run}")
        say(f"recovery run {run + 1} of {sizes.repeats}: writing {sizes.recovery_base_bytes / 1e6:g} MB + "
            f"{tail_mb:g} MB unflushed, then SIGKILL")
        facts = _child("crash", path=path, base_bytes=sizes.recovery_base_bytes, tail_bytes=sizes.recovery_tail_bytes,
                       seed=sizes.seed)
        unclean = _child("open_store", path=path)
        if unclean["clean"] or unclean["end_offset"] != facts["end_offset"]:
            raise BenchmarkError(f"the open after SIGKILL was not an unclean open of every record: {unclean} {facts}")
        clean = _child("open_and_scan", path=path, start_offset=facts["recovery_point"])
        if not clean["clean"] or clean["scanned_records"] != facts["end_offset"] - facts["recovery_point"]:
            raise BenchmarkError(f"the clean open and scan did not see the tail: {clean} {facts}")
        shutil.rmtree(path, ignore_errors=True)
        m.logstore.append(unclean["open_s"])
        m.baseline.append(clean["open_s"] + clean["scan_s"])
        parts.append(f"{clean['open_s']:.3f} + {clean['scan_s']:.3f} s")
    m.notes.append(f"row 9: clean open + tail scan per run: {', '.join(parts)}")
    m.notes.append(f"row 9: {facts['store_bytes']:,} bytes in {facts['segments']} segment(s) of 64 MiB, "
                   f"{facts['store_bytes'] - facts['durable_bytes']:,} past the recovery point; each open in a new "
                   "process")
    say(measurement_line(m))
    return [m]


def crash(path: str, base_bytes: int, tail_bytes: int, seed: int = 42) -> None:
    """Child: write ``base_bytes``, flush and checkpoint, append ``tail_bytes`` more unflushed, print
    the facts as JSON, then SIGKILL this process (no flush, no clean-shutdown marker)."""
    store = LogManager([path])
    store.create_topic(RECOVERY_TOPIC, 1, {"segment.bytes": RECOVERY_SEGMENT_BYTES})
    log = store.get_log(RECOVERY_TOPIC, 0)
    value = random.Random(seed).randbytes(RECOVERY_VALUE_BYTES)
    per_batch = max(1, min(1000, base_bytes // (RECOVERY_VALUE_BYTES + 100)))  # small stores: small batches
    batch = [Record(b"%016d" % i, value) for i in range(per_batch)]  # reused: offsets come from the log
    while log.size_bytes < base_bytes:
        log.append(batch)
    store.flush()
    store.checkpoint()
    recovery_point, durable_bytes = log.log_end_offset, log.size_bytes
    tail = batch[: max(1, min(1000, tail_bytes // (RECOVERY_VALUE_BYTES + 100)))]
    while log.size_bytes < durable_bytes + tail_bytes:
        log.append(tail)
    facts = {"recovery_point": recovery_point, "end_offset": log.log_end_offset, "durable_bytes": durable_bytes,
             "store_bytes": log.size_bytes, "segments": len(log.segments)}
    print(json.dumps(facts), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def open_store(path: str) -> dict:
    """Child: time ``LogManager([path])``; whether it was a clean open, and the end offset."""
    watch = Stopwatch()
    store = LogManager([path])
    open_s = watch.elapsed_s
    try:
        return {"open_s": open_s, "clean": all(status.clean_shutdown for status in store.status()),
                "end_offset": store.get_log(RECOVERY_TOPIC, 0).log_end_offset, "problems": store.problems}
    finally:
        store.close()


def open_and_scan(path: str, start_offset: int) -> dict:
    """Child: time a clean ``LogManager([path])``, then a verified batch scan from ``start_offset``."""
    opened = open_store(path)
    with LogManager([path]) as store:
        log = store.get_log(RECOVERY_TOPIC, 0)
        watch = Stopwatch()
        scanned_bytes = scanned_records = 0
        for batch, first, stop in log.iter_batch_slices(start_offset):
            scanned_bytes += batch.size_bytes
            scanned_records += stop - first
        scan_s = watch.elapsed_s
    return {**opened, "scan_s": scan_s, "scanned_bytes": scanned_bytes, "scanned_records": scanned_records}


if __name__ == "__main__":
    child_main(sys.argv[1:], {"compact": compact_child, "crash": crash, "open_store": open_store,
                              "open_and_scan": open_and_scan})
