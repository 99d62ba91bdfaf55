"""Settings every test session shares."""

from __future__ import annotations

from hypothesis import settings

# Hypothesis's per-example deadline (200 ms) measures the machine, not the code: on a loaded CI
# machine it turns slowness into failures. Every property test runs without it.
settings.register_profile("elasticjob", deadline=None)
settings.load_profile("elasticjob")
