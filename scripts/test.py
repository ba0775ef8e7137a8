"""Run the whole test suite as two pytest processes at once: the README's test command, and CI's.

Why: the machine has two cores and the suite is mostly single-threaded Python (each test waits on
its own subprocesses, servers and clients), so one pytest process leaves a core idle for most of a
run. ``pytest`` alone still runs everything, the same tests, in one process.

How: the test folders are split into two fixed shards of about the same length (the crash, fuzz,
log-layer and Spark tests; the server, client, CLI and the rest: every folder or file under
``tests/`` that the first shard does not name goes to the second, so a new one is never left out;
each pytest is given ``tests`` and ignores the other shard's part, so it collects in a full run's
order).
Each shard runs in its own pytest with its own ``--basetemp`` (two sessions must not clean each
other's temporary dirs) and without the cache plugin; extra arguments go to both. Each shard's
output is kept in ``test-results/shard-N.log`` and printed when both are done, the first shard's
first, then one line that adds up what each shard skipped for a missing tool (kcat, node, ...: each
pytest ends with its own such line, ``tests/conftest.py``). The exit code is pytest's: 0 when both passed, 5 when neither collected a test, else the
first non-zero one.

Usage: ``python scripts/test.py [PYTEST ARGS...]``
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_SHARD = ("tests/crash", "tests/fuzz", "tests/spark", "tests/log", "tests/cleaner", "tests/records",
               "tests/timer", "tests/tools")
"""The first shard's folders; everything else under tests/ is the second's."""
MISSING_TOOLS = "skipped for missing tools: "
"""How the line each pytest ends with starts (tests/conftest.py)."""


def merged_missing_tools(outputs: list[str]) -> str:
    """The shards' "skipped for missing tools" lines as one: each tool's counts added up."""
    counts: dict[str, list] = {}
    for output in outputs:
        for line in output.splitlines():
            if line.startswith(MISSING_TOOLS):
                # An install command may hold brackets itself (pip install 'kafka-logstore[docs]'):
                # an entry ends at the "]" before the next entry or the end of the line.
                entries = re.findall(r"(\S+) (\d+) \[(.*?)\](?=, \S+ \d+ \[|$)", line[len(MISSING_TOOLS):].rstrip())
                for tool, count, install in entries:
                    counts.setdefault(tool, [0, install])[0] += int(count)
    if not counts:
        return MISSING_TOOLS + "none"
    return MISSING_TOOLS + ", ".join(f"{tool} {count} [{install}]" for tool, (count, install) in sorted(counts.items()))


def shards() -> list[list[str]]:
    """Each shard's pytest arguments: ``tests`` with the other shard's folders and files ignored.
    (Not the shard's own folders as arguments: pytest would then load every folder's conftest.py
    up front, and the test modules that import their folder's ``conftest`` by name would get the
    last one loaded; and the order of the tests would not be a full run's.)"""
    everything = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").iterdir()
                        if (path.is_dir() and path.name != "__pycache__") or
                        (path.suffix == ".py" and path.name.startswith("test_")))
    missing = [path for path in FIRST_SHARD if path not in everything]
    if missing:
        raise SystemExit(f"scripts/test.py: the first shard names folders that do not exist: {missing}")
    second = [path for path in everything if path not in FIRST_SHARD]
    return [["tests", *(f"--ignore={path}" for path in second)], ["tests", *(f"--ignore={path}" for path in FIRST_SHARD)]]


def main(argv: list[str]) -> int:
    results = ROOT / "test-results"
    results.mkdir(exist_ok=True)
    started = time.monotonic()
    runs = []
    for number, paths in enumerate(shards(), 1):
        log = open(results / f"shard-{number}.log", "w+")
        basetemp = Path(tempfile.gettempdir()) / f"logstore-tests-shard-{number}-{os.getpid()}"
        # -P: not the repo first on sys.path (its logstore/ would shadow the installed package, which
        # has logstore.cli), as the pytest command does not put it there either
        command = [sys.executable, "-P", "-m", "pytest", "-p", "no:cacheprovider", f"--basetemp={basetemp}", *paths, *argv]
        print(f"shard {number}: pytest {' '.join(paths)}", flush=True)
        runs.append((number, subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), log))
    codes, outputs = [], []
    for number, process, log in runs:
        codes.append(process.wait())
        log.seek(0)
        print(f"\n===== shard {number} (exit {codes[-1]}) =====", flush=True)
        outputs.append(log.read())
        sys.stdout.write(outputs[-1])
        log.close()
    print(f"\n===== both shards done in {time.monotonic() - started:.0f} s: exit codes {codes} =====", flush=True)
    print(f"both shards: {merged_missing_tools(outputs)}", flush=True)
    if all(code == 5 for code in codes):
        return 5
    failed = [code for code in codes if code not in (0, 5)]
    return failed[0] if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
