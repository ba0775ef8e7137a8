"""DESIGN.md §1: the layers are subpackages and imports go only downward.

The order, bottom up: the foundations (``errors``, ``clock``, ``fs``, ``config``, ``testing``) <
``records`` < ``timer`` < ``log`` < ``cleaner`` < ``manager`` < ``tools`` and ``bench`` (side by side,
neither imports the other) < ``group`` < ``server`` < ``client`` and ``spark`` (side by side) < ``cli``. Every import in every module is checked, lazy ones
inside functions included, so a change that imports upward fails here with the importing module and
the import named. Two layers are held to less than "anything below": ``records`` is pure (the
errors and the config only) and ``timer`` never imports storage code (the clock and the errors only).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import logstore

PACKAGE = Path(logstore.__file__).parent

FOUNDATIONS = {"errors", "clock", "fs", "config", "testing"}
RANKS = {"foundations": 0, "records": 1, "timer": 2, "log": 3, "cleaner": 4, "manager": 5,
         "tools": 6, "bench": 6, "group": 7, "server": 8, "client": 9, "spark": 9, "cli": 10}
ALLOWED_FOUNDATIONS = {"records": {"errors", "config"}, "timer": {"errors", "clock"}}
"""Layers that may use only some of the foundations."""


def layer_of(module: str) -> str:
    """The layer of a dotted module name under ``logstore`` (``logstore.log.segment`` -> ``log``)."""
    parts = module.split(".")
    assert parts[0] == "logstore", module
    if len(parts) == 1:
        return "api"
    if parts[1] in RANKS:
        return parts[1]
    assert parts[1] in FOUNDATIONS, f"{module} is in no layer: add it to FOUNDATIONS or RANKS"
    return "foundations"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of every import in ``source`` (of ``module``), relative ones resolved.
    For ``from X import y`` both ``X`` and ``X.y`` are given (``y`` may be a submodule)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            found.extend((node.lineno, f"{target}.{alias.name}") for alias in node.names)
    return found


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """Every import of ``module`` that goes upward, sideways between tools and bench, or outside
    what its layer may use, each as ``"module:line imports name (why)"``."""
    own = layer_of(module)
    problems = []
    for line, name in imports_of(source, module, is_package):
        if name != "logstore" and not name.startswith("logstore."):
            continue
        target_parts = name.split(".")
        where = f"{module}:{line} imports {name}"
        if len(target_parts) == 1 or (target_parts[1] not in RANKS and target_parts[1] not in FOUNDATIONS):
            # The package itself (``from logstore import Record``): the public API loads the whole
            # engine, so only the layers above the engine may use it.
            if own != "api" and RANKS.get(own, 0) <= RANKS["manager"]:
                problems.append(f"{where} (the public API loads the whole engine: import the module itself)")
            continue
        target = layer_of(".".join(target_parts[:2]))
        if own == "api":  # the public API re-exports the engine, never what is built on it
            if RANKS.get(target, 0) > RANKS["manager"]:
                problems.append(f"{where} (the public API must not load {target})")
            continue
        if target == own:
            continue
        own_rank = RANKS.get(own, 0)
        target_rank = RANKS.get(target, 0)
        if target_rank > own_rank:
            problems.append(f"{where} ({own} is below {target})")
        elif target_rank == own_rank:
            problems.append(f"{where} ({own} and {target} are side by side: neither imports the other)")
        elif target == "foundations" and own in ALLOWED_FOUNDATIONS:
            if target_parts[1] not in ALLOWED_FOUNDATIONS[own]:
                problems.append(f"{where} ({own} may use only {sorted(ALLOWED_FOUNDATIONS[own])})")
    return problems


def all_modules() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)


def test_every_module_imports_only_downward():
    problems = []
    for path in all_modules():
        module = module_name(path)
        problems.extend(violations(path.read_text(), module, path.name == "__init__.py"))
    assert not problems, "imports that break the layering (DESIGN.md §1):\n" + "\n".join(problems)


def test_every_module_is_in_a_layer_and_every_layer_exists():
    layers = {layer_of(module_name(path)) for path in all_modules()}
    assert layers == set(RANKS) | {"foundations", "api"}, layers
    for layer in [*(name for name in RANKS if name != "foundations"), ""]:
        init = PACKAGE / layer / "__init__.py"
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring and "import" in docstring, f"{init} must say what it owns and what it may import"


def test_the_checker_names_an_upward_import():
    upward = "from ..manager.log_manager import LogManager\n"
    assert violations(upward, "logstore.log.segment") == [
        "logstore.log.segment:1 imports logstore.manager.log_manager (log is below manager)",
        "logstore.log.segment:1 imports logstore.manager.log_manager.LogManager (log is below manager)"]
    lazy = "def f():\n    from logstore.bench import core\n"
    assert violations(lazy, "logstore.tools.dump") == [
        "logstore.tools.dump:2 imports logstore.bench (tools and bench are side by side: neither imports the other)",
        "logstore.tools.dump:2 imports logstore.bench.core (tools and bench are side by side: neither imports the other)"]
    assert violations("from ..fs import FileSystem\n", "logstore.timer.scheduler")[0].endswith(
        "(timer may use only ['clock', 'errors'])")
    assert violations("from ..clock import Clock\n", "logstore.records.decoder")
    assert violations("from .spark import register\n", "logstore", is_package=True)
    assert violations("from logstore import Record\n", "logstore.log.log")
    assert not violations("from logstore import LogManager, Record\n", "logstore.tools.demo")
    assert not violations("from ..records.decoder import Record\nfrom . import segment\n", "logstore.log.log")


def test_the_checker_sees_the_imports_that_are_there():
    scheduler = PACKAGE / "timer" / "scheduler.py"
    names = {name for _, name in imports_of(scheduler.read_text(), "logstore.timer.scheduler", False)}
    assert {"logstore.clock", "logstore.errors", "logstore.timer.system_timer", "logstore.timer.timing_wheel"} <= names


def test_importing_logstore_loads_no_tool_benchmark_spark_or_cli_module():
    code = ("import sys, logstore; "
            "bad = sorted(m for m in sys.modules if m.split('.')[:2] in (['logstore', 'tools'], ['logstore', 'bench'], "
            "['logstore', 'spark'], ['logstore', 'cli'], ['logstore', 'server']) or m.split('.')[0] in ('click', 'pyspark', 'pyarrow', 'sqlite3')); "
            "assert not bad, bad; "
            "assert {'logstore.log.log', 'logstore.manager.log_manager', 'logstore.timer.scheduler'} <= set(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_public_imports_still_work():
    code = ("from logstore import (LogManager, Log, Record, AppendInfo, Scheduler, SystemTimer, TimerTask, "
            "DelayedOperation, DelayedOperationPurgatory, LogConfig, ManualClock, FileSystem, LogStoreError); "
            "import logstore.spark, pyspark_logstore; "
            "from logstore.records import Record as R; from logstore.log import Log as L; "
            "from logstore.manager import LogManager as M; from logstore.timer import Scheduler as S; "
            "assert R is Record and L is Log and M is LogManager and S is Scheduler")
    subprocess.run([sys.executable, "-c", code], check=True)


def _top_level_imports(path: Path) -> set[str]:
    return {name for _, name in imports_of(path.read_text(), module_name(path), path.name == "__init__.py")}


def test_the_engine_never_imports_the_spark_layer_or_its_libraries():
    """DESIGN.md §6: Spark is an optional extra; the engine (stdlib only) does not know it exists."""
    for path in all_modules():
        if layer_of(module_name(path)) in ("spark", "cli", "bench"):
            continue
        bad = {name for name in _top_level_imports(path)
               if name.split(".")[0] in ("pyspark", "pyarrow") or name.startswith("logstore.spark")}
        assert not bad, f"{path} imports {bad}"


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
