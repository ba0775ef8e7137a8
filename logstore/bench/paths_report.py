"""The table of ``logstore perf paths`` (and ``perf all``): its rows, their goals, the verdicts
and the text. ``paths`` and ``paths_process`` measure; this module only judges and formats.

A table row is one row of the paths table (``PATH_ROWS``); it holds one or more ``Measurement``s
(both forms of a point read, 8 and 64 threads against two baselines, ...). A measurement keeps every
run of logstore and of its baseline (the runs alternate: logstore run 1, baseline run 1, logstore run
2, ...), reports the best of each, and its verdict comes from the measured figures (``Goal.judge``):

- ``faster``: best logstore rate ÷ best baseline rate ≥ bound;
- ``rate``: best logstore rate ≥ bound (no baseline: an absolute goal);
- ``time``: best logstore time ÷ best baseline time ≤ bound (compaction, recovery).

A row passes when every measurement in it does; without a baseline (``--compare none`` for a SQLite
goal) the verdict is None ("n/a").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

MB = 10**6
Say = Callable[[str], None]
"""Where a run reports its progress (one line at a time)."""

PATH_ROWS = {
    1: ("consumer loop: read(offset, max_bytes=1 MiB) until the end, touching offset and value",
        "≥ 3× SQLite scan (touching offset and value)"),
    2: ("random point reads read(o, max_bytes=1) / read(o, max_records=1) / cold (first read into each batch)",
        "≥ 3× SQLite point SELECT, all three"),
    3: ("varied key/value sizes: iter_records / read loop", "≥ 3× SQLite scan, both"),
    4: ("records with 2 headers each: iter_records / read loop", "≥ 3 M rec/s, both"),
    5: ("single-record appends log.append([r]), then flush", "≥ 3× SQLite autocommit INSERT"),
    6: ("reading one-record batches with iter_records", "≥ 1.5 M rec/s"),
    7: ("durable single-record appends: 8 producers through append_future; acks=all from 8 / 64 threads",
        "futures ≥ 5× fsync-per-append and SQLite FULL; blocking ≥ 3× both (8 threads), ≥ 5× both (64)"),
    8: ("compaction with a dedupe buffer for ¼ of the keys", "≤ 2× a single pass"),
    9: ("open after kill -9 with a tail past the recovery point", "≤ 1.5× clean open + tail scan"),
    10: ("columnar scan: iter_columns, offsets and every value byte touched", "≥ 10 M rec/s and ≥ 5× SQLite scan"),
}
"""The paths table: row number -> (workload, goal)."""


@dataclass(frozen=True)
class PathSizes:
    """How big each row's work is. The defaults are the table's (1M records; 100,000 lookups,
    single appends and one-record batches; 1M records over 100,000 keys to compact; 10 MB past the
    recovery point) and keep ``perf all`` within a few minutes; ``scaled`` shrinks them together."""

    records: int = 1_000_000
    lookups: int = 100_000
    singles: int = 100_000
    durable_threads: tuple[int, ...] = (8, 64)
    durable_seconds: float = 1.0
    compact_records: int = 1_000_000
    compact_keys: int = 100_000
    recovery_base_bytes: int = 100 * MB
    recovery_tail_bytes: int = 10 * MB
    repeats: int = 3
    seed: int = 42

    def __post_init__(self) -> None:
        counts = (self.records, self.lookups, self.singles, self.compact_records, self.compact_keys, self.repeats)
        if min(counts) < 1 or self.recovery_tail_bytes < 1 or self.recovery_base_bytes < 1:
            raise ValueError(f"every size must be >= 1: {self}")
        if not 1 <= len(self.durable_threads) <= 2 or min(self.durable_threads) < 1:
            raise ValueError(f"durable_threads: one or two thread counts >= 1, got {self.durable_threads!r}")
        if self.durable_seconds <= 0:
            raise ValueError(f"durable_seconds must be > 0, got {self.durable_seconds!r}")
        if self.compact_keys > self.compact_records:
            raise ValueError(f"compact_keys ({self.compact_keys:,}) must be <= compact_records "
                             f"({self.compact_records:,}): every key is written")

    @classmethod
    def scaled(cls, records: int, **overrides) -> "PathSizes":
        """The defaults scaled by ``records`` ÷ 1,000,000 (with small floors), then ``overrides``
        (None values are ignored)."""
        f = records / cls.records
        compact = max(100, round(cls.compact_records * f))
        sizes = cls(records=records, lookups=max(10, round(cls.lookups * f)),
                    singles=max(10, round(cls.singles * f)), durable_seconds=max(0.02, cls.durable_seconds * f),
                    compact_records=compact, compact_keys=max(10, compact // 10),
                    recovery_base_bytes=max(100_000, round(cls.recovery_base_bytes * f)),
                    recovery_tail_bytes=max(10_000, round(cls.recovery_tail_bytes * f)))
        return replace(sizes, **{name: value for name, value in overrides.items() if value is not None})


@dataclass(frozen=True)
class Goal:
    """``kind`` is ``faster`` (rate ratio ≥ bound), ``rate`` (absolute rate ≥ bound) or ``time``
    (time ratio ≤ bound)."""

    kind: str
    bound: float

    def __post_init__(self) -> None:
        if self.kind not in ("faster", "rate", "time"):
            raise ValueError(f"unknown goal kind {self.kind!r}")

    def text(self, unit: str) -> str:
        if self.kind == "rate":
            return f"≥ {_amount(self.bound, unit)}"
        return f"{'≤' if self.kind == 'time' else '≥'} {self.bound:g}×"

    def judge(self, value: float | None, ratio: float | None) -> bool | None:
        """The verdict for the best logstore ``value`` and the ``ratio`` (None: not judged)."""
        if self.kind == "rate":
            return None if value is None else value >= self.bound
        if ratio is None:
            return None
        return ratio <= self.bound if self.kind == "time" else ratio >= self.bound


@dataclass
class Measurement:
    """One figure of a table row: logstore's runs and its baseline's runs (same count, alternated).
    ``unit`` is a rate (``rec/s``, ``appends/s``: higher is better) or ``s`` (lower is better)."""

    row: int
    label: str
    unit: str
    goal: Goal
    logstore: list[float] = field(default_factory=list)
    baseline_name: str = ""
    baseline: list[float] | None = None
    notes: list[str] = field(default_factory=list)

    def _best(self, runs: Sequence[float] | None) -> float | None:
        if not runs:
            return None
        return min(runs) if self.unit == "s" else max(runs)

    best = property(lambda self: self._best(self.logstore))
    best_baseline = property(lambda self: self._best(self.baseline))

    @property
    def ratio(self) -> float | None:
        """Rates: logstore ÷ baseline (> 1: logstore faster). Times: logstore ÷ baseline (> 1: slower)."""
        best, base = self.best, self.best_baseline
        if best is None or base is None or self.goal.kind == "rate":
            return None
        return best / base if base > 0 else None

    @property
    def passed(self) -> bool | None:
        return self.goal.judge(self.best, self.ratio)

    def as_dict(self) -> dict:
        return {"row": self.row, "label": self.label, "unit": self.unit, "goal": self.goal.text(self.unit),
                "goal_kind": self.goal.kind, "goal_bound": self.goal.bound, "logstore_runs": self.logstore,
                "logstore_best": self.best, "baseline": self.baseline_name or None, "baseline_runs": self.baseline,
                "baseline_best": self.best_baseline, "ratio": self.ratio, "passed": self.passed,
                "notes": self.notes}


def row_verdict(measurements: Sequence[Measurement]) -> bool | None:
    """A table row passes when each of its measurements does; None when any could not be judged."""
    verdicts = [m.passed for m in measurements]
    if any(v is False for v in verdicts):
        return False
    return None if not verdicts or any(v is None for v in verdicts) else True


def table_rows(measurements: Sequence[Measurement]) -> list[dict]:
    """The JSON rows: one per table row measured, in the table's order, each with its measurements."""
    rows = []
    for number, (workload, goal) in PATH_ROWS.items():
        mine = [m for m in measurements if m.row == number]
        if mine:
            rows.append({"row": number, "workload": workload, "goal": goal, "passed": row_verdict(mine),
                         "measurements": [m.as_dict() for m in mine]})
    return rows


