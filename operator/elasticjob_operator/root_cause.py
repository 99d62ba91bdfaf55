"""The job's last root cause (``status.lastFailure``) from the agents' health reports. Pure.

Each agent reports the first worker failure of its latest failed round (``protocol.failure``);
the job keeps the newest one it has seen, with the pod that reported it when the agent did not
know its own pod name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from elasticjob_agent.protocol.failure import FailureRecordError, WorkerFailure
from elasticjob_agent.protocol.health import HealthReport


def newest_failure(
    reports: Mapping[str, HealthReport], run_id: str, known: Mapping[str, Any] | None
) -> WorkerFailure | None:
    """The newest failure reported for ``run_id`` that is newer than ``known`` (the stored
    ``status.lastFailure``), or ``None`` when there is nothing new."""
    floor = stored_time(known)
    best: WorkerFailure | None = None
    for pod, report in sorted(reports.items()):
        failure = report.last_failure
        if failure is None or report.run_id != run_id:
            continue
        if failure.pod is None:
            failure = replace(failure, pod=pod)
        if failure.time > floor and (best is None or failure.time > best.time):
            best = failure
    return best


def stored_time(known: Mapping[str, Any] | None) -> float:
    """The time of the stored ``lastFailure`` (``-1`` when there is none or it is unreadable)."""
    stored = parse_stored(known)
    return -1.0 if stored is None else stored.time


def parse_stored(known: Mapping[str, Any] | None) -> WorkerFailure | None:
    if not known:
        return None
    try:
        return WorkerFailure.from_json(dict(known))
    except FailureRecordError:
        return None
