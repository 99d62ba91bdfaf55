"""The one module that talks to the Kubernetes API (kubernetes_asyncio).

Client errors are wrapped once, here, into ``KubeError`` subclasses: ``TransientKubeError`` is
worth a retry, ``PermanentKubeError`` is not. Creates are idempotent (an existing object of the
same name counts as created) and deletes tolerate objects that are already gone.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Awaitable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from .core import names, quarantine
from .core.conditions import rfc3339
from .core.leadership import LeaseRecord
from .core.names import JobRef

T = TypeVar("T")

MERGE_PATCH = "application/merge-patch+json"
TAINT_ATTEMPTS = 3
"""Reads and patches of a node that keeps changing between the two before giving up."""
COMPONENT = "elasticjob-operator"


class KubeError(Exception):
    """An API call failed."""


class TransientKubeError(KubeError):
    """Worth retrying: server errors, throttling, conflicts, the network."""


class PermanentKubeError(KubeError):
    """The request itself is wrong (invalid, forbidden): retrying cannot help."""

    def __init__(
        self, message: str, status: int = 0, server_message: str = "", what: str = ""
    ) -> None:
        super().__init__(message)
        self.what = what or message
        """The request, e.g. ``create Pod ns/name``."""
        self.status = status
        """The HTTP status (403, 422, ...), 0 when not from the API server."""
        self.server_message = server_message
        """The API server's own explanation (``Status.message``), for conditions and Events."""


class ConflictKubeError(TransientKubeError):
    """The object changed since it was read (409 on a write guarded by ``resourceVersion``)."""


def server_message(body: Any) -> str:
    """``Status.message`` of an API error body (JSON text), else the body's start."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    try:
        message = json.loads(text).get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message)[:1000] if message else text[:500]


def _wrap(exc: Exception, what: str) -> KubeError:
    if isinstance(exc, ApiException):
        status = exc.status or 0
        message = server_message(exc.body)
        detail = f"{what}: HTTP {status} {exc.reason}: {message}"
        if status in (400, 403, 422):
            return PermanentKubeError(detail, status, message, what)
        if status == 409:
            return ConflictKubeError(detail)
        return TransientKubeError(detail)
    return TransientKubeError(f"{what}: {exc!r}")


async def _request(what: str, call: Awaitable[T], *, tolerate: Collection[int] = ()) -> T | None:
    """Await one API call. ``None`` when the server answered with a status in ``tolerate``
    (404 for "gone already", 409 for "exists already"); every other failure is wrapped once
    into a ``KubeError`` that names ``what`` was asked."""
    try:
        return await call
    except ApiException as exc:
        if exc.status in tolerate:
            return None
        raise _wrap(exc, what) from exc
    except (TimeoutError, OSError) as exc:
        raise _wrap(exc, what) from exc


async def _unread(what: str, call: Awaitable[Any], *, tolerate: Collection[int] = ()) -> bool:
    """Await one API call made with ``_preload_content=False`` whose answer we do not need:
    ``True`` on success, ``False`` on a status in ``tolerate``, else a ``KubeError`` as from
    ``_request``. The client would otherwise turn every answer into its models (a whole Pod,
    with every timestamp parsed): most of the operator's CPU while a thousand jobs started."""
    return await _read(what, call, tolerate=tolerate) is not None


async def _read(what: str, call: Awaitable[Any], *, tolerate: Collection[int] = ()) -> bytes | None:
    """``_unread``'s call, keeping the answer's body: ``None`` on a status in ``tolerate``."""
    try:
        response = await call
        try:
            body: bytes = await response.read()
        finally:
            response.release()
    except (TimeoutError, OSError) as exc:
        raise _wrap(exc, what) from exc
    if 200 <= response.status <= 299:
        return body
    if response.status in tolerate:
        return None
    error = ApiException(status=response.status, reason=response.reason)
    error.body = body
    raise _wrap(error, what)


@dataclass(frozen=True)
class OwnedData:
    data: dict[str, str]
    controller_uid: str | None


