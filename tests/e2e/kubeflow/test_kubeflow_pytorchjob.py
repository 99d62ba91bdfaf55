"""Kubeflow's PyTorchJob on the local cluster's real nodes, the peer ``bench/goodput_bench.py``
measures against: an elastic PyTorchJob (c10d, the store in worker 0) trains our training image
to Succeeded, and its validating webhook (our certificates, called by URL) rejects a bad job."""

from __future__ import annotations

import json
from typing import Any

import pytest
from elasticjob_localcluster import ClusterError, LocalCluster
from elasticjob_localcluster.kubeflow import TrainingOperator
from elasticjob_localcluster.testing import real_pod

pytestmark = pytest.mark.e2e


def pytorchjob(name: str, *, container: str = "pytorch", steps: int = 40) -> dict[str, Any]:
    """2 workers (1 process each) of the training image's train.py under torchrun, elastic
    between 1 and 2 nodes with c10d, placed on real nodes by :func:`real_pod`."""
    template = real_pod(name, "")
    spec = template["spec"]
    spec.pop("restartPolicy")  # the replica spec's restartPolicy decides
    (main,) = spec["containers"]
    # Kubeflow passes the rendezvous as PET_* variables, which torchrun reads.
    command = [
        "torchrun", "train.py", "--steps", str(steps), "--step-sleep", "0.25",
        "--checkpoint-every", "10", "--checkpoint-dir", "/ckpt",
    ]  # fmt: skip
    main.update(
        {
            "name": container,
            "command": command,
            "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
            "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
        }
    )
    spec["volumes"] = [{"name": "ckpt", "emptyDir": {}}]
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "elasticPolicy": {
                "rdzvBackend": "c10d",
                "minReplicas": 1,
                "maxReplicas": 2,
                "maxRestarts": 3,
            },
            "nprocPerNode": "1",
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": 2,
                    "restartPolicy": "OnFailure",
                    "template": {"metadata": {"labels": template["metadata"]["labels"]},
                                 "spec": spec},
                }
            },
        },
    }  # fmt: skip


def condition(job: dict[str, Any], type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def finished(job: dict[str, Any]) -> dict[str, Any] | None:
    return job if condition(job, "Succeeded") or condition(job, "Failed") else None


def test_an_elastic_pytorchjob_trains_on_real_nodes_to_succeeded(
    cluster: LocalCluster,
    training_operator: TrainingOperator,
    namespace: str,
    real_nodes: list[str],
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pytorchjob("elastic")))
    try:
        job = cluster.wait_for(
            "PyTorchJob elastic Succeeded (or Failed)",
            lambda: finished(cluster.get_json("pytorchjob", "elastic", "-n", namespace)),
            timeout=300,
            interval=2,
        )
    except TimeoutError as exc:
        pods = cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
        raise AssertionError(
            f"{exc}\npods:\n{pods}\noperator:\n{training_operator.log_tail()}"
        ) from None
    workers = cluster.get_json(
        "pods", "-n", namespace, "-l", "training.kubeflow.org/job-name=elastic"
    )["items"]
    logs = {
        p["metadata"]["name"]: cluster.pod_logs(namespace, p["metadata"]["name"]) for p in workers
    }
    assert condition(job, "Succeeded"), (job.get("status"), logs)
    # Both workers on real nodes, in one c10d group of two hosted by worker 0.
    assert {p["spec"]["nodeName"] for p in workers} <= set(real_nodes), workers
    env = {e["name"]: e.get("value") for e in workers[0]["spec"]["containers"][0]["env"]}
    assert env["PET_RDZV_BACKEND"] == "c10d" and env["PET_NNODES"] == "1:2", env
    assert env["PET_RDZV_ENDPOINT"] == "elastic-worker-0:23456", env
    assert any("world_size=2" in log for log in logs.values()), logs
    assert any("done step=40" in log for log in logs.values()), logs


def test_the_pytorchjob_webhook_rejects_a_job_without_its_pytorch_container(
    cluster: LocalCluster, training_operator: TrainingOperator, namespace: str
) -> None:
    bad = json.dumps(pytorchjob("unnamed", container="trainer"))
    with pytest.raises(ClusterError, match="must have at least one container with name pytorch"):
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=bad)
    assert (
        cluster.kubectl("get", "pytorchjob", "unnamed", "-n", namespace, check=False).returncode
        != 0
    )
