#!/usr/bin/env python3
"""Planted mutants: known-bad patches that the crash, fuzz and model tests must catch.

Each mutant is one exact edit of the engine (the snippet must be found exactly once, so this list
stays in sync with the code: a missing snippet is a failure, not a skip) and a selection of tests
expected to catch it. For each mutant the script copies the project (``logstore/``, ``cli/``,
``tests/``, ``pyproject.toml``) to a scratch directory, applies the edit, and runs the selection
with the current interpreter (``python -m pytest``) with ``PYTHONPATH`` pointing at the copy, so
the mutated ``logstore`` is the one imported (checked before anything runs). A mutant is *caught*
when at least one test fails (the table names the first failing test of each file) and *survives* when the selection
passes. The unmutated copy runs every selection once first: they must pass, or the table means
nothing.

Two runs at a time (the CI machine has two cores). Prints the table and writes it to
``test-results/mutants.txt``; exits 1 when a mutant survives, a snippet is missing, a selection
fails on the unmutated code, or a run times out.

Usage: ``python scripts/mutants.py [--only NAME ...] [--jobs 2] [--timeout 240] [--keep]``
Stdlib only.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("logstore", "cli", "tests", "pyproject.toml")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "node_modules", ".hypothesis", "*.egg-info")
RULES = "tests/fuzz/test_durability_rules.py"


@dataclass(frozen=True)
class Mutant:
    """One known-bad edit: ``old`` (found exactly once in ``path``) becomes ``new``; ``tests`` (pytest
    arguments) must fail on it."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    env: dict = field(default_factory=dict, hash=False)


MUTANTS = [
    Mutant(
        "fsync skipped before the recovery point advances", "logstore/log/log.py",
        "            self._local.flush_from(view, old_recovery_point, lambda: self._closed)\n",
        "            pass  # MUTANT: the recovery point advances without an fsync\n",
        ("tests/manager/test_store.py::test_flush_fsyncs_before_advancing_the_recovery_point",
         "tests/crash/test_durable_crash.py::test_durable_appends_survive_power_loss")),
    Mutant(
        "directory fsync dropped after a rename", "logstore/fs.py",
        "        self.fsync_dir(os.path.dirname(path) or \".\")  # 3. the rename itself is durable\n",
        "        pass  # MUTANT: the rename is never made durable\n",
        (f"{RULES}::test_write_file_atomic_is_durable_when_it_returns",
         "tests/crash/test_durable_crash.py::test_durable_appends_survive_power_loss")),
    Mutant(
        "a checkpoint written in place", "logstore/log/checkpoint.py",
        "        self._fs.write_file_atomic(self.path, format_offsets(entries))\n",
        "        fd = self._fs.open_file(self.path, create=True)  # MUTANT: rewritten in place\n"
        "        try:\n"
        "            self._fs.truncate(fd, 0)\n"
        "            self._fs.pwrite(fd, format_offsets(entries), 0)\n"
        "            self._fs.fsync(fd)\n"
        "        finally:\n"
        "            self._fs.close(fd)\n",
        ("tests/crash/test_faults.py::test_io_error_writing_checkpoints_in_truncate_to_is_a_storage_error",
         f"{RULES}::test_a_crash_at_any_operation_of_delete_records_keeps_the_log_start_offset")),
    Mutant(
        "the CRC check skipped on recovery", "logstore/log/segment.py",
        "                load_batch(position, header, buffer, at)\n",
        "                pass  # MUTANT: the batch is not verified (no CRC check)\n",
        (f"{RULES}::test_recovery_cuts_a_last_batch_whose_checksum_fails",)),
    Mutant(
        "a torn tail treated as corruption", "logstore/log/loader.py",
        "            torn = follows is None or is_zero(segment, valid_end, follows)\n",
        "            torn = False  # MUTANT: a torn tail after a crash is damage\n",
        ("tests/log/test_loader.py::test_read_only_open_of_an_unclean_store_changes_nothing",
         "tests/crash/test_durable_crash.py::test_durable_appends_survive_power_loss",
         f"{RULES}::test_a_torn_tail_after_a_crash_is_cut_not_an_error")),
    Mutant(
        "truncation rounding the wrong way", "logstore/log/segment.py",
        "            position = found[0]\n"
        "            removed = self.size_bytes - position\n",
        "            position = found[0] + found[1].size_bytes  # MUTANT: keeps the batch holding the offset\n"
        "            removed = self.size_bytes - position\n",
        ("tests/log/test_loader.py::test_kill9_at_every_operation_of_truncate_to",
         "tests/log/test_loader.py::test_power_loss_at_every_operation_of_truncate_to",
         f"{RULES}::test_truncate_to_cuts_whole_batches_at_the_offset")),
    Mutant(
        "an index entry trusted without checking its batch", "logstore/log/segment.py",
        "        if not position or (size > position >= end):  # the start; or past a size snapshot, appended since\n",
        "        if True:  # MUTANT: the index entry is trusted without checking its batch\n",
        ("tests/log/test_index.py::test_wrong_middle_index_entry_is_not_trusted",
         f"{RULES}::test_a_read_only_view_never_trusts_a_lying_index_entry")),
    Mutant(
        "the clean marker written before the logs close", "logstore/manager/log_dirs.py",
        "        by_dir: dict[str, list] = {}\n",
        "        for dir_path in list(self._locks):  # MUTANT: the clean marker before the logs close\n"
        "            if mark_clean and dir_path not in failed_dirs:\n"
        "                write_clean_shutdown_marker(self._fs, dir_path, self._clock.time_ms())\n"
        "        by_dir: dict[str, list] = {}\n",
        ("tests/crash/test_faults.py::test_store_with_a_failed_log_is_recovered_after_close",
         f"{RULES}::test_the_clean_marker_is_durable_only_after_the_data")),
    Mutant(
        "a handed-over durable append released before its fsync", "logstore/log/append_combiner.py",
        "            if request.durable and request.error is None:\n",
        "            if False:  # MUTANT: released once written, without joining a flush round\n",
        ("tests/log/test_append_combiner.py::test_appends_queued_behind_a_slow_write_are_each_written_once",
         "tests/crash/test_durable_crash.py::test_durable_appends_survive_power_loss")),
]


