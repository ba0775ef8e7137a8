"""Shared test settings: hypothesis profiles.

- ``dev`` (default): random exploration, no deadline (the CI machine is shared and noisy).
- ``ci``: derandomized, so a CI run is repeatable; selected by ``.ci/run`` with HYPOTHESIS_PROFILE=ci.
- ``soak``: many more examples, for a run by hand.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("soak", deadline=None, max_examples=2000,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
