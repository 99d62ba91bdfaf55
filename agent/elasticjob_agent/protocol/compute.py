"""Compute time per step: what a timing may be, and the node's figure in the health report
(pure, standard library only).

A timing comes from a worker (``elasticjob_agent.progress.step_timer``), so it is untrusted: one
that is not a finite number in ``[0, MAX_COMPUTE_SECONDS]`` is ignored and counted, never stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_COMPUTE_SECONDS = 3600.0
"""Longest compute time per step a rank may report: longer is taken for a broken clock."""


def valid_seconds(value: object) -> float | None:
    """``value`` as seconds when it is a plausible compute time, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    seconds = float(value)
    if not math.isfinite(seconds) or not 0.0 <= seconds <= MAX_COMPUTE_SECONDS:
        return None
    return seconds


@dataclass(frozen=True)
class ComputeFigure:
    """What the health report carries about a node's compute time per step."""

    seconds: float | None
    """The node's compute time per step (``None``: no valid timing in this round)."""
    samples: int
    """How many timings ``seconds`` was computed from."""
    rejected: int
    """Timings ignored since the agent started (not a number, negative, non-finite, huge)."""


NO_COMPUTE = ComputeFigure(None, 0, 0)
"""No rank timed anything."""
