"""Stalls and progress: ``NoProgress`` from the agents' steps, the ``Stalled`` condition and its
timeout, and the ``PodsNotStarting`` condition.
"""

from __future__ import annotations

import math
from dataclasses import replace

from elasticjob_agent.protocol.restarts import RestartReason

from .. import progress, start_failures
from ..conditions import ConditionType, set_condition
from ..observed import Observed, current_etcd, current_workers
from ..spec import EtcdMode, JobSpec
from ..stall import Stall, StallReason
from ..status import JobStatus, StallState
from .actions import Draft


def no_progress(
    draft: Draft,
    spec: JobSpec,
    before: JobStatus,
    seen: progress.GroupProgress | None,
    now: float,
) -> Stall | None:
    """``NoProgress`` (``progress.no_progress``), from the reports and the ``hang`` count."""
    hang = RestartReason.HANG.value
    current = draft.status.stall
    timeout = spec.progress_timeout_seconds
    if spec.progress_auto is not None:  # the agents' learned timeout, as they report it
        timeout = None if seen is None or seen.timeout is None else math.ceil(seen.timeout)
    verdict = progress.no_progress(
        timeout=timeout,
        seen=seen,
        current=(current.since, current.message)
        if current is not None and current.reason == StallReason.NO_PROGRESS
        else None,
        hang_restarts_added=draft.status.restarts.get(hang, 0) - before.restarts.get(hang, 0),
        now=now,
    )
    return None if verdict is None else Stall(StallReason.NO_PROGRESS, verdict.message)


def track_progress(
    draft: Draft,
    seen: progress.GroupProgress | None,
    stall: Stall | None,
    period: float,
    phase: float = 0.0,
) -> None:
    state = progress.advance(draft.status.progress, seen, period, phase)
    if (
        state is not None
        and stall is not None
        and stall.reason is StallReason.NO_PROGRESS
        and state.steps_per_second != 0.0
    ):
        state = replace(state, steps_per_second=0.0)
    draft.status = draft.status.evolve(progress=state)


def note_start_failures(
    draft: Draft, spec: JobSpec, observed: Observed, now: float, *, etcd_generation: int
) -> None:
    """Keep ``status.startFailures`` and the ``PodsNotStarting`` condition, with a Warning
    Event (the kubelet's reason) for each new cause (``start_failures``).

    Each slot's newest pod speaks for it, also one replaced in this very step: a pod that ends
    with ``StartError`` is seen once before its replacement supersedes it: ``etcd_generation``
    is the generation the step started with (``observed.current_etcd``)."""
    before = draft.status.start_failures
    after = start_failures.track(
        before,
        workers=current_workers(observed.workers, {}),
        replicas=spec.worker_pods,
        etcd=current_etcd(observed.etcd_pods, etcd_generation),
        managed_etcd=spec.etcd.mode is EtcdMode.MANAGED,
    )
    for failure in start_failures.news(before, after):
        draft.event("Warning", failure.reason, f"cannot start {failure.summary()}")
    conds = start_failures.condition(draft.status.conditions, after, now=now)
    draft.status = draft.status.evolve(start_failures=after, conditions=tuple(conds))


def track_stall(draft: Draft, spec: JobSpec, stall: Stall | None, now: float) -> bool:
    """Record the stall in status and conditions; ``True`` when its timeout has run out."""
    status = draft.status
    if stall is None:
        if status.stall is not None:
            draft.event("Normal", "Recovered", f"no longer stalled ({status.stall.reason})")
            draft.status = status.evolve(
                stall=None,
                conditions=tuple(
                    set_condition(
                        status.conditions,
                        ConditionType.STALLED,
                        False,
                        "Recovered",
                        f"recovered from {status.stall.reason}",
                        now=now,
                    )
                ),
            )
        return False
    reason = stall.reason.value
    since = status.stall.since if status.stall is not None else now
    if status.stall is None or status.stall.reason != reason:
        draft.new_stall = reason
        draft.event("Warning", reason, stall.message)
    conds = set_condition(
        status.conditions, ConditionType.STALLED, True, reason, stall.message, now=now
    )
    draft.status = status.evolve(
        stall=StallState(reason, stall.message, since),
        conditions=tuple(conds),
        reason=reason,
        message=stall.message,
    )
    # A job without progress restarts (and spends its budget) instead: its group may need longer
    # than stallTimeoutSeconds to load its model again.
    if stall.reason is not StallReason.NO_PROGRESS and now - since > spec.stall_timeout_seconds:
        draft.status = draft.status.evolve(
            message=f"stalled for more than stallTimeoutSeconds ({spec.stall_timeout_seconds}): "
            f"{stall.message}"
        )
        return True
    return False
