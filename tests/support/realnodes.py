"""The operator of the end-to-end suites on real nodes (kubelet, containerd, runc), installed by
its chart: the release, a job of the training image fit for a ``restricted`` namespace, and what
a failed assertion needs (Events, agent lines, the operator's metrics, termination messages)."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.testing import TRAINING_IMAGE

from tests.support import jobs
from tests.support.jobs import by_reason, pods
from tests.support.paths import CHART

OPERATOR_IMAGE = "ghcr.io/elasticjob/elasticjob-operator:0.1.0"
RESTRICTED = "pod-security.kubernetes.io/enforce=restricted"
RESUMED = re.compile(r"resumed from step=[1-9]")
"""A worker's log line saying it resumed from a checkpoint past step 0."""


@dataclass(frozen=True)
class Release:
    """The chart's release: its name, the operator's namespace and the namespace it watches."""

    name: str
    system: str
    work: str


def restricted_namespace(cluster: LocalCluster, name: str) -> None:
    """Create namespace ``name`` with the ``restricted`` PodSecurity profile enforced."""
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("label", "namespace", name, RESTRICTED)


#: Everything the `restricted` PodSecurity profile asks of a container (the image runs as 10001).


@contextlib.contextmanager
def installed_release(
    cluster: LocalCluster,
    scratch: Path,
    values: dict[str, Any] | None = None,
    prefix: str = "ejr",
) -> Iterator[Release]:
    """The operator installed by ``helm install --wait`` of the chart with default values but
    the watched namespace (and ``values``), in a ``restricted`` namespace; uninstalled (with its
    jobs) after. ``scratch``: a directory for the values file; ``prefix``: of the release's and
    its namespaces' names."""
    if len(cluster.real_nodes) < 2:
        pytest.fail(
            f"these tests need 2 real nodes; cluster {cluster.config.name!r} has "
            f"{sorted(cluster.real_nodes)}: set ELASTICJOB_E2E_REAL_NODES=2 (the default)"
        )
    suffix = uuid.uuid4().hex[:6]
    rel = Release(
        name=f"{prefix}{suffix}", system=f"{prefix}sys-{suffix}", work=f"{prefix}work-{suffix}"
    )
    restricted_namespace(cluster, rel.system)
    restricted_namespace(cluster, rel.work)
    # Default values but for what this cluster needs: the watched namespace.
    path = scratch / f"values-{suffix}.yaml"
    path.write_text(json.dumps({"watchNamespaces": [rel.work], **(values or {})}))
    try:
        cluster.helm(
            "install", rel.name, str(CHART), "--namespace", rel.system,
            "--values", str(path), "--wait", "--timeout", "5m",
        )  # fmt: skip
        yield rel
    finally:
        cluster.kubectl("delete", "ej", "--all", "-n", rel.work, "--wait=false", check=False)
        cluster.helm("uninstall", rel.name, "--namespace", rel.system, "--wait", check=False)
        cluster.kubectl("delete", "namespace", rel.work, rel.system, "--wait=false", check=False)


RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def job_manifest(name: str, *, steps: int = 40, nproc: int = 2) -> dict[str, Any]:
    """2 nodes x ``nproc`` CPU processes of the training image's train.py, on real nodes, fit
    for a ``restricted`` namespace (checkpoints on an emptyDir: rank 0's step wins on resume)."""
    return {
        "apiVersion": "elasticjob.dev/v1alpha1",
        "kind": "ElasticJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            # minNodes = replicas: the survivors of a lost pod wait for its replacement instead of
            # forming a smaller round first (which would add a `membership` restart when the
            # replacement joins, depending on how fast its pod starts).
            "minNodes": 2,
            "maxNodes": 2,
            "device": "cpu",
            "nprocPerNode": nproc,
            "maxRestarts": 3,
            "stallTimeoutSeconds": 180,
            "rendezvous": {"lastCallTimeoutSeconds": 2},
            # Without requests the managed etcd is BestEffort (the smallest CPU share): on two
            # loaded cores it then stalls for seconds, leases lapse and restarts are miscounted.
            "etcd": {"resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}},
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "trainer",
                            "image": TRAINING_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            # The image's WORKDIR is /workspace, holding train.py.
                            "command": ["python", "train.py"],
                            "args": [
                                "--steps",
                                str(steps),
                                "--step-sleep",
                                "0.2",
                                "--checkpoint-every",
                                "5",
                                "--checkpoint-dir",
                                "/ckpt",
                            ],
                            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
                            "securityContext": RESTRICTED_CONTAINER,
                            "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
                        }
                    ],
                    "volumes": [{"name": "ckpt", "emptyDir": {}}],
                }
            },
        },
    }


def apply_job(cluster: LocalCluster, ns: str, manifest: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))


def wait_job(
    cluster: LocalCluster,
    ns: str,
    name: str,
    what: str,
    predicate: Callable[[dict[str, Any]], bool],
    *,
    timeout: float = 300,
) -> dict[str, Any]:
    """``jobs.wait_job`` with the longer default real nodes need (images, containers)."""
    return jobs.wait_job(cluster, ns, name, what, predicate, timeout=timeout)


def worker_logs(cluster: LocalCluster, ns: str) -> str:
    return "".join(cluster.pod_logs(ns, p["metadata"]["name"]) for p in pods(cluster, ns))


