"""Does the job's status name the cause? Each fault of a matrix on the local cluster's real
nodes, and what ``status.lastFailure`` said of it.

One ElasticJob per fault (2 nodes x 1 process of the training image's ``train.py``; the
operator installed from its chart with default values but its node). The cluster has 2 real
nodes: the operator, the job's etcd and worker 0 on the first, worker 1 (the *victim*) alone on
the second, so a fault of the victim's pod or node hits neither the operator nor the etcd.
``diagnosis_faults.py`` holds the faults, what each should be diagnosed as and how a status is
judged (pure, unit-tested); this script does the cluster I/O.

Per fault: ``expected`` (the kind of cause, the pod and its node), ``reported`` (what
``status.lastFailure`` names once the job recovered, or failed; the status is read until it is
right or the fault's deadline passes), ``correct``, and ``recovery_s``, from the fault to the
first step of the group that trains after it, from rank 0's progress file (the benchmark's own
clock, as in ``goodput_bench.py``).

Usage (starts its own cluster of 2 real nodes unless ELASTICJOB_BENCH_CLUSTER names a running
one; cleans up)::

    .venv/bin/python bench/diagnosis_bench.py --json FILE [--faults sigkill-rank,node-lost]

bench/RESULTS.md records runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "localcluster"))

from diagnosis_faults import (  # noqa: E402
    FAIL_AT_STEP,
    FAULTS,
    INJECTED,
    KILL_RANK,
    OOM_HOG,
    TRIGGER,
    Expected,
    Fault,
    Injection,
    JobShape,
    Placement,
    Target,
    eviction,
    expected,
    job_manifest,
    judge,
    reported,
    row,
    select,
    table,
)
from elasticjob_localcluster import (  # noqa: E402
    ClusterConfig,
    ClusterError,
    LocalCluster,
    connect,
    start_cluster,
)
from elasticjob_localcluster.testing import TRAINING_IMAGE  # noqa: E402
from goodput_measure import Progress, fault_cost, last_step, parse_progress  # noqa: E402

NAMESPACE = "diagnosis"
CHART = REPO / "charts" / "elasticjob-operator"
RELEASE = "elasticjob"
OPERATOR_NAMESPACE = "elasticjob-system"
HOSTNAME = "kubernetes.io/hostname"
WORK_ROOT = Path("/var/tmp/elasticjob-diagnosis")
"""Host directory shared by every real node (hostPath): checkpoints and progress files."""
START_TIMEOUT = 600.0
"""Seconds a job gets to train its first steps."""
JUDGE_WITHIN = {"node-lost": 120.0, "missing-script": 240.0, "image-not-pulled": 120.0}
"""Seconds after the fault by which the status must name the cause (default ``JUDGE_DEFAULT``):
the node controller marks a node lost 40 s after its last heartbeat; a broken command fails
only once its restart budget is spent."""
JUDGE_DEFAULT = 60.0


class BenchError(RuntimeError):
    """A fault could not be set up or measured; the message says what was expected and seen."""


@dataclass
class Bench:
    cluster: LocalCluster
    keep: str
    """The node of the operator (and the job's etcd and worker 0)."""
    shape: JobShape
    recovery_timeout: float
    out: Callable[[str], None] = print

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return self.cluster.kubectl(*args, input=input, check=check).stdout

    def get(self, *args: str) -> Any:
        return self.cluster.get_json(*args)

    def run(self, fault: Fault) -> dict[str, Any]:
        """One job under ``fault``: its row."""
        name = f"dx-{fault.name}"
        host_dir = WORK_ROOT / f"{name}-{uuid.uuid4().hex[:6]}"
        (host_dir / "checkpoints").mkdir(parents=True)
        # The image runs as uid 10001; the host directory is the bench's (root's).
        host_dir.chmod(0o777)
        (host_dir / "checkpoints").chmod(0o777)
        manifest = job_manifest(name, fault, self.shape, host_dir=str(host_dir), keep=self.keep)
        self.out(f"--> {fault.name}: {fault.what}")
        self.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=json.dumps(manifest))
        lost: str | None = None
        want: Expected | None = None
        status: dict[str, Any] | None = None
        recovery: float | None = None
        try:

            def progress() -> list[Progress]:
                try:
                    return parse_progress((host_dir / "progress.log").read_text())
                except FileNotFoundError:
                    return []

            if fault.injection is Injection.AT_START:
                self._wait(f"{name}: its pods", lambda: len(self.placement(name).workers) == 2, 120)
                want = expected(fault, self.placement(name))
                at = time.time()
            else:
                self._wait(f"{name}: 2 nodes ready", lambda: self._ready_nodes(name) == 2, 300)
                started = lambda: last_step(progress()) is not None  # noqa: E731
                self._wait(f"{name}: a first step", started, START_TIMEOUT)
                placement = self.placement(name)
                before = last_step(progress()) or 0
                if fault.injection is not Injection.FAIL_AT_STEP:
                    more = lambda: (last_step(progress()) or 0) >= before + 3  # noqa: E731
                    self._wait(f"{name}: 3 more steps", more, 120)
                at, lost = self.inject(fault, name, placement)
                culprit = None
                if fault.injection is Injection.FAIL_AT_STEP:
                    # Dated by the last step done before the one that raises.
                    done = FAIL_AT_STEP - 1
                    reached = lambda: (last_step(progress()) or 0) >= done  # noqa: E731
                    self._wait(f"{name}: step {done}", reached, 300)
                    at = min(p.time for p in progress() if p.event == "step" and p.step == done)
                recovery = self._await_recovery(progress, at)
                if fault.injection is Injection.FAIL_AT_STEP:
                    culprit = self._culprit(placement)
                want = expected(fault, placement, culprit=culprit)
            self.out(f"    expected: {want.describe()}")
            within = JUDGE_WITHIN.get(fault.name, JUDGE_DEFAULT)
            status = self._await_judgement(name, want, at + within)
            self.out(f"    reported: {reported((status or {}).get('lastFailure'))}")
            for line in self._events(name):
                self.out(f"    event: {line}")
        except (BenchError, ClusterError, TimeoutError, ValueError) as err:
            self.out(f"    not measured: {err}")
            status = status or self._status(name)
        finally:
            if lost is not None:
                self.cluster.restore_node(lost)
            self.cleanup(name, host_dir)
        return row(fault, want, status, recovery)

    # -- what the job shows --------------------------------------------------------------------

    def _status(self, name: str) -> dict[str, Any] | None:
        job = self.cluster.kubectl("get", "ej", name, "-n", NAMESPACE, "-o", "json", check=False)
        if job.returncode != 0:
            return None
        status: dict[str, Any] = json.loads(job.stdout).get("status") or {}
        return status

    def _ready_nodes(self, name: str) -> int:
        return int((self._status(name) or {}).get("readyNodes") or 0)

    def placement(self, name: str) -> Placement:
        """The job's live worker pods and their nodes, the victim (the worker away from the
        operator's node), and the etcd pod."""
        items = self.get("pods", "-n", NAMESPACE, "-l", f"elasticjob.dev/job-name={name}")["items"]
        live = [
            p for p in items
            if not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName")
        ]  # fmt: skip
        workers = {
            str(p["metadata"]["name"]): str(p["spec"]["nodeName"])
            for p in live
            if _role(p) == "worker"
        }
        etcd = [
            (str(p["metadata"]["name"]), str(p["spec"]["nodeName"]))
            for p in live
            if _role(p) == "etcd"
        ]
        away = sorted(p for p, n in workers.items() if n != self.keep)
        return Placement(workers, away[0] if away else None, etcd[0] if etcd else None)

    def _culprit(self, placement: Placement) -> str | None:
        """The pod whose log holds the injected exception (train.py's --fail-at-step)."""
        for pod in sorted(placement.workers):
            if INJECTED in self.cluster.pod_logs(NAMESPACE, pod):
                return pod
        return None

    def _events(self, name: str) -> list[str]:
        """The job's Restarted and RootCause Events, oldest first."""
        out = self.cluster.kubectl(
            "get", "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.name={name}",
            "--sort-by", ".lastTimestamp", "-o",
            "jsonpath={range .items[*]}{.reason}: {.message}{'\\n'}{end}", check=False,
        ).stdout  # fmt: skip
        keep = ("Restarted", "RootCause", "MaxRestartsExceeded", "PodsNotStarting")
        return [line[:400] for line in out.splitlines() if line.startswith(keep)]

    def _await_judgement(self, name: str, want: Expected, deadline: float) -> dict[str, Any] | None:
        """The job's status once ``lastFailure`` names the expected cause, or at ``deadline``."""
        while True:
            status = self._status(name)
            if judge(want, (status or {}).get("lastFailure")) or time.time() > deadline:
                return status
            time.sleep(1)

    def _await_recovery(self, progress: Callable[[], list[Progress]], at: float) -> float | None:
        """Seconds from ``at`` to the first step of the group that trains after it; ``None``
        when none does within the recovery deadline."""
        deadline = at + self.recovery_timeout
        while time.time() < deadline:
            cost = fault_cost(progress(), at, until=time.time())
            if cost.recovery_s is not None and cost.groups:
                return cost.recovery_s
            time.sleep(0.5)
        return None

    def _wait(self, what: str, predicate: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                pods = self.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide", check=False)
                raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}\n{pods}")
            time.sleep(0.5)

    def _node_ready(self, node: str) -> bool:
        conditions = self.get("node", node).get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    # -- faults --------------------------------------------------------------------------------

    def _exec(self, pod: str, script: str, *args: str) -> float:
        done = self.cluster.exec_in_pod(NAMESPACE, pod, ["python", "-c", script, *args], check=True)
        return float(done.stdout.split()[0])

    def inject(self, fault: Fault, name: str, placement: Placement) -> tuple[float, str | None]:
        """Inject ``fault``; returns its time (unix seconds) and the lost node, if any."""
        victim = placement.victim
        if victim is None:
            raise BenchError(f"{name}: no worker away from {self.keep}: {placement.workers}")
        node = placement.workers[victim]
        kind = fault.injection
        if kind is Injection.FAIL_AT_STEP:
            return time.time(), None  # train.py raises by itself; the caller dates it
        if kind is Injection.KILL_RANK:
            return self._exec(victim, KILL_RANK), None
        if kind is Injection.TRIGGER and fault.trigger is not None:
            pods = sorted(placement.workers) if fault.target is Target.EVERY_RANK else [victim]
            times: dict[str, float] = {}
            errors: list[str] = []

            def trigger(pod: str) -> None:
                try:
                    times[pod] = self._exec(pod, TRIGGER, fault.trigger or "")
                except (ClusterError, ValueError, IndexError) as err:
                    errors.append(f"{pod}: {err}")

            threads = [threading.Thread(target=trigger, args=(p,)) for p in pods]
            for t in threads:
                t.start()
            for t in threads:
                t.join(90)
            if errors or not times:
                raise BenchError(f"{name}: trigger {fault.trigger!r} failed: {errors}")
            return min(times.values()), None
        at = time.time()
        if kind is Injection.OOM:
            # The hog prints the time, then the kernel ends its container (and it) at the limit.
            done = self.cluster.exec_in_pod(
                NAMESPACE, victim, ["python", "-c", OOM_HOG], timeout=180
            )
            first = done.stdout.split()
            return (float(first[0]) if first else at), None
        if kind is Injection.DELETE_POD:
            self.kubectl("delete", "pod", victim, "-n", NAMESPACE, "--wait=false")
            return at, None
        if kind is Injection.EVICT_POD:
            self.kubectl(
                "create", "--raw", f"/api/v1/namespaces/{NAMESPACE}/pods/{victim}/eviction",
                "-f", "-", input=eviction(NAMESPACE, victim),
            )  # fmt: skip
            return at, None
        if kind is Injection.LOSE_NODE:
            self.cluster.lose_node(node)
            return at, node
        if kind is Injection.KILL_ETCD and placement.etcd is not None:
            self.cluster.kill_container(NAMESPACE, placement.etcd[0])
            return at, None
        raise BenchError(f"{name}: cannot inject {fault.name}")

    def cleanup(self, name: str, host_dir: Path) -> None:
        self.kubectl("delete", "ej", name, "-n", NAMESPACE, "--wait=true", "--timeout=120s",
                     check=False)  # fmt: skip
        for node in sorted(self.cluster.real_nodes):
            if not self._node_ready(node):
                self._wait_ready(node)
        deadline = time.monotonic() + 120
        while self.get("pods", "-n", NAMESPACE)["items"] and time.monotonic() < deadline:
            time.sleep(1)
        # Pods a lost node never confirmed gone: nothing of them runs any more.
        self.kubectl("delete", "pods", "--all", "-n", NAMESPACE, "--force", "--grace-period=0",
                     check=False)  # fmt: skip
        shutil.rmtree(host_dir, ignore_errors=True)

    def _wait_ready(self, node: str) -> None:
        deadline = time.monotonic() + 240
        while not self._node_ready(node) and time.monotonic() < deadline:
            time.sleep(1)


