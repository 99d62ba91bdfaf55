"""Stragglers: the spec, the pure verdict (a table), the status, the metric, and planning with
the in-memory model (``Report`` and ``Replace``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from elasticjob_agent.protocol.health import AgentState, HealthReport
from elasticjob_operator import metrics
from elasticjob_operator.core import planning, restarts
from elasticjob_operator.core.conditions import ConditionType, find_condition
from elasticjob_operator.core.manifests import build_worker_pod
from elasticjob_operator.core.observed import Observed, PodPhase, PodView
from elasticjob_operator.core.planning.stragglers import NODE_NAME_FIELD
from elasticjob_operator.core.spec import SpecError
from elasticjob_operator.core.status import JobStatus
from elasticjob_operator.core.stragglers import (
    MIN_COMPUTE_SECONDS,
    NodeFigure,
    judge,
    judge_preflight,
    node_figures,
)
from elasticjob_operator.core.stragglers_spec import (
    HealthSpec,
    StragglerAction,
    StragglerSpec,
    parse_health,
)
from elasticjob_operator.core.stragglers_status import MAX_ENTRIES, PREFLIGHT, StragglerEntry
from prometheus_client import REGISTRY

from tests.support.operator_model import JOB, RUN_ID, T0, Cluster, job_spec, report, step
from tests.support.operator_model import started as _started

SPEC = StragglerSpec(factor=1.5, window_seconds=60)


# --- spec ---------------------------------------------------------------------------------------


def test_health_defaults_when_absent() -> None:
    assert parse_health(None) == HealthSpec()
    assert parse_health({}) == HealthSpec()
    assert job_spec().health.stragglers == StragglerSpec(1.5, 60, StragglerAction.REPORT)
    parsed = job_spec(
        health={"stragglers": {"factor": 2, "windowSeconds": 30, "action": "Replace"}}
    )
    assert parsed.health.stragglers == StragglerSpec(2.0, 30, StragglerAction.REPLACE)


@pytest.mark.parametrize(
    ("health", "error"),
    [
        ("x", "spec.health must be an object"),
        ({"stragglers": []}, "spec.health.stragglers must be an object"),
        ({"stragglers": {"factor": 1}}, "factor must be a number above 1"),
        ({"stragglers": {"factor": True}}, "factor must be a number above 1"),
        ({"stragglers": {"factor": 101}}, "factor must be a number above 1"),
        ({"stragglers": {"windowSeconds": 5}}, "windowSeconds must be an integer from 10"),
        ({"stragglers": {"windowSeconds": 1.5}}, "windowSeconds must be an integer from 10"),
        ({"stragglers": {"action": "Kill"}}, "action must be Report or Replace"),
    ],
)
def test_bad_health_specs_name_the_field(health: object, error: str) -> None:
    with pytest.raises(SpecError, match=error):
        job_spec(health=health)


# --- the verdict --------------------------------------------------------------------------------


def _pod(name: str, node: str | None) -> PodView:
    return PodView(name, "worker", 0, 0, PodPhase.RUNNING, node=node)


def _figures(**seconds: float) -> dict[str, NodeFigure]:
    return {n: NodeFigure(n, (_pod(f"pod-{n}", n),), s) for n, s in seconds.items()}


ALL = frozenset({"a", "b", "c"})


def test_a_node_slow_for_the_window_is_a_straggler_and_recovers_after_one() -> None:
    slow = _figures(a=1.0, b=1.1, c=2.0)
    first = judge((), slow, ALL, SPEC, T0)
    (candidate,) = first.entries
    assert (candidate.node, candidate.detected_at, candidate.above_since) == ("c", None, T0)
    assert candidate.median_seconds == pytest.approx(1.05)
    assert first.detected == ()
    # Within the window the stored entry is kept as it is: nothing to write.
    assert judge(first.entries, slow, ALL, SPEC, T0 + 30).entries == first.entries
    found = judge(first.entries, slow, ALL, SPEC, T0 + 60)
    assert [e.node for e in found.detected] == ["c"] and found.entries[0].straggling
    assert found.entries[0].above_since == T0 and found.entries[0].detected_at == T0 + 60
    assert "node c (pod pod-c)" in found.detected[0].describe()
    fast = _figures(a=1.0, b=1.1, c=1.2)
    below = judge(found.entries, fast, ALL, SPEC, T0 + 70)
    assert below.entries[0].below_since == T0 + 70 and below.recovered == ()
    again = judge(below.entries, slow, ALL, SPEC, T0 + 80)  # slow again: the clock restarts
    assert again.entries[0].below_since is None and again.entries[0].straggling
    below = judge(again.entries, fast, ALL, SPEC, T0 + 90)
    assert judge(below.entries, fast, ALL, SPEC, T0 + 149).recovered == ()
    gone = judge(below.entries, fast, ALL, SPEC, T0 + 150)
    assert gone.entries == () and [e.node for e in gone.recovered] == ["c"]


def test_a_candidate_fast_again_within_the_window_is_forgotten() -> None:
    first = judge((), _figures(a=1.0, b=1.0, c=2.0), ALL, SPEC, T0)
    assert judge(first.entries, _figures(a=1.0, b=1.0, c=1.4), ALL, SPEC, T0 + 10).entries == ()


def test_two_nodes_compare_each_with_the_other() -> None:
    """With the job's median the slow one of two would be compared with half itself."""
    first = judge((), _figures(a=1.0, b=1.6), frozenset({"a", "b"}), SPEC, T0)
    assert [e.node for e in first.entries] == ["b"]
    assert first.entries[0].median_seconds == 1.0


