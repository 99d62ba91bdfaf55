"""The diagnosis benchmark's pure part: which faults, what each should be diagnosed as, how a
job's ``status.lastFailure`` is judged, the job each fault runs in and the rows' table.

``diagnosis_bench.py`` does the cluster I/O: it starts each job, injects the fault, reads the
status; nothing here talks to a cluster or reads the clock.

A fault hits the *victim*: the worker pod on the node that hosts neither the operator nor the
job's etcd (``Placement``), or, for a fault of every rank, every worker pod, or the job's etcd.
``expected`` names the kind of cause and where; a status is ``correct`` only when its
``lastFailure`` names that kind (and, for a rank's own failure, how it ended) and the pod and
its node.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

ROW_KEYS = ("fault", "expected", "reported", "correct", "recovery_s")
"""The keys of a ``--json`` row (the contract)."""


class Target(StrEnum):
    """Where a fault hits."""

    VICTIM = "victim"
    """One worker pod (its rank, its container, the pod itself)."""
    EVERY_RANK = "every-rank"
    """Every worker pod at once (any of them is the cause)."""
    NODE = "node"
    """The victim's node."""
    ETCD = "etcd"
    """The job's managed etcd pod."""


class Injection(StrEnum):
    """How the bench injects a fault (``diagnosis_bench.Bench.inject``)."""

    KILL_RANK = "kill-rank"
    """SIGKILL the training process (``kubectl exec``)."""
    FAIL_AT_STEP = "fail-at-step"
    """``train.py --fail-at-step``: the rank raises ``RuntimeError`` (nothing to do)."""
    TRIGGER = "trigger"
    """Signal the training process through the bench's wrapper (``TRIGGER_WRAPPER``)."""
    OOM = "oom"
    """Fill the container's memory limit (``kubectl exec`` of ``OOM_HOG``)."""
    DELETE_POD = "delete-pod"
    EVICT_POD = "evict-pod"
    """The Eviction API (``pods/eviction``), as ``kubectl drain`` does."""
    LOSE_NODE = "lose-node"
    """Every process of the node SIGKILLed (``LocalCluster.lose_node``)."""
    KILL_ETCD = "kill-etcd"
    """The etcd container SIGKILLed through containerd."""
    AT_START = "at-start"
    """The job is broken as written (its command, its image): nothing to do."""


@dataclass(frozen=True)
class Fault:
    name: str
    what: str
    """One line for the table's legend."""
    kind: str
    """The ``lastFailure.kind`` it should be diagnosed as."""
    target: Target
    injection: Injection
    detail: Mapping[str, Any] = field(default_factory=dict)
    """``lastFailure`` fields a rank's own failure must show too (``signal``, ``exitCode``,
    ``exceptionType``)."""
    trigger: str | None = None
    """``TRIGGER_WRAPPER``'s action: ``raise``, ``exit N`` or ``hang``."""
    recovers: bool = True
    """Whether the job trains again after it (a broken command or image does not)."""


EXIT_CODE = 3
"""The code ``sys.exit`` is called with."""
FAIL_AT_STEP = 12
"""The step at which ``train.py --fail-at-step`` makes rank 1 raise."""
INJECTED = "injected failure at step"
"""What ``train.py``'s injected ``RuntimeError`` says (its log names the pod it ran in)."""

