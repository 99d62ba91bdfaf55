"""Two operator replicas from the chart (``replicaCount: 2``) on the local cluster's real nodes:
one leads (holds the Lease), the other stands by without reconciling. With a job training, the
leader's pod is killed twice, as a crash (SIGKILL to its container: the standby waits out the
Lease's duration) and as a deletion (the pod hands its Lease back on SIGTERM); each time the
standby takes the Lease over, the job is not disturbed (no restart counted, no worker pod
replaced or restarted) and it Succeeds. The failover times are printed (bench/RESULTS.md).
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.jobs import by_reason, phase, pods, ready_nodes, st
from tests.support.realnodes import (
    Release,
    apply_job,
    diagnostics,
    installed_release,
    job_manifest,
    wait_job,
)

pytestmark = pytest.mark.e2e

JOB = "ha"
OPERATOR_PODS = "app.kubernetes.io/name=elasticjob-operator,app.kubernetes.io/component=operator"
#: The operator's Lease duration (core/leadership.py's default, which the chart keeps): a
#: crashed leader's Lease is taken over once it has not changed for that long.
LEASE_DURATION_S = 15.0


@dataclass(frozen=True)
class Holder:
    """The Lease as read: its holder's pod (the identity is ``<pod>_<instance>``), the identity
    itself, when it was acquired (the new holder's wall clock, this machine's) and its
    transitions."""

    pod: str
    identity: str
    acquired: float
    transitions: int


@pytest.fixture
def ha_release(cluster: LocalCluster, tmp_path: Path) -> Iterator[Release]:
    """The chart with its default values but two replicas and the watched namespace, in
    ``restricted`` namespaces, on the real nodes (the virtual ones are tainted)."""
    with installed_release(cluster, tmp_path, {"replicaCount": 2}, prefix="ejha") as rel:
        yield rel


def _lease_name(rel: Release) -> str:
    # The chart's fullname: <release>-elasticjob-operator (the release name lacks the chart's).
    return f"{rel.name}-elasticjob-operator"


def _micro_time(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _holder(cluster: LocalCluster, rel: Release) -> Holder | None:
    done = cluster.kubectl(
        "get", "lease", _lease_name(rel), "-n", rel.system, "-o", "json", check=False
    )  # fmt: skip
    if done.returncode != 0:
        return None
    spec = json.loads(done.stdout).get("spec") or {}
    identity = str(spec.get("holderIdentity") or "")
    if not identity or not spec.get("acquireTime"):
        return None
    return Holder(
        pod=identity.rsplit("_", 1)[0],
        identity=identity,
        acquired=_micro_time(str(spec["acquireTime"])),
        transitions=int(spec.get("leaseTransitions") or 0),
    )


def _operator_pods(cluster: LocalCluster, rel: Release) -> list[dict[str, Any]]:
    items = cluster.get_json("pods", "-n", rel.system, "-l", OPERATOR_PODS)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _leader_and_standby(cluster: LocalCluster, rel: Release) -> tuple[Holder, str]:
    """Wait until the Lease names one of two Ready operator pods; (holder, the other pod)."""
    found: list[tuple[Holder, str]] = []

    def settled() -> bool:
        holder = _holder(cluster, rel)
        live = _operator_pods(cluster, rel)
        names = {p["metadata"]["name"] for p in live}
        if holder is None or len(live) != 2 or not all(map(_ready, live)):
            return False
        if holder.pod not in names:
            return False
        found[:] = [(holder, (names - {holder.pod}).pop())]
        return True

    cluster.wait_for(
        f"a leader and a Ready standby in {rel.system}", settled, timeout=180, interval=0.5
    )
    return found[0]


def _operator_log(cluster: LocalCluster, rel: Release, pod: str) -> str:
    return cluster.pod_logs(rel.system, pod)


def _failover(cluster: LocalCluster, rel: Release, before: Holder, began: float) -> Holder:
    """Wait until another pod holds the Lease; it must have taken it after ``began``."""
    taken: list[Holder] = []

    def moved() -> bool:
        holder = _holder(cluster, rel)
        if holder is None or holder.pod == before.pod:
            return False
        taken[:] = [holder]
        return True

    cluster.wait_for(
        f"the standby to take the Lease from {before.identity}",
        moved,
        timeout=LEASE_DURATION_S + 60,
        interval=0.2,
    )
    new = taken[0]
    assert new.transitions == before.transitions + 1, (before, new)
    assert new.acquired >= began - 1, (began, new)
    return new


def _workers(cluster: LocalCluster, ns: str) -> dict[str, tuple[str, int]]:
    """name -> (uid, container restarts) of the job's worker pods."""
    return {
        p["metadata"]["name"]: (
            p["metadata"]["uid"],
            sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses") or []),
        )
        for p in pods(cluster, ns)
    }


