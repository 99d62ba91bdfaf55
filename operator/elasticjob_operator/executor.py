"""Runs a plan's actions and posts its Events: every write a step makes to the cluster but the
status (``status_writer.py``). Each action is idempotent, so a step cut short loses nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from . import etcd_tls, probes
from .core import kueue, names, planning
from .core.names import JobRef
from .core.status import JobStatus
from .kube import Kube, KubeError, PermanentKubeError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """What running a plan's actions did."""

    status: JobStatus
    """The plan's status with what the actions recorded (a seed written)."""
    delete_requested: bool = False
    """The job was deleted (``ttlSecondsAfterFinished``)."""
    rejection: planning.Rejection | None = None
    """The first request the API server refused (it becomes a condition and an Event)."""
    refused: str | None = None
    """An admission webhook that could not be called (Kueue down) refused a create."""
    policies_created: bool = False
    """The job's NetworkPolicies exist now."""


class Executor:
    """Applies one job's actions through our ``Kube`` boundary and the etcd probe client."""

    def __init__(self, kube: Kube, session: aiohttp.ClientSession, job: JobRef) -> None:
        self._kube = kube
        self._session = session
        self._job = job

    async def run(
        self,
        actions: Iterable[planning.Action],
        status: JobStatus,
        *,
        tls: probes.EtcdTls | None,
    ) -> Outcome:
        """Run ``actions`` in order. A refused request (``PermanentKubeError``) does not stop
        the others; the first one is returned. Raises ``KubeError`` for any other API error."""
        deleted = False
        rejection: planning.Rejection | None = None
        refused: str | None = None
        policies_created = False
        for action in actions:
            try:
                if isinstance(action, planning.CreateObject):
                    # After a refusal by an admission webhook (Kueue down), create nothing more.
                    if refused is None:
                        refused = await self._create(action.manifest)
                    continue
                if isinstance(action, planning.CreatePolicies):
                    for policy in action.manifests:
                        await self._kube.create(policy)
                    policies_created = True
                    continue
                status, done = await self._apply(action, status, tls)
            except PermanentKubeError as exc:
                # Not retried silently: the first refusal becomes a condition and an Event.
                rejection = rejection or planning.Rejection(
                    exc.what, exc.status, exc.server_message or str(exc)
                )
                continue
            deleted = deleted or done
        return Outcome(status, deleted, rejection, refused, policies_created)

    async def post_events(self, events: Iterable[planning.Event], now: float) -> None:
        """Post ``events``; one that cannot be posted is logged, never retried."""
        job = self._job
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

    async def _apply(
        self, action: planning.Action, status: JobStatus, tls: probes.EtcdTls | None
    ) -> tuple[JobStatus, bool]:
        """Run one action; returns the status (the seed's record) and whether the job was
        deleted. Raises ``KubeError``."""
        job = self._job
        if isinstance(action, planning.CreateEtcdTlsSecret):
            await etcd_tls.create_secret(self._kube, job)
        elif isinstance(action, planning.DeletePod):
            await self._kube.delete_pod(job.namespace, action.name, force=action.force)
        elif isinstance(action, planning.MarkJoined):
            await self._kube.annotate_pod(
                job.namespace, action.pod, {names.ANNOTATION_JOINED: str(action.round)}
            )
        elif isinstance(action, planning.MarkStoodBy):
            await self._kube.annotate_pod(
                job.namespace, action.pod, {names.ANNOTATION_STOOD_BY: "true"}
            )
        elif isinstance(action, planning.WriteSeed):
            if await probes.write_seed(
                self._session, action.endpoint, action.keys, action.seed, tls=tls
            ):
                etcd = status.etcd
                status = status.evolve(
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
                    dict(action.seed),
                )
        elif isinstance(action, planning.DeleteJob):
            await self._kube.delete_job(job)
            return status, True
        elif isinstance(action, planning.TaintNode) and await self._kube.taint_node(action.node):
            log.info("job %s/%s: node %s tainted as bad", job.namespace, job.name, action.node)
        return status, False
