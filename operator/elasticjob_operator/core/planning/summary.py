"""The status summary of a running job: phase, round, world size, ready and waiting nodes, the
last rendezvous's duration, the ready spares and the ``Queued``, ``Running`` and ``SparesReady``
conditions.
"""

from __future__ import annotations

from typing import Any

from elasticjob_agent.protocol.health import AgentState

from .. import kueue, spares
from ..conditions import ConditionType, set_condition
from ..observed import Observed, current_workers
from ..spec import JobSpec
from ..status import Phase
from .actions import Draft


def summarize(
    draft: Draft,
    spec: JobSpec,
    observed: Observed,
    now: float,
    admission: kueue.Admission = kueue.NOT_QUEUED,
) -> None:
    status = draft.status
    reports = [r for r in observed.reports.values() if r.run_id == status.run_id]
    running = [r for r in reports if r.state is AgentState.RUNNING and r.round is not None]
    waiting = [r for r in reports if r.state in (AgentState.RENDEZVOUS, AgentState.RESTARTING)]
    top_round = max((r.round or 0 for r in running), default=status.round)
    in_round = [r for r in running if r.round == top_round]
    world = max((r.world_size or 0 for r in in_round), default=0)
    waiting_since = min(
        (r.waiting_since for r in waiting if r.waiting_since is not None), default=None
    )
    last_duration = status.last_rendezvous_seconds
    if top_round > status.round:
        # The agents' own figures first: a quick rendezvous can start and end between two polls.
        reported = [r.last_rendezvous_seconds for r in in_round]
        if any(d is not None for d in reported):
            last_duration = max(d for d in reported if d is not None)
        elif status.rendezvous_waiting_since is not None:
            last_duration = max(0.0, now - status.rendezvous_waiting_since)
    current = current_workers(observed.workers, status.attempts)
    replicas = spares.group_replicas(
        spec, sum(1 for p in current.values() if not p.terminal and not p.deleting)
    )
    spare_view = spares.view(spec, list(current.values()), observed.reports, status.run_id)
    if in_round:
        phase, reason, message = Phase.RUNNING, "Running", f"round {top_round}, world size {world}"
    elif status.phase is Phase.RUNNING and not waiting:
        # Agents finishing (Stopping, Succeeded) or not answering for a moment: no news.
        phase, reason, message = Phase.RUNNING, status.reason, status.message
    elif status.phase in (Phase.RUNNING, Phase.RESTARTING):
        phase, reason, message = Phase.RESTARTING, "Restarting", "the worker group is re-forming"
    else:
        phase, reason, message = Phase.PENDING, "Pending", "waiting for the first rendezvous"
    conds: list[dict[str, Any]] = [dict(c) for c in status.conditions]
    if spec.kueue is not None:
        queued = kueue.queued_message(spec, observed.kueue_reason)
        if admission.queued and not in_round:
            phase, reason, message = Phase.QUEUED, "Queued", queued
        conds = set_condition(
            conds,
            ConditionType.QUEUED,
            admission.queued,
            "Queued" if admission.queued else "Admitted",
            queued if admission.queued else "Kueue admitted the core",
            now=now,
        )
    if status.stall is not None:
        reason, message = status.stall.reason, status.stall.message
    conds = set_condition(
        conds,
        ConditionType.RUNNING,
        phase is Phase.RUNNING,
        "Running" if phase is Phase.RUNNING else phase.value,
        message,
        now=now,
    )
    if spare_view is not None:
        conds, warn = spares.condition(conds, spare_view, now)
        if warn:
            draft.event("Warning", spare_view.reason, spare_view.message)
    if phase is not status.phase:
        draft.event("Normal", phase.value, message)
    draft.status = status.evolve(
        phase=phase,
        reason=reason,
        message=message,
        conditions=tuple(conds),
        ready_nodes=len(in_round),
        waiting_nodes=len(waiting),
        ready_spares=0 if spare_view is None else spare_view.ready,
        world_size=world,
        round=top_round,
        replicas=replicas,
        rendezvous_waiting_since=waiting_since if not in_round or waiting else None,
        last_rendezvous_seconds=last_duration,
    )
