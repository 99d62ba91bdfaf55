"""Node conditions in ``plan()``: a pod on a node with a bad condition moves off it (at once
with a ready spare, without checkpoints or outside the group; else at the next checkpoint),
never counted as a failure, and the job's new worker pods keep off every bad node."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast

import pytest
from elasticjob_operator import handlers
from elasticjob_operator.core import planning, quarantine
from elasticjob_operator.core.node_conditions import (
    MAX_CONDITION_MESSAGE,
    NODE_CONDITION,
    NodeCondition,
    bad_conditions,
)
from elasticjob_operator.core.spec import JobSpec
from elasticjob_operator.core.status import JobStatus
from elasticjob_operator.settings import OperatorSettings

from tests.support.operator_model import JOB, T0, Cluster, job_spec, report, started

POD = "demo-worker-1-0"
GPU = NodeCondition("GpuUnhealthy", T0 + 2, "Xid 79")
BAD = {"node-b": (GPU,)}
CHECKPOINTED = {"checkpoint": {"memoryLimit": "1Gi", "stepsKept": 3}}


def _node(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "n"}, "status": {"conditions": list(conditions)}}


@pytest.mark.parametrize(
    ("node", "found"),
    [
        (_node({"type": "GpuUnhealthy", "status": "True"}), [("GpuUnhealthy", None, "")]),
        (_node({"type": "GpuUnhealthy", "status": "False"}), []),
        (_node({"type": "GpuUnhealthy", "status": "Unknown"}), []),
        (_node({"type": "Ready", "status": "True"}), []),
        (
            _node(
                {
                    "type": "KernelDeadlock",
                    "status": "True",
                    "lastTransitionTime": "2023-11-14T22:13:22Z",
                    "message": "task blocked",
                }
            ),
            [("KernelDeadlock", T0 + 2, "task blocked")],
        ),
        (_node({"type": "GpuUnhealthy", "status": "True", "lastTransitionTime": "soon"}), None),
        (_node("junk", {"type": 3, "status": "True"}), []),  # type: ignore[arg-type]
        ({"status": None}, []),
        ({}, []),
    ],
)
def test_a_nodes_bad_conditions(node: dict[str, Any], found: list[Any] | None) -> None:
    got = bad_conditions(node, ("GpuUnhealthy", "KernelDeadlock"))
    if found is None:  # an unreadable time: the condition still counts, undated
        assert [(c.type, c.since) for c in got] == [("GpuUnhealthy", None)]
        return
    assert [(c.type, c.since, c.message) for c in got] == found
    assert bad_conditions(node, ()) == ()


def test_a_long_message_is_capped() -> None:
    node = _node({"type": "GpuUnhealthy", "status": "True", "message": "x" * 5000})
    [condition] = bad_conditions(node, ("GpuUnhealthy",))
    assert len(condition.message) == MAX_CONDITION_MESSAGE


def test_the_condition_types_are_an_operator_setting() -> None:
    assert OperatorSettings.from_env({}).node_conditions == ()
    settings = OperatorSettings.from_env(
        {"ELASTICJOB_BAD_NODE_CONDITIONS": "GpuUnhealthy, KernelDeadlock,"}
    )
    assert settings.node_conditions == ("GpuUnhealthy", "KernelDeadlock")


def _step(
    cluster: Cluster, status: JobStatus, spec: JobSpec, now: float, **observed: Any
) -> planning.Plan:
    result = planning.plan(
        JOB,
        spec=spec,
        generation=1,
        status=status,
        observed=cluster.observed(etcd_reachable=True, **observed),
        now=now,
        services=frozenset(cluster.services),
    )
    cluster.apply(result)
    return result


def _in_group(spec: JobSpec | None = None) -> tuple[Cluster, JobStatus, JobSpec]:
    spec = spec or job_spec()
    cluster = Cluster()
    status = started(cluster)
    cluster.set("demo-worker-0-0", node="node-a", joined=True)
    cluster.set(POD, node="node-b", joined=True)
    return cluster, status, spec


def _created_pods(plan: planning.Plan) -> list[Any]:
    return [
        a.manifest
        for a in plan.actions
        if isinstance(a, planning.CreateObject) and a.manifest["kind"] == "Pod"
    ]


def _kept_off(manifest: Any) -> list[str]:
    terms = manifest["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return [v for t in terms for f in t["matchFields"] for v in f["values"]]


def test_without_checkpoints_a_pod_in_the_group_moves_at_once_and_counts_no_failure() -> None:
    cluster, status, spec = _in_group()
    result = _step(cluster, status, spec, T0 + 5, node_conditions=BAD)
    assert result.commit_first
    assert result.status.attempts[1] == 1
    assert planning.DeletePod(POD) in result.actions
    [created] = _created_pods(result)
    assert created["metadata"]["name"] == "demo-worker-1-1"
    assert _kept_off(created) == ["node-b"]
    assert result.status.restarts == status.restarts  # its agent counts it (preemption)
    [entry] = result.status.avoided_nodes
    assert (entry.node, entry.reason, entry.avoided, entry.since, entry.failures) == (
        "node-b",
        quarantine.NODE_CONDITION,
        True,
        T0 + 2,
        0,
    )
    assert entry.message == "GpuUnhealthy: Xid 79"
    reasons = [e.reason for e in result.events]
    assert reasons.count("BadNodeCondition") == 1 and reasons.count("NodeConditionMove") == 1
    [moved] = [e for e in result.events if e.reason == "NodeConditionMove"]
    assert "demo-worker-1-0 on node node-b (GpuUnhealthy: Xid 79)" in moved.message
    assert "no checkpoints" in moved.message
    # Nothing more happens while the condition lasts: the new pod is elsewhere.
    cluster.set("demo-worker-1-1", node="node-c")
    again = _step(cluster, result.status, spec, T0 + 7, node_conditions=BAD)
    assert not [e for e in again.events if e.reason.startswith(("BadNode", "NodeCondition"))]
    assert again.status.avoided_nodes == result.status.avoided_nodes


def test_a_pod_outside_the_group_moves_at_once_and_the_operator_counts_it() -> None:
    cluster, status, spec = _in_group(job_spec(**CHECKPOINTED))
    cluster.set(POD, joined=False)
    result = _step(cluster, status, spec, T0 + 5, node_conditions=BAD)
    assert result.status.attempts[1] == 1
    assert result.status.restarts.get(NODE_CONDITION) == 1
    assert sum(result.status.restarts.values()) == 1  # a free reason: no failure
    [moved] = [e for e in result.events if e.reason == "NodeConditionMove"]
    assert f"restart reason {NODE_CONDITION}" in moved.message


def test_with_checkpoints_a_pod_waits_for_a_newer_one() -> None:
    cluster, status, spec = _in_group(job_spec(**CHECKPOINTED))

    def reports(saved: int | None) -> dict[str, Any]:
        return {n: replace(report(n), last_saved_step=saved) for n in ("demo-worker-0-0", POD)}

    waiting = _step(cluster, status, spec, T0 + 5, node_conditions=BAD, reports=reports(40))
    assert 1 not in waiting.status.attempts or waiting.status.attempts[1] == 0
    assert not _created_pods(waiting)
    [entry] = waiting.status.avoided_nodes
    assert entry.saved_step == 40
    [said] = [e for e in waiting.events if e.reason == "BadNodeCondition"]
    assert POD in said.message
    still = _step(cluster, waiting.status, spec, T0 + 9, node_conditions=BAD, reports=reports(40))
    assert not _created_pods(still) and not still.events
    moved = _step(cluster, still.status, spec, T0 + 12, node_conditions=BAD, reports=reports(50))
    assert moved.status.attempts[1] == 1
    [created] = _created_pods(moved)
    assert _kept_off(created) == ["node-b"]
    [event] = [e for e in moved.events if e.reason == "NodeConditionMove"]
    assert "checkpoint step 50 was saved since the condition" in event.message


def test_with_a_ready_spare_a_pod_moves_at_once_though_checkpoints_are_kept() -> None:
    cluster, status, spec = _in_group(job_spec(**CHECKPOINTED))
    status = status.evolve(ready_spares=1)
    result = _step(cluster, status, spec, T0 + 5, node_conditions=BAD)
    assert result.status.attempts[1] == 1
    [event] = [e for e in result.events if e.reason == "NodeConditionMove"]
    assert "a ready spare takes its place" in event.message


def test_a_condition_that_is_over_frees_the_node() -> None:
    cluster, status, spec = _in_group(job_spec(**CHECKPOINTED))
    waiting = _step(cluster, status, spec, T0 + 5, node_conditions=BAD)
    assert waiting.status.avoided_nodes
    over = _step(cluster, waiting.status, spec, T0 + 9)
    assert over.status.avoided_nodes == ()
    [event] = [e for e in over.events if e.reason == "NodeConditionCleared"]
    assert event.message == "node node-b: GpuUnhealthy: Xid 79 is over"
    assert over.status.attempts.get(1, 0) == 0  # the pod stayed


def test_new_pods_keep_off_every_bad_node_and_every_avoided_one() -> None:
    cluster = Cluster()
    avoided = quarantine.AvoidedNode("node-x", quarantine.FAILURES, 2, T0, True)
    watched = quarantine.AvoidedNode("node-y", quarantine.FAILURES, 1, T0, False)
    status = JobStatus(avoided_nodes=(avoided, watched))
    result = _step(
        cluster, status, job_spec(), T0, node_conditions={"node-z": (GPU,), "node-a": (GPU,)}
    )
    created = [m for m in _created_pods(result) if "-worker-" in m["metadata"]["name"]]
    assert len(created) == 2
    assert all(_kept_off(m) == ["node-a", "node-x", "node-z"] for m in created)
    [etcd] = [m for m in _created_pods(result) if "-etcd-" in m["metadata"]["name"]]
    assert "matchFields" not in str(etcd)  # only the workers are the job's to move
    # Pods on no bad node are not listed and do not move.
    assert [e.node for e in result.status.avoided_nodes] == ["node-x", "node-y"]


async def test_the_node_index_says_when_a_node_turns_healthy_again() -> None:
    """kopf keeps an object's last indexed value when the handler returns ``None``: the index
    handler returns an empty entry for a healthy node, so a condition that is over is over."""
    memo = SimpleNamespace(settings=OperatorSettings(node_conditions=("GpuUnhealthy",)))
    bad = _node({"type": "GpuUnhealthy", "status": "True"})
    healthy = _node({"type": "GpuUnhealthy", "status": "False"})
    index = cast(Any, handlers.elasticjob_bad_nodes)  # kopf's decorator types it for kopf
    got = await index(body=bad, name="n", memo=memo)
    assert [c.type for c in got["n"]] == ["GpuUnhealthy"]
    got = await index(body=healthy, name="n", memo=memo)
    assert got == {"n": ()}
