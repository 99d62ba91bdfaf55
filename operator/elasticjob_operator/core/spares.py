"""Hot spares (``spec.spares``), the operator's side. Pure: no Kubernetes client, no clock.

The job keeps ``replicas + spares`` worker pods, all built alike (``JobSpec.worker_pods``).
Which of them are spares is the rendezvous' choice, not the operator's: an agent that finds its
round full stands by (``AgentState.STANDBY``, docs/agent.md), so after a member is lost the
spare that took its place is a member and the lost pod's replacement is the next spare. The
operator only keeps the pod count, reports ``status.readySpares`` and the ``SparesReady``
condition (with the scheduler's or kubelet's reason when a pod outside the group cannot start),
and never counts a restart for a pod whose agent only ever stood by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elasticjob_agent.protocol.health import AgentState, HealthReport

from .conditions import ConditionType, find_condition, set_condition
from .observed import PodView
from .spec import JobSpec

READY = "SparesReady"
UNSCHEDULABLE = "SpareUnschedulable"
NOT_STARTING = "SpareNotStarting"
STARTING = "SparesStarting"


@dataclass(frozen=True)
class SpareView:
    """``status.readySpares`` and the ``SparesReady`` condition."""

    ready: int
    ok: bool
    reason: str
    message: str


def view(
    spec: JobSpec, pods: Sequence[PodView], reports: Mapping[str, HealthReport], run_id: str
) -> SpareView | None:
    """The spares as the pods and their agents' reports show them; ``None`` without spares.

    ``pods``: the newest worker pod per index. A spare is ready when its agent stands by with
    every warm worker's imports done (``HealthReport.spare_ready``). While fewer are ready than
    ``spec.spares``, the reason names the first cause among the pods outside the group: the
    scheduler's message, a container that cannot start, or still starting.
    """
    if spec.spares == 0:
        return None
    live = [p for p in pods if not p.terminal and not p.deleting]
    mine = {name: r for name, r in reports.items() if r.run_id == run_id}
    ready = sum(1 for p in live if p.name in mine and mine[p.name].spare_ready)
    head = f"{ready} of {spec.spares} spare(s) stand by with their workers warm"
    if ready >= spec.spares:
        return SpareView(ready, True, READY, head)
    outside = [
        p
        for p in live
        if p.name not in mine
        or mine[p.name].state not in (AgentState.RUNNING, AgentState.STANDBY)
        or (mine[p.name].state is AgentState.STANDBY and not mine[p.name].spare_ready)
    ]
    unschedulable = [p for p in outside if p.unschedulable]
    if unschedulable:
        first = unschedulable[0]
        return SpareView(
            ready,
            False,
            UNSCHEDULABLE,
            f"{head}; {len(unschedulable)} pod(s) outside the group cannot be scheduled "
            f"({first.name}: {first.unschedulable})",
        )
    blocked = [p.start_failure for p in outside if p.start_failure is not None]
    if blocked:
        return SpareView(
            ready,
            False,
            NOT_STARTING,
            f"{head}; {len(blocked)} pod(s) outside the group cannot start "
            f"({blocked[0].summary()})",
        )
    waiting = len(outside) if outside else spec.worker_pods - len(live)
    return SpareView(
        ready,
        False,
        STARTING,
        f"{head}; {waiting} pod(s) outside the group are being created, starting or warming up",
    )


def condition(
    conditions: Sequence[Mapping[str, Any]], spare_view: SpareView, now: float
) -> tuple[list[dict[str, Any]], bool]:
    """``conditions`` with ``SparesReady`` set from ``spare_view``, and whether a Warning Event
    is due: a spare that cannot be scheduled or started, once each time that cause appears."""
    before = find_condition(conditions, ConditionType.SPARES_READY)
    updated = set_condition(
        conditions,
        ConditionType.SPARES_READY,
        spare_view.ok,
        spare_view.reason,
        spare_view.message,
        now=now,
    )
    news = (before or {}).get("reason") != spare_view.reason
    return updated, news and spare_view.reason in (UNSCHEDULABLE, NOT_STARTING)


def stood_by(report: HealthReport | None, run_id: str) -> bool:
    """Whether this report shows a spare standing by (the pod is marked, so that its loss is
    never counted as a restart: it held no place in any group)."""
    return report is not None and report.run_id == run_id and report.state is AgentState.STANDBY


def group_replicas(spec: JobSpec, live_pods: int) -> int:
    """``status.replicas`` for the scale subresource: the live worker pods meant for the group
    (spares are extra, so an HPA compares like with like)."""
    return min(live_pods, spec.replicas)