@pytest.mark.parametrize(
    ("figures", "why"),
    [
        (_figures(a=5.0), "one node compares nothing"),
        (_figures(a=1.0, b=1.5, c=1.0), "exactly factor times is not above"),
        (_figures(a=0.0, b=MIN_COMPUTE_SECONDS / 2), "below the floor every difference is noise"),
        ({}, "no figures at all"),
    ],
)
def test_nothing_is_reported(figures: dict[str, NodeFigure], why: str) -> None:
    verdict = judge((), figures, ALL, SPEC, T0)
    assert verdict.entries == () and verdict.detected == (), why


def test_no_evidence_keeps_an_entry_and_a_node_gone_loses_it() -> None:
    straggler = StragglerEntry("c", "pod-c", 2.0, 1.0, T0, detected_at=T0 + 60)
    # c reported nothing in this step (restarting): no verdict either way.
    kept = judge((straggler,), _figures(a=1.0, b=1.0), ALL, SPEC, T0 + 100)
    assert kept.entries == (straggler,)
    # Too few figures to compare: kept too.
    assert judge((straggler,), _figures(c=1.0), ALL, SPEC, T0 + 100).entries == (straggler,)
    # c holds no pod of the job any more: gone, and never "recovered".
    gone = judge((straggler,), _figures(a=1.0, b=1.0), frozenset({"a", "b"}), SPEC, T0 + 100)
    assert gone.entries == () and gone.recovered == ()


def test_replaced_nodes_are_kept_newest_first_and_bounded() -> None:
    replaced = [
        StragglerEntry(f"n{i}", f"p{i}", 2.0, 1.0, T0, T0, replaced_at=T0 + i)
        for i in range(MAX_ENTRIES + 3)
    ]
    verdict = judge(replaced, _figures(a=1.0, b=1.0), frozenset({"a", "b"}), SPEC, T0 + 500)
    assert len(verdict.entries) == MAX_ENTRIES
    assert verdict.entries[0].node == f"n{MAX_ENTRIES + 2}"  # the newest first; the oldest go


def test_node_figures_take_the_median_of_a_nodes_pods_of_this_run() -> None:
    pods = [_pod("p1", "a"), _pod("p2", "a"), _pod("p3", "a"), _pod("p4", None)]
    pods.append(replace(_pod("p5", "b"), deleting=True))
    reports = {
        "p1": replace(report("p1"), compute_seconds=1.0),
        "p2": replace(report("p2"), compute_seconds=3.0),
        "p3": replace(report("p3", run_id="other"), compute_seconds=9.0),
        "p4": replace(report("p4"), compute_seconds=0.5),
        "p5": replace(report("p5"), compute_seconds=7.0),
    }
    figures = node_figures(Observed(workers=tuple(pods), reports=reports), pods, RUN_ID)
    assert {n: f.seconds for n, f in figures.items()} == {"a": 2.0, "p4": 0.5}
    assert [p.name for p in figures["a"].pods] == ["p1", "p2"]


