"""One job's reconcile step: observe, plan (pure), act. No kopf here; handlers.py drives it.

The step is level-triggered: it reads the whole state every time, so a missed event or an operator
restart costs at most one interval. Each part has its module: what the step sees beyond the
indexes (``observation.py``, with the probes in ``probe_rounds.py`` and the etcd TLS in
``etcd_tls.py``), the decision (``planning/``, pure), the writes (``executor.py`` for the
actions, ``status_writer.py`` for the status) and when the next step comes (``pacing.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from . import metrics, probes
from .core import cadence, kueue, names, planning, progress
from .core.loop_settings import LoopSettings
from .core.manifests import owned_by
from .core.names import JobRef
from .core.node_conditions import NodeCondition
from .core.observed import PodView
from .core.spec import SpecError, generation_of, parse_job
from .core.stall import StallSettings
from .core.status import JobStatus
from .executor import Executor
from .kube import Kube
from .observation import Observer
from .pacing import Pacing, inputs_of
from .probe_rounds import ProbeRounds
from .status_writer import StatusWriter


@dataclass(frozen=True)
class OwnedPod:
    """An entry of the pod index: the owning job's uid and the reduced pod."""

    owner_uid: str
    view: PodView


@dataclass(frozen=True)
class StepResult:
    status: JobStatus
    next_interval: float
    delete_requested: bool = False


