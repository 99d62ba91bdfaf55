"""Pods whose containers cannot start: read from the kubelet's pod status, kept per slot in the
job's status, named in the ``PodsNotStarting`` condition, an Event, the stall and the failure."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from elasticjob_operator.core import start_failures
from elasticjob_operator.core.conditions import ConditionType, find_condition, is_true
from elasticjob_operator.core.observed import (
    MAX_START_MESSAGE,
    PodPhase,
    PodView,
    StartFailure,
    pod_view,
    start_failure,
)
from elasticjob_operator.core.status import JobStatus, Phase

from tests.support.operator_model import T0, Cluster, job_spec, step

PULL = 'failed to pull and unpack image "localhost/nope:1": failed to resolve reference'
BACKOFF = 'Back-off pulling image "localhost/nope:1"'
NO_EXEC = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    'runc create failed: unable to start container process: exec: "elasticjob-agent": '
    "executable file not found in $PATH: unknown"
)


def _status(
    *,
    waiting: str | None = None,
    terminated: str | None = None,
    message: str = "m",
    init: bool = False,
) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if waiting is not None:
        state["waiting"] = {"reason": waiting, "message": message}
    if terminated is not None:
        state["terminated"] = {"reason": terminated, "message": message, "exitCode": 128}
    if not state:
        state["running"] = {"startedAt": "2026-01-01T00:00:00Z"}
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"phase": "Pending", key: [{"name": "trainer", "state": state}]}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (_status(waiting="ErrImagePull", message=PULL), ("ErrImagePull", PULL)),
        (_status(waiting="ImagePullBackOff", message=BACKOFF), ("ImagePullBackOff", BACKOFF)),
        (_status(waiting="InvalidImageName"), ("InvalidImageName", "m")),
        (_status(waiting="CreateContainerConfigError"), ("CreateContainerConfigError", "m")),
        (_status(waiting="CreateContainerError"), ("CreateContainerError", "m")),
        (_status(waiting="RunContainerError", message=NO_EXEC), ("RunContainerError", NO_EXEC)),
        (_status(terminated="StartError", message=NO_EXEC), ("StartError", NO_EXEC)),
        (_status(waiting="ErrImagePull", init=True), ("ErrImagePull", "m")),
        # The normal way to a running container, a running one, a worker that ran and failed.
        (_status(waiting="ContainerCreating"), None),
        (_status(waiting="PodInitializing"), None),
        (_status(), None),
        (_status(terminated="Error"), None),
        ({"phase": "Pending"}, None),
        ({"phase": "Pending", "containerStatuses": ["junk", {"state": "junk"}]}, None),
    ],
)
def test_the_kubelets_reason_and_message_are_read_from_the_pod_status(
    status: dict[str, Any], expected: tuple[str, str] | None
) -> None:
    found = start_failure(status, pod="p", slot="worker-0")
    if expected is None:
        assert found is None
    else:
        assert found == StartFailure("worker-0", "p", "trainer", *expected)


def test_a_long_kubelet_message_is_capped() -> None:
    found = start_failure(_status(waiting="ErrImagePull", message="x" * 5000), pod="p", slot="s")
    assert found is not None and len(found.message) == MAX_START_MESSAGE


def test_pod_view_names_the_slot_of_worker_and_etcd_pods() -> None:
    def pod(name: str, role: str, **labels: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "labels": {"elasticjob.dev/role": role, **labels}},
            "spec": {"containers": [{"name": "trainer", "command": ["elasticjob-agent"]}]},
            "status": _status(waiting="ErrImagePull"),
        }

    worker = pod_view(pod("demo-worker-3-1", "worker"))
    etcd = pod_view(pod("demo-etcd-2", "etcd", **{"elasticjob.dev/etcd-generation": "2"}))
    assert worker is not None and worker.start_failure is not None
    assert (worker.start_failure.slot, worker.start_failure.pod) == ("worker-3", "demo-worker-3-1")
    assert etcd is not None and etcd.start_failure is not None
    assert etcd.start_failure.slot == "etcd"


# -- track: one entry per slot -------------------------------------------------------------------


def _failure(pod: str, reason: str = "ErrImagePull", slot: str = "worker-0") -> StartFailure:
    return StartFailure(slot, pod, "trainer", reason, "m")


def _worker(name: str, phase: PodPhase, failure: StartFailure | None = None) -> PodView:
    return PodView(name, "worker", 0, 0, phase, start_failure=failure)


OLD = _failure("w-0-0", "StartError")


@pytest.mark.parametrize(
    ("current", "replicas", "expected"),
    [
        # The current pod shows a cause: that one, replacing the slot's older entry.
        ({0: _worker("w-0-1", PodPhase.PENDING, _failure("w-0-1"))}, 1, [_failure("w-0-1")]),
        # A replacement on its way (not created yet, or creating its container): kept.
        ({}, 1, [OLD]),
        ({0: _worker("w-0-1", PodPhase.PENDING)}, 1, [OLD]),
        # It started, or ran and failed for a reason of its own: dropped.
        ({0: _worker("w-0-1", PodPhase.RUNNING)}, 1, []),
        ({0: _worker("w-0-1", PodPhase.FAILED)}, 1, []),
        # The slot was scaled away: dropped.
        ({}, 0, []),
    ],
)
def test_an_entry_lives_until_its_slot_starts_or_goes(
    current: dict[int, PodView], replicas: int, expected: list[StartFailure]
) -> None:
    after = start_failures.track(
        [OLD], workers=current, replicas=replicas, etcd=None, managed_etcd=True
    )
    assert list(after) == expected


def test_the_managed_etcd_has_a_slot_and_external_etcd_none() -> None:
    etcd_failure = _failure("demo-etcd-0", slot="etcd")
    etcd = replace(_worker("demo-etcd-0", PodPhase.PENDING, etcd_failure), role="etcd")
    found = start_failures.track([], workers={}, replicas=1, etcd=etcd, managed_etcd=True)
    assert found == (etcd_failure,)
    assert start_failures.track(found, workers={}, replicas=1, etcd=None, managed_etcd=False) == ()


def test_an_event_for_each_new_pod_or_cause_but_not_for_the_pull_back_off_in_between() -> None:
    first = [_failure("w-0-0", "ErrImagePull")]
    assert start_failures.news([], first) == first
    assert start_failures.news(first, [_failure("w-0-0", "ImagePullBackOff")]) == []
    assert start_failures.news(first, [_failure("w-0-0", "ErrImagePull")]) == []
    changed = [_failure("w-0-0", "CreateContainerError")]
    assert start_failures.news(first, changed) == changed
    replaced = [_failure("w-0-1", "ErrImagePull")]
    assert start_failures.news(first, replaced) == replaced


def test_the_condition_names_the_first_cause_and_clears_once_none_is_left() -> None:
    two = [_failure("w-0-0"), _failure("w-1-0", slot="worker-1")]
    conds = start_failures.condition([], two, now=T0)
    cond = find_condition(conds, ConditionType.PODS_NOT_STARTING)
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("True", "ErrImagePull")
    assert (
        cond["message"]
        == "pod w-0-0 container trainer: ErrImagePull: m; 1 more pod(s) cannot start"
    )
    cleared = start_failures.condition(conds, [], now=T0 + 5)
    cond = find_condition(cleared, ConditionType.PODS_NOT_STARTING)
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "Started")
    assert start_failures.condition([], [], now=T0) == []


# -- plan: the stories ---------------------------------------------------------------------------


def _events(result: Any, reason: str) -> list[str]:
    return [e.message for e in result.events if e.reason == reason]


def test_a_missing_image_is_a_condition_one_event_then_a_stall_that_fails_the_job() -> None:
    cluster = Cluster()
    spec = job_spec(replicas=2, minNodes=2, stallTimeoutSeconds=30)
    status = step(cluster, JobStatus(), spec, T0).status
    cluster.run_all()
    cluster.set("demo-worker-1-0", phase=PodPhase.PENDING, node="node-a")
    pull = StartFailure("worker-1", "demo-worker-1-0", "trainer", "ErrImagePull", PULL)
    cluster.set("demo-worker-1-0", start_failure=pull)
    first = step(cluster, status, spec, T0 + 1, etcd_reachable=True)
    assert [f.pod for f in first.status.start_failures] == ["demo-worker-1-0"]
    cond = find_condition(first.status.conditions, ConditionType.PODS_NOT_STARTING)
    assert cond is not None and cond["reason"] == "ErrImagePull" and PULL in cond["message"]
    assert _events(first, "ErrImagePull") == [f"cannot start {pull.summary()}"]
    # One of two pods runs, minNodes is 2: the job stalls, named after the kubelet's cause.
    assert first.status.stall is not None and first.status.stall.reason == "PodsNotStarting"
    assert "demo-worker-1-0" in first.status.message and "ErrImagePull" in first.status.message

    backoff = replace(pull, reason="ImagePullBackOff", message=BACKOFF)
    cluster.set("demo-worker-1-0", start_failure=backoff)
    second = step(cluster, first.status, spec, T0 + 10, etcd_reachable=True)
    assert _events(second, "ImagePullBackOff") == [] and _events(second, "ErrImagePull") == []
    assert is_true(second.status.conditions, ConditionType.PODS_NOT_STARTING)
    assert second.status.phase is not Phase.FAILED

    done = step(cluster, second.status, spec, T0 + 40, etcd_reachable=True)
    assert (done.status.phase, done.status.reason) == (Phase.FAILED, "PodsNotStarting")
    assert "ImagePullBackOff" in done.status.message
    assert cluster.workers() == []  # the GPUs are released


def test_a_pod_that_cannot_start_while_min_nodes_run_is_named_without_a_stall() -> None:
    cluster = Cluster()
    spec = job_spec(replicas=2, minNodes=1)
    status = step(cluster, JobStatus(), spec, T0).status
    cluster.run_all()
    bad = StartFailure("worker-1", "demo-worker-1-0", "trainer", "CreateContainerConfigError", "m")
    cluster.set("demo-worker-1-0", phase=PodPhase.PENDING, start_failure=bad)
    result = step(cluster, status, spec, T0 + 1, etcd_reachable=True)
    assert result.status.stall is None
    assert is_true(result.status.conditions, ConditionType.PODS_NOT_STARTING)
    cluster.set("demo-worker-1-0", phase=PodPhase.RUNNING, start_failure=None)
    healed = step(cluster, result.status, spec, T0 + 2, etcd_reachable=True)
    assert healed.status.start_failures == ()
    assert not is_true(healed.status.conditions, ConditionType.PODS_NOT_STARTING)


def test_a_command_that_does_not_exist_is_named_in_each_replacement_and_the_final_failure() -> None:
    cluster = Cluster()
    spec = job_spec(replicas=1, minNodes=1, maxRestarts=1)
    status = step(cluster, JobStatus(), spec, T0).status
    cluster.run_all()
    messages: list[str] = []
    for attempt in range(3):
        name = f"demo-worker-0-{attempt}"
        error = StartFailure("worker-0", name, "trainer", "StartError", NO_EXEC)
        cluster.set(name, phase=PodPhase.FAILED, exit_code=128, start_failure=error)
        result = step(cluster, status, spec, T0 + 1 + attempt, etcd_reachable=True)
        status = result.status
        messages += _events(result, "WorkerReplaced")
        if status.phase is Phase.FAILED:
            break
        # The replacement is created and shows nothing yet: the cause is still listed.
        assert is_true(status.conditions, ConditionType.PODS_NOT_STARTING), status.conditions
        cluster.run_all()
        cluster.set(f"demo-worker-0-{attempt + 1}", phase=PodPhase.PENDING)
    assert all("could not start container trainer: StartError" in m for m in messages), messages
    assert len(messages) == 2
    final = step(cluster, status, spec, T0 + 10, etcd_reachable=True).status
    assert final.phase is Phase.FAILED, final
    assert "restart budget spent" in final.message
    assert 'exec: "elasticjob-agent": executable file not found' in final.message


def test_a_managed_etcd_that_cannot_start_stalls_the_job_under_its_own_name() -> None:
    cluster = Cluster()
    spec = job_spec(replicas=1, minNodes=1)
    status = step(cluster, JobStatus(), spec, T0).status
    pull = StartFailure("etcd", "demo-etcd-0", "etcd", "ErrImagePull", PULL)
    cluster.set("demo-etcd-0", start_failure=pull)
    result = step(cluster, status, spec, T0 + 1, etcd_reachable=False)
    assert result.status.stall is not None and result.status.stall.reason == "PodsNotStarting"
    assert result.status.message == f"the managed etcd cannot start: {pull.summary()}"
    assert result.status.etcd.generation == 0  # nothing to recreate: it never started


def test_start_failures_round_trip_through_the_stored_status_and_bad_entries_are_dropped() -> None:
    failure = StartFailure("worker-0", "demo-worker-0-0", "trainer", "ErrImagePull", PULL)
    stored = JobStatus(start_failures=(failure,)).to_json()
    assert JobStatus.from_json(stored).start_failures == (failure,)
    stored["startFailures"] = [{"slot": "worker-0"}, 7, {**failure.to_json(), "message": 5}]
    assert JobStatus.from_json(stored).start_failures == (replace(failure, message=""),)
    stored["startFailures"] = "junk"
    assert JobStatus.from_json(stored).start_failures == ()
