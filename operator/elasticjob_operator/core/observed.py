"""What the operator sees of a job's world, reduced to what planning needs (pure).

``pod_view`` turns a Pod object (a plain dict, as kopf and the API return it) into a ``PodView``;
``Observed`` bundles the pods, the agents' health reports and the operator's etcd probe.
``start_failure`` reads why the kubelet cannot start a pod's containers (``StartFailure``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from elasticjob_agent.protocol.failure import (
    FinalCounts,
    WorkerFailure,
    counts_from_termination_message,
    from_termination_message,
)
from elasticjob_agent.protocol.failure_policy import (
    PolicyDecision,
    decision_from_termination_message,
)
from elasticjob_agent.protocol.health import HealthReport

from . import names
from .agent_command import AGENT
from .kueue_names import admission_gated
from .node_conditions import NodeCondition

START_FAILURE_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "ImageInspectError",
        "RegistryUnavailable",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "PreStartHookError",
        "PostStartHookError",
        "StartError",
        "ContainerCannotRun",
    }
)
"""The kubelet's reasons for a container that cannot start (a waiting state, which the kubelet
retries for ever, or under ``restartPolicy: Never`` a terminated one: ``StartError``, exit code
128). ``ContainerCreating`` and ``PodInitializing`` are the normal way there, not failures."""
IMAGE_PULL_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "ImageInspectError",
        "RegistryUnavailable",
    }
)
"""The ``START_FAILURE_REASONS`` that say the image was not pulled."""
MAX_START_MESSAGE = 512
"""The kubelet's message is kept up to this many characters (the status stays small)."""


@dataclass(frozen=True)
class StartFailure:
    """Why a pod's container cannot start, in the kubelet's words."""

    slot: str
    """What the pod stands for: ``worker-<index>`` or ``etcd`` (replacements share the slot)."""
    pod: str
    container: str
    reason: str
    """The kubelet's reason, one of ``START_FAILURE_REASONS``."""
    message: str

    def summary(self) -> str:
        """One line for conditions, Events and the ``Failed`` message."""
        text = f"pod {self.pod} container {self.container}: {self.reason}"
        return f"{text}: {self.message}" if self.message else text

    def to_json(self) -> dict[str, str]:
        return {
            "slot": self.slot,
            "pod": self.pod,
            "container": self.container,
            "reason": self.reason,
            "message": self.message,
        }

    @classmethod
    def from_json(cls, data: Any) -> StartFailure | None:
        """A stored entry; ``None`` when it is not one (a stored status is read, never trusted)."""
        if not isinstance(data, Mapping):
            return None
        slot, pod, container, reason, message = (
            data.get(k) for k in ("slot", "pod", "container", "reason", "message")
        )
        if not all(isinstance(f, str) and f for f in (slot, pod, container, reason)):
            return None
        return cls(
            slot=str(slot),
            pod=str(pod),
            container=str(container),
            reason=str(reason),
            message=_cap(message, MAX_START_MESSAGE) if isinstance(message, str) else "",
        )


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class PodView:
    name: str
    role: str
    """``names.ROLE_WORKER`` or ``names.ROLE_ETCD``."""
    index: int
    """Replica index for workers; etcd generation for etcd pods."""
    attempt: int
    phase: PodPhase
    ip: str | None = None
    node: str | None = None
    deleting: bool = False
    """``metadata.deletionTimestamp`` is set."""
    deleted_at: float | None = None
    """When its deletion was asked for: ``deletionTimestamp`` less the grace period."""
    disruption: str | None = None
    """The reason of its ``DisruptionTarget`` condition (``PreemptionByScheduler``,
    ``EvictionByEvictionAPI``, ``DeletionByTaintManager``, ``TerminationByKubelet``, ...)."""
    unschedulable: str | None = None
    """The scheduler's message when ``PodScheduled`` is False with reason Unschedulable."""
    exit_code: int | None = None
    """Exit code of the main container once it terminated."""
    finished_at: float | None = None
    evicted: bool = False
    joined: bool = False
    """Its agent was seen in a completed round (annotation ``names.ANNOTATION_JOINED``)."""
    stood_by: bool = False
    """Its agent was seen standing by as a hot spare (annotation ``names.ANNOTATION_STOOD_BY``)."""
    ready: bool = False
    """The kubelet reports the pod ``Ready`` (for etcd: its readiness probe on ``/health``)."""
    gated: bool = False
    """Kueue's admission gate holds it (``kueue_names.admission_gated``)."""
    last_failure: WorkerFailure | None = None
    """The root cause its agent left in the main container's termination message, once that
    container terminated (the kubelet keeps it after the agent, and its health report, are
    gone)."""
    final_counts: FinalCounts | None = None
    """The job-wide restart counts its agent left in the termination message as it exited on
    the spent budget (the count that spent it, which no health poll may have seen)."""
    start_failure: StartFailure | None = None
    """Why the kubelet cannot start one of its containers (``None`` while nothing blocks it)."""
    policy_decision: PolicyDecision | None = None
    """The failure-policy decision its agent left in the termination message as it exited on a
    ``FailJob`` (``protocol.failure_policy``)."""
    oom_killed: bool = False
    """The kubelet says the main container was ``OOMKilled``."""

    @property
    def terminal(self) -> bool:
        return self.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED)