@dataclass
class Outcome:
    name: str
    path: str
    status: str  # caught, SURVIVED, MISSING SNIPPET, TIMEOUT, BROKEN RUN, BASELINE FAILED, passed (baseline)
    caught_by: str
    seconds: float


def copy_project(target: Path) -> None:
    target.mkdir(parents=True)
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=IGNORED)
        else:
            shutil.copy2(source, target / name)


def apply(mutant: Mutant, copy: Path) -> None:
    path = copy / mutant.path
    text = path.read_text()
    found = text.count(mutant.old)
    if found != 1:
        raise LookupError(f"the snippet of {mutant.name!r} is found {found} times in {mutant.path} (expected once)")
    path.write_text(text.replace(mutant.old, mutant.new))


def environment(copy: Path, extra: dict) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("HYPOTHESIS_PROFILE", "ci")
    env.update(extra)
    return env


def imports_the_copy(copy: Path) -> bool:
    """The copy's ``logstore`` and ``cli`` are the ones imported, not an installed or editable one."""
    probe = "import logstore, cli; print(logstore.__file__); print(cli.__file__)"
    result = subprocess.run([sys.executable, "-c", probe], cwd=copy, env=environment(copy, {}),
                            capture_output=True, text=True, timeout=60, check=False)
    paths = result.stdout.split()
    return result.returncode == 0 and len(paths) == 2 and all(Path(p).resolve().is_relative_to(copy.resolve())
                                                              for p in paths)