class JobLoop:
    """Reconciles one ElasticJob incarnation (namespace, name, uid)."""

    def __init__(
        self,
        kube: Kube,
        session: aiohttp.ClientSession,
        job: JobRef,
        settings: LoopSettings,
        clock: Callable[[], float] = time.time,
        *,
        gate: probes.ProbeGate | None = None,
        jobs: Callable[[], int] = lambda: 1,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        """``jobs``: how many jobs the operator runs now (the budgets of steady probes and of
        progress samples are shared by all of them). ``wake``: run the job's next step now
        (called when a round of probes that outlived its step ends)."""
        self._job = job
        self._settings = settings
        self._clock = clock
        self._jobs = jobs
        self._rounds = ProbeRounds(
            session, settings, clock, gate=gate or probes.ProbeGate(0), jobs=jobs, wake=wake
        )
        self._observer = Observer(kube, job, self._rounds)
        self._pacing = Pacing(settings, self._rounds)
        self._executor = Executor(kube, session, job)
        self.status_writer = StatusWriter(kube, job)
        self._tls: probes.EtcdTls | None = None
        """How the last step spoke TLS to the job's etcd (``None``: plain HTTP)."""
        self._policies_created = False

    async def step(
        self,
        body: Mapping[str, Any],
        pods: Iterable[OwnedPod],
        lost_nodes: frozenset[str],
        services: frozenset[str],
        node_conditions: Mapping[str, tuple[NodeCondition, ...]] | None = None,
    ) -> StepResult:
        """One reconcile step; raises ``SpecError`` (unusable spec) or ``KubeError`` (API).
        ``node_conditions``: the nodes with a bad condition (``core/node_conditions.py``)."""
        generation = generation_of(body)
        views = [p.view for p in pods if p.owner_uid == self._job.uid]
        bad_nodes = dict(node_conditions or {})
        inputs = inputs_of(generation, views, lost_nodes, services)
        if bad_nodes:  # a node turning bad breaks a steady job's calm
            inputs = (inputs, tuple(sorted(bad_nodes.items())))
        confirmed = await self._confirm_steady(inputs)
        if confirmed is not None:
            return confirmed
        started = time.monotonic()
        result = "error"
        try:
            outcome = await self._step(
                body,
                generation,
                views,
                inputs=inputs,
                lost_nodes=lost_nodes,
                services=services,
                node_conditions=bad_nodes,
            )
            result = "ok"
            return outcome
        except SpecError:
            result = "invalid"
            raise
        finally:
            metrics.RECONCILES.labels(result).inc()
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)

    async def _confirm_steady(self, inputs: object) -> StepResult | None:
        """A steady job between two polls of its agents: probe its etcd only. When etcd
        answers and none of the job's objects changed, nothing the plan reads has moved (the
        reports are the same ones), so no plan is made and nothing is written. ``None``: make a
        full step (something changed, the agents are due, or etcd did not answer)."""
        if self.status_writer.written is None:
            return None
        now = self._clock()
        if not self._pacing.steady_since(inputs, now):
            return None
        steady = await self._rounds.steady(self._rounds.due(True, now), self._tls)
        if steady.restless:
            self._pacing.restless()
        written = self.status_writer.written
        if steady.wait is None or written is None:
            return None
        return StepResult(written, steady.wait)

    async def _step(
        self,
        body: Mapping[str, Any],
        generation: int,
        views: list[PodView],
        *,
        inputs: object,
        lost_nodes: frozenset[str],
        services: frozenset[str],
        node_conditions: Mapping[str, tuple[NodeCondition, ...]],
    ) -> StepResult:
        # Observe: the body (parsed once), the indexes, then the Secret, Kueue and the probes.
        job = self._job
        spec = parse_job(body, etcd_image=self._settings.etcd_image or None)
        status = self.status_writer.base(
            JobStatus.from_json(body.get("status")),
            (body.get("metadata") or {}).get("resourceVersion"),
        )
        workers = tuple(v for v in views if v.role == names.ROLE_WORKER)
        changed = self._pacing.take(inputs)

        def due() -> cadence.Due:
            probe_at = self._clock()
            return self._rounds.due(self._pacing.steady(changed, probe_at), probe_at)

        seen = await self._observer.observe(
            spec,
            status,
            workers=workers,
            etcd_pods=tuple(v for v in views if v.role == names.ROLE_ETCD),
            lost_nodes=lost_nodes,
            due=due,
            node_conditions=node_conditions,
        )
        self._tls = seen.tls

        # Plan (pure).
        now = self._clock()
        plan = planning.plan(
            job,
            spec=spec,
            generation=generation,
            status=status,
            observed=seen.observed,
            now=now,
            settings=self._stall_settings(),
            services=services,
            policies=None if self._policies_created else self._settings.policies,
            quarantine=self._settings.quarantine,
        )

        # Act: the status first when the plan commits a counter, then every action.
        new_status = plan.status
        if plan.commit_first:
            new_status = await self.status_writer.write(new_status)
        outcome = await self._executor.run(plan.actions, new_status, tls=self._tls)
        self._policies_created = self._policies_created or outcome.policies_created
        rejection = seen.rejection or outcome.rejection
        new_status, rejected = planning.note_rejection(
            outcome.status, rejection, now=now, generation=generation
        )
        events = [*plan.events, *([rejected] if rejected is not None else [])]
        if outcome.refused is not None:
            new_status, refusal = kueue.report_refusal(new_status, status, outcome.refused)
            events += [planning.Event(*refusal)] if refusal else []
        self._pacing.rejected(rejection is not None)
        new_status = await self.status_writer.write(new_status)
        await self._executor.post_events(events, now)
        if plan.new_stall is not None:
            metrics.stall_started(job.namespace, job.name, plan.new_stall)
        metrics.evidence_refused(plan.refused_evidence)
        metrics.decision_taken(
            job.namespace, job.name, status.failure_policy, new_status.failure_policy
        )
        metrics.recovered(job.namespace, job.name, status.last_recovery, new_status.last_recovery)
        metrics.publish(job.namespace, job.name, new_status, max_restarts=spec.max_restarts)
        interval = self._pacing.next_interval(
            new_status,
            workers,
            seen.observed,
            changed=changed,
            now=now,
        )
        return StepResult(new_status, interval, outcome.delete_requested)

    def _stall_settings(self) -> StallSettings:
        """The stall settings with the progress sample period this many jobs can afford."""
        stall = self._settings.stall
        period = progress.sample_period(
            stall.progress_sample, self._jobs(), stall.progress_writes_per_second
        )
        return stall if period == stall.progress_sample else replace(stall, progress_sample=period)

    def forget_written(self) -> None:
        """Re-read the status from the body on the next step (after an error)."""
        self.status_writer.forget()

    def adopt(self, job: Mapping[str, Any] | None) -> None:
        """Start from the stored job (read fresh when the loop starts)."""
        self.status_writer.adopt(job)


def owned_pod(body: Mapping[str, Any], view: PodView) -> OwnedPod | None:
    """Index entry for a pod: ``None`` when no ElasticJob controls it."""
    refs = (body.get("metadata") or {}).get("ownerReferences") or []
    for ref in refs:
        if ref.get("kind") == names.KIND and ref.get("controller") and owned_by(body, ref["uid"]):
            return OwnedPod(str(ref["uid"]), view)
    return None


__all__ = ["JobLoop", "LoopSettings", "OwnedPod", "SpecError", "StepResult", "owned_pod"]
