"""Shared test settings: hypothesis profiles, and the figures tests measure.

- ``dev`` (default): random exploration, no deadline (the CI machine is shared and noisy).
- ``ci``: derandomized, so a CI run is repeatable; selected by ``.ci/run`` with HYPOTHESIS_PROFILE=ci.
- ``soak``: many more examples, for a run by hand.

A test that measures something a run should show (the hostile-load test's RSS, CPU and records)
records it with ``record_property("figures", text)``; the figures of the tests that passed are
printed at the end of the run, so CI's log keeps them without ``-s``.

A test that needs a tool from outside Python (kcat, node and kafkajs, openssl, java) skips where it
is missing, saying which and how to install it (``external_tools``); ``LOGSTORE_REQUIRE_TOOLS``
makes that a failure. The run ends with one line counting those skips per tool.

``python -m pytest`` from the repository root puts the root first on ``sys.path``, where the
``logstore/`` dir would shadow the installed package (which also holds ``logstore.cli``, from
``cli/``): the root is taken off ``sys.path`` again when ``logstore`` can be imported without it, so
``python -m pytest``, ``python -P -m pytest`` and ``pytest`` test the same installed code; unless
``PYTHONPATH`` names the root, which asks for the checkout's code (the planted mutants do).
"""

import os
import sys
from pathlib import Path


def _installed_logstore_first() -> None:
    root = Path(__file__).resolve().parents[1]
    asked = {Path(entry).resolve() for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry}
    if root in asked:
        return  # put there on purpose (scripts/mutants.py tests a mutated copy of the checkout so)
    kept = [entry for entry in sys.path if Path(entry or os.curdir).resolve() != root]
    if len(kept) == len(sys.path) or "logstore" in sys.modules:
        return
    removed, sys.path[:] = sys.path[:], kept
    import importlib.util
    if importlib.util.find_spec("logstore") is None:  # not installed: the checkout's is all there is
        sys.path[:] = removed


_installed_logstore_first()

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import external_tools  # noqa: E402

settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("soak", deadline=None, max_examples=2000,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_tools(*names): the test needs these tools from outside Python "
                                       "(tests/external_tools.py): it skips without them, or fails where "
                                       "LOGSTORE_REQUIRE_TOOLS requires them")
    external_tools.required_names()  # a name it does not know is a usage error now, not in some test


@pytest.hookimpl(tryfirst=True)  # before the fixtures are set up
def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs_tools"):
        for name in mark.args:
            external_tools.require(name)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    # The outermost wrapper: this comes after pytest's short test summary, just before the counts.
    yield
    lines = [f"{report.nodeid}:\n{value}" for report in terminalreporter.stats.get("passed", ())
             for name, value in getattr(report, "user_properties", ()) if name == "figures"]
    if lines:
        terminalreporter.section("figures")
        for line in lines:
            terminalreporter.write_line(line)
    terminalreporter.write_line(external_tools.summary_line(terminalreporter.stats.get("skipped", ())))
