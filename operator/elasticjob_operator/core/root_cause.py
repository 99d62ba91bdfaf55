"""The job's last root cause (``status.lastFailure``) from the agents' health reports. Pure.

Each agent reports the first worker failure of its latest failed round (``protocol.failure``);
the job keeps the one that outranks the others (the latest round's cause, not a peer's lost
connection), with the pod that reported it when the agent did not know its own pod name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from elasticjob_agent.protocol.failure import FailureRecordError, WorkerFailure
from elasticjob_agent.protocol.health import HealthReport


def newest_failure(
    reports: Mapping[str, HealthReport],
    run_id: str,
    known: Mapping[str, Any] | None,
    terminated: Mapping[str, WorkerFailure] | None = None,
) -> WorkerFailure | None:
    """The failure reported for ``run_id`` that should replace ``known`` (the stored
    ``status.lastFailure``; ``WorkerFailure.outranks``: a later round, else a cause over a
    peer's lost connection, else the newer), or ``None`` when there is nothing new.

    ``terminated``: by pod, the records that the current attempt's terminated worker pods left
    in their termination messages; an agent that exits (the budget spent) may never be polled
    with its last report, but the kubelet keeps that message."""
    best = parse_stored(known)
    stored = best
    candidates = [
        (pod, r.last_failure)
        for pod, r in sorted(reports.items())
        if r.last_failure is not None and r.run_id == run_id
    ]
    candidates += sorted((terminated or {}).items())
    for pod, seen in candidates:
        failure = seen if seen.pod is not None else replace(seen, pod=pod)
        if failure != stored and failure.outranks(best):
            best = failure
    return None if best is stored else best


def parse_stored(known: Mapping[str, Any] | None) -> WorkerFailure | None:
    if not known:
        return None
    try:
        return WorkerFailure.from_json(dict(known))
    except FailureRecordError:
        return None
