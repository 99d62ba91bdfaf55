"""How fast the local cluster starts and runs pods.

Measured in the same run:
- peer: the bare control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler
  on loopback, until the ``default`` ServiceAccount exists): envtest's recipe plus controllers;
- ours: the whole local cluster (control plane, pod network, node emulator, all nodes Ready), then
  a 50-replica Deployment until every pod is Ready, then its deletion until no pod is left.

Prints a table and the ratio ours/peer of the start times. Target: the cluster is ready in well
under a minute once built. Usage: ``.venv/bin/python bench/cluster_start_bench.py [--rounds N]``.

``--real-nodes M`` (M >= 1) measures real nodes instead: each round starts a cluster with one
virtual and M real nodes (with the time of each start phase: control plane, real nodes, of which
image import into the node image store, CoreDNS), then starts ``--pods`` pods one at a time,
alternating a real node (the training image, ``python -c``) and the virtual node (the same
command on the host): seconds from ``kubectl create`` returning to the pod's ``Running`` phase,
polled every 0.1 s. The first round after new images is a cold start (the images are imported
into the store); later rounds reuse the store.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "localcluster"))

from elasticjob_localcluster import ClusterConfig, LocalCluster, start_cluster  # noqa: E402
from elasticjob_localcluster.controlplane import start_control_plane  # noqa: E402
from elasticjob_localcluster.testing import python_pod, real_pod  # noqa: E402

PODS = 50


def peer_start() -> float:
    """Seconds until the bare control plane serves and its controllers run."""
    work = Path(tempfile.mkdtemp(prefix="ej-bench-cp-"))
    began = time.monotonic()
    cp = start_control_plane(work, "127.0.0.1", work / "etcd")
    took = time.monotonic() - began
    cp.stop()
    shutil.rmtree(work, ignore_errors=True)
    return took


def cluster_round(index: int) -> tuple[float, float, float]:
    """(start, 50 pods Ready, 50 pods deleted) seconds for one fresh cluster."""
    config = ClusterConfig(name=f"bench-{os.getpid()}-{index}")
    began = time.monotonic()
    cluster = start_cluster(config)
    start = time.monotonic() - began
    try:
        began = time.monotonic()
        cluster.kubectl(
            "create", "deployment", "many", "--image=unused", f"--replicas={PODS}",
            "--", "python", "-c", "import time; time.sleep(3600)",
        )  # fmt: skip
        cluster.kubectl("rollout", "status", "deployment/many", "--timeout=300s")
        run = time.monotonic() - began
        began = time.monotonic()
        cluster.kubectl("delete", "deployment", "many")
        cluster.wait_for(
            "all pods gone",
            lambda: not cluster.kubectl("get", "pods", "-o", "name").stdout.strip(),
            timeout=300,
        )
        delete = time.monotonic() - began
    finally:
        cluster.stop()
        shutil.rmtree(config.state_dir, ignore_errors=True)
    return start, run, delete


def pod_start_seconds(cluster: LocalCluster, manifest: dict[str, Any]) -> float:
    """Seconds from ``kubectl create`` returning to the pod's ``Running`` phase (0.1 s polls);
    the pod is deleted afterwards."""
    name = str(manifest["metadata"]["name"])
    cluster.apply(manifest, "default")
    began = time.monotonic()
    deadline = began + 300
    while ((cluster.pod("default", name) or {}).get("status") or {}).get("phase") != "Running":
        if time.monotonic() > deadline:
            raise TimeoutError(f"pod {name} not Running after 300 s")
        time.sleep(0.1)
    took = time.monotonic() - began
    cluster.kubectl("delete", "pod", name, "--grace-period=0", "--force", "--wait=false")
    return took


def real_round(index: int, real_nodes: int, pods: int) -> dict[str, list[float]]:
    """One cluster with one virtual and ``real_nodes`` real nodes: its start phases and the
    start latency of ``pods`` pods on a real node and as many on the virtual node."""
    config = ClusterConfig(name=f"bench-{os.getpid()}-{index}", nodes=1, real_nodes=real_nodes)
    began = time.monotonic()
    cluster = start_cluster(config)
    out: dict[str, list[float]] = {"start": [time.monotonic() - began]}
    for key in ("control_plane_seconds", "real_nodes_seconds", "image_import_seconds"):
        out[key] = [float(cluster.info.get(key) or 0.0)]
    out["dns_seconds"] = [float(cluster.info.get("dns_seconds") or 0.0)]
    out["real pod"], out["virtual pod"] = [], []
    sleep = "import time; time.sleep(600)"
    try:
        for i in range(pods):
            real = real_pod(f"real-{i}", sleep, grace=0)
            out["real pod"].append(pod_start_seconds(cluster, real))
            virtual = python_pod(
                f"virtual-{i}", sleep, grace=0, extra_spec={"nodeName": cluster.virtual_nodes[0]}
            )
            out["virtual pod"].append(pod_start_seconds(cluster, virtual))
    finally:
        cluster.stop()
        shutil.rmtree(config.state_dir, ignore_errors=True)
    return out


def real_main(rounds: int, real_nodes: int, pods: int) -> int:
    results = [real_round(i, real_nodes, pods) for i in range(rounds)]
    rows = [
        (f"start, 1 virtual + {real_nodes} real nodes", "start"),
        ("  of which control plane", "control_plane_seconds"),
        ("  of which real nodes", "real_nodes_seconds"),
        ("    of which image import", "image_import_seconds"),
        ("  of which CoreDNS Ready", "dns_seconds"),
        ("pod create -> Running, real node", "real pod"),
        ("pod create -> Running, virtual node", "virtual pod"),
    ]
    print(f"{'measure':<42} {'median s':>9} {'min s':>7} {'max s':>7}  per round")
    for name, key in rows:
        values = [v for r in results for v in r[key]]
        per_round = " | ".join(f"{statistics.median(r[key]):.1f}" for r in results)
        print(
            f"{name:<42} {statistics.median(values):>9.1f} {min(values):>7.1f} "
            f"{max(values):>7.1f}  {per_round}"
        )
    real = statistics.median(v for r in results for v in r["real pod"])
    virtual = statistics.median(v for r in results for v in r["virtual pod"])
    print(f"ratio pod start real/virtual: {real / virtual:.2f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--real-nodes", type=int, default=0, help="measure real nodes (above)")
    parser.add_argument("--pods", type=int, default=5, help="pods per kind with --real-nodes")
    args = parser.parse_args()
    if args.real_nodes:
        return real_main(args.rounds, args.real_nodes, args.pods)
    peers = [peer_start() for _ in range(args.rounds)]
    rounds = [cluster_round(i) for i in range(args.rounds)]
    starts, runs, deletes = (list(column) for column in zip(*rounds, strict=True))
    rows = [
        ("peer: bare control plane start", peers),
        ("ours: local cluster start (nodes Ready)", starts),
        (f"ours: {PODS}-pod Deployment to Ready", runs),
        (f"ours: {PODS}-pod Deployment deleted", deletes),
    ]
    print(f"{'measure':<42} {'median s':>9} {'min s':>7} {'max s':>7}")
    for name, values in rows:
        print(
            f"{name:<42} {statistics.median(values):>9.1f} {min(values):>7.1f} {max(values):>7.1f}"
        )
    ratio = statistics.median(starts) / statistics.median(peers)
    print(f"ratio start ours/peer: {ratio:.2f} (target: ours < 60 s)")
    return 0 if statistics.median(starts) < 60 else 1


if __name__ == "__main__":
    sys.exit(main())
