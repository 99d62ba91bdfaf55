"""The chart on the real local cluster: helm install, helm test, and the operator at work under
exactly the RBAC the chart grants, in namespaced and in cluster-wide mode."""

from __future__ import annotations

import re
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.paths import CHART, REPO

pytestmark = pytest.mark.e2e

_PHASE_SAMPLE = re.compile(r"^elasticjob_job_phase\{([^}]*)\}")
_LABEL = re.compile(r'(\w+)="([^"]*)"')

# A job that needs nothing to exist: the test only waits for the operator to take it up.
JOB = """
apiVersion: elasticjob.dev/v1alpha1
kind: ElasticJob
metadata:
  name: rbac-probe
spec:
  replicas: 1
  device: cpu
  nprocPerNode: 1
  template:
    spec:
      containers:
        - name: trainer
          image: local/ignored:1
          command: [python, -c, "print('hello')"]
"""


def _apply_job(cluster: LocalCluster, namespace: str, tmp: Path, name: str = "rbac-probe") -> None:
    path = tmp / f"job-{namespace}-{name}.yaml"
    path.write_text(JOB.replace("name: rbac-probe", f"name: {name}"))
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))


def _status(cluster: LocalCluster, namespace: str) -> dict[str, Any]:
    obj = cluster.get_json("ej", "rbac-probe", "-n", namespace)
    status: dict[str, Any] = obj.get("status") or {}
    return status


def _install(cluster: LocalCluster, release: str, namespace: str, *sets: str) -> None:
    flags = [a for s in sets for a in ("--set", s)]
    cluster.helm(
        "install", release, str(CHART), "--namespace", namespace, "--create-namespace",
        "--wait", "--timeout", "5m", *flags,
    )  # fmt: skip


def _operator_pods(cluster: LocalCluster, release: str, namespace: str) -> list[str]:
    pods = cluster.get_json(
        "pods", "-n", namespace,
        "-l", f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator",
    )  # fmt: skip
    return [str(p["metadata"]["name"]) for p in pods["items"]]


def _handled_jobs(cluster: LocalCluster, release: str, namespace: str) -> set[tuple[str, str]]:
    """``(namespace, job)`` pairs in the operator's elasticjob_job_phase metric."""
    found: set[tuple[str, str]] = set()
    for pod in _operator_pods(cluster, release, namespace):
        url = f"http://{cluster.pod_ip(namespace, pod)}:8080/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        for line in text.splitlines():
            match = _PHASE_SAMPLE.match(line)
            if match:
                labels = dict(_LABEL.findall(match[1]))
                found.add((labels.get("namespace", ""), labels.get("job", "")))
    return found


def _operator_logs(cluster: LocalCluster, release: str, namespace: str) -> str:
    pods = _operator_pods(cluster, release, namespace)
    return "\n".join(cluster.pod_logs(namespace, pod) for pod in pods)


def _suffix() -> str:
    # Unique names, so a rerun on a reused cluster (ELASTICJOB_E2E_CLUSTER) starts clean.
    return uuid.uuid4().hex[:6]


def _can_i(cluster: LocalCluster, *args: str) -> str:
    # `kubectl auth can-i` exits 1 when the answer is "no".
    return cluster.kubectl("auth", "can-i", *args, check=False).stdout.strip()


