"""The machine a benchmark ran on, as every ``logstore perf`` command reports it: CPUs, memory,
Python and SQLite versions, the command line, and the load average before and after the run.

A figure taken on a shared machine means little without the load it ran under, so each command's
text output ends with ``describe(before, after)`` and its JSON document carries ``as_dict`` under
``"machine"``.
"""

from __future__ import annotations

import os
import platform
import sqlite3
import sys
import time
from typing import NamedTuple


class MachineState(NamedTuple):
    """What was true of the machine at one moment of a run."""

    wall_time: float  # time.time()
    load_average: tuple[float, float, float] | None  # 1, 5 and 15 minutes (2 decimals); None without one


def snapshot() -> MachineState:
    try:
        load = tuple(round(value, 2) for value in os.getloadavg())
    except OSError:  # not every platform has one
        load = None
    return MachineState(time.time(), load)


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _load(state: MachineState) -> str:
    if state.load_average is None:
        return "unknown"
    return "/".join(f"{value:.2f}" for value in state.load_average)


def as_dict(before: MachineState, after: MachineState, argv: list[str] | None = None) -> dict:
    """The machine and the run's load, for a benchmark record (JSON)."""
    return {
        "command": " ".join(["logstore", *(argv if argv is not None else sys.argv[1:])]),
        "cpus": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "load_average_before": before.load_average,
        "load_average_after": after.load_average,
        "seconds": round(after.wall_time - before.wall_time, 3),
    }


def describe(before: MachineState, after: MachineState, argv: list[str] | None = None) -> str:
    """Two lines for the end of a text table: the command, and the machine with its load."""
    facts = as_dict(before, after, argv)
    memory = facts["memory_bytes"]
    memory_text = f", {memory / 2**30:.0f} GiB" if memory else ""
    return (f"command: {facts['command']}\n"
            f"machine: {facts['cpus']} CPUs{memory_text}, Python {facts['python']}, SQLite {facts['sqlite']}; "
            f"load average (1/5/15 min) {_load(before)} before and {_load(after)} after; "
            f"{facts['seconds']:.0f} s")


def with_machine(document: str, before: MachineState, after: MachineState, argv: list[str] | None = None) -> str:
    """A command's JSON output with ``"machine"`` added to its top-level object (every perf command
    prints one object; output that is not one is returned as it was)."""
    import json

    try:
        parsed = json.loads(document)
    except ValueError:
        return document
    if not isinstance(parsed, dict):
        return document
    parsed["machine"] = as_dict(before, after, argv)
    return json.dumps(parsed, indent=2) + "\n"