@dataclass(frozen=True)
class Observed:
    """A snapshot for one planning step."""

    workers: tuple[PodView, ...] = ()
    etcd_pods: tuple[PodView, ...] = ()
    reports: Mapping[str, HealthReport] = field(default_factory=dict)
    """Health reports by worker pod name (only pods that answered with a valid report)."""
    invalid_reports: Mapping[str, str] = field(default_factory=dict)
    """Why a pod's answer was refused as a health report, by pod name (untrusted input)."""
    lost_nodes: frozenset[str] = frozenset()
    """Nodes whose ``Ready`` condition is not True, or that no longer exist."""
    etcd_reachable: bool | None = None
    """The operator's own etcd probe; ``None`` when there was nothing to probe yet."""
    reports_fresh: bool = True
    """Whether ``reports`` were fetched for this step. Earlier ones (the agents were not due,
    or their round is still out) still count for what they say of the workers, but vouch for
    nobody's etcd now."""

    def agent_reaches_etcd(self, run_id: str) -> bool:
        """Whether an agent of ``run_id`` reaches the job's etcd in this step: only reports
        fetched for it vouch (``reports_fresh``)."""
        return self.reports_fresh and any(
            r.run_id == run_id and r.etcd.reachable for r in self.reports.values()
        )

    kueue_reason: str | None = None
    """Why Kueue has not admitted the core's Workload (its condition message), if read."""
    tls_secret_missing: bool = False
    """The managed etcd's certificates Secret is needed and does not exist (the plan creates
    it); ``False`` also when it was not looked for (no TLS, external etcd, a finished job)."""
    node_conditions: Mapping[str, tuple[NodeCondition, ...]] = field(default_factory=dict)
    """Nodes with a bad condition now (``node_conditions.bad_conditions``), by name; only
    those nodes."""


def current_workers(pods: Sequence[PodView], attempts: Mapping[int, int]) -> dict[int, PodView]:
    """The newest pod per replica index whose attempt is at least the recorded one."""
    current: dict[int, PodView] = {}
    for pod in pods:
        if pod.attempt < attempts.get(pod.index, 0):
            continue
        best = current.get(pod.index)
        if best is None or pod.attempt > best.attempt:
            current[pod.index] = pod
    return current


def current_etcd(etcd_pods: Iterable[PodView], generation: int) -> PodView | None:
    """The pod of the job's current managed etcd generation, if it exists.

    The current generation is the one ``status.etcd.generation`` records, or a higher pod index
    when a status write was lost after that pod was created. An older pod is an abandoned
    generation (being deleted): it never speaks for the job's etcd, even while it is the newest
    pod the index holds (the new generation's pod not created or not seen yet)."""
    by_generation = {p.index: p for p in etcd_pods}
    return by_generation.get(max(generation, max(by_generation, default=-1)))