def _cleanup(cluster: LocalCluster, release: str, namespaces: list[str]) -> None:
    for ns in namespaces:
        cluster.kubectl("delete", "ej", "--all", "-n", ns, "--wait=false", check=False)
    cluster.helm("uninstall", release, "--namespace", namespaces[0], "--wait", check=False)
    for ns in namespaces:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_namespaced_install_helm_test_and_rbac(cluster: LocalCluster, tmp_path: Path) -> None:
    suffix = _suffix()
    release, ops, team, outside = (f"{n}-{suffix}" for n in ("ejns", "ej-ops", "ej-team", "ej-out"))
    for ns in (team, outside):
        cluster.kubectl("create", "namespace", ns)
    try:
        _install(cluster, release, ops, f"watchNamespaces={{{team}}}")
        out = cluster.helm("test", release, "--namespace", ops, "--logs").stdout
        assert "ok: operator metrics" in out, out

        sa = f"system:serviceaccount:{ops}:{release}-elasticjob-operator"
        assert _can_i(cluster, "patch", "elasticjobs/status", "-n", team, "--as", sa) == "yes"
        assert _can_i(cluster, "create", "events", "-n", team, "--as", sa) == "yes"
        # The managed etcd's certificates (get, create), the jobs' NetworkPolicies (create), and
        # the operator's own Lease (leader election) in its own namespace.
        assert _can_i(cluster, "get", "secrets", "-n", team, "--as", sa) == "yes"
        assert _can_i(cluster, "create", "networkpolicies", "-n", team, "--as", sa) == "yes"
        lease = f"leases/{release}-elasticjob-operator"
        assert _can_i(cluster, "update", lease, "-n", ops, "--as", sa) == "yes"
        # Least privilege: nothing outside the watched namespace, Secrets never enumerated, no
        # other Lease, no updates of whole jobs, nothing cluster-wide but reading nodes.
        for args in (
            ("patch", "elasticjobs/status", "-n", outside),
            ("create", "pods", "-n", outside),
            ("get", "secrets", "-n", outside),
            ("list", "secrets", "-n", team),
            ("watch", "secrets", "-n", team),
            ("update", "secrets", "-n", team),
            ("update", "leases/someone-else", "-n", ops),
            ("delete", "networkpolicies", "-n", team),
            ("update", "elasticjobs", "-n", team),
            ("delete", "nodes"),
            ("list", "namespaces"),
        ):
            assert _can_i(cluster, *args, "--as", sa) == "no", f"{sa} can {args}"
        assert _can_i(cluster, "list", "nodes", "--as", sa) == "yes"

        _apply_job(cluster, team, tmp_path)
        _apply_job(cluster, outside, tmp_path)
        # Ask this operator itself (another one may run cluster-wide in a shared cluster): its
        # metrics show the job it handles and nothing of the namespace it must not watch.
        cluster.wait_for(
            f"the namespaced operator to report {team}/rbac-probe",
            lambda: _handled_jobs(cluster, release, ops) & {(team, "rbac-probe")},
            timeout=120,
        )
        assert _status(cluster, team).get("phase")
        # Proof that the operator got past the outside job's creation: a job applied after it,
        # in its own namespace, is handled too (no fixed pause that passes by being too short).
        _apply_job(cluster, team, tmp_path, name="after-outside")
        cluster.wait_for(
            f"the namespaced operator to report {team}/after-outside",
            lambda: _handled_jobs(cluster, release, ops) & {(team, "after-outside")},
            timeout=120,
        )
        handled = _handled_jobs(cluster, release, ops)
        assert not {ns for ns, _ in handled} - {team}, f"handled outside its scope: {handled}"
        logs = _operator_logs(cluster, release, ops)
        assert "Forbidden" not in logs and " 403" not in logs, logs[-3000:]
    finally:
        _cleanup(cluster, release, [ops, team, outside])


def test_cluster_wide_install_helm_test_and_a_job(cluster: LocalCluster, tmp_path: Path) -> None:
    suffix = _suffix()
    release, ops, anywhere = (f"{n}-{suffix}" for n in ("ejcw", "ej-ops-cw", "ej-any"))
    try:
        _install(cluster, release, ops)
        out = cluster.helm("test", release, "--namespace", ops, "--logs").stdout
        assert "ok: elasticjob.dev/v1alpha1 serves" in out, out
        cluster.kubectl("create", "namespace", anywhere)
        _apply_job(cluster, anywhere, tmp_path)
        cluster.wait_for(
            f"the cluster-wide operator to report {anywhere}/rbac-probe",
            lambda: _handled_jobs(cluster, release, ops) & {(anywhere, "rbac-probe")},
            timeout=120,
        )
        assert _status(cluster, anywhere).get("phase")
        logs = _operator_logs(cluster, release, ops)
        assert "Forbidden" not in logs and " 403" not in logs, logs[-3000:]
    finally:
        _cleanup(cluster, release, [ops, anywhere])


def test_examples_pass_api_server_validation(cluster: LocalCluster) -> None:
    # The CRD from the chart's crds/ (the same bytes as crds/, see tests/unit/chart).
    cluster.kubectl("apply", "--server-side", "-f", str(CHART / "crds" / "elasticjob.yaml"))
    cluster.kubectl("wait", "--for=condition=Established", "crd/elasticjobs.elasticjob.dev")
    for path in sorted((REPO / "examples").glob("*.yaml")):
        out = cluster.kubectl("apply", "--dry-run=server", "-n", "default", "-f", str(path)).stdout
        assert "(server dry run)" in out, f"{path.name}: {out}"


def test_api_server_rejects_an_invalid_job_with_the_cel_message(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    cluster.kubectl("apply", "--server-side", "-f", str(CHART / "crds" / "elasticjob.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text(JOB.replace("replicas: 1", "replicas: 3\n  maxNodes: 2"))
    done = cluster.kubectl(
        "apply", "--dry-run=server", "-n", "default", "-f", str(bad), check=False
    )
    assert done.returncode != 0
    assert "spec.replicas must be <= spec.maxNodes" in done.stderr, done.stderr
