"""What a step observes of its job beyond the indexes: the etcd TLS Secret, Kueue's Workload
and the probes of the agents and etcd (``probe_rounds.py``), reduced to an ``Observed``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from . import probes
from .core import cadence, kueue, names, planning
from .core.names import JobRef
from .core.node_conditions import NodeCondition
from .core.observed import Observed, PodPhase, PodView, current_etcd
from .core.spec import EtcdMode, JobSpec
from .core.status import JobStatus
from .etcd_tls import EtcdTlsReader, EtcdTlsView
from .kube import Kube, KubeError, PermanentKubeError
from .probe_rounds import ProbeRounds

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Observation:
    """One step's view of its job."""

    observed: Observed
    tls: probes.EtcdTls | None
    """How to speak TLS to the job's etcd (``None``: plain HTTP, or not known)."""
    rejection: planning.Rejection | None
    """The etcd TLS Secret cannot be used (it becomes ``RequestRejected``)."""


class Observer:
    """Reads what one job's plan needs beyond the indexes."""

    def __init__(self, kube: Kube, job: JobRef, rounds: ProbeRounds) -> None:
        self._kube = kube
        self._job = job
        self._rounds = rounds
        self._tls_reader = EtcdTlsReader(kube, job)

    async def observe(
        self,
        spec: JobSpec,
        status: JobStatus,
        *,
        workers: tuple[PodView, ...],
        etcd_pods: tuple[PodView, ...],
        lost_nodes: frozenset[str],
        due: Callable[[], cadence.Due],
        node_conditions: Mapping[str, tuple[NodeCondition, ...]] | None = None,
    ) -> Observation:
        """The job's ``Observed``; ``due`` says which probes are due, asked once the Secret is
        read; ``node_conditions``: the nodes with a bad condition, carried as they are. A
        finished job is probed no more. Raises ``KubeError``."""
        if status.phase.finished:
            self._rounds.reset()
            observed = Observed(workers=workers, etcd_pods=etcd_pods, lost_nodes=lost_nodes)
            return Observation(observed, None, None)
        rejection: planning.Rejection | None = None
        tls = EtcdTlsView()
        try:
            tls = await self._tls_reader.read(spec)
        except PermanentKubeError as exc:
            rejection = planning.Rejection(exc.what, exc.status, exc.server_message or str(exc))
        probe_due = due()
        kueue_reason = await self._kueue_reason(spec, workers)
        targets = {p.name: p.ip for p in workers if p.ip and p.phase is PodPhase.RUNNING}
        current = current_etcd(etcd_pods, status.etcd.generation)
        endpoints: list[str] = []
        if spec.etcd.mode is EtcdMode.EXTERNAL:
            endpoints = [str(e) for e in spec.etcd.endpoints]
        elif current is not None and current.ip and current.phase is PodPhase.RUNNING:
            endpoints = [f"{current.ip}:{names.ETCD_CLIENT_PORT}"]
        answers = await self._rounds.answers(targets, endpoints, probe_due, tls.tls)
        etcd_reachable = answers.etcd_reachable
        if not endpoints and current is not None and current.phase is PodPhase.FAILED:
            etcd_reachable = False
        observed = Observed(
            workers=workers,
            etcd_pods=etcd_pods,
            reports=answers.reports.valid,
            invalid_reports=answers.reports.invalid,
            lost_nodes=lost_nodes,
            etcd_reachable=etcd_reachable,
            reports_fresh=answers.reports_fresh,
            kueue_reason=kueue_reason,
            tls_secret_missing=tls.secret_missing,
            node_conditions=dict(node_conditions or {}),
        )
        return Observation(observed, tls.tls, rejection)

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