def pod_view(pod: Mapping[str, Any]) -> PodView | None:
    """Reduce a Pod owned by a job to a ``PodView``; ``None`` for a pod that is not ours."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    role = labels.get(names.LABEL_ROLE)
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    if role == names.ROLE_WORKER:
        parsed = names.parse_worker_pod_name(str(meta.get("name", "")))
        if parsed is None:
            return None
        index, attempt = parsed
    elif role == names.ROLE_ETCD:
        try:
            index, attempt = int(labels.get(names.LABEL_ETCD_GENERATION, "")), 0
        except ValueError:
            return None
    else:
        return None
    try:
        phase = PodPhase(status.get("phase") or "Pending")
    except ValueError:
        phase = PodPhase.UNKNOWN
    unschedulable = None
    disruption = None
    ready = False
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            disruption = str(cond.get("reason") or "") or None
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            unschedulable = str(cond.get("message") or "unschedulable")
    main = _main_container_name(spec, role)
    exit_code, finished_at, message = _container_exit(status, main)
    name = str(meta["name"])
    return PodView(
        name=name,
        role=role,
        index=index,
        attempt=attempt,
        phase=phase,
        ip=status.get("podIP") or None,
        node=spec.get("nodeName") or None,
        deleting=bool(meta.get("deletionTimestamp")),
        deleted_at=_deletion_asked(meta),
        disruption=disruption,
        unschedulable=unschedulable,
        exit_code=exit_code,
        finished_at=finished_at,
        evicted=status.get("reason") == "Evicted",
        joined=names.ANNOTATION_JOINED in (meta.get("annotations") or {}),
        stood_by=names.ANNOTATION_STOOD_BY in (meta.get("annotations") or {}),
        ready=ready and phase is PodPhase.RUNNING,
        gated=admission_gated(spec),
        last_failure=None if message is None else from_termination_message(message),
        final_counts=None if message is None else counts_from_termination_message(message),
        policy_decision=None if message is None else decision_from_termination_message(message),
        oom_killed=_terminated_reason(status, main) == "OOMKilled",
        start_failure=start_failure(
            status, pod=name, slot="etcd" if role == names.ROLE_ETCD else f"worker-{index}"
        ),
    )


def start_failure(status: Mapping[str, Any], *, pod: str, slot: str) -> StartFailure | None:
    """The first container (init containers first) the kubelet cannot start, from a pod's
    ``status``; ``None`` when every container started or is on its normal way there."""
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            if not isinstance(container, Mapping):
                continue
            state = container.get("state")
            if not isinstance(state, Mapping):
                continue
            for detail in (state.get("waiting"), state.get("terminated")):
                if not isinstance(detail, Mapping):
                    continue
                reason = detail.get("reason")
                if reason in START_FAILURE_REASONS:
                    message = str(detail.get("message") or "")
                    return StartFailure(
                        slot=slot,
                        pod=pod,
                        container=str(container.get("name") or "?"),
                        reason=str(reason),
                        message=_cap(message, MAX_START_MESSAGE),
                    )
    return None


def _deletion_asked(meta: Mapping[str, Any]) -> float | None:
    deadline = parse_time(meta.get("deletionTimestamp"))
    grace = meta.get("deletionGracePeriodSeconds")
    if deadline is None:
        return None
    if isinstance(grace, bool) or not isinstance(grace, int) or not 0 <= grace <= 2**31:
        return deadline
    return deadline - grace


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def without_witnessed_nodes(observed: Observed) -> Observed:
    """``observed`` with ``lost_nodes`` less the nodes this job still hears from in this step.

    A node's ``Ready`` condition goes Unknown when its kubelet misses heartbeats for the node
    controller's grace period, which a starved kubelet on a loaded machine can do while every
    container on it runs on. A worker whose agent answered the operator in this step, or the
    newest managed etcd while the operator's probe or an agent reaches etcd, is a live witness:
    its node is not lost to this job, and its pods are not replaced (that would cost a healthy
    job a group restart). A node that is really gone answers nothing, so its pods are handled
    as lost in the same step as before."""
    if not observed.lost_nodes:
        return observed
    heard = {p.node for p in observed.workers if p.name in observed.reports and p.node}
    etcd_heard = observed.etcd_reachable is True or any(
        r.etcd.reachable for r in observed.reports.values()
    )
    newest = max(
        (p for p in observed.etcd_pods if not p.terminal and not p.deleting),
        key=lambda p: p.index,
        default=None,
    )
    if etcd_heard and newest is not None and newest.node:
        heard.add(newest.node)
    return replace(observed, lost_nodes=observed.lost_nodes - heard)


def node_lost(node: Mapping[str, Any]) -> bool:
    """A node is lost when its ``Ready`` condition is False or Unknown (node controller's view)."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") != "True")
    return False


def _main_container_name(spec: Mapping[str, Any], role: str) -> str | None:
    """The container whose exit decides the pod's fate: the agent's, or etcd's."""
    for container in spec.get("containers") or []:
        command = container.get("command") or []
        if role == names.ROLE_WORKER and command[:1] == [AGENT]:
            return str(container.get("name"))
        if role == names.ROLE_ETCD and container.get("name") == "etcd":
            return "etcd"
    return None


def _container_exit(
    status: Mapping[str, Any], name: str | None
) -> tuple[int | None, float | None, str | None]:
    """Exit code, finish time and termination message of the terminated main container."""
    for container in status.get("containerStatuses") or []:
        if name is not None and container.get("name") != name:
            continue
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            message = terminated.get("message")
            return (
                int(terminated.get("exitCode", 1)),
                parse_time(terminated.get("finishedAt")),
                message if isinstance(message, str) else None,
            )
    return None, None, None


def _terminated_reason(status: Mapping[str, Any], name: str | None) -> str | None:
    """The kubelet's reason for the terminated main container (``OOMKilled``, ``Error``)."""
    for container in status.get("containerStatuses") or []:
        if name is not None and container.get("name") != name:
            continue
        reason = ((container.get("state") or {}).get("terminated") or {}).get("reason")
        return reason if isinstance(reason, str) else None
    return None


def parse_time(value: Any) -> float | None:
    """An RFC 3339 timestamp (as the API writes them) as Unix time; ``None`` if absent or bad."""
    if not value:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
