"""Pure builders of the objects the operator creates: worker pods, managed etcd, Services.

Each builder takes what it needs as arguments and returns a new dict; none reads global settings.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any

from elasticjob_agent.protocol.checkpoint import DEFAULT_PORT as CHECKPOINT_PORT
from elasticjob_agent.protocol.endpoints import Endpoint, TlsFiles
from elasticjob_agent.protocol.health import DEFAULT_HEALTH_PORT

from . import kueue, names
from .agent_command import (
    AGENT,
    POD_IP_ENV,
    AgentTarget,
    agent_args,
    training_argv,
)
from .checkpointing import checkpoint_env, with_checkpoint_memory
from .spec import EtcdMode, JobSpec, SpecError

GPU_RESOURCE = "nvidia.com/gpu"
ETCD_DATA_ROOT = "/var/lib/elasticjob-etcd"
ETCD_TLS_VOLUME = "elasticjob-etcd-tls"
WORKER_TLS = TlsFiles(
    cacert=f"{names.ETCD_TLS_DIR}/{names.TLS_CA}",
    cert=f"{names.ETCD_TLS_DIR}/{names.TLS_CERT}",
    key=f"{names.ETCD_TLS_DIR}/{names.TLS_KEY}",
)
"""The etcd client files as a worker pod sees them (mounted from the job's TLS Secret)."""
ETCD_UID = 65532
"""The managed etcd runs as this unprivileged user (the etcd image works as any uid)."""
WORKER_GRACE_SECONDS = 60
"""A worker pod's grace period unless the template sets one (the agent's shutdown fits in it)."""
ETCD_DEFAULT_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}}
"""The managed etcd's resources unless ``spec.etcd.resources`` sets them."""
SHM_VOLUME = "elasticjob-shm"
SHM_PATH = "/dev/shm"


def rdzv_endpoints(job: names.JobRef, spec: JobSpec) -> tuple[Endpoint, ...]:
    """etcd client endpoints the agents use: the managed Service or the external list, with
    the worker's TLS files when the job's etcd speaks TLS (never silently downgraded)."""
    if spec.etcd.mode is EtcdMode.EXTERNAL:
        hosts = spec.etcd.endpoints
    else:
        service = names.etcd_service_name(job.name)
        hosts = (Endpoint(f"{service}.{job.namespace}.svc", names.ETCD_CLIENT_PORT),)
    tls = WORKER_TLS if spec.etcd.tls else None
    return tuple(Endpoint(e.host, e.port, tls) for e in hosts)


def etcd_tls_secret(job: names.JobRef, spec: JobSpec) -> str | None:
    """The Secret with the client certificate the job's agents present, if its etcd is TLS."""
    if not spec.etcd.tls:
        return None
    if spec.etcd.mode is EtcdMode.EXTERNAL:
        return spec.etcd.tls_secret_name
    return names.etcd_tls_secret_name(job.name)


