"""Pod and container status as the kubelet reports them (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class RunState(StrEnum):
    """Where one container is in its life."""

    #: Not started yet (or being prepared).
    CREATING = "creating"
    RUNNING = "running"
    #: Exited and waiting to be restarted.
    BACKOFF = "backoff"
    #: Exited and will not be restarted.
    TERMINATED = "terminated"
    #: Could not be created (bad env, missing command, ...).
    CONFIG_ERROR = "config_error"


@dataclass(frozen=True)
class Termination:
    exit_code: int
    started_at: str
    finished_at: str
    #: Overrides the reason derived from the exit code (e.g. ``NodeLost``).
    reason: str = ""
    message: str = ""

    def as_status(self, container_id: str) -> dict[str, Any]:
        reason = self.reason or ("Completed" if self.exit_code == 0 else "Error")
        state: dict[str, Any] = {
            "exitCode": self.exit_code,
            "reason": reason,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "containerID": container_id,
        }
        if self.message:
            state["message"] = self.message
        if self.exit_code > 128:
            state["signal"] = self.exit_code - 128
        return state


@dataclass(frozen=True)
class ContainerView:
    """A snapshot of one container, enough to render its status."""

    name: str
    image: str
    state: RunState
    restart_count: int
    ready: bool
    container_id: str = ""
    started_at: str = ""
    last: Termination | None = None
    message: str = ""


def restarts_after(policy: str, exit_code: int) -> bool:
    """Whether ``restartPolicy`` restarts a container that exited with ``exit_code``."""
    if policy == "Always":
        return True
    if policy == "OnFailure":
        return exit_code != 0
    if policy == "Never":
        return False
    raise ValueError(f"restartPolicy {policy!r}: must be Always, OnFailure or Never")


def container_status(view: ContainerView) -> dict[str, Any]:
    """One entry of ``status.containerStatuses``."""
    status: dict[str, Any] = {
        "name": view.name,
        "image": view.image,
        "imageID": "",
        "ready": view.ready,
        "restartCount": view.restart_count,
        "started": view.state == RunState.RUNNING,
        "lastState": {},
    }
    if view.container_id:
        status["containerID"] = view.container_id
    if view.state == RunState.RUNNING:
        status["state"] = {"running": {"startedAt": view.started_at}}
    elif view.state == RunState.TERMINATED and view.last is not None:
        status["state"] = {"terminated": view.last.as_status(view.container_id)}
    elif view.state == RunState.BACKOFF:
        status["state"] = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": view.message or f"back-off restarting failed container {view.name}",
            }
        }
    elif view.state == RunState.CONFIG_ERROR:
        status["state"] = {
            "waiting": {"reason": "CreateContainerConfigError", "message": view.message}
        }
    else:
        status["state"] = {"waiting": {"reason": "ContainerCreating"}}
    # lastState is the termination before the current state; a terminated container shows its
    # own termination in state, and the one before it (if any) is gone, like the kubelet.
    if view.last is not None and view.state != RunState.TERMINATED:
        status["lastState"] = {"terminated": view.last.as_status(view.container_id)}
    return status


def pod_phase(views: Sequence[ContainerView]) -> str:
    """``Pending`` until every container started; ``Running`` while any runs or will restart;
    then ``Succeeded`` if all exited 0, else ``Failed``."""
    if any(v.state in (RunState.CREATING, RunState.CONFIG_ERROR) for v in views):
        return "Pending"
    if any(v.state in (RunState.RUNNING, RunState.BACKOFF) for v in views):
        return "Running"
    if all(v.last is not None and v.last.exit_code == 0 for v in views):
        return "Succeeded"
    return "Failed"


def _condition(kind: str, ok: bool, now: str, reason: str = "") -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": kind,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    if reason and not ok:
        condition["reason"] = reason
    return condition


def pod_conditions(
    views: Sequence[ContainerView],
    phase: str,
    initialized: bool,
    previous: Sequence[Mapping[str, Any]],
    now: str,
) -> list[dict[str, Any]]:
    """The kubelet's conditions (``PodReadyToStartContainers``, ``Initialized``,
    ``ContainersReady``, ``Ready``), keeping ``lastTransitionTime`` when a status is unchanged.
    ``PodScheduled`` and others' conditions are left to their owners (strategic merge by type)."""
    all_ready = bool(views) and all(v.ready for v in views)
    terminal = phase in ("Succeeded", "Failed")
    not_ready_reason = "PodCompleted" if terminal else "ContainersNotReady"
    fresh = [
        _condition("PodReadyToStartContainers", not terminal, now),
        _condition("Initialized", initialized, now, "ContainersNotInitialized"),
        _condition("ContainersReady", all_ready and not terminal, now, not_ready_reason),
        _condition("Ready", all_ready and not terminal, now, not_ready_reason),
    ]
    before = {str(c.get("type")): c for c in previous}
    for condition in fresh:
        old = before.get(condition["type"])
        if old is not None and old.get("status") == condition["status"]:
            condition["lastTransitionTime"] = old.get("lastTransitionTime", now)
    return fresh