def _undisturbed(cluster: LocalCluster, ns: str, workers: dict[str, tuple[str, int]]) -> None:
    job = cluster.get_json("ej", JOB, "-n", ns)
    now = _workers(cluster, ns)
    if by_reason(job) or now != workers:
        pytest.fail(
            f"the failover disturbed the job: restarts {by_reason(job)}, workers before "
            f"{workers}, after {now}\n{diagnostics(cluster, ns, JOB)}",
            pytrace=False,
        )


def test_standby_takes_over_from_a_killed_leader_without_disturbing_the_job(
    cluster: LocalCluster, ha_release: Release, capsys: pytest.CaptureFixture[str]
) -> None:
    rel = ha_release
    leader, standby = _leader_and_standby(cluster, rel)
    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in _operator_pods(cluster, rel)}
    assert set(nodes.values()) <= set(cluster.real_nodes), nodes

    # Long enough for both failovers (about 20 s and 3 s) and the checks between them.
    apply_job(cluster, rel.work, job_manifest(JOB, steps=500, nproc=1))
    wait_job(cluster, rel.work, JOB, "Running on 2 nodes", lambda j: ready_nodes(j) == 2)
    workers = _workers(cluster, rel.work)
    assert len(workers) == 2, workers

    # The standby stood by the whole time: it never started kopf, so it handled nothing.
    standby_log = _operator_log(cluster, rel, standby)
    assert "standing by" in standby_log, standby_log[-3000:]
    assert f"{rel.work}/{JOB}" not in standby_log, standby_log[-3000:]
    assert f"{rel.work}/{JOB}" in _operator_log(cluster, rel, leader.pod)

    # 1. A crash: SIGKILL to the leader's container (it hands nothing back). The standby takes
    # over once the Lease has not changed for its duration.
    crashed = time.time()
    cluster.kill_container(rel.system, leader.pod, signal.SIGKILL)
    second = _failover(cluster, rel, leader, crashed)
    assert second.pod == standby, (second, standby)
    crash_s = second.acquired - crashed
    _undisturbed(cluster, rel.work, workers)

    # The crashed pod's container came back as a standby (same pod, a new identity).
    restarted = leader.pod
    cluster.wait_for(
        f"{restarted} back and standing by",
        lambda: (
            "standing by" in _operator_log(cluster, rel, restarted)
            and all(map(_ready, _operator_pods(cluster, rel)))
        ),
        timeout=120,
        interval=1,
    )

    # 2. A deletion (a drain, a rollout): the leader hands its Lease back on SIGTERM.
    deleted = time.time()
    cluster.kubectl("delete", "pod", second.pod, "-n", rel.system, "--wait=false")
    third = _failover(cluster, rel, second, deleted)
    delete_s = third.acquired - deleted
    _undisturbed(cluster, rel.work, workers)

    # The job trains to the end under the new leader, which writes its final status.
    job = wait_job(cluster, rel.work, JOB, "Succeeded", lambda j: phase(j) == "Succeeded")
    _undisturbed(cluster, rel.work, workers)
    assert st(job).get("restarts", {}).get("total", 0) == 0, st(job)
    assert crash_s < LEASE_DURATION_S + 10, f"crash failover took {crash_s:.1f} s"
    # Handed back, not waited out: faster than a crash's failover can be.
    assert delete_s < LEASE_DURATION_S, f"failover on deletion took {delete_s:.1f} s"
    with capsys.disabled():
        print(
            f"\noperator failover (2 replicas, pods on {sorted(set(nodes.values()))}): "
            f"leader crashed (SIGKILL) -> standby leads in {crash_s:.1f} s; "
            f"leader pod deleted -> standby leads in {delete_s:.1f} s; "
            "job restarts 0, workers untouched"
        )
