"""``spec.runPolicy.suspend``: the worker pods go, and come back with fresh names on resume."""

from __future__ import annotations

from ..conditions import ConditionType, set_condition
from ..observed import Observed
from ..status import Phase
from .actions import Action, DeletePod, Draft


def suspend(draft: Draft, observed: Observed, now: float) -> None:
    attempts = dict(draft.status.attempts)
    deletes: list[Action] = []
    for pod in observed.workers:
        if pod.attempt >= attempts.get(pod.index, 0):
            attempts[pod.index] = pod.attempt + 1  # resume with fresh names
        if not pod.deleting:
            deletes.append(DeletePod(pod.name, force=pod.node in observed.lost_nodes))
    if attempts != draft.status.attempts:
        draft.commit_first = True
    if draft.status.phase is not Phase.SUSPENDED:
        draft.event("Normal", "Suspended", "spec.runPolicy.suspend is true: worker pods deleted")
    draft.status = draft.status.evolve(
        phase=Phase.SUSPENDED,
        reason="Suspended",
        message="spec.runPolicy.suspend is true",
        attempts=attempts,
        ready_nodes=0,
        waiting_nodes=0,
        ready_spares=0,
        replicas=0,
        stall=None,
        conditions=tuple(
            set_condition(
                set_condition(
                    draft.status.conditions,
                    ConditionType.SUSPENDED,
                    True,
                    "Suspended",
                    "spec.runPolicy.suspend is true",
                    now=now,
                ),
                ConditionType.RUNNING,
                False,
                "Suspended",
                "spec.runPolicy.suspend is true",
                now=now,
            )
        ),
    )
    draft.actions.extend(deletes)
