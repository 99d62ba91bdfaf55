"""The operator from its image, installed by its chart, on real nodes: it starts under the chart's
securityContext in a ``restricted`` namespace, and a job on the training image trains, recovers
from a killed worker process (one ``failure``) and from a deleted pod (one free ``preemption``)."""

from __future__ import annotations

import select
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.jobs import by_reason, phase, pods, ready_nodes
from tests.support.realnodes import (
    OPERATOR_IMAGE,
    RESUMED,
    Release,
    apply_job,
    diagnostics,
    installed_release,
    job_events,
    job_manifest,
    termination_message,
    wait_checkpoint,
    wait_job,
    worker_logs,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def release(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """A release of this module's own: its first test checks a fresh install (the operator's
    container never restarted), which the session's shared release cannot promise."""
    with installed_release(cluster, tmp_path_factory.mktemp("chart")) as rel:
        yield rel


def _operator_pod(cluster: LocalCluster, release: Release) -> dict[str, object]:
    items = cluster.get_json(
        "pods", "-n", release.system, "-l", "app.kubernetes.io/name=elasticjob-operator"
    )["items"]
    assert len(items) == 1, [p["metadata"]["name"] for p in items]
    return dict(items[0])


def test_chart_installs_the_operator_image_ready_on_a_real_node_in_a_restricted_namespace(
    cluster: LocalCluster, release: Release
) -> None:
    # helm install --wait returned: the Deployment is available. Check what it runs and where.
    pod = _operator_pod(cluster, release)
    spec, status = pod["spec"], pod["status"]
    assert isinstance(spec, dict) and isinstance(status, dict)
    assert spec["nodeName"] in cluster.real_nodes, spec["nodeName"]
    (container,) = spec["containers"]
    assert container["image"] == OPERATOR_IMAGE
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready["Ready"] == "True", status
    (cstatus,) = status["containerStatuses"]
    assert cstatus["restartCount"] == 0, cstatus
    # The container really runs that image (containerd's id of it, not the emulator's).
    assert cstatus["imageID"], cstatus
    labels = cluster.get_json("namespace", release.system)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    # The root filesystem is read-only inside the container; /tmp (an emptyDir) is writable.
    name = pod["metadata"]["name"]  # type: ignore[index]
    probe = cluster.exec_in_pod(
        release.system,
        str(name),
        [
            "python",
            "-c",
            "import os\n"
            "for d in ('/opt', '/tmp'):\n"
            "    try:\n"
            "        open(os.path.join(d, 'probe'), 'w').close(); print(d, 'writable')\n"
            "    except OSError as e:\n"
            "        print(d, 'errno', e.errno)\n",
        ],
        check=True,
    )
    assert "/opt errno 30" in probe.stdout, probe.stdout  # EROFS
    assert "/tmp writable" in probe.stdout, probe.stdout
    assert (
        "uid=10001"
        in cluster.exec_in_pod(
            release.system, str(name), ["python", "-c", "import os; print(f'uid={os.getuid()}')"]
        ).stdout
    )


def _running_on_real_nodes(cluster: LocalCluster, ns: str, role: str) -> list[dict[str, Any]]:
    live = [p for p in pods(cluster, ns, role) if p["status"].get("phase") == "Running"]
    for p in live:
        assert p["spec"]["nodeName"] in cluster.real_nodes, (role, p["spec"]["nodeName"])
    return live


def test_job_trains_to_succeeded_on_real_nodes_with_mutual_tls_etcd_and_a_tmpfs_shm(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    apply_job(cluster, work, job_manifest("train", steps=40, nproc=2))
    wait_job(cluster, work, "train", "Running on 2 nodes", lambda j: ready_nodes(j) == 2)

    # The managed etcd: admitted by the `restricted` namespace, on a real node, mutual TLS.
    (etcd,) = _running_on_real_nodes(cluster, work, "etcd")
    command = etcd["spec"]["containers"][0]["command"]
    assert "--client-cert-auth" in command, command
    assert any(a.startswith("--listen-client-urls=https://") for a in command), command
    workers = _running_on_real_nodes(cluster, work, "worker")
    assert len(workers) == 2, [p["metadata"]["name"] for p in workers]
    args = workers[0]["spec"]["containers"][0]["args"]
    assert any("https://" in a for a in args) and any("cacert=" in a for a in args), args

    # /dev/shm is the operator's memory-backed emptyDir, not the runtime's 64 MiB default.
    name = workers[0]["metadata"]["name"]
    mounts = cluster.exec_in_pod(
        work, name, ["sh", "-c", 'grep " /dev/shm " /proc/mounts'], check=True
    ).stdout
    assert mounts.split()[2] == "tmpfs", mounts
    size = cluster.exec_in_pod(
        work,
        name,
        ["python", "-c", "import os; s = os.statvfs('/dev/shm'); print(s.f_blocks * s.f_frsize)"],
        check=True,
    ).stdout
    assert int(size) > 64 * 2**20, (size, mounts)

    job = wait_job(cluster, work, "train", "Succeeded", lambda j: phase(j) == "Succeeded")
    assert by_reason(job) == {}, by_reason(job)
    assert "done step=40" in worker_logs(cluster, work)


KILL_ONE_WORKER = """
import json, os, signal, urllib.request
with urllib.request.urlopen("http://127.0.0.1:29401/status", timeout=5) as r:
    status = json.load(r)
pid = status["workers"][0]["pid"]
with open(f"/proc/{pid}/cmdline", "rb") as f:
    cmdline = f.read().replace(b"\\0", b" ").decode()
# Workers fork from the agent's zygote (its command line); the agent is PID 1 or its child.
assert pid != 1 and "elasticjob-agent" not in cmdline, (pid, cmdline)
os.kill(pid, signal.SIGKILL)
print("killed", pid, cmdline)
"""
"""Inside a worker pod: SIGKILL one training process (a child of the agent, never the agent)."""


def test_killed_worker_process_in_a_real_pod_is_exactly_one_failure_and_the_job_recovers(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    apply_job(cluster, work, job_manifest("killproc", steps=80, nproc=2))
    wait_job(cluster, work, "killproc", "Running on 2 nodes", lambda j: ready_nodes(j) == 2)
    wait_checkpoint(cluster, work, step=10)
    killed = cluster.exec_in_pod(
        work, "killproc-worker-0-0", ["python", "-c", KILL_ONE_WORKER], check=True
    )
    assert "killed" in killed.stdout, killed
    job = wait_job(cluster, work, "killproc", "Succeeded", lambda j: phase(j) == "Succeeded")
    # One failure; a free `membership` re-rendezvous may follow under load (an agent's lease
    # keep-alive missed by a starved agent re-forms the group without spending anything).
    counts = by_reason(job)
    assert counts.get("failure") == 1 and set(counts) <= {"failure", "membership"}, (
        counts,
        diagnostics(cluster, work, "killproc"),
    )
    # The pods lived on (the agents restarted their workers) and training resumed.
    names = sorted(p["metadata"]["name"] for p in pods(cluster, work))
    assert names == ["killproc-worker-0-0", "killproc-worker-1-0"], names
    assert RESUMED.search(worker_logs(cluster, work)), worker_logs(cluster, work)[-3000:]

    # The root cause is the signal, on the pod where it was sent, not the peer's lost connection.
    failure = job["status"]["lastFailure"]
    assert failure["signal"] == "SIGKILL", failure
    assert failure["pod"] == "killproc-worker-0-0" and "exceptionType" not in failure, failure
    where = f"pod killproc-worker-0-0 (node {failure['node']})"
    cause = f"rank {failure['rank']} on {where} killed by SIGKILL"
    # The Restarted Event quotes the cause known when the group restarted; a restart counted
    # before the killed rank's record arrived leaves the cause to a RootCause Event.
    named = job_events(cluster, work, "killproc", "Restarted") + job_events(
        cluster, work, "killproc", "RootCause"
    )
    assert any(f"root cause: {cause}" in m for m in named), named
    # The agent wrote it to /dev/termination-log; the kubelet kept it when the container ended.
    message = termination_message(cluster, work, "killproc-worker-0-0")
    assert message.startswith(f"rank {failure['rank']} on killproc-worker-0-0 killed"), message


def test_deleted_worker_pod_is_one_free_preemption_and_its_agent_left_before_stopping(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    apply_job(cluster, work, job_manifest("delpod", steps=80, nproc=1))
    wait_job(cluster, work, "delpod", "Running on 2 nodes", lambda j: ready_nodes(j) == 2)
    wait_checkpoint(cluster, work, step=10)
    victim = "delpod-worker-1-0"
    grace = cluster.get_json("pod", victim, "-n", work)["spec"]["terminationGracePeriodSeconds"]
    # Follow the victim's log to its end: the pod object is gone once the kubelet is done.
    follow = subprocess.Popen(
        ["kubectl", "logs", "-f", "-n", work, victim],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # The stream is open once the log so far (checkpoints included) comes through.
        assert follow.stdout is not None
        readable, _, _ = select.select([follow.stdout], [], [], 30)
        assert readable, "kubectl logs -f printed nothing in 30 s"
        cluster.kubectl("delete", "pod", victim, "-n", work, "--wait=false")
        log, _ = follow.communicate(timeout=grace + 30)
    finally:
        follow.kill()
    lines = log.splitlines()
    sigterm = [i for i, line in enumerate(lines) if "event=sigterm_received" in line]
    exiting = [i for i, line in enumerate(lines) if "event=agent_exiting" in line]
    assert sigterm and exiting, log[-3000:]
    # SIGTERM handled: counted, left the rendezvous (no warning), workers stopped, then the
    # agent's own exit line (so the kubelet's SIGKILL at the end of the grace never came).
    assert sigterm[0] < exiting[-1], log[-3000:]
    assert "SIGTERM" in lines[exiting[-1]], lines[exiting[-1]]
    assert "could not leave" not in log and "could not count" not in log, log[-3000:]

    job = wait_job(cluster, work, "delpod", "Succeeded", lambda j: phase(j) == "Succeeded")
    assert by_reason(job) == {"preemption": 1}, diagnostics(cluster, work, "delpod")
    names = {p["metadata"]["name"] for p in pods(cluster, work)}
    assert "delpod-worker-1-1" in names, names
    assert RESUMED.search(worker_logs(cluster, work)), worker_logs(cluster, work)[-3000:]


def test_a_rank_raising_under_record_is_named_in_status_events_and_termination_message(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    """examples/train.py's ``--fail-at-step``: rank 1 raises at step 3 in both of its first two
    runs; ``maxRestarts: 1``, so the second failure ends the job and the containers."""
    manifest = job_manifest("raiser", steps=40, nproc=1)
    spec = manifest["spec"]
    spec["maxRestarts"] = 1
    spec["runPolicy"] = {"cleanPodPolicy": "None"}  # keep both pods for their termination state
    trainer = spec["template"]["spec"]["containers"][0]
    trainer["args"] += ["--fail-at-step", "3", "--fail-rank", "1", "--fail-times", "2"]
    apply_job(cluster, work, manifest)
    job = wait_job(cluster, work, "raiser", "Failed", lambda j: phase(j) == "Failed", timeout=420)
    status = job["status"]
    assert status["reason"] == "MaxRestartsExceeded", diagnostics(cluster, work, "raiser")

    failure = status["lastFailure"]
    seen = {
        p["metadata"]["name"]: termination_message(cluster, work, p["metadata"]["name"])
        for p in pods(cluster, work)
    }
    why = f"{failure}\ntermination messages: {seen}\n{diagnostics(cluster, work, 'raiser')}"
    assert failure["rank"] == 1 and failure["exitCode"] == 1, why
    assert failure["exceptionType"] == "RuntimeError", failure
    assert failure["message"] == "injected failure at step 3 on rank 1", failure
    assert failure["frame"].endswith("in inject_failure") and "train.py" in failure["frame"]
    pod = failure["pod"]
    cause = (
        f"rank 1 on pod {pod} (node {failure['node']}) exited with code 1: "
        "RuntimeError: injected failure at step 3 on rank 1"
    )
    # A Restarted Event quotes the cause known when the group restarted; when the rank's own
    # record arrived after a survivor's symptom, the cause has a RootCause Event of its own.
    restarted = job_events(cluster, work, "raiser", "Restarted")
    named = restarted + job_events(cluster, work, "raiser", "RootCause")
    assert any(f"root cause: {cause}" in m for m in named), named
    assert f"last root cause: {cause}" in status["message"], status["message"]

    # Both agents exited 10 (budget spent); the failing rank's container says why.
    def ended() -> bool:
        return all(p["status"].get("phase") == "Failed" for p in pods(cluster, work))

    cluster.wait_for("both worker pods Failed", ended, timeout=120, interval=1)
    message = termination_message(cluster, work, pod)
    assert message.startswith(f"rank 1 on {pod} exited with code 1: RuntimeError"), message
    assert '"exceptionType": "RuntimeError"' in message, message
