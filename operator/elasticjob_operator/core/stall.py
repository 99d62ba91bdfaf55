"""Stall classification: why a job's agents cannot make progress (pure; the clock is an argument).

The reasons, in order of precedence (but see ``PodsNotStarting``):

- ``EtcdUnavailable``: the operator's etcd probe has failed for ``etcd_unavailable_after``
  seconds while no agent and not the kubelet reaches etcd, the managed etcd pod failed or
  vanished, or an agent reports etcd unreachable for as long. etcd cannot report its own
  absence, so this needs the operator's probe and the agents.
- ``PodsUnschedulable``: fewer than ``minNodes`` worker pods can run because the scheduler
  cannot place the rest (for example more GPUs asked for than exist).
- ``PodsNotStarting``: the kubelet cannot start the managed etcd's container, or fewer than
  ``minNodes`` worker pods can run because it cannot start the rest (an image that does not
  exist, a missing Secret, ...). A managed etcd that cannot start comes before every other
  reason: agents that cannot reach an etcd that never started are its consequence.
- ``WaitingForNodes``: agents have waited in rendezvous for ``waiting_after`` seconds while
  fewer than ``minNodes`` agents are alive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from elasticjob_agent.protocol.health import AgentState, HealthReport

from . import progress
from .observed import Observed, PodPhase, PodView
from .root_cause import CORRECTION_WINDOW_SECONDS


class StallReason(StrEnum):
    ETCD_UNAVAILABLE = "EtcdUnavailable"
    PODS_UNSCHEDULABLE = "PodsUnschedulable"
    PODS_NOT_STARTING = "PodsNotStarting"
    WAITING_FOR_NODES = "WaitingForNodes"
    NO_PROGRESS = "NoProgress"
    """No rank advanced for ``spec.progressTimeoutSeconds`` (``progress.py``; not from
    ``classify``, and never failed by ``stallTimeoutSeconds``)."""


@dataclass(frozen=True)
class StallSettings:
    etcd_unavailable_after: float = 4.0
    """Seconds of failed etcd probes (or agent reports) before the job counts as stalled."""
    etcd_startup_grace: float = 60.0
    """How long a new etcd that was never reached may take to start before it counts as down."""
    waiting_after: float = 15.0
    """Seconds agents may wait in rendezvous with too few nodes before it counts as a stall."""
    progress_sample: float = progress.SAMPLE_SECONDS
    """Least seconds between two samples of ``status.progress`` (``progress.py``)."""
    progress_writes_per_second: float = progress.WRITES_PER_SECOND
    """Samples of ``status.progress`` written per second across all jobs at most."""
    root_cause_window: float = CORRECTION_WINDOW_SECONDS
    """How far apart in time evidence of one failure may be (``root_cause.update``): what the
    operator sees this long after a failure still corrects its root cause."""


@dataclass(frozen=True)
class Stall:
    reason: StallReason
    message: str


@dataclass(frozen=True)
class EtcdView:
    """The operator's knowledge of the job's etcd for one step."""

    endpoint: str
    pod: PodView | None
    """The current managed etcd pod (``None`` when missing, or for external etcd)."""
    managed: bool
    ever_ready: bool
    """The current generation (or the external etcd) answered a probe at least once."""
    unreachable_since: float | None
    recreated_generation: int | None = None
    """Set while a recreated managed etcd (this generation) has not answered yet."""


def classify(
    observed: Observed,
    etcd: EtcdView,
    *,
    current_workers: Sequence[PodView],
    min_nodes: int,
    run_id: str,
    now: float,
    settings: StallSettings,
) -> Stall | None:
    """The job's stall, or ``None`` when nothing blocks it."""
    reports = [r for r in observed.reports.values() if r.run_id == run_id]
    if etcd.managed and etcd.pod is not None and etcd.pod.start_failure is not None:
        return Stall(
            StallReason.PODS_NOT_STARTING,
            f"the managed etcd cannot start: {etcd.pod.start_failure.summary()}",
        )
    etcd_stall = _etcd_stall(observed, etcd, reports, run_id=run_id, now=now, settings=settings)
    if etcd_stall is not None:
        return etcd_stall
    live = [p for p in current_workers if not p.terminal and not p.deleting]
    unschedulable = [p for p in live if p.unschedulable]
    if unschedulable and len(live) - len(unschedulable) < min_nodes:
        return Stall(
            StallReason.PODS_UNSCHEDULABLE,
            f"{len(unschedulable)} worker pod(s) cannot be scheduled and fewer than minNodes "
            f"({min_nodes}) can run: {unschedulable[0].unschedulable}",
        )
    blocked = [p.start_failure for p in live if p.start_failure is not None]
    if blocked and len(live) - len(unschedulable) - len(blocked) < min_nodes:
        return Stall(
            StallReason.PODS_NOT_STARTING,
            f"{len(blocked)} worker pod(s) cannot start and fewer than minNodes ({min_nodes}) "
            f"can run: {blocked[0].summary()}",
        )
    waiting = [
        r
        for r in reports
        if r.state is AgentState.RENDEZVOUS
        and r.waiting_since is not None
        and now - r.waiting_since >= settings.waiting_after
    ]
    alive = sum(1 for p in live if p.phase is PodPhase.RUNNING)
    if waiting and alive < min_nodes:
        oldest = min(r.waiting_since or now for r in waiting)
        return Stall(
            StallReason.WAITING_FOR_NODES,
            f"{len(waiting)} agent(s) waiting in rendezvous for {now - oldest:.0f} s; "
            f"{alive} of minNodes {min_nodes} worker pods are running",
        )
    return None


