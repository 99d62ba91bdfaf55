"""Uninstall leaves nothing: with a job running, ``helm uninstall`` and then ``kubectl delete crd``
(as the README says) finish within 60 s, and then no pod, Secret, Service or NetworkPolicy of the
job is left.

The job carries no finalizer (see docs/operator.md), so deleting the CRD deletes it at once and
the garbage collector removes what it owns. This test deletes the CRD of the whole cluster:
it puts the CRD back when it ends, for the tests after it.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.testing import TRAINING_IMAGE
from elasticjob_operator.core.manifests import WORKER_GRACE_SECONDS

from tests.support.paths import CHART, REPO

pytestmark = pytest.mark.e2e

CRD = "elasticjobs.elasticjob.dev"
FINALIZER = "elasticjob.dev/operator"
LABEL_JOB = "elasticjob.dev/job-name"
KINDS = "pods,secrets,services,networkpolicies"
BUDGET_SECONDS = 60.0


def _job(name: str) -> dict[str, Any]:
    """2 workers of the training image's train.py, long enough to be running throughout."""
    return {
        "apiVersion": "elasticjob.dev/v1alpha1",
        "kind": "ElasticJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "minNodes": 2,
            "maxNodes": 2,
            "device": "cpu",
            "nprocPerNode": 1,
            "etcd": {"resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "trainer",
                            "image": TRAINING_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["python", "train.py"],
                            "args": ["--steps", "100000", "--step-sleep", "0.2"],
                            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                        }
                    ]
                }
            },
        },
    }


def _left(cluster: LocalCluster, namespace: str, job: str) -> list[str]:
    """``kind/name`` of every object of ``job`` still in ``namespace``."""
    out = cluster.kubectl(
        "get", KINDS, "-n", namespace, "-l", f"{LABEL_JOB}={job}", "-o", "json"
    ).stdout  # fmt: skip
    return [f"{o['kind']}/{o['metadata']['name']}" for o in json.loads(out)["items"]]


def _running(cluster: LocalCluster, namespace: str, job: str) -> bool:
    """The job's etcd and both workers are Running."""
    out = cluster.kubectl(
        "get", "pods", "-n", namespace, "-l", f"{LABEL_JOB}={job}", "-o", "json"
    ).stdout  # fmt: skip
    phases = [p["status"].get("phase") for p in json.loads(out)["items"]]
    return len(phases) >= 3 and all(p == "Running" for p in phases)


def test_uninstall_then_delete_crd_leaves_nothing_of_a_running_job(cluster: LocalCluster) -> None:
    suffix = uuid.uuid4().hex[:6]
    release, ops, work, job = f"ejun-{suffix}", f"ejun-ops-{suffix}", f"ejun-{suffix}", "doomed"
    cluster.kubectl("create", "namespace", work)
    try:
        cluster.helm(
            "install", release, str(CHART), "--namespace", ops, "--create-namespace",
            "--set", f"watchNamespaces={{{work}}}", "--wait", "--timeout", "5m",
        )  # fmt: skip
        cluster.kubectl("apply", "-n", work, "-f", "-", input=json.dumps(_job(job)))
        cluster.wait_for(
            f"{work}/{job}: etcd and both workers Running",
            lambda: _running(cluster, work, job),
            timeout=300,
            interval=2,
        )
        # Its Secret, Services and NetworkPolicies exist by now (the pods need them).
        before = _left(cluster, work, job)
        assert {k.split("/")[0] for k in before} >= {"Pod", "Secret", "Service"}, before
        body = cluster.get_json("ej", job, "-n", work)
        assert FINALIZER not in (body["metadata"].get("finalizers") or []), body["metadata"]

        # The README's two commands, as a user types them (kubectl waits for the CRD to go,
        # which needs every ElasticJob gone first).
        began = time.monotonic()
        cluster.helm("uninstall", release, "--namespace", ops)
        cluster.kubectl("delete", "crd", CRD, "--timeout=60s", timeout=BUDGET_SECONDS + 10)
        took = time.monotonic() - began
        assert took < BUDGET_SECONDS, f"uninstall and CRD deletion took {took:.0f} s"

        # The garbage collector deletes the job's objects; its pods then end within their grace
        # period (a worker's is WORKER_GRACE_SECONDS unless the template sets one).
        cluster.wait_for(
            f"nothing of {work}/{job} left",
            lambda: not _left(cluster, work, job),
            timeout=WORKER_GRACE_SECONDS + 30,
            interval=1,
        )
    finally:
        cluster.helm("uninstall", release, "--namespace", ops, check=False)
        cluster.kubectl("delete", "namespace", work, ops, "--wait=false", check=False)
        # Put the CRD back for the tests after this one (a release installs it only if absent).
        cluster.kubectl("apply", "--server-side", "-f", str(REPO / "crds" / "elasticjob.yaml"))
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{CRD}", "--timeout=60s")
