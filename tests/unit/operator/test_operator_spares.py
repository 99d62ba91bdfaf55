"""Hot spares in ``plan()``: the pod count, ``status.readySpares``, the ``SparesReady``
condition, and a spare's loss never counted as a restart."""

from __future__ import annotations

from dataclasses import replace

import pytest
from elasticjob_agent.protocol.health import AgentState, HealthReport
from elasticjob_operator.core import kueue, planning, spares
from elasticjob_operator.core.conditions import ConditionType, find_condition
from elasticjob_operator.core.spec import SpecError, parse_job
from elasticjob_operator.core.status import JobStatus

from tests.support.operator_model import T0, Cluster, job_spec, raw_spec, report, step

FIXED = {"replicas": 2, "minNodes": 2, "maxNodes": 2, "spares": 1}
PODS = ("demo-worker-0-0", "demo-worker-1-0", "demo-worker-2-0")


def _spare(name: str, warm: int = 2, pool: int = 2) -> HealthReport:
    return replace(
        report(name, AgentState.STANDBY, round_=None, world_size=None),
        warm_workers=warm,
        warm_pool=pool,
    )


def _running(cluster: Cluster, status: JobStatus, spare_warm: int = 2) -> planning.Plan:
    reports = {n: report(n, round_=1) for n in PODS[:2]}
    reports[PODS[2]] = _spare(PODS[2], warm=spare_warm)
    return step(cluster, status, job_spec(**FIXED), T0 + 3, etcd_reachable=True, reports=reports)


def _started(cluster: Cluster) -> JobStatus:
    spec = job_spec(**FIXED)
    status = step(cluster, JobStatus(), spec, T0).status
    cluster.run_all()
    return step(cluster, status, spec, T0 + 1, etcd_reachable=True).status


def test_the_job_keeps_replicas_plus_spares_pods() -> None:
    cluster = Cluster()
    _started(cluster)
    assert [p.name for p in cluster.workers()] == list(PODS)


def test_ready_spares_and_the_condition() -> None:
    cluster = Cluster()
    status = _started(cluster)
    warming = _running(cluster, status, spare_warm=1)
    assert warming.status.ready_spares == 0
    cond = find_condition(warming.status.conditions, ConditionType.SPARES_READY)
    assert cond is not None and cond["status"] == "False"
    assert cond["reason"] == spares.STARTING
    ready = _running(cluster, warming.status)
    assert ready.status.ready_spares == 1
    assert ready.status.ready_nodes == 2  # the spare is not in the group
    assert ready.status.replicas == 2  # the scale subresource counts the group's pods
    cond = find_condition(ready.status.conditions, ConditionType.SPARES_READY)
    assert cond is not None and cond["status"] == "True"
    assert cond["reason"] == spares.READY
    assert cluster.pods[PODS[2]].stood_by and not cluster.pods[PODS[2]].joined


def test_a_spare_that_cannot_be_scheduled_says_why_and_holds_nothing_back() -> None:
    cluster = Cluster()
    status = _started(cluster)
    cluster.set(PODS[2], unschedulable="0/3 nodes are available: 3 Insufficient nvidia.com/gpu")
    reports = {n: report(n, round_=1) for n in PODS[:2]}
    result = step(cluster, status, job_spec(**FIXED), T0 + 3, etcd_reachable=True, reports=reports)
    assert result.status.phase.value == "Running"
    assert result.status.stall is None
    assert result.status.ready_spares == 0
    cond = find_condition(result.status.conditions, ConditionType.SPARES_READY)
    assert cond is not None and cond["status"] == "False"
    assert cond["reason"] == spares.UNSCHEDULABLE
    assert "Insufficient nvidia.com/gpu" in cond["message"] and PODS[2] in cond["message"]
    assert [e.reason for e in result.events].count(spares.UNSCHEDULABLE) == 1
    again = step(
        cluster, result.status, job_spec(**FIXED), T0 + 4, etcd_reachable=True, reports=reports
    )
    assert spares.UNSCHEDULABLE not in [
        e.reason for e in again.events
    ]  # one Event, not one per step


def test_a_lost_spare_is_replaced_and_counts_no_restart() -> None:
    cluster = Cluster()
    status = _running(cluster, _started(cluster)).status
    cluster.set(PODS[2], node="node-b")
    result = step(
        cluster,
        status,
        job_spec(**FIXED),
        T0 + 5,
        etcd_reachable=True,
        lost_nodes=frozenset({"node-b"}),
    )
    assert ("demo-worker-2-1") in cluster.pods
    assert result.status.restarts == {}
    (event,) = [e for e in result.events if e.reason == "WorkerReplaced"]
    assert "a hot spare: no restart" in event.message


def test_a_lost_member_is_left_to_the_agents_to_count_and_its_replacement_is_the_next_spare() -> (
    None
):
    cluster = Cluster()
    status = _running(cluster, _started(cluster)).status
    cluster.set(PODS[0], node="node-b")
    result = step(
        cluster,
        status,
        job_spec(**FIXED),
        T0 + 5,
        etcd_reachable=True,
        lost_nodes=frozenset({"node-b"}),
    )
    assert "demo-worker-0-1" in cluster.pods
    assert result.status.restarts == {}  # the agents count it (failure), once


def test_scaling_keeps_the_spares_beyond_the_replicas() -> None:
    cluster = Cluster()
    spec = job_spec(replicas=2, minNodes=1, maxNodes=4, spares=1)
    status = step(cluster, JobStatus(), spec, T0).status
    up = step(cluster, status, replace(spec, replicas=3), T0 + 1)
    assert len(cluster.workers()) == 4
    step(cluster, up.status, replace(spec, replicas=1), T0 + 2)
    assert sorted(p.name for p in cluster.workers()) == ["demo-worker-0-0", "demo-worker-1-0"]


def test_no_spares_no_condition() -> None:
    cluster = Cluster()
    spec = job_spec()
    status = step(cluster, JobStatus(), spec, T0).status
    assert find_condition(status.conditions, ConditionType.SPARES_READY) is None
    assert status.to_json()["readySpares"] == 0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "spec.spares must be >= 0, got -1"),
        (101, "spec.spares must be <= 100, got 101"),
        ("1", "spec.spares must be an integer"),
    ],
)
def test_bad_spares_are_refused_naming_the_field(value: object, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        job_spec(spares=value)


def test_spares_are_kueue_extras_held_while_the_core_is_queued() -> None:
    spec = parse_job(
        {"spec": raw_spec(replicas=2, minNodes=2, maxNodes=2, spares=1, queueName="q")}
    )
    assert not kueue.is_core(spec, 2)
    admission = kueue.decide(spec, {}, [], frozenset())
    assert 2 in admission.hold
