"""One job's reconcile step: observe, plan (pure), apply. No kopf here; handlers.py drives it.

The step is level-triggered: it reads the whole state every time, so a missed event or an operator
restart costs at most one interval. The status this loop wrote last is kept in memory because the
watch that refreshes the job's body may lag behind our own writes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from . import kueue, metrics, names, planning, probes
from .kube import Kube, KubeError
from .manifests import JobRef, owned_by
from .observed import Observed, PodPhase, PodView
from .spec import EtcdMode, JobSpec, SpecError, parse_spec
from .stall import StallSettings
from .status import JobStatus, Phase

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoopSettings:
    """How often a job is reconciled and how patient the probes are."""

    interval: float = 2.0
    """Seconds between steps of an active job (stall detection resolution)."""
    idle_interval: float = 10.0
    """Seconds between steps of a finished or suspended job."""
    probe_timeout: float = 1.0
    """Timeout of one health or etcd probe."""
    stall: StallSettings = field(default_factory=StallSettings)


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
    ) -> None:
        self._kube = kube
        self._session = session
        self._job = job
        self._settings = settings
        self._clock = clock
        self._written: JobStatus | None = None
        self._written_json: dict[str, Any] | None = None

    async def step(
        self,
        body: Mapping[str, Any],
        pods: Iterable[OwnedPod],
        lost_nodes: frozenset[str],
        services: frozenset[str],
    ) -> StepResult:
        """One reconcile step; raises ``SpecError`` (unusable spec) or ``KubeError`` (API)."""
        started = time.monotonic()
        result = "error"
        try:
            outcome = await self._step(body, pods, lost_nodes, services)
            result = "ok"
            return outcome
        except SpecError:
            result = "invalid"
            raise
        finally:
            metrics.RECONCILES.labels(result).inc()
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)

    async def _step(
        self,
        body: Mapping[str, Any],
        pods: Iterable[OwnedPod],
        lost_nodes: frozenset[str],
        services: frozenset[str],
    ) -> StepResult:
        job = self._job
        spec = kueue.attach(parse_spec(body.get("spec") or {}), body)
        stored = JobStatus.from_json(body.get("status"))
        status = self._written if self._written is not None else stored
        generation = int((body.get("metadata") or {}).get("generation") or 0)

        views = [p.view for p in pods if p.owner_uid == job.uid]
        workers = tuple(v for v in views if v.role == names.ROLE_WORKER)
        etcd_pods = tuple(v for v in views if v.role == names.ROLE_ETCD)
        observed = await self._observe(spec, status, workers, etcd_pods, lost_nodes)
        now = self._clock()
        plan = planning.plan(
            job,
            spec=spec,
            generation=generation,
            status=status,
            observed=observed,
            now=now,
            settings=self._settings.stall,
            services=services,
        )
        new_status = plan.status
        if plan.commit_first:
            await self._write_status(new_status)
        delete_requested = False
        refused: str | None = None
        for action in plan.actions:
            if isinstance(action, planning.CreateObject):
                if refused is None:
                    refused = await self._create(action.manifest)
            elif isinstance(action, planning.DeletePod):
                await self._kube.delete_pod(job.namespace, action.name, force=action.force)
            elif isinstance(action, planning.MarkJoined):
                await self._kube.annotate_pod(
                    job.namespace, action.pod, {names.ANNOTATION_JOINED: str(action.round)}
                )
            elif isinstance(action, planning.WriteSeed):
                if await probes.write_seed(action.endpoint, action.key, action.value):
                    etcd = new_status.etcd
                    new_status = new_status.evolve(
                        etcd=type(etcd)(
                            etcd.generation,
                            etcd.ready_generation,
                            action.generation,
                            etcd.unreachable_since,
                        )
                    )
                    log.info(
                        "job %s/%s: restart seed written to etcd generation %d: %s",
                        job.namespace,
                        job.name,
                        action.generation,
                        action.value,
                    )
            elif isinstance(action, planning.DeleteJob):
                await self._kube.delete_job(job)
                delete_requested = True
        events = list(plan.events)
        if refused is not None:
            new_status, refusal = kueue.report_refusal(new_status, status, refused)
            events += [planning.Event(*refusal)] if refusal else []
        await self._write_status(new_status)
        for event in events:
            try:
                await self._kube.post_event(job, event.type, event.reason, event.message, now)
            except KubeError as exc:
                log.warning(
                    "job %s/%s: cannot post event %s: %s",
                    job.namespace,
                    job.name,
                    event.reason,
                    exc,
                )
        if plan.new_stall is not None:
            metrics.stall_started(job.namespace, job.name, plan.new_stall)
        metrics.publish(job.namespace, job.name, new_status)
        idle = new_status.phase.finished or new_status.phase is Phase.SUSPENDED
        interval = self._settings.idle_interval if idle else self._settings.interval
        return StepResult(new_status, interval, delete_requested)

    async def _create(self, manifest: Mapping[str, Any]) -> str | None:
        """Create an object; an admission webhook that cannot be called (Kueue down) is returned
        as a message for status and Events instead of raised: retrying hides it from the user."""
        try:
            await self._kube.create(manifest)
        except KubeError as exc:
            message = kueue.refusal_message(manifest, str(exc))
            if message is None:
                raise
            log.warning("job %s/%s: %s", self._job.namespace, self._job.name, message)
            return message
        return None

    async def _observe(
        self,
        spec: JobSpec,
        status: JobStatus,
        workers: tuple[PodView, ...],
        etcd_pods: tuple[PodView, ...],
        lost_nodes: frozenset[str],
    ) -> Observed:
        if status.phase.finished:
            return Observed(workers=workers, etcd_pods=etcd_pods, lost_nodes=lost_nodes)
        kueue_reason = await self._kueue_reason(spec, workers)
        timeout = self._settings.probe_timeout
        targets = {p.name: p.ip for p in workers if p.ip and p.phase is PodPhase.RUNNING}
        endpoints: list[str] = []
        if spec.etcd.mode is EtcdMode.EXTERNAL:
            endpoints = list(spec.etcd.endpoints)
        else:
            current = max(etcd_pods, key=lambda p: p.index, default=None)
            if current is not None and current.ip and current.phase is PodPhase.RUNNING:
                endpoints = [f"{current.ip}:{names.ETCD_CLIENT_PORT}"]
        reports_task = probes.fetch_reports(self._session, targets, timeout)
        if endpoints:
            reports, reachable = await asyncio.gather(
                reports_task, probes.probe_etcd(self._session, endpoints, timeout)
            )
            etcd_reachable: bool | None = reachable
        else:
            reports = await reports_task
            etcd_reachable = None
            current = max(etcd_pods, key=lambda p: p.index, default=None)
            if current is not None and current.phase is PodPhase.FAILED:
                etcd_reachable = False
        return Observed(
            workers=workers,
            etcd_pods=etcd_pods,
            reports=reports,
            lost_nodes=lost_nodes,
            etcd_reachable=etcd_reachable,
            kueue_reason=kueue_reason,
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

    async def _write_status(self, status: JobStatus) -> None:
        data = status.to_json()
        if data == self._written_json:
            return
        await self._kube.patch_job_status(self._job, data)
        self._written = status
        self._written_json = data

    def forget_written(self) -> None:
        """Re-read the status from the body on the next step (after an error)."""
        self._written = None
        self._written_json = None

    def adopt(self, stored: Mapping[str, Any] | None) -> None:
        """Start from the stored status (read fresh when the loop starts)."""
        status = JobStatus.from_json(stored)
        self._written = status
        self._written_json = status.to_json()


def owned_pod(body: Mapping[str, Any], view: PodView) -> OwnedPod | None:
    """Index entry for a pod: ``None`` when no ElasticJob controls it."""
    refs = (body.get("metadata") or {}).get("ownerReferences") or []
    for ref in refs:
        if ref.get("kind") == names.KIND and ref.get("controller") and owned_by(body, ref["uid"]):
            return OwnedPod(str(ref["uid"]), view)
    return None


__all__ = ["JobLoop", "LoopSettings", "OwnedPod", "SpecError", "StepResult", "owned_pod"]
