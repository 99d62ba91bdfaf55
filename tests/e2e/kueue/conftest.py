"""Fixtures of the Kueue end-to-end tests: a real Kueue (plain-pod integration) in the cluster.

``kueue`` (session) asks the cluster process to start Kueue (built by localcluster/kueue/build.sh
on first use); ``kueue_ns`` is a fresh namespace labelled for Kueue's pod integration with its own
ClusterQueue (``<ns>``, quota set per test) and LocalQueue ``main``.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.kueue import MANAGED_NAMESPACE_LABEL, build_kueue

from tests.e2e.operator.conftest import REPO, OperatorProcess, job_manifest

pytestmark = pytest.mark.e2e

GPU = "nvidia.com/gpu"
FLAVOR = "default-flavor"
GATE = "kueue.x-k8s.io/admission"


@pytest.fixture(scope="session")
def kueue(cluster: LocalCluster) -> dict[str, Any]:
    """Kueue running in the cluster (started once; stopped with the cluster)."""
    # Build here (a no-op once cached): a cold build takes minutes, longer than the cluster
    # process's control requests may.
    build_kueue()
    info = cluster.start_kueue()
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": FLAVOR},
        }
    )
    for name, value in (("extras", 100), ("core", 1000), ("urgent", 10000)):
        cluster.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": f"ej-test-{name}"},
                "value": value,
            }
        )
    return info


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


@pytest.fixture
def kueue_ns(cluster: LocalCluster, kueue: dict[str, Any]) -> Iterator[str]:
    """A namespace managed by Kueue with ClusterQueue ``<ns>`` (4 GPUs) and LocalQueue ``main``."""
    name = f"kq-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("label", "namespace", name, f"{MANAGED_NAMESPACE_LABEL}=true")
    cluster.wait_for(
        f"default ServiceAccount in {name}",
        lambda: cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
    )
    set_quota(cluster, name, 4)
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "main", "namespace": name},
            "spec": {"clusterQueue": name},
        }
    )
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
    cluster.kubectl("delete", "clusterqueue", name, "--wait=false", check=False)


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
_next = iter(POOL)


def _sa_kubeconfig(cluster: LocalCluster, path: Path) -> Path:
    token = cluster.kubectl(
        "create", "token", SERVICE_ACCOUNT, "-n", SYSTEM_NS, "--duration=6h"
    ).stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "local", "user": "operator"}}],
        "current-context": "operator",
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="session")
def kueue_operator(
    cluster: LocalCluster, kueue: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The operator as the chart's ServiceAccount (the chart's RBAC, Kueue rule included),
    watching the POOL namespaces, which Kueue manages."""
    work = tmp_path_factory.mktemp("kueue-operator")
    cluster.kubectl("apply", "-f", str(REPO / "crds" / "elasticjob.yaml"))
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/elasticjobs.elasticjob.dev", "--timeout=60s"
    )
    existing = set(cluster.kubectl("get", "ns", "-o", "name").stdout.split())
    for ns in [SYSTEM_NS, *POOL]:
        if f"namespace/{ns}" not in existing:
            cluster.kubectl("create", "namespace", ns)
    for ns in POOL:
        cluster.kubectl("label", "namespace", ns, f"{MANAGED_NAMESPACE_LABEL}=true", "--overwrite")
    rendered = cluster.helm(
        "template", RELEASE, str(REPO / "charts" / "elasticjob-operator"),
        "--namespace", SYSTEM_NS, "--set", "watchNamespaces={" + ",".join(POOL) + "}",
        "--show-only", "templates/rbac.yaml", "--show-only", "templates/serviceaccount.yaml",
    ).stdout  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=rendered)
    proc = OperatorProcess(
        _sa_kubeconfig(cluster, work / "operator.kubeconfig"),
        POOL,
        work,
        lease=(SYSTEM_NS, SERVICE_ACCOUNT),  # this release's Lease, the one its Role names
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.kill(signal.SIGTERM)
        for ns in POOL:
            cluster.kubectl("delete", "ej", "--all", "-n", ns, "--wait=false", check=False)


@pytest.fixture
def kq(cluster: LocalCluster, kueue_operator: OperatorProcess) -> Iterator[str]:
    """A namespace the operator watches and Kueue manages, with ClusterQueue ``<ns>`` (4 GPUs,
    preempting lower priorities) and LocalQueue ``main``; cleaned up afterwards."""
    name = next(_next)
    set_quota(cluster, name, 4)
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "main", "namespace": name},
            "spec": {"clusterQueue": name},
        }
    )
    yield name
    cluster.kubectl("delete", "ej", "--all", "-n", name, "--wait=false", check=False)
    cluster.kubectl("delete", "pods", "--all", "-n", name, "--wait=false", check=False)
    forbidden = kueue_operator.forbidden()
    assert not forbidden, "the operator hit RBAC denials:\n" + "\n".join(forbidden[:10])


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
