"""Node loss on real nodes: every process of the node that runs one worker (kubelet, containerd,
shims, the containers, kube-proxy, the device plugin) is SIGKILLed at once. The control plane
sees the node go silent, the operator force-deletes the lost pod and replaces it on the other
node, the survivor counts one ``failure`` (a dead machine sends no SIGTERM), and the job
succeeds; the lost node then boots again."""

from __future__ import annotations

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.jobs import by_reason, phase, pods, ready_nodes
from tests.support.realnodes import (
    RESUMED,
    Release,
    apply_job,
    diagnostics,
    job_manifest,
    node_of_operator,
    placed,
    wait_checkpoint,
    wait_job,
)

pytestmark = pytest.mark.e2e


def test_a_lost_real_node_is_one_failure_its_pod_replaced_on_the_survivor_and_the_job_succeeds(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    keep = node_of_operator(cluster, release)
    (victim,) = [n for n in cluster.real_nodes if n != keep]
    apply_job(cluster, work, placed(job_manifest("nodeloss", steps=80, nproc=1), keep))
    wait_job(cluster, work, "nodeloss", "Running on 2 nodes", lambda j: ready_nodes(j) == 2)
    (etcd,) = pods(cluster, work, "etcd")
    if etcd["spec"]["nodeName"] != keep:
        pytest.fail(f"the managed etcd went to {etcd['spec']['nodeName']}, not {keep}")
    lost = [p["metadata"]["name"] for p in pods(cluster, work) if p["spec"]["nodeName"] == victim]
    assert len(lost) == 1, [
        (p["metadata"]["name"], p["spec"]["nodeName"]) for p in pods(cluster, work)
    ]
    wait_checkpoint(cluster, work, step=10)

    bound = cluster.lose_node(victim)
    try:
        assert f"{work}/{lost[0]}" in bound, bound
        # The node controller's view: the node went silent.
        cluster.wait_for(
            f"{victim} Ready=Unknown",
            lambda: any(
                c["type"] == "Ready" and c["status"] == "Unknown"
                for c in cluster.get_json("node", victim)["status"]["conditions"]
            ),
            timeout=120,
            interval=1,
        )
        job = wait_job(cluster, work, "nodeloss", "Succeeded", lambda j: phase(j) == "Succeeded")
        # While the node is still lost: the operator force-deleted the lost pod (no kubelet will
        # ever confirm a graceful stop) and its replacement ran on the survivor.
        where = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods(cluster, work)}
        assert lost[0] not in where, where
        assert where.get(lost[0][: -len("-0")] + "-1") == keep, where
    finally:
        cluster.restore_node(victim)
    reasons = by_reason(job)
    # A dead machine warns nobody (no SIGTERM, no preemption): the survivor saw its peer or its
    # collective fail, one failure; the pod's agent had joined, so the operator counts nothing.
    assert reasons == {"failure": 1}, (reasons, diagnostics(cluster, work, "nodeloss"))
    events = cluster.kubectl(
        "get", "events", "-n", work, "--field-selector",
        f"involvedObject.uid={job['metadata']['uid']}",
        "-o", "jsonpath={range .items[?(@.reason=='WorkerReplaced')]}{.message}{'\\n'}{end}",
    ).stdout.splitlines()  # fmt: skip
    assert len(events) == 1 and f"is on lost node {victim}" in events[0], events
    logs = "".join(cluster.pod_logs(work, p["metadata"]["name"]) for p in pods(cluster, work))
    assert RESUMED.search(logs), logs[-3000:]
    cluster.wait_for(
        f"{victim} Ready again",
        lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in cluster.get_json("node", victim)["status"]["conditions"]
        ),
        timeout=180,
        interval=2,
    )
