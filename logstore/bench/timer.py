"""``logstore perf timer``: the timing wheel against heap-based timers, on a manual clock.

This module owns the timer benchmark: four workloads run side by side in one run on the same seeded
inputs, the timing wheel's goals, and the text table.

Contenders (the same task-in, cancel, advance interface; expired tasks run on the calling thread):
- ``wheel``: logstore's ``SystemTimer`` (tick 1 ms, 20 buckets per level, ``executor_thread=False``).
- ``heapq``: a heap of ``(deadline, seq, task)`` with lazy deletion: cancel sets a flag, expiry pops
  and skips cancelled entries. Every cancelled entry stays in the heap until its deadline.
- ``heapq+compact``: the same, rebuilt asyncio-style when over half of >100 entries are cancelled.
- ``sched``: the stdlib ``sched.scheduler``; cancel is ``list.remove`` + ``heapify``, O(n).
- ``null``: adds and cancels nothing, to subtract the driver's own cost from the CPU per operation.

Workloads:
- purgatory: ``ops`` operations arrive at ``ops_per_ms``, each with a ``timeout_ms`` deadline; 99% are
  cancelled within 10 ms of timer time, the rest expire. Each contender runs in a child process, so
  its peak memory (``ru_maxrss`` growth) is its own. Reported: net CPU per operation, peak retained
  entries, peak memory growth, tasks expired (must be equal across contenders).
- cancel: the cost of one cancel with ``pending`` tasks waiting.
- scaling: add + cancel pairs with 10k, 100k and 1M tasks pending.
- expiry: ``tasks`` tasks spread over ``spread_ms``; each records how early or late it ran. Then the
  wheel again with its executor thread, reporting the real-time queueing delay.
"""

from __future__ import annotations

import gc
import itertools
import random
import resource
import sys
from dataclasses import asdict, dataclass, field

from ..clock import ManualClock, Stopwatch
from ..timer.system_timer import SystemTimer
from ..timer.timing_wheel import TimerTask
from .child import child_main, run_child
from .report import text_table
from .timer_baselines import Sink, make_contender

GOAL_CANCEL_VS_SCHED = 100.0
GOAL_RETAINED_FRACTION = 0.1
GOAL_SCALING = 1.5


class TimerBenchmarkError(Exception):
    """A benchmark could not run (a child process failed, or contenders disagreed)."""


# --- workloads ---------------------------------------------------------------------------------------


