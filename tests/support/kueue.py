"""Kueue in the end-to-end suites: queues and quotas, Workloads and what Kueue admitted, the
operator's namespaces that Kueue manages, and a queued GPU job."""

from __future__ import annotations

import json
from typing import Any

from elasticjob_localcluster import LocalCluster

from tests.support.operator_e2e import job_manifest

GPU = "nvidia.com/gpu"
FLAVOR = "default-flavor"
GATE = "kueue.x-k8s.io/admission"


def cluster_queue(name: str, gpus: int) -> dict[str, Any]:
    """A ClusterQueue with ``gpus`` of quota that preempts lower priorities within itself."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {"name": FLAVOR, "resources": [{"name": GPU, "nominalQuota": gpus}]}
                    ],
                }
            ],
        },
    }


def set_quota(cluster: LocalCluster, name: str, gpus: int) -> None:
    cluster.apply(cluster_queue(name, gpus))


def workloads(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "workloads.kueue.x-k8s.io", "-n", ns, "-o", "json").stdout
    return list(json.loads(out)["items"])


def admitted(workload: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Admitted" and c.get("status") == "True"
        for c in (workload.get("status") or {}).get("conditions") or []
    )


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def _true(workload: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (workload.get("status") or {}).get("conditions") or []
    )


def admitted_gpus(cluster: LocalCluster, ns: str) -> int:
    """GPUs Kueue has reserved in ``ns``: the sum over its Workloads that hold quota (reserved and
    not finished) of their admission's resource usage (Kueue's own accounting)."""
    total = 0
    for workload in workloads(cluster, ns):
        if not _true(workload, "QuotaReserved") or _true(workload, "Finished"):
            continue
        admission = (workload.get("status") or {}).get("admission") or {}
        for assignment in admission.get("podSetAssignments") or []:
            total += int(str((assignment.get("resourceUsage") or {}).get(GPU, "0")))
    return total


def wait(cluster: LocalCluster, what: str, predicate: Any, timeout: float = 120) -> Any:
    return cluster.wait_for(what, predicate, timeout=timeout, interval=0.5)


# -- the operator, watching namespaces Kueue manages ---------------------------------------------

RELEASE = "ejkq"
SYSTEM_NS = "ejkq-system"
SERVICE_ACCOUNT = f"{RELEASE}-elasticjob-operator"
POOL = [f"ejkq-{i}" for i in range(1, 13)]
"""Namespaces the operator watches and Kueue manages; each test takes the next one."""


def gpu_job(
    name: str,
    *,
    replicas: int,
    min_nodes: int,
    gpus: int = 2,
    priority: str | None = None,
    extras_priority: str | None = None,
    steps: int = 100000,
    **spec: Any,
) -> dict[str, Any]:
    """A queued ElasticJob (LocalQueue ``main``) of ``replicas`` nodes, ``gpus`` each, one worker
    process per node; it trains ``steps`` steps (long enough to outlive the test by default)."""
    job = job_manifest(
        name,
        replicas=replicas,
        minNodes=min_nodes,
        maxNodes=max(replicas, 4),
        device="gpu",
        queueName="main",
        args=["--steps", str(steps), "--step-sleep", "0.2"],
        **spec,
    )
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    trainer["resources"] = {"limits": {GPU: gpus}}
    meta = job["metadata"]
    if priority:
        meta.setdefault("labels", {})["kueue.x-k8s.io/priority-class"] = priority
    if extras_priority:
        meta.setdefault("annotations", {})["kueue.elasticjob.dev/extras-priority-class"] = (
            extras_priority
        )
    return job


def worker_pods(cluster: LocalCluster, ns: str, job: str) -> list[dict[str, Any]]:
    out = cluster.kubectl(
        "get", "pods", "-n", ns, "-l", f"elasticjob.dev/job-name={job},elasticjob.dev/role=worker",
        "-o", "json",
    ).stdout  # fmt: skip
    return list(json.loads(out)["items"])


def live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
    ]


def part(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"].get("elasticjob.dev/kueue-part", ""))


def events(cluster: LocalCluster, ns: str, job: str) -> list[dict[str, Any]]:
    out = cluster.kubectl(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={job}", "-o", "json"
    ).stdout
    return list(json.loads(out)["items"])
