"""The API objects of a virtual node (pure builders): what the node emulator posts as the
kubelet would."""

from __future__ import annotations

from elasticjob_localcluster.config import ClusterConfig
from elasticjob_localcluster.placement import VIRTUAL_NODE_LABEL, VIRTUAL_NODE_TAINT
from elasticjob_localcluster.versions import K8S_VERSION
from elasticjob_localcluster.virtualnode import (
    LEASE_SECONDS,
    node_lease,
    node_object,
    node_status,
)

NOW = "2026-01-02T03:04:05Z"


def _conditions(status: dict[str, object]) -> dict[str, dict[str, str]]:
    conditions = status["conditions"]
    assert isinstance(conditions, list)
    return {c["type"]: c for c in conditions}


def test_a_ready_node_reports_its_capacity_address_and_kubelet() -> None:
    config = ClusterConfig(gpus_per_node=2, cpu_per_node="4", memory_per_node="8Gi")
    status = node_status(
        config, "node-1", ready=True, host_ip="10.0.0.1", kubelet_port=1234, now=NOW
    )
    assert status["capacity"] == status["allocatable"]
    assert status["capacity"]["nvidia.com/gpu"] == "2"
    assert status["capacity"]["cpu"] == "4"
    assert status["addresses"][0] == {"type": "InternalIP", "address": "10.0.0.1"}
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 1234}}
    assert status["nodeInfo"]["kubeletVersion"] == K8S_VERSION
    conditions = _conditions(status)
    assert conditions["Ready"]["status"] == "True"
    assert conditions["MemoryPressure"]["status"] == "False"
    assert all(c["lastHeartbeatTime"] == NOW for c in conditions.values())


def test_a_lost_node_is_ready_unknown() -> None:
    status = node_status(
        ClusterConfig(), "node-1", ready=False, host_ip="10.0.0.1", kubelet_port=1, now=NOW
    )
    ready = _conditions(status)["Ready"]
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")


def test_the_node_is_labelled_and_tainted_virtual_and_owns_its_lease() -> None:
    node = node_object("node-2")
    assert node["metadata"]["labels"][VIRTUAL_NODE_LABEL] == "true"
    assert node["spec"]["taints"] == [dict(VIRTUAL_NODE_TAINT)]
    lease = node_lease("node-2", "uid-2", "2026-01-02T03:04:05.000000Z")
    assert lease["metadata"]["namespace"] == "kube-node-lease"
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "uid-2"
    assert lease["spec"]["leaseDurationSeconds"] == LEASE_SECONDS
