"""Rows 7-9 of the paths table (``paths``), each measured in fresh interpreters (``child``) so
that one run's heap, threads and page of imports do not carry into the next.

7. Durable single-record appends against an fsync per append and SQLite ``synchronous=FULL``: 8
   producer threads through ``Log.append_future`` (each keeping 16 in flight), and the blocking
   ``acks="all"`` from 8 and 64 threads; ``durable.bench_durable`` as ``logstore perf durable`` runs
   it (its modes interleaved per repeat, each run in its own process); the best run of each mode.
8. Compaction of ``compact_records`` records over ``compact_keys`` keys with a dedupe buffer for a
   quarter of the keys (many passes) against the default buffer (one pass), on copies of one log
   built by ``compact.build_log``, timed by ``compact.run_logstore`` in a child, checked by
   ``compact.verify_log``; the runs alternate (single pass, multi-pass, single pass, ...).
9. Opening after kill -9: ``recovery.bench_recovery``: a child writes
   ``recovery_base_bytes`` (1 KB values, 64 MiB segments), flushes and checkpoints, appends
   ``recovery_tail_bytes`` more without a flush and SIGKILLs itself (the page cache keeps the tail,
   so recovery must re-verify it all and keep every record); each round recovers its own copy of the
   crashed store and times a clean open of the same data plus a verified batch scan (every batch's
   CRC) from the recovery point to the end, the work recovery cannot avoid.
"""

from __future__ import annotations

import os
import shutil
import sys

from . import compact as perf_compact
from . import durable as perf_durable
from . import recovery as perf_recovery
from .child import child_main, run_child
from .core import BenchmarkError
from .paths_report import Goal, Measurement, PathSizes, Say, measurement_line

DURABLE_GOALS = (3.0, 5.0)  # the blocking group commit: the lower thread count, the higher one
FUTURES_GOAL = 5.0  # append_future producers at the lower count
DURABLE_MODES = ("group-commit", "futures", "fsync-per-append", "sqlite")
COMPACT_GOAL = 2.0
RECOVERY_GOAL = 1.5


def _child(workload: str, **kwargs) -> dict:
    return run_child(__name__, workload, kwargs, BenchmarkError, label=f"paths {workload}")


# --- row 7 -----------------------------------------------------------------------------------------


def durable_row(sizes: PathSizes, root: str, say: Say) -> list[Measurement]:
    """Durable appends through the future API (``futures``: 8 producer threads, each keeping
    ``durable.DEFAULT_IN_FLIGHT`` ``append_future`` calls in flight) at the lower producer count, then
    the blocking group commit at each thread count, each against fsync per append and SQLite FULL."""
    result = perf_durable.bench_durable(tuple(sizes.durable_threads), seconds=sizes.durable_seconds,
                                        repeats=sizes.repeats, count=None, work_dir=root, say=say,
                                        modes=DURABLE_MODES, futures_at_lowest_only=True)
    by_mode = {(row["mode"], row["threads"]): row for row in result["rows"]}
    out = []
    low = min(sizes.durable_threads)
    rows = [("futures", low, FUTURES_GOAL, f"{low} producers × {perf_durable.DEFAULT_IN_FLIGHT} append_future in flight")]
    rows += [("group-commit", threads, bound, f"{threads} threads, acks=all")
             for threads, bound in zip(sorted(sizes.durable_threads), DURABLE_GOALS)]
    for mode, threads, bound, label in rows:
        ours = by_mode[(mode, threads)]
        runs = list(ours["runs"])  # one list for both comparisons: the table shows it once
        for other_mode, name in (("fsync-per-append", "fsync per append"), ("sqlite", "SQLite synchronous=FULL")):
            other = by_mode.get((other_mode, threads))
            m = Measurement(7, f"{label} vs {name}", "appends/s", Goal("faster", bound),
                            runs, name if other else "", list(other["runs"]) if other else None)
            if other_mode == "fsync-per-append":
                m.notes.append(f"row 7, {mode}, {threads} {'producers' if mode == 'futures' else 'threads'}: "
                               f"p99 {ours['p99_ms']:.2f} ms, {ours['records_per_flush'] or 0:.1f} appends per "
                               f"fsync, {ours['cpu_us_per_append']:.1f} µs CPU per append (best run)")
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
    """Unclean open after SIGKILL against a clean open plus a verified scan of the same tail:
    ``recovery.bench_recovery`` (one crashed store, a copy of it recovered per round, each round in a
    fresh interpreter after a warm-up, unclean and clean opens alternating which goes first)."""
    tail_mb = sizes.recovery_tail_bytes / 1e6
    m = Measurement(9, f"open after kill -9, {tail_mb:g} MB past the recovery point", "s",
                    Goal("time", RECOVERY_GOAL), [], f"clean open + {tail_mb:g} MB scan", [])
    batch_records = max(1, min(1000, sizes.recovery_tail_bytes // (perf_recovery.VALUE_BYTES + 100)))
    result = perf_recovery.bench_recovery(size_mb=sizes.recovery_base_bytes / 1e6, tail_mb=tail_mb,
                                          repeats=sizes.repeats, work_dir=root, say=say,
                                          batch_records=batch_records)
    for done in result["rounds"]:
        m.logstore.append(done["unclean"]["open_s"])
        m.baseline.append(done["clean"]["open_s"] + done["scan_s"])
    parts = ", ".join(f"{done['clean']['open_s']:.3f} + {done['scan_s']:.3f} s" for done in result["rounds"])
    m.notes.append(f"row 9: clean open + tail scan per round: {parts}")
    crash = result["crash"]
    m.notes.append(f"row 9: {crash['store_bytes']:,} bytes in 64 MiB segments, {result['scan_bytes']:,} scanned "
                   f"past the recovery point; each round in a new process, on its own copy of the crashed store")
    say(measurement_line(m))
    return [m]


if __name__ == "__main__":
    child_main(sys.argv[1:], {"compact": compact_child})
