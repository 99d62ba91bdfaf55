"""The operator installed by its chart (helm install, its Deployment, its RBAC) trains a job to
Succeeded: the same operator as the host-process tests, deployed the way users deploy it."""

from __future__ import annotations

import json
import uuid

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.placement import VIRTUAL_NODE_PLACEMENT

from tests.support.jobs import phase, st, wait_job
from tests.support.operator_e2e import OperatorProcess, job_manifest
from tests.support.paths import REPO

pytestmark = pytest.mark.e2e


def test_helm_installed_operator_trains_a_job_to_succeeded(
    cluster: LocalCluster, operator: OperatorProcess
) -> None:
    suffix = uuid.uuid4().hex[:6]
    release, system, work = f"ej{suffix}", f"ejsys-{suffix}", f"ejwork-{suffix}"
    cluster.kubectl("create", "namespace", work)
    try:
        cluster.helm(
            "install", release, str(REPO / "charts" / "elasticjob-operator"),
            "--namespace", system, "--create-namespace", "--wait", "--timeout", "5m",
            "--set", "watchNamespaces={" + work + "}",
            # Beside the jobs of job_manifest, on the virtual nodes (the emulator).
            "--set-json", "nodeSelector=" + json.dumps(VIRTUAL_NODE_PLACEMENT["nodeSelector"]),
            "--set-json", "tolerations=" + json.dumps(VIRTUAL_NODE_PLACEMENT["tolerations"]),
        )  # fmt: skip
        manifest = job_manifest("helmjob", args=["--steps", "20", "--step-sleep", "0.1"])
        cluster.kubectl("apply", "-n", work, "-f", "-", input=json.dumps(manifest))
        job = wait_job(
            cluster, work, "helmjob", "Succeeded", lambda j: phase(j) == "Succeeded", timeout=300
        )
        assert st(job)["reason"] == "Succeeded"
        # The host-process operator of the other tests never touched it: different namespaces.
        assert "helmjob" not in operator.logs()
    finally:
        cluster.kubectl("delete", "ej", "--all", "-n", work, "--wait=false", check=False)
        cluster.helm("uninstall", release, "--namespace", system, "--wait", check=False)
        cluster.kubectl("delete", "namespace", work, system, "--wait=false", check=False)