def run_purgatory(name: str, ops: int, timeout_ms: int = 30_000, cancel_fraction: float = 0.99,
                  cancel_within_ms: int = 10, ops_per_ms: int = 100, seed: int = 42) -> dict:
    """The purgatory-like workload for one contender, in this process (see the module docstring)."""
    if cancel_within_ms > 14:
        raise ValueError(f"cancel_within_ms must be <= 14 (a 16-slot ring), got {cancel_within_ms!r}")
    clock = ManualClock(0)
    contender = make_contender(name, clock)
    sink = Sink(clock)
    make, add, cancel = contender.task_class, contender.add, contender.cancel
    advance, retained = contender.advance, contender.retained
    rand = random.Random(seed).random
    ring: list[list] = [[] for _ in range(16)]  # tasks to cancel, by timer ms modulo 16
    arrival_ms = -(-ops // ops_per_ms)
    peak = issued = 0
    gc.collect()
    rss_start_mb = peak_rss_mb = _rss_mb()
    cpu_start = Stopwatch.cpu_s()
    for now_ms in range(1, arrival_ms + timeout_ms + 2):
        clock.advance(1)
        if issued < ops:
            count = min(ops_per_ms, ops - issued)
            issued += count
            for _ in range(count):
                task = make(timeout_ms, sink)
                add(task)
                if rand() < cancel_fraction:
                    ring[(now_ms + int(rand() * (cancel_within_ms + 1))) & 15].append(task)
        due = ring[now_ms & 15]
        if due:
            ring[now_ms & 15] = []
            for task in due:
                cancel(task)
            del due, task
        advance()
        size = retained()
        if size > peak:
            peak = size
        if not now_ms % 500:  # a /proc read every 500 ms of timer time: about 80 per run
            peak_rss_mb = max(peak_rss_mb, _rss_mb())
    cpu_s = Stopwatch.cpu_s() - cpu_start
    return {"timer": name, "ops": ops, "cpu_s": cpu_s, "peak_retained": peak, "expired": sink.runs,
            "rss_growth_mb": peak_rss_mb - rss_start_mb}


def _rss_mb() -> float:
    """This process's resident set now, in MiB (Linux /proc; else the peak so far from getrusage)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize() / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _fill(contender, clock: ManualClock, pending: int, rng: random.Random, sink: Sink) -> list:
    tasks = [contender.task_class(1_000 + int(rng.random() * 29_000), sink) for _ in range(pending)]
    for task in tasks:
        contender.add(task)
    gc.collect()  # the full collection the fill provoked is not part of what is timed next
    return tasks


def run_cancel(name: str, pending: int, cancels: int, seed: int = 42) -> dict:
    """Time ``cancels`` cancels of random tasks among ``pending`` waiting ones."""
    clock = ManualClock(0)
    contender = make_contender(name, clock)
    rng = random.Random(seed)
    tasks = _fill(contender, clock, pending, rng, Sink(clock))
    victims = rng.sample(tasks, min(cancels, pending))
    cancel = contender.cancel
    cpu_start = Stopwatch.cpu_s()
    for task in victims:
        cancel(task)
    cpu_s = Stopwatch.cpu_s() - cpu_start
    return {"timer": name, "pending": pending, "cancels": len(victims), "us_per_cancel": cpu_s / len(victims) * 1e6}


def run_scaling(name: str, pending: int, pairs: int, seed: int = 42, passes: int = 3) -> dict:
    """Time ``pairs`` × (add a task, cancel the one added 1000 pairs earlier) with ``pending`` waiting.

    The timed loop runs ``passes`` times on the same filled timer; the best pass is reported.
    """
    clock = ManualClock(0)
    contender = make_contender(name, clock)
    rng = random.Random(seed)
    sink = Sink(clock)
    kept = _fill(contender, clock, pending, rng, sink)
    add, cancel = contender.add, contender.cancel
    ring: list = [None] * 1024
    best_s = float("inf")
    for _ in range(passes):
        fresh = [contender.task_class(1_000 + int(rng.random() * 29_000), sink) for _ in range(pairs)]
        gc.collect()
        cpu_start = Stopwatch.cpu_s()
        for i, task in enumerate(fresh):
            add(task)
            old = ring[i & 1023]
            if old is not None:
                cancel(old)
            ring[i & 1023] = task
        best_s = min(best_s, Stopwatch.cpu_s() - cpu_start)
        del fresh, task, old
    del kept
    return {"timer": name, "pending": pending, "pairs": pairs, "ns_per_pair": best_s / pairs * 1e9}


def run_expiry(name: str, tasks: int, spread_ms: int, seed: int = 42) -> dict:
    """Add ``tasks`` tasks due over ``spread_ms``, step the clock 1 ms at a time, record lateness."""
    clock = ManualClock(0)
    contender = make_contender(name, clock)
    sink = Sink(clock)
    rng = random.Random(seed)
    make = contender.task_class
    batch = [make(delay, sink, delay) for delay in (1 + int(rng.random() * spread_ms) for _ in range(tasks))]
    cpu_start = Stopwatch.cpu_s()
    for task in batch:
        contender.add(task)
    add_cpu_s = Stopwatch.cpu_s() - cpu_start
    del batch, task
    gc.collect()
    cpu_start = Stopwatch.cpu_s()
    for _ in range(spread_ms + 1):
        clock.advance(1)
        contender.advance()
    cpu_s = Stopwatch.cpu_s() - cpu_start
    return {"timer": name, "tasks": tasks, "ran": sink.runs, "early": sink.early, "late": sink.late,
            "max_late_ms": sink.max_late_ms, "add_us_per_task": add_cpu_s / tasks * 1e6,
            "expire_us_per_task": cpu_s / tasks * 1e6}


def run_executor_queueing(tasks: int, spread_ms: int, seed: int = 42) -> dict:
    """The wheel with its executor thread: real-time delay between a task's bucket being processed
    (the driver's step for its deadline) and the executor starting it."""
    clock = ManualClock(0)
    timer = SystemTimer("perf-exec", clock=clock)
    rng = random.Random(seed)
    started: list[tuple[int, float]] = []
    counter = itertools.count()

    class Stamp(TimerTask):
        __slots__ = ("deadline_ms",)

        def run(self) -> None:
            started.append((self.deadline_ms, Stopwatch.now_s()))
            next(counter)

    for _ in range(tasks):
        task = Stamp(1 + int(rng.random() * spread_ms))
        task.deadline_ms = task.delay_ms
        timer.add(task)
    step_s = [0.0] * (spread_ms + 2)
    for now_ms in range(1, spread_ms + 2):
        clock.advance(1)
        step_s[now_ms] = Stopwatch.now_s()
        timer.advance_clock(0)
    timer.shutdown(timeout_s=600)
    delays_ms = sorted((at - step_s[deadline]) * 1000 for deadline, at in started)
    if not delays_ms:
        return {"tasks": tasks, "ran": 0}
    pick = lambda q: delays_ms[min(len(delays_ms) - 1, int(q * len(delays_ms)))]  # noqa: E731
    return {"tasks": tasks, "ran": len(delays_ms), "p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": delays_ms[-1]}


@dataclass
class TimerBenchmark:
    """Everything one ``logstore perf timer`` run measured, plus the goal verdicts."""

    settings: dict
    purgatory: list[dict] = field(default_factory=list)
    cancel: list[dict] = field(default_factory=list)
    scaling: list[dict] = field(default_factory=list)
    expiry: list[dict] = field(default_factory=list)
    queueing: dict = field(default_factory=dict)
    goals: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def _child(workload: str, **kwargs) -> dict:
    """Run one workload in a fresh interpreter (own memory peak) and return its JSON result."""
    return run_child(__name__, workload, kwargs, TimerBenchmarkError, label=f"{workload} {kwargs.get('name')}")


def bench_timer(*, ops: int = 1_000_000, sched_ops: int = 20_000, timeout_ms: int = 30_000,
                cancel_pending: int = 100_000, scaling_pending=(10_000, 100_000, 1_000_000), pairs: int = 200_000,
                expiry_tasks: int = 1_000_000, spread_ms: int = 10_000, seed: int = 42, repeats: int = 3,
                progress=None) -> TimerBenchmark:
    """Run every workload and judge the goals. ``progress(label)`` is told what starts."""
    say = progress or (lambda _label: None)
    result = TimerBenchmark(settings=dict(ops=ops, sched_ops=sched_ops, timeout_ms=timeout_ms, seed=seed,
                                          cancel_pending=cancel_pending, scaling_pending=list(scaling_pending),
                                          pairs=pairs, expiry_tasks=expiry_tasks, spread_ms=spread_ms,
                                          repeats=repeats, python=sys.version.split()[0]))
    names = ("null", "wheel", "wheel-dict", "heapq", "heapq+compact", "sched")
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for rep in range(repeats):  # interleaved, so a slow spell of the machine hits every contender
        for name in names:
            count = sched_ops if name == "sched" else ops
            say(f"purgatory: {name} ({count:,} ops), run {rep + 1} of {repeats}")
            runs[name].append(_child("purgatory", name=name, ops=count, timeout_ms=timeout_ms, seed=seed))
    null_cpu = {ops: min(run["cpu_s"] for run in runs["null"])}
    if sched_ops != ops:
        null_cpu[sched_ops] = min(_child("purgatory", name="null", ops=sched_ops, timeout_ms=timeout_ms,
                                         seed=seed)["cpu_s"] for _ in range(repeats))
    for name in names[1:]:
        row = dict(min(runs[name], key=lambda run: run["cpu_s"]))
        row["cpu_s_runs"] = [run["cpu_s"] for run in runs[name]]
        row["rss_growth_mb"] = max(run["rss_growth_mb"] for run in runs[name])
        row["net_us_per_op"] = max(0.0, row["cpu_s"] - null_cpu[row["ops"]]) / row["ops"] * 1e6
        result.purgatory.append(row)
    expired = {row["expired"] for row in result.purgatory if row["ops"] == ops}
    if len(expired) != 1:
        raise TimerBenchmarkError(f"contenders disagree on how many tasks expired: {result.purgatory}")
    gc.collect()
    for name in ("wheel", "heapq", "sched"):
        say(f"cancel: {name} ({cancel_pending:,} pending)")
        result.cancel.append(run_cancel(name, cancel_pending, 200 if name == "sched" else 20_000, seed))
        gc.collect()
    for name in ("wheel", "heapq"):
        for pending in scaling_pending:
            say(f"scaling: {name} ({pending:,} pending)")
            result.scaling.append(run_scaling(name, pending, pairs, seed))
            gc.collect()
    for name in ("wheel", "heapq", "sched"):
        say(f"expiry: {name} ({expiry_tasks:,} tasks over {spread_ms:,} ms)")
        result.expiry.append(run_expiry(name, expiry_tasks, spread_ms, seed))
        gc.collect()
    say("expiry: wheel with its executor thread")
    result.queueing = run_executor_queueing(expiry_tasks, spread_ms, seed)
    result.goals = judge(result)
    return result


def judge(result: TimerBenchmark) -> list[dict]:
    """The goals, each with the measured value and a verdict."""
    by = {row["timer"]: row for row in result.purgatory}
    goals = []

    def goal(name: str, measured: str, target: str, passed: bool) -> None:
        goals.append({"goal": name, "measured": measured, "target": target, "passed": passed})

    wheel, heap = by["wheel"], by["heapq"]
    goal("CPU per purgatory op, wheel vs heapq", f"{wheel['net_us_per_op']:.2f} vs {heap['net_us_per_op']:.2f} µs",
         "wheel ≤ heapq", wheel["net_us_per_op"] <= heap["net_us_per_op"])
    fraction = wheel["peak_retained"] / max(1, heap["peak_retained"])
    goal("peak retained entries, wheel ÷ heapq", f"{fraction:.4f}", f"≤ {GOAL_RETAINED_FRACTION:g}",
         fraction <= GOAL_RETAINED_FRACTION)
    cancels = {row["timer"]: row for row in result.cancel}
    speedup = cancels["sched"]["us_per_cancel"] / max(cancels["wheel"]["us_per_cancel"], 1e-9)
    goal(f"cancel with {cancels['wheel']['pending']:,} pending, sched ÷ wheel", f"{speedup:,.0f}×",
         f"≥ {GOAL_CANCEL_VS_SCHED:g}×", speedup >= GOAL_CANCEL_VS_SCHED)
    scaling = sorted((row for row in result.scaling if row["timer"] == "wheel"), key=lambda row: row["pending"])
    growth = scaling[-1]["ns_per_pair"] / scaling[0]["ns_per_pair"]
    goal(f"add+cancel at {scaling[-1]['pending']:,} ÷ at {scaling[0]['pending']:,} pending (wheel)",
         f"{growth:.2f}×", f"≤ {GOAL_SCALING:g}×", growth <= GOAL_SCALING)
    expiry = next(row for row in result.expiry if row["timer"] == "wheel")
    goal("expiry: early / later than one tick (wheel)", f"{expiry['early']} / {expiry['late']}", "0 / 0",
         expiry["early"] == 0 and expiry["late"] == 0 and expiry["ran"] == expiry["tasks"])
    return goals


def render_timer_table(result: TimerBenchmark) -> str:
    """The whole run as text: one table per workload, then the goals with PASS/FAIL."""
    settings = result.settings
    out = [f"logstore perf timer (Python {settings['python']}, manual clock, wheel tick 1 ms × 20 buckets per level)",
           "", f"purgatory: operations arrive 100 per ms with a {settings['timeout_ms']:,} ms timeout; 99% are "
           "cancelled within 10 ms, the rest expire"]
    out += text_table(("timer", "ops", "net µs/op", "peak retained", "RSS growth MB", "expired"),
                  [(row["timer"], f"{row['ops']:,}", f"{row['net_us_per_op']:.2f}", f"{row['peak_retained']:,}",
                    f"{row['rss_growth_mb']:.1f}", f"{row['expired']:,}") for row in result.purgatory])
    out += [f"net µs/op: process CPU minus the same driver with a null timer, per operation (add, cancel or expiry);"
            f" best of {settings['repeats']} interleaved runs, each in its own process.",
            "RSS growth: the most the resident set grew over its size at the start (sampled every 500 ms of timer time).",
            "wheel-dict: the same wheel with dict buckets instead of linked lists (the alternative measured).", "",
            f"cancel: one cancel of a random task among {settings['cancel_pending']:,} pending"]
    wheel_cancel = next(row["us_per_cancel"] for row in result.cancel if row["timer"] == "wheel")
    out += text_table(("timer", "cancels timed", "µs/cancel", "÷ wheel"),
                  [(row["timer"], f"{row['cancels']:,}", f"{row['us_per_cancel']:,.2f}",
                    f"{row['us_per_cancel'] / wheel_cancel:,.1f}×") for row in result.cancel])
    pendings = settings["scaling_pending"]
    out += ["", f"scaling: ns per (add one task + cancel one added 1000 pairs earlier), best of 3 passes of "
            f"{settings['pairs']:,} pairs"]
    rows = []
    for name in dict.fromkeys(row["timer"] for row in result.scaling):
        cost = {row["pending"]: row["ns_per_pair"] for row in result.scaling if row["timer"] == name}
        rows.append((name, *(f"{cost[p]:,.0f}" for p in pendings), f"{cost[pendings[-1]] / cost[pendings[0]]:.2f}×"))
    out += text_table(("timer", *(f"{p:,} pending" for p in pendings), f"{pendings[-1]:,} ÷ {pendings[0]:,}"), rows)
    out += ["heapq pays for its cancelled entries later, at expiry (see purgatory); this row has no expiry.", "",
            f"expiry: {settings['expiry_tasks']:,} tasks due uniformly over {settings['spread_ms']:,} ms, clock "
            "stepped 1 ms at a time"]
    out += text_table(("timer", "ran", "early", "late > 1 tick", "max late ms", "add µs/task", "expire µs/task"),
                  [(row["timer"], f"{row['ran']:,}", row["early"], row["late"], row["max_late_ms"],
                    f"{row['add_us_per_task']:.2f}", f"{row['expire_us_per_task']:.2f}") for row in result.expiry])
    queueing = result.queueing
    if queueing.get("ran"):
        out += [f"wheel with its executor thread: {queueing['ran']:,} tasks; real-time delay from the driver's step "
                f"to the task starting: p50 {queueing['p50_ms']:.1f} ms, p99 {queueing['p99_ms']:.1f} ms, max "
                f"{queueing['max_ms']:.1f} ms (the executor's queue, shared GIL)"]
    out += ["", "goals"]
    out += text_table(("goal", "measured", "target", "result"),
                  [(goal["goal"], goal["measured"], goal["target"], "PASS" if goal["passed"] else "FAIL")
                   for goal in result.goals])
    return "\n".join(out)


if __name__ == "__main__":
    child_main(sys.argv[1:], {"purgatory": run_purgatory})