# --- the status ---------------------------------------------------------------------------------


def test_entries_round_trip_through_the_status_and_bad_ones_are_dropped() -> None:
    entry = StragglerEntry("c", "pod-c", 2.0, 1.0, T0, T0 + 60, None, T0 + 61)
    status = JobStatus(stragglers=(entry,))
    stored = status.to_json()
    assert stored["stragglers"][0]["ratio"] == 2.0
    assert JobStatus.from_json(stored).stragglers == (entry,)
    assert JobStatus().to_json()["stragglers"] is None  # cleared, not an empty list
    bad = {**stored, "stragglers": [{"node": "x"}, "y", {**stored["stragglers"][0], "node": 3}]}
    assert JobStatus.from_json(bad).stragglers == ()


# --- planning with the in-memory model ----------------------------------------------------------


def _on_nodes(cluster: Cluster, nodes: dict[str, str]) -> None:
    for pod, node in nodes.items():
        cluster.set(pod, node=node)


def _reports(seconds: dict[str, float], round_: int = 1) -> dict[str, HealthReport]:
    return {
        pod: replace(report(pod, AgentState.RUNNING, round_=round_), compute_seconds=s)
        for pod, s in seconds.items()
    }


def test_report_sets_the_condition_an_event_and_the_status_and_writes_nothing_steady() -> None:
    cluster = Cluster()
    spec = job_spec(replicas=3)
    status = _started(cluster, replicas=3)
    pods = ["demo-worker-0-0", "demo-worker-1-0", "demo-worker-2-0"]
    _on_nodes(cluster, dict(zip(pods, ["node-a", "node-b", "node-c"], strict=True)))
    seconds = dict(zip(pods, [0.1, 0.11, 0.3], strict=True))
    first = step(cluster, status, spec, T0 + 10, etcd_reachable=True, reports=_reports(seconds))
    assert [e.node for e in first.status.stragglers] == ["node-c"]
    assert find_condition(first.status.conditions, ConditionType.STRAGGLER) is None
    quiet = step(
        cluster, first.status, spec, T0 + 40, etcd_reachable=True, reports=_reports(seconds)
    )
    assert quiet.status.stragglers == first.status.stragglers
    found = step(
        cluster, quiet.status, spec, T0 + 70, etcd_reachable=True, reports=_reports(seconds)
    )
    condition = find_condition(found.status.conditions, ConditionType.STRAGGLER)
    assert condition is not None and condition["status"] == "True"
    assert condition["reason"] == "SlowNode" and "node node-c" in condition["message"]
    (event,) = [e for e in found.events if e.reason == "Straggler"]
    assert event.type == "Warning" and "node node-c" in event.message
    assert not any(isinstance(a, planning.DeletePod) for a in found.actions)  # Report moves nothing
    steady = step(
        cluster, found.status, spec, T0 + 80, etcd_reachable=True, reports=_reports(seconds)
    )
    assert steady.status.stragglers == found.status.stragglers and steady.events == ()
    assert steady.status.restarts == found.status.restarts
    # Fast again for the window: recovered, the condition False, an Event.
    fast = {**seconds, pods[2]: 0.1}
    below = step(cluster, steady.status, spec, T0 + 90, etcd_reachable=True, reports=_reports(fast))
    done = step(cluster, below.status, spec, T0 + 150, etcd_reachable=True, reports=_reports(fast))
    assert done.status.stragglers == ()
    condition = find_condition(done.status.conditions, ConditionType.STRAGGLER)
    assert condition is not None and (condition["status"], condition["reason"]) == (
        "False",
        "Recovered",
    )
    assert [e.reason for e in done.events] == ["StragglerRecovered"]