def _role(pod: dict[str, Any]) -> str | None:
    role = pod["metadata"].get("labels", {}).get("elasticjob.dev/role")
    return None if role is None else str(role)


# -- the cluster -----------------------------------------------------------------------------------


def _build(out: Callable[[str], None], what: str, argv: list[str]) -> None:
    began = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchError(f"{what} failed:\n{done.stderr[-4000:]}")
    out(f"    {what}: {time.monotonic() - began:.0f} s")


def set_up(out: Callable[[str], None]) -> tuple[LocalCluster, bool]:
    """Build what is missing (Kubernetes, images: each cached) and start a cluster of 2 real
    nodes (or connect to ``ELASTICJOB_BENCH_CLUSTER``); whether the cluster is ours."""
    reuse = os.environ.get("ELASTICJOB_BENCH_CLUSTER")
    if reuse is not None:
        found = connect(ClusterConfig(name=reuse))
        if found is None:
            raise BenchError(f"ELASTICJOB_BENCH_CLUSTER={reuse}: no such cluster is running")
        out(f"==> cluster {reuse} (running; left running)")
        return found, False
    out("==> builds (cached when done)")
    _build(out, "localcluster/build.sh", [str(REPO / "localcluster" / "build.sh")])
    _build(
        out, "localcluster/images/build.sh", [str(REPO / "localcluster" / "images" / "build.sh")]
    )
    config = ClusterConfig(name=f"diagnosis-{os.getpid()}", nodes=0, real_nodes=2)
    out(f"==> cluster {config.name}: 2 real nodes")
    began = time.monotonic()
    cluster = start_cluster(config, owned=True)
    out(f"    up in {time.monotonic() - began:.0f} s")
    return cluster, True


