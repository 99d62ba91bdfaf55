"""How the operator speaks TLS to a job's etcd: the certificates Secret read (observed) and, for
a managed etcd, created once (an action of the plan, ``planning.CreateEtcdTlsSecret``).

The Secret is never regenerated while the job lives: an existing one is read, and used only if
the job controls it.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime

from . import probes
from .core import manifests, names, pki
from .core.names import JobRef
from .core.spec import EtcdMode, JobSpec
from .kube import Kube, PermanentKubeError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EtcdTlsView:
    """What a step knows of its TLS to the job's etcd."""

    tls: probes.EtcdTls | None = None
    """How to speak TLS to the job's etcd (``None``: plain HTTP, or not known yet)."""
    secret_missing: bool = False
    """The managed etcd's Secret does not exist yet: the plan creates it."""


class EtcdTlsReader:
    """Reads a job's etcd TLS Secret; the context made from it is kept (it never changes)."""

    def __init__(self, kube: Kube, job: JobRef) -> None:
        self._kube = kube
        self._job = job
        self._cache: tuple[str, probes.EtcdTls] | None = None

    async def read(self, spec: JobSpec) -> EtcdTlsView:
        """The operator's TLS to the job's etcd. Raises ``KubeError``; ``PermanentKubeError``
        when the Secret cannot be used (missing for an external etcd, not the job's, bad)."""
        job = self._job
        secret = manifests.etcd_tls_secret(job, spec)
        if secret is None:
            return EtcdTlsView()
        if self._cache is not None and self._cache[0] == secret:
            return EtcdTlsView(self._cache[1])
        managed = spec.etcd.mode is EtcdMode.MANAGED
        what = f"use Secret {job.namespace}/{secret}"
        found = await self._kube.get_secret(job.namespace, secret)
        if found is None and managed:
            return EtcdTlsView(secret_missing=True)
        if found is None:
            raise PermanentKubeError(
                f"{what}: not found",
                404,
                "the Secret does not exist (spec.etcd.tlsSecretName)",
                what,
            )
        if managed and found.controller_uid != job.uid:
            # Someone else's certificates would let them read the job's etcd: refuse.
            raise PermanentKubeError(
                f"{what}: not owned by this job",
                409,
                "a Secret of that name exists and is "
                "not owned by this job; delete it or rename the job",
                what,
            )
        try:
            if managed:
                made_pki = pki.JobPki.from_secret_data(found.data)
                service = f"{names.etcd_service_name(job.name)}.{job.namespace}.svc"
                tls = probes.client_tls(
                    made_pki.ca_cert, made_pki.client_cert, made_pki.client_key, service
                )
            else:
                data = found.data
                missing = [k for k in names.TLS_FILES if k not in data]
                if missing:
                    raise ValueError(f"the Secret lacks {', '.join(missing)}")
                tls = probes.client_tls(*(data[k] for k in names.TLS_FILES))
        except (ValueError, ssl.SSLError) as exc:
            raise PermanentKubeError(f"{what}: {exc}", 422, str(exc), what) from exc
        self._cache = (secret, tls)
        return EtcdTlsView(tls)


async def create_secret(kube: Kube, job: JobRef) -> None:
    """Generate the managed etcd's certificates and create their Secret (a create that finds
    one, a racing writer's, is a no-op: the next read decides whether it is usable). Raises
    ``KubeError``."""
    made = pki.generate(
        job.name, job.namespace, names.etcd_service_name(job.name), datetime.now(UTC)
    )
    await kube.create(manifests.build_etcd_tls_secret(job, made.secret_data()))
    log.info(
        "job %s/%s: etcd certificates created in Secret %s",
        job.namespace,
        job.name,
        names.etcd_tls_secret_name(job.name),
    )
