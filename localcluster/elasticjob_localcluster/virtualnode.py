"""The API objects of one virtual node, as a kubelet would write them (pure): the Node, its
status and its Lease in ``kube-node-lease``. The node emulator posts them."""

from __future__ import annotations

from typing import Any

from .config import ClusterConfig
from .placement import VIRTUAL_NODE_LABEL, VIRTUAL_NODE_TAINT
from .versions import K8S_VERSION

#: The node Lease's duration; the emulator renews it every few seconds.
LEASE_SECONDS = 40


def node_object(node: str) -> dict[str, Any]:
    """The Node ``node``: labelled and tainted as a virtual node."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node,
            "labels": {
                "kubernetes.io/hostname": node,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "elasticjob-virtual",
                VIRTUAL_NODE_LABEL: "true",
            },
        },
        # Only pods written for the emulator (which ignores images) tolerate this.
        "spec": {"taints": [dict(VIRTUAL_NODE_TAINT)]},
    }


def node_lease(node: str, node_uid: str, renew_time: str) -> dict[str, Any]:
    """The node's Lease (owned by its Node), renewed at ``renew_time`` (RFC 3339, microseconds)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": node,
            "namespace": "kube-node-lease",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node,
                    "uid": node_uid,
                }
            ],
        },
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": renew_time,
        },
    }


def node_status(
    config: ClusterConfig, node: str, *, ready: bool, host_ip: str, kubelet_port: int, now: str
) -> dict[str, Any]:
    """The status of ``node`` at ``now``: capacity from ``config``, its conditions (Ready, or
    Unknown once its kubelet is lost), its address and the kubelet's endpoint."""
    c = config
    capacity = {
        "cpu": c.cpu_per_node,
        "memory": c.memory_per_node,
        "pods": str(c.pods_per_node),
        "ephemeral-storage": "100Gi",
        "nvidia.com/gpu": str(c.gpus_per_node),
    }

    def condition(kind: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
        return {
            "type": kind,
            "status": "True" if ok else "False",
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }

    ready_condition = condition("Ready", True, "KubeletReady", "kubelet is posting ready status")
    if not ready:
        ready_condition.update(
            status="Unknown",
            reason="NodeStatusUnknown",
            message="Kubelet stopped posting node status.",
        )
    return {
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": [
            condition("MemoryPressure", False, "KubeletHasSufficientMemory", "ok"),
            condition("DiskPressure", False, "KubeletHasNoDiskPressure", "ok"),
            condition("PIDPressure", False, "KubeletHasSufficientPID", "ok"),
            ready_condition,
        ],
        "addresses": [
            {"type": "InternalIP", "address": host_ip},
            {"type": "Hostname", "address": node},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "machineID": f"elasticjob-{node}",
            "systemUUID": f"elasticjob-{node}",
            "bootID": f"elasticjob-{node}",
            "kernelVersion": "",
            "osImage": "elasticjob local cluster node emulator",
            "containerRuntimeVersion": "elasticjob-localcluster://0.1",
            "kubeletVersion": K8S_VERSION,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }
