"""Operator benchmark on the local cluster: start-up, stall detection, and 50 jobs at once.

Measured, each with a peer measured in the same run:

1. ``kubectl apply`` -> all worker pods Running, and -> the first completed rendezvous (the
   first ``start step=`` line of the training script). Peer: the same two pods started bare
   (no operator) running ``torchrun`` with torch's own c10d rendezvous hosted by pod 0, the
   Kubeflow PyTorchJob way.
2. etcd loss -> ``Stalled/EtcdUnavailable``, with the etcd process killed and with the etcd pod
   cut off the network. Peer: the 15 s target (no peer detects this at all).
3. 50 ElasticJobs at once: operator memory (RSS) and reconcile latency (from its own
   ``elasticjob_reconcile_duration_seconds``). Peer: the same operator with one job.
4. The same 50 jobs while 10 of their worker pods serve hostile ``/status`` bodies (endless,
   declared huge, slow, a deflate bomb, 100 000 headers, NaN, Infinity, deep nesting, wrong
   types, a 5000-digit integer): operator RSS and reconcile rate. Peer: the same 50 jobs just
   before, without hostile pods.

Usage (starts its own small cluster unless ELASTICJOB_BENCH_CLUSTER names a running one)::

    .venv/bin/python bench/operator_bench.py [--jobs 50] [--repeat 2] [--hostile 10]
        [--sections startup,stall,many]

The operator runs as a host process with admin credentials here (RBAC is what the e2e tests
check); results go to stdout as a table. bench/RESULTS.md records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
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
)
from elasticjob_localcluster.placement import on_virtual_nodes  # noqa: E402
from elasticjob_localcluster.versions import ETCD_IMAGE  # noqa: E402

NS = "bench"


def wait(what: str, predicate: Callable[[], Any], timeout: float = 180, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


class Operator:
    def __init__(self, cluster: LocalCluster, log: Path) -> None:
        self.metrics_port = free_port()
        env = {
            **cluster.env,
            "ELASTICJOB_METRICS_PORT": str(self.metrics_port),
            "ELASTICJOB_HEALTH_PORT": str(free_port()),
        }
        self.proc = subprocess.Popen(
            [str(REPO / ".venv" / "bin" / "elasticjob-operator"), f"--namespace={NS}"],
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        wait("operator metrics", self._up, 60)

    def _up(self) -> bool:
        try:
            self.metrics()
        except OSError:
            return False
        return True

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def kubectl(cluster: LocalCluster, *args: str, input: str | None = None) -> str:
    return cluster.kubectl(*args, input=input).stdout


def job(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replicas": 2,
        "device": "cpu",
        "nprocPerNode": 1,
        "rendezvous": {"lastCallTimeoutSeconds": 1},
        "template": {
            "spec": on_virtual_nodes(
                {
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "x",
                            "command": ["python", "examples/train.py"],
                            "args": ["--steps", "100000", "--step-sleep", "0.5"],
                        }
                    ]
                }
            )
        },
    }
    body.update(spec)  # the managed etcd speaks TLS, as this tree's agent does
    return {
        "apiVersion": "elasticjob.dev/v1alpha1",
        "kind": "ElasticJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": body,
    }


def pods_running(cluster: LocalCluster, selector: str, count: int) -> bool:
    out = json.loads(kubectl(cluster, "get", "pods", "-n", NS, "-l", selector, "-o", "json"))
    return sum(1 for p in out["items"] if p["status"].get("phase") == "Running") >= count


def training_started(cluster: LocalCluster, pods: list[str]) -> bool:
    for pod in pods:
        try:
            if "start step=" in cluster.pod_logs(NS, pod):
                return True
        except RuntimeError:
            pass
    return False


def clean(cluster: LocalCluster) -> None:
    cluster.kubectl("delete", "ej,pods,svc", "--all", "-n", NS, "--wait=true", "--timeout=120s")


# -- 1. start-up ---------------------------------------------------------------------------------


def startup_elasticjob(cluster: LocalCluster, i: int) -> tuple[float, float]:
    name = f"start-{i}"
    began = time.monotonic()
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(job(name)))
    selector = f"elasticjob.dev/job-name={name},elasticjob.dev/role=worker"
    wait("worker pods running", lambda: pods_running(cluster, selector, 2))
    running = time.monotonic() - began
    pods = [f"{name}-worker-0-0", f"{name}-worker-1-0"]
    wait("first rendezvous", lambda: training_started(cluster, pods))
    return running, time.monotonic() - began


def _torchrun_pod(name: str, index: int, master: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-{index}", "namespace": NS, "labels": {"bench": name}},
        "spec": on_virtual_nodes(
            {
                "restartPolicy": "Never",
                "hostname": f"{name}-{index}",
                "subdomain": name,
                "containers": [
                    {
                        "name": "trainer",
                        "image": "x",
                        "command": [
                            "torchrun",
                            "--nnodes=2",
                            "--nproc-per-node=1",
                            "--rdzv-backend=c10d",
                            f"--rdzv-endpoint={master}:29500",
                            f"--rdzv-id={name}",
                            "examples/train.py",
                            "--steps=100000",
                            "--step-sleep=0.5",
                            f"--checkpoint-dir=/tmp/bench-{name}",
                        ],
                    }
                ],
            }
        ),
    }


def startup_torchrun(cluster: LocalCluster, i: int) -> tuple[float, float]:
    name = f"peer-{i}"
    master = f"{name}-0.{name}.{NS}.svc.cluster.local"
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"bench": name},
            "ports": [{"name": "c10d", "port": 29500, "targetPort": 29500}],
        },
    }
    items = [service, _torchrun_pod(name, 0, master), _torchrun_pod(name, 1, master)]
    began = time.monotonic()
    kubectl(
        cluster,
        "apply",
        "-f",
        "-",
        input=json.dumps({"kind": "List", "apiVersion": "v1", "items": items}),
    )
    wait("peer pods running", lambda: pods_running(cluster, f"bench={name}", 2))
    running = time.monotonic() - began
    wait("peer rendezvous", lambda: training_started(cluster, [f"{name}-0", f"{name}-1"]))
    return running, time.monotonic() - began


# -- 2. stall detection --------------------------------------------------------------------------


def stalled(cluster: LocalCluster, name: str) -> bool:
    status = (
        json.loads(kubectl(cluster, "get", "ej", name, "-n", NS, "-o", "json")).get("status") or {}
    )
    return any(
        c.get("type") == "Stalled"
        and c.get("status") == "True"
        and c.get("reason") == "EtcdUnavailable"
        for c in status.get("conditions") or []
    )


def etcd_loss_to_stalled(cluster: LocalCluster, i: int, how: str) -> float:
    name = f"stall-{how}-{i}"
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(job(name)))
    wait(
        "first rendezvous",
        lambda: training_started(cluster, [f"{name}-worker-0-0", f"{name}-worker-1-0"]),
    )
    etcd = f"{name}-etcd-0"
    began = time.monotonic()
    if how == "kill":
        cluster.kill_container(NS, etcd, signal.SIGKILL)
    else:
        cluster.cut_pod(NS, etcd)
    wait("Stalled/EtcdUnavailable", lambda: stalled(cluster, name), 60, 0.1)
    took = time.monotonic() - began
    cluster.kubectl("delete", "ej", name, "-n", NS, "--wait=false")
    return took


# -- 3. many jobs --------------------------------------------------------------------------------


def reconcile_stats(metrics: str) -> tuple[float, float, float]:
    """(count, mean ms, p95 ms upper bound) of elasticjob_reconcile_duration_seconds."""
    buckets: list[tuple[float, float]] = []
    count = total = 0.0
    for line in metrics.splitlines():
        m = re.match(r'elasticjob_reconcile_duration_seconds_bucket\{le="([^"]+)"\} (\S+)', line)
        if m:
            buckets.append((float(m.group(1)), float(m.group(2))))
        elif line.startswith("elasticjob_reconcile_duration_seconds_count "):
            count = float(line.split()[1])
        elif line.startswith("elasticjob_reconcile_duration_seconds_sum "):
            total = float(line.split()[1])
    p95 = next((le for le, c in sorted(buckets) if count and c >= 0.95 * count), float("nan"))
    return count, (total / count * 1000 if count else float("nan")), p95 * 1000


def many_jobs(
    cluster: LocalCluster, operator: Operator, jobs: int, endpoint: str
) -> dict[str, float]:
    """``jobs`` jobs whose workers stay Pending (no node matches): the operator reconciles each
    every 2 s, probes the shared external etcd, creates their pods and tracks their stalls."""

    def spec(name: str) -> dict[str, Any]:
        manifest = job(
            name,
            etcd={"mode": "External", "endpoints": [endpoint]},
            stallTimeoutSeconds=3600,
        )
        manifest["spec"]["template"]["spec"]["nodeSelector"] = {"bench/none": "true"}
        return manifest

    kubectl(cluster, "apply", "-f", "-", input=json.dumps(spec("one")))
    time.sleep(20)
    base_before = reconcile_stats(operator.metrics())
    time.sleep(20)
    base_after = reconcile_stats(operator.metrics())
    rss_one = operator.rss_mib()
    items = [spec(f"many-{i}") for i in range(jobs)]
    began = time.monotonic()
    kubectl(
        cluster,
        "apply",
        "-f",
        "-",
        input=json.dumps({"kind": "List", "apiVersion": "v1", "items": items}),
    )
    wait(
        f"{jobs} jobs with status",
        lambda: (
            sum(
                1
                for j in json.loads(kubectl(cluster, "get", "ej", "-n", NS, "-o", "json"))["items"]
                if (j.get("status") or {}).get("phase")
            )
            >= jobs + 1
        ),
        300,
        1,
    )
    all_seen = time.monotonic() - began
    time.sleep(20)
    before = reconcile_stats(operator.metrics())
    time.sleep(30)
    after = reconcile_stats(operator.metrics())
    rss_many = operator.rss_mib()

    def window(a: tuple[float, float, float], b: tuple[float, float, float]) -> tuple[float, float]:
        n = b[0] - a[0]
        mean = (b[1] * b[0] - a[1] * a[0]) / n if n else float("nan")
        return n, mean

    n1, mean1 = window(base_before, base_after)
    n50, mean50 = window(before, after)
    return {
        "rss_one": rss_one,
        "rss_many": rss_many,
        "mean_one": mean1,
        "mean_many": mean50,
        "rate_one": n1 / 20,
        "rate_many": n50 / 30,
        "p95_many": after[2],
        "all_seen": all_seen,
    }


HOSTILE_SERVER = r"""
import socket, sys, threading, time, zlib
kind = sys.argv[1]
good = b'{"schemaVersion": 1, "runId": "r", "node": "n", "state": "Running", "round": 1, ' \
    b'"restarts": {"total": 0, "byReason": {}}, "maxRestarts": 3, ' \
    b'"etcd": {"reachable": true}, "updatedAt": 1.0}'