# --- text ------------------------------------------------------------------------------------------


def _amount(value: float | None, unit: str) -> str:
    """``2_460_000, "rec/s"`` -> ``2.46 M rec/s``; ``0.661, "s"`` -> ``0.661 s``."""
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.3f} s"
    for scale, prefix in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.{2 if scale == 1e6 else 1}f} {prefix} {unit}"
    return f"{value:.0f} {unit}"


def _table(header: tuple, rows: list[tuple]) -> list[str]:
    """A plain-text table, every column left-aligned (the cells are mostly words)."""
    cells = [tuple(str(cell) for cell in row) for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in cells]
    return [lines[0], "-" * max(len(line) for line in lines), *lines[1:]]


def _verdict(passed: bool | None) -> str:
    return "n/a" if passed is None else ("PASS" if passed else "FAIL")


def _ratio(m: Measurement) -> str:
    return "" if m.ratio is None else f"{m.ratio:.2f}×"


def _join_runs(measurements: Sequence[Measurement], baseline: bool) -> str:
    """The best of each distinct list of runs (two measurements may share one: the SQLite runs
    that judge both forms of a point read), joined with " / "."""
    cells, seen = [], set()
    for m in measurements:
        runs = m.baseline if baseline else m.logstore
        if runs and id(runs) not in seen:
            seen.add(id(runs))
            cells.append(_amount(m.best_baseline if baseline else m.best, m.unit))
    return " / ".join(cells) or "-"


