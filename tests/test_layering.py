"""The shape of the house (docs/design.md §2): layers, the server's rooms, whole classes, no cycles.

The layers are subpackages and imports go only downward. The order, bottom up: the foundations
(``errors``, ``clock``, ``fs``, ``config``, ``properties``, ``testing``) < ``records`` < ``timer`` < ``log`` <
``cleaner`` < ``manager`` < ``tools`` < ``group`` < ``txn`` < ``server`` < ``client`` and ``spark``
(side by side) < ``bench`` < ``cli``. Every import in every module is checked, lazy ones inside functions and
type-only ones under ``TYPE_CHECKING`` included, so a change that imports upward fails here with the
importing module and the import named. Two layers are held to less than "anything below":
``records`` is pure (the errors and the config only) and ``timer`` never imports storage code (the
clock and the errors only).

Inside ``server`` the same rule holds between its rooms (``SERVER_ROOMS``). Across the whole package:
no import cycle between modules (type-only imports count: a cycle drawn for a type checker is still
two modules that cannot be understood apart), and no class takes a base class from another logstore
module unless it is a real is-a hierarchy (``ALLOWED_BASES``, each with its reason; exceptions are
always allowed). Benchmarks live in ``bench`` only, and importing the product loads none of them.
Every logger is named after its module.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import logstore

PACKAGE = Path(logstore.__file__).parent
CLI = Path(importlib.util.find_spec("logstore.cli").origin).parent
"""``logstore.cli``: inside the installed package, or the repository's ``cli/`` in an editable install."""
REPOSITORY = Path(__file__).resolve().parents[1]

FOUNDATIONS = {"errors", "clock", "fs", "config", "properties", "testing"}
RANKS = {"foundations": 0, "records": 1, "timer": 2, "log": 3, "cleaner": 4, "manager": 5, "tools": 6,
         "group": 7, "txn": 8, "server": 9, "client": 10, "spark": 10, "bench": 11, "cli": 12}
ALLOWED_FOUNDATIONS = {"records": {"errors", "config"}, "timer": {"errors", "clock"}}
"""Layers that may use only some of the foundations."""

SERVER_ROOMS = {"extra": 0, "protocol": 1, "wire_records": 1, "network": 2, "security": 3, "server_config": 4,
                "handlers": 5, "metrics": 6, "server": 7, "__init__": 8}
"""The server's rooms (subpackages, and its own modules), bottom up: a room imports only the rooms below
it. ``extra`` (is the extra installed?) imports nothing; ``protocol`` (messages and the codec) and
``wire_records`` (record batches on the wire) sit side by side; ``network`` frames requests with the
codec; ``security`` answers SASL through the network's request contexts; ``server_config`` reads the
security settings; ``handlers`` serve the APIs; ``metrics`` renders what the rooms below count and
serves it with the probes over HTTP; ``server`` (``KafkaServer``) assembles them all; the
package's ``__init__`` loads ``KafkaServer`` lazily."""

ALLOWED_BASES = {
    "logstore.log.index_file.IndexFile": "OffsetIndex and TimeIndex are index files: one fixed-width "
                                         "entry file, mmap-backed, with two entry layouts",
    "logstore.timer.timing_wheel.TimerTask": "a DelayedOperation and a scheduled job are timer tasks: "
                                             "the wheel holds and expires them",
    "logstore.timer.purgatory.DelayedOperation": "every delayed operation (joins, syncs, heartbeats, fetches, "
                                                 "produces) is one: the purgatory completes it once",
    "logstore.log.waits.DelayedFetch": "the server's fetch response is a DelayedFetch that answers a request",
    "logstore.fs.FileSystem": "the durable file-ops seam: the simulated-crash, recording and counting file "
                              "systems of tests and benchmarks are file systems",
    "logstore.group.admin.GroupAdmin": "the client's group admin is a group admin, over a broker",
    "logstore.log.durable_futures.FutureLog": "a log the waits see is a log a durable append's part sees, with "
                                              "more: one protocol widening the other (Log is both)",
    "logstore.records.decoder.RecordBatch": "a batch head cached for point reads is a record batch whose "
                                            "body is read on demand",
    "logstore.bench.core.Workload": "a benchmark workload of varied sizes is a workload",
    "logstore.bench.serve.BrokerProcess": "the group benchmark's broker is a broker process",
    "logstore.timer.timing_wheel.TimerTaskList": "a baseline the timing wheel is measured against: a "
                                                 "timer task list on a dict",
    "logstore.timer.timing_wheel.TimingWheel": "a baseline the timing wheel is measured against: a wheel "
                                               "with dict buckets",
}
"""Base classes a class may take from another logstore module: real is-a hierarchies, with the reason.
Any other cross-module base is a class split across files (a mixin), which the house does not build:
a responsibility moves into a collaborator object the class holds instead."""


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