bodies = {
    "nan": good.replace(b'"round": 1', b'"round": NaN'),
    "infinity": good.replace(b'"updatedAt": 1.0', b'"updatedAt": Infinity'),
    "nested": b'{"a":' * 5000 + b"1" + b"}" * 5000,
    "types": good.replace(b'"round": 1', b'"round": "one"'),
    "bigint": good.replace(b'"round": 1', b'"round": ' + b"9" * 5000),
}
bomb = zlib.compress(b" " * (50 << 20), 9)
def head(extra=b""):
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra
def serve(conn):
    try:
        conn.recv(65536)
        if kind == "endless":
            conn.sendall(head(b"\r\n"))
            while True:
                conn.sendall(b"[" * 65536)
        elif kind == "huge":
            conn.sendall(head(b"Content-Length: 314572800\r\n\r\n"))
            while True:
                conn.sendall(b" " * 65536)
        elif kind == "slow":
            conn.sendall(head(b"Content-Length: %d\r\n\r\n" % len(good)))
            for byte in good:
                conn.sendall(bytes([byte])); time.sleep(0.05)
        elif kind == "bomb":
            extra = b"Content-Encoding: deflate\r\nContent-Length: %d\r\n\r\n" % len(bomb)
            conn.sendall(head(extra) + bomb)
        elif kind == "headers":
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            for i in range(100000):
                conn.sendall(b"X-Junk-%d: %s\r\n" % (i, b"j" * 4000))
        else:
            body = bodies[kind]
            conn.sendall(head(b"Content-Length: %d\r\n\r\n" % len(body)) + body)
    except OSError:
        pass
    finally:
        conn.close()