FAULTS: tuple[Fault, ...] = (
    Fault(
        "sigkill-rank",
        "one rank's process SIGKILLed inside its pod",
        "WorkerFailed",
        Target.VICTIM,
        Injection.KILL_RANK,
        {"signal": "SIGKILL"},
    ),
    Fault(
        "exception-rank",
        f"rank 1 raises RuntimeError (train.py --fail-at-step {FAIL_AT_STEP} --fail-rank 1)",
        "WorkerFailed",
        Target.VICTIM,
        Injection.FAIL_AT_STEP,
        {"exceptionType": "RuntimeError"},
    ),
    Fault(
        "exit-rank",
        f"one rank calls sys.exit({EXIT_CODE})",
        "WorkerFailed",
        Target.VICTIM,
        Injection.TRIGGER,
        {"exitCode": EXIT_CODE},
        trigger=f"exit {EXIT_CODE}",
    ),
    Fault(
        "exception-every-rank",
        "every rank raises RuntimeError at once",
        "WorkerFailed",
        Target.EVERY_RANK,
        Injection.TRIGGER,
        {"exceptionType": "RuntimeError"},
        trigger="raise",
    ),
    Fault(
        "oom-killed",
        "the container fills its memory limit; the kubelet says OOMKilled",
        "OOMKilled",
        Target.VICTIM,
        Injection.OOM,
    ),
    Fault(
        "node-lost",
        "every process of the victim's node SIGKILLed (kubelet, containerd, containers)",
        "NodeLost",
        Target.NODE,
        Injection.LOSE_NODE,
    ),
    Fault(
        "pod-deleted",
        "kubectl delete pod (graceful)",
        "PodDeleted",
        Target.VICTIM,
        Injection.DELETE_POD,
    ),
    Fault(
        "pod-evicted",
        "the Eviction API (as kubectl drain)",
        "PodEvicted",
        Target.VICTIM,
        Injection.EVICT_POD,
    ),
    Fault(
        "etcd-lost",
        "the managed etcd's container SIGKILLed",
        "EtcdLost",
        Target.ETCD,
        Injection.KILL_ETCD,
    ),
    Fault(
        "hang",
        "every rank stops making progress (spec.progressTimeoutSeconds)",
        "WorkerFailed",
        Target.EVERY_RANK,
        Injection.TRIGGER,
        trigger="hang",
    ),
    Fault(
        "missing-script",
        "the command names a script that does not exist",
        "WorkerFailed",
        Target.EVERY_RANK,
        Injection.AT_START,
        recovers=False,
    ),
    Fault(
        "image-not-pulled",
        "the image cannot be pulled",
        "ImageNotPulled",
        Target.EVERY_RANK,
        Injection.AT_START,
        recovers=False,
    ),
)
BY_NAME = {f.name: f for f in FAULTS}


@dataclass(frozen=True)
class Placement:
    """Where the job's pods run when the fault is injected."""

    workers: Mapping[str, str]
    """Worker pod -> its node."""
    victim: str | None
    """The worker pod the fault hits (on a node without the operator and the etcd)."""
    etcd: tuple[str, str] | None = None
    """The managed etcd's pod and node."""


@dataclass(frozen=True)
class Expected:
    """What ``lastFailure`` should say: ``kind`` and ``detail``, of one of ``pods`` (each with
    the node it ran on)."""

    kind: str
    pods: Mapping[str, str]
    """Pod -> node: any of them is right (one for a fault of one pod)."""
    detail: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        how = "".join(f" {k}={v}" for k, v in sorted(self.detail.items()))
        where = " or ".join(f"pod {p} (node {n})" for p, n in sorted(self.pods.items()))
        return f"{self.kind}{how} on {where}"


def expected(fault: Fault, placement: Placement, *, culprit: str | None = None) -> Expected:
    """What ``fault`` should be diagnosed as, given where the pods were; ``culprit``: the pod
    that ran the failing rank, when only its log tells (``--fail-at-step``). Raise
    ``ValueError`` when the placement lacks what the fault needs."""
    if fault.target is Target.ETCD:
        if placement.etcd is None:
            raise ValueError(f"{fault.name}: no managed etcd pod")
        pod, node = placement.etcd
        return Expected(fault.kind, {pod: node}, fault.detail)
    if fault.target is Target.EVERY_RANK:
        if not placement.workers:
            raise ValueError(f"{fault.name}: no worker pods")
        return Expected(fault.kind, dict(placement.workers), fault.detail)
    victim = culprit if culprit is not None else placement.victim
    if victim is None or victim not in placement.workers:
        raise ValueError(f"{fault.name}: victim {victim!r} is not a worker pod")
    return Expected(fault.kind, {victim: placement.workers[victim]}, fault.detail)


def reported(last_failure: Mapping[str, Any] | None) -> str:
    """``lastFailure`` as one line: kind, how, pod and node (what ``judge`` compares)."""
    if not last_failure:
        return "nothing (no lastFailure)"
    kind = last_failure.get("kind") or "?"
    how = "".join(
        f" {k}={last_failure[k]}"
        for k in ("signal", "exitCode", "exceptionType")
        if last_failure.get(k) is not None
    )
    return f"{kind}{how} on pod {last_failure.get('pod')} (node {last_failure.get('node')})"


