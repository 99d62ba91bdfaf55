"""``spec.health``: how the operator watches the nodes' compute time (pure).

Each default has its home here; the CRD's ``default:`` values are tied to it by
``tests/unit/operator/test_crd_defaults.py``. The CRD checks the shape first; this parse checks
again for bodies stored before the field existed (or created with validation off) and raises
``HealthSpecError`` naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from elasticjob_agent.protocol.integers import IntegerError, bounded_int

DEFAULT_FACTOR = 1.5
"""A node is slow when its compute time per step exceeds this many times the median of the
other nodes'."""
MAX_FACTOR = 100.0
DEFAULT_WINDOW_SECONDS = 60
"""How long a node must stay slow to be a straggler (and fast again to stop being one)."""
MIN_WINDOW_SECONDS = 10
"""Shortest window: a few polls of the agents' reports, so one slow poll is never a verdict."""
MAX_WINDOW_SECONDS = 86400


class HealthSpecError(ValueError):
    """``spec.health`` cannot be run as written; the message names the field."""


class StragglerAction(StrEnum):
    REPORT = "Report"
    """Condition, Event, metric and ``status.stragglers``; nothing moves."""
    REPLACE = "Replace"
    """Also: the node is avoided for this job and its pod is replaced elsewhere (restart
    reason ``straggler``, which spends nothing)."""


@dataclass(frozen=True)
class StragglerSpec:
    """``spec.health.stragglers``."""

    factor: float = DEFAULT_FACTOR
    window_seconds: int = DEFAULT_WINDOW_SECONDS
    action: StragglerAction = StragglerAction.REPORT


@dataclass(frozen=True)
class HealthSpec:
    """``spec.health``: on by default (``Report``); without timings from the workers
    (``elasticjob_agent.progress.step_timer``) nothing is ever reported."""

    stragglers: StragglerSpec = field(default_factory=StragglerSpec)
    preflight: bool = False
    """``spec.health.preflight``: each agent times a short fixed computation before its first
    round (``--preflight``); the nodes' times are compared like compute times, at once."""


def parse_health(raw: Any) -> HealthSpec:
    """``spec.health`` (absent: the defaults); raises ``HealthSpecError`` naming the field."""
    if raw is None:
        return HealthSpec()
    if not isinstance(raw, Mapping):
        raise HealthSpecError("spec.health must be an object")
    preflight = raw.get("preflight", False)
    if not isinstance(preflight, bool):
        raise HealthSpecError(f"spec.health.preflight must be true or false, got {preflight!r}")
    stragglers = raw.get("stragglers")
    if stragglers is None:
        return HealthSpec(preflight=preflight)
    if not isinstance(stragglers, Mapping):
        raise HealthSpecError("spec.health.stragglers must be an object")
    return HealthSpec(stragglers=_stragglers(stragglers), preflight=preflight)


def _stragglers(raw: Mapping[str, Any]) -> StragglerSpec:
    where = "spec.health.stragglers"
    factor = raw.get("factor", DEFAULT_FACTOR)
    if (
        isinstance(factor, bool)
        or not isinstance(factor, int | float)
        or not math.isfinite(factor)
        or not 1.0 < factor <= MAX_FACTOR
    ):
        raise HealthSpecError(f"{where}.factor must be a number above 1 and <= 100, got {factor!r}")
    window = raw.get("windowSeconds", DEFAULT_WINDOW_SECONDS)
    try:
        window = bounded_int(window, MIN_WINDOW_SECONDS, MAX_WINDOW_SECONDS)
    except IntegerError:
        raise HealthSpecError(
            f"{where}.windowSeconds must be an integer from {MIN_WINDOW_SECONDS} to "
            f"{MAX_WINDOW_SECONDS}, got {window!r}"
        ) from None
    action = raw.get("action", StragglerAction.REPORT.value)
    try:
        parsed = StragglerAction(action)
    except ValueError:
        raise HealthSpecError(f"{where}.action must be Report or Replace, got {action!r}") from None
    return StragglerSpec(float(factor), window, parsed)