def test_replace_moves_the_slow_nodes_pod_elsewhere_counted_as_straggler() -> None:
    cluster = Cluster()
    spec = job_spec(replicas=3, health={"stragglers": {"action": "Replace", "windowSeconds": 30}})
    status = _started(cluster, replicas=3)
    pods = ["demo-worker-0-0", "demo-worker-1-0", "demo-worker-2-0"]
    _on_nodes(cluster, dict(zip(pods, ["node-a", "node-b", "node-c"], strict=True)))
    seconds = dict(zip(pods, [0.1, 0.1, 0.4], strict=True))
    first = step(cluster, status, spec, T0 + 10, etcd_reachable=True, reports=_reports(seconds))
    found = step(
        cluster, first.status, spec, T0 + 40, etcd_reachable=True, reports=_reports(seconds)
    )
    assert found.commit_first  # the attempt and the count are written before the pods change
    assert found.status.restarts.get(restarts.STRAGGLER) == 1
    assert restarts.failures(found.status.restarts) == 0  # free: not a failure
    assert found.status.attempts[2] == 1
    assert planning.DeletePod("demo-worker-2-0") in found.actions
    (created,) = [a.manifest for a in found.actions if isinstance(a, planning.CreateObject)]
    assert created["metadata"]["name"] == "demo-worker-2-1"
    terms = created["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchFields": [{"key": NODE_NAME_FIELD, "operator": "NotIn", "values": ["node-c"]}]}
    ]
    (entry,) = found.status.stragglers
    assert entry.node == "node-c" and entry.replaced_at == T0 + 40 and not entry.straggling
    condition = find_condition(found.status.conditions, ConditionType.STRAGGLER)
    assert condition is not None and (condition["status"], condition["reason"]) == (
        "False",
        "Replaced",
    )
    assert "node node-c" in condition["message"]
    assert any(e.reason == "Straggler" and "replacing demo-worker-2-0" in e.message
               for e in found.events)  # fmt: skip
    # Later, another pod of the job fails before joining: its replacement avoids node-c too.
    assert "demo-worker-2-0" not in cluster.pods
    cluster.set("demo-worker-0-0", phase=PodPhase.FAILED, exit_code=1)
    later = step(cluster, found.status, spec, T0 + 50, etcd_reachable=True)
    (again,) = [a.manifest for a in later.actions if isinstance(a, planning.CreateObject)]
    assert again["metadata"]["name"] == "demo-worker-0-1"
    assert "node-c" in str(again["spec"]["affinity"])
    assert later.status.stragglers == found.status.stragglers  # the avoided node is kept


# --- the metric ---------------------------------------------------------------------------------


def test_the_metric_follows_the_status_per_node() -> None:
    labels = {"namespace": "ns-s", "job": "j-s"}
    straggler = StragglerEntry("node-c", "p", 2.0, 1.0, T0, detected_at=T0 + 60)
    candidate = StragglerEntry("node-d", "q", 2.0, 1.0, T0)
    metrics.publish("ns-s", "j-s", JobStatus(stragglers=(straggler, candidate)))
    value = REGISTRY.get_sample_value
    assert value("elasticjob_node_straggler", {**labels, "node": "node-c"}) == 1
    assert value("elasticjob_node_straggler", {**labels, "node": "node-d"}) == 0
    metrics.publish("ns-s", "j-s", JobStatus(stragglers=(candidate,)))
    assert value("elasticjob_node_straggler", {**labels, "node": "node-c"}) is None
    metrics.forget("ns-s", "j-s")
    assert value("elasticjob_node_straggler", {**labels, "node": "node-d"}) is None


# --- the pre-flight check -----------------------------------------------------------------------


def test_preflight_is_off_by_default_and_passed_to_the_agents() -> None:
    assert not job_spec().health.preflight
    spec = job_spec(health={"preflight": True})
    assert spec.health.preflight and spec.health.stragglers == StragglerSpec()
    pod = build_worker_pod(JOB, spec, 0, 0)
    assert "--preflight" in pod["spec"]["containers"][0]["args"]
    assert (
        "--preflight"
        not in build_worker_pod(JOB, job_spec(), 0, 0)["spec"]["containers"][0]["args"]
    )
    with pytest.raises(SpecError, match=r"spec\.health\.preflight must be true or false"):
        job_spec(health={"preflight": "yes"})


