"""Every example in ``examples/`` that can run here, applied as a user would.

``helm install`` of the chart with default values (but the namespaces it watches), then
``kubectl apply -f examples/<file>``; the only change is a placeholder image
(``registry.example.com/...``), replaced by the training image this project builds. Each example
reaches the end state its comment promises, with every pod on a real node (the cluster's ordinary
nodes: nothing is placed by hand).

Not here, because this machine cannot run them: ``elasticjob-gpu-nccl.yaml`` trains on GPUs with
NCCL (the local cluster's GPUs are fake devices) and asks for 60 CPUs per node;
``elasticjob-scaling.yaml`` asks for 8 CPUs per node (its HorizontalPodAutoscaler measures CPU
use against that request) and its autoscaler needs metrics-server; the Kueue examples run as
applied where Kueue runs, in ``tests/e2e/kueue/test_kueue_examples.py``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.placement import REAL_NODE_LABEL
from elasticjob_localcluster.testing import TRAINING_IMAGE
from elasticjob_localcluster.versions import ETCD_IMAGE

from tests.support.jobs import condition, get_job, phase
from tests.support.paths import CHART, REPO
from tests.support.realnodes import diagnostics, wait_job

pytestmark = pytest.mark.e2e

EXAMPLES = REPO / "examples"
RUN_HERE = {
    "elasticjob.yaml",
    "elasticjob-dcp.yaml",
    "elasticjob-cpu.yaml",
    "elasticjob-external-etcd.yaml",
    "elasticjob-suspended.yaml",
}
CANNOT_RUN_HERE = {"elasticjob-gpu-nccl.yaml", "elasticjob-scaling.yaml"}
PLACEHOLDER = re.compile(r"registry\.example\.com/\S+")

#: The external etcd the external-etcd example names (etcd-{0,1,2}.etcd.infra): a three-member
#: cluster from the etcd image this project builds, as a user's platform team would run it.
EXTERNAL_ETCD = """
apiVersion: v1
kind: Service
metadata: {name: etcd, namespace: infra}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {app: etcd}
  ports: [{name: client, port: 2379}, {name: peer, port: 2380}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: etcd, namespace: infra}
spec:
  serviceName: etcd
  replicas: 3
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: etcd}}
  template:
    metadata: {labels: {app: etcd}}
    spec:
      containers:
        - name: etcd
          image: ETCD_IMAGE
          imagePullPolicy: IfNotPresent
          env:
            - name: POD_NAME
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
          command:
            - etcd
            - --name=$(POD_NAME)
            - --data-dir=/var/lib/etcd/data
            - --listen-client-urls=http://0.0.0.0:2379
            - --advertise-client-urls=http://$(POD_NAME).etcd.infra.svc.cluster.local:2379
            - --listen-peer-urls=http://0.0.0.0:2380
            - --initial-advertise-peer-urls=http://$(POD_NAME).etcd.infra.svc.cluster.local:2380
            - --initial-cluster=etcd-0=http://etcd-0.etcd.infra.svc.cluster.local:2380,etcd-1=http://etcd-1.etcd.infra.svc.cluster.local:2380,etcd-2=http://etcd-2.etcd.infra.svc.cluster.local:2380
            - --initial-cluster-state=new
          resources: {requests: {cpu: 50m, memory: 64Mi}}
          volumeMounts: [{name: data, mountPath: /var/lib/etcd}]
      volumes: [{name: data, emptyDir: {}}]
""".replace("ETCD_IMAGE", ETCD_IMAGE)


def test_every_example_is_either_run_here_or_said_why_not() -> None:
    files = {p.name for p in EXAMPLES.glob("*.yaml")}
    assert files == RUN_HERE | CANNOT_RUN_HERE, (
        "a new example must be run by this module (or named in CANNOT_RUN_HERE, with the reason "
        "in its docstring)"
    )


@pytest.fixture(scope="module")
def watched(cluster: LocalCluster) -> Iterator[str]:
    """A namespace, and the chart installed with default values watching it."""
    suffix = uuid.uuid4().hex[:6]
    ns, release, system = f"ejex-{suffix}", f"ejex{suffix}", f"ejexsys-{suffix}"
    cluster.kubectl("create", "namespace", ns)
    try:
        cluster.helm(
            "install", release, str(CHART), "--namespace", system, "--create-namespace",
            "--set", "watchNamespaces={" + ns + "}", "--wait", "--timeout", "5m",
        )  # fmt: skip
        yield ns
    finally:
        cluster.kubectl("delete", "ej", "--all", "-n", ns, "--wait=true", "--timeout=120s",
                        check=False)  # fmt: skip
        cluster.helm("uninstall", release, "--namespace", system, "--wait", check=False)
        cluster.kubectl("delete", "namespace", ns, system, "--wait=false", check=False)


def _apply_example(cluster: LocalCluster, ns: str, name: str, tmp_path: Path) -> dict[str, Any]:
    """``kubectl apply -f examples/<name>``, the placeholder image replaced; the job's body."""
    text = PLACEHOLDER.sub(TRAINING_IMAGE, (EXAMPLES / name).read_text())
    path = tmp_path / name
    path.write_text(text)
    cluster.kubectl("apply", "-n", ns, "-f", str(path))
    (job,) = [d for d in yaml.safe_load_all(text) if d and d.get("kind") == "ElasticJob"]
    return dict(job)


