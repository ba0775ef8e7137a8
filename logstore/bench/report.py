"""The results of ``logstore perf``: ``Result`` rows, the acceptance targets, the comparison of
logstore against SQLite, and the text table. ``perf.py`` runs the workloads; this module only
judges and formats what they measured."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

MB = 1_000_000
TARGETS = {"append": 3.0, "scan": 2.0, "random": 1.0, "open": 2.0}
"""Acceptance targets per workload kind: logstore ÷ SQLite records/s at least this (append, scan,
random; MB/s ratios are the same), open time ÷ the smallest store's open time at most this (open)."""



@dataclass
class Result:
    """One row of the table: one engine running one workload."""

    kind: str  # append | scan | random | open
    workload: str
    engine: str  # logstore | sqlite
    records: int  # records appended or read, lookups done, or records held (open)
    payload_bytes: int
    elapsed_s: float
    cpu_s: float
    checked: int = 0  # what the engine answered (end offset, records scanned, lookups that hit)
    ratio: float | None = None
    cpu_ratio: float | None = None
    target: str = ""
    passed: bool | None = None
    extra: dict = field(default_factory=dict)
    path: str = ""  # the engine's files (only useful with keep=True)

    def _per_s(self, amount: float, seconds: float) -> float | None:
        return amount / seconds if self.kind != "open" and seconds > 0 else None

    records_per_s = property(lambda self: self._per_s(self.records, self.elapsed_s))
    cpu_records_per_s = property(lambda self: self._per_s(self.records, self.cpu_s))
    mb_per_s = property(lambda self: self._per_s(self.payload_bytes / MB, self.elapsed_s))

    def as_dict(self) -> dict:
        """Plain data for JSON, rates included."""
        data = asdict(self)
        data.update(records_per_s=self.records_per_s, cpu_records_per_s=self.cpu_records_per_s,
                    mb_per_s=self.mb_per_s)
        return data


# --- comparison and output -------------------------------------------------------------------------


def compare(results: list[Result]) -> list[Result]:
    """Fill in ratios and target verdicts: each logstore row against the SQLite row of the same
    workload (SQLite time ÷ logstore time), each open row against the smallest store's open (this
    open time ÷ that one). Returns ``results``."""
    smallest_open = min((r for r in results if r.kind == "open"), key=lambda r: r.extra["store_bytes"], default=None)
    for result in results:
        if result.engine != "logstore" or result is smallest_open:
            continue
        if result.kind == "open":
            slow, fast = result, smallest_open
        else:
            slow = next((r for r in results if r.engine == "sqlite" and r.workload == result.workload), None)
            fast = result
        if slow is None or not fast.elapsed_s:
            continue
        result.ratio = slow.elapsed_s / fast.elapsed_s
        result.cpu_ratio = slow.cpu_s / fast.cpu_s if fast.cpu_s else None
        bound = TARGETS[result.kind]
        result.target = f"{'≤' if result.kind == 'open' else '≥'}{bound:g}×"
        result.passed = result.ratio <= bound if result.kind == "open" else result.ratio >= bound
    return results


def format_bytes(size: int) -> str:
    """``1000000`` -> ``"1MB"`` (decimal units, as ``parse_size`` reads them)."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if size >= scale and size % (scale // 10) == 0:
            return f"{size / scale:g}{unit}"
    return f"{size}B"


def parse_size(text: str) -> int:
    """``"1MB"`` -> 10**6, ``"1GiB"`` -> 2**30, ``"512"`` -> 512 (KB/MB/GB decimal, KiB/MiB/GiB binary)."""
    units = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9, "B": 1, "": 1}
    text = text.strip().upper()
    number = text.rstrip("KMGIB")
    unit = text[len(number):]
    try:
        return int(float(number) * units[unit])
    except (KeyError, ValueError):
        raise ValueError(f"not a size: {text!r} (use e.g. 1MB, 64MiB, 1GB)") from None


def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render_table(results: Sequence[Result]) -> str:
    """The results as an aligned text table, with notes under it."""
    header = ("workload", "engine", "records", "elapsed_s", "cpu_s", "records/s", "MB/s", "cpu rec/s",
              "ratio", "cpu ratio", "target", "result")
    rows = [header]
    for r in results:
        verdict = "" if r.passed is None else ("PASS" if r.passed else "FAIL")
        rows.append((r.workload, r.engine, f"{r.records:,}", f"{r.elapsed_s:.4f}", f"{r.cpu_s:.4f}",
                     _number(r.records_per_s), _number(r.mb_per_s, 1), _number(r.cpu_records_per_s),
                     "" if r.ratio is None else f"{r.ratio:.2f}×",
                     "" if r.cpu_ratio is None else f"{r.cpu_ratio:.2f}×", r.target, verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) if i < 2 else cell.rjust(width)
                       for i, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    notes = ["ratio: logstore ÷ sqlite records/s (same for MB/s); for open, open time ÷ the smallest store's.",
             "payload per record = key + value + 8-byte timestamp; MB = 10^6 bytes."]
    for r in results:
        if r.kind == "open":
            notes.append(f"{r.workload}: {r.extra['store_bytes']:,} bytes in {r.extra['segments']} segment(s), "
                         f"median of {r.extra['repeats']}: open {r.elapsed_s * 1000:.2f} ms, close "
                         f"{r.extra['close_s'] * 1000:.2f} ms; segment data read at open: "
                         f"{r.extra['log_bytes_read_at_open']:,} bytes")
        elif r.extra.get("note"):
            notes.append(f"{r.workload} ({r.engine}): {r.extra['note']}")
    return "\n".join(lines + [""] + notes)


def text_table(header: tuple, rows: list[tuple]) -> list[str]:
    """Lines of a plain-text table: a header, a rule, the rows; the first column left-aligned, the
    others right-aligned (numbers)."""
    cells = [tuple(str(cell) for cell in row) for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                       for i, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in cells]
    return [lines[0], "-" * len(lines[0]), *lines[1:]]
