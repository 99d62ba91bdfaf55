"""What the operator sees of a job's world, reduced to what planning needs (pure).

``pod_view`` turns a Pod object (a plain dict, as kopf and the API return it) into a ``PodView``;
``Observed`` bundles the pods, the agents' health reports and the operator's etcd probe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from elasticjob_agent.protocol.failure import WorkerFailure, from_termination_message
from elasticjob_agent.protocol.health import HealthReport

from . import names
from .agent_command import AGENT
from .kueue import admission_gated


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
    unschedulable: str | None = None
    """The scheduler's message when ``PodScheduled`` is False with reason Unschedulable."""
    exit_code: int | None = None
    """Exit code of the main container once it terminated."""
    finished_at: float | None = None
    evicted: bool = False
    joined: bool = False
    """Its agent was seen in a completed round (annotation ``names.ANNOTATION_JOINED``)."""
    ready: bool = False
    """The kubelet reports the pod ``Ready`` (for etcd: its readiness probe on ``/health``)."""
    gated: bool = False
    """Kueue's admission gate holds it (``kueue.admission_gated``)."""
    last_failure: WorkerFailure | None = None
    """The root cause its agent left in the main container's termination message, once that
    container terminated (the kubelet keeps it after the agent, and its health report, are
    gone)."""

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
    kueue_reason: str | None = None
    """Why Kueue has not admitted the core's Workload (its condition message), if read."""


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
    ready = False
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            unschedulable = str(cond.get("message") or "unschedulable")
    main = _main_container_name(spec, role)
    exit_code, finished_at, message = _container_exit(status, main)
    return PodView(
        name=str(meta["name"]),
        role=role,
        index=index,
        attempt=attempt,
        phase=phase,
        ip=status.get("podIP") or None,
        node=spec.get("nodeName") or None,
        deleting=bool(meta.get("deletionTimestamp")),
        unschedulable=unschedulable,
        exit_code=exit_code,
        finished_at=finished_at,
        evicted=status.get("reason") == "Evicted",
        joined=names.ANNOTATION_JOINED in (meta.get("annotations") or {}),
        ready=ready and phase is PodPhase.RUNNING,
        gated=admission_gated(spec),
        last_failure=None if message is None else from_termination_message(message),
    )


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
