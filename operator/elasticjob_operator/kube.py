"""The one module that talks to the Kubernetes API (kubernetes_asyncio).

Client errors are wrapped once, here, into ``KubeError`` subclasses: ``TransientKubeError`` is
worth a retry, ``PermanentKubeError`` is not. Creates are idempotent (an existing object of the
same name counts as created) and deletes tolerate objects that are already gone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from . import names
from .conditions import rfc3339
from .manifests import JobRef

MERGE_PATCH = "application/merge-patch+json"
COMPONENT = "elasticjob-operator"


class KubeError(Exception):
    """An API call failed."""


class TransientKubeError(KubeError):
    """Worth retrying: server errors, throttling, conflicts, the network."""


class PermanentKubeError(KubeError):
    """The request itself is wrong (invalid, forbidden): retrying cannot help."""


def _wrap(exc: Exception, what: str) -> KubeError:
    if isinstance(exc, ApiException):
        status = exc.status or 0
        detail = f"{what}: HTTP {status} {exc.reason}: {(exc.body or '')[:500]!s}"
        if status in (400, 403, 422):
            return PermanentKubeError(detail)
        return TransientKubeError(detail)
    return TransientKubeError(f"{what}: {exc!r}")


class Kube:
    """Typed operations on the objects of ElasticJobs."""

    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        # Typed as Any: we pass plain dicts (the client serialises them) and private kwargs
        # such as ``_content_type`` that its stubs do not declare.
        self._core: Any = client.CoreV1Api(api)
        self._custom: Any = client.CustomObjectsApi(api)

    @classmethod
    async def connect(cls) -> Kube:
        """In-cluster credentials in a pod, else ``$KUBECONFIG`` / ``~/.kube/config``."""
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            return cls(client.ApiClient())
        configuration = client.Configuration()
        await config.load_kube_config(client_configuration=configuration)
        return cls(client.ApiClient(configuration))

    async def close(self) -> None:
        await self._api.close()

    async def create(self, manifest: Mapping[str, Any]) -> bool:
        """Create a Pod or Service; ``False`` when one of that name already exists."""
        kind = manifest["kind"]
        ns = manifest["metadata"]["namespace"]
        name = manifest["metadata"]["name"]
        try:
            if kind == "Pod":
                await self._core.create_namespaced_pod(ns, dict(manifest))
            elif kind == "Service":
                await self._core.create_namespaced_service(ns, dict(manifest))
            else:
                raise PermanentKubeError(f"cannot create kind {kind!r}")
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise _wrap(exc, f"create {kind} {ns}/{name}") from exc
        except (TimeoutError, OSError) as exc:
            raise _wrap(exc, f"create {kind} {ns}/{name}") from exc
        return True

    async def delete_pod(self, namespace: str, name: str, force: bool = False) -> None:
        """Delete a pod; ``force`` uses grace period 0 (its node is gone). Gone already is fine."""
        body = client.V1DeleteOptions(grace_period_seconds=0 if force else None)
        try:
            await self._core.delete_namespaced_pod(name, namespace, body=body)
        except ApiException as exc:
            if exc.status == 404:
                return
            raise _wrap(exc, f"delete pod {namespace}/{name}") from exc
        except (TimeoutError, OSError) as exc:
            raise _wrap(exc, f"delete pod {namespace}/{name}") from exc

    async def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        try:
            await self._core.patch_namespaced_pod(
                name,
                namespace,
                {"metadata": {"annotations": dict(annotations)}},
                _content_type=MERGE_PATCH,
            )
        except ApiException as exc:
            if exc.status == 404:
                return
            raise _wrap(exc, f"annotate pod {namespace}/{name}") from exc
        except (TimeoutError, OSError) as exc:
            raise _wrap(exc, f"annotate pod {namespace}/{name}") from exc

    async def patch_job_status(self, job: JobRef, status: Mapping[str, Any]) -> None:
        """Merge-patch ``status`` of the job (status subresource), guarded by the job's uid."""
        body = {"metadata": {"uid": job.uid}, "status": dict(status)}
        try:
            await self._custom.patch_namespaced_custom_object_status(
                names.GROUP,
                names.VERSION,
                job.namespace,
                names.PLURAL,
                job.name,
                body,
                _content_type=MERGE_PATCH,
            )
        except ApiException as exc:
            raise _wrap(exc, f"patch status of {job.namespace}/{job.name}") from exc
        except (TimeoutError, OSError) as exc:
            raise _wrap(exc, f"patch status of {job.namespace}/{job.name}") from exc

    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self._custom.get_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.PLURAL, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _wrap(exc, f"get {namespace}/{name}") from exc
        except (TimeoutError, OSError) as exc:
            raise _wrap(exc, f"get {namespace}/{name}") from exc
        return result

    async def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Kueue's Workload ``name`` (read-only); ``None`` when it does not exist."""
        try:
            result: dict[str, Any] = await self._custom.get_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta2", namespace, "workloads", name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _wrap(exc, f"get workload {namespace}/{name}") from exc
        except (TimeoutError, OSError) as exc:
            raise _wrap(exc, f"get workload {namespace}/{name}") from exc
        return result

    async def delete_job(self, job: JobRef) -> None:
        """Delete the job (TTL after finishing); its owned objects go with it."""
        body = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=job.uid), propagation_policy="Background"
        )
        try:
            await self._custom.delete_namespaced_custom_object(
                names.GROUP, names.VERSION, job.namespace, names.PLURAL, job.name, body=body
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return
            raise _wrap(exc, f"delete {job.namespace}/{job.name}") from exc
        except (TimeoutError, OSError) as exc:
            raise _wrap(exc, f"delete {job.namespace}/{job.name}") from exc

    async def post_event(
        self, job: JobRef, type_: str, reason: str, message: str, now: float
    ) -> None:
        """A core/v1 Event about the job."""
        stamp = rfc3339(now)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{job.name}.", "namespace": job.namespace},
            "involvedObject": {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND,
                "name": job.name,
                "namespace": job.namespace,
                "uid": job.uid,
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
        }
        try:
            await self._core.create_namespaced_event(job.namespace, body)
        except ApiException as exc:
            raise _wrap(exc, f"post event {reason} for {job.namespace}/{job.name}") from exc
        except (TimeoutError, OSError) as exc:
            raise _wrap(exc, f"post event {reason} for {job.namespace}/{job.name}") from exc