def judge(want: Expected, last_failure: Mapping[str, Any] | None) -> bool:
    """Whether ``last_failure`` names the expected kind (and detail) and one of the expected
    pods with the node it ran on."""
    if not last_failure or last_failure.get("kind") != want.kind:
        return False
    if any(last_failure.get(k) != v for k, v in want.detail.items()):
        return False
    pod = last_failure.get("pod")
    return isinstance(pod, str) and pod in want.pods and last_failure.get("node") == want.pods[pod]


def row(fault: Fault, want: Expected | None, status: Mapping[str, Any] | None,
        recovery_s: float | None) -> dict[str, Any]:  # fmt: skip
    """One ``--json`` row; ``want`` ``None``: the fault could not be set up (not correct)."""
    last = (status or {}).get("lastFailure")
    return {
        "fault": fault.name,
        "expected": "not set up" if want is None else want.describe(),
        "reported": reported(last),
        "correct": want is not None and judge(want, last),
        "recovery_s": None if recovery_s is None else round(recovery_s, 1),
    }


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as a Markdown table, with the count of correct rows."""
    lines = [
        "| fault | expected | reported (status.lastFailure) | correct | recovery s |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        recovery = "-" if r["recovery_s"] is None else f"{r['recovery_s']:.1f}"
        lines.append(
            f"| {r['fault']} | {r['expected']} | {r['reported']} | "
            f"{'yes' if r['correct'] else 'NO'} | {recovery} |"
        )
    good = sum(1 for r in rows if r["correct"])
    lines.append(f"\n{good} of {len(rows)} faults diagnosed correctly")
    return "\n".join(lines)


def select(names: str) -> list[Fault]:
    """The faults a ``--faults`` value names (comma-separated; ``all``: every one)."""
    if names == "all":
        return list(FAULTS)
    chosen = [n for n in names.split(",") if n]
    unknown = sorted(set(chosen) - set(BY_NAME))
    if unknown or not chosen:
        raise ValueError(f"unknown faults {unknown}; choose from {','.join(BY_NAME)} or all")
    return [BY_NAME[n] for n in chosen]


# -- the job each fault runs in (pure builders) ---------------------------------------------------

#: Runs train.py as the worker, and on SIGUSR1 does what the file /tmp/elasticjob-fault says:
#: ``raise`` (a RuntimeError in the main thread, recorded by train.py's @record), ``exit N``
#: (sys.exit(N): no error file, only the exit code) or ``hang`` (the main thread sleeps for
#: ever). A wrapper, not a flag of train.py: the fault comes from outside the training script.
TRIGGER_WRAPPER = """
import runpy, signal, sys, time
def fault(signum, frame):
    try:
        with open('/tmp/elasticjob-fault') as f:
            what = f.read().split()
    except OSError:
        return
    if what[:1] == ['raise']:
        raise RuntimeError('injected by the diagnosis bench')
    if what[:1] == ['exit']:
        sys.exit(int(what[1]))
    if what[:1] == ['hang']:
        while True:
            time.sleep(3600)
signal.signal(signal.SIGUSR1, fault)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
"""

#: The live training processes of this pod, from its agent's /status (on the pod's loopback).
_WORKER_PIDS = """
import json, os, signal, sys, time, urllib.request
with urllib.request.urlopen('http://127.0.0.1:29401/status', timeout=5) as r:
    pids = [w['pid'] for w in json.load(r).get('workers') or []
            if w.get('pid') and w.get('exitCode') is None]
if not pids:
    raise SystemExit('no training process in this pod')
"""

#: SIGKILL the pod's first training process; prints the time.
KILL_RANK = (
    _WORKER_PIDS
    + """
at = time.time()
os.kill(pids[0], signal.SIGKILL)
print(at)
"""
)

#: Tell the pod's training processes what to do (argv[1]) and signal them; prints the time.
TRIGGER = (
    _WORKER_PIDS
    + """
