"""The managed etcd lost on real nodes: its container killed through containerd, or its pod cut off
the network (its veth on the node's CNI bridge down). The operator (the chart's pod) sees the job
``Stalled`` with reason ``EtcdUnavailable`` within 15 s, deletes the lost etcd pod, creates
generation 1 and seeds it; the agents re-form on it and the job succeeds. The outage is counted
once, as ``etcd-recovered``, and nothing else counts (the agents' workers never failed)."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.jobs import condition, get_job, phase, pods, ready_nodes
from tests.support.realnodes import (
    RESUMED,
    Release,
    apply_job,
    diagnostics,
    expect_counts,
    job_events,
    job_manifest,
    operator_metrics,
    wait_checkpoint,
    wait_job,
    worker_logs,
)

pytestmark = pytest.mark.e2e

DETECT_WITHIN = 15.0
"""The stall detection target (docs/operator.md): EtcdUnavailable within 15 s of the outage."""


def _etcd_pod(cluster: LocalCluster, ns: str) -> dict[str, Any]:
    live = [p for p in pods(cluster, ns, "etcd") if p["status"].get("phase") == "Running"]
    assert len(live) == 1, [(p["metadata"]["name"], p["status"].get("phase")) for p in live]
    assert live[0]["spec"]["nodeName"] in cluster.real_nodes, live[0]["spec"]["nodeName"]
    return live[0]


def _seconds_to_stall(cluster: LocalCluster, ns: str, name: str, since_wall: float) -> float:
    """Seconds from ``since_wall`` (Unix time) to the ``EtcdUnavailable`` stall.

    A killed etcd can be recreated and the stall over before a poll sees the condition; the
    stall's Warning Event (whole seconds, truncated) is the record then.
    """
    deadline = time.monotonic() + DETECT_WITHIN + 30
    while time.monotonic() < deadline:
        cond = condition(get_job(cluster, ns, name), "Stalled")
        if cond.get("reason") == "EtcdUnavailable" and cond.get("status") == "True":
            return max(0.0, time.time() - since_wall)
        stamps = [
            str(e.get("firstTimestamp") or e.get("eventTime"))
            for e in cluster.get_json(
                "events", "-n", ns, "--field-selector",
                f"involvedObject.name={name},reason=EtcdUnavailable",
            )["items"]
        ]  # fmt: skip
        if stamps:
            first = min(datetime.fromisoformat(t.replace("Z", "+00:00")) for t in stamps)
            return max(0.0, first.timestamp() - since_wall)
        time.sleep(0.5)
    raise AssertionError(
        f"{ns}/{name}: not Stalled/EtcdUnavailable {DETECT_WITHIN + 30} s after the outage\n"
        + diagnostics(cluster, ns, name)
    )


def _outage_recovered_once(
    cluster: LocalCluster,
    release: Release,
    ns: str,
    name: str,
    outage: Callable[[str], None],
) -> float:
    """Run a job, cause ``outage(etcd pod)`` after its first checkpoints, check the recovery and
    its counts; returns the seconds to the stall."""
    apply_job(cluster, ns, job_manifest(name, steps=80, nproc=1))
    wait_job(cluster, ns, name, "Running on 2 nodes", lambda j: ready_nodes(j) == 2)
    wait_checkpoint(cluster, ns, step=10)
    # Nothing counted before the outage: whatever is counted after it, the outage caused.
    expect_counts(cluster, ns, get_job(cluster, ns, name), {})
    lost = _etcd_pod(cluster, ns)["metadata"]["name"]
    assert lost == f"{name}-etcd-0", lost
    began = time.time()
    outage(lost)
    took = _seconds_to_stall(cluster, ns, name, began)

    job = wait_job(
        cluster,
        ns,
        name,
        "recovered from the etcd outage",
        lambda j: (
            (j.get("status") or {}).get("etcd", {}).get("seededGeneration") == 1
            and condition(j, "Stalled").get("status") == "False"
        ),
        timeout=240,
    )
    assert job["status"]["etcd"]["generation"] == 1, job["status"]["etcd"]
    assert _etcd_pod(cluster, ns)["metadata"]["name"] == f"{name}-etcd-1"
    job = wait_job(cluster, ns, name, "Succeeded", lambda j: phase(j) == "Succeeded")
    # Counted once, by the operator; the agents' workers kept training through the outage and
    # their group restart on the new etcd is that same outage, not a failure nor a membership.
    expect_counts(cluster, ns, job, {"etcd-recovered": 1})
    assert job["status"]["restarts"]["failures"] == 0, job["status"]["restarts"]
    recreated = job_events(cluster, ns, name, "EtcdRecreated")
    # The message says why generation 0 was judged lost, between "lost" and "creating".
    assert len(recreated) == 1, recreated
    assert re.search(r"generation 0 lost \(.+\); creating generation 1", recreated[0]), recreated
    assert job_events(cluster, ns, name, "EtcdUnavailable"), diagnostics(cluster, ns, name)
    # No worker pod was replaced: the outage cost the group one restart, not its pods.
    names = sorted(p["metadata"]["name"] for p in pods(cluster, ns))
    assert names == [f"{name}-worker-0-0", f"{name}-worker-1-0"], names
    assert RESUMED.search(worker_logs(cluster, ns)), worker_logs(cluster, ns)[-3000:]
    assert (
        f'elasticjob_job_stalls_total{{job="{name}",namespace="{ns}",reason="EtcdUnavailable"}}'
        in operator_metrics(cluster, release)
    )
    return took


def test_etcd_container_killed_on_a_real_node_is_stalled_then_recreated_and_counted_once(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    took = _outage_recovered_once(
        cluster,
        release,
        work,
        "etcdkill",
        # SIGKILL to the container's init (etcd itself), through containerd as a crash would.
        lambda pod: cluster.kill_container(work, pod, signal.SIGKILL),
    )
    print(f"etcd killed on a real node: Stalled/EtcdUnavailable after {took:.1f} s")
    assert took <= DETECT_WITHIN, took


def test_etcd_cut_off_the_network_on_a_real_node_is_stalled_then_recreated_and_counted_once(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    took = _outage_recovered_once(
        cluster,
        release,
        work,
        "etcdcut",
        # The pod's veth on the node's bridge goes down: the process lives on, unreachable.
        lambda pod: cluster.cut_pod(work, pod),
    )
    print(f"etcd cut off on a real node: Stalled/EtcdUnavailable after {took:.1f} s")
    assert took <= DETECT_WITHIN, took
