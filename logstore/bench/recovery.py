"""Recovery after kill -9, one partition: the unclean open against a clean open plus a scan of the
bytes past the recovery point, in the same run (the goal is ≤ 1.5×).

``bench_recovery`` writes ``size_mb`` MB to one partition (64 MiB segments, 1 KB values, batches of
1000 by default), flushes and checkpoints (the recovery point), appends ``tail_mb`` MB more without a
flush and SIGKILLs the writer. The crashed directory is copied once per repeat (an unclean open
changes its files: each timed recovery needs its own copy of the crashed state) and one more copy is
recovered and closed cleanly: the clean store of the same data. Then each repeat runs in a fresh
interpreter: an untimed warm-up (an open of the clean store and a scan), then, in alternating order,
the unclean open of its copy and the clean open of the clean store, then a verified scan (every batch
read and its CRC checked, as ``LogSegment.iter_batches`` does) of the batches past the recovery
point. Best of the repeats for each; the ratio is best unclean ÷ (best clean open + best scan). All
data is in the page cache.

Workloads run in children (``python -m logstore.bench.recovery``), as the other open benchmarks do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
from typing import Callable

from ..clock import Stopwatch
from ..manager.log_manager import LogManager
from ..records.decoder import Record
from .child import child_main, run_child
from .report import text_table

TOPIC = "recovery"
GOAL_RATIO = 1.5  # unclean open ≤ this × (clean open + verified scan of the bytes past the recovery point)
MIB = 1 << 20
SEGMENT_BYTES = 64 * MIB
VALUE_BYTES = 1000
Say = Callable[[str], None]


class RecoveryBenchmarkError(Exception):
    """A child failed, or the store came back wrong: the measurement is not valid."""


def build_and_crash(path: str, size_bytes: int, tail_bytes: int, batch_records: int = 1000) -> None:
    """Write ``size_bytes`` (1 KB values, batches of ``batch_records``), flush and checkpoint, append
    ``tail_bytes`` more without a flush, print the facts as JSON, then SIGKILL this process."""
    store = LogManager([path])
    store.create_topic(TOPIC, 1, {"segment.bytes": SEGMENT_BYTES})
    log = store.get_log(TOPIC, 0)
    value = os.urandom(VALUE_BYTES)
    batch = [Record(b"%016d" % i, value) for i in range(batch_records)]  # reused: offsets come from the log
    while log.size_bytes < size_bytes:
        log.append(batch)
    store.flush()
    store.checkpoint()
    recovery_point, durable_bytes = log.log_end_offset, log.size_bytes
    while log.size_bytes < durable_bytes + tail_bytes:
        log.append(batch)
    holding = max(seg.base_offset for seg in log.segments if seg.base_offset <= recovery_point)
    facts = {"recovery_point": recovery_point, "end_offset": log.log_end_offset, "durable_bytes": durable_bytes,
             "store_bytes": log.size_bytes, "segments": len(log.segments),
             "tail_bytes": log.size_bytes - durable_bytes,
             # where the recovery point lies in its segment (today's recovery rescans these bytes too)
             "recovery_segment_offset_bytes": durable_bytes - sum(
                 seg.size_bytes for seg in log.segments if seg.base_offset < holding)}
    print(json.dumps(facts), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no shutdown: no flush, no clean-shutdown marker


def recover_and_close(path: str) -> dict:
    """Open the crashed store (recovery) and close it cleanly: the clean store of the same data."""
    with LogManager([path]) as store:
        log = store.get_log(TOPIC, 0)
        return {"end_offset": log.log_end_offset, "problems": store.problems}


def _open_s(path: str) -> tuple[float, bool, int, list[str]]:
    began = Stopwatch.now_s()
    store = LogManager([path])
    elapsed = Stopwatch.now_s() - began
    try:
        clean = all(status.clean_shutdown for status in store.status())
        return elapsed, clean, store.get_log(TOPIC, 0).log_end_offset, list(store.problems)
    finally:
        store.close()


def verified_scan(log, start_offset: int) -> tuple[float, int]:
    """Seconds and bytes of a verified scan (each batch read, its CRCs checked) of ``log``'s batches
    from the one holding ``start_offset`` to the end: what recovery cannot avoid doing."""
    began, scanned, segments = Stopwatch.now_s(), 0, log.segments
    for i, seg in enumerate(segments):
        if i + 1 < len(segments) and segments[i + 1].base_offset <= start_offset:
            continue  # wholly below ``start_offset``
        found = seg.translate_offset(start_offset) if seg.base_offset < start_offset else None
        start = 0 if seg.base_offset >= start_offset else (found[0] if found else seg.size_bytes)
        for _position, batch in seg.iter_batches(start, seg.size_bytes):
            scanned += batch.header.size_bytes
    return Stopwatch.now_s() - began, scanned


def scan_from(path: str, start_offset: int) -> tuple[float, int]:
    """``verified_scan`` of the bench topic of the store at ``path``."""
    with LogManager([path]) as store:
        return verified_scan(store.get_log(TOPIC, 0), start_offset)


def time_round(crashed_copy: str, clean_path: str, start_offset: int, unclean_first: bool) -> dict:
    """One repeat in this interpreter: a warm-up (an open of the clean store and a scan), then the
    unclean open of ``crashed_copy`` and a clean open of ``clean_path`` (in the order given), then
    the scan."""
    # Warm-up: first-use costs (imports, caches, the allocator's first large buffers: page faults) are
    # paid by neither side.
    _open_s(clean_path)
    scan_from(clean_path, start_offset)
    result = {}
    for which in (("unclean", "clean") if unclean_first else ("clean", "unclean")):
        seconds, clean, end_offset, problems = _open_s(crashed_copy if which == "unclean" else clean_path)
        result[which] = {"open_s": seconds, "clean": clean, "end_offset": end_offset, "problems": problems}
    result["scan_s"], result["scan_bytes"] = scan_from(clean_path, start_offset)
    return result


def _child(workload: str, **kwargs) -> dict:
    expected = (0, -signal.SIGKILL) if workload == "build_and_crash" else (0,)
    return run_child("logstore.bench.recovery", workload, kwargs, RecoveryBenchmarkError, returncodes=expected)


def bench_recovery(size_mb: float = 100, tail_mb: float = 10, repeats: int = 3, work_dir: str | None = None,
                   say: Say | None = None, batch_records: int = 1000) -> dict:
    """Unclean open after kill -9 with ``tail_mb`` MB past the recovery point (``size_mb`` MB below
    it, batches of ``batch_records`` records of 1 KB) against a clean open of the same store plus a
    verified scan of those bytes, best of ``repeats`` interleaved rounds. Returns ``{"settings", "crash", "rounds", "unclean_open_s",
    "clean_open_s", "scan_s", "scan_bytes", "ratio", "goals"}``; raises ``RecoveryBenchmarkError``."""
    if min(size_mb, tail_mb) <= 0 or min(repeats, batch_records) < 1:
        raise ValueError(f"size_mb {size_mb} and tail_mb {tail_mb} must be > 0, repeats {repeats} and "
                         f"batch_records {batch_records} >= 1")
    say = say or (lambda _: None)
    if work_dir:
        os.makedirs(work_dir, exist_ok=True)
    root = tempfile.mkdtemp(prefix="logstore-perf-recovery-", dir=work_dir)
    try:
        crashed = os.path.join(root, "crashed")
        say(f"recovery: writing {size_mb:,} MB + {tail_mb:,} MB unflushed, then SIGKILL")
        crash = _child("build_and_crash", path=crashed, size_bytes=round(size_mb * 10**6),
                       tail_bytes=round(tail_mb * 10**6),
                       batch_records=batch_records)
        clean_path = os.path.join(root, "clean")
        shutil.copytree(crashed, clean_path)
        recovered = _child("recover_and_close", path=clean_path)
        if recovered["end_offset"] != crash["end_offset"]:
            raise RecoveryBenchmarkError(f"recovery kept {recovered['end_offset']} of {crash['end_offset']} offsets")
        rounds = []
        for repeat in range(repeats):
            copy = os.path.join(root, f"copy-{repeat}")
            shutil.copytree(crashed, copy)
            say(f"recovery: round {repeat + 1} of {repeats}")
            done = _child("time_round", crashed_copy=copy, clean_path=clean_path,
                          start_offset=crash["recovery_point"], unclean_first=repeat % 2 == 0)
            shutil.rmtree(copy, ignore_errors=True)
            if done["unclean"]["clean"] or done["unclean"]["end_offset"] != crash["end_offset"]:
                raise RecoveryBenchmarkError(f"the open after SIGKILL was not an unclean open of every record: {done}")
            if not done["clean"]["clean"]:
                raise RecoveryBenchmarkError(f"the clean store did not open cleanly: {done}")
            rounds.append(done)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    unclean_s = min(r["unclean"]["open_s"] for r in rounds)
    clean_s = min(r["clean"]["open_s"] for r in rounds)
    scan_s = min(r["scan_s"] for r in rounds)
    ratio = unclean_s / (clean_s + scan_s)
    return {"settings": {"size_mb": size_mb, "tail_mb": tail_mb, "repeats": repeats, "batch_records": batch_records,
                         "segment_bytes": SEGMENT_BYTES, "python": sys.version.split()[0]},
            "crash": crash, "rounds": rounds, "unclean_open_s": unclean_s, "clean_open_s": clean_s,
            "scan_s": scan_s, "scan_bytes": rounds[0]["scan_bytes"], "ratio": ratio,
            "goals": [{"goal": f"unclean open after kill -9 ÷ (clean open + verified scan of the {tail_mb} MB "
                               "past the recovery point)", "measured": f"{ratio:.2f}×",
                       "target": f"≤ {GOAL_RATIO:g}×", "passed": ratio <= GOAL_RATIO}]}


def render_recovery(result: dict) -> str:
    """The run as text: the three times, the ratio and the goal."""
    s, crash = result["settings"], result["crash"]
    out = [f"recovery after kill -9 (Python {s['python']}): {crash['store_bytes'] / 1e6:,.0f} MB in one partition, "
           f"{crash['segments']} segments of {s['segment_bytes'] // MIB} MiB, batches of {s['batch_records']:,} records of "
           f"1 KB, {crash['tail_bytes'] / 1e6:,.1f} MB "
           f"past the recovery point ({crash['recovery_segment_offset_bytes'] / 1e6:,.1f} MB into its segment); "
           f"best of {s['repeats']} interleaved rounds"]
    out += text_table(("what", "seconds", "every round"),
                      [("unclean open (recovery)", f"{result['unclean_open_s']:.3f}",
                        ", ".join(f"{r['unclean']['open_s']:.3f}" for r in result["rounds"])),
                       ("clean open", f"{result['clean_open_s']:.3f}",
                        ", ".join(f"{r['clean']['open_s']:.3f}" for r in result["rounds"])),
                       (f"verified scan of {result['scan_bytes']:,} bytes", f"{result['scan_s']:.3f}",
                        ", ".join(f"{r['scan_s']:.3f}" for r in result["rounds"]))])
    out += ["", "goals", *text_table(("goal", "measured", "target", "result"),
                                     [(g["goal"], g["measured"], g["target"], "PASS" if g["passed"] else "FAIL")
                                      for g in result["goals"]])]
    return "\n".join(out)


def _main(size_mb: int = 100, tail_mb: int = 10, repeats: int = 3, batch_records: int = 1000,
          as_json: bool = False) -> dict:
    """``python -m logstore.bench.recovery main '{"size_mb": 100}'``: the run, printed on stderr."""
    result = bench_recovery(size_mb, tail_mb, repeats, say=lambda line: print(line, file=sys.stderr),
                            batch_records=batch_records)
    print(json.dumps(result, indent=2) if as_json else render_recovery(result), file=sys.stderr)
    return {"ratio": result["ratio"]}


if __name__ == "__main__":
    child_main(sys.argv[1:], {"build_and_crash": build_and_crash, "recover_and_close": recover_and_close,
                              "time_round": time_round, "main": _main})