with open('/tmp/elasticjob-fault', 'w') as f:
    f.write(sys.argv[1])
at = time.time()
for pid in pids:
    os.kill(pid, signal.SIGUSR1)
print(at)
"""
)

#: Make the container's init (the agent) the OOM killer's choice, then fill the memory limit:
#: the kernel kills the init, so the container ends and the kubelet says OOMKilled.
OOM_HOG = """
import time
with open('/proc/1/oom_score_adj', 'w') as f:
    f.write('1000')
print(time.time(), flush=True)
hog = []
while True:
    hog.append(b'x' * (32 << 20))
"""

MEMORY_LIMIT = "1536Mi"
"""The containers' memory limit (the OOM fault fills it)."""
PROGRESS_TIMEOUT_SECONDS = 20
"""``spec.progressTimeoutSeconds`` of every job (the hang fault needs one)."""
MISSING_IMAGE = "127.0.0.1:1/elasticjob/no-such-image:0"
"""An image no registry serves (the port refuses at once)."""
HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True)
class JobShape:
    """What every fault's job shares."""

    image: str
    step_time: float = 0.5
    checkpoint_every: int = 10
    max_restarts: int = 3
    mount: str = "/shared"
    """Where the shared host directory (checkpoints, progress file) is mounted."""


def job_manifest(
    name: str, fault: Fault, shape: JobShape, *, host_dir: str, keep: str
) -> dict[str, Any]:
    """The ElasticJob ``fault`` runs in: 2 nodes x 1 process of the training image's train.py,
    one worker per node (a hard spread that ignores a lost, tainted node), the rest of the job
    (its etcd copies the template's affinity) preferably on ``keep``, the node of the operator;
    checkpoints and rank 0's progress file on ``host_dir``, a host directory every real node
    shares."""
    args = [
        "--steps", "1000000", "--step-time", str(shape.step_time),
        "--checkpoint-every", str(shape.checkpoint_every),
        "--checkpoint-dir", f"{shape.mount}/checkpoints",
        "--progress-file", f"{shape.mount}/progress.log",
    ]  # fmt: skip
    command = ["python", "train.py"]
    image = shape.image
    if fault.injection is Injection.FAIL_AT_STEP:
        args += ["--fail-at-step", str(FAIL_AT_STEP), "--fail-rank", "1", "--fail-times", "1"]
    elif fault.injection is Injection.TRIGGER:
        command = ["python", "-c", TRIGGER_WRAPPER, "train.py"]
    elif fault.name == "missing-script":
        command = ["python", "no-such-script.py"]
    elif fault.name == "image-not-pulled":
        image = MISSING_IMAGE
    spread = {"elasticjob.dev/job-name": name, "elasticjob.dev/role": "worker"}
    pod_spec = {
        "terminationGracePeriodSeconds": 30,
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            "matchExpressions": [
                                {"key": HOSTNAME, "operator": "In", "values": [keep]}
                            ]
                        },
                    }
                ]
            }
        },
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
                "name": "trainer",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": command,
                "args": args,
                "resources": {
                    "requests": {"cpu": "250m", "memory": "512Mi"},
                    "limits": {"memory": MEMORY_LIMIT},
                },
                "volumeMounts": [{"name": "shared", "mountPath": shape.mount}],
            }
        ],
        "volumes": [{"name": "shared", "hostPath": {"path": host_dir, "type": "Directory"}}],
    }
    return {
        "apiVersion": "elasticjob.dev/v1alpha1",
        "kind": "ElasticJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "minNodes": 2,
            "maxNodes": 2,
            "device": "cpu",
            "nprocPerNode": 1,
            "maxRestarts": 1 if not fault.recovers else shape.max_restarts,
            "progressTimeoutSeconds": PROGRESS_TIMEOUT_SECONDS,
            "rendezvous": {"lastCallTimeoutSeconds": 2},
            # As in the e2e tests: a BestEffort etcd starves on two loaded cores.
            "etcd": {"resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}},
            "template": {"spec": pod_spec},
        },
    }


def eviction(namespace: str, pod: str) -> str:
    """The body of a ``pods/eviction`` request."""
    return json.dumps(
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
    )
