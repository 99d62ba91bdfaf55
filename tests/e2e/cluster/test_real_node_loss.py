"""A real node lost: every one of its processes dies at once, the control plane notices, and a
restored node runs its pods again."""

from __future__ import annotations

from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.realnodes import cgroups
from elasticjob_localcluster.testing import real_pod

pytestmark = pytest.mark.e2e


def _ready(cluster: LocalCluster, node: str) -> str:
    conditions: list[dict[str, Any]] = cluster.get_json("node", node)["status"]["conditions"]
    return next(str(c["status"]) for c in conditions if c["type"] == "Ready")


def test_lost_real_node_dies_at_once_and_boots_again(
    cluster: LocalCluster, namespace: str, real_nodes: list[str]
) -> None:
    node = real_nodes[1]
    cluster.apply(
        real_pod("resident", "import time; time.sleep(3600)", node=node, restart_policy="Always"),
        namespace,
    )
    cluster.wait_pod_phase(namespace, "resident", "Running", timeout=120)
    slot = cluster.info["slot"]
    assert cgroups.pids(f"/ej{slot}-nodes/{node}")  # kubelet, containerd, shims, the container

    lost = cluster.lose_node(node)
    assert f"{namespace}/resident" in lost
    assert cgroups.pids(f"/ej{slot}-nodes/{node}") == set()
    cluster.wait_for(f"{node} Ready=Unknown", lambda: _ready(cluster, node) == "Unknown",
                     timeout=90)  # fmt: skip

    cluster.restore_node(node)
    cluster.wait_for(f"{node} Ready again", lambda: _ready(cluster, node) == "True", timeout=90)

    def running_again() -> bool:
        pod = cluster.pod(namespace, "resident") or {}
        statuses = pod.get("status", {}).get("containerStatuses", [])
        return bool(statuses) and "running" in statuses[0]["state"]

    cluster.wait_for("the pod to run again on the rebooted node", running_again, timeout=120)

    def dns_available() -> bool:
        status = cluster.get_json("deployment", "coredns", "-n", "kube-system")["status"]
        return int(status.get("availableReplicas", 0)) >= 1

    # Leave the cluster as found: CoreDNS may have run on the lost node.
    cluster.wait_for("CoreDNS available again", dns_available, timeout=120)