def test_a_slow_preflight_is_a_straggler_at_once_and_stays_while_the_node_holds_a_pod() -> None:
    checks = _figures(a=0.1, b=0.12, c=0.5)
    verdict = judge_preflight((), checks, SPEC, T0)
    (found,) = verdict.detected
    assert (found.node, found.check, found.detected_at) == ("c", PREFLIGHT, T0)
    assert "took 0.500 s for the pre-flight check" in found.describe()
    assert judge_preflight(verdict.entries, checks, SPEC, T0 + 5).detected == ()  # once
    # Training timings say c is fine: the check's verdict stays while c holds a pod.
    fine = judge(verdict.entries, _figures(a=1.0, b=1.0, c=1.0), ALL, SPEC, T0 + 500)
    assert fine.entries == verdict.entries and fine.recovered == ()
    gone = judge(verdict.entries, _figures(a=1.0, b=1.0), frozenset({"a", "b"}), SPEC, T0 + 500)
    assert gone.entries == ()
    assert judge_preflight((), _figures(a=0.1), SPEC, T0).entries == ()  # one node: nothing
    assert JobStatus.from_json(JobStatus(stragglers=verdict.entries).to_json()).stragglers == (
        verdict.entries
    )


def test_replace_swaps_a_node_that_failed_its_preflight_before_training() -> None:
    cluster = Cluster()
    spec = job_spec(replicas=3, health={"preflight": True, "stragglers": {"action": "Replace"}})
    status = _started(cluster, replicas=3)
    pods = ["demo-worker-0-0", "demo-worker-1-0", "demo-worker-2-0"]
    _on_nodes(cluster, dict(zip(pods, ["node-a", "node-b", "node-c"], strict=True)))
    waiting = {
        pod: replace(
            report(pod, AgentState.RENDEZVOUS, round_=None, waiting_since=T0),
            preflight_seconds=s,
        )
        for pod, s in zip(pods, [0.5, 0.1, 0.11], strict=True)
    }
    result = step(cluster, status, spec, T0 + 5, etcd_reachable=True, reports=waiting)
    assert planning.DeletePod("demo-worker-0-0") in result.actions
    assert result.status.restarts.get(restarts.STRAGGLER) == 1
    (entry,) = result.status.stragglers
    assert (entry.node, entry.check, entry.replaced_at) == ("node-a", PREFLIGHT, T0 + 5)
    (event,) = [e for e in result.events if e.reason == "Straggler"]
    assert "pre-flight check" in event.message and "node node-a" in event.message


def test_replacing_a_spare_that_failed_its_preflight_restarts_nothing() -> None:
    cluster = Cluster()
    spec = job_spec(
        replicas=2, spares=1, health={"preflight": True, "stragglers": {"action": "Replace"}}
    )
    status = _started(cluster, replicas=2)
    status = step(cluster, status, spec, T0 + 2, etcd_reachable=True).status  # the spare's pod
    cluster.run_all()
    pods = ["demo-worker-0-0", "demo-worker-1-0", "demo-worker-2-0"]
    _on_nodes(cluster, dict(zip(pods, ["node-a", "node-b", "node-c"], strict=True)))
    cluster.set("demo-worker-2-0", stood_by=True)
    reports = {
        pod: replace(report(pod, AgentState.STANDBY if i == 2 else AgentState.RUNNING),
                     preflight_seconds=s)
        for i, (pod, s) in enumerate(zip(pods, [0.1, 0.1, 0.9], strict=True))
    }  # fmt: skip
    result = step(cluster, status, spec, T0 + 5, etcd_reachable=True, reports=reports)
    assert planning.DeletePod("demo-worker-2-0") in result.actions
    assert restarts.STRAGGLER not in result.status.restarts
    assert result.status.stragglers[0].node == "node-c"