def diagnostics(cluster: LocalCluster, ns: str, name: str) -> str:
    """The job's Events and every worker's agent event lines, for a failure message."""
    events = cluster.kubectl(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}",
        "-o", "custom-columns=REASON:.reason,MESSAGE:.message", check=False,
    ).stdout  # fmt: skip
    logs = "".join(
        f"\n--- {p['metadata']['name']}:\n"
        + "\n".join(
            line
            for line in cluster.pod_logs(ns, p["metadata"]["name"]).splitlines()
            if "elasticjob-agent" in line or "Error" in line or "resumed" in line
        )
        for p in pods(cluster, ns)
    )
    return f"events:\n{events}{logs}"


def expect_counts(
    cluster: LocalCluster, ns: str, job: dict[str, Any], expected: dict[str, int]
) -> None:
    """Fail, with the job's status, Events and every agent's log, unless the job's restarts by
    reason are exactly ``expected`` (pytest would truncate an assertion message that long)."""
    if by_reason(job) == expected:
        return
    name = job["metadata"]["name"]
    logs = "".join(
        f"\n--- {p['metadata']['name']} (agent lines):\n"
        + "\n".join(
            line
            for line in cluster.pod_logs(ns, p["metadata"]["name"]).splitlines()
            if "elasticjob-agent" in line
        )
        for p in pods(cluster, ns)
    )
    events = cluster.kubectl(
        "get", "events", "-n", ns, "--sort-by=.lastTimestamp",
        "-o", "custom-columns=AT:.lastTimestamp,OBJECT:.involvedObject.name,REASON:.reason,"
        "MESSAGE:.message", check=False,
    ).stdout  # fmt: skip
    pytest.fail(
        f"{ns}/{name}: restarts {by_reason(job)}, expected {expected}\n"
        f"status: {json.dumps(job.get('status'), indent=1)}\nevents:\n{events}{logs}",
        pytrace=False,
    )


def wait_checkpoint(cluster: LocalCluster, ns: str, step: int = 10) -> None:
    """Until rank 0 (on whichever pod) wrote a checkpoint at ``step`` or later."""
    pattern = re.compile(r"checkpoint step=(\d+)")
    cluster.wait_for(
        f"a checkpoint at step {step} in {ns}",
        lambda: any(int(m.group(1)) >= step for m in pattern.finditer(worker_logs(cluster, ns))),
        timeout=240,
        interval=1,
    )


def job_events(cluster: LocalCluster, ns: str, name: str, reason: str) -> list[str]:
    """The messages of the job's Events with ``reason`` (e.g. ``Restarted``), oldest first."""
    items = cluster.get_json(
        "events", "-n", ns, "--field-selector", f"involvedObject.name={name},reason={reason}"
    )["items"]
    items.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return [str(e.get("message", "")) for e in items]


def operator_metrics(cluster: LocalCluster, release: Release) -> str:
    """The operator pod's Prometheus text, read inside its container (its metrics port is not
    the host's to reach on real nodes)."""
    items = cluster.get_json(
        "pods", "-n", release.system, "-l", "app.kubernetes.io/name=elasticjob-operator"
    )["items"]
    (pod,) = [p for p in items if not p["metadata"].get("deletionTimestamp")]
    port = next(
        p["containerPort"]
        for p in pod["spec"]["containers"][0].get("ports") or []
        if p.get("name") == "metrics"
    )
    read = (
        "import urllib.request\n"
        f"with urllib.request.urlopen('http://127.0.0.1:{port}/metrics', timeout=10) as r:\n"
        "    print(r.read().decode())\n"
    )
    return cluster.exec_in_pod(
        release.system, pod["metadata"]["name"], ["python", "-c", read], check=True
    ).stdout


def termination_message(cluster: LocalCluster, ns: str, pod: str) -> str:
    """The trainer container's termination message (``state`` or ``lastState``), or ``""``."""
    status = cluster.get_json("pod", pod, "-n", ns).get("status") or {}
    for container in status.get("containerStatuses") or []:
        for key in ("state", "lastState"):
            terminated = (container.get(key) or {}).get("terminated") or {}
            if terminated.get("message"):
                return str(terminated["message"])
    return ""


HOSTNAME = "kubernetes.io/hostname"


def node_of_operator(cluster: LocalCluster, release: Release) -> str:
    """The node the (live) operator pod runs on."""
    items = cluster.get_json(
        "pods", "-n", release.system, "-l", "app.kubernetes.io/name=elasticjob-operator"
    )["items"]
    (pod,) = [p for p in items if not p["metadata"].get("deletionTimestamp")]
    return str(pod["spec"]["nodeName"])


def placed(manifest: dict[str, Any], keep: str) -> dict[str, Any]:
    """One worker per real node (a hard spread that ignores lost, tainted nodes, so the
    replacement fits on the survivor), and everything else of the job, the managed etcd
    included (it copies the template's node affinity), preferably on ``keep``."""
    spec = manifest["spec"]["template"]["spec"]
    spec["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {
                        "matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [keep]}]
                    },
                }
            ]
        }
    }
    spec["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": HOSTNAME,
            "whenUnsatisfiable": "DoNotSchedule",
            "nodeTaintsPolicy": "Honor",
            "labelSelector": {
                "matchLabels": {
                    "elasticjob.dev/job-name": manifest["metadata"]["name"],
                    "elasticjob.dev/role": "worker",
                }
            },
        }
    ]
    return manifest
