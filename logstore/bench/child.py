"""Running one benchmark workload in a fresh interpreter, so its memory peak, GIL and thread state
are its own: the parent side (``run_child``) and the child side (``child_main``), for every
benchmark module that measures that way (``compact``, ``durable``, ``timer``).

The child is ``python -m <module> <workload> <JSON keyword arguments>``; it prints its result as one
JSON line, the last on stdout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Callable, Collection, Mapping


def run_child(module: str, workload: str, kwargs: Mapping, error: type[Exception], *, label: str | None = None,
              returncodes: Collection[int] = (0,)) -> dict:
    """Run ``workload`` of ``module`` (its ``__name__``) in a fresh interpreter and return its JSON
    result. A child that exits with a code outside ``returncodes`` or prints nothing raises
    ``error`` with the tail of its stderr."""
    command = [sys.executable, "-m", module, workload, json.dumps(kwargs)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode not in returncodes or not done.stdout.strip():
        raise error(f"{label or workload}: child failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_main(argv: list[str], workloads: Mapping[str, Callable[..., dict]]) -> None:
    """The child's side: run ``argv[0]`` with the keyword arguments in ``argv[1]`` and print the
    result as JSON."""
    workload, kwargs = argv[0], json.loads(argv[1])
    if workload not in workloads:
        raise SystemExit(f"unknown child workload {workload!r}")
    print(json.dumps(workloads[workload](**kwargs)))
