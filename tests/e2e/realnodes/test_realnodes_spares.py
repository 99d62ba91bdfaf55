"""A hot spare on real nodes: a fixed-size job of two nodes gets ``spares: 1`` while it runs.
The spare pod starts, its agent stands by with torch imported (``readySpares`` 1, the
``SparesReady`` condition, the ``Spares`` column of ``kubectl get ej``). Then the node of the
member that does not share a node with the spare is lost (every process of it SIGKILLed): the
spare takes its place in the next round with no scheduling and no image pull, the lost pod's
replacement becomes the next spare, the job counts one ``failure`` and succeeds. And a spare
that cannot be scheduled says why without holding the group back."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.jobs import condition, phase, pods, ready_nodes
from tests.support.realnodes import (
    HOSTNAME,
    Release,
    apply_job,
    diagnostics,
    expect_counts,
    job_manifest,
    node_of_operator,
    placed,
    wait_checkpoint,
    wait_job,
)

pytestmark = pytest.mark.e2e

JOINED = "elasticjob.dev/joined-round"
STOOD_BY = "elasticjob.dev/stood-by"


def _ready_spares(job: dict[str, Any]) -> int:
    return int((job.get("status") or {}).get("readySpares") or 0)


def _annotations(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


def test_a_spare_replaces_a_lost_node_and_a_new_spare_starts(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    keep = node_of_operator(cluster, release)
    (victim,) = [n for n in cluster.real_nodes if n != keep]
    # One worker per node first; the spare added next lands beside the operator (the spread
    # allows 2 and 1), so losing the other node loses one member and no spare.
    manifest = placed(job_manifest("spares", steps=250, nproc=1), keep)
    # Three workers, the operator and the managed etcd fit on one real node (2 CPUs) after the
    # other is lost: the lost pod's replacement must be schedulable to become the next spare.
    (trainer,) = manifest["spec"]["template"]["spec"]["containers"]
    trainer["resources"]["requests"]["cpu"] = "250m"
    apply_job(cluster, work, manifest)
    wait_job(cluster, work, "spares", "Running on 2 nodes", lambda j: ready_nodes(j) == 2)
    (etcd,) = pods(cluster, work, "etcd")
    if etcd["spec"]["nodeName"] != keep:
        pytest.fail(f"the managed etcd went to {etcd['spec']['nodeName']}, not {keep}")
    members = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods(cluster, work)}

    cluster.kubectl(
        "patch", "ej", "spares", "-n", work, "--type", "merge", "-p", '{"spec": {"spares": 1}}'
    )
    job = wait_job(
        cluster, work, "spares", "one ready spare", lambda j: _ready_spares(j) == 1, timeout=300
    )
    cond = condition(job, "SparesReady")
    assert cond.get("status") == "True" and cond.get("reason") == "SparesReady", cond
    assert ready_nodes(job) == 2 and job["status"]["replicas"] == 2, job["status"]
    (spare,) = [p for p in pods(cluster, work) if p["metadata"]["name"] not in members]
    spare_name = spare["metadata"]["name"]
    assert spare["spec"]["nodeName"] == keep, (spare_name, spare["spec"]["nodeName"])
    assert _annotations(spare).get(STOOD_BY) == "true", _annotations(spare)
    assert JOINED not in _annotations(spare), _annotations(spare)
    table = cluster.kubectl("get", "ej", "spares", "-n", work).stdout.splitlines()
    header, row = table[0].split(), table[1].split()
    assert "SPARES" in header and row[header.index("SPARES")] == "1", table
    (lost,) = [name for name, node in members.items() if node == victim]
    wait_checkpoint(cluster, work, step=10)

    lost_at = time.monotonic()
    bound = cluster.lose_node(victim)
    try:
        assert f"{work}/{lost}" in bound, bound

        def promoted() -> bool:
            current = {p["metadata"]["name"]: p for p in pods(cluster, work)}
            pod = current.get(spare_name)
            return pod is not None and JOINED in _annotations(pod)

        cluster.wait_for(f"{spare_name} in the group", promoted, timeout=240, interval=1)
        promoted_s = time.monotonic() - lost_at
        # The replacement of the lost pod starts on the survivor and stands by in turn.
        job = wait_job(
            cluster,
            work,
            "spares",
            "two members and a new ready spare",
            lambda j: ready_nodes(j) == 2 and _ready_spares(j) == 1,
            timeout=300,
        )
        where = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods(cluster, work)}
        replacement = lost[: -len("-0")] + "-1"
        assert where.get(replacement) == keep, where
        assert lost not in where, where
        print(f"\nspare {spare_name} in the group {promoted_s:.1f} s after node {victim} was lost")
        job = wait_job(
            cluster, work, "spares", "Succeeded", lambda j: phase(j) == "Succeeded", timeout=400
        )
    finally:
        cluster.restore_node(victim)
    # The member's node died: the survivor counted one failure; the operator counted nothing
    # (the lost pod had joined; the spare only ever stood by).
    expect_counts(cluster, work, job, {"failure": 1})
    events = cluster.kubectl(
        "get", "events", "-n", work, "--field-selector",
        f"involvedObject.uid={job['metadata']['uid']}", "-o", "json",
    ).stdout  # fmt: skip
    replaced = [
        e["message"] for e in json.loads(events)["items"] if e.get("reason") == "WorkerReplaced"
    ]
    assert len(replaced) == 1 and f"is on lost node {victim}" in replaced[0], (
        replaced,
        diagnostics(cluster, work, "spares"),
    )


def test_a_spare_that_cannot_be_scheduled_says_why_and_the_group_trains(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    """Bad input: a spare that finds no room (each pod takes all 4 GPUs of the one real node it
    may use) is not ready, the condition quotes the scheduler, and the group trains anyway."""
    keep = node_of_operator(cluster, release)
    manifest = job_manifest("nospare", steps=400, nproc=1)
    spec = manifest["spec"]
    spec.update(replicas=1, minNodes=1, maxNodes=1, spares=1, device="gpu")
    pod_spec = spec["template"]["spec"]
    (trainer,) = pod_spec["containers"]
    trainer["resources"]["limits"] = {"nvidia.com/gpu": 4}
    pod_spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [keep]}]}
                ]
            }
        }
    }
    apply_job(cluster, work, manifest)
    job = wait_job(
        cluster,
        work,
        "nospare",
        "Running, SparesReady=False/SpareUnschedulable",
        lambda j: (
            ready_nodes(j) == 1
            and condition(j, "SparesReady").get("reason") == "SpareUnschedulable"
        ),
        timeout=300,
    )
    cond = condition(job, "SparesReady")
    assert cond["status"] == "False", cond
    assert "Insufficient nvidia.com/gpu" in cond["message"], cond
    assert _ready_spares(job) == 0 and phase(job) == "Running", job["status"]
    assert condition(job, "Stalled").get("status") != "True", job["status"]
    table = cluster.kubectl("get", "ej", "nospare", "-n", work).stdout.splitlines()
    header, row = table[0].split(), table[1].split()
    assert row[header.index("SPARES")] == "0", table
