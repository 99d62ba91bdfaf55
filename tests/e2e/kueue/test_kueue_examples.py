"""examples/kueue/ passes the API server's validation (Kueue's CRDs and webhooks, our CRD's
schema and CEL rules: server-side dry runs), and runs as applied with the chart installed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.kueue import MANAGED_NAMESPACE_LABEL
from elasticjob_localcluster.placement import REAL_NODE_LABEL

from tests.support.jobs import phase
from tests.support.paths import CHART, REPO
from tests.support.realnodes import diagnostics, wait_job

pytestmark = pytest.mark.e2e

EXAMPLES = REPO / "examples" / "kueue"


def test_kueue_examples_pass_server_validation(
    cluster: LocalCluster, kueue: dict[str, Any]
) -> None:
    cluster.kubectl("apply", "-f", str(REPO / "crds" / "elasticjob.yaml"))
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/elasticjobs.elasticjob.dev", "--timeout=60s"
    )
    if cluster.kubectl("get", "namespace", "team-a", check=False).returncode != 0:
        cluster.kubectl("create", "namespace", "team-a")
    cluster.kubectl(
        "label", "namespace", "team-a", f"{MANAGED_NAMESPACE_LABEL}=true", "--overwrite"
    )
    queues = cluster.kubectl("apply", "--dry-run=server", "-f", str(EXAMPLES / "queues.yaml"))
    assert queues.stdout.count("(server dry run)") == 6, queues.stdout
    job = cluster.kubectl(
        "apply", "--dry-run=server", "-n", "team-a", "-f", str(EXAMPLES / "elasticjob-queued.yaml")
    )
    assert "elasticjob.elasticjob.dev/train-queued created (server dry run)" in job.stdout

    # A wrong queueName is refused by the schema, with the field named.
    bad = (
        (EXAMPLES / "elasticjob-queued.yaml")
        .read_text()
        .replace("queueName: main", "queueName: Not_A_Queue")
    )
    done = cluster.kubectl(
        "apply", "--dry-run=server", "-n", "team-a", "-f", "-", input=bad, check=False
    )
    assert done.returncode != 0 and "spec.queueName" in done.stderr


def test_the_queued_example_trains_as_applied_under_the_installed_chart(
    cluster: LocalCluster, kueue: dict[str, Any], tmp_path: Path
) -> None:
    """The commands of examples/kueue/, as written: the chart installed with default values
    (watching team-a), the namespace under PodSecurity ``baseline`` (as the example promises),
    ``queues.yaml`` and the job applied unchanged; Kueue admits it and it trains to Succeeded
    on the real nodes."""
    if cluster.kubectl("get", "namespace", "team-a", check=False).returncode != 0:
        cluster.kubectl("create", "namespace", "team-a")
    cluster.kubectl(
        "label", "namespace", "team-a", f"{MANAGED_NAMESPACE_LABEL}=true",
        "pod-security.kubernetes.io/enforce=baseline", "--overwrite",
    )  # fmt: skip
    suffix = uuid.uuid4().hex[:6]
    release, system = f"ejkq{suffix}", f"ejkqsys-{suffix}"
    values = tmp_path / "values.yaml"
    values.write_text(json.dumps({"watchNamespaces": ["team-a"]}))
    queued = EXAMPLES / "elasticjob-queued.yaml"
    try:
        cluster.helm(
            "install", release, str(CHART), "--namespace", system, "--create-namespace",
            "--values", str(values), "--wait", "--timeout", "5m",
        )  # fmt: skip
        cluster.kubectl("apply", "-f", str(EXAMPLES / "queues.yaml"))
        cluster.kubectl("apply", "-n", "team-a", "-f", str(queued))
        job = wait_job(
            cluster, "team-a", "train-queued", "Succeeded", _succeeded(cluster), timeout=900
        )
        assert job["status"]["restarts"]["failures"] == 0, job["status"]
        # Kueue admitted it: the core's Workload exists and was admitted.
        workloads = cluster.get_json("workloads.kueue.x-k8s.io", "-n", "team-a")["items"]
        admitted = [w for w in workloads if any(
            c["type"] == "Admitted" and c["status"] == "True"
            for c in w.get("status", {}).get("conditions", [])
        ) or w.get("status", {}).get("admission")]  # fmt: skip
        assert admitted, json.dumps(workloads, indent=1)[:4000]
    finally:
        cluster.kubectl("delete", "-n", "team-a", "-f", str(queued), "--wait=true",
                        "--timeout=120s", check=False)  # fmt: skip
        cluster.helm("uninstall", release, "--namespace", system, "--wait", check=False)
        # All but the ResourceFlavor, which the other Kueue tests' queues use too.
        cluster.kubectl("delete", "-f", "-", "--wait=false", check=False, input=_without_flavor())
        cluster.kubectl("delete", "namespace", system, "--wait=false", check=False)


def _succeeded(cluster: LocalCluster) -> Callable[[dict[str, Any]], bool]:
    """Succeeded, with every pod on a real node (the virtual nodes' taint keeps the example's
    pods off them); a Failed job fails the wait at once with its evidence."""

    def done(job: dict[str, Any]) -> bool:
        if phase(job) == "Failed":
            raise AssertionError(
                f"train-queued Failed: {json.dumps(job.get('status'), indent=1)}\n"
                + diagnostics(cluster, "team-a", "train-queued")
            )
        if phase(job) == "Running":
            for pod in cluster.get_json("pods", "-n", "team-a")["items"]:
                node = pod["spec"].get("nodeName")
                if node:
                    labels = cluster.get_json("node", node)["metadata"]["labels"]
                    assert labels.get(REAL_NODE_LABEL) == "true", (
                        f"{pod['metadata']['name']} on {node}"
                    )
        return phase(job) == "Succeeded"

    return done


def _without_flavor() -> str:
    docs = yaml.safe_load_all((EXAMPLES / "queues.yaml").read_text())
    return yaml.safe_dump_all([d for d in docs if d and d["kind"] != "ResourceFlavor"])