_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def run_tests(copy: Path, tests: tuple[str, ...], extra_env: dict, timeout_s: float) -> tuple[str, str, float]:
    """Run ``tests`` in ``copy``: (``passed`` | ``failed`` | ``timeout``, first failing test, seconds)."""
    started = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *tests]
    try:
        result = subprocess.run(command, cwd=copy, env=environment(copy, extra_env), capture_output=True,
                                text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return "timeout", "", time.monotonic() - started
    seconds = time.monotonic() - started
    if result.returncode == 0:
        return "passed", "", seconds
    failed = _FAILED.findall(result.stdout)
    if result.returncode != 1 or not failed:  # 2: interrupted or a collection error, 4: usage, 5: no tests
        tail = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
        return "broken", f"pytest exit {result.returncode}: {tail}", seconds
    # the first failing test of each file, shortened: what caught the mutant, and how many tests did
    firsts: dict[str, str] = {}
    for node in failed:
        firsts.setdefault(node.split("::")[0], node.split("::", 1)[-1].split("[")[0])
    caught = "; ".join(f"{os.path.basename(path)}::{test}" for path, test in firsts.items())
    return "failed", f"{len(set(failed))} failed: {caught}", seconds


def run_mutant(mutant: Mutant, scratch: Path, timeout_s: float, keep: bool) -> Outcome:
    copy = scratch / re.sub(r"\W+", "-", mutant.name)
    copy_project(copy)
    try:
        try:
            apply(mutant, copy)
        except LookupError as exc:
            return Outcome(mutant.name, mutant.path, "MISSING SNIPPET", str(exc), 0.0)
        status, first, seconds = run_tests(copy, mutant.tests, mutant.env, timeout_s)
        verdict = {"failed": "caught", "passed": "SURVIVED", "timeout": "TIMEOUT", "broken": "BROKEN RUN"}[status]
        return Outcome(mutant.name, mutant.path, verdict, first, seconds)
    finally:
        if not keep:
            shutil.rmtree(copy, ignore_errors=True)


def run_baseline(mutants: list[Mutant], scratch: Path, timeout_s: float) -> list[Outcome]:
    """Every distinct selection on the unmutated copy, in one pytest run per environment."""
    copy = scratch / "unmutated"
    copy_project(copy)
    if not imports_the_copy(copy):
        return [Outcome("(unmutated copy)", "-", "BASELINE FAILED", "PYTHONPATH does not import the copy", 0.0)]
    by_env: dict[tuple, list[str]] = {}
    for mutant in mutants:
        tests = by_env.setdefault(tuple(sorted(mutant.env.items())), [])
        tests.extend(test for test in mutant.tests if test not in tests)
    outcomes = []
    for env, tests in by_env.items():
        status, first, seconds = run_tests(copy, tuple(tests), dict(env), timeout_s)
        outcomes.append(Outcome(f"(unmutated copy: the {len(tests)} selections)", "-",
                                "passed" if status == "passed" else "BASELINE FAILED", first, seconds))
    shutil.rmtree(copy, ignore_errors=True)
    return outcomes


def table(outcomes: list[Outcome], total_s: float) -> str:
    rows = [("mutant", "file", "result", "caught by (first failing test)", "seconds")]
    rows += [(o.name, o.path, o.status, o.caught_by, f"{o.seconds:.0f}") for o in outcomes]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths)) + f"  {row[4]:>7}  {row[3]}"
             for row in rows]
    mutants = [o for o in outcomes if not o.name.startswith("(unmutated")]
    caught = sum(o.status == "caught" for o in mutants)
    lines.append(f"planted mutants: {len(mutants)}, caught: {caught}, survived or broken: {len(mutants) - caught} "
                 f"({total_s:.0f} s)")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="run only the mutants whose name contains one of these")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per test run")
    parser.add_argument("--keep", action="store_true", help="keep the mutated copies (printed)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    args = parser.parse_args(argv)
    mutants = [m for m in MUTANTS if not args.only or any(part in m.name for part in args.only)]
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="logstore-mutants-"))
    try:
        probe = scratch / "probe"
        copy_project(probe)
        if not imports_the_copy(probe):
            print(f"PYTHONPATH={probe} does not make {sys.executable} import the copy's logstore", file=sys.stderr)
            return 1
        shutil.rmtree(probe)
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            baseline = pool.submit(run_baseline, mutants, scratch, args.timeout) if not args.no_baseline else None
            futures = [pool.submit(run_mutant, mutant, scratch, args.timeout, args.keep) for mutant in mutants]
            outcomes = [future.result() for future in futures]
            outcomes = (baseline.result() if baseline is not None else []) + outcomes
    finally:
        if args.keep:
            print(f"mutated copies kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    text = table(outcomes, time.monotonic() - started)
    print(text, end="")
    results = ROOT / "test-results"
    results.mkdir(exist_ok=True)
    (results / "mutants.txt").write_text(text)
    bad = [o for o in outcomes if o.status not in ("caught", "passed")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
