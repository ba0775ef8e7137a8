"""DESIGN.md §1: imports go only downward. The timer, the scheduler and the purgatory are pure
infrastructure: they may use the clock, the errors and each other, never storage code."""

from __future__ import annotations

import ast
import subprocess
import sys
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


def _top_level_imports(path: Path) -> set[str]:
    """Every module name imported anywhere in ``path`` (absolute imports, and relative ones resolved
    to ``logstore.*``)."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                names.add(node.module)
            elif node.level:
                package = ".".join(["logstore", *path.parent.relative_to(PACKAGE).parts])
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                names.add(f"{base}.{node.module}" if node.module else base)
    return names


def test_the_core_never_imports_the_spark_layer():
    """DESIGN.md §6: Spark is an optional extra; the engine (stdlib only) does not know it exists."""
    for path in sorted(PACKAGE.glob("*.py")):
        imports = _top_level_imports(path)
        bad = {name for name in imports if name.split(".")[0] in ("pyspark", "pyarrow")
               or name.startswith("logstore.spark")}
        assert not bad, f"{path.name} imports {bad}"


def test_spark_logic_modules_do_not_import_pyspark():
    """Options, planning and the sink protocol are tested without a JVM; Arrow conversion needs only
    pyarrow. Only the adapters (source, writer, compact, perf) import pyspark."""
    for name in ("options", "planning", "sink", "arrow"):
        imports = _top_level_imports(PACKAGE / "spark" / f"{name}.py")
        assert not {i for i in imports if i.split(".")[0] == "pyspark"}, name
    for name in ("options", "planning", "sink"):
        imports = _top_level_imports(PACKAGE / "spark" / f"{name}.py")
        assert not {i for i in imports if i.split(".")[0] == "pyarrow"}, name


def test_importing_the_spark_package_does_not_import_pyspark():
    code = ("import sys, logstore.spark, logstore.spark.planning, logstore.spark.sink; "
            "assert 'pyspark' not in sys.modules and 'pyarrow' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
