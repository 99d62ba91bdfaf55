"""Fixtures of the operator's end-to-end tests on real nodes (kubelet, containerd, runc).

The operator runs from its image (``ghcr.io/elasticjob/elasticjob-operator:0.1.0``), installed by
``helm install`` of the chart with default values but the namespace to watch. The real nodes
are the cluster's ordinary nodes (the virtual nodes that share the session cluster are tainted),
so the operator, the jobs and their managed etcd land there as they would on any cluster. The
operator and the jobs live in two namespaces labelled
``pod-security.kubernetes.io/enforce=restricted``.
"""

from __future__ import annotations

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

from tests.e2e.operator.conftest import wait_job as operator_wait_job

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "elasticjob-operator"
OPERATOR_IMAGE = "ghcr.io/elasticjob/elasticjob-operator:0.1.0"
RESTRICTED = "pod-security.kubernetes.io/enforce=restricted"

pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class Release:
    """The chart's release: its name, the operator's namespace and the namespace it watches."""

    name: str
    system: str
    work: str


def _restricted_namespace(cluster: LocalCluster, name: str) -> None:
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("label", "namespace", name, RESTRICTED)


@pytest.fixture(scope="session")
def release(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """The operator installed by ``helm install --wait`` (default values but the watched
    namespace) in a ``restricted`` namespace, once per session for every module that needs the
    chart as it is (each test's jobs are deleted by ``work``); uninstalled at the end."""
    if len(cluster.real_nodes) < 2:
        pytest.fail(
            f"these tests need 2 real nodes; cluster {cluster.config.name!r} has "
            f"{sorted(cluster.real_nodes)}: set ELASTICJOB_E2E_REAL_NODES=2 (the default)"
        )
    suffix = uuid.uuid4().hex[:6]
    rel = Release(name=f"ejr{suffix}", system=f"ejrsys-{suffix}", work=f"ejrwork-{suffix}")
    _restricted_namespace(cluster, rel.system)
    _restricted_namespace(cluster, rel.work)
    # Default values but for what this cluster needs: the watched namespace.
    values = tmp_path_factory.mktemp("chart") / "values.yaml"
    values.write_text(json.dumps({"watchNamespaces": [rel.work]}))
    try:
        cluster.helm(
            "install", rel.name, str(CHART), "--namespace", rel.system,
            "--values", str(values), "--wait", "--timeout", "5m",
        )  # fmt: skip
        yield rel
    finally:
        cluster.kubectl("delete", "ej", "--all", "-n", rel.work, "--wait=false", check=False)
        cluster.helm("uninstall", rel.name, "--namespace", rel.system, "--wait", check=False)
        cluster.kubectl("delete", "namespace", rel.work, rel.system, "--wait=false", check=False)


@pytest.fixture
def work(cluster: LocalCluster, release: Release) -> Iterator[str]:
    """The watched namespace, with every job deleted after each test."""
    yield release.work
    cluster.kubectl("delete", "ej", "--all", "-n", release.work, "--wait=true", check=False)


# -- helpers -------------------------------------------------------------------------------------

#: Everything the `restricted` PodSecurity profile asks of a container (the image runs as 10001).
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
    """The operator suite's ``wait_job``, whose failure also lists the pods and their logs."""
    try:
        return operator_wait_job(cluster, ns, name, what, predicate, timeout=timeout)
    except AssertionError as exc:
        listing = cluster.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False).stdout
        logs = "".join(
            f"\n--- {p['metadata']['name']} (last 30 lines):\n"
            + "\n".join(cluster.pod_logs(ns, p["metadata"]["name"]).splitlines()[-30:])
            for p in pods(cluster, ns)
        )
        raise AssertionError(f"{exc}\npods:\n{listing}{logs}") from None


def get_job(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    return dict(cluster.get_json("ej", name, "-n", ns))


def phase(job: dict[str, Any]) -> str:
    return str((job.get("status") or {}).get("phase", ""))


def condition(job: dict[str, Any], type_: str) -> dict[str, Any]:
    """The job's condition of ``type_``, or ``{}``."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def ready_nodes(job: dict[str, Any]) -> int:
    return int((job.get("status") or {}).get("readyNodes") or 0)


def by_reason(job: dict[str, Any]) -> dict[str, int]:
    return dict(((job.get("status") or {}).get("restarts") or {}).get("byReason") or {})


def pods(cluster: LocalCluster, ns: str, role: str = "worker") -> list[dict[str, Any]]:
    out = cluster.kubectl(
        "get", "pods", "-n", ns, "-l", f"elasticjob.dev/role={role}", "-o", "json"
    ).stdout
    return list(json.loads(out)["items"])


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
