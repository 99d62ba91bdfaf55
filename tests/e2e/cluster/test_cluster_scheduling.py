"""The real scheduler places pods on virtual nodes by their GPU requests."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.placement import on_virtual_nodes
from elasticjob_localcluster.testing import log_contains, python_pod

pytestmark = pytest.mark.e2e


def test_nodes_advertise_gpus(cluster: LocalCluster) -> None:
    want = str(cluster.info["gpus_per_node"])

    def advertised() -> list[dict[str, Any]] | None:
        # A real node's device plugin registers a moment after the node is Ready: when this
        # test runs first in a session, the kubelet may not have advertised its GPUs yet.
        nodes: list[dict[str, Any]] = cluster.get_json("nodes")["items"]
        gpus = [n["status"].get("allocatable", {}).get("nvidia.com/gpu") for n in nodes]
        return nodes if all(g == want for g in gpus) else None

    nodes = cluster.wait_for(f"every node advertising {want} GPUs", advertised, timeout=60)
    assert [n["metadata"]["name"] for n in nodes] == cluster.nodes
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert version["gitVersion"] == cluster.info["version"]
    assert version["gitVersion"].startswith("v1.3")


def test_deployment_pods_are_scheduled_and_run(cluster: LocalCluster, namespace: str) -> None:
    gpus = int(cluster.info["gpus_per_node"])
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": on_virtual_nodes({
                    "containers": [
                        {
                            "name": "main",
                            "image": "unused",
                            "command": ["python", "-u", "-c"],
                            "args": [
                                "import os, time; print('hello from', os.environ['NODE']); "
                                "time.sleep(3600)"
                            ],
                            "env": [
                                {
                                    "name": "NODE",
                                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                }
                            ],
                            # Each pod needs more than half a node's GPUs: one pod per node.
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus // 2 + 1)}},
                        }
                    ]
                }),
            },
        },
    }  # fmt: skip
    cluster.apply(deployment, namespace)
    cluster.kubectl("rollout", "status", "deployment/web", "-n", namespace, "--timeout=60s")
    pods = cluster.get_json("pods", "-n", namespace, "-l", "app=web")["items"]
    assert len(pods) == 3
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 3 and nodes <= set(cluster.nodes)
    ips = {p["status"]["podIP"] for p in pods}
    assert len(ips) == 3
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["status"]["phase"] == "Running"
        assert pod["status"]["hostIP"] == cluster.info["gateway"]
        assert pod["status"]["containerStatuses"][0]["ready"] is True
        expected = f"hello from {pod['spec']['nodeName']}"
        cluster.wait_for(
            f"log of {name}", partial(log_contains, cluster, namespace, name, expected)
        )
        assert expected in cluster.kubectl("logs", name, "-n", namespace).stdout


def test_pod_asking_too_many_gpus_stays_pending(cluster: LocalCluster, namespace: str) -> None:
    too_many = int(cluster.info["gpus_per_node"]) + 1
    cluster.apply(python_pod("greedy", "print('never')", gpus=too_many), namespace)

    def unschedulable() -> dict[str, Any] | None:
        pod = cluster.pod(namespace, "greedy")
        for condition in (pod or {}).get("status", {}).get("conditions", []):
            if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                return dict(condition)
        return None

    condition = cluster.wait_for("PodScheduled=False/Unschedulable", unschedulable, timeout=30)
    assert condition["status"] == "False"
    assert "Insufficient nvidia.com/gpu" in condition["message"]
    pod = cluster.pod(namespace, "greedy")
    assert pod is not None
    assert pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")