server = socket.create_server(("0.0.0.0", 29401), reuse_port=True)
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""
HOSTILE_KINDS = (
    "endless",
    "huge",
    "slow",
    "bomb",
    "headers",
    "nan",
    "infinity",
    "nested",
    "types",
    "bigint",
)


def hostile_pods(cluster: LocalCluster, count: int) -> list[str]:
    """Give ``count`` of the ``many-*`` jobs a worker pod (adopted: a newer attempt of index 0)
    that serves a hostile ``/status``; returns the jobs."""
    jobs = json.loads(kubectl(cluster, "get", "ej", "-n", NS, "-o", "json"))["items"]
    chosen = sorted(
        (j for j in jobs if j["metadata"]["name"].startswith("many-")),
        key=lambda j: j["metadata"]["name"],
    )[:count]
    pods = []
    for i, j in enumerate(chosen):
        name = j["metadata"]["name"]
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-worker-0-9",
                    "namespace": NS,
                    "labels": {
                        "elasticjob.dev/job-name": name,
                        "elasticjob.dev/role": "worker",
                        "elasticjob.dev/replica-index": "0",
                        "elasticjob.dev/attempt": "9",
                    },
                    "ownerReferences": [
                        {
                            "apiVersion": "elasticjob.dev/v1alpha1",
                            "kind": "ElasticJob",
                            "name": name,
                            "uid": j["metadata"]["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": on_virtual_nodes(
                    {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "hostile",
                                "image": "x",
                                "command": [
                                    "python3",
                                    "-c",
                                    HOSTILE_SERVER,
                                    HOSTILE_KINDS[i % len(HOSTILE_KINDS)],
                                ],
                            }
                        ],
                    }
                ),
            }
        )
    kubectl(
        cluster,
        "apply",
        "-f",
        "-",
        input=json.dumps({"kind": "List", "apiVersion": "v1", "items": pods}),
    )
    wait(
        f"{count} hostile pods Running",
        lambda: pods_running(cluster, "elasticjob.dev/attempt=9", count),
        240,
        1,
    )
    return [j["metadata"]["name"] for j in chosen]