def room_of(module: str) -> str | None:
    """The server room of a dotted module name (``logstore.server.security.sasl`` -> ``security``),
    None outside the server."""
    parts = module.split(".")
    if parts[:2] != ["logstore", "server"]:
        return None
    room = parts[2] if len(parts) > 2 else "__init__"
    assert room in SERVER_ROOMS, f"{module} is in no room of the server: add it to SERVER_ROOMS"
    return room


def module_name(path: Path, package: Path = PACKAGE, cli: Path = CLI) -> str:
    if path.is_relative_to(cli):
        parts = ["logstore", "cli", *path.relative_to(cli).with_suffix("").parts]
    else:
        parts = ["logstore", *path.relative_to(package).with_suffix("").parts]
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
            target = _target(node, module, is_package)
            found.append((node.lineno, target))
            found.extend((node.lineno, f"{target}.{alias.name}") for alias in node.names)
    return found


def _target(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """Every import of ``module`` that goes upward, sideways between layers or rooms of one rank, or
    outside what its layer may use, each as ``"module:line imports name (why)"``."""
    own = layer_of(module)
    own_room = room_of(module)
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
            if own_room is not None:
                problems.extend(_room_violation(where, own_room, target_parts))
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


def _room_violation(where: str, own_room: str, target_parts: list[str]) -> list[str]:
    if len(target_parts) == 2:  # ``from logstore import server`` / ``from .. import server``: the package
        target_room = "__init__"
    else:
        target_room = target_parts[2]
        if target_room not in SERVER_ROOMS:  # ``from logstore.server import X`` names X in __init__
            target_room = "__init__"
    if target_room == own_room:
        return []
    own_rank, target_rank = SERVER_ROOMS[own_room], SERVER_ROOMS[target_room]
    if target_rank > own_rank:
        return [f"{where} (the server's {own_room} is below its {target_room})"]
    if target_rank == own_rank:
        return [f"{where} (the server's {own_room} and {target_room} are side by side: neither imports the other)"]
    return []


def all_modules(package: Path = PACKAGE, cli: Path = CLI) -> list[Path]:
    paths = set(package.rglob("*.py")) | set(cli.rglob("*.py"))
    return sorted(path for path in paths if "__pycache__" not in path.parts)


def test_every_module_imports_only_downward():
    problems = []
    for path in all_modules():
        module = module_name(path)
        problems.extend(violations(path.read_text(), module, path.name == "__init__.py"))
    assert not problems, "imports that break the layering (docs/design.md §2):\n" + "\n".join(problems)


def test_every_module_is_in_a_layer_and_every_layer_exists():
    layers = {layer_of(module_name(path)) for path in all_modules()}
    assert layers == set(RANKS) | {"foundations", "api"}, layers
    rooms = {room_of(module_name(path)) for path in all_modules()} - {None}
    assert rooms == set(SERVER_ROOMS), rooms
    packages = [*(name for name in RANKS if name != "foundations"), "",
                *(f"server/{room}" for room in SERVER_ROOMS if (PACKAGE / "server" / room).is_dir())]
    for package in packages:
        init = (CLI if package == "cli" else PACKAGE / package) / "__init__.py"
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring and "import" in docstring, f"{init} must say what it owns and what it may import"


def test_every_package_is_installed():
    """``pip install .`` installs the packages pyproject.toml lists: a new subpackage missing there
    works in the checkout and fails on every user's machine."""
    listed = set(tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    package, cli = REPOSITORY / "logstore", REPOSITORY / "cli"
    on_disk = {module_name(path, package, cli) for path in all_modules(package, cli) if path.name == "__init__.py"}
    assert listed == on_disk, (sorted(on_disk - listed), sorted(listed - on_disk))


def test_the_checker_names_an_upward_import():
    upward = "from ..manager.log_manager import LogManager\n"
    assert violations(upward, "logstore.log.segment") == [
        "logstore.log.segment:1 imports logstore.manager.log_manager (log is below manager)",
        "logstore.log.segment:1 imports logstore.manager.log_manager.LogManager (log is below manager)"]
    lazy = "def f():\n    from logstore.spark import planning\n"
    assert violations(lazy, "logstore.client.mirror") == [
        "logstore.client.mirror:2 imports logstore.spark (client and spark are side by side: neither imports the other)",
        "logstore.client.mirror:2 imports logstore.spark.planning (client and spark are side by side: neither imports the other)"]
    assert violations("from ..fs import FileSystem\n", "logstore.timer.scheduler")[0].endswith(
        "(timer may use only ['clock', 'errors'])")
    assert violations("from ..clock import Clock\n", "logstore.records.decoder")
    assert violations("from .spark import register\n", "logstore", is_package=True)
    assert violations("from logstore import Record\n", "logstore.log.log")
    assert not violations("from logstore import LogManager, Record\n", "logstore.tools.demo")
    assert not violations("from ..records.decoder import Record\nfrom . import segment\n", "logstore.log.log")
    assert violations("from ..bench import core\n", "logstore.server.server") == [
        "logstore.server.server:1 imports logstore.bench (server is below bench)",
        "logstore.server.server:1 imports logstore.bench.core (server is below bench)"]


def test_the_checker_names_an_import_between_rooms():
    assert violations("from ..handlers.kafka_apis import Broker\n", "logstore.server.security.sasl") == [
        "logstore.server.security.sasl:1 imports logstore.server.handlers.kafka_apis "
        "(the server's security is below its handlers)",
        "logstore.server.security.sasl:1 imports logstore.server.handlers.kafka_apis.Broker "
        "(the server's security is below its handlers)"]
    assert violations("from ..protocol.codec import encode_request\n", "logstore.server.wire_records.encode")[0].endswith(
        "(the server's wire_records and protocol are side by side: neither imports the other)")
    assert violations("from .. import KafkaServer\n", "logstore.server.handlers.admin")[0].endswith(
        "(the server's handlers is below its __init__)")
    assert not violations("from ..protocol import errors\nfrom ..network.request_context import RequestContext\n"
                          "from . import kafka_apis\n", "logstore.server.handlers.fetch")
    assert not violations("from ..server.protocol import codec\n", "logstore.client.connection")


def test_the_checker_sees_the_imports_that_are_there():
    scheduler = PACKAGE / "timer" / "scheduler.py"
    names = {name for _, name in imports_of(scheduler.read_text(), "logstore.timer.scheduler", False)}
    assert {"logstore.clock", "logstore.errors", "logstore.timer.system_timer", "logstore.timer.timing_wheel"} <= names


# --- no cycles ------------------------------------------------------------------------------------


def module_edges(source: str, module: str, is_package: bool, modules: set[str]) -> dict[str, int]:
    """The modules ``module`` imports (every import: top-level, lazy and under ``TYPE_CHECKING``),
    each with its first line. ``from P import x`` is an edge to ``P.x`` when that is a module (a
    package's submodule), else to ``P`` (a name defined in its ``__init__``)."""
    edges: dict[str, int] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                while parts and ".".join(parts) not in modules:
                    parts.pop()
                if parts:
                    edges.setdefault(".".join(parts), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            target = _target(node, module, is_package)
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    edges.setdefault(f"{target}.{alias.name}", node.lineno)
                elif target in modules:
                    edges.setdefault(target, node.lineno)
    edges.pop(module, None)
    return edges


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return cycles


def package_graph() -> dict[str, dict[str, int]]:
    paths = {module_name(path): path for path in all_modules()}
    return {module: module_edges(path.read_text(), module, path.name == "__init__.py", set(paths))
            for module, path in paths.items()}


def test_no_import_cycles_between_modules():
    graph = package_graph()
    described = []
    for group in import_cycles(graph):
        described.append(" <-> ".join(group) + ": " + "; ".join(
            f"{a}:{graph[a][b]} imports {b}" for a in group for b in group if b in graph[a]))
    assert not described, "import cycles (give the lower module a narrow interface):\n" + "\n".join(described)


def test_the_cycle_checker_finds_a_type_only_cycle():
    modules = {"logstore.log.log", "logstore.log.waits", "logstore.log", "logstore.log.segment"}
    log = "from .waits import LogWaits\nfrom .segment import LogSegment\n"
    waits = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .log import Log\n"
    graph = {"logstore.log.log": module_edges(log, "logstore.log.log", False, modules),
             "logstore.log.waits": module_edges(waits, "logstore.log.waits", False, modules),
             "logstore.log.segment": {}, "logstore.log": {}}
    assert graph["logstore.log.waits"] == {"logstore.log.log": 3}
    assert import_cycles(graph) == [["logstore.log.log", "logstore.log.waits"]]
    graph["logstore.log.waits"] = {}
    assert import_cycles(graph) == []
    # a submodule importing a name from its package, whose __init__ imports the submodule
    init = "from .server import KafkaServer\n"
    server = "from . import INSTALL_HINT\n"
    modules = {"logstore.server", "logstore.server.server"}
    graph = {"logstore.server": module_edges(init, "logstore.server", True, modules),
             "logstore.server.server": module_edges(server, "logstore.server.server", False, modules)}
    assert import_cycles(graph) == [["logstore.server", "logstore.server.server"]]


# --- whole classes ----------------------------------------------------------------------------------


def cross_module_bases(source: str, module: str, is_package: bool) -> list[tuple[str, str, int]]:
    """``(class name, dotted base, line)`` for every top-level class whose base is a class imported
    from another logstore module (``from M import B`` then ``class C(B)``, or ``class C(m.B)``)."""
    tree = ast.parse(source)
    imported: dict[str, str] = {}  # local name -> dotted name it refers to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _target(node, module, is_package)
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{target}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:  # ``import a.b as x`` binds x to a.b; ``import a.b`` binds a
                if alias.asname:
                    imported[alias.asname] = alias.name
                else:
                    imported[alias.name.split(".")[0]] = alias.name.split(".")[0]
    found = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in imported:
                dotted = imported[base.id]
            elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id in imported:
                dotted = f"{imported[base.value.id]}.{base.attr}"
            else:
                continue
            if dotted.startswith("logstore.") and dotted.rsplit(".", 1)[0] != module:
                found.append((node.name, dotted, node.lineno))
    return found


def _is_exception(dotted: str) -> bool:
    module, name = dotted.rsplit(".", 1)
    base = getattr(importlib.import_module(module), name)
    return isinstance(base, type) and issubclass(base, BaseException)


def test_classes_are_whole():
    """A class whose base comes from another logstore module is split across files, unless that base
    is a real is-a hierarchy (an exception, or one of ``ALLOWED_BASES``)."""
    problems = []
    used = set()
    for path in all_modules():
        module = module_name(path)
        for name, base, line in cross_module_bases(path.read_text(), module, path.name == "__init__.py"):
            if base in ALLOWED_BASES:
                used.add(base)
            elif not _is_exception(base):
                problems.append(f"{module}:{line} class {name}({base.rsplit('.', 1)[1]}) takes its base from "
                                f"{base.rsplit('.', 1)[0]}")
    assert not problems, ("classes split across modules (move a responsibility into a collaborator the class "
                          "holds, or list a real is-a base in ALLOWED_BASES with its reason):\n" + "\n".join(problems))
    assert used == set(ALLOWED_BASES), f"allowed bases no class uses any more: {set(ALLOWED_BASES) - used}"


def test_the_whole_class_checker_finds_a_mixin():
    mixin = "from .log_reads import LogReads\nfrom . import damage\nclass Log(damage.DamagedLogMixin, LogReads):\n    pass\n"
    assert cross_module_bases(mixin, "logstore.log.log", False) == [
        ("Log", "logstore.log.damage.DamagedLogMixin", 3), ("Log", "logstore.log.log_reads.LogReads", 3)]
    local = "class Base:\n    pass\nclass Log(Base):\n    pass\n"
    assert cross_module_bases(local, "logstore.log.log", False) == []
    assert _is_exception("logstore.errors.StorageError") and not _is_exception("logstore.fs.FileSystem")


# --- loggers ---------------------------------------------------------------------------------------


def logger_names(source: str) -> list[tuple[int, str]]:
    """``(line, argument)`` of every ``logging.getLogger(...)`` call with an argument in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "getLogger"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "logging" and node.args):
            found.append((node.lineno, ast.unparse(node.args[0])))
    return found


def test_every_logger_is_named_after_its_module():
    """A log line names the module it came from (``logging.getLogger(__name__)``), so a user's logging
    config by layer (``logstore.server``) or module works, and a maintainer finds the code of a line."""
    problems = [f"{module_name(path)}:{line} logging.getLogger({argument})"
                for path in all_modules() for line, argument in logger_names(path.read_text())
                if argument != "__name__"]
    assert not problems, "loggers not named after their module:\n" + "\n".join(problems)
    assert logger_names('import logging\nlog = logging.getLogger("logstore.scheduler")\n') == [(2, "'logstore.scheduler'")]


# --- benchmarks -------------------------------------------------------------------------------------


def test_benchmarks_live_in_the_benchmark_layer():
    """No module outside ``bench`` (and the CLI that runs it) is a benchmark: none is named like one,
    and none imports the benchmark layer."""
    for path in all_modules():
        module = module_name(path)
        if layer_of(module) in ("bench", "cli"):
            continue
        assert not path.stem.startswith(("bench", "perf")) and not path.stem.endswith(("_bench", "_perf")), module
        assert not any(name.startswith("logstore.bench") for _, name in imports_of(
            path.read_text(), module, path.name == "__init__.py")), module


def test_importing_logstore_loads_no_tool_benchmark_spark_or_cli_module():
    """``import logstore`` loads nothing but the package (its public names load on first use:
    ``logstore --version`` must not pay for the engine); using the public API loads the engine,
    and still none of what is built on it."""
    code = ("import sys, logstore; "
            "loaded = sorted(m for m in sys.modules if m.startswith('logstore')); "
            "assert loaded == ['logstore'], loaded; "
            "from logstore import LogManager; "
            "bad = sorted(m for m in sys.modules if m.split('.')[:2] in (['logstore', 'tools'], ['logstore', 'bench'], "
            "['logstore', 'spark'], ['logstore', 'cli'], ['logstore', 'server']) or m.split('.')[0] in ('click', 'pyspark', 'pyarrow', 'sqlite3')); "
            "assert not bad, bad; "
            "assert {'logstore.log.log', 'logstore.manager.log_manager', 'logstore.timer.scheduler'} <= set(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_importing_the_server_and_the_client_loads_no_benchmark():
    """The product's packages, and the modules that run the server and the client, load no benchmark
    module (each checked in a fresh interpreter)."""
    for imports in ("logstore", "logstore.server", "logstore.client", "logstore.server.server, logstore.client.mirror, "
                    "logstore.client.producer, logstore.client.consumer, logstore.group.coordinator"):
        code = (f"import sys, {imports}; "
                "bad = sorted(m for m in sys.modules if m == 'logstore.bench' or m.startswith('logstore.bench.')); "
                "assert not bad, bad")
        subprocess.run([sys.executable, "-c", code], check=True)


def test_the_public_imports_still_work():
    code = ("from logstore import (LogManager, Log, Record, AppendInfo, Scheduler, SystemTimer, TimerTask, "
            "DelayedOperation, DelayedOperationPurgatory, LogConfig, ManualClock, FileSystem, LogStoreError); "
            "import logstore.spark, pyspark_logstore; "
            "from logstore.records import Record as R; from logstore.log import Log as L; "
            "from logstore.manager import LogManager as M; from logstore.timer import Scheduler as S; "
            "from logstore.server import KafkaServer, INSTALL_HINT, missing_extra; "
            "from logstore.server.server import KafkaServer as K; "
            "assert R is Record and L is Log and M is LogManager and S is Scheduler and K is KafkaServer")
    subprocess.run([sys.executable, "-c", code], check=True)
    # Every name of the lazily loading packages (logstore, logstore.client) resolves, * included,
    # dir() lists them, and a name that is not there is an AttributeError.
    code = ("import logstore, logstore.client; from logstore import *; from logstore.client import *; "
            "from logstore.client import Producer, Consumer, BrokerAdmin; "
            "from logstore.client.producer import Producer as P; assert P is Producer; "
            "assert LogManager is logstore.LogManager and TimerTask is logstore.TimerTask; "
            "assert set(logstore.__all__) <= set(dir(logstore)) and set(logstore.client.__all__) <= set(dir(logstore.client)); "
            "missing = [n for m in (logstore, logstore.client) for n in m.__all__ if getattr(m, n, None) is None]; "
            "assert not missing, missing; "
            "import pytest; pytest.raises(AttributeError, getattr, logstore, 'Nothing'); "
            "pytest.raises(ImportError, exec, 'from logstore.client import Nothing')")
    subprocess.run([sys.executable, "-c", code], check=True)


def _top_level_imports(path: Path) -> set[str]:
    return {name for _, name in imports_of(path.read_text(), module_name(path), path.name == "__init__.py")}


LAZY_PYARROW = {"logstore.records.columns"}
"""Engine modules that may import pyarrow inside a function (``ColumnBatch.to_arrow``: optional, on
first use), never at module level."""


def test_the_engine_never_imports_the_spark_layer_or_its_libraries():
    """Spark is an optional extra; the engine (stdlib only) does not know it exists (but for the
    lazy, optional Arrow conversion of ``LAZY_PYARROW``)."""
    for path in all_modules():
        module = module_name(path)
        if layer_of(module) in ("spark", "cli", "bench"):
            continue
        bad = {name for name in _top_level_imports(path)
               if name.split(".")[0] in ("pyspark", "pyarrow") or name.startswith("logstore.spark")}
        if module in LAZY_PYARROW:
            tree = ast.parse(path.read_text())
            in_functions = {alias.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef,))
                            for inner in ast.walk(node) if isinstance(inner, ast.Import) for alias in inner.names}
            module_level = {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
            assert not {name for name in module_level if name.split(".")[0] == "pyarrow"}, module
            bad -= {name for name in in_functions if name.split(".")[0] == "pyarrow"}
        assert not bad, f"{path} imports {bad}"


def test_spark_logic_modules_do_not_import_pyspark():
    """Options, planning and the sink protocol are tested without a JVM; Arrow conversion needs only
    pyarrow. Only the adapters (source, writer, compact) import pyspark."""
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
