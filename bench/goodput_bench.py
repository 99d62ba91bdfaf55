"""What a failure costs a training run: ElasticJob beside Kubeflow's PyTorchJob, same cluster,
same training script and image, same faults.

Candidates (each for a fixed-size job, minNodes = maxNodes = 2, and an elastic one, 1..2):

- ``pytorchjob``: Kubeflow's training operator v1.8.1 (built from its Go module, cached, by
  ``localcluster/kubeflow/build.sh``) with ``elasticPolicy`` (c10d, its defaults: the store in
  worker 0, torchrun's timeouts), ``restartPolicy: OnFailure``;
- ``elasticjob``: our operator installed from its chart and image, ``spares: 0``;
- ``elasticjob`` with ``spares: 1``: measured when the cluster's CRD has ``spec.spares``;
  otherwise its rows say it was not measured.

The training script is the training image's ``train.py`` with a fixed step time
(``--step-time``) and a checkpoint every ``--checkpoint-every`` steps, on a volume every node
shares (a hostPath the real nodes share with the host, as a shared file system would be), so
a replacement resumes from the last checkpoint whatever node it lands on. Rank 0 appends one
line per group start and per step done to a progress file on that volume; the figures come from
it (``goodput_measure.py``).

Faults (``--faults``), each injected half-way between two checkpoints into a worker that is not
the store's host (the victim's node hosts neither the store nor the operator):

- ``process-kill``: one worker process SIGKILLed inside its pod;
- ``pod-delete``: one worker pod deleted (graceful, as ``kubectl delete pod`` does);
- ``node-loss``: every process of the victim's real node SIGKILLed (``LocalCluster.lose_node``);
  the node is restored once the fault is measured;
- ``store-loss``: the rendezvous store's container SIGKILLed: ElasticJob's etcd pod, the
  PyTorchJob's worker 0 (whose torchrun hosts the c10d store).

Per fault: ``recovery_s`` from the fault to the first step done by the group that trains after
it; ``steps_lost``, done before the fault and done again; ``restarts_reported`` by the system
(ElasticJob: ``status.restarts.total``; PyTorchJob: its ``PyTorchJobRestarting`` Events, the only
count it keeps) beside ``groups``, the groups seen starting (what happened). Per run: goodput =
useful step time / wall time from the first start to the end of the run. Beside each ElasticJob
row, what the job's own ``status.lastRecovery`` says of the fault (``status_recovery_s``,
``status_steps_lost``) and whether it agrees with the bench's figures (``status_agrees``:
seconds within 10 %, steps lost within one step or 10 %); the table's note shows them.

Usage (starts its own cluster of 4 real nodes unless ELASTICJOB_BENCH_CLUSTER names a running
one with at least 4; installs both operators; cleans up)::

    .venv/bin/python bench/goodput_bench.py --faults node-loss --repeat 1 --json FILE
    .venv/bin/python bench/goodput_bench.py --long-run --interval 600   # one run, every fault

bench/RESULTS.md records runs and what the rows mean.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "localcluster"))

from elasticjob_localcluster import (  # noqa: E402
    ClusterConfig,
    ClusterError,
    LocalCluster,
    connect,
    start_cluster,
)
from elasticjob_localcluster.kubeflow import KUBEFLOW_VERSION, TrainingOperator  # noqa: E402
from elasticjob_localcluster.placement import REAL_NODE_PLACEMENT, place  # noqa: E402
from elasticjob_localcluster.testing import TRAINING_IMAGE  # noqa: E402
from goodput_measure import (  # noqa: E402
    FaultCost,
    Progress,
    fault_cost,
    goodput,
    last_step,
    parse_progress,
    row,
    table,
)
from goodput_status import (  # noqa: E402
    STATUS_KEYS,
    STATUS_SKEW,
    STATUS_WAIT,
    status_columns,
    status_note,
)

FAULTS = ("process-kill", "pod-delete", "node-loss", "store-loss")
SHAPES = {"fixed": 2, "elastic": 1}
"""Shape name -> minimum nodes; every job asks for 2 nodes (maxNodes = replicas = 2)."""
NODES = 2
PEER = "pytorchjob"
NAMESPACE = "goodput"
CHART = REPO / "charts" / "elasticjob-operator"
RELEASE = "elasticjob"
OPERATOR_NAMESPACE = "elasticjob-system"
HOSTNAME = "kubernetes.io/hostname"
SYSTEM_TAINT = "goodput.elasticjob.dev/system"
"""Tainted on the node that runs both operators: no job pod lands there, so no fault hits them."""
WORK_ROOT = Path("/var/tmp/elasticjob-goodput")
"""Host directory shared by every real node (hostPath): checkpoints and progress files."""
MOUNT = "/shared"

#: SIGKILL one training process of this pod; prints the time of the kill. Under elasticjob-agent
#: its own /status (the pod's loopback) names the workers: a warm worker is forked from the
#: agent's zygote, so its /proc environ is the zygote's and carries no LOCAL_RANK. Under
#: torchrun, its children carry LOCAL_RANK in their environ (torchrun itself does not).
KILL_WORKER = """
import json, os, signal, time, urllib.request
me = os.getpid()
try:
    with urllib.request.urlopen('http://127.0.0.1:29401/status', timeout=5) as r:
        pids = [w['pid'] for w in json.load(r).get('workers') or []
                if w.get('pid') and w.get('exitCode') is None]
