"""Failures on a real cluster: worker process, worker pod, node, and etcd (killed, cut off, and
beyond repair). Each is recovered (or ends the job) and counted once with its reason."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from datetime import datetime
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.versions import ETCD_IMAGE

from tests.support.jobs import by_reason, condition, get_job, phase, pods, st, wait_job
from tests.support.operator_e2e import OperatorProcess, agent_status, job_manifest

pytestmark = pytest.mark.e2e

DETECT_WITHIN = 15.0
"""The stall detection target: EtcdUnavailable within 15 s of the outage."""


def _start(cluster: LocalCluster, ns: str, name: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("args", ["--steps", "150", "--step-sleep", "0.2", "--checkpoint-every", "5"])
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(job_manifest(name, **spec)))
    return wait_job(cluster, ns, name, "Running", lambda j: st(j).get("readyNodes") == 2)


_CHECKPOINT = re.compile(r"checkpoint step=(\d+)")
_RESUMED = re.compile(r"resumed from step=(\d+)")


def _wait_progress(cluster: LocalCluster, ns: str, step: int = 10) -> None:
    """Wait until rank 0 (on whichever pod) wrote a checkpoint at ``step`` or later."""

    def logs() -> str:
        return "".join(cluster.pod_logs(ns, p["metadata"]["name"]) for p in pods(cluster, ns))

    cluster.wait_for(
        f"a checkpoint at step {step}",
        lambda: any(int(m.group(1)) >= step for m in _CHECKPOINT.finditer(logs())),
        timeout=120,
    )


def _resumed(cluster: LocalCluster, ns: str) -> bool:
    logs = "".join(cluster.pod_logs(ns, p["metadata"]["name"]) for p in pods(cluster, ns))
    return any(int(m.group(1)) > 0 for m in _RESUMED.finditer(logs))


def _events(cluster: LocalCluster, ns: str, name: str) -> list[dict[str, Any]]:
    out = cluster.kubectl(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json"
    ).stdout
    return list(json.loads(out)["items"])


def test_killed_worker_process_is_one_failure_restart_and_training_resumes(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    _start(cluster, ns, "killproc")
    _wait_progress(cluster, ns)
    status = agent_status(cluster, ns, "killproc-worker-0-0")
    assert status is not None
    os.kill(status["workers"][0]["pid"], signal.SIGKILL)  # pods are host processes here
    job = wait_job(
        cluster, ns, "killproc", "Succeeded", lambda j: phase(j) == "Succeeded", timeout=300
    )
    assert by_reason(job).get("failure") == 1, by_reason(job)
    assert sum(by_reason(job).values()) == 1
    assert [p["metadata"]["name"] for p in pods(cluster, ns)] == [
        "killproc-worker-0-0",
        "killproc-worker-1-0",
    ]  # the pod itself lived on
    assert _resumed(cluster, ns)
    messages = [
        e["message"] for e in _events(cluster, ns, "killproc") if e["reason"] == "Restarted"
    ]
    assert messages and "(failure)" in messages[0]


def test_deleted_worker_pod_is_replaced_and_counted_once_as_preemption(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    _start(cluster, ns, "delpod")
    _wait_progress(cluster, ns)
    cluster.kubectl("delete", "pod", "delpod-worker-1-0", "-n", ns, "--wait=false")
    job = wait_job(
        cluster, ns, "delpod", "Succeeded", lambda j: phase(j) == "Succeeded", timeout=300
    )
    reasons = by_reason(job)
    assert reasons.get("preemption") == 1, reasons
    assert reasons.get("failure", 0) == 0 and reasons.get("pod-lost", 0) == 0, reasons
    names = {p["metadata"]["name"] for p in pods(cluster, ns)}
    assert "delpod-worker-1-1" in names
    assert _resumed(cluster, ns)
    replaced = [e for e in _events(cluster, ns, "delpod") if e["reason"] == "WorkerReplaced"]
    assert len(replaced) == 1


def test_lost_node_is_recovered_and_counted_once(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    _start(cluster, ns, "nodeloss")
    _wait_progress(cluster, ns)
    everything = pods(cluster, ns) + pods(cluster, ns, "etcd")
    nodes = [p["spec"]["nodeName"] for p in everything]
    alone = [
        p["spec"]["nodeName"] for p in pods(cluster, ns) if nodes.count(p["spec"]["nodeName"]) == 1
    ]
    if not alone:
        pytest.fail(f"every worker shares its node with another pod of the job: {nodes}")
    victim = alone[0]
    cluster.lose_node(victim)
    try:
        job = wait_job(
            cluster, ns, "nodeloss", "Succeeded", lambda j: phase(j) == "Succeeded", timeout=300
        )
    finally:
        cluster.restore_node(victim)
    reasons = by_reason(job)
    # The operator replaced the pod once and counted nothing itself: the pod's agent had joined,
    # so the group restart is the agents' to count.
    assert reasons.get("pod-lost", 0) == 0 and reasons.get("pod-failure", 0) == 0, reasons
    replaced = [
        e["message"] for e in _events(cluster, ns, "nodeloss") if e["reason"] == "WorkerReplaced"
    ]
    assert len(replaced) == 1 and "lost node" in replaced[0], replaced
    assert _resumed(cluster, ns)
    # A dead machine warns nobody (no SIGTERM, so no preemption): the survivors see the member
    # or their collective fail and count one failure; the replacement joining later is free.
    assert reasons.get("failure") == 1 and reasons.get("preemption", 0) == 0, reasons


def _etcd_pod(cluster: LocalCluster, ns: str) -> str:
    live = [p for p in pods(cluster, ns, "etcd") if p["status"].get("phase") == "Running"]
    assert len(live) == 1, live
    return str(live[0]["metadata"]["name"])


def _time_to_stall(cluster: LocalCluster, ns: str, name: str, since_wall: float) -> float:
    """Seconds from ``since_wall`` (Unix time) to the EtcdUnavailable stall.

    A killed managed etcd can be recreated and the stall over within seconds, faster than a
    poll sees the condition; the stall's Event (second resolution) is the record then.
    """

    def seen() -> float | None:
        job = get_job(cluster, ns, name)
        cond = condition(job, "Stalled")
        if cond.get("reason") == "EtcdUnavailable" and cond.get("status") == "True":
            return time.time()
        stamps = [
            e.get("firstTimestamp") or e.get("eventTime")
            for e in _events(cluster, ns, name)
            if e["reason"] == "EtcdUnavailable"
        ]
        if stamps:
            first = min(datetime.fromisoformat(str(t).replace("Z", "+00:00")) for t in stamps)
            return first.timestamp()
        return None

    deadline = time.monotonic() + DETECT_WITHIN + 10
    while time.monotonic() < deadline:
        at = seen()
        if at is not None:
            # Event times are whole seconds, truncated: allow one second of rounding.
            return max(0.0, at - since_wall)
        time.sleep(0.5)
    raise AssertionError(
        f"{ns}/{name}: not Stalled/EtcdUnavailable after {DETECT_WITHIN + 10} s: "
        + json.dumps(get_job(cluster, ns, name).get("status"), indent=1)
    )


def test_etcd_process_killed_is_stalled_within_15s_then_recreated(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    _start(cluster, ns, "etcdkill")
    _wait_progress(cluster, ns)
    etcd = _etcd_pod(cluster, ns)
    began = time.time()
    cluster.kill_container(ns, etcd, signal.SIGKILL)
    took = _time_to_stall(cluster, ns, "etcdkill", began)
    assert took <= DETECT_WITHIN, took
    job = _recreated(cluster, ns, "etcdkill", operator)
    assert _etcd_pod(cluster, ns) == "etcdkill-etcd-1"
    print(f"etcd killed: Stalled/EtcdUnavailable after {took:.1f} s; {job['status']['restarts']}")


def test_etcd_cut_off_the_network_is_stalled_within_15s_then_recreated(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    _start(cluster, ns, "etcdcut")
    _wait_progress(cluster, ns)
    etcd = _etcd_pod(cluster, ns)
    began = time.time()
    cluster.cut_pod(ns, etcd)
    took = _time_to_stall(cluster, ns, "etcdcut", began)
    assert took <= DETECT_WITHIN, took
    _recreated(cluster, ns, "etcdcut", operator)
    print(f"etcd cut off: Stalled/EtcdUnavailable after {took:.1f} s")


def _recreated(
    cluster: LocalCluster, ns: str, name: str, operator: OperatorProcess
) -> dict[str, Any]:
    job = wait_job(
        cluster,
        ns,
        name,
        "recovered from the etcd outage",
        lambda j: (
            j["status"].get("etcd", {}).get("seededGeneration") == 1
            and condition(j, "Stalled").get("status") == "False"
        ),
        timeout=240,
    )
    assert job["status"]["etcd"]["generation"] == 1
    assert by_reason(job).get("etcd-recovered") == 1
    reasons = [e["reason"] for e in _events(cluster, ns, name)]
    assert "EtcdUnavailable" in reasons and "EtcdRecreated" in reasons
    metrics = operator.metrics()
    assert (
        f'elasticjob_job_stalls_total{{job="{name}",namespace="{ns}",reason="EtcdUnavailable"}}'
        in metrics
    )
    return job


ETCD_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: shared-etcd
  labels: {app: shared-etcd}
spec:
  restartPolicy: Never
  nodeSelector: {elasticjob.dev/virtual-node: "true"}
  tolerations: [{key: elasticjob.dev/virtual-node, operator: Exists, effect: NoSchedule}]
  containers:
    - name: etcd
      image: ETCD_IMAGE
      command:
        - etcd
        - --data-dir=/var/lib/etcd/data
        - --listen-client-urls=http://0.0.0.0:2379
        - --advertise-client-urls=http://shared-etcd:2379
      volumeMounts: [{name: data, mountPath: /var/lib/etcd}]
  volumes: [{name: data, emptyDir: {}}]
---
apiVersion: v1
kind: Service
metadata:
  name: shared-etcd
spec:
  clusterIP: None
  selector: {app: shared-etcd}
  ports: [{name: client, port: 2379, targetPort: 2379}]
""".replace("ETCD_IMAGE", ETCD_IMAGE)


def test_unrecoverable_external_etcd_fails_after_the_stall_timeout_with_every_pod_gone(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=ETCD_POD)
    cluster.wait_pod_phase(ns, "shared-etcd", "Running", timeout=180)
    endpoint = f"shared-etcd.{ns}.svc:2379"
    _start(
        cluster,
        ns,
        "external",
        stallTimeoutSeconds=20,
        etcd={"mode": "External", "endpoints": [endpoint]},
    )
    _wait_progress(cluster, ns, 5)
    began = time.time()
    cluster.cut_pod(ns, "shared-etcd")  # the operator cannot recreate an etcd it does not own
    try:
        took = _time_to_stall(cluster, ns, "external", began)
        assert took <= DETECT_WITHIN, took
        job = wait_job(
            cluster, ns, "external", "Failed", lambda j: phase(j) == "Failed", timeout=90
        )
        assert job["status"]["reason"] == "EtcdUnavailable"
        assert "stallTimeoutSeconds" in job["status"]["message"]
        cluster.wait_for("every worker pod gone", lambda: pods(cluster, ns) == [], timeout=90)
        assert get_job(cluster, ns, "external")["status"]["phase"] == "Failed"
    finally:
        cluster.restore_pod(ns, "shared-etcd")