class Kube:
    """Typed operations on the objects of ElasticJobs."""

    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        # Typed as Any: we pass plain dicts (the client serialises them) and private kwargs
        # such as ``_content_type`` that its stubs do not declare.
        self._core: Any = client.CoreV1Api(api)
        self._custom: Any = client.CustomObjectsApi(api)
        self._coordination: Any = client.CoordinationV1Api(api)
        self._networking: Any = client.NetworkingV1Api(api)

    @classmethod
    async def connect(cls, config_file: str | None = None) -> Kube:
        """In-cluster credentials in a pod, else ``config_file``, ``$KUBECONFIG`` or
        ``~/.kube/config``."""
        if (
            config_file is None
            and os.environ.get("KUBERNETES_SERVICE_HOST")
            and not os.environ.get("KUBECONFIG")
        ):
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            return cls(client.ApiClient())
        configuration = client.Configuration()
        await config.load_kube_config(config_file=config_file, client_configuration=configuration)
        return cls(client.ApiClient(configuration))

    async def close(self) -> None:
        await self._api.close()

    async def create(self, manifest: Mapping[str, Any]) -> bool:
        """Create a Pod, Service, Secret or NetworkPolicy; ``False`` when one of that name
        already exists."""
        kind = manifest["kind"]
        ns = manifest["metadata"]["namespace"]
        name = manifest["metadata"]["name"]
        creators = {
            "Pod": self._core.create_namespaced_pod,
            "Service": self._core.create_namespaced_service,
            "Secret": self._core.create_namespaced_secret,
            "NetworkPolicy": self._networking.create_namespaced_network_policy,
        }
        if kind not in creators:
            raise PermanentKubeError(f"cannot create kind {kind!r}")
        return await _unread(
            f"create {kind} {ns}/{name}",
            creators[kind](ns, dict(manifest), _preload_content=False),
            tolerate=(409,),
        )

    async def delete_pod(self, namespace: str, name: str, force: bool = False) -> None:
        """Delete a pod; ``force`` uses grace period 0 (its node is gone). Gone already is fine."""
        body = client.V1DeleteOptions(grace_period_seconds=0 if force else None)
        await _unread(
            f"delete pod {namespace}/{name}",
            self._core.delete_namespaced_pod(name, namespace, body=body, _preload_content=False),
            tolerate=(404,),
        )

    async def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        await _unread(
            f"annotate pod {namespace}/{name}",
            self._core.patch_namespaced_pod(
                name,
                namespace,
                {"metadata": {"annotations": dict(annotations)}},
                _content_type=MERGE_PATCH,
                _preload_content=False,
            ),
            tolerate=(404,),
        )

    async def taint_node(self, name: str) -> bool:
        """Add the bad-node taint (``quarantine.taint_patch``) to node ``name``: ``True`` once
        it has it, ``False`` when the node is gone. A node changed between the read and the
        patch is read again, at most ``TAINT_ATTEMPTS`` times."""
        for attempt in range(1, TAINT_ATTEMPTS + 1):
            node = await self._read_node(name)
            if node is None:
                return False
            patch = quarantine.taint_patch(node)
            if patch is None:
                return True
            try:
                return await _unread(
                    f"taint node {name}",
                    self._core.patch_node(
                        name, patch, _content_type=MERGE_PATCH, _preload_content=False
                    ),
                    tolerate=(404,),
                )
            except ConflictKubeError:
                if attempt == TAINT_ATTEMPTS:
                    raise
        return False

    async def _read_node(self, name: str) -> dict[str, Any] | None:
        """Node ``name`` as the API returns it (JSON, not the client's models); ``None`` if
        gone."""
        body = await _read(
            f"read node {name}",
            self._core.read_node(name, _preload_content=False),
            tolerate=(404,),
        )
        return None if body is None else dict(json.loads(body))

    async def patch_job_status(
        self, job: JobRef, status: Mapping[str, Any], resource_version: str | None = None
    ) -> str | None:
        """Merge-patch ``status`` of the job (status subresource), guarded by the job's uid and,
        when given, by ``resource_version`` (``ConflictKubeError`` if the job changed since).
        Returns the job's new ``resourceVersion``."""
        metadata: dict[str, Any] = {"uid": job.uid}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        body = {"metadata": metadata, "status": dict(status)}
        result = await _request(
            f"patch status of {job.namespace}/{job.name}",
            self._custom.patch_namespaced_custom_object_status(
                names.GROUP,
                names.VERSION,
                job.namespace,
                names.PLURAL,
                job.name,
                body,
                _content_type=MERGE_PATCH,
            ),
        )
        version = ((result or {}).get("metadata") or {}).get("resourceVersion")
        return str(version) if version else None

    async def get_secret(self, namespace: str, name: str) -> OwnedData | None:
        """A Secret's data (decoded) and its controller's uid; ``None`` when it does not exist."""
        secret = await _request(
            f"get Secret {namespace}/{name}",
            self._core.read_namespaced_secret(name, namespace),
            tolerate=(404,),
        )
        if secret is None:
            return None
        data = {
            key: base64.b64decode(value).decode(errors="replace")
            for key, value in (secret.data or {}).items()
        }
        owner = next((r.uid for r in secret.metadata.owner_references or [] if r.controller), None)
        return OwnedData(data, owner)

    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await _request(
            f"get {namespace}/{name}",
            self._custom.get_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.PLURAL, name
            ),
            tolerate=(404,),
        )
        return result

    async def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Kueue's Workload ``name`` (read-only); ``None`` when it does not exist."""
        result: dict[str, Any] | None = await _request(
            f"get workload {namespace}/{name}",
            self._custom.get_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta2", namespace, "workloads", name
            ),
            tolerate=(404,),
        )
        return result

    async def delete_job(self, job: JobRef) -> None:
        """Delete the job (TTL after finishing); its owned objects go with it."""
        body = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=job.uid), propagation_policy="Background"
        )
        # 409: the uid precondition failed, a new job of that name is not ours to delete.
        await _request(
            f"delete {job.namespace}/{job.name}",
            self._custom.delete_namespaced_custom_object(
                names.GROUP, names.VERSION, job.namespace, names.PLURAL, job.name, body=body
            ),
            tolerate=(404, 409),
        )

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
        await _unread(
            f"post event {reason} for {job.namespace}/{job.name}",
            self._core.create_namespaced_event(job.namespace, body, _preload_content=False),
        )

    # -- leader election -------------------------------------------------------------------------

    async def read_lease(self, namespace: str, name: str) -> LeaseRecord:
        """The Lease (``resource_version`` ``None`` when it does not exist)."""
        lease = await _request(
            f"read lease {namespace}/{name}",
            self._coordination.read_namespaced_lease(name, namespace),
            tolerate=(404,),
        )
        if lease is None:
            return LeaseRecord()
        spec = lease.spec
        return LeaseRecord(
            holder=spec.holder_identity or "",
            duration_seconds=int(spec.lease_duration_seconds or 15),
            acquire_time=_stamp(spec.acquire_time),
            renew_time=_stamp(spec.renew_time),
            transitions=int(spec.lease_transitions or 0),
            resource_version=lease.metadata.resource_version,
        )

    async def write_lease(self, namespace: str, name: str, record: LeaseRecord) -> bool:
        """Create (no ``resource_version``) or replace the Lease guarded by ``resource_version``;
        ``False`` when another writer got there first (409)."""
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        if record.resource_version is not None:
            metadata["resourceVersion"] = record.resource_version
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": record.holder,
                "leaseDurationSeconds": record.duration_seconds,
                "acquireTime": record.acquire_time,
                "renewTime": record.renew_time,
                "leaseTransitions": record.transitions,
            },
        }
        if record.resource_version is None:
            call = self._coordination.create_namespaced_lease(namespace, body)
        else:
            call = self._coordination.replace_namespaced_lease(name, namespace, body)
        written = await _request(f"write lease {namespace}/{name}", call, tolerate=(409,))
        return written is not None


def micro_time(unix_time: float) -> str:
    """A ``MicroTime`` (the Lease's timestamps): RFC 3339 with microseconds."""
    return datetime.fromtimestamp(unix_time, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _stamp(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)