def hostile_reports(cluster: LocalCluster, operator: Operator, count: int) -> dict[str, float]:
    """Operator RSS and reconcile rate with the 50 jobs, then with ``count`` hostile pods."""
    before_a = reconcile_stats(operator.metrics())
    time.sleep(30)
    before_b = reconcile_stats(operator.metrics())
    rss_before = operator.rss_mib()
    names = hostile_pods(cluster, count)
    time.sleep(15)
    peak = 0.0
    during_a = reconcile_stats(operator.metrics())
    for _ in range(12):  # 60 s of hostile polling, RSS sampled every 5 s
        time.sleep(5)
        peak = max(peak, operator.rss_mib())
    during_b = reconcile_stats(operator.metrics())
    jobs = json.loads(kubectl(cluster, "get", "ej", "-n", NS, "-o", "json"))["items"]
    flagged = sum(
        1
        for j in jobs
        if j["metadata"]["name"] in names and (j.get("status") or {}).get("invalidReports")
    )
    return {
        "rss_before": rss_before,
        "rss_peak": peak,
        "rate_before": (before_b[0] - before_a[0]) / 30,
        "rate_during": (during_b[0] - during_a[0]) / 60,
        "flagged": flagged,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--hostile", type=int, default=10, help="pods serving hostile reports")
    parser.add_argument(
        "--sections",
        default="startup,stall,many",
        help="comma-separated: startup, stall, many (many includes the hostile pods)",
    )
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    name = os.environ.get("ELASTICJOB_BENCH_CLUSTER")
    own = name is None
    if own:
        config = ClusterConfig(name=f"bench-{os.getpid()}", nodes=3, gpus_per_node=2)
        cluster = start_cluster(config)
    else:
        found = connect(ClusterConfig(name=str(name)))
        if found is None:
            raise SystemExit(f"ELASTICJOB_BENCH_CLUSTER={name}: no such cluster is running")
        cluster = found
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"operator-bench-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    operator: Operator | None = None
    rows: list[tuple[str, str, str, str]] = []
    try:
        cluster.kubectl("apply", "-f", str(REPO / "crds" / "elasticjob.yaml"))
        cluster.kubectl("wait", "--for=condition=Established", "crd/elasticjobs.elasticjob.dev")
        cluster.kubectl("create", "namespace", NS, check=False)
        operator = Operator(cluster, work / "operator.log")

        ej = (
            [startup_elasticjob(cluster, i) for i in range(args.repeat)]
            if "startup" in sections
            else []
        )
        clean(cluster)
        peer = [startup_torchrun(cluster, i) for i in range(args.repeat)] if ej else []
        clean(cluster)
        for k, label in ((0, "apply -> worker pods Running"), (1, "apply -> first rendezvous")):
            if not ej:
                break
            ours = statistics.median(r[k] for r in ej)
            theirs = statistics.median(r[k] for r in peer)
            rows.append(
                (
                    label,
                    f"{ours:.1f} s",
                    f"{theirs:.1f} s (bare pods + torchrun c10d)",
                    f"{ours / theirs:.2f}",
                )
            )

        for how in ("kill", "cut") if "stall" in sections else ():
            took = statistics.median(
                etcd_loss_to_stalled(cluster, i, how) for i in range(args.repeat)
            )
            rows.append(
                (
                    f"etcd {how} -> Stalled/EtcdUnavailable",
                    f"{took:.1f} s",
                    "15 s (target)",
                    f"{took / 15:.2f}",
                )
            )
        clean(cluster)

        etcd_pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "shared-etcd", "namespace": NS},
            "spec": on_virtual_nodes(
                {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "etcd",
                            "image": ETCD_IMAGE,
                            "command": [
                                "etcd",
                                f"--data-dir=/tmp/bench-etcd-{os.getpid()}",
                                "--listen-client-urls=http://0.0.0.0:2379",
                                "--advertise-client-urls=http://0.0.0.0:2379",
                            ],
                        }
                    ],
                }
            ),
        }
        if "many" not in sections:
            raise _Done
        kubectl(cluster, "apply", "-f", "-", input=json.dumps(etcd_pod))
        cluster.wait_pod_phase(NS, "shared-etcd", "Running")
        endpoint = f"{cluster.pod_ip(NS, 'shared-etcd')}:2379"
        many = many_jobs(cluster, operator, args.jobs, endpoint)
        rows.append(
            (
                f"operator RSS, {args.jobs} jobs",
                f"{many['rss_many']:.0f} MiB",
                f"{many['rss_one']:.0f} MiB (1 job)",
                f"{many['rss_many'] / many['rss_one']:.2f}",
            )
        )
        rows.append(
            (
                f"reconcile step mean, {args.jobs} jobs",
                f"{many['mean_many']:.1f} ms",
                f"{many['mean_one']:.1f} ms (1 job)",
                f"{many['mean_many'] / many['mean_one']:.2f}",
            )
        )
        rows.append(
            (
                f"reconcile step p95 (bucket), {args.jobs} jobs",
                f"<= {many['p95_many']:.0f} ms",
                "",
                "",
            )
        )
        rows.append(
            (
                f"reconcile steps per second, {args.jobs} jobs",
                f"{many['rate_many']:.1f}/s",
                f"{many['rate_one']:.1f}/s (1 job)",
                f"{many['rate_many'] / many['rate_one']:.1f}",
            )
        )
        rows.append(
            (f"apply {args.jobs} jobs -> all have a status", f"{many['all_seen']:.1f} s", "", "")
        )
        if args.hostile:
            bad = hostile_reports(cluster, operator, args.hostile)
            rows.append(
                (
                    f"operator RSS peak, {args.jobs} jobs, {args.hostile} hostile /status pods",
                    f"{bad['rss_peak']:.0f} MiB",
                    f"{bad['rss_before']:.0f} MiB (same jobs, no hostile pod)",
                    f"{bad['rss_peak'] / bad['rss_before']:.2f}",
                )
            )
            rows.append(
                (
                    f"reconcile steps per second, {args.hostile} hostile pods",
                    f"{bad['rate_during']:.1f}/s",
                    f"{bad['rate_before']:.1f}/s (no hostile pod)",
                    f"{bad['rate_during'] / bad['rate_before']:.2f}",
                )
            )
            rows.append(
                (
                    "jobs listing the hostile pod in status.invalidReports",
                    f"{bad['flagged']:.0f} of {args.hostile}",
                    "",
                    "",
                )
            )
        clean(cluster)

    except _Done:
        pass
    finally:
        if operator is not None:
            operator.stop()
        if own:
            cluster.stop()
            shutil.rmtree(cluster.config.state_dir, ignore_errors=True)
    if rows:
        width = max(len(r[0]) for r in rows)
        print(f"\n{'measure':<{width}} | ElasticJob | peer | ratio")
        print(f"{'-' * width} | --- | --- | ---")
        for row in rows:
            print(f"{row[0]:<{width}} | {row[1]} | {row[2]} | {row[3]}")
    return 0


class _Done(Exception):
    """The sections asked for are measured."""


if __name__ == "__main__":
    sys.exit(main())