def build_etcd_tls_secret(job: names.JobRef, data: Mapping[str, str]) -> dict[str, Any]:
    """The Secret of the managed etcd's certificates (``pki.JobPki.secret_data()``), owned by
    the job: deleted with it, never rewritten while it lives."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": names.etcd_tls_secret_name(job.name),
            "namespace": job.namespace,
            "labels": {names.LABEL_JOB: job.name},
            "ownerReferences": [job.owner_reference()],
        },
        "stringData": dict(data),
    }


def gpus_per_node(spec: JobSpec) -> int:
    """GPUs each worker pod requests (0 for ``device: cpu``)."""
    if spec.device != "gpu":
        return 0
    trainer = spec.template["spec"]["containers"][spec.trainer_index]
    limits = (trainer.get("resources") or {}).get("limits") or {}
    if GPU_RESOURCE in limits:
        try:
            return int(limits[GPU_RESOURCE])
        except (TypeError, ValueError):
            raise SpecError(
                f"spec.template.spec.containers[trainer].resources.limits[{GPU_RESOURCE}] "
                f"must be an integer, got {limits[GPU_RESOURCE]!r}"
            ) from None
    if spec.nproc_per_node == "gpu":
        raise SpecError(
            "spec.nprocPerNode 'gpu' needs the trainer container to set "
            f"resources.limits[{GPU_RESOURCE}]"
        )
    return int(spec.nproc_per_node)


def nproc_per_node(spec: JobSpec) -> int:
    if spec.nproc_per_node == "gpu":
        return gpus_per_node(spec)
    return int(spec.nproc_per_node)


def build_worker_pod(job: names.JobRef, spec: JobSpec, index: int, attempt: int) -> dict[str, Any]:
    """Worker pod ``index`` (attempt ``attempt``): the template with the trainer under the agent."""
    name = names.worker_pod_name(job.name, index, attempt)
    template = copy.deepcopy(dict(spec.template))
    meta = dict(template.get("metadata") or {})
    pod_spec: dict[str, Any] = dict(template["spec"])
    containers = [dict(c) for c in pod_spec["containers"]]
    trainer = containers[spec.trainer_index]

    secret = etcd_tls_secret(job, spec)
    # The user's own grace period wins; ours covers the workers' SIGTERM-to-SIGKILL time plus
    # the agent's leave (docs/operator.md, "Pod deletion").
    grace = pod_spec.get("terminationGracePeriodSeconds")
    if not isinstance(grace, int) or isinstance(grace, bool) or grace < 0:
        grace = WORKER_GRACE_SECONDS
    pod_spec["terminationGracePeriodSeconds"] = grace
    target = AgentTarget(
        rdzv_endpoints=rdzv_endpoints(job, spec),
        run_id=job.run_id,
        node_id=name,
        nproc_per_node=nproc_per_node(spec),
        grace_seconds=grace,
    )
    argv = training_argv(trainer.get("command", []), trainer.get("args", []))
    trainer["command"] = [AGENT]
    trainer["args"] = agent_args(spec, target, argv)
    trainer["env"] = [
        *[e for e in trainer.get("env", []) if e.get("name") != POD_IP_ENV],
        {"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    ports = [p for p in trainer.get("ports", []) if p.get("containerPort") != DEFAULT_HEALTH_PORT]
    ports.append(
        {"name": names.HEALTH_PORT_NAME, "containerPort": DEFAULT_HEALTH_PORT, "protocol": "TCP"}
    )
    if spec.checkpoint is not None:
        # The agents' checkpoint peer channel (docs/checkpoints.md): their env, their port, and
        # the memory their shards take in the pod's /dev/shm added to the trainer's request.
        trainer["env"] += checkpoint_env(
            spec.checkpoint,
            pod_ip_env=POD_IP_ENV,
            tls=WORKER_TLS if secret is not None else None,
        )
        ports = [p for p in ports if p.get("containerPort") != CHECKPOINT_PORT]
        ports.append({"name": "checkpoint", "containerPort": CHECKPOINT_PORT, "protocol": "TCP"})
    trainer["ports"] = ports
    gpus = gpus_per_node(spec)
    if gpus:
        resources = copy.deepcopy(trainer.get("resources") or {})
        limits = dict(resources.get("limits") or {})
        limits.setdefault(GPU_RESOURCE, gpus)
        resources["limits"] = limits
        trainer["resources"] = resources
    if secret is not None:
        # Only the client side of the Secret: the server key stays with etcd.
        trainer["volumeMounts"] = [
            *[m for m in trainer.get("volumeMounts", []) if m.get("name") != ETCD_TLS_VOLUME],
            {"name": ETCD_TLS_VOLUME, "mountPath": names.ETCD_TLS_DIR, "readOnly": True},
        ]
        # The job's own Secret holds the agents' pair under its client keys.
        client_files = (
            [
                (names.TLS_CA, names.TLS_CA),
                (names.TLS_CLIENT_CERT, names.TLS_CERT),
                (names.TLS_CLIENT_KEY, names.TLS_KEY),
            ]
            if spec.etcd.mode is EtcdMode.MANAGED
            else [(k, k) for k in names.TLS_FILES]
        )
        pod_spec["volumes"] = [
            *[v for v in pod_spec.get("volumes", []) if v.get("name") != ETCD_TLS_VOLUME],
            {
                "name": ETCD_TLS_VOLUME,
                "secret": {
                    "secretName": secret,
                    # Readable whatever user the trainer runs as; the pod is one tenant's.
                    "defaultMode": 0o444,
                    "items": [{"key": k, "path": p} for k, p in client_files],
                },
            },
        ]
    if not any(m.get("mountPath") == SHM_PATH for m in trainer.get("volumeMounts", [])):
        # The container runtime's /dev/shm is 64 MiB: NCCL and DataLoader workers need more.
        # A memory-backed emptyDir counts against the pod's memory limit, as shared memory does.
        trainer["volumeMounts"] = [
            *trainer.get("volumeMounts", []),
            {"name": SHM_VOLUME, "mountPath": SHM_PATH},
        ]
        pod_spec["volumes"] = [
            *[v for v in pod_spec.get("volumes", []) if v.get("name") != SHM_VOLUME],
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}},
        ]
    if spec.checkpoint is not None:
        trainer["resources"] = with_checkpoint_memory(
            trainer.get("resources"), spec.checkpoint.memory_limit
        )
    containers[spec.trainer_index] = trainer

    pod_spec["containers"] = containers
    # The operator replaces failed pods itself; a kubelet restart would hide failures from it.
    pod_spec["restartPolicy"] = "Never"
    pod_spec.setdefault("subdomain", names.workers_service_name(job.name))

    kueue_labels, kueue_annotations = kueue.worker_metadata(job, spec, index)
    labels = {
        **dict(meta.get("labels") or {}),
        **kueue_labels,
        **names.worker_selector(job.name),
        names.LABEL_INDEX: str(index),
        names.LABEL_ATTEMPT: str(attempt),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": labels,
            "annotations": {**dict(meta.get("annotations") or {}), **kueue_annotations},
            "ownerReferences": [job.owner_reference()],
        },
        "spec": pod_spec,
    }


GPU_LABEL_DOMAIN = "nvidia.com/"
"""Node labels, taints and resources of GPUs (the device plugin's and GPU feature discovery's):
what of the workers' placement the managed etcd does not inherit."""