except (OSError, ValueError):
    pids = []
for pid in sorted(int(p) for p in os.listdir('/proc') if p.isdigit()):
    if pids:
        break
    if pid == me:
        continue
    try:
        with open(f'/proc/{pid}/environ', 'rb') as f:
            env = f.read().split(b'\\0')
    except OSError:
        continue
    if any(e.startswith(b'LOCAL_RANK=') for e in env):
        pids = [pid]
if not pids:
    raise SystemExit('no training process in this pod')
at = time.time()
os.kill(pids[0], signal.SIGKILL)
print(at, pids[0])
"""


class BenchError(RuntimeError):
    """A run could not be measured; the message says what was expected and seen."""


@dataclass(frozen=True)
class Candidate:
    kind: str
    """``pytorchjob`` or ``elasticjob``."""
    spares: int = 0


CANDIDATE_NAMES = {
    PEER: Candidate(PEER),
    "elasticjob": Candidate("elasticjob"),
    "elasticjob-spare": Candidate("elasticjob", spares=1),
}


@dataclass(frozen=True)
class Settings:
    step_time: float
    checkpoint_every: int
    max_restarts: int
    recovery_timeout: float
    interval: float
    """Long run: seconds of training between two faults."""
    settle_steps: int = 5
    """Steps watched after a recovery (a late second group, the status catching up)."""


# -- manifests (pure) ----------------------------------------------------------------------------


def trainer_args(settings: Settings) -> list[str]:
    return [
        "train.py", "--steps", "1000000", "--step-time", str(settings.step_time),
        "--checkpoint-every", str(settings.checkpoint_every),
        "--checkpoint-dir", f"{MOUNT}/checkpoints",
        "--progress-file", f"{MOUNT}/progress.log",
    ]  # fmt: skip


def pod_spec(
    container: str, command: list[str], host_dir: Path, spread: dict[str, str]
) -> dict[str, Any]:
    """The worker pod spec both systems get: the training image, the shared volume, one
    worker per node (a hard spread over the nodes left; a lost node's taint is honoured)."""
    spec = {
        "terminationGracePeriodSeconds": 30,
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": HOSTNAME,
                "whenUnsatisfiable": "DoNotSchedule",
                "nodeTaintsPolicy": "Honor",
                "labelSelector": {"matchLabels": spread},
            }
        ],
        "containers": [
            {
                "name": container,
                "image": TRAINING_IMAGE,
                "imagePullPolicy": "Never",
                "command": command,
                "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                "volumeMounts": [{"name": "shared", "mountPath": MOUNT}],
            }
        ],
        "volumes": [{"name": "shared", "hostPath": {"path": str(host_dir), "type": "Directory"}}],
    }
    # Real nodes only (the hostPath is the host's there).
    return place(spec, REAL_NODE_PLACEMENT)


