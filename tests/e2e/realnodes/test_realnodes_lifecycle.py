"""A job's life on real nodes beyond its failures: scaled up and down with ``kubectl scale``
(each step one free restart: ``membership`` when a node joins, ``preemption`` when the deleted
pod's agent leaves), and its restart budget spent (``Failed`` with ``MaxRestartsExceeded`` after
exactly ``maxRestarts + 1`` failures)."""

from __future__ import annotations

from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.jobs import by_reason, condition, phase, pods, ready_nodes
from tests.support.realnodes import (
    Release,
    apply_job,
    diagnostics,
    expect_counts,
    job_events,
    job_manifest,
    termination_message,
    wait_checkpoint,
    wait_job,
)

pytestmark = pytest.mark.e2e


def _live(cluster: LocalCluster, ns: str) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in pods(cluster, ns)
        if not p["metadata"].get("deletionTimestamp")
    )


def _world(job: dict[str, Any]) -> tuple[int, int, int]:
    status = job.get("status") or {}
    return ready_nodes(job), int(status.get("worldSize") or 0), int(status.get("replicas") or 0)


def test_scale_up_and_down_on_real_nodes_is_one_membership_and_one_preemption(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    manifest = job_manifest("scaling", steps=300, nproc=1)
    # minNodes 2 (the agents' --nnodes 2:3): the first round waits for both pods, so the only
    # restarts are the two this test causes.
    manifest["spec"]["maxNodes"] = 3
    apply_job(cluster, work, manifest)
    wait_job(cluster, work, "scaling", "Running on 2 nodes", lambda j: ready_nodes(j) == 2)
    wait_checkpoint(cluster, work, step=5)

    cluster.kubectl("scale", "ej/scaling", "-n", work, "--replicas=3")
    job = wait_job(cluster, work, "scaling", "Running on 3", lambda j: _world(j) == (3, 3, 3))
    expect_counts(cluster, work, job, {"membership": 1})
    assert _live(cluster, work) == [f"scaling-worker-{i}-0" for i in range(3)]

    cluster.kubectl("scale", "ej/scaling", "-n", work, "--replicas=2")
    job = wait_job(
        cluster,
        work,
        "scaling",
        "Running on 2 after the scale-down",
        lambda j: _world(j) == (2, 2, 2) and "preemption" in by_reason(j),
    )
    cluster.wait_for(
        "scaling-worker-2-0 gone",
        lambda: _live(cluster, work) == ["scaling-worker-0-0", "scaling-worker-1-0"],
        timeout=120,
        interval=1,
    )
    # More than maxNodes is refused by the API server, naming the rule.
    scale = cluster.kubectl("scale", "ej/scaling", "-n", work, "--replicas=4", check=False)
    assert scale.returncode != 0 and "spec.replicas must be <= spec.maxNodes" in scale.stderr

    job = wait_job(cluster, work, "scaling", "Succeeded", lambda j: phase(j) == "Succeeded")
    # Scaling spends no budget: the joining node is one membership restart, the deleted pod's
    # agent counts one preemption as it leaves (its peers' restart is that same round).
    expect_counts(cluster, work, job, {"membership": 1, "preemption": 1})
    assert job["status"]["restarts"]["failures"] == 0, job["status"]["restarts"]
    restarted = job_events(cluster, work, "scaling", "Restarted")
    assert len(restarted) == 2, restarted
    assert "(membership)" in restarted[0] and "(preemption)" in restarted[1], restarted


EXIT_3 = "import sys, time; time.sleep(1); sys.exit(3)"


def test_budget_spent_on_real_nodes_fails_the_job_with_max_restarts_exceeded(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    manifest = job_manifest("doomed", nproc=1)
    manifest["spec"].update(replicas=1, minNodes=1, maxNodes=1, maxRestarts=1)
    trainer = manifest["spec"]["template"]["spec"]["containers"][0]
    trainer["command"] = ["python", "-c", EXIT_3]
    trainer["args"] = []
    apply_job(cluster, work, manifest)
    job = wait_job(cluster, work, "doomed", "Failed", lambda j: phase(j) == "Failed")
    assert job["status"]["reason"] == "MaxRestartsExceeded", job["status"]
    assert condition(job, "Failed")["status"] == "True", job["status"]
    # maxRestarts 1: the first failure was restarted, the second spent the budget.
    expect_counts(cluster, work, job, {"failure": 2})
    assert job["status"]["restarts"]["failures"] == 2, job["status"]["restarts"]
    assert len(job_events(cluster, work, "doomed", "Restarted")) == 2, diagnostics(
        cluster, work, "doomed"
    )
    assert len(job_events(cluster, work, "doomed", "MaxRestartsExceeded")) == 1
    failure = job["status"]["lastFailure"]
    assert failure["exitCode"] == 3 and failure["pod"] == "doomed-worker-0-0", failure
    cause = f"rank 0 on pod doomed-worker-0-0 (node {failure['node']}) exited with code 3"
    assert condition(job, "Failed")["message"].endswith(f"last root cause: {cause}"), job["status"]
    # The agent (PID 1 of the container) left the cause in its termination message.
    message = termination_message(cluster, work, "doomed-worker-0-0")
    assert message.startswith("rank 0 on doomed-worker-0-0 exited with code 3"), message
