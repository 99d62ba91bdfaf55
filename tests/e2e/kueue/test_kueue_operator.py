"""ElasticJobs queued through a real Kueue on the local cluster (real scheduler, real webhooks):
gang admission of the core, extras waiting for quota, Queued status, preemption, scaling,
suspension, and Kueue being down."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.testing import python_pod

from tests.support.jobs import by_reason, condition, phase, st, wait_job
from tests.support.kueue import (
    admitted_gpus,
    events,
    gated,
    gpu_job,
    live,
    part,
    set_quota,
    wait,
    worker_pods,
)

pytestmark = pytest.mark.e2e


def _running_at(world: int) -> Callable[[dict[str, Any]], bool]:
    return lambda job: phase(job) == "Running" and st(job).get("worldSize") == world


def test_core_admitted_extras_wait_and_a_second_job_queues(cluster: LocalCluster, kq: str) -> None:
    """Quota for 4 GPUs; a job of minNodes 2 / replicas 4 at 2 GPUs per node trains on its core
    while its extras wait; a second job is Queued (not PodsUnschedulable) and holds no GPU."""
    cluster.apply(gpu_job("first", replicas=4, min_nodes=2), kq)
    wait_job(cluster, kq, "first", "training on its core", _running_at(2), timeout=240)
    pods = live(worker_pods(cluster, kq, "first"))
    core = [p for p in pods if part(p) == "core"]
    extras = [p for p in pods if part(p) == "extra"]
    assert len(core) == 2 and not any(gated(p) for p in core)
    assert len(extras) == 2 and all(gated(p) and not p["spec"].get("nodeName") for p in extras)
    assert admitted_gpus(cluster, kq) == 4

    cluster.apply(gpu_job("second", replicas=2, min_nodes=2), kq)
    job = wait_job(
        cluster, kq, "second", "Queued with Kueue's reason",
        lambda j: phase(j) == "Queued" and "insufficient" in condition(j, "Queued").get(
            "message", ""),
        timeout=120,
    )  # fmt: skip
    assert condition(job, "Queued")["status"] == "True"
    assert st(job)["reason"] == "Queued"
    second = worker_pods(cluster, kq, "second")
    assert len(second) == 2 and all(gated(p) and not p["spec"].get("nodeName") for p in second)
    assert admitted_gpus(cluster, kq) == 4  # the second job holds nothing
    reasons = {e["reason"] for e in events(cluster, kq, "second")}
    assert "Queued" in reasons and "PodsUnschedulable" not in reasons
    assert condition(job, "Stalled").get("status") != "True"

    # The first job goes: the second is admitted whole and trains.
    cluster.kubectl("delete", "ej", "first", "-n", kq, "--wait=false")
    job = wait_job(cluster, kq, "second", "admitted and training", _running_at(2), timeout=240)
    assert condition(job, "Queued")["status"] == "False"
    assert "PodsUnschedulable" not in {e["reason"] for e in events(cluster, kq, "second")}


def test_preemption_takes_extras_first(cluster: LocalCluster, kq: str) -> None:
    """A job of 3 nodes (core 2 + 1 extra) fills 6 GPUs; an urgent pod preempts the extra, not
    the core: the job trains on at minNodes after a free `preemption` restart."""
    set_quota(cluster, kq, 6)
    cluster.apply(
        gpu_job("elastic", replicas=3, min_nodes=2, priority="ej-test-core",
                extras_priority="ej-test-extras"),
        kq,
    )  # fmt: skip
    wait_job(cluster, kq, "elastic", "training at 3 nodes", _running_at(3), timeout=300)

    cluster.apply(urgent_pod("urgent-a", gpus=2), kq)
    cluster.wait_pod_phase(kq, "urgent-a", "Running", timeout=180)
    job = wait_job(cluster, kq, "elastic", "training at minNodes", _running_at(2), timeout=240)
    counts = by_reason(job)
    assert counts.get("preemption", 0) >= 1, counts
    assert st(job)["restarts"]["failures"] == 0
    core = [p for p in live(worker_pods(cluster, kq, "elastic")) if part(p) == "core"]
    assert len(core) == 2 and not any(gated(p) for p in core)


def test_a_preempted_core_queues_and_re_forms(cluster: LocalCluster, kq: str) -> None:
    """The core preempted: the job is Queued, holds no GPU, and re-forms when re-admitted, with
    its job-wide counts exact (no failure; no count goes down)."""
    set_quota(cluster, kq, 6)
    cluster.apply(
        gpu_job("elastic", replicas=3, min_nodes=2, priority="ej-test-core",
                extras_priority="ej-test-extras"),
        kq,
    )  # fmt: skip
    wait_job(cluster, kq, "elastic", "training at 3 nodes", _running_at(3), timeout=300)
    cluster.apply(urgent_pod("urgent-a", gpus=2), kq)
    cluster.apply(urgent_pod("urgent-b", gpus=4), kq)
    cluster.wait_pod_phase(kq, "urgent-b", "Running", timeout=240)
    job = wait_job(cluster, kq, "elastic", "queued again", lambda j: phase(j) == "Queued",
                   timeout=180)  # fmt: skip
    wait(cluster, "the job's quota released", lambda: admitted_gpus(cluster, kq) == 6)
    assert not [p for p in live(worker_pods(cluster, kq, "elastic")) if not gated(p)]
    before = by_reason(job)
    cluster.kubectl("delete", "pod", "urgent-a", "urgent-b", "-n", kq, "--wait=false")
    job = wait_job(cluster, kq, "elastic", "re-formed", _running_at(3), timeout=300)
    after = by_reason(job)
    assert st(job)["restarts"]["failures"] == 0, after
    assert all(after.get(r, 0) >= n for r, n in before.items()), (before, after)
    assert not [p for p in worker_pods(cluster, kq, "elastic") if gated(p) and part(p) == "core"]


def urgent_pod(name: str, gpus: int) -> dict[str, Any]:
    pod = python_pod(name, "import time; time.sleep(3600)", gpus=gpus, grace=1)
    pod["metadata"]["labels"].update(
        {"kueue.x-k8s.io/queue-name": "main", "kueue.x-k8s.io/priority-class": "ej-test-urgent"}
    )
    return pod


def _workload_uid(cluster: LocalCluster, ns: str, name: str) -> str:
    return str(cluster.get_json("workloads.kueue.x-k8s.io", name, "-n", ns)["metadata"]["uid"])


def test_a_failed_core_pod_is_replaced_in_the_same_group(cluster: LocalCluster, kq: str) -> None:
    cluster.apply(gpu_job("steady", replicas=2, min_nodes=2), kq)
    wait_job(cluster, kq, "steady", "training", _running_at(2), timeout=240)
    pod = next(p for p in live(worker_pods(cluster, kq, "steady")) if part(p) == "core")
    group = pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"]
    workload = _workload_uid(cluster, kq, group)
    cluster.kill_container(kq, pod["metadata"]["name"])
    job = wait_job(
        cluster, kq, "steady", "re-formed after the failure",
        lambda j: _running_at(2)(j) and st(j)["restarts"]["failures"] >= 1, timeout=240,
    )  # fmt: skip
    assert st(job)["restarts"]["failures"] == 1
    core = live(worker_pods(cluster, kq, "steady"))
    assert pod["metadata"]["name"] not in {p["metadata"]["name"] for p in core}
    assert {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in core} == {group}
    assert _workload_uid(cluster, kq, group) == workload  # the same admitted Workload
    assert admitted_gpus(cluster, kq) == 4


def test_scale_changes_admitted_quota(cluster: LocalCluster, kq: str) -> None:
    set_quota(cluster, kq, 6)
    cluster.apply(gpu_job("elastic", replicas=1, min_nodes=1), kq)
    wait_job(cluster, kq, "elastic", "training", _running_at(1), timeout=240)
    assert admitted_gpus(cluster, kq) == 2
    cluster.kubectl("scale", "ej/elastic", "-n", kq, "--replicas=3")
    wait_job(cluster, kq, "elastic", "scaled up", _running_at(3), timeout=240)
    assert admitted_gpus(cluster, kq) == 6
    cluster.kubectl("scale", "ej/elastic", "-n", kq, "--replicas=1")
    wait_job(cluster, kq, "elastic", "scaled down", _running_at(1), timeout=240)
    wait(cluster, "the extras' quota released", lambda: admitted_gpus(cluster, kq) == 2)


def test_suspend_and_resume_release_and_retake_quota(cluster: LocalCluster, kq: str) -> None:
    cluster.apply(gpu_job("pausable", replicas=2, min_nodes=2), kq)
    wait_job(cluster, kq, "pausable", "training", _running_at(2), timeout=240)
    assert admitted_gpus(cluster, kq) == 4
    patch = '{"spec": {"runPolicy": {"suspend": %s}}}'
    cluster.kubectl("patch", "ej/pausable", "-n", kq, "--type=merge", "-p", patch % "true")
    wait_job(cluster, kq, "pausable", "suspended", lambda j: phase(j) == "Suspended")
    wait(cluster, "all quota released", lambda: admitted_gpus(cluster, kq) == 0)
    cluster.kubectl("patch", "ej/pausable", "-n", kq, "--type=merge", "-p", patch % "false")
    # Resumed: new core pods form a new Workload, admitted with the same quota, run, and train.
    wait(
        cluster, "the core re-admitted and running",
        lambda: len([p for p in live(worker_pods(cluster, kq, "pausable"))
                     if not gated(p) and p["status"].get("phase") == "Running"]) == 2,
        timeout=240,
    )  # fmt: skip
    assert admitted_gpus(cluster, kq) == 4
    wait_job(cluster, kq, "pausable", "training again", _running_at(2), timeout=240)


def test_a_finished_job_releases_its_quota(cluster: LocalCluster, kq: str) -> None:
    cluster.apply(gpu_job("short", replicas=2, min_nodes=2, steps=20), kq)
    wait_job(cluster, kq, "short", "Succeeded", lambda j: phase(j) == "Succeeded", timeout=300)
    wait(cluster, "quota released", lambda: admitted_gpus(cluster, kq) == 0)