def pytorchjob_manifest(
    name: str, min_nodes: int, settings: Settings, host_dir: Path
) -> dict[str, Any]:
    spread = {
        "training.kubeflow.org/job-name": name,
        "training.kubeflow.org/replica-type": "worker",
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "elasticPolicy": {
                "rdzvBackend": "c10d",
                "minReplicas": min_nodes,
                "maxReplicas": NODES,
                "maxRestarts": settings.max_restarts,
            },
            "nprocPerNode": "1",
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": NODES,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "spec": pod_spec(
                            "pytorch", ["torchrun", *trainer_args(settings)], host_dir, spread
                        )
                    },
                }
            },
        },
    }


def elasticjob_manifest(
    name: str, min_nodes: int, spares: int, settings: Settings, host_dir: Path
) -> dict[str, Any]:
    spread = {"elasticjob.dev/job-name": name, "elasticjob.dev/role": "worker"}
    spec: dict[str, Any] = {
        "replicas": NODES,
        "minNodes": min_nodes,
        "maxNodes": NODES,
        "device": "cpu",
        "nprocPerNode": 1,
        "maxRestarts": settings.max_restarts,
        # As in the e2e tests: a BestEffort etcd starves on two loaded cores.
        "etcd": {"resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}},
        "template": {"spec": pod_spec("trainer", ["python", *trainer_args(settings)], host_dir,
                                      spread)},
    }  # fmt: skip
    if spares:
        spec["spares"] = spares
    return {
        "apiVersion": "elasticjob.dev/v1alpha1",
        "kind": "ElasticJob",
        "metadata": {"name": name},
        "spec": spec,
    }


def reached(progress: Callable[[], list[Progress]], step: int) -> Callable[[], bool]:
    """Whether the progress file shows ``step`` done."""
    return lambda: (last_step(progress()) or 0) >= step


def fault_target(done: int, checkpoint_every: int, warm: int) -> int:
    """The step after which to inject: at least ``warm`` steps past ``done``, half-way between
    two checkpoints (so every candidate loses the same steps if it restarts from one)."""
    half = checkpoint_every // 2
    step = done + warm
    return step + (half - step) % checkpoint_every


# -- the cluster ---------------------------------------------------------------------------------


@dataclass
class Bench:
    cluster: LocalCluster
    settings: Settings
    system_node: str
    worker_nodes: list[str]
    spares_supported: bool
    out: Callable[[str], None] = print
    runs: int = 0
    notes: list[str] = field(default_factory=list)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return self.cluster.kubectl(*args, input=input, check=check).stdout

    def get(self, *args: str) -> Any:
        return self.cluster.get_json(*args)

    # -- one run ---------------------------------------------------------------------------------

    def run(self, candidate: Candidate, shape: str, faults: Sequence[str]) -> list[dict[str, Any]]:
        """One job of ``candidate``/``shape`` under ``faults`` in sequence; one row per fault."""
        self.runs += 1
        name = f"{'pj' if candidate.kind == PEER else 'ej'}{candidate.spares}-{shape}-{self.runs}"
        host_dir = WORK_ROOT / f"{name}-{uuid.uuid4().hex[:6]}"
        host_dir.mkdir(parents=True)
        (host_dir / "checkpoints").mkdir()
        # The image runs as uid 10001; the host directory is the bench's (root's).
        host_dir.chmod(0o777)
        (host_dir / "checkpoints").chmod(0o777)
        progress_path = host_dir / "progress.log"
        label = f"{candidate.kind}/{shape}"
        min_nodes = SHAPES[shape]
        if candidate.kind == PEER:
            manifest = pytorchjob_manifest(name, min_nodes, self.settings, host_dir)
        else:
            manifest = elasticjob_manifest(
                name, min_nodes, candidate.spares, self.settings, host_dir
            )
        kind = manifest["kind"].lower()
        self.out(f"--> {label} spares={candidate.spares}: {kind} {name}, faults {','.join(faults)}")
        self.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=json.dumps(manifest))
        rows: list[dict[str, Any]] = []
        try:

            def progress() -> list[Progress]:
                try:
                    return parse_progress(progress_path.read_text())
                except FileNotFoundError:
                    return []

            self._wait(f"{name}: the first step", lambda: last_step(progress()) is not None, 600)
            measured: list[tuple[str, float, int | None]] = []  # fault, time, restarts before
            recoveries: list[Mapping[str, Any] | None] = []  # status.lastRecovery per fault
            end: float | None = None
            for index, fault in enumerate(faults):
                # Every fault hits a whole group (an elastic job may train on one node first).
                self._wait(
                    f"{name}: a group of {NODES} before {fault}",
                    lambda: self._full_group(candidate, name),
                    self.settings.recovery_timeout,
                )
                done = last_step(progress()) or 0
                warm = (
                    self.settings.checkpoint_every
                    if index == 0
                    else max(1, int(self.settings.interval / self.settings.step_time))
                )
                target = fault_target(done, self.settings.checkpoint_every, warm)
                self._wait(
                    f"{name}: step {target} before {fault}",
                    reached(progress, target),
                    self.settings.recovery_timeout + (target - done) * self.settings.step_time * 3,
                )
                before = self.restarts(candidate, name)
                at, victim_node = self.inject(candidate, name, fault)
                measured.append((fault, at, before))
                cost = self._await_recovery(progress, at)
                recoveries.append(
                    self.status_recovery(name, at)
                    if candidate.kind != PEER and cost.recovery_s is not None
                    else None
                )
                if fault == "node-loss" and victim_node:
                    self.cluster.restore_node(victim_node)
                    self._wait(
                        f"{victim_node} Ready again",
                        functools.partial(self._ready, victim_node),
                        240,
                    )
                if cost.recovery_s is None:
                    # Not back within the deadline: the run ends here (later faults skipped).
                    end = at + self.settings.recovery_timeout
                    break
            else:
                settle = (last_step(progress()) or 0) + self.settings.settle_steps
                self._wait(
                    f"{name}: {self.settings.settle_steps} steps after the last fault",
                    reached(progress, settle),
                    self.settings.recovery_timeout,
                )
            final = progress()
            run_goodput = goodput(final, step_time=self.settings.step_time, end=end)
            after = self.restarts(candidate, name)
            for i, (fault, at, before) in enumerate(measured):
                # Nothing after the deadline counts (a restored node may bring a job back).
                until = min(
                    measured[i + 1][1] if i + 1 < len(measured) else time.time(),
                    at + self.settings.recovery_timeout,
                )
                cost = fault_cost(final, at, until=until)
                upto = measured[i + 1][2] if i + 1 < len(measured) else after
                reported = None if upto is None or before is None else upto - before
                fault_name = fault if len(faults) == 1 else f"long:{fault}"
                rows.append(row(label, candidate.spares, fault_name, cost, reported, run_goodput))
                rows[-1]["_groups"] = cost.groups
                rows[-1]["_note"] = (
                    ""
                    if cost.recovery_s is not None
                    else f"not back within {self.settings.recovery_timeout:.0f} s"
                )
                if candidate.kind != PEER:
                    rows[-1].update(status_columns(cost, recoveries[i]))
                    parts = (status_note(rows[-1]), rows[-1]["_note"])
                    rows[-1]["_note"] = "; ".join(p for p in parts if p)
            for fault in faults[len(measured) :]:
                rows.append(row(label, candidate.spares, f"long:{fault}", None, None, run_goodput))
                rows[-1]["_note"] = "not injected: the job never came back from the one before"
            return rows
        finally:
            self.cleanup(kind, name, host_dir)

    def status_recovery(self, name: str, at: float) -> Mapping[str, Any] | None:
        """The job's ``status.lastRecovery`` of the fault at ``at`` (its ``faultAt`` no
        earlier than ``STATUS_SKEW`` before it), read until it shows or ``STATUS_WAIT`` passes."""
        deadline = time.monotonic() + STATUS_WAIT
        while True:
            job = self.get("elasticjob", name, "-n", NAMESPACE)
            last = (job.get("status") or {}).get("lastRecovery")
            if isinstance(last, Mapping):
                fault_at = last.get("faultAt")
                if isinstance(fault_at, int | float) and fault_at >= at - STATUS_SKEW:
                    return dict(last)
            if time.monotonic() > deadline:
                return None
            time.sleep(1)

    def _await_recovery(self, progress: Callable[[], list[Progress]], at: float) -> FaultCost:
        """Until the group after the fault did ``settle_steps`` steps, or the deadline."""
        deadline = at + self.settings.recovery_timeout
        quiet = self.settings.settle_steps * self.settings.step_time
        while time.time() < deadline:
            now = time.time()
            cost = fault_cost(progress(), at, until=now)
            # Back: a new group trains, or the old one trained on (then wait a little for a
            # late restart before calling it so).
            if cost.recovery_s is not None and (
                cost.groups or now - at > cost.recovery_s + quiet + 30
            ):
                target = (last_step(progress()) or 0) + self.settings.settle_steps
                settle_by = time.monotonic() + max(30.0, deadline - time.time())
                while not reached(progress, target)() and time.monotonic() < settle_by:
                    time.sleep(0.5)
                return fault_cost(progress(), at, until=time.time())
            time.sleep(0.5)
        return fault_cost(progress(), at, until=deadline)

    def _wait(self, what: str, predicate: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                pods = self.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide", check=False)
                raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}\n{pods}")
            time.sleep(0.5)

    def _ready(self, node: str) -> bool:
        conditions = self.get("node", node).get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    # -- faults ------------------------------------------------------------------------------

    def pods(self, selector: str) -> list[dict[str, Any]]:
        items = self.get("pods", "-n", NAMESPACE, "-l", selector)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def roles(self, candidate: Candidate, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The store's pod and the worker pods in the group (not spares)."""
        if candidate.kind == PEER:
            workers = self.pods(f"training.kubeflow.org/job-name={name}")
            store = [
                p for p in workers
                if p["metadata"]["labels"].get("training.kubeflow.org/replica-index") == "0"
            ]  # fmt: skip
            in_group = workers
        else:
            store = self.pods(f"elasticjob.dev/job-name={name},elasticjob.dev/role=etcd")
            workers = self.pods(f"elasticjob.dev/job-name={name},elasticjob.dev/role=worker")
            # A spare never started training: its log has no start line.
            in_group = [
                p for p in workers
                if "start step=" in self.cluster.pod_logs(NAMESPACE, p["metadata"]["name"])
            ]  # fmt: skip
        if len(store) != 1:
            raise BenchError(f"{name}: expected one store pod, found {len(store)}")
        return store[0], in_group

    def _full_group(self, candidate: Candidate, name: str) -> bool:
        """Whether every worker's last group start says ``world_size=NODES``."""
        try:
            _store, workers = self.roles(candidate, name)
        except BenchError:
            return False
        if len(workers) < NODES:
            return False
        for pod in workers:
            log = self.cluster.pod_logs(NAMESPACE, pod["metadata"]["name"])
            sizes = re.findall(r"start step=\d+ rank=\d+ world_size=(\d+)", log)
            if not sizes or int(sizes[-1]) != NODES:
                return False
        return True

    def victim(self, candidate: Candidate, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """A worker of the group on a node without the store: (store pod, victim pod)."""
        store, workers = self.roles(candidate, name)
        store_node = store["spec"].get("nodeName")
        choices = [
            p for p in workers
            if p["metadata"]["name"] != store["metadata"]["name"]
            and p["spec"].get("nodeName") not in (store_node, self.system_node)
        ]  # fmt: skip
        if not choices:
            where = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in workers}
            raise BenchError(f"{name}: no worker away from the store on {store_node}: {where}")
        return store, sorted(choices, key=lambda p: str(p["metadata"]["name"]))[-1]

    def inject(self, candidate: Candidate, name: str, fault: str) -> tuple[float, str | None]:
        """Inject ``fault``; returns its time (unix seconds) and the lost node, if any."""
        store, victim = self.victim(candidate, name)
        pod = str(victim["metadata"]["name"])
        node = str(victim["spec"]["nodeName"])
        if fault == "process-kill":
            done = self.cluster.exec_in_pod(
                NAMESPACE, pod, ["python", "-c", KILL_WORKER], check=True
            )
            at = float(done.stdout.split()[0])
            self.out(f"    {fault}: training process {done.stdout.split()[1]} in {pod}")
            return at, None
        at = time.time()
        if fault == "pod-delete":
            self.kubectl("delete", "pod", pod, "-n", NAMESPACE, "--wait=false")
            self.out(f"    {fault}: {pod}")
            return at, None
        if fault == "node-loss":
            self.cluster.lose_node(node)
            self.out(f"    {fault}: {node} (ran {pod})")
            return at, node
        if fault == "store-loss":
            self.cluster.kill_container(NAMESPACE, str(store["metadata"]["name"]))
            self.out(f"    {fault}: {store['metadata']['name']} on {store['spec']['nodeName']}")
            return at, None
        raise BenchError(f"unknown fault {fault!r}")

    def restarts(self, candidate: Candidate, name: str) -> int | None:
        """The restarts the system reports for the job so far."""
        if candidate.kind == PEER:
            job = self.get("pytorchjob", name, "-n", NAMESPACE)
            events = self.get(
                "events", "-n", NAMESPACE, "--field-selector",
                f"involvedObject.uid={job['metadata']['uid']},reason=PyTorchJobRestarting",
            )["items"]  # fmt: skip
            return sum(int(e.get("count") or 1) for e in events)
        job = self.get("elasticjob", name, "-n", NAMESPACE)
        total = ((job.get("status") or {}).get("restarts") or {}).get("total")
        return None if total is None else int(total)

    def cleanup(self, kind: str, name: str, host_dir: Path) -> None:
        self.kubectl("delete", kind, name, "-n", NAMESPACE, "--wait=true", "--timeout=120s",
                     check=False)  # fmt: skip
        for node in self.worker_nodes:
            if not self._ready(node):
                self.cluster.restore_node(node)
        deadline = time.monotonic() + 120
        while self.get("pods", "-n", NAMESPACE)["items"] and time.monotonic() < deadline:
            time.sleep(1)
        # Pods a lost node never confirmed gone: nothing of them runs any more.
        self.kubectl("delete", "pods", "--all", "-n", NAMESPACE, "--force", "--grace-period=0",
                     check=False)  # fmt: skip
        shutil.rmtree(host_dir, ignore_errors=True)


def _step(out: Callable[[str], None], what: str, argv: list[str]) -> None:
    began = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchError(f"{what} failed:\n{done.stderr[-4000:]}")
    out(f"    {what}: {time.monotonic() - began:.0f} s")


def set_up(args: argparse.Namespace, out: Callable[[str], None]) -> tuple[LocalCluster, str, bool]:
    """Build what is missing (Kubernetes, images, the peer: each cached), start a cluster of
    real nodes only (or connect to ``ELASTICJOB_BENCH_CLUSTER``), and taint one real node for
    the two operators. Returns the cluster, that node, and whether the cluster is ours."""
    reuse = os.environ.get("ELASTICJOB_BENCH_CLUSTER")
    out("==> builds (cached when done)")
    if reuse is None:
        _step(out, "localcluster/build.sh", [str(REPO / "localcluster" / "build.sh")])
        _step(
            out,
            "localcluster/images/build.sh",
            [str(REPO / "localcluster" / "images" / "build.sh")],
        )
    _step(
        out,
        "localcluster/kubeflow/build.sh",
        [str(REPO / "localcluster" / "kubeflow" / "build.sh")],
    )
    if reuse is not None:
        found = connect(ClusterConfig(name=reuse))
        if found is None:
            raise BenchError(f"ELASTICJOB_BENCH_CLUSTER={reuse}: no such cluster is running")
        cluster = found
        out(f"==> cluster {reuse} (running; left running)")
    else:
        config = ClusterConfig(name=f"goodput-{os.getpid()}", nodes=0, real_nodes=args.real_nodes)
        out(f"==> cluster {config.name}: {args.real_nodes} real nodes")
        began = time.monotonic()
        cluster = start_cluster(config, owned=True)
        out(f"    up in {time.monotonic() - began:.0f} s")
    if len(cluster.real_nodes) < 4:
        raise BenchError(
            f"cluster {cluster.config.name}: {len(cluster.real_nodes)} real nodes, 4 needed"
        )
    system = sorted(cluster.real_nodes)[0]
    cluster.kubectl("taint", "node", system, f"{SYSTEM_TAINT}=true:NoSchedule", "--overwrite")
    return cluster, system, reuse is None


def tear_down(cluster: LocalCluster, system: str, own: bool) -> None:
    """Stop our cluster; or leave a reused one as it was found."""
    if own:
        cluster.stop()
        shutil.rmtree(cluster.config.state_dir, ignore_errors=True)
        return
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
    cluster.helm("uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait", check=False)
    cluster.kubectl("delete", "namespace", OPERATOR_NAMESPACE, "--wait=false", check=False)
    cluster.kubectl("taint", "node", system, f"{SYSTEM_TAINT}-", check=False)


def install_operators(cluster: LocalCluster, system: str, out: Callable[[str], None]) -> None:
    placement = {
        "nodeSelector": {HOSTNAME: system},
        "tolerations": [
            {"key": SYSTEM_TAINT, "operator": "Exists", "effect": "NoSchedule"},
        ],
    }
    values = cluster.config.state_dir / "goodput-values.json"
    values.write_text(json.dumps(placement))
    out(f"==> helm install {RELEASE} (operator on {system})")
    cluster.helm(
        "install", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE, "--create-namespace",
        "--values", str(values), "--wait", "--timeout", "5m",
    )  # fmt: skip
    cluster.kubectl("create", "namespace", NAMESPACE)


def spares_supported(cluster: LocalCluster) -> bool:
    crd = cluster.get_json("crd", "elasticjobs.elasticjob.dev")
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        if "spares" in (spec.get("properties") or {}):
            return True
    return False


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help=f"comma-separated, from {','.join(FAULTS)} (default: all)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per candidate and fault")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument(
        "--long-run",
        action="store_true",
        help="instead of one job per fault: one job per candidate under every fault in turn",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=60.0,
        help="long run: seconds of training between faults (default 60)",
    )
    parser.add_argument("--shapes", default="fixed,elastic", help="fixed, elastic or both")
    parser.add_argument(
        "--candidates",
        default=",".join(CANDIDATE_NAMES),
        help=f"comma-separated, from {','.join(CANDIDATE_NAMES)} (default: all)",
    )
    parser.add_argument("--step-time", type=float, default=0.5)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--max-restarts", type=int, default=10)
    parser.add_argument("--recovery-timeout", type=float, default=240.0,
                        help="seconds a candidate gets to train again after a fault")  # fmt: skip
    parser.add_argument("--real-nodes", type=int, default=4,
                        help="1 for the operators, the rest for workers (>= 4)")  # fmt: skip
    args = parser.parse_args(argv)
    faults = [f for f in args.faults.split(",") if f]
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown or not faults:
        parser.error(f"--faults: unknown {unknown}; choose from {','.join(FAULTS)}")
    args.faults = faults
    shapes = [s for s in args.shapes.split(",") if s]
    if not shapes or set(shapes) - set(SHAPES):
        parser.error(f"--shapes: choose from {','.join(SHAPES)}")
    args.shapes = shapes
    names = [c for c in args.candidates.split(",") if c]
    if not names or set(names) - set(CANDIDATE_NAMES):
        parser.error(f"--candidates: choose from {','.join(CANDIDATE_NAMES)}")
    args.candidates = [CANDIDATE_NAMES[n] for n in names]
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    if args.real_nodes < 4:
        parser.error("--real-nodes: at least 4 (operators, 2 workers, a place for a replacement)")
    if args.step_time <= 0 or args.checkpoint_every < 2:
        parser.error("--step-time must be > 0 and --checkpoint-every >= 2")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def out(line: str) -> None:
        print(line, flush=True)

    settings = Settings(
        step_time=args.step_time,
        checkpoint_every=args.checkpoint_every,
        max_restarts=args.max_restarts,
        recovery_timeout=args.recovery_timeout,
        interval=args.interval,
    )
    began = time.time()
    cluster, system, own = set_up(args, out)
    kubernetes = str(cluster.info.get("version"))
    rows: list[dict[str, Any]] = []
    try:
        install_operators(cluster, system, out)
        with TrainingOperator.for_cluster(cluster):
            out(f"==> Kubeflow training operator {KUBEFLOW_VERSION} running")
            bench = Bench(
                cluster=cluster,
                settings=settings,
                system_node=system,
                worker_nodes=[n for n in sorted(cluster.real_nodes) if n != system],
                spares_supported=spares_supported(cluster),
                out=out,
            )
            schedule = [args.faults] if args.long_run else [[f] for f in args.faults]
            for faults in schedule:
                for shape in args.shapes:
                    for candidate in args.candidates:
                        for _ in range(args.repeat):
                            if candidate.spares and not bench.spares_supported:
                                for fault in faults:
                                    name = fault if len(faults) == 1 else f"long:{fault}"
                                    r = row(f"{candidate.kind}/{shape}", candidate.spares, name,
                                            None, None, None)  # fmt: skip
                                    r["_note"] = "not measured: no spec.spares in this CRD"
                                    rows.append(r)
                                continue
                            try:
                                measured = bench.run(candidate, shape, faults)
                                rows.extend(measured)
                                for r in measured:
                                    out(f"    {json.dumps(r)}")
                            except (BenchError, ClusterError, TimeoutError) as err:
                                out(f"    not measured: {err}")
                                for fault in faults:
                                    name = fault if len(faults) == 1 else f"long:{fault}"
                                    r = row(f"{candidate.kind}/{shape}", candidate.spares, name,
                                            None, None, None)  # fmt: skip
                                    r["_note"] = f"run failed: {str(err).splitlines()[0][:80]}"
                                    rows.append(r)
    finally:
        tear_down(cluster, system, own)
    for r in rows:
        for key in STATUS_KEYS:
            r.setdefault(key, None)
    public = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
    print()
    print(
        table(
            public,
            peer=PEER,
            groups={i: r["_groups"] for i, r in enumerate(rows) if "_groups" in r},
            notes={i: r["_note"] for i, r in enumerate(rows) if r.get("_note")},
        )
    )
    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(began))}; step time "
        f"{settings.step_time} s, checkpoint every {settings.checkpoint_every} steps, "
        f"recovery deadline {settings.recovery_timeout:.0f} s; Kubernetes {kubernetes}, "
        f"Kubeflow training operator {KUBEFLOW_VERSION}, {TRAINING_IMAGE}; "
        f"{time.time() - began:.0f} s in all"
    )
    if args.json:
        args.json.write_text(json.dumps({"rows": public}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
