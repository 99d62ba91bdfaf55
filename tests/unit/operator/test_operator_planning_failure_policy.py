"""plan() and the failure policy: a FailJob the agents applied ends the job naming the rule and
the root cause; the operator's own decisions on pod failures; Ignore is free."""

from __future__ import annotations

from dataclasses import replace

from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.failure_policy import Action, PolicyDecision
from elasticjob_operator.core import restarts
from elasticjob_operator.core.conditions import ConditionType, find_condition
from elasticjob_operator.core.observed import PodPhase
from elasticjob_operator.core.status import JobStatus, Phase

from tests.support.operator_model import T0, Cluster, job_spec, report, step

CAUSE = "rank 0 on demo-worker-0-0 exited with code 3"
FAIL_ON_3 = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]}


def _started(cluster: Cluster, **spec: object) -> JobStatus:
    result = step(cluster, JobStatus(), job_spec(**spec), T0)
    cluster.run_all()
    return step(cluster, result.status, job_spec(**spec), T0 + 1, etcd_reachable=True).status


def test_an_agents_fail_job_fails_the_job_naming_rule_and_cause() -> None:
    cluster = Cluster()
    spec = job_spec(maxRestarts=5, failurePolicy=FAIL_ON_3)
    status = _started(cluster, maxRestarts=5, failurePolicy=FAIL_ON_3)
    decision = PolicyDecision(Action.FAIL_JOB, 0, "failure", 1, CAUSE, T0 + 4)
    # The peer that found the rendezvous closed exits first: the verdict waits for the decision.
    cluster.set("demo-worker-1-0", phase=PodPhase.FAILED, exit_code=14, finished_at=T0 + 4)
    waiting = step(cluster, status, spec, T0 + 5, etcd_reachable=True)
    assert waiting.status.phase is not Phase.FAILED
    cluster.set(
        "demo-worker-0-0",
        phase=PodPhase.FAILED,
        exit_code=ExitCode.FAILURE_POLICY,
        finished_at=T0 + 5,
        policy_decision=decision,
    )
    result = step(cluster, waiting.status, spec, T0 + 6, etcd_reachable=True)
    assert (result.status.phase, result.status.reason) == (Phase.FAILED, "FailurePolicy")
    assert result.status.restarts == {}  # nothing spent
    assert "failurePolicy.rules[0] (FailJob)" in result.status.message
    assert CAUSE in result.status.message
    cond = find_condition(result.status.conditions, ConditionType.FAILURE_POLICY)
    assert cond is not None and cond["reason"] == "FailJob" and CAUSE in cond["message"]
    failed = find_condition(result.status.conditions, ConditionType.FAILED)
    assert failed is not None and failed["reason"] == "FailurePolicy"
    reasons = [e.reason for e in result.events]
    assert "FailurePolicy" in reasons and result.status.failure_policy == decision


def test_an_ignore_the_agents_counted_is_a_condition_and_an_event_once() -> None:
    cluster = Cluster()
    status = _started(cluster)
    decision = PolicyDecision(Action.IGNORE, 0, "failure", 1, CAUSE, T0 + 4)
    reports = {
        "demo-worker-0-0": replace(
            report("demo-worker-0-0", restarts={"ignored": 1}), failure_policy=decision
        )
    }
    first = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    assert first.status.restarts == {"ignored": 1}
    assert restarts.failures(first.status.restarts) == 0
    cond = find_condition(first.status.conditions, ConditionType.FAILURE_POLICY)
    assert cond is not None and cond["reason"] == "Ignore"
    assert [e.reason for e in first.events].count("FailurePolicy") == 1
    stored = JobStatus.from_json(first.status.to_json())  # as read back from the API
    again = step(cluster, stored, job_spec(), T0 + 6, etcd_reachable=True, reports=reports)
    assert "FailurePolicy" not in [e.reason for e in again.events]


def test_the_operator_applies_the_rules_to_a_pod_that_failed_before_joining() -> None:
    policy = {
        "rules": [
            {"action": "FailJob", "onReasons": ["OOMKilled"]},
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [4]}},
        ]
    }
    spec = job_spec(maxRestarts=0, failurePolicy=policy)
    cluster = Cluster()
    status = _started(cluster, maxRestarts=0, failurePolicy=policy)
    cluster.set("demo-worker-1-0", phase=PodPhase.FAILED, exit_code=4)
    ignored = step(cluster, status, spec, T0 + 5, etcd_reachable=True)
    assert ignored.status.restarts == {restarts.POD_IGNORED: 1}
    assert ignored.status.phase is not Phase.FAILED
    assert "demo-worker-1-1" in cluster.pods  # replaced, for free
    cluster.run_all()
    cluster.set("demo-worker-1-1", phase=PodPhase.FAILED, exit_code=137, oom_killed=True)
    failed = step(cluster, ignored.status, spec, T0 + 6, etcd_reachable=True)
    assert (failed.status.phase, failed.status.reason) == (Phase.FAILED, "FailurePolicy")
    assert "OOMKilled" in failed.status.message and "rules[0]" in failed.status.message
    assert failed.status.restarts == {restarts.POD_IGNORED: 1}
