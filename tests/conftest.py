"""Shared test settings: hypothesis profiles, and the figures tests measure.

- ``dev`` (default): random exploration, no deadline (the CI machine is shared and noisy).
- ``ci``: derandomized, so a CI run is repeatable; selected by ``.ci/run`` with HYPOTHESIS_PROFILE=ci.
- ``soak``: many more examples, for a run by hand.

A test that measures something a run should show (the hostile-load test's RSS, CPU and records)
records it with ``record_property("figures", text)``; the figures of the tests that passed are
printed at the end of the run, so CI's log keeps them without ``-s``.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("soak", deadline=None, max_examples=2000,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_terminal_summary(terminalreporter):
    lines = [f"{report.nodeid}:\n{value}" for report in terminalreporter.stats.get("passed", ())
             for name, value in getattr(report, "user_properties", ()) if name == "figures"]
    if lines:
        terminalreporter.section("figures")
        for line in lines:
            terminalreporter.write_line(line)