def _etcd_stall(
    observed: Observed,
    etcd: EtcdView,
    reports: Sequence[HealthReport],
    *,
    run_id: str,
    now: float,
    settings: StallSettings,
) -> Stall | None:
    blocked = sum(1 for r in reports if r.state in (AgentState.RENDEZVOUS, AgentState.RESTARTING))
    tail = f"; {blocked} agent(s) blocked in rendezvous" if blocked else ""
    if etcd.managed and etcd.pod is not None and etcd.pod.phase is PodPhase.FAILED:
        return Stall(
            StallReason.ETCD_UNAVAILABLE,
            f"managed etcd pod {etcd.pod.name} failed (exit code {etcd.pod.exit_code}){tail}",
        )
    if etcd.managed and etcd.pod is None and etcd.ever_ready:
        return Stall(StallReason.ETCD_UNAVAILABLE, f"managed etcd pod is gone{tail}")
    if etcd.recreated_generation is not None:
        return Stall(
            StallReason.ETCD_UNAVAILABLE,
            f"managed etcd was lost; generation {etcd.recreated_generation} is starting{tail}",
        )
    since = etcd.unreachable_since
    # An agent or the kubelet that reaches etcd outweighs the operator's failing probe (the
    # operator's network path, or the operator itself under load, may be what fails).
    vouched = observed.agent_reaches_etcd(run_id) or (etcd.pod is not None and etcd.pod.ready)
    if since is not None and not vouched:
        grace = settings.etcd_unavailable_after if etcd.ever_ready else settings.etcd_startup_grace
        if now - since >= grace:
            return Stall(
                StallReason.ETCD_UNAVAILABLE,
                f"etcd at {etcd.endpoint} unreachable for {now - since:.0f} s{tail}",
            )
    cut_off = [
        r
        for r in reports
        if not r.etcd.reachable
        and r.etcd.unreachable_since is not None
        and now - r.etcd.unreachable_since >= settings.etcd_unavailable_after
    ]
    if cut_off:
        return Stall(
            StallReason.ETCD_UNAVAILABLE,
            f"{len(cut_off)} agent(s) cannot reach etcd at {etcd.endpoint} "
            f"(for {now - min(r.etcd.unreachable_since or now for r in cut_off):.0f} s){tail}",
        )
    return None
