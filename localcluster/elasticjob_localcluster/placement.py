"""Which node kind a pod lands on in the local cluster (pure).

Real nodes (kubelet, containerd, runc) are the ordinary nodes: a manifest written for Kubernetes
runs there as it is. Virtual nodes (the emulator, which runs a pod's command as a host process and
ignores its image) carry :data:`VIRTUAL_NODE_TAINT`, so only pods that say they were written for
the emulator (:data:`VIRTUAL_NODE_PLACEMENT`: the tests that need many cheap nodes) land there.
"""

from __future__ import annotations

import copy
from typing import Any

#: Label every real node carries (``true``).
REAL_NODE_LABEL = "elasticjob.dev/real-node"
#: Label every virtual node carries (``true``).
VIRTUAL_NODE_LABEL = "elasticjob.dev/virtual-node"
#: The taint of every virtual node: pods written for real nodes never land on the emulator by
#: accident (it would run their command on the host, where their image's files are missing).
VIRTUAL_NODE_TAINT: dict[str, str] = {
    "key": VIRTUAL_NODE_LABEL,
    "value": "true",
    "effect": "NoSchedule",
}

#: A pod spec's placement on the virtual nodes: select them and tolerate their taint.
VIRTUAL_NODE_PLACEMENT: dict[str, Any] = {
    "nodeSelector": {VIRTUAL_NODE_LABEL: "true"},
    "tolerations": [{"key": VIRTUAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
}
#: A pod spec's placement on the real nodes (only needed to keep a pod off virtual nodes that
#: it tolerates for another reason; untainted real nodes take any pod).
REAL_NODE_PLACEMENT: dict[str, Any] = {"nodeSelector": {REAL_NODE_LABEL: "true"}}


def place(pod_spec: dict[str, Any], placement: dict[str, Any]) -> dict[str, Any]:
    """``pod_spec`` with ``placement`` merged in (node selector entries added, tolerations
    appended once); returns the same dict, changed in place."""
    selector = pod_spec.setdefault("nodeSelector", {})
    selector.update(placement.get("nodeSelector", {}))
    tolerations = pod_spec.setdefault("tolerations", [])
    for toleration in placement.get("tolerations", []):
        if toleration not in tolerations:
            tolerations.append(copy.deepcopy(toleration))
    if not tolerations:
        del pod_spec["tolerations"]
    return pod_spec


def on_virtual_nodes(pod_spec: dict[str, Any]) -> dict[str, Any]:
    """``pod_spec`` placed on the virtual nodes (see :func:`place`)."""
    return place(pod_spec, VIRTUAL_NODE_PLACEMENT)
