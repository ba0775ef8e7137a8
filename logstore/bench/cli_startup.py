"""``logstore perf cli``: how long the command line takes to start, against the interpreter's own start.

Each command runs as a fresh process, ``repeats`` times, the commands interleaved (one of each per
round, so a burst of load on a shared machine touches all of them alike):

- ``python -c pass``: the interpreter alone, the floor every command stands on;
- ``logstore --version`` and ``logstore --help``: click and the command line's own modules only;
- ``logstore topics list`` on a small store made here (one topic): the engine opens the store;
- ``logstore serve --listen 127.0.0.1:0`` until it prints its listening line (needs the server
  extra: the row is left out, with a note, without it); then stopped with SIGTERM by its pid.

Per command: the median and the minimum, each also less the interpreter's (what the command itself
costs), and the goal it is judged against (its median). ``bench_cli`` runs it, ``render_cli``
makes the text table. Time is wall-clock from starting the process to its exit (to its listening
line for ``serve``).
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

PYTHON_CASE = "python -c pass"
CASES = (PYTHON_CASE, "logstore --version", "logstore --help", "logstore topics list", "logstore serve")
GOALS_S = {"logstore --version": 0.15, "logstore --help": 0.15, "logstore topics list": 0.3, "logstore serve": 0.3}
"""The goals, on a quiet machine, for each command's median (seconds)."""
TOPIC = "perf-cli"
RUN_TIMEOUT_S = 60.0
"""How long one command may take before the benchmark fails (they take well under a second)."""
STOP_TIMEOUT_S = 30.0
"""How long a stopped server may take to exit before it is killed."""
LISTENING = "logstore serve: listening on "
_CLIENT_ENV = ("LOGSTORE_DIRS", "LOGSTORE_BOOTSTRAP_SERVER", "LOGSTORE_COMMAND_CONFIG")
"""The environment that would point the commands elsewhere than the store made here."""


class CliBenchmarkError(Exception):
    """A command failed or did not answer in time (the message names it, with its last error line)."""


def default_program() -> list[str]:
    """The ``logstore`` script installed beside this interpreter, else ``python -m logstore.cli``."""
    script = Path(sys.executable).parent / "logstore"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "logstore.cli"]


def bench_cli(repeats: int = 5, program: Sequence[str] | None = None, serve: bool | None = None,
              work_dir: str | None = None, say: Callable[[str], None] | None = None) -> dict:
    """Time each of ``CASES`` ``repeats`` times (interleaved), ``program`` being how ``logstore`` is
    run (default: ``default_program()``). ``serve``: whether to time ``logstore serve`` (default:
    when the server extra is installed). Returns ``{"program", "repeats", "rows", "notes"}``; each
    row has the command, its samples, median and min (s), the same less the interpreter's, and its
    goal (s, or None)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    program = list(program or default_program())
    notes = []
    if serve is None:
        from ..server.extra import INSTALL_HINT, missing_extra
        serve = not missing_extra()
        if not serve:
            notes.append(f"logstore serve not timed: it needs the server extra ({INSTALL_HINT})")
    cases = [case for case in CASES if serve or case != "logstore serve"]
    env = {key: value for key, value in os.environ.items() if key not in _CLIENT_ENV}
    root = tempfile.mkdtemp(prefix="logstore-perf-cli-", dir=work_dir)
    try:
        store = os.path.join(root, "store")
        _run([*program, "--dir", store, "topics", "create", TOPIC], env, "logstore topics create")
        commands = {PYTHON_CASE: [sys.executable, "-c", "pass"], "logstore --version": [*program, "--version"],
                    "logstore --help": [*program, "--help"], "logstore topics list": [*program, "--dir", store, "topics",
                                                                                      "list"],
                    "logstore serve": [*program, "--dir", store, "serve", "--listen", "127.0.0.1:0"]}
        samples: dict[str, list[float]] = {case: [] for case in cases}
        for number in range(1, repeats + 1):
            if say:
                say(f"round {number} of {repeats}")
            for case in cases:
                if case == "logstore serve":
                    samples[case].append(_time_serve(commands[case], env))
                else:
                    samples[case].append(_run(commands[case], env, case))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    python = samples[PYTHON_CASE]
    rows = []
    for case in cases:
        times = samples[case]
        row = {"command": case, "samples_s": times, "median_s": statistics.median(times), "min_s": min(times),
               "goal_s": GOALS_S.get(case)}
        if case != PYTHON_CASE:
            row["median_over_python_s"] = row["median_s"] - statistics.median(python)
            row["min_over_python_s"] = row["min_s"] - min(python)
        rows.append(row)
    return {"program": program, "repeats": repeats, "rows": rows, "notes": notes}


def _run(command: list[str], env: dict[str, str], name: str) -> float:
    """Seconds from starting ``command`` to its exit; ``CliBenchmarkError`` unless it exits 0."""
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CliBenchmarkError(f"{name} did not exit within {RUN_TIMEOUT_S:g} s") from None
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise CliBenchmarkError(f"{name} failed (exit code {done.returncode}): {_last_line(done.stderr)}")
    return elapsed


def _time_serve(command: list[str], env: dict[str, str]) -> float:
    """Seconds from starting ``logstore serve`` to its listening line; then stops it (SIGTERM to its
    pid, SIGKILL if it has not exited after ``STOP_TIMEOUT_S``)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        output = _read_until(process, LISTENING, start + RUN_TIMEOUT_S)
        elapsed = time.perf_counter() - start
        if LISTENING not in output:
            process.kill()
            _, errors = process.communicate(timeout=STOP_TIMEOUT_S)
            raise CliBenchmarkError(f"logstore serve printed no listening line (exit code {process.returncode}): "
                                    f"{_last_line(errors) or output.strip() or 'no output'}")
        return elapsed
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.communicate(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()


def _read_until(process: subprocess.Popen, text: str, deadline: float) -> str:
    """What ``process`` printed on stdout until a line holding ``text``, its exit, or ``deadline``."""
    received = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.perf_counter() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.perf_counter())):
                break
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break
            received += chunk
            found = received.find(text.encode())
            if found >= 0 and b"\n" in received[found:]:  # the whole line
                break
    return received.decode("utf-8", "replace")


def _last_line(stderr: bytes) -> str:
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else ""


def render_cli(result: dict) -> str:
    """The text table: per command its median, min, both less the interpreter's, and its goal."""
    header = ("command", "median", "min", "median - python", "min - python", "goal (median)")
    table = [header]
    for row in result["rows"]:
        goal = row["goal_s"]
        verdict = "" if goal is None else f"<= {_ms(goal)} {'PASS' if row['median_s'] <= goal else 'FAIL'}"
        table.append((row["command"], _ms(row["median_s"]), _ms(row["min_s"]),
                      _ms(row.get("median_over_python_s")), _ms(row.get("min_over_python_s")), verdict))
    widths = [max(len(line[column]) for line in table) for column in range(len(header))]
    lines = ["  ".join(cell.ljust(width) if column == 0 else cell.rjust(width)
                       for column, (cell, width) in enumerate(zip(line, widths))).rstrip() for line in table]
    lines.append(f"{result['repeats']} run{'s' if result['repeats'] != 1 else ''} of each command, interleaved, "
                 f"each a new process; logstore is {' '.join(result['program'])}")
    lines.extend(result["notes"])
    return "\n".join(lines)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"
