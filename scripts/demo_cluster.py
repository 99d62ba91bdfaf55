"""The cluster demo: install the chart, run an ElasticJob, break it twice, watch it succeed.

Everything after the local cluster is up (``make cluster-up``), on its real nodes (kubelet,
containerd, runc: the operator from its image, the job on the training image, the managed etcd
on the etcd image):

1. ``helm upgrade --install`` the operator chart with default values and wait for it (the real
   nodes are the cluster's ordinary nodes: everything lands there);
2. ``kubectl apply`` the job (``examples/elasticjob.yaml`` by default, as it is but for a longer
   ``--steps``);
3. print one line per change of the job's phase, nodes, round, world size, restarts or stall;
4. once it trains, SIGKILL one training process of one worker pod through ``kubectl exec`` (a
   failure: spends one restart; the pod and its agent stay, the agent restarts the group);
5. once it trains again, lose the node of one worker (every process of that real node killed
   at once, its memory and disk gone with it): the operator replaces the lost pod, and the new
   pod resumes from the last checkpoint, which it receives from the other node's agent (the
   example's ``spec.checkpoint``: no shared storage); the node comes back afterwards;
6. cut the managed etcd pod off the network (an outage: the operator marks the job
   ``Stalled``/``EtcdUnavailable``, remediates, and the group re-forms for free);
7. wait for ``Succeeded`` and print a summary: timeline, restarts by reason, Events.

The job is placed so the lost node holds one worker and neither the operator nor the managed
etcd (a hard spread of one worker per node; everything else prefers the operator's node).

The same ``Scenario`` drives the end-to-end observability test, which passes a callback that keeps
Prometheus' scrape targets in step with the pods.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml
from elasticjob_agent.protocol.health import DEFAULT_HEALTH_PORT

if TYPE_CHECKING:
    from elasticjob_localcluster import LocalCluster

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "elasticjob-operator"
RELEASE = "elasticjob"
OPERATOR_NAMESPACE = "elasticjob-system"

JOB_LABEL = "elasticjob.dev/job-name"
ROLE_LABEL = "elasticjob.dev/role"
HOSTNAME_LABEL = "kubernetes.io/hostname"
CHECKPOINTED = re.compile(r"checkpoint step=(\d+)")
RESUMED = re.compile(r"resumed from step=(\d+) rank=(\d+)(?: source=(\w+))?")

KILL_ONE_WORKER = """
import json, os, signal, sys, time, urllib.request
deadline = time.monotonic() + {timeout}
while True:
    try:
        with urllib.request.urlopen("http://127.0.0.1:{port}/status", timeout=5) as response:
            workers = json.load(response).get("workers") or []
        pids = [w["pid"] for w in workers if w.get("pid") and w.get("exitCode") is None]
    except (OSError, ValueError):  # the agent is not serving yet
        pids = []
    if pids:
        os.kill(pids[0], signal.SIGKILL)
        print(pids[0])
        sys.exit(0)
    if time.monotonic() > deadline:
        sys.exit("its agent reported no running worker within {timeout} s")
    time.sleep(1)
"""
"""Run inside a worker pod (``kubectl exec``): ask the pod's own agent which workers run (its
``/status`` on the pod's loopback, which the job's NetworkPolicy does not govern) and SIGKILL
one. Prints the pid (as the pod sees it)."""


def with_steps(args: Sequence[str], steps: int) -> list[str]:
    """``args`` with ``--steps N`` (or ``--steps=N``) set to ``steps``, appended if absent."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--steps":
            skip = True
            continue
        if arg.startswith("--steps="):
            continue
        out.append(str(arg))
    return [*out, "--steps", str(steps)]


_EVIDENCE = ("event=", "checkpoint:", "rendezvous")
"""Agent log lines worth keeping from a pod's whole life in a failure's diagnostics."""


class DemoError(RuntimeError):
    """The demo could not go on; the message says what was expected and what was seen."""


