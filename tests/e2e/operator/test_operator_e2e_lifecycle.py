"""The job's life on a real cluster: the example to Succeeded, validation, scaling, scheduling,
the restart budget, and restarting the operator in the middle of it."""

from __future__ import annotations

import copy
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.placement import on_virtual_nodes

from tests.support.jobs import by_reason, condition, get_job, phase, pods, st, wait_job
from tests.support.operator_e2e import (
    SERVICE_ACCOUNT,
    SYSTEM_NS,
    OperatorProcess,
    evidence,
    job_manifest,
)
from tests.support.paths import REPO

pytestmark = pytest.mark.e2e


def _apply(cluster: LocalCluster, ns: str, manifest: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))


def test_example_trains_to_succeeded_and_shows_in_kubectl_get(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    example = yaml.safe_load((REPO / "examples" / "elasticjob.yaml").read_text())
    # The emulator runs the image's command on the host: train.py is in examples/ there.
    (trainer,) = example["spec"]["template"]["spec"]["containers"]
    trainer["workingDir"] = str(REPO / "examples")
    on_virtual_nodes(example["spec"]["template"]["spec"])
    # Both nodes in the first round, whatever the load: the example's minNodes 1 with a 5 s
    # last call forms a first round of one node when the second agent starts more than 5 s
    # after the first (seen once in a CI rehearsal under load: readyNodes 1 at the first
    # Running, then a `membership` restart to admit it). With maxNodes = replicas the round
    # completes the moment both have joined, and the last call only bounds a lost pod.
    example["spec"]["maxNodes"] = example["spec"]["replicas"]
    example["spec"].setdefault("rendezvous", {})["lastCallTimeoutSeconds"] = 90
    started = time.monotonic()
    _apply(cluster, ns, example)
    job = wait_job(
        cluster, ns, "train-demo", "Running", lambda j: phase(j) == "Running", timeout=120
    )
    # The round's world size says both nodes formed it; readyNodes counts the agents' health
    # reports of that round, and the second one may be written a moment after the first.
    assert job["status"]["worldSize"] == 4, evidence(cluster, ns, "train-demo", operator)
    wait_job(
        cluster,
        ns,
        "train-demo",
        "both agents' reports of the round (or the end)",
        lambda j: st(j).get("readyNodes") == 2 or phase(j) == "Succeeded",
    )
    job = wait_job(
        cluster, ns, "train-demo", "Succeeded", lambda j: phase(j) == "Succeeded", timeout=300
    )
    assert job["status"]["reason"] == "Succeeded"
    assert condition(job, "Succeeded")["status"] == "True"
    # A `membership` restart (a re-rendezvous to admit a node) is free; nothing else may count.
    restarts = job["status"]["restarts"]
    # No fault is injected: any other count (an etcd recreated under the suites' load, say) is
    # a false remediation, and the evidence says which witness caused it.
    assert restarts["failures"] == 0, evidence(cluster, ns, "train-demo", operator)
    assert set(restarts["byReason"]) <= {"membership"} or all(
        n == 0 for r, n in restarts["byReason"].items() if r != "membership"
    ), evidence(cluster, ns, "train-demo", operator)
    table = cluster.kubectl("get", "ej", "-n", ns).stdout
    header, row = table.splitlines()[:2]
    assert header.split() == [
        "NAME", "PHASE", "READY", "DESIRED", "SPARES", "RESTARTS", "STEP", "STEPS/S", "REASON",
        "AGE",
    ]  # fmt: skip
    # Columns by the header's offsets: an empty cell (no rate sampled yet) prints as blanks.
    starts = [header.index(name) for name in header.split()]
    cells = [row[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    assert (
        cells[:6] == ["train-demo", "Succeeded", "0", "2", "0", "0"] and cells[8] == "Succeeded"
    ), table + evidence(cluster, ns, "train-demo", operator)
    progress = job["status"].get("progress") or {}
    assert cells[6] == str(progress.get("step", "")), table
    logs = "".join(cluster.pod_logs(ns, p["metadata"]["name"]) for p in pods(cluster, ns))
    assert "done step=60" in logs
    # Finished pods stay for their logs (cleanPodPolicy Running); the managed etcd is gone.
    assert all(p["status"]["phase"] == "Succeeded" for p in pods(cluster, ns))
    assert pods(cluster, ns, "etcd") == [] or all(
        p["metadata"].get("deletionTimestamp") for p in pods(cluster, ns, "etcd")
    )
    print(f"example: Succeeded after {time.monotonic() - started:.1f} s")


def _invalid(name: str, change: dict[str, Any]) -> dict[str, Any]:
    manifest = job_manifest(name)
    spec = manifest["spec"]
    for key, value in change.items():
        if key == "metadata.name":
            manifest["metadata"]["name"] = value
        elif value is None:
            spec.pop(key)
        else:
            spec[key] = value
    return manifest


def _two_containers() -> dict[str, Any]:
    template: dict[str, Any] = copy.deepcopy(job_manifest("x")["spec"]["template"])
    first = template["spec"]["containers"][0]
    template["spec"]["containers"] = [{**first, "name": "a"}, {**first, "name": "b"}]
    return template


def _no_command() -> dict[str, Any]:
    template: dict[str, Any] = copy.deepcopy(job_manifest("x")["spec"]["template"])
    del template["spec"]["containers"][0]["command"]
    return template


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("min-above-replicas", {"minNodes": 3}, "spec.minNodes must be <= spec.replicas"),
    ("replicas-above-max", {"replicas": 4}, "spec.replicas must be <= spec.maxNodes"),
    ("zero-replicas", {"replicas": 0, "minNodes": None}, "spec.replicas"),
    ("nproc-word", {"nprocPerNode": "lots"}, "spec.nprocPerNode"),
    ("external-no-endpoints", {"etcd": {"mode": "External"}}, "spec.etcd.endpoints"),
    (
        "endpoint-without-port",
        {"etcd": {"mode": "External", "endpoints": ["etcd"]}},
        "spec.etcd.endpoints[0]",
    ),
    (
        "clean-policy",
        {"runPolicy": {"cleanPodPolicy": "Sometimes"}},
        "spec.runPolicy.cleanPodPolicy",
    ),
    ("stall-timeout-zero", {"stallTimeoutSeconds": 0}, "spec.stallTimeoutSeconds"),
    (
        "negative-deadline",
        {"runPolicy": {"activeDeadlineSeconds": -5}},
        "spec.runPolicy.activeDeadlineSeconds",
    ),
    (
        "last-call-after-join",
        {"rendezvous": {"joinTimeoutSeconds": 10, "lastCallTimeoutSeconds": 10}},
        "spec.rendezvous.lastCallTimeoutSeconds",
    ),
    ("no-trainer", {"template": _two_containers()}, "spec.template.spec.containers"),
    ("no-command", {"template": _no_command()}, "containers[trainer].command"),
    ("no-template", {"template": None}, "spec.template"),
    ("async-error-handling", {"nccl": {"asyncErrorHandling": 5}}, "spec.nccl.asyncErrorHandling"),
    ("long-name", {"metadata.name": "n" * 60}, "metadata.name"),
    ("dotted-name", {"metadata.name": "my.job"}, "metadata.name must start with a lower-case"),
    ("digit-first-name", {"metadata.name": "1job"}, "metadata.name must start with a lower-case"),
    ("huge-stall-timeout", {"stallTimeoutSeconds": 10**9}, "spec.stallTimeoutSeconds"),
    ("huge-monitor-interval", {"monitorIntervalSeconds": 1e6}, "spec.monitorIntervalSeconds"),
    (
        "huge-join-timeout",
        {"rendezvous": {"joinTimeoutSeconds": 10**7}},
        "spec.rendezvous.joinTimeoutSeconds",
    ),
    ("huge-ttl", {"runPolicy": {"ttlSecondsAfterFinished": 10**9}}, "ttlSecondsAfterFinished"),
    ("negative-spares", {"spares": -1}, "spec.spares"),
    ("too-many-spares", {"spares": 101}, "spec.spares"),
]


@pytest.mark.parametrize(("name", "change", "field"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_manifest_is_rejected_naming_the_field(
    cluster: LocalCluster, operator: OperatorProcess, name: str, change: dict[str, Any], field: str
) -> None:
    done = cluster.kubectl(
        "apply", "--dry-run=server", "-n", "default", "-f", "-",
        input=json.dumps(_invalid(name, change)), check=False,
    )  # fmt: skip
    assert done.returncode != 0, f"{name} was accepted"
    assert field in done.stderr, done.stderr


def test_scale_up_and_down_with_kubectl_scale(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    _apply(cluster, ns, job_manifest("scaling", args=["--steps", "2000", "--step-sleep", "0.1"]))
    wait_job(cluster, ns, "scaling", "Running with 2", lambda j: st(j).get("readyNodes") == 2)
    cluster.kubectl("scale", "ej/scaling", "-n", ns, "--replicas=3")
    job = wait_job(
        cluster,
        ns,
        "scaling",
        "Running with 3",
        lambda j: st(j).get("readyNodes") == 3,
        timeout=120,
    )
    assert job["status"]["worldSize"] == 3 and job["status"]["replicas"] == 3
    cluster.kubectl("scale", "ej/scaling", "-n", ns, "--replicas=1")
    job = wait_job(
        cluster,
        ns,
        "scaling",
        "Running with 1",
        lambda j: st(j).get("readyNodes") == 1 and phase(j) == "Running",
        timeout=120,
    )
    live = [p for p in pods(cluster, ns) if not p["metadata"].get("deletionTimestamp")]
    assert [p["metadata"]["name"] for p in live] == ["scaling-worker-0-0"]
    assert by_reason(job).get("failure", 0) == 0  # scaling spends no budget
    scale = cluster.kubectl("scale", "ej/scaling", "-n", ns, "--replicas=4", check=False)
    assert scale.returncode != 0 and "spec.replicas must be <= spec.maxNodes" in scale.stderr


def test_more_gpus_than_exist_reports_pods_unschedulable(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    manifest = job_manifest("greedy", replicas=2, minNodes=2, maxNodes=2, stallTimeoutSeconds=30)
    manifest["spec"].update(device="gpu", nprocPerNode=64)
    _apply(cluster, ns, manifest)
    job = wait_job(
        cluster,
        ns,
        "greedy",
        "Stalled/PodsUnschedulable",
        lambda j: condition(j, "Stalled").get("reason") == "PodsUnschedulable",
        timeout=60,
    )
    assert condition(job, "Stalled")["status"] == "True"
    assert "nvidia.com/gpu" in condition(job, "Stalled")["message"]
    # Fewer than minNodes can ever run: after the stall timeout the job fails and frees the pods.
    job = wait_job(cluster, ns, "greedy", "Failed", lambda j: phase(j) == "Failed", timeout=90)
    assert job["status"]["reason"] == "PodsUnschedulable"
    cluster.wait_for("pods released", lambda: pods(cluster, ns) == [], timeout=60)


def test_budget_spent_fails_with_max_restarts_exceeded(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    manifest = job_manifest("doomed", replicas=1, minNodes=1, maxRestarts=1)
    trainer = manifest["spec"]["template"]["spec"]["containers"][0]
    trainer["command"] = ["python", "-c", "import time, sys; time.sleep(1); sys.exit(3)"]
    trainer["args"] = []
    _apply(cluster, ns, manifest)
    job = wait_job(cluster, ns, "doomed", "Failed", lambda j: phase(j) == "Failed", timeout=180)
    assert job["status"]["reason"] == "MaxRestartsExceeded"
    assert condition(job, "Failed")["status"] == "True"
    # maxRestarts 1: one failure restart was allowed; the next failure ended the job. Both are
    # counted, the one that spent the budget too (the emulator carries the agent's termination
    # message, as a kubelet does).
    assert job["status"]["restarts"]["byReason"] == {"failure": 2}, job["status"]
    assert "2 failure restarts, maxRestarts 1" in condition(job, "Failed")["message"]
    events = cluster.kubectl(
        "get", "events", "-n", ns, "--field-selector", "involvedObject.name=doomed", "-o", "json"
    ).stdout
    reasons = [e["reason"] for e in json.loads(events)["items"]]
    assert "Restarted" in reasons and "MaxRestartsExceeded" in reasons


def test_operator_killed_mid_reconcile_duplicates_nothing_and_loses_no_count(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    manifest = job_manifest("crashy", replicas=3, args=["--steps", "2000", "--step-sleep", "0.1"])
    # Kill the operator while it creates the job's objects, several times over.
    _apply(cluster, ns, manifest)
    for delay in (0.3, 0.6, 1.0):
        time.sleep(delay)
        operator.kill(signal.SIGKILL)
        operator.start()
    wait_job(cluster, ns, "crashy", "Running with 3", lambda j: st(j).get("readyNodes") == 3)
    names = sorted(p["metadata"]["name"] for p in pods(cluster, ns))
    assert names == ["crashy-worker-0-0", "crashy-worker-1-0", "crashy-worker-2-0"]
    assert [p["metadata"]["name"] for p in pods(cluster, ns, "etcd")] == ["crashy-etcd-0"]

    # Kill it again right after a pod failure was seen: the replacement is counted once.
    before = by_reason(get_job(cluster, ns, "crashy"))
    cluster.kill_container(ns, "crashy-worker-2-0", signal.SIGKILL)
    cluster.wait_for(
        "replacement",
        lambda: any(p["metadata"]["name"] == "crashy-worker-2-1" for p in pods(cluster, ns)),
    )
    operator.kill(signal.SIGKILL)
    operator.start()
    job = wait_job(
        cluster, ns, "crashy", "Running with 3 again", lambda j: st(j).get("readyNodes") == 3
    )
    live = sorted(
        p["metadata"]["name"]
        for p in pods(cluster, ns)
        if not p["metadata"].get("deletionTimestamp")
    )
    assert live == ["crashy-worker-0-0", "crashy-worker-1-0", "crashy-worker-2-1"]
    after = by_reason(job)
    # The agents counted the group restart (the pod had joined); the operator added nothing.
    assert after.get("pod-failure", 0) == before.get("pod-failure", 0)
    assert sum(after.values()) >= sum(before.values()) + 1
    assert job["status"]["attempts"] == {"2": 1}


def test_operator_identity_is_the_service_account(
    cluster: LocalCluster, operator: OperatorProcess
) -> None:
    whoami = cluster.kubectl(
        "auth", "whoami", "--kubeconfig", str(operator.kubeconfig), "-o", "json"
    ).stdout
    username = json.loads(whoami)["status"]["userInfo"]["username"]
    assert username == f"system:serviceaccount:{SYSTEM_NS}:{SERVICE_ACCOUNT}"
    as_sa = ["--as", username]
    ns = operator.namespaces[0]

    def can(*args: str) -> bool:
        done = cluster.kubectl("auth", "can-i", *args, *as_sa, check=False)
        return done.stdout.strip() == "yes"

    assert can("create", "pods", "-n", ns)
    assert can("patch", "elasticjobs.elasticjob.dev/status", "-n", ns)
    assert can("list", "nodes")
    # Secrets: the managed etcd's certificates are created and read back, never enumerated.
    assert can("get", "secrets", "-n", ns) and can("create", "secrets", "-n", ns)
    assert not can("list", "secrets", "-n", ns) and not can("watch", "secrets", "-n", ns)
    assert not can("get", "secrets", "-n", "default")
    assert can("create", "networkpolicies.networking.k8s.io", "-n", ns)
    assert not can("create", "pods", "-n", "default")  # namespaced mode: only watched namespaces
    assert not can("delete", "nodes")
    assert not can("update", "pods", "-n", ns)
    assert not can("*", "*")
    assert Path(operator.kubeconfig).read_text().count("token") == 1