def _not_gpu(key: object) -> bool:
    return not (isinstance(key, str) and key.startswith(GPU_LABEL_DOMAIN))


def _without_gpu_terms(node_affinity: Mapping[str, Any]) -> dict[str, Any]:
    """``node_affinity`` less its expressions on GPU labels; a term left empty is dropped (an
    empty term would match no node), and so is a rule left without terms."""

    def term(raw: Mapping[str, Any]) -> dict[str, Any]:
        kept = {
            part: [e for e in raw.get(part) or [] if _not_gpu(e.get("key"))]
            for part in ("matchExpressions", "matchFields")
        }
        return {part: exprs for part, exprs in kept.items() if exprs}

    result: dict[str, Any] = {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = [t for t in (term(t) for t in required.get("nodeSelectorTerms") or []) if t]
    if terms:
        result["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    preferred = [
        {**p, "preference": term(p.get("preference") or {})}
        for p in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    ]
    preferred = [p for p in preferred if p["preference"]]
    if preferred:
        result["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return copy.deepcopy(result)


def etcd_placement(spec: JobSpec) -> dict[str, Any]:
    """Where the managed etcd may run, and at what priority: ``spec.etcd``'s ``nodeSelector``,
    ``tolerations``, ``affinity`` and ``priorityClassName`` where set. What is unset follows the
    workers' template (so the etcd stays where its agents can reach it, e.g. on a tainted pool)
    less everything on GPU labels and taints (``GPU_LABEL_DOMAIN``): the etcd needs no GPU and
    must not take a GPU node's place. The template's ``imagePullSecrets`` always come along (a
    private registry serves the etcd image too)."""
    etcd = spec.etcd
    template_spec = spec.template.get("spec") or {}
    placement: dict[str, Any] = {}
    if etcd.node_selector is not None:
        selector = dict(etcd.node_selector)
    else:
        selector = {
            k: v for k, v in (template_spec.get("nodeSelector") or {}).items() if _not_gpu(k)
        }
    if selector:
        placement["nodeSelector"] = selector
    if etcd.tolerations is not None:
        tolerations = [copy.deepcopy(dict(t)) for t in etcd.tolerations]
    else:
        tolerations = [
            copy.deepcopy(dict(t))
            for t in template_spec.get("tolerations") or []
            if isinstance(t, Mapping) and _not_gpu(t.get("key"))
        ]
    if tolerations:
        placement["tolerations"] = tolerations
    if etcd.affinity is not None:
        affinity = copy.deepcopy(dict(etcd.affinity))
    else:
        inherited = (template_spec.get("affinity") or {}).get("nodeAffinity")
        node_affinity = _without_gpu_terms(inherited) if inherited else {}
        affinity = {"nodeAffinity": node_affinity} if node_affinity else {}
    if affinity:
        placement["affinity"] = affinity
    priority = etcd.priority_class_name or template_spec.get("priorityClassName")
    if priority:
        placement["priorityClassName"] = priority
    if template_spec.get("imagePullSecrets"):
        placement["imagePullSecrets"] = copy.deepcopy(template_spec["imagePullSecrets"])
    return placement


def build_etcd_pod(job: names.JobRef, spec: JobSpec, generation: int) -> dict[str, Any]:
    """The managed single-member etcd of a job; a new generation starts with empty data."""
    name = names.etcd_pod_name(job.name, generation)
    tls = spec.etcd.tls
    scheme = "https" if tls else "http"
    service = f"{names.etcd_service_name(job.name)}.{job.namespace}.svc"
    container: dict[str, Any] = {
        "name": "etcd",
        "image": spec.etcd.image,
        "command": [
            "etcd",
            f"--name={name}",
            f"--data-dir={ETCD_DATA_ROOT}/$(POD_UID)",
            f"--listen-client-urls={scheme}://0.0.0.0:{names.ETCD_CLIENT_PORT}",
            f"--advertise-client-urls={scheme}://{service}:{names.ETCD_CLIENT_PORT}",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            f"--initial-cluster={name}=http://127.0.0.1:2380",
            f"--listen-metrics-urls=http://0.0.0.0:{names.ETCD_METRICS_PORT}",
            *(
                [
                    # Mutual TLS: only holders of a certificate signed by the job's own CA.
                    "--client-cert-auth",
                    f"--trusted-ca-file={names.ETCD_SERVER_TLS_DIR}/{names.TLS_CA}",
                    f"--cert-file={names.ETCD_SERVER_TLS_DIR}/{names.TLS_CERT}",
                    f"--key-file={names.ETCD_SERVER_TLS_DIR}/{names.TLS_KEY}",
                ]
                if tls
                else []
            ),
        ],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        ],
        "ports": [
            {"name": "client", "containerPort": names.ETCD_CLIENT_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": names.ETCD_METRICS_PORT, "protocol": "TCP"},
        ],
        "volumeMounts": [
            {"name": "data", "mountPath": ETCD_DATA_ROOT},
            *(
                [
                    {
                        "name": ETCD_TLS_VOLUME,
                        "mountPath": names.ETCD_SERVER_TLS_DIR,
                        "readOnly": True,
                    }
                ]
                if tls
                else []
            ),
        ],
        # A second witness of readiness besides the operator's own probe (planning trusts
        # either). Informational only: the Service publishes not-ready addresses, so a probe
        # that flakes under load never takes etcd away from the agents.
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": names.ETCD_METRICS_PORT},
            "periodSeconds": 2,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
    }
    # Requests by default: a BestEffort etcd is the first to starve on a busy node, and a stalled
    # etcd lets leases lapse, which the agents must then count as lost members.
    container["resources"] = copy.deepcopy(dict(spec.etcd.resources or ETCD_DEFAULT_RESOURCES))
    # The `restricted` PodSecurity profile: etcd needs no privilege, root or writable image.
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": {
                **names.etcd_selector(job.name),
                names.LABEL_ETCD_GENERATION: str(generation),
            },
            "ownerReferences": [job.owner_reference()],
        },
        "spec": {
            **etcd_placement(spec),
            "restartPolicy": "Never",
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": ETCD_UID,
                "runAsGroup": ETCD_UID,
                # The TLS Secret's files (mode 0440) belong to this group, so etcd reads them.
                "fsGroup": ETCD_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                *(
                    [
                        {
                            "name": ETCD_TLS_VOLUME,
                            "secret": {
                                "secretName": names.etcd_tls_secret_name(job.name),
                                "defaultMode": 0o440,
                                "items": [{"key": k, "path": k} for k in names.TLS_FILES],
                            },
                        }
                    ]
                    if tls
                    else []
                ),
            ],
        },
    }


