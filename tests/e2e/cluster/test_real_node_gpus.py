"""Fake GPUs on real nodes: the device plugin advertises them, the scheduler and the kubelet
allocate them exclusively, and the container gets the allocated ids."""

from __future__ import annotations

import functools

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.testing import real_pod

pytestmark = pytest.mark.e2e

SHOW = (
    "import os, time\nprint(os.environ['NVIDIA_VISIBLE_DEVICES'], flush=True)\ntime.sleep(3600)\n"
)


def _logged(cluster: LocalCluster, namespace: str, pod: str) -> bool:
    return bool(cluster.pod_logs(namespace, pod).strip())


def test_two_pods_never_share_a_fake_gpu(
    cluster: LocalCluster, namespace: str, real_nodes: list[str]
) -> None:
    node = real_nodes[0]
    capacity = int(cluster.get_json("node", node)["status"]["capacity"]["nvidia.com/gpu"])
    assert capacity == cluster.info["gpus_per_node"] >= 2
    half = capacity // 2
    for name in ("gpu-a", "gpu-b"):
        cluster.apply(real_pod(name, SHOW, node=node, gpus=half, grace=1), namespace)
    ids = {}
    for name in ("gpu-a", "gpu-b"):
        cluster.wait_pod_phase(namespace, name, "Running", timeout=120)
        cluster.wait_for(
            f"{name} to print its devices", functools.partial(_logged, cluster, namespace, name)
        )
        ids[name] = set(cluster.pod_logs(namespace, name).split()[0].split(","))
    assert len(ids["gpu-a"]) == len(ids["gpu-b"]) == half
    assert not ids["gpu-a"] & ids["gpu-b"]
    assert all(i.startswith(f"GPU-{node}-") for i in ids["gpu-a"] | ids["gpu-b"])

    # Beyond capacity (the remainder, if odd, plus one): Pending with the scheduler's reason.
    cluster.apply(real_pod("gpu-c", SHOW, node=node, gpus=capacity - 2 * half + 1), namespace)

    def unschedulable() -> str:
        pod = cluster.pod(namespace, "gpu-c") or {}
        conditions = pod.get("status", {}).get("conditions", [])
        return next(
            (c.get("message", "") for c in conditions
             if c["type"] == "PodScheduled" and c["status"] == "False"), ""
        )  # fmt: skip

    message = cluster.wait_for("gpu-c to be unschedulable", unschedulable)
    assert "nvidia.com/gpu" in message
    pod = cluster.pod(namespace, "gpu-c")
    assert pod is not None and pod["status"]["phase"] == "Pending"