class ClusterOps(Protocol):
    """What the scenario needs from a cluster: the e2e fixture provides exactly this."""

    def kubectl(self, *args: str) -> str: ...

    def helm(self, *args: str) -> str: ...

    def kill_training_process(self, namespace: str, pod: str) -> int:
        """SIGKILL one training process the pod's agent supervises; return its pid."""
        ...

    def cut_pod(self, namespace: str, pod: str) -> None: ...

    def restore_pod(self, namespace: str, pod: str) -> None: ...

    def lose_node(self, node: str) -> None:
        """Kill every process of a real node at once (its pods' memory goes with it)."""
        ...

    def restore_node(self, node: str) -> None: ...

    def pod_logs(self, namespace: str, pod: str) -> str: ...


@dataclass(frozen=True)
class PodView:
    name: str
    role: str
    phase: str
    ip: str | None
    node: str | None = None


@dataclass(frozen=True)
class JobView:
    """The parts of an ElasticJob's status the demo shows."""

    phase: str
    desired: int
    ready: int
    waiting: int
    round: int
    world_size: int
    restarts: dict[str, int]
    stalled: str | None
    """The Stalled condition's reason while it is True."""

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> JobView:
        status = obj.get("status") or {}
        stalled = None
        for cond in status.get("conditions") or []:
            if cond.get("type") == "Stalled" and cond.get("status") == "True":
                stalled = str(cond.get("reason") or "Unknown")
        by_reason = (status.get("restarts") or {}).get("byReason") or {}
        return cls(
            phase=str(status.get("phase") or "Pending"),
            desired=int(obj.get("spec", {}).get("replicas") or 0),
            ready=int(status.get("readyNodes") or 0),
            waiting=int(status.get("waitingNodes") or 0),
            round=int(status.get("round") or 0),
            world_size=int(status.get("worldSize") or 0),
            restarts={str(k): int(v) for k, v in by_reason.items() if int(v)},
            stalled=stalled,
        )

    def row(self) -> tuple[str, ...]:
        restarts = ",".join(f"{k}={v}" for k, v in sorted(self.restarts.items())) or "-"
        return (
            self.phase,
            f"{self.ready}/{self.desired}",
            str(self.waiting),
            str(self.round),
            str(self.world_size),
            restarts,
            self.stalled or "-",
        )


HEADER = ("time", "phase", "nodes", "waiting", "round", "world", "restarts", "stalled", "event")
WIDTHS = (7, 11, 6, 8, 6, 6, 44, 16, 0)


def format_row(cells: Sequence[str]) -> str:
    return "  ".join(c.ljust(w) if w else c for c, w in zip(cells, WIDTHS, strict=True)).rstrip()


@dataclass
class Timeline:
    """What happened, for the live table and the summary."""

    started: float
    rows: list[tuple[str, ...]] = field(default_factory=list)
    out: Callable[[str], None] = print
    last: JobView | None = None

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.started:6.1f}s"

    def header(self) -> None:
        self.out(format_row(HEADER))

    def note(self, view: JobView | None, event: str) -> None:
        cells = (self.elapsed(), *(view.row() if view else ("",) * 7), event)
        self.rows.append(cells)
        self.out(format_row(cells))

    def observe(self, view: JobView) -> None:
        if view != self.last:
            self.note(view, "")
            self.last = view


Observer = Callable[[JobView, list[PodView]], None]


