"""Pod phase, conditions and container statuses as the kubelet reports them (pure)."""

from __future__ import annotations

import pytest
from elasticjob_localcluster.podstatus import (
    ContainerView,
    RunState,
    Termination,
    container_status,
    pod_conditions,
    pod_phase,
    restarts_after,
)


def view(state: RunState, code: int | None = None, restarts: int = 0) -> ContainerView:
    last = None if code is None else Termination(code, "t0", "t1")
    return ContainerView("c", "img", state, restarts, state == RunState.RUNNING, "id", "t0", last)


@pytest.mark.parametrize(
    ("policy", "code", "restarts"),
    [
        ("Always", 0, True),
        ("Always", 1, True),
        ("OnFailure", 0, False),
        ("OnFailure", 2, True),
        ("Never", 0, False),
        ("Never", 137, False),
    ],
)
def test_restart_policy(policy: str, code: int, restarts: bool) -> None:
    assert restarts_after(policy, code) is restarts


def test_restart_policy_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="restartPolicy"):
        restarts_after("Sometimes", 0)


@pytest.mark.parametrize(
    ("views", "phase"),
    [
        ([view(RunState.CREATING)], "Pending"),
        ([view(RunState.RUNNING), view(RunState.CREATING)], "Pending"),
        ([view(RunState.RUNNING)], "Running"),
        ([view(RunState.BACKOFF, 1, 2)], "Running"),
        ([view(RunState.TERMINATED, 0), view(RunState.RUNNING)], "Running"),
        ([view(RunState.TERMINATED, 0), view(RunState.TERMINATED, 0)], "Succeeded"),
        ([view(RunState.TERMINATED, 0), view(RunState.TERMINATED, 3)], "Failed"),
        ([view(RunState.CONFIG_ERROR)], "Pending"),
    ],
)
def test_pod_phase(views: list[ContainerView], phase: str) -> None:
    assert pod_phase(views) == phase


def test_container_status_shapes() -> None:
    running = container_status(view(RunState.RUNNING, 137, restarts=1))
    assert running["state"] == {"running": {"startedAt": "t0"}}
    assert running["lastState"]["terminated"]["exitCode"] == 137
    assert running["lastState"]["terminated"]["reason"] == "Error"
    assert running["lastState"]["terminated"]["signal"] == 9
    done = container_status(view(RunState.TERMINATED, 0))
    assert done["state"]["terminated"]["reason"] == "Completed"
    assert done["lastState"] == {}
    backoff = container_status(view(RunState.BACKOFF, 1, 3))
    assert backoff["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert backoff["restartCount"] == 3


def test_conditions_keep_transition_time_when_unchanged() -> None:
    first = pod_conditions([view(RunState.RUNNING)], "Running", True, [], "t1")
    again = pod_conditions([view(RunState.RUNNING)], "Running", True, first, "t2")
    assert {c["type"]: c["lastTransitionTime"] for c in again}["Ready"] == "t1"
    done = pod_conditions([view(RunState.TERMINATED, 0)], "Succeeded", True, again, "t3")
    ready = next(c for c in done if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "False",
        "PodCompleted",
        "t3",
    )
