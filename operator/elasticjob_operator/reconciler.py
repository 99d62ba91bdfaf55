"""One job's reconcile step: observe, plan (pure), act. No kopf here; handlers.py drives it.

The step is level-triggered: it reads the whole state every time, so a missed event or an operator
restart costs at most one interval. Its parts live in their own modules: the probes of the job's
agents and etcd (``probe_rounds.py``), its etcd TLS (``etcd_tls.py``), the plan
(``planning/``), the actions (``executor.py``) and the status writes (``status_writer.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from . import cadence, kueue, metrics, names, planning, probes, progress, retry
from .etcd_tls import EtcdTlsReader, EtcdTlsView
from .executor import Executor
from .kube import Kube, KubeError, PermanentKubeError
from .loop_settings import LoopSettings
from .manifests import owned_by
from .names import JobRef
from .observed import Observed, PodPhase, PodView, current_etcd
from .probe_rounds import ProbeRounds
from .spec import EtcdMode, JobSpec, SpecError, generation_of, parse_job
from .stall import StallSettings
from .status import JobStatus, Phase
from .status_writer import StatusWriter

log = logging.getLogger(__name__)


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
        self._kube = kube
        self._job = job
        self._settings = settings
        self._clock = clock
        self._jobs = jobs
        self.status_writer = StatusWriter(kube, job)
        self._executor = Executor(kube, session, job)
        self._tls_reader = EtcdTlsReader(kube, job)
        self._rounds = ProbeRounds(
            session, settings, clock, gate=gate or probes.ProbeGate(0), jobs=jobs, wake=wake
        )
        self._tls: probes.EtcdTls | None = None
        """How the last step spoke TLS to the job's etcd (``None``: plain HTTP)."""
        self._policies_created = False
        self._rejections = 0
        """Steps in a row in which the API server refused a request (for the back-off)."""
        self._calm = cadence.Calm()
        self._inputs: object = None
        """What the job's objects looked like at the previous step (a change breaks the calm)."""

    async def step(
        self,
        body: Mapping[str, Any],
        pods: Iterable[OwnedPod],
        lost_nodes: frozenset[str],
        services: frozenset[str],
    ) -> StepResult:
        """One reconcile step; raises ``SpecError`` (unusable spec) or ``KubeError`` (API)."""
        generation = generation_of(body)
        views = [p.view for p in pods if p.owner_uid == self._job.uid]
        inputs = _inputs_of(generation, views, lost_nodes, services)
        confirmed = await self._confirm_steady(inputs)
        if confirmed is not None:
            return confirmed
        started = time.monotonic()
        result = "error"
        try:
            outcome = await self._step(
                body, generation, views, inputs=inputs, lost_nodes=lost_nodes, services=services
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
        if inputs != self._inputs or not cadence.steady(self._calm, now, self._settings.cadence):
            return None
        steady = await self._rounds.steady(self._rounds.due(True, now), self._tls)
        if steady.restless:
            self._calm = cadence.Calm()  # the full step looks at everything, now
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
    ) -> StepResult:
        # Observe.
        job = self._job
        spec = parse_job(body)
        status = self.status_writer.base(
            JobStatus.from_json(body.get("status")),
            (body.get("metadata") or {}).get("resourceVersion"),
        )
        workers = tuple(v for v in views if v.role == names.ROLE_WORKER)
        etcd_pods = tuple(v for v in views if v.role == names.ROLE_ETCD)
        rejection: planning.Rejection | None = None
        tls = EtcdTlsView()
        if not status.phase.finished:
            try:
                tls = await self._tls_reader.read(spec)
            except PermanentKubeError as exc:
                rejection = planning.Rejection(exc.what, exc.status, exc.server_message or str(exc))
        self._tls = tls.tls
        changed, self._inputs = inputs != self._inputs, inputs
        probe_at = self._clock()
        steady = not changed and cadence.steady(self._calm, probe_at, self._settings.cadence)
        due = self._rounds.due(steady, probe_at)
        observed = await self._observe(
            spec,
            status,
            workers=workers,
            etcd_pods=etcd_pods,
            lost_nodes=lost_nodes,
            due=due,
            tls=tls,
        )

        # Plan.
        now = self._clock()
        plan = planning.plan(
            job,
            spec=spec,
            generation=generation,
            status=status,
            observed=observed,
            now=now,
            settings=self._stall_settings(),
            services=services,
            policies=None if self._policies_created else self._settings.policies,
        )

        # Act.
        new_status = plan.status
        if plan.commit_first:
            new_status = await self.status_writer.write(new_status)
        outcome = await self._executor.run(plan.actions, new_status, tls=self._tls)
        self._policies_created = self._policies_created or outcome.policies_created
        rejection = rejection or outcome.rejection
        new_status, rejected = planning.note_rejection(
            outcome.status, rejection, now=now, generation=generation
        )
        events = [*plan.events, *([rejected] if rejected is not None else [])]
        if outcome.refused is not None:
            new_status, refusal = kueue.report_refusal(new_status, status, outcome.refused)
            events += [planning.Event(*refusal)] if refusal else []
        self._rejections = self._rejections + 1 if rejection is not None else 0
        new_status = await self.status_writer.write(new_status)
        await self._executor.post_events(events, now)
        if plan.new_stall is not None:
            metrics.stall_started(job.namespace, job.name, plan.new_stall)
        metrics.publish(job.namespace, job.name, new_status)
        interval = self._next_interval(new_status, workers, observed, changed, now)
        return StepResult(new_status, interval, outcome.delete_requested)

    async def _observe(
        self,
        spec: JobSpec,
        status: JobStatus,
        *,
        workers: tuple[PodView, ...],
        etcd_pods: tuple[PodView, ...],
        lost_nodes: frozenset[str],
        due: cadence.Due,
        tls: EtcdTlsView,
    ) -> Observed:
        if status.phase.finished:
            self._rounds.reset()
            return Observed(workers=workers, etcd_pods=etcd_pods, lost_nodes=lost_nodes)
        kueue_reason = await self._kueue_reason(spec, workers)
        targets = {p.name: p.ip for p in workers if p.ip and p.phase is PodPhase.RUNNING}
        current = current_etcd(etcd_pods, status.etcd.generation)
        endpoints: list[str] = []
        if spec.etcd.mode is EtcdMode.EXTERNAL:
            endpoints = [str(e) for e in spec.etcd.endpoints]
        elif current is not None and current.ip and current.phase is PodPhase.RUNNING:
            endpoints = [f"{current.ip}:{names.ETCD_CLIENT_PORT}"]
        answers = await self._rounds.answers(targets, endpoints, due, tls.tls)
        etcd_reachable = answers.etcd_reachable
        if not endpoints and current is not None and current.phase is PodPhase.FAILED:
            etcd_reachable = False
        return Observed(
            workers=workers,
            etcd_pods=etcd_pods,
            reports=answers.reports.valid,
            invalid_reports=answers.reports.invalid,
            lost_nodes=lost_nodes,
            etcd_reachable=etcd_reachable,
            reports_fresh=answers.reports_fresh,
            kueue_reason=kueue_reason,
            tls_secret_missing=tls.secret_missing,
        )

    async def _kueue_reason(self, spec: JobSpec, workers: tuple[PodView, ...]) -> str | None:
        """Kueue's reason the core is not admitted, read from its Workload while a core pod is
        gated; ``None`` when unknown (not queued, no Workload yet, or no read access)."""
        if spec.kueue is None or not any(p.gated and kueue.is_core(spec, p.index) for p in workers):
            return None
        try:
            workload = await self._kube.get_workload(
                self._job.namespace, kueue.group_name(self._job)
            )
        except KubeError as exc:
            log.debug("job %s/%s: %s", self._job.namespace, self._job.name, exc)
            return None
        return kueue.workload_reason(workload)

    def _stall_settings(self) -> StallSettings:
        stall = self._settings.stall
        period = progress.sample_period(
            stall.progress_sample, self._jobs(), stall.progress_writes_per_second
        )
        return stall if period == stall.progress_sample else replace(stall, progress_sample=period)

    def _next_interval(
        self,
        status: JobStatus,
        workers: tuple[PodView, ...],
        observed: Observed,
        changed: bool,
        now: float,
    ) -> float:
        """The wait before the next step: idle, active or steady, and backed off while the
        API server refuses a request (``retry.py``)."""
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

    def forget_written(self) -> None:
        """Re-read the status from the body on the next step (after an error)."""
        self.status_writer.forget()

    def adopt(self, job: Mapping[str, Any] | None) -> None:
        """Start from the stored job (read fresh when the loop starts)."""
        self.status_writer.adopt(job)


def _inputs_of(
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


def _digest(pods: Iterable[PodView]) -> tuple[tuple[Any, ...], ...]:
    """What a pod change that matters to the cadence looks like (not its every field)."""
    return tuple(
        sorted(
            (p.name, p.phase, p.ip, p.ready, p.deleting, p.node, p.start_failure is not None)
            for p in pods
        )
    )


def owned_pod(body: Mapping[str, Any], view: PodView) -> OwnedPod | None:
    """Index entry for a pod: ``None`` when no ElasticJob controls it."""
    refs = (body.get("metadata") or {}).get("ownerReferences") or []
    for ref in refs:
        if ref.get("kind") == names.KIND and ref.get("controller") and owned_by(body, ref["uid"]):
            return OwnedPod(str(ref["uid"]), view)
    return None


__all__ = ["JobLoop", "LoopSettings", "OwnedPod", "SpecError", "StepResult", "owned_pod"]
