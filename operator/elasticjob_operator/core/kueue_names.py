"""The names Kueue reads on our objects (labels, annotations, its scheduling gate), and whether
its gate holds a pod. Nothing else of ours is imported: the spec, the manifests and the pod views
all read these names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
GROUP_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
RETRIABLE_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
"""``"false"`` on the core's pods: once none of them is active, Kueue counts the group finished
and releases its quota. Without it Kueue keeps a group whose pods all failed or were deleted
(suspend, job deletion, preemption) admitted, waiting for replacements."""
ADMISSION_GATE = "kueue.x-k8s.io/admission"
"""The scheduling gate Kueue's pod webhook adds and removes on admission."""
EXTRAS_PRIORITY_ANNOTATION = "kueue.elasticjob.dev/extras-priority-class"
"""On the job: the WorkloadPriorityClass of its extras (default: the core's)."""
LABEL_PART = "elasticjob.dev/kueue-part"
"""On worker pods of a queued job: ``core`` or ``extra``."""
PART_CORE = "core"
PART_EXTRA = "extra"


def admission_gated(pod_spec: Mapping[str, Any]) -> bool:
    """Whether Kueue's admission gate holds the pod (its Workload is not admitted)."""
    return any(
        isinstance(g, Mapping) and g.get("name") == ADMISSION_GATE
        for g in pod_spec.get("schedulingGates") or []
    )