def _job_pods(cluster: LocalCluster, ns: str, job: str, role: str) -> list[dict[str, Any]]:
    """The pods of ``role`` of one job (the namespace also holds the other examples' pods)."""
    selector = f"elasticjob.dev/job-name={job},elasticjob.dev/role={role}"
    return list(cluster.get_json("pods", "-n", ns, "-l", selector)["items"])


def _all_on_real_nodes(cluster: LocalCluster, ns: str, job: str) -> None:
    listing = cluster.get_json("pods", "-n", ns, "-l", f"elasticjob.dev/job-name={job}")
    nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in listing["items"]}
    assert nodes, f"{ns}/{job}: no pods"
    for pod, node in nodes.items():
        labels = cluster.get_json("node", node)["metadata"]["labels"] if node else {}
        assert labels.get(REAL_NODE_LABEL) == "true", f"{pod} ran on {node}, not a real node"


def _succeeds(cluster: LocalCluster, ns: str, job: str, timeout: float = 600) -> dict[str, Any]:
    seen: list[None] = []

    def done(j: dict[str, Any]) -> bool:
        if phase(j) == "Running" and not seen:
            _all_on_real_nodes(cluster, ns, job)
            seen.append(None)
        if phase(j) == "Failed":
            raise AssertionError(
                f"{ns}/{job} Failed: {json.dumps(j.get('status'), indent=1)}\n"
                + diagnostics(cluster, ns, job)
            )
        return phase(j) == "Succeeded"

    return wait_job(cluster, ns, job, "Succeeded", done, timeout=timeout)


def test_the_main_example_succeeds_on_real_nodes(
    cluster: LocalCluster, watched: str, tmp_path: Path
) -> None:
    job = _apply_example(cluster, watched, "elasticjob.yaml", tmp_path)["metadata"]["name"]
    final = _succeeds(cluster, watched, job)
    assert final["status"]["restarts"]["failures"] == 0, final["status"]


def test_the_dcp_example_succeeds_on_real_nodes(
    cluster: LocalCluster, watched: str, tmp_path: Path
) -> None:
    # Its resize (2 nodes to 1, the checkpoint resharded) is test_realnodes_resize.py's.
    job = _apply_example(cluster, watched, "elasticjob-dcp.yaml", tmp_path)["metadata"]["name"]
    final = _succeeds(cluster, watched, job)
    assert final["status"]["restarts"]["failures"] == 0, final["status"]


def test_the_smallest_example_succeeds_with_the_placeholder_image_replaced(
    cluster: LocalCluster, watched: str, tmp_path: Path
) -> None:
    job = _apply_example(cluster, watched, "elasticjob-cpu.yaml", tmp_path)["metadata"]["name"]
    _succeeds(cluster, watched, job)


def test_the_external_etcd_example_trains_on_a_users_etcd_cluster(
    cluster: LocalCluster, watched: str, tmp_path: Path
) -> None:
    existing = cluster.kubectl("get", "namespace", "infra", check=False).returncode == 0
    if not existing:
        cluster.kubectl("create", "namespace", "infra")
    try:
        cluster.kubectl("apply", "-f", "-", input=EXTERNAL_ETCD)
        cluster.kubectl(
            "rollout", "status", "statefulset/etcd", "-n", "infra", "--timeout=300s"
        )  # fmt: skip
        body = _apply_example(cluster, watched, "elasticjob-external-etcd.yaml", tmp_path)
        job = body["metadata"]["name"]
        _succeeds(cluster, watched, job, timeout=900)
        # No managed etcd: the rendezvous ran on the user's, under the example's key prefix.
        assert _job_pods(cluster, watched, job, "etcd") == []
        prefix = body["spec"]["etcd"]["keyPrefix"]
        keys = cluster.exec_in_pod(
            "infra", "etcd-0",
            ["etcdctl", "get", "--prefix", "--keys-only", prefix], check=True,
        ).stdout  # fmt: skip
        assert any(line.startswith(prefix + "/") for line in keys.splitlines()), keys[:2000]
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait=false", input=EXTERNAL_ETCD, check=False)
        if not existing:
            cluster.kubectl("delete", "namespace", "infra", "--wait=false", check=False)


def test_the_suspended_example_runs_nothing_until_resumed(
    cluster: LocalCluster, watched: str, tmp_path: Path
) -> None:
    job = _apply_example(cluster, watched, "elasticjob-suspended.yaml", tmp_path)["metadata"][
        "name"
    ]
    suspended = wait_job(
        cluster,
        watched,
        job,
        "Suspended",
        lambda j: condition(j, "Suspended").get("status") == "True",
    )
    assert phase(suspended) == "Suspended", suspended["status"]
    assert _job_pods(cluster, watched, job, "worker") == []
    assert _job_pods(cluster, watched, job, "etcd") == []
    # As its comment says: resume it with a patch; the job then starts its pods.
    cluster.kubectl(
        "patch", f"ej/{job}", "-n", watched, "--type=merge",
        "-p", '{"spec":{"runPolicy":{"suspend":false}}}',
    )  # fmt: skip
    cluster.wait_for(
        f"{job}'s worker pods after the resume",
        lambda: len(_job_pods(cluster, watched, job, "worker")) >= 2,
        timeout=120,
    )
    assert condition(get_job(cluster, watched, job), "Suspended").get("status") != "True"