@dataclass
class Scenario:
    ops: ClusterOps
    manifest: Path
    namespace: str = "default"
    timeout: float = 900.0
    poll: float = 1.0
    observer: Observer | None = None
    lose_a_node: bool = False
    """Also lose the node of one worker (real nodes only); the job is placed for it."""
    helm_values: dict[str, str] = field(default_factory=dict)
    release: str = RELEASE
    operator_namespace: str = OPERATOR_NAMESPACE
    steps: int | None = None
    """Override the trainer's ``--steps`` (the example's default is over before a fault lands)."""
    placement: dict[str, Any] | None = None
    """``nodeSelector`` and ``tolerations`` for the operator's and the job's pods (the managed
    etcd follows the job's); ``None``: wherever the scheduler puts them."""
    working_dir: str | None = None
    """The trainer's ``workingDir`` (the emulator runs the image's command on the host, where
    ``train.py`` is in ``examples/``); ``None``: the image's own."""
    workdir: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "elasticjob-demo")
    out: Callable[[str], None] = print
    timeline: Timeline = field(init=False)
    job: str = field(init=False, default="")
    uid: str = field(init=False, default="")
    """The applied job's uid: Events of earlier jobs of the same name are not this run's."""
    max_world: int = field(init=False, default=0)
    keep_node: str | None = field(init=False, default=None)
    """The operator's node: the job's managed etcd prefers it, and it is never lost."""
    node_lost: str = field(init=False, default="")
    """What the lost node cost, for the summary."""
    seen_workers: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self.timeline = Timeline(started=time.monotonic(), out=self.out)

    # -- steps -------------------------------------------------------------------------------

    def install_operator(self) -> None:
        self.out(f"==> helm upgrade --install {self.release} {CHART.relative_to(REPO)}")
        sets = [a for k, v in self.helm_values.items() for a in ("--set", f"{k}={v}")]
        self.workdir.mkdir(parents=True, exist_ok=True)
        values = self.workdir / "placement-values.json"
        values.write_text(json.dumps(self.placement or {}))
        self.ops.helm(
            "upgrade", "--install", self.release, str(CHART),
            "--namespace", self.operator_namespace, "--create-namespace",
            "--values", str(values), "--wait", "--timeout", "5m", *sets,
        )  # fmt: skip
        self.ops.kubectl(
            "-n", self.operator_namespace, "rollout", "status",
            f"deployment/{self.release}-elasticjob-operator", "--timeout=180s",
        )  # fmt: skip
        self.out("    operator is up")

    def prepared_manifest(self) -> Path:
        """The manifest as applied: ``--steps`` set to ``self.steps`` (long enough for both
        faults), the placement added, and every hostPath made unique to this run, so no
        checkpoint of an earlier run makes the job finish at once."""
        docs = [d for d in yaml.safe_load_all(self.manifest.read_text()) if d]
        jobs = [d for d in docs if d.get("kind") == "ElasticJob"]
        if len(jobs) != 1:
            raise DemoError(f"{self.manifest} must hold exactly one ElasticJob, found {len(jobs)}")
        spec = jobs[0]["spec"]["template"]["spec"]
        for key, value in (self.placement or {}).items():
            if isinstance(value, dict):
                spec[key] = {**spec.get(key, {}), **value}
            else:
                spec[key] = [*spec.get(key, []), *value]
        if self.keep_node is not None:
            keep_beside(spec, self.keep_node, jobs[0]["metadata"]["name"])
        for container in spec["containers"]:
            if self.steps is not None:
                container["args"] = with_steps(container.get("args", []), self.steps)
            if self.working_dir is not None:
                container["workingDir"] = self.working_dir
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for volume in spec.get("volumes", []):
            if "hostPath" in volume:
                volume["hostPath"]["path"] = f"{volume['hostPath']['path'].rstrip('/')}-{stamp}"
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / f"{self.manifest.stem}-{stamp}.yaml"
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        return path

    def apply_job(self) -> str:
        if self.lose_a_node:
            self.keep_node = self.operator_node()
        path = self.prepared_manifest()
        job = yaml.safe_load(path.read_text())["metadata"]["name"]
        # A finished job of the same name from an earlier run would answer every wait at once.
        self.ops.kubectl(
            "delete", "elasticjob", job, "-n", self.namespace, "--ignore-not-found", "--wait=true",
            "--timeout=120s",
        )  # fmt: skip
        self.ops.kubectl("apply", "-n", self.namespace, "-f", str(path))
        self.job = str(job)
        self.uid = self.ops.kubectl(
            "get", "elasticjob", job, "-n", self.namespace, "-o", "jsonpath={.metadata.uid}"
        ).strip()  # fmt: skip
        steps = f" (--steps {self.steps})" if self.steps is not None else ""
        self.out(
            f"==> kubectl apply -f {self.manifest.name}{steps}: ElasticJob {self.namespace}/{job}"
        )
        return self.job

    def read(self) -> tuple[JobView, list[PodView]]:
        obj = json.loads(
            self.ops.kubectl("get", "elasticjob", self.job, "-n", self.namespace, "-o", "json")
        )
        pods_raw = json.loads(
            self.ops.kubectl(
                "get", "pods", "-n", self.namespace, "-l", f"{JOB_LABEL}={self.job}", "-o", "json"
            )
        )
        pods = [
            PodView(
                name=str(p["metadata"]["name"]),
                role=str(p["metadata"].get("labels", {}).get(ROLE_LABEL, "")),
                phase=str((p.get("status") or {}).get("phase") or "Pending"),
                ip=(p.get("status") or {}).get("podIP"),
                node=(p.get("spec") or {}).get("nodeName"),
            )
            for p in pods_raw.get("items", [])
            if not p["metadata"].get("deletionTimestamp")
        ]
        view = JobView.from_object(obj)
        self.timeline.observe(view)
        self.max_world = max(self.max_world, view.world_size)
        self.seen_workers |= {p.name for p in pods if p.role == "worker"}
        if self.observer:
            self.observer(view, pods)
        return view, pods

    def wait_for(
        self, what: str, done: Callable[[JobView, list[PodView]], bool], timeout: float
    ) -> JobView:
        deadline = time.monotonic() + timeout
        while True:
            view, pods = self.read()
            if done(view, pods):
                return view
            if view.phase == "Failed":
                raise DemoError(
                    f"the job failed while waiting for {what}: {view}{self.diagnostics(pods)}"
                )
            if time.monotonic() > deadline:
                raise DemoError(
                    f"timed out after {timeout:.0f}s waiting for {what}; last: {view}"
                    f"{self.diagnostics(pods)}"
                )
            time.sleep(self.poll)

    def diagnostics(self, pods: list[PodView], lines: int = 40) -> str:
        """What a failed run needs to be understood afterwards: the job's Events, and for every
        pod the agent's decisions and checkpoint lines over its whole life (a round's cause is
        often far above the tail), then the tail of its log."""
        out = [f"\n--- Events of {self.namespace}:\n{self._events()}"]
        for pod in sorted(pods, key=lambda p: p.name):
            try:
                log = self.ops.pod_logs(self.namespace, pod.name).splitlines()
            except Exception as exc:  # a pod that went away while we looked
                log = [f"(no log: {exc})"]
            marked = [line for line in log[:-lines] if any(m in line for m in _EVIDENCE)]
            shown = "\n".join(f"    {line}" for line in marked[-80:])
            tail = "\n".join(f"    {line}" for line in log[-lines:])
            out.append(
                f"\n--- {pod.name} ({pod.phase}), agent events and checkpoints before the "
                f"tail:\n{shown}\n--- {pod.name}, last {lines} lines:\n{tail}"
            )
        return "".join(out)

    def _events(self) -> str:
        try:
            listed = self.ops.kubectl(
                "get", "events", "-n", self.namespace, "--sort-by=.lastTimestamp",
                "-o", "custom-columns=AT:.lastTimestamp,OBJECT:.involvedObject.name,"
                "REASON:.reason,MESSAGE:.message",
            )  # fmt: skip
        except Exception as exc:  # the namespace may be gone
            return f"    (no events: {exc})"
        return "\n".join(f"    {line[:400]}" for line in listed.splitlines()[-60:])

    def training(self, after_round: int = -1) -> Callable[[JobView, list[PodView]], bool]:
        """Running with a formed group in a round after ``after_round`` (rounds start at 0)."""

        def done(view: JobView, pods: list[PodView]) -> bool:
            return view.phase == "Running" and view.world_size > 0 and view.round > after_round

        return done

    def kill_worker(self) -> int:
        """SIGKILL one training process of one worker pod; return the round it was killed in.

        A training process, not the pod's container: killing the container kills its agent, and
        the others may see that as a member leaving (``membership``, free) rather than a
        ``failure``, depending on which they notice first."""
        view, pods = self.read()
        workers = sorted(p.name for p in pods if p.role == "worker" and p.phase == "Running")
        if not workers:
            raise DemoError("no running worker pod to kill")
        before = view.restarts.get("failure", 0)
        pid = self.ops.kill_training_process(self.namespace, workers[-1])
        self.timeline.note(view, f"inject: kill -9 training process {pid} in {workers[-1]}")
        self.wait_for(
            "the failure to be counted",
            lambda v, _: v.restarts.get("failure", 0) > before,
            timeout=min(self.timeout, 300),
        )
        self.timeline.note(None, "job-wide failure restart counted")
        return view.round

    def operator_node(self) -> str:
        found = json.loads(
            self.ops.kubectl(
                "get", "pods", "-n", self.operator_namespace,
                "-l", "app.kubernetes.io/name=elasticjob-operator", "-o", "json",
            )
        )  # fmt: skip
        nodes = sorted(
            {
                str(p["spec"]["nodeName"])
                for p in found.get("items", [])
                if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
            }
        )
        if len(nodes) != 1:
            raise DemoError(f"expected the operator's pod on one node, found it on {nodes}")
        return nodes[0]

    def logs(self, pod: str) -> str:
        try:
            return self.ops.pod_logs(self.namespace, pod)
        except Exception:  # a pod that went away, a container not started yet
            return ""

    def node_loss(self) -> None:
        """Lose the node of a worker that holds neither the operator nor the managed etcd;
        wait until that worker's replacement resumes from a checkpoint, then restore the node."""
        view, pods = self.read()
        spared = {self.keep_node or self.operator_node()}
        spared |= {p.node for p in pods if p.role == "etcd" and p.node}
        workers = [p for p in pods if p.role == "worker" and p.phase == "Running" and p.node]
        victims = sorted({str(p.node) for p in workers} - spared)
        if not victims:
            where = {p.name: p.node for p in pods}
            raise DemoError(f"no worker's node is free of the operator and the etcd: {where}")
        node = victims[0]
        lost = sorted(p.name for p in workers if p.node == node)
        before = {p.name for p in pods}
        # Something to resume from: the training may have started over after the kill.
        saved = 0

        def checkpointed(_: JobView, now: list[PodView]) -> bool:
            nonlocal saved
            running = [p for p in now if p.role == "worker" and p.phase == "Running"]
            saved = max(
                (int(n) for p in running for n in CHECKPOINTED.findall(self.logs(p.name))),
                default=0,
            )
            return saved > 0

        self.wait_for("a checkpoint", checkpointed, timeout=min(self.timeout, 300))
        self.timeline.note(
            view, f"inject: lose node {node} ({', '.join(lost)}; last checkpoint step {saved})"
        )
        self.ops.lose_node(node)
        resumed: dict[str, re.Match[str]] = {}

        def replacement_resumed(_: JobView, now: list[PodView]) -> bool:
            for pod in now:
                if pod.role == "worker" and pod.name not in before and pod.phase == "Running":
                    match = RESUMED.search(self.logs(pod.name))
                    if match:
                        resumed[pod.name] = match
                        return True
            return False

        try:
            self.wait_for(
                "the lost pod's replacement to resume from a checkpoint",
                replacement_resumed,
                timeout=min(self.timeout, 480),
            )
        finally:
            self.ops.restore_node(node)
        ((pod, match),) = resumed.items()
        step, source = int(match.group(1)), match.group(3) or "its node"
        if step < saved:
            raise DemoError(
                f"{pod} resumed from step {step}, older than step {saved}, the last checkpoint "
                f"before node {node} was lost{self.diagnostics(self.read()[1])}"
            )
        self.node_lost = f"{pod} resumed from step {step} (from {source}; last saved {saved})"
        self.timeline.note(None, f"{self.node_lost}; node {node} restored")

    def etcd_outage(self, hold: float = 15.0) -> None:
        view, pods = self.read()
        etcd = [p.name for p in pods if p.role == "etcd" and p.phase == "Running"]
        if not etcd:
            raise DemoError("no running managed etcd pod (is spec.etcd.mode External?)")
        self.timeline.note(view, f"inject: cut {etcd[0]} off the network")
        self.ops.cut_pod(self.namespace, etcd[0])
        try:
            self.wait_for(
                "condition Stalled/EtcdUnavailable",
                lambda v, _: v.stalled == "EtcdUnavailable",
                timeout=min(self.timeout, 300),
            )
            self.timeline.note(None, "operator: Stalled, reason EtcdUnavailable")
            # Leave the outage in place a little: the operator's remediation is what ends it.
            end = time.monotonic() + hold
            while time.monotonic() < end:
                self.read()
                time.sleep(self.poll)
        finally:
            try:
                self.ops.restore_pod(self.namespace, etcd[0])
                self.timeline.note(None, f"restore: {etcd[0]} back on the network")
            except Exception:  # the operator replaced the pod: nothing is left to reconnect
                self.timeline.note(None, f"restore: {etcd[0]} is gone (the operator replaced it)")
        self.wait_for(
            "the stall to clear", lambda v, _: v.stalled is None, timeout=min(self.timeout, 300)
        )
        self.timeline.note(None, "stall cleared")

    def run(self, *, inject: bool = True) -> JobView:
        self.install_operator()
        self.apply_job()
        self.timeline.header()
        self.wait_for("the job to train", self.training(), self.timeout)
        if inject:
            killed_in = self.kill_worker()
            self.wait_for("training to resume", self.training(after_round=killed_in), self.timeout)
            self.timeline.note(None, "training resumed from the last checkpoint")
            if self.lose_a_node:
                self.node_loss()
            self.etcd_outage()
        final = self.wait_for("Succeeded", lambda v, _: v.phase == "Succeeded", self.timeout)
        self.timeline.note(final, "job Succeeded")
        return final

    @property
    def replaced(self) -> int:
        """Worker pods beyond the first attempt of each index (``<job>-worker-<i>-<attempt>``)."""
        return sum(1 for name in self.seen_workers if not name.endswith("-0"))

    def summary(self, final: JobView) -> str:
        events = self.ops.kubectl(
            "get", "events", "-n", self.namespace,
            "--field-selector", f"involvedObject.kind=ElasticJob,involvedObject.uid={self.uid}",
            "--sort-by", ".metadata.creationTimestamp",
            "-o", "custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message",
        )  # fmt: skip
        restarts = ", ".join(f"{k}: {v}" for k, v in sorted(final.restarts.items())) or "none"
        failures = final.restarts.get("failure", 0) + final.restarts.get("timer", 0)
        lines = [
            "",
            f"==> Summary of {self.namespace}/{self.job}",
            f"    outcome:        {final.phase} after {self.timeline.elapsed().strip()}",
            f"    restarts:       {restarts} (spent from maxRestarts: {failures})",
            f"    worker pods:    {self.replaced} replaced; largest world size {self.max_world}",
            *([f"    node lost:      {self.node_lost}"] if self.node_lost else []),
            "    what happened:",
            *(f"      {r[0]}  {r[-1]}" for r in self.timeline.rows if r[-1]),
            "    events:",
            *(f"      {line}" for line in events.strip().splitlines()),
        ]
        return "\n".join(lines)


