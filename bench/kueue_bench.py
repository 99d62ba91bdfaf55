"""Kueue benchmark on the local cluster: queued ElasticJobs against the same job without Kueue.

Measured (medians of ``--repeat``), each with its peer in the same run:

1. GPUs become free -> the core's pods Running, and -> the first completed rendezvous (the first
   ``start step=`` line). Blockers hold every GPU of a 2-node x 2-GPU cluster; a 2-node job of
   2 GPUs each waits (with Kueue: ``Queued``; without: ``PodsUnschedulable``); the clock starts
   when the blockers are deleted. With Kueue the blockers are queued pods of the same
   ClusterQueue (4 GPUs of quota); without, plain pods in a namespace Kueue does not manage.
2. Preemption -> training again at ``minNodes``. A job of minNodes 1 / replicas 2 trains on
   both nodes. With Kueue an urgent pod (higher WorkloadPriorityClass) arrives and Kueue
   preempts the job's extra; without Kueue the extra pod is deleted, as a preemption would.
   The clock starts at the urgent pod's creation (resp. the deletion; there the urgent pod was
   created first and waits for the GPUs) and stops when the job's status says Running at world
   size 1.

Usage (starts its own cluster with Kueue unless ELASTICJOB_BENCH_CLUSTER names a running one
that has at least 2 nodes of 2 GPUs)::

    .venv/bin/python bench/kueue_bench.py [--repeat 2]

bench/RESULTS.md records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "localcluster"))

from elasticjob_agent.ports import free_port  # noqa: E402
from elasticjob_localcluster import (  # noqa: E402
    ClusterConfig,
    LocalCluster,
    connect,
    start_cluster,
    stop_cluster,
)
from elasticjob_localcluster.kueue import MANAGED_NAMESPACE_LABEL  # noqa: E402
from elasticjob_localcluster.placement import on_virtual_nodes  # noqa: E402


def wait(what: str, predicate: Callable[[], Any], timeout: float = 180, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


def start_operator(
    cluster: LocalCluster, log: Path, namespaces: list[str]
) -> subprocess.Popen[bytes]:
    """The operator as a host process with admin credentials (RBAC is what the e2e tests check)."""
    env = {
        **cluster.env,
        "ELASTICJOB_METRICS_PORT": "0",
        "ELASTICJOB_HEALTH_PORT": str(free_port()),
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "elasticjob-operator"),
         *[f"--namespace={ns}" for ns in namespaces]],
        env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip


QUEUED_NS = "bench-kueue"
PLAIN_NS = "bench-plain"
GPU = "nvidia.com/gpu"


def job(name: str, *, replicas: int, min_nodes: int, queued: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "minNodes": min_nodes,
        "maxNodes": replicas,
        "device": "gpu",
        "nprocPerNode": 1,
        "rendezvous": {"lastCallTimeoutSeconds": 1, "heartbeatSeconds": 3},
        "template": {
            "spec": on_virtual_nodes(
                {
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "x",
                            "command": ["python", "examples/train.py"],
                            "args": ["--steps", "100000", "--step-sleep", "0.5"],
                            "resources": {"limits": {GPU: 2}},
                        }
                    ]
                }
            )
        },
    }
    meta: dict[str, Any] = {"name": name}
    if queued:
        spec["queueName"] = "main"
        meta["labels"] = {"kueue.x-k8s.io/priority-class": "bench-core"}
        meta["annotations"] = {"kueue.elasticjob.dev/extras-priority-class": "bench-extras"}
    return {"apiVersion": "elasticjob.dev/v1alpha1", "kind": "ElasticJob", "metadata": meta,
            "spec": spec}  # fmt: skip


def sleeper(name: str, gpus: int, *, queued: bool, priority: str = "bench-core") -> dict[str, Any]:
    labels = {"bench": "blocker"}
    if queued:
        labels |= {"kueue.x-k8s.io/queue-name": "main", "kueue.x-k8s.io/priority-class": priority}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": on_virtual_nodes(
            {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "main",
                        "image": "x",
                        "command": ["python", "-c", "import time; time.sleep(3600)"],
                        "resources": {"limits": {GPU: str(gpus)}},
                    }
                ],
            }
        ),
    }


def setup(cluster: LocalCluster) -> None:
    cluster.kubectl("apply", "-f", str(REPO / "crds" / "elasticjob.yaml"))
    cluster.kubectl("wait", "--for=condition=Established", "crd/elasticjobs.elasticjob.dev")
    for ns in (QUEUED_NS, PLAIN_NS):
        cluster.kubectl("create", "namespace", ns, check=False)
    cluster.kubectl("label", "namespace", QUEUED_NS, f"{MANAGED_NAMESPACE_LABEL}=true",
                    "--overwrite")  # fmt: skip
    objects: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "bench-flavor"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": "bench"},
         "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
                  "resourceGroups": [{"coveredResources": [GPU], "flavors": [
                      {"name": "bench-flavor",
                       "resources": [{"name": GPU, "nominalQuota": 4}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "main", "namespace": QUEUED_NS}, "spec": {"clusterQueue": "bench"}},
    ]  # fmt: skip
    for name, value in (("bench-extras", 100), ("bench-core", 1000), ("bench-urgent", 10000)):
        objects.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                        "metadata": {"name": name}, "value": value})  # fmt: skip
    for obj in objects:
        cluster.apply(obj)


def clean(cluster: LocalCluster, ns: str) -> None:
    cluster.kubectl("delete", "ej,pods", "--all", "-n", ns, "--wait=true", "--timeout=180s")


def status(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    out = cluster.kubectl("get", "ej", name, "-n", ns, "-o", "json").stdout
    return dict(json.loads(out).get("status") or {})


def core_running(cluster: LocalCluster, ns: str, name: str, count: int) -> bool:
    out = cluster.kubectl(
        "get", "pods", "-n", ns, "-l", f"elasticjob.dev/job-name={name},elasticjob.dev/role=worker",
        "-o", "json",
    ).stdout  # fmt: skip
    pods = json.loads(out)["items"]
    return sum(1 for p in pods if p["status"].get("phase") == "Running") >= count


def trained(cluster: LocalCluster, ns: str, name: str) -> bool:
    for index in (0, 1):
        if "start step=" in cluster.pod_logs(ns, f"{name}-worker-{index}-0"):
            return True
    return False


def quota_free_to_running(cluster: LocalCluster, i: int, queued: bool) -> tuple[float, float]:
    ns = QUEUED_NS if queued else PLAIN_NS
    blockers = [f"blocker-{i}-{k}" for k in range(2)]
    for name in blockers:
        cluster.apply(sleeper(name, 2, queued=queued), ns)
    for name in blockers:
        cluster.wait_pod_phase(ns, name, "Running", timeout=180)
    name = f"wait-{i}"
    cluster.apply(job(name, replicas=2, min_nodes=2, queued=queued), ns)
    expected = "Queued" if queued else "PodsUnschedulable"
    wait(f"{name} {expected}", lambda: status(cluster, ns, name).get("reason") == expected, 180)
    began = time.monotonic()
    cluster.kubectl("delete", "pod", *blockers, "-n", ns, "--wait=false")
    wait("core running", lambda: core_running(cluster, ns, name, 2), 300, every=0.1)
    running = time.monotonic() - began
    wait("first rendezvous", lambda: trained(cluster, ns, name), 300, every=0.2)
    return running, time.monotonic() - began


def preemption_to_min(cluster: LocalCluster, i: int, queued: bool) -> float:
    ns = QUEUED_NS if queued else PLAIN_NS
    name = f"shrink-{i}"
    cluster.apply(job(name, replicas=2, min_nodes=1, queued=queued), ns)
    wait("training at 2", lambda: status(cluster, ns, name).get("worldSize") == 2, 300)
    if queued:
        began = time.monotonic()
        cluster.apply(sleeper(f"urgent-{i}", 2, queued=True, priority="bench-urgent"), ns)
    else:
        # The urgent pod waits for GPUs first, so it (not the extra's replacement) takes the
        # GPUs the deletion frees: the job stays at minNodes, as after a Kueue preemption.
        cluster.apply(sleeper(f"urgent-{i}", 2, queued=False), ns)
        began = time.monotonic()
        cluster.kubectl("delete", "pod", f"{name}-worker-1-0", "-n", ns, "--wait=false")

    def at_min() -> bool:
        st = status(cluster, ns, name)
        return st.get("phase") == "Running" and st.get("worldSize") == 1

    wait("training again at minNodes", at_min, 300, every=0.1)
    return time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    name = os.environ.get("ELASTICJOB_BENCH_CLUSTER")
    config = ClusterConfig(name=name or f"kbench-{os.getpid()}", nodes=2, gpus_per_node=2)
    if name is None:
        cluster = start_cluster(config)
    else:
        found = connect(config)
        if found is None:
            raise SystemExit(f"ELASTICJOB_BENCH_CLUSTER={name}: no such cluster is running")
        cluster = found
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"kueue-bench-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    operator: subprocess.Popen[bytes] | None = None
    try:
        cluster.start_kueue()
        setup(cluster)
        operator = start_operator(cluster, work / "operator.log", [QUEUED_NS, PLAIN_NS])
        results: dict[str, list[Any]] = {}
        for queued in (True, False):
            for i in range(args.repeat):
                results.setdefault(f"free-{queued}", []).append(
                    quota_free_to_running(cluster, i, queued)
                )
                clean(cluster, QUEUED_NS if queued else PLAIN_NS)
                results.setdefault(f"preempt-{queued}", []).append(
                    preemption_to_min(cluster, i, queued)
                )
                clean(cluster, QUEUED_NS if queued else PLAIN_NS)
        rows = []
        for k, label in ((0, "GPUs free -> core pods Running"),
                         (1, "GPUs free -> first rendezvous")):  # fmt: skip
            ours = statistics.median(r[k] for r in results["free-True"])
            theirs = statistics.median(r[k] for r in results["free-False"])
            rows.append((label, ours, theirs))
        ours = statistics.median(results["preempt-True"])
        theirs = statistics.median(results["preempt-False"])
        rows.append(("preemption -> training again at minNodes", ours, theirs))
        print(f"| measure | with Kueue | without Kueue | ratio |  (medians of {args.repeat})")
        print("| --- | --- | --- | --- |")
        for label, with_kueue, without in rows:
            print(f"| {label} | {with_kueue:.1f} s | {without:.1f} s | "
                  f"{with_kueue / without:.2f} |")  # fmt: skip
        print("raw:", json.dumps(results))
        return 0
    finally:
        if operator is not None:
            operator.send_signal(signal.SIGTERM)
            operator.wait(timeout=30)
        if name is None:
            stop_cluster(config)
            shutil.rmtree(config.state_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
