"""Hypothesis profiles of the decoder fuzz tests (`fuzzing.FUZZ` applies one).

- ``durable-fuzz`` (the default): modest example counts, derandomized, so
  the default run takes a few seconds and CI sees the same inputs each time.
- ``durable-fuzz-deep``: a long randomized campaign, for a session hunting
  bugs: ``DURABLE_FUZZ_PROFILE=durable-fuzz-deep pytest tests/fuzz``
  (``DURABLE_FUZZ_EXAMPLES`` sets its examples per test).

The profiles apply to the fuzz tests alone (through `fuzzing.FUZZ`), not to
the property tests of other folders.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile(
    "durable-fuzz",
    max_examples=60,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=_QUIET,
)
settings.register_profile(
    "durable-fuzz-deep",
    max_examples=int(os.environ.get("DURABLE_FUZZ_EXAMPLES", "20000")),
    derandomize=False,
    database=None,
    deadline=None,
    suppress_health_check=_QUIET,
)