def build_etcd_service(job: names.JobRef) -> dict[str, Any]:
    """ClusterIP Service of the managed etcd: agents keep one address across generations."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.etcd_service_name(job.name),
            "namespace": job.namespace,
            "labels": names.etcd_selector(job.name),
            "ownerReferences": [job.owner_reference()],
        },
        "spec": {
            "selector": names.etcd_selector(job.name),
            "publishNotReadyAddresses": True,
            "ports": [
                {
                    "name": "client",
                    "port": names.ETCD_CLIENT_PORT,
                    "targetPort": names.ETCD_CLIENT_PORT,
                }
            ],
        },
    }


def build_workers_service(job: names.JobRef) -> dict[str, Any]:
    """Headless Service over the workers (stable DNS, and a place to find the health ports)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.workers_service_name(job.name),
            "namespace": job.namespace,
            "labels": names.worker_selector(job.name),
            "ownerReferences": [job.owner_reference()],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": names.worker_selector(job.name),
            "ports": [
                {
                    "name": names.HEALTH_PORT_NAME,
                    "port": DEFAULT_HEALTH_PORT,
                    "targetPort": DEFAULT_HEALTH_PORT,
                }
            ],
        },
    }


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    """Whether ``obj`` has a controller owner reference to the job with ``uid``."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid and r.get("controller") for r in refs)


def with_avoided_nodes(pod: Mapping[str, Any], nodes: Collection[str]) -> dict[str, Any]:
    """``pod`` (a manifest) kept off ``nodes``: a required node affinity on each node's name
    (``metadata.name NotIn``, one node each: the API server takes one value per field
    requirement), added to every term of the template's own required affinity (its terms are
    ORed, so each must exclude the nodes), or as the one term when it has none. The template's
    preferences and other affinities stay as they are."""
    result = copy.deepcopy(dict(pod))
    if not nodes:
        return result
    keep_off = [
        {"key": "metadata.name", "operator": "NotIn", "values": [node]}
        for node in sorted(set(nodes))
    ]
    spec = result.setdefault("spec", {})
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, Mapping)]
    required["nodeSelectorTerms"] = [
        {
            **t,
            "matchFields": [
                *(f for f in t.get("matchFields") or [] if f not in keep_off),
                *keep_off,
            ],
        }
        for t in terms or [{}]
    ]
    return result
