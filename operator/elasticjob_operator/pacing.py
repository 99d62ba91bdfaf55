"""When a job's next step comes: after an interval, sooner when something changed, later while
the job is steady (``cadence.py``) or while the API server refuses a request (``retry.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .core import cadence, names, retry
from .core.loop_settings import LoopSettings
from .core.observed import Observed, PodPhase, PodView
from .core.status import JobStatus, Phase
from .probe_rounds import ProbeRounds


def inputs_of(
    generation: int,
    views: Iterable[PodView],
    lost_nodes: frozenset[str],
    services: frozenset[str],
) -> object:
    """What a change of the job's objects that breaks the calm looks like."""
    views = list(views)
    return (
        generation,
        _digest(v for v in views if v.role == names.ROLE_WORKER),
        _digest(v for v in views if v.role == names.ROLE_ETCD),
        lost_nodes,
        services,
    )


class Pacing:
    """One job's calm (how long it has been steady), the inputs of its last step and its run
    of refused requests."""

    def __init__(self, settings: LoopSettings, rounds: ProbeRounds) -> None:
        self._settings = settings
        self._rounds = rounds
        self._calm = cadence.Calm()
        self._inputs: object = None
        """What the job's objects looked like at the previous step (a change breaks the calm)."""
        self._rejections = 0
        """Steps in a row in which the API server refused a request (for the back-off)."""

    def steady_since(self, inputs: object, now: float) -> bool:
        """Whether nothing changed since the last step and the job is steady."""
        return inputs == self._inputs and cadence.steady(self._calm, now, self._settings.cadence)

    def restless(self) -> None:
        """etcd did not answer a steady job: look at everything, now."""
        self._calm = cadence.Calm()

    def take(self, inputs: object) -> bool:
        """Record a full step's inputs; whether they changed."""
        changed, self._inputs = inputs != self._inputs, inputs
        return changed

    def rejected(self, refused: bool) -> None:
        """Count a step in which the API server refused a request (``refused``) or did not."""
        self._rejections = self._rejections + 1 if refused else 0

    def steady(self, changed: bool, now: float) -> bool:
        return not changed and cadence.steady(self._calm, now, self._settings.cadence)

    def next_interval(
        self,
        status: JobStatus,
        workers: Iterable[PodView],
        observed: Observed,
        *,
        changed: bool,
        now: float,
    ) -> float:
        """The wait before the next step after a full one: idle, active or steady, and backed
        off while the API server refuses requests (``rejected``)."""
        idle = status.phase.finished or status.phase is Phase.SUSPENDED
        interval = self._settings.idle_interval if idle else self._settings.interval
        running = {p.name for p in workers if p.ip and p.phase is PodPhase.RUNNING}
        probed = self._rounds.probed
        is_calm = cadence.calm(
            running=status.phase is Phase.RUNNING,
            stalled=status.stall is not None,
            etcd_reachable=probed.etcd,
            expects_etcd=bool(probed.endpoints),
            reports=observed.reports,
            refused=len(observed.invalid_reports),
            no_verdict=len(probed.reports.no_verdict & running),
            running_workers=len(running),
            run_id=status.run_id,
        )
        self._calm = cadence.next_calm(self._calm, is_calm, changed, now)
        if not idle and cadence.steady(self._calm, now, self._settings.cadence):
            interval = self._rounds.due(True, now).wait
        return retry.backed_off(interval, self._rejections, rejected=True)


def _digest(pods: Iterable[PodView]) -> tuple[tuple[Any, ...], ...]:
    """What a pod change that matters to the cadence looks like (not its every field)."""
    return tuple(
        sorted(
            (p.name, p.phase, p.ip, p.ready, p.deleting, p.node, p.start_failure is not None)
            for p in pods
        )
    )
