"""Fuzzing every file type the store writes (docs/design.md §12).

Two template stores are made once (``fuzz_store``): a cleanly closed one with a plain multi-segment
topic (``delete_records`` applied), a cleaned compacted topic (cleaner checkpoint), two data dirs, a
group's committed offsets in ``__consumer_offsets`` and the server's ``producer-state.journal``; and
an unclean one (its writer died after appending past its last flush). Each mutation copies a template,
damages one file (a single-byte flip, a truncation, a zero-filled range, random or zero bytes
appended, the file removed) and opens the copy read-only, with ``check``, writable, and read-only
again after the writable open (``fuzz_oracle.judge_mutation``). The rule: the right records or a
reported error, never wrong records, never a silent loss (nor an exception outside the
``LogStoreError`` hierarchy). File types are visited in turn, each kind of damage in turn per type.

Settings: ``LOGSTORE_FUZZ_SECONDS`` (default 60) of mutations, never fewer than
``LOGSTORE_FUZZ_MIN_PER_TYPE`` (default 10) per file type; ``LOGSTORE_FUZZ_SEED`` (default 14) changes
the choices (a fixed seed by default, so a CI run is repeatable: mutation ``#i`` of seed ``S`` is the
same damage every time, and ``LOGSTORE_FUZZ_ONLY=i,j`` replays just those);
``LOGSTORE_FUZZ_TYPES`` (comma-separated file types as the report names them) fuzzes only those.
The figure is printed and written to ``test-results/fuzz.txt``, with one
reproduction line per failing group (file type, damage, open mode, outcome).

Run: ``pytest -s tests/fuzz/test_file_fuzz.py``
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from fuzz_oracle import (FAILURES, KINDS, MODES, OUTCOMES, RIGHT, Mutation, file_type, judge_mutation, mutate,
                         plan_mutation)
from fuzz_store import build_clean_template, build_unclean_template, copy_store

BUDGET_S = float(os.environ.get("LOGSTORE_FUZZ_SECONDS", "60"))
MIN_PER_TYPE = int(os.environ.get("LOGSTORE_FUZZ_MIN_PER_TYPE", "10"))
SEED = int(os.environ.get("LOGSTORE_FUZZ_SEED", "14"))
TYPES = {name.strip() for name in os.environ.get("LOGSTORE_FUZZ_TYPES", "").split(",") if name.strip()}
ONLY = [int(number) for number in os.environ.get("LOGSTORE_FUZZ_ONLY", "").replace(",", " ").split()]
HARD_CAP_S = max(3 * BUDGET_S, BUDGET_S + 60)  # stop reaching the minimum after this
CLI_EVERY = 25  # every N-th mutation is also checked through `logstore check`
RESULTS_DIR = Path(__file__).resolve().parents[2] / "test-results"


def _scratch_root(tmp_path: Path) -> str:
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return tempfile.mkdtemp(prefix="logstore-fuzz-", dir=shm)
    return str(tmp_path)


def _files_by_type(template) -> dict[str, list[str]]:
    """Every file of a template, relative to its root, by file type."""
    root = os.path.dirname(template.dirs[0])
    found: dict[str, list[str]] = defaultdict(list)
    for path in template.dirs:
        for folder, _, names in os.walk(path):
            for name in names:
                relative = os.path.relpath(os.path.join(folder, name), root)
                found[file_type(relative, template.clean)].append(relative)
    return {kind: sorted(paths) for kind, paths in found.items()}


def _pick(template, paths: list[str], kind: str, rng: random.Random) -> tuple[str, str]:
    root = os.path.dirname(template.dirs[0])
    sized = [path for path in paths if os.path.getsize(os.path.join(root, path)) > 0]
    if kind in ("flip", "truncate", "zero") and not sized:
        kind = "tail"  # an empty file can only grow or go
    return rng.choice(sized if kind in ("flip", "truncate", "zero") else paths), kind


def _figure(results, elapsed_s: float, by_type: Counter, by_kind: Counter) -> str:
    totals = {mode: Counter(result.verdicts[mode].outcome for result in results) for mode in MODES}
    modes = "; ".join(f"{mode}: " + " / ".join(f"{outcome} {totals[mode][outcome]}" for outcome in OUTCOMES)
                      for mode in MODES)
    return (f"file fuzz: {len(results)} mutations of {len(by_type)} file types in {elapsed_s:.0f} s "
            f"(seed {SEED}; {', '.join(f'{kind} {by_kind[kind]}' for kind in KINDS)}); {modes}")


def _report(results, figure: str, by_type: Counter) -> str:
    lines = [figure, "", "by file type (mutations; per mode: worst outcomes other than right):"]
    for kind in sorted(by_type):
        own = [result for result in results if result.file_type == kind]
        cells = []
        for mode in MODES:
            counts = Counter(result.verdicts[mode].outcome for result in own)
            cells.append(f"{mode}: " + ", ".join(f"{outcome} {counts[outcome]}" for outcome in OUTCOMES
                                                 if outcome != RIGHT and counts[outcome]) or f"{mode}: all right")
        lines.append(f"  {kind:28} {len(own):4}  " + "; ".join(cells))
    groups: dict[tuple, list] = defaultdict(list)
    for result in results:
        for mode in MODES:
            verdict = result.verdicts[mode]
            if verdict.outcome in FAILURES:
                groups[(result.file_type, result.mutation.kind, mode, verdict.outcome)].append((result, verdict))
    lines += ["", f"failures ({len(groups)} groups: file type, damage, open mode, outcome; count; one reproduction):"]
    for (kind, damage, mode, outcome), members in sorted(groups.items()):
        result, verdict = members[0]
        lines.append(f"  {kind} | {damage} | {mode} | {outcome} | {len(members)}x | "
                     f"#{result.index} {result.mutation.describe()} -> {verdict.detail}")
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_file_fuzz(tmp_path):
    scratch = _scratch_root(tmp_path)
    try:
        templates = [build_clean_template(os.path.join(scratch, "clean")),
                     build_unclean_template(os.path.join(scratch, "unclean"))]
        work = os.path.join(scratch, "work")
        # The harness's own check: a pristine copy is right in every mode, for both templates.
        for number, template in enumerate(templates):
            copy = copy_store(template, work)
            pristine = judge_mutation(template, copy, Mutation(os.path.relpath(copy.dirs[0], work), "none"),
                                      random.Random(number), cli_check=True)
            assert all(verdict.outcome == RIGHT for verdict in pristine.verdicts.values()), pristine.verdicts
        types = [(template, kind, paths) for template in templates
                 for kind, paths in sorted(_files_by_type(template).items()) if not TYPES or kind in TYPES]
        assert types, f"LOGSTORE_FUZZ_TYPES={sorted(TYPES)} names no file type"
        by_type: Counter = Counter()
        by_kind: Counter = Counter()
        results = []
        started = time.monotonic()
        index = 0
        replay = list(ONLY)
        while True:
            elapsed = time.monotonic() - started
            if ONLY:  # a replay of chosen mutations (their numbers in a report)
                if not replay:
                    break
                index = replay.pop(0)
            elif elapsed > HARD_CAP_S or (elapsed > BUDGET_S and
                                          min(by_type[kind] for _, kind, _ in types) >= MIN_PER_TYPE):
                break
            template, kind, paths = types[index % len(types)]
            rng = random.Random(f"{SEED}-{index}")
            damage = KINDS[(index // len(types)) % len(KINDS)]
            path, damage = _pick(template, paths, damage, rng)
            copy = copy_store(template, work)
            mutation = plan_mutation(os.path.dirname(copy.dirs[0]), path, damage, rng)
            mutate(os.path.dirname(copy.dirs[0]), mutation)
            result = judge_mutation(template, copy, mutation, rng, cli_check=index % CLI_EVERY == 0)
            result.index = index
            results.append(result)
            by_type[kind] += 1
            by_kind[damage] += 1
            index += 1
        elapsed = time.monotonic() - started
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    figure = _figure(results, elapsed, by_type, by_kind)
    report = _report(results, figure, by_type)
    print("\n" + report)
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "fuzz.txt").write_text(report)
    failures = Counter(result.verdicts[mode].outcome for result in results for mode in MODES
                       if result.verdicts[mode].outcome in FAILURES)
    assert not failures, (f"{dict(failures)} (wrong records, silent losses or raw exceptions): "
                          f"see test-results/fuzz.txt\n{report}")