def keep_beside(spec: dict[str, Any], keep: str, job: str) -> None:
    """One worker per node at most (a hard spread that ignores tainted, lost nodes, so a
    replacement fits on a survivor), and the rest of the job, the managed etcd included (it
    copies the template's node affinity), preferably on node ``keep``."""
    affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
        {
            "weight": 100,
            "preference": {
                "matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [keep]}]
            },
        }
    )
    spec.setdefault("topologySpreadConstraints", []).append(
        {
            "maxSkew": 1,
            "topologyKey": HOSTNAME_LABEL,
            "whenUnsatisfiable": "DoNotSchedule",
            "nodeTaintsPolicy": "Honor",
            "labelSelector": {"matchLabels": {JOB_LABEL: job, ROLE_LABEL: "worker"}},
        }
    )


# -- adapters and the command line -----------------------------------------------------------


class ClusterAdapter:
    """``ClusterOps`` over ``elasticjob_localcluster.LocalCluster`` (the e2e fixture's object and
    what ``connect`` returns for the cluster ``make cluster-up`` started)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    def kubectl(self, *args: str) -> str:
        return self.cluster.kubectl(*args, timeout=600).stdout

    def helm(self, *args: str) -> str:
        return self.cluster.helm(*args, timeout=600).stdout

    def kill_training_process(self, namespace: str, pod: str) -> int:
        # Through the cluster's own means (`kubectl exec`), never from the host to the pod's
        # health port: the job's NetworkPolicy admits only the operator there. Python, not
        # kill(1): the training image need not hold procps.
        code = KILL_ONE_WORKER.format(port=DEFAULT_HEALTH_PORT, timeout=60)
        done = self.cluster.exec_in_pod(namespace, pod, ["python", "-c", code], timeout=90)
        if done.returncode != 0:
            raise DemoError(
                f"{namespace}/{pod}: no worker killed (exit {done.returncode}): "
                f"{(done.stderr or done.stdout).strip()}"
            )
        return int(done.stdout.strip().splitlines()[-1])

    def cut_pod(self, namespace: str, pod: str) -> None:
        self.cluster.cut_pod(namespace, pod)

    def restore_pod(self, namespace: str, pod: str) -> None:
        self.cluster.restore_pod(namespace, pod)

    def lose_node(self, node: str) -> None:
        self.cluster.lose_node(node)

    def restore_node(self, node: str) -> None:
        self.cluster.restore_node(node)

    def pod_logs(self, namespace: str, pod: str) -> str:
        return self.cluster.pod_logs(namespace, pod)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cluster", default="dev", help="name of the local cluster (default: dev)")
    parser.add_argument("--manifest", type=Path, default=REPO / "examples" / "elasticjob.yaml")
    parser.add_argument("--namespace", default="default", help="the job's namespace")
    parser.add_argument(
        "--release", default=RELEASE, help=f"the chart's release name (default {RELEASE})"
    )
    parser.add_argument(
        "--operator-namespace",
        default=OPERATOR_NAMESPACE,
        help=f"the operator's namespace (default {OPERATOR_NAMESPACE})",
    )
    parser.add_argument(
        "--watch-namespace",
        action="store_true",
        help="the operator watches only the job's namespace (the chart's watchNamespaces); "
        "default: every namespace",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per wait")
    parser.add_argument(
        "--steps",
        type=int,
        default=1500,
        help="training steps (default 1500, 3-4 minutes, room for the faults); 0: as written",
    )
    parser.add_argument(
        "--no-faults", action="store_true", help="run the job without injecting failures"
    )
    parser.add_argument(
        "--no-node-loss", action="store_true", help="inject the other faults but lose no node"
    )
    args = parser.parse_args(argv)
    if not args.manifest.is_file():
        parser.error(f"no manifest at {args.manifest}")
    sys.path.insert(0, str(REPO / "localcluster"))
    from elasticjob_localcluster import ClusterConfig, connect  # noqa: PLC0415

    cluster = connect(ClusterConfig(name=args.cluster))
    if cluster is None:
        print(
            f"demo: local cluster {args.cluster!r} is not running: start it with `make cluster-up`",
            file=sys.stderr,
        )
        return 1
    if not cluster.real_nodes:
        print(
            f"demo: local cluster {args.cluster!r} has no real nodes (started with --real-nodes "
            "0): the demo runs its images on real nodes. `make cluster-down` then `make demo` "
            "starts it with two.",
            file=sys.stderr,
        )
        return 1
    scenario = Scenario(
        ops=ClusterAdapter(cluster),
        manifest=args.manifest,
        namespace=args.namespace,
        timeout=args.timeout,
        steps=args.steps or None,
        release=args.release,
        operator_namespace=args.operator_namespace,
        helm_values={"watchNamespaces": f"{{{args.namespace}}}"} if args.watch_namespace else {},
        lose_a_node=not args.no_node_loss,
    )
    try:
        final = scenario.run(inject=not args.no_faults)
    except (DemoError, RuntimeError) as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    print(scenario.summary(final))
    return 0


if __name__ == "__main__":
    sys.exit(main())
