"""Kueue's plain-pod integration in the local cluster: gating, gang admission of a pod group,
quota, and the webhook's certificate (the API server calls Kueue by URL)."""

from __future__ import annotations

from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.testing import python_pod

from tests.support.kueue import admitted, admitted_gpus, gated, wait, workloads

pytestmark = pytest.mark.e2e

SLEEP = "import time; time.sleep(600)"


def queued_pod(name: str, gpus: int, *, group: str | None = None, total: int = 0) -> dict[str, Any]:
    pod = python_pod(name, SLEEP, gpus=gpus, grace=1)
    pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "main"
    if group is not None:
        pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = group
        pod["metadata"]["annotations"] = {
            "kueue.x-k8s.io/pod-group-total-count": str(total),
            # Without it Kueue keeps a group whose pods were all deleted admitted, waiting for
            # replacements (the operator sets it on the core's pods for the same reason).
            "kueue.x-k8s.io/retriable-in-group": "false",
        }
    return pod


def test_pod_group_admitted_whole_and_single_pod_queued(
    cluster: LocalCluster, kueue_ns: str
) -> None:
    ns = kueue_ns
    # The group's first pod alone is gated and no Workload is admitted: all or nothing.
    cluster.apply(queued_pod("g-0", 2, group="g", total=2), ns)
    first = cluster.pod(ns, "g-0")
    assert first is not None and gated(first)
    assert first["metadata"]["labels"].get("kueue.x-k8s.io/managed") == "true"
    assert not any(admitted(w) for w in workloads(cluster, ns))

    cluster.apply(queued_pod("g-1", 2, group="g", total=2), ns)
    for name in ("g-0", "g-1"):
        cluster.wait_pod_phase(ns, name, "Running", timeout=120)
    assert admitted_gpus(cluster, ns) == 4

    # Quota is spent: a third pod stays gated, its Workload not admitted, and never scheduled.
    cluster.apply(queued_pod("single", 2), ns)
    wait(cluster, "a Workload for the single pod", lambda: len(workloads(cluster, ns)) == 2)
    pod = cluster.pod(ns, "single")
    assert pod is not None and gated(pod) and not pod["spec"].get("nodeName")
    single = next(w for w in workloads(cluster, ns) if not admitted(w))
    reserved = next(c for c in single["status"]["conditions"] if c["type"] == "QuotaReserved")
    assert reserved["status"] == "False" and "insufficient" in reserved["message"].lower()

    # Deleting the group releases its quota; Kueue admits the single pod, which then runs.
    cluster.kubectl("delete", "pod", "g-0", "g-1", "-n", ns, "--wait=false")
    cluster.wait_pod_phase(ns, "single", "Running", timeout=120)
    wait(cluster, "the group's quota released", lambda: admitted_gpus(cluster, ns) == 2)


def test_unmanaged_namespace_is_not_gated(cluster: LocalCluster, namespace: str) -> None:
    """Namespaces without the label never reach Kueue's pod webhooks."""
    cluster.apply(queued_pod("free", 1), namespace)
    pod = cluster.wait_pod_phase(namespace, "free", "Running", timeout=60)
    assert not gated(pod)