def install_operator(cluster: LocalCluster, keep: str, out: Callable[[str], None]) -> None:
    values = cluster.config.state_dir / "diagnosis-values.json"
    values.write_text(json.dumps({"nodeSelector": {HOSTNAME: keep}}))
    out(f"==> helm install {RELEASE} (operator on {keep})")
    cluster.helm(
        "install", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE, "--create-namespace",
        "--values", str(values), "--wait", "--timeout", "5m",
    )  # fmt: skip
    cluster.kubectl("create", "namespace", NAMESPACE)


def tear_down(cluster: LocalCluster, own: bool) -> None:
    if own:
        cluster.stop()
        shutil.rmtree(cluster.config.state_dir, ignore_errors=True)
        return
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
    cluster.helm("uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait", check=False)
    cluster.kubectl("delete", "namespace", OPERATOR_NAMESPACE, "--wait=false", check=False)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument(
        "--faults",
        default="all",
        help=f"comma-separated, from {','.join(f.name for f in FAULTS)} (default: all)",
    )
    parser.add_argument("--step-time", type=float, default=0.5)
    parser.add_argument("--recovery-timeout", type=float, default=240.0,
                        help="seconds a job gets to train again after a fault")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        args.faults = select(args.faults)
    except ValueError as err:
        parser.error(f"--faults: {err}")
    if args.step_time <= 0:
        parser.error("--step-time must be > 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def out(line: str) -> None:
        print(line, flush=True)

    began = time.time()
    cluster, own = set_up(out)
    kubernetes = str(cluster.info.get("version"))
    rows: list[dict[str, Any]] = []
    try:
        if len(cluster.real_nodes) < 2:
            raise BenchError(f"cluster {cluster.config.name}: 2 real nodes needed")
        keep = sorted(cluster.real_nodes)[0]
        install_operator(cluster, keep, out)
        bench = Bench(
            cluster=cluster,
            keep=keep,
            shape=JobShape(image=TRAINING_IMAGE, step_time=args.step_time),
            recovery_timeout=args.recovery_timeout,
            out=out,
        )
        for fault in args.faults:
            rows.append(bench.run(fault))
            out(f"    {json.dumps(rows[-1])}")
    finally:
        tear_down(cluster, own)
    print()
    print(table(rows))
    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(began))}; step time "
        f"{args.step_time} s; Kubernetes {kubernetes}, {TRAINING_IMAGE}; "
        f"{time.time() - began:.0f} s in all"
    )
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
