"""DESIGN.md §1: imports go only downward. The timer, the scheduler and the purgatory are pure
infrastructure: they may use the clock, the errors and each other, never storage code."""

from __future__ import annotations

import ast
from pathlib import Path

import logstore

PACKAGE = Path(logstore.__file__).parent
TIMER_LAYER = {"timing_wheel", "timer", "scheduler", "purgatory"}
ALLOWED_BELOW_TIMERS = {"clock", "errors"}


def internal_imports(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                found.add(node.module.split(".")[0])
            elif node.level == 1:
                found.update(alias.name for alias in node.names)
            elif node.module and node.module.startswith("logstore"):
                found.add(node.module.split(".")[1] if "." in node.module else "__init__")
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[1] for alias in node.names if alias.name.startswith("logstore."))
    return found


def test_timer_layer_imports_no_storage_code():
    for module in sorted(TIMER_LAYER):
        imports = internal_imports(module)
        assert imports <= TIMER_LAYER | ALLOWED_BELOW_TIMERS, f"{module} imports {imports - TIMER_LAYER}"


def test_timer_layer_is_ordered():
    order = ["timing_wheel", "timer", "scheduler", "purgatory"]
    for position, module in enumerate(order):
        later = set(order[position + 1:])
        assert not internal_imports(module) & later, f"{module} imports a module above it"


def test_the_checker_sees_imports():
    assert internal_imports("scheduler") >= {"clock", "errors", "timer", "timing_wheel"}
