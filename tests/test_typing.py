"""The package ships its type hints (``logstore/py.typed``) and they hold: ``mypy --strict`` with the
project's configuration (``[tool.mypy]`` in pyproject.toml: the public API modules, internal modules
followed silently) reports nothing, and a user's program written as the README shows
(``tests/typing_user_program.py``) type-checks with ``--strict`` against the package, its
``assert_type`` checks pinning what key functions return (a public function left unannotated, its
result Any, fails here). The runs share a cache made new under the session's temporary dir, so what is
checked is the working tree, never a stale cache (mypy checks a cached module again when its file
changed anyway)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
USER_PROGRAM = REPO / "tests" / "typing_user_program.py"
SPARK_MODULES = ("logstore/spark/", "pyspark_logstore.py")
"""The Spark layer's entry: checked against pyspark's own hints, so only where pyspark is installed."""


def checked_modules() -> list[str]:
    """The public API modules, as ``[tool.mypy] files`` lists them."""
    with open(REPO / "pyproject.toml", "rb") as file:
        return tomllib.load(file)["tool"]["mypy"]["files"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mypy's cache, new for this module's tests and shared by them (the standard library's stubs
    are analysed once)."""
    return tmp_path_factory.mktemp("mypy-cache")


def run_mypy(cache_dir: Path, *arguments: str) -> None:
    """Run mypy (the project's configuration, the cache ``cache_dir``) on ``arguments``; fail with
    its output on any error."""
    command = [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
               "--cache-dir", str(cache_dir), "--no-error-summary", "--show-error-codes",
               *arguments]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"mypy found errors:\n{result.stdout}{result.stderr}"


def test_the_configuration_lists_the_public_api():
    files = checked_modules()
    for path in files:
        assert (REPO / path).is_file(), f"[tool.mypy] files names {path}, which does not exist"
    # What ``logstore`` and ``logstore.client`` export lives in modules that are checked.
    import logstore
    import logstore.client

    for package in (logstore, logstore.client):
        for name in package.__all__:
            if name == "__version__":
                continue
            module = getattr(package, name).__module__
            path = module.replace(".", "/") + ".py"
            assert path in files, f"{package.__name__}.{name} lives in {module}, which [tool.mypy] files leaves out"
    for path in ("logstore/group/consumer.py", "logstore/properties.py", *SPARK_MODULES):
        assert any(file.startswith(path) for file in files), path


def test_public_api_modules_are_clean_under_mypy_strict(cache_dir):
    run_mypy(cache_dir, *[path for path in checked_modules() if not path.startswith(SPARK_MODULES)])


@pytest.mark.needs_tools("pyspark")
def test_spark_entry_is_clean_under_mypy_strict(cache_dir):
    run_mypy(cache_dir, *[path for path in checked_modules() if path.startswith(SPARK_MODULES)])


def test_a_users_program_type_checks_strictly_with_the_types_it_expects(cache_dir):
    # --strict on the program (the configuration's per-module settings apply to logstore, followed
    # silently: the previous tests report its own errors).
    run_mypy(cache_dir, "--strict", str(USER_PROGRAM))


def test_the_users_program_runs(tmp_path):
    # What it type-checks is what runs: the store part of the program, on a temporary dir.
    sys.path.insert(0, str(USER_PROGRAM.parent))
    try:
        import typing_user_program
    finally:
        sys.path.remove(str(USER_PROGRAM.parent))
    assert typing_user_program.store_example(str(tmp_path / "data")) == [b"v", b"v2"]
    assert typing_user_program.scheduler_example() == 0
