"""Bad input on real nodes: an image that does not exist and an image without ``elasticjob-agent``
(a command the container cannot start). The kubelet's own reason and message reach the job's
status (``startFailures``, condition ``PodsNotStarting``) and its Events, and the job ends instead
of waiting silently: a stall past ``stallTimeoutSeconds``, or the restart budget."""

from __future__ import annotations

import json
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.versions import PAUSE_IMAGE

from tests.support.jobs import phase, pods
from tests.support.realnodes import Release, apply_job, job_manifest, wait_job

pytestmark = pytest.mark.e2e

MISSING_IMAGE = "127.0.0.1:1/elasticjob/no-such-image:0"
"""No registry serves this (port 1 on the node's loopback refuses at once): the pull fails."""
NO_AGENT_IMAGE = PAUSE_IMAGE
"""Present on every real node, runs as a non-root user, holds only ``/pause``."""
PULL_REASONS = {"ErrImagePull", "ImagePullBackOff"}


def _with_image(manifest: dict[str, Any], image: str) -> dict[str, Any]:
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    container["image"] = image
    return manifest


def _condition(job: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def _events(cluster: LocalCluster, ns: str, job: dict[str, Any]) -> list[dict[str, Any]]:
    uid = job["metadata"]["uid"]
    out = cluster.kubectl(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.uid={uid}", "-o", "json"
    ).stdout  # fmt: skip
    return list(json.loads(out)["items"])


def test_a_missing_image_is_named_in_the_status_and_events_and_the_job_fails_at_its_timeout(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    manifest = _with_image(job_manifest("noimage"), MISSING_IMAGE)
    manifest["spec"]["stallTimeoutSeconds"] = 45
    apply_job(cluster, work, manifest)

    def both_named(job: dict[str, Any]) -> bool:
        listed = (job.get("status") or {}).get("startFailures") or []
        return {f["slot"] for f in listed} == {"worker-0", "worker-1"}

    job = wait_job(cluster, work, "noimage", "both workers in startFailures", both_named)
    for entry in job["status"]["startFailures"]:
        assert entry["reason"] in PULL_REASONS, entry
        assert entry["container"] == "trainer", entry
        assert MISSING_IMAGE in entry["message"], entry  # the kubelet's own message
    cond = _condition(job, "PodsNotStarting")
    assert cond["status"] == "True" and cond["reason"] in PULL_REASONS, cond
    assert MISSING_IMAGE in cond["message"], cond
    # The pods really wait on the kubelet's pull: the same reason in their own status.
    for pod in pods(cluster, work):
        (status,) = pod["status"]["containerStatuses"]
        assert status["state"]["waiting"]["reason"] in PULL_REASONS, status

    job = wait_job(
        cluster, work, "noimage", "Failed at the stall timeout", lambda j: phase(j) == "Failed"
    )
    status = job["status"]
    assert status["reason"] == "PodsNotStarting", status
    assert "stallTimeoutSeconds" in status["message"] and MISSING_IMAGE in status["message"]
    assert _condition(job, "Stalled")["reason"] == "PodsNotStarting", status["conditions"]
    # One Warning Event per pod with the kubelet's reason, however often the kubelet alternated
    # between ErrImagePull and ImagePullBackOff meanwhile.
    pulls = [e for e in _events(cluster, work, job) if e["reason"] in PULL_REASONS]
    workers = ("noimage-worker-0-0", "noimage-worker-1-0")
    named = sorted(p for e in pulls for p in workers if p in e["message"])
    assert named == list(workers), pulls
    assert all(e["type"] == "Warning" for e in pulls), pulls
    # Failing on a stall releases every pod (and so its GPUs), whatever cleanPodPolicy says.
    cluster.wait_for(
        "the job's pods to be deleted",
        lambda: not pods(cluster, work) and not pods(cluster, work, "etcd"),
        timeout=120,
        interval=1,
    )


def test_an_image_without_the_agent_is_a_start_error_in_each_replacement_and_the_failure(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    manifest = _with_image(job_manifest("noagent"), NO_AGENT_IMAGE)
    manifest["spec"].update(replicas=1, minNodes=1, maxNodes=1, maxRestarts=1)
    apply_job(cluster, work, manifest)
    job = wait_job(
        cluster, work, "noagent", "Failed (restart budget)", lambda j: phase(j) == "Failed"
    )
    status = job["status"]
    assert status["reason"] == "MaxRestartsExceeded", status
    assert status["restarts"]["byReason"] == {"pod-failure": 2}, status["restarts"]
    # The kubelet's words: runc could not exec the agent, which the image does not hold.
    assert "cannot start: pod noagent-worker-0-" in status["message"], status["message"]
    assert "elasticjob-agent" in status["message"], status["message"]
    (entry,) = status["startFailures"]
    assert entry["slot"] == "worker-0" and entry["container"] == "trainer", entry
    assert entry["reason"] in {"StartError", "RunContainerError"}, entry
    cond = _condition(job, "PodsNotStarting")
    assert cond["status"] == "True" and cond["reason"] == entry["reason"], cond

    events = _events(cluster, work, job)
    replaced = [e["message"] for e in events if e["reason"] == "WorkerReplaced"]
    assert len(replaced) == 2, replaced
    assert all(f"could not start container trainer: {entry['reason']}" in m for m in replaced)
    starts = sorted(e["message"].split()[3] for e in events if e["reason"] == entry["reason"])
    # One per pod attempt: the first two were replaced; the third, created as the budget ran
    # out, is deleted with the job and may or may not have shown its error before.
    assert starts[:2] == ["noagent-worker-0-0", "noagent-worker-0-1"], starts
    assert len(starts) == len(set(starts)) and set(starts) <= {
        "noagent-worker-0-0",
        "noagent-worker-0-1",
        "noagent-worker-0-2",
    }, starts


def test_a_script_missing_from_the_image_is_the_reason_from_the_first_restart_on(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    manifest = job_manifest("noscript")
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    container["command"] = ["python", "/workspace/missing.py"]
    container["args"] = []
    manifest["spec"]["maxRestarts"] = 1
    apply_job(cluster, work, manifest)
    said = "can't open file '/workspace/missing.py': [Errno 2] No such file or directory"

    def first_restart(job: dict[str, Any]) -> bool:
        return any(e["reason"] == "Restarted" for e in _events(cluster, work, job))

    job = wait_job(cluster, work, "noscript", "a Restarted Event", first_restart)
    restarted = [e for e in _events(cluster, work, job) if e["reason"] == "Restarted"]
    assert said in restarted[0]["message"], restarted  # torchrun would say only "exit code 2"
    job = wait_job(cluster, work, "noscript", "Failed", lambda j: phase(j) == "Failed")
    status = job["status"]
    assert status["reason"] == "MaxRestartsExceeded", status
    assert said in status["lastFailure"]["outputTail"], status["lastFailure"]
    assert said in _condition(job, "Failed")["message"], status["conditions"]
