"""A job's status writes: guarded by ``resourceVersion``, merged on a conflict, skipped when
nothing changed.

The status written last is kept in memory because the watch that refreshes the job's body may
lag behind our own writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .core.names import JobRef
from .core.status import JobStatus, never_lower
from .kube import ConflictKubeError, Kube, KubeError

WRITE_ATTEMPTS = 4
"""Status writes tried per step when the job keeps changing under us (409 each time)."""


class StatusWriter:
    """Writes one job incarnation's status."""

    def __init__(self, kube: Kube, job: JobRef) -> None:
        self._kube = kube
        self._job = job
        self.written: JobStatus | None = None
        """What this writer wrote or adopted last; ``None``: read it from the body."""
        self._written_json: dict[str, Any] | None = None
        self._resource_version: str | None = None
        """The job's ``resourceVersion`` our next status write expects."""

    def base(self, stored: JobStatus, resource_version: str | None) -> JobStatus:
        """The status a step starts from: ``stored`` (the body's) raised to what we wrote last
        (the body may lag behind our writes). The body's ``resource_version`` is adopted when
        none is known."""
        if self._resource_version is None:
            self._resource_version = resource_version
        return never_lower(self.written, stored) if self.written is not None else stored

    async def write(self, status: JobStatus) -> JobStatus:
        """Write ``status`` guarded by ``resourceVersion``; on a conflict re-read the job, raise
        our counters to the stored ones (``never_lower``) and try again. Returns what was
        written (``status`` itself unless a conflict merged something in). Raises
        ``KubeError``."""
        job = self._job
        data = status.to_json()
        if data == self._written_json:
            return status
        for _ in range(WRITE_ATTEMPTS):
            try:
                version = await self._kube.patch_job_status(job, data, self._resource_version)
            except ConflictKubeError:
                stored = await self._kube.get_job(job.namespace, job.name)
                meta = (stored or {}).get("metadata") or {}
                if stored is None or meta.get("uid") != job.uid:
                    raise KubeError(f"job {job.namespace}/{job.name} is gone") from None
                self._resource_version = meta.get("resourceVersion")
                status = never_lower(status, JobStatus.from_json(stored.get("status")))
                data = status.to_json()
                continue
            self._resource_version = version
            self.written = status
            self._written_json = data
            return status
        raise KubeError(f"status of {job.namespace}/{job.name}: conflicts on every attempt")

    def forget(self) -> None:
        """Re-read the status from the body on the next step (after an error)."""
        self.written = None
        self._written_json = None
        self._resource_version = None

    def adopt(self, job: Mapping[str, Any] | None) -> None:
        """Start from the stored job (read fresh when the loop starts)."""
        status = JobStatus.from_json((job or {}).get("status"))
        self.written = status
        self._written_json = status.to_json()
        self._resource_version = ((job or {}).get("metadata") or {}).get("resourceVersion")
