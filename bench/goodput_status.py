"""What an ElasticJob's own ``status.lastRecovery`` says of a fault, beside the goodput bench's
figures from its progress file, and whether the two agree (pure; ``goodput_bench.py`` reads the
status)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from goodput_measure import FaultCost

STATUS_KEYS = ("status_recovery_s", "status_steps_lost", "status_agrees")
"""The ``--json`` keys of what ``status.lastRecovery`` said (``None`` for the peer)."""
STATUS_TOLERANCE = 0.10
"""``lastRecovery.seconds`` agrees with the bench's recovery time within this fraction."""
STATUS_WAIT = 30.0
"""Seconds the bench waits, after a recovery, for the status to record it."""
STATUS_SKEW = 30.0
"""A ``lastRecovery`` whose ``faultAt`` is this much before the fault is an older one."""


def agrees(
    bench_s: float | None,
    bench_lost: int | None,
    status_s: float | None,
    status_lost: int | None,
) -> bool | None:
    """Whether the status's recovery seconds are within ``STATUS_TOLERANCE`` of the bench's and
    its steps lost within one step (or that fraction, when larger); ``None`` when a figure is
    missing on either side."""
    if bench_s is None or bench_lost is None or status_s is None or status_lost is None:
        return None
    seconds = abs(status_s - bench_s) <= STATUS_TOLERANCE * bench_s
    steps = abs(status_lost - bench_lost) <= max(1.0, STATUS_TOLERANCE * bench_lost)
    return seconds and steps


def status_columns(cost: FaultCost, recovery: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``STATUS_KEYS`` of one ElasticJob row: ``recovery``, the job's
    ``status.lastRecovery`` (``None``: it recorded none for the fault), against ``cost``."""
    seconds = None if recovery is None else recovery.get("seconds")
    lost = None if recovery is None else recovery.get("stepsLost")
    seconds = float(seconds) if isinstance(seconds, int | float) else None
    lost = lost if type(lost) is int else None
    return {
        "status_recovery_s": None if seconds is None else round(seconds, 2),
        "status_steps_lost": lost,
        "status_agrees": agrees(cost.recovery_s, cost.steps_lost, seconds, lost),
    }


def status_note(r: Mapping[str, Any]) -> str:
    """The row's status columns as the table's note: ``status 4.1 s, 3 lost: agrees``."""
    verdict = {True: "agrees", False: "DISAGREES", None: "not comparable"}[r["status_agrees"]]
    seconds, lost = r["status_recovery_s"], r["status_steps_lost"]
    if seconds is None and lost is None:
        return "status: no lastRecovery"
    return f"status {_cell(seconds, '{:.1f}')} s, {_cell(lost)} lost: {verdict}"


def _cell(value: Any, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)