def measurement_line(m: Measurement) -> str:
    """One line for progress output: ``row 1 consumer loop: 2.46 M rec/s vs ... 1.26× (≥ 3×) FAIL``."""
    against = f" vs {m.baseline_name} {_amount(m.best_baseline, m.unit)}" if m.baseline_name else ""
    ratio = f": {_ratio(m)}" if m.ratio is not None else ""
    return (f"row {m.row} {m.label}: {_amount(m.best, m.unit)}{against}{ratio} (goal {m.goal.text(m.unit)}) "
            f"{_verdict(m.passed)}")


def render_paths(result: dict) -> str:
    """The run as text: one line per table row (cells of several measurements joined with " / "),
    then one line per measurement with every run, then notes."""
    measurements = result["measurements"]
    s = result["settings"]
    out = [f"the paths users take (best of {s['repeats']} interleaved runs per figure; "
           f"Python {s['python']}, SQLite {s['sqlite']})"]
    table = []
    for row in table_rows(measurements):
        mine = [m for m in measurements if m.row == row["row"]]
        table.append((row["row"], row["workload"], _join_runs(mine, False), _join_runs(mine, True),
                      " / ".join(_ratio(m) for m in mine if m.ratio is not None) or "-", row["goal"],
                      _verdict(row["passed"])))
    out += _table(("#", "workload", "logstore", "baseline", "ratio", "goal", "result"), table)
    out += ["", "measurements (best of the runs; ratio = logstore ÷ baseline, the best of each from this run)"]
    details = []
    for m in measurements:
        runs = ", ".join(_amount(v, m.unit) for v in m.logstore)
        if m.baseline:
            runs += " | " + ", ".join(_amount(v, m.unit) for v in m.baseline)
        details.append((m.row, m.label, _amount(m.best, m.unit), m.baseline_name or "-",
                        _amount(m.best_baseline, m.unit) if m.baseline else "-", _ratio(m) or "-",
                        m.goal.text(m.unit), _verdict(m.passed), runs))
    out += _table(("#", "measurement", "logstore", "baseline", "baseline best", "ratio", "goal", "result",
                       "runs: logstore | baseline"), details)
    notes = [note for m in measurements for note in m.notes] + list(result.get("notes", []))
    return "\n".join(out + ([""] + notes if notes else []))
