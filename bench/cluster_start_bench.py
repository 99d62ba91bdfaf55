"""How fast the local cluster starts and runs pods.

Measured in the same run:
- peer: the bare control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler
  on loopback, until the ``default`` ServiceAccount exists): envtest's recipe plus controllers;
- ours: the whole local cluster (control plane, pod network, node emulator, all nodes Ready), then
  a 50-replica Deployment until every pod is Ready, then its deletion until no pod is left.

Prints a table and the ratio ours/peer of the start times. Target: the cluster is ready in well
under a minute once built. Usage: ``.venv/bin/python bench/cluster_start_bench.py [--rounds N]``.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "localcluster"))

from elasticjob_localcluster import ClusterConfig, start_cluster  # noqa: E402
from elasticjob_localcluster.controlplane import start_control_plane  # noqa: E402

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
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
