"""A lost node: its pods' processes die, the pods fail, the node turns NotReady."""

from __future__ import annotations

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.testing import python_pod

pytestmark = pytest.mark.e2e


def test_lost_node_fails_its_pods(cluster: LocalCluster, namespace: str) -> None:
    node = cluster.virtual_nodes[-1]
    code = "import time; time.sleep(3600)"
    cluster.apply(
        python_pod("doomed", code, restart_policy="Always", extra_spec={"nodeName": node}),
        namespace,
    )
    cluster.apply(
        python_pod("survivor", code, extra_spec={"nodeName": cluster.virtual_nodes[0]}), namespace
    )
    cluster.wait_pod_phase(namespace, "doomed", "Running")
    cluster.wait_pod_phase(namespace, "survivor", "Running")
    try:
        lost = cluster.lose_node(node)
        assert f"{namespace}/doomed" in lost
        pod = cluster.wait_pod_phase(namespace, "doomed", "Failed")
        assert pod["status"]["reason"] == "NodeLost"

        def ready_status() -> str:
            conditions = cluster.get_json("node", node)["status"]["conditions"]
            return str(next(c["status"] for c in conditions if c["type"] == "Ready"))

        assert ready_status() == "Unknown"
        taints = cluster.wait_for(
            "unreachable taint",
            lambda: [t for t in cluster.get_json("node", node)["spec"].get("taints", [])
                     if t["key"] == "node.kubernetes.io/unreachable"],
            timeout=60,
        )  # fmt: skip
        assert {t["effect"] for t in taints} >= {"NoSchedule"}
        survivor = cluster.pod(namespace, "survivor")
        assert survivor is not None and survivor["status"]["phase"] == "Running"
    finally:
        cluster.restore_node(node)
    cluster.wait_for(
        "node Ready again",
        lambda: not [t for t in cluster.get_json("node", node)["spec"].get("taints", [])
                     if t["key"].startswith("node.kubernetes.io/")],
        timeout=60,
    )  # fmt: skip
