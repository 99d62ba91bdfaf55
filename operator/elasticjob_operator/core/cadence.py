"""How often a job's agents and etcd are probed (pure; the clock is an argument).

Polling every agent and every etcd at the stall-detection resolution costs the operator one
HTTP request per pod every 2 s: 2,500 a second at 1000 jobs of 4 nodes, more than one Python
process serves. Most of those answers say what the previous one said. So a job is probed
*watchfully* (everything, every ``LoopSettings.interval``) while anything is or was recently in
motion, and *steadily* once it has been calm for ``settle`` seconds: its etcd every
``etcd_interval`` (one small request, the first witness of an etcd loss) and its agents every
``report_interval`` (their reports mostly confirm what is known). Any sign of trouble in a
steady job (a failed or inconclusive etcd probe, an agent that is not Running or cannot reach
etcd, a pod or spec change) makes it watchful again at once, so a cut etcd still reaches
``Stalled`` in about ``etcd_interval + etcd_unavailable_after`` plus one watchful step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from elasticjob_agent.protocol.health import AgentState, HealthReport


@dataclass(frozen=True)
class CadenceSettings:
    etcd_interval: float = 3.0
    """Seconds between etcd probes of a steady job (``ELASTICJOB_STEADY_ETCD_SECONDS``)."""
    report_interval: float = 10.0
    """Seconds between polls of a steady job's agents (``ELASTICJOB_STEADY_REPORT_SECONDS``)."""
    settle: float = 20.0
    """Seconds of calm before a job counts as steady."""
    probes_per_second: float = 400.0
    """Steady probes per second across all jobs at most (``ELASTICJOB_STEADY_PROBES_PER_SECOND``;
    0: no budget): past it, every steady period stretches alike (``within_budget``)."""

    def __post_init__(self) -> None:
        for name in ("etcd_interval", "report_interval", "settle", "probes_per_second"):
            if getattr(self, name) < 0:
                raise ValueError(f"cadence {name} must not be negative")


def within_budget(settings: CadenceSettings, jobs: int, agents: int) -> CadenceSettings:
    """The steady periods of a job with ``agents`` agents when the operator runs ``jobs`` jobs
    (taken to be alike): stretched by the same factor so that all steady probes together stay
    within ``probes_per_second``. At 1000 jobs of 4 agents (733 probes a second unstretched)
    etcd is probed every 5.5 s and the agents every 18 s; a cut etcd is then ``Stalled`` in about
    5.5 + 4 s plus a step, inside the 15 s target. Watchful jobs are never stretched."""
    if settings.probes_per_second <= 0 or settings.etcd_interval <= 0:
        return settings
    demand = jobs * (1 / settings.etcd_interval + agents / max(settings.report_interval, 1e-9))
    factor = demand / settings.probes_per_second
    if factor <= 1:
        return settings
    return replace(
        settings,
        etcd_interval=settings.etcd_interval * factor,
        report_interval=settings.report_interval * factor,
    )


@dataclass(frozen=True)
class Calm:
    """What the last watchful-or-steady judgement found: calm since when (``None``: not calm)."""

    since: float | None = None


def calm(
    *,
    running: bool,
    stalled: bool,
    etcd_reachable: bool | None,
    expects_etcd: bool,
    reports: Mapping[str, HealthReport],
    refused: int = 0,
    no_verdict: int = 0,
    running_workers: int,
    run_id: str,
) -> bool:
    """Whether this step's observation is calm: the job runs unstalled, its etcd answered (when
    the job has one to probe), and every running worker's agent reports a formed group that
    reaches etcd, sent a report that was refused (``refused`` of them: a hostile or broken pod
    does not break the calm, since polling it more often would change nothing but the
    operator's cost), or was asked while the operator itself was starved (``no_verdict`` of
    them: the operator's lateness says nothing of the pod, and watching the job closely would
    only make the operator later)."""
    if not running or stalled:
        return False
    if expects_etcd and etcd_reachable is not True:
        return False
    current = [r for r in reports.values() if r.run_id == run_id]
    if len(current) + refused + no_verdict < running_workers:
        return False
    return all(r.state is AgentState.RUNNING and r.etcd.reachable for r in current)


def next_calm(previous: Calm, is_calm: bool, changed: bool, now: float) -> Calm:
    """The calm record after a step: broken by a restless observation or a change of the job's
    objects, otherwise kept (or started now)."""
    if not is_calm or changed:
        return Calm(None)
    return previous if previous.since is not None else Calm(now)


def steady(record: Calm, now: float, settings: CadenceSettings) -> bool:
    return record.since is not None and now - record.since >= settings.settle


@dataclass(frozen=True)
class Due:
    reports: bool
    etcd: bool
    wait: float
    """Seconds until the next probe is due (the loop's next interval)."""


def due(
    *,
    steady_now: bool,
    last_reports: float | None,
    last_etcd: float | None,
    now: float,
    interval: float,
    settings: CadenceSettings,
) -> Due:
    """Which probes this step makes, and when the next step is due. A watchful job probes
    everything every ``interval``; a steady one each kind on its own period."""
    if not steady_now:
        return Due(True, True, interval)
    report_in = _remaining(last_reports, settings.report_interval, now)
    etcd_in = _remaining(last_etcd, settings.etcd_interval, now)
    reports, etcd = report_in <= 0, etcd_in <= 0
    after_reports = settings.report_interval if reports else report_in
    after_etcd = settings.etcd_interval if etcd else etcd_in
    return Due(reports, etcd, max(0.0, min(after_reports, after_etcd)))


def _remaining(last: float | None, period: float, now: float) -> float:
    return 0.0 if last is None else last + period - now
