"""The failure policy and the automatic hang timeout on the operator's side (pure): the spec,
the agent's flags, what a pod's termination message says, and the decision in the status."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from elasticjob_agent.protocol.failure import WorkerFailure, termination_message
from elasticjob_agent.protocol.failure_policy import (
    Action,
    PolicyDecision,
    loads_policy,
    parse_policy,
)
from elasticjob_agent.protocol.hang_timeout import AutoSettings
from elasticjob_agent.protocol.health import HealthReport
from elasticjob_operator.core.conditions import ConditionType, find_condition, rfc3339
from elasticjob_operator.core.manifests import build_worker_pod
from elasticjob_operator.core.observed import PodPhase, PodView, pod_view
from elasticjob_operator.core.policy_status import newest_decision, pod_decision, with_condition
from elasticjob_operator.core.progress import GroupProgress, ProgressState, advance, group_progress
from elasticjob_operator.core.spec import SpecError, parse_spec
from elasticjob_operator.core.status import JobStatus

from tests.support.operator_model import JOB, RUN_ID, job_spec, raw_spec, report

RULES = [
    {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}},
    {"action": "Ignore", "onRootCause": {"pattern": r"costs \$(HOME) dollars"}},
]


def _flags(args: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)


def _trainer_args(**spec: Any) -> list[str]:
    pod = build_worker_pod(JOB, job_spec(**spec), index=0, attempt=0)
    (trainer,) = [c for c in pod["spec"]["containers"] if c["name"] == "trainer"]
    return list(trainer["args"])


def test_the_policy_goes_to_the_agents_inline_with_dollars_escaped() -> None:
    flags = _flags(_trainer_args(failurePolicy={"rules": RULES}))
    text = flags["failure-policy"]
    assert "$$(HOME)" in text  # Kubernetes turns $$ into $, and expands no $(HOME)
    assert loads_policy(text.replace("$$", "$"), "x") == parse_policy({"rules": RULES})
    assert "failure-policy" not in _flags(_trainer_args())


def test_the_automatic_timeout_goes_to_the_agents_as_its_conf() -> None:
    flags = _flags(_trainer_args(progress={"mode": "Auto", "factor": 3, "exemptSteps": 2}))
    assert flags["progress-timeout"] == "auto"
    assert AutoSettings.from_conf(flags["progress-auto-conf"]) == AutoSettings(factor=3, exempt=2)
    fixed = _flags(_trainer_args(progressTimeoutSeconds=60))
    assert fixed["progress-timeout"] == "60" and "progress-auto-conf" not in fixed


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {
                "failurePolicy": {
                    "rules": [{"action": "FailJob", "onRootCause": {"pattern": "(?=x)"}}]
                }
            },
            "spec.failurePolicy.rules[0].onRootCause.pattern",
        ),
        ({"failurePolicy": {"rules": [{"action": "Nope", "onReasons": ["hang"]}]}}, "action"),
        ({"failurePolicy": {"rules": [{"action": "FailJob"}]}}, "has no condition"),
        ({"progress": {"mode": "Auto"}, "progressTimeoutSeconds": 60}, "exclude each other"),
        ({"progress": {"mode": "Fixed"}}, "spec.progress.mode must be Auto"),
        ({"progress": {"mode": "Auto", "floorSeconds": 90, "ceilingSeconds": 30}}, "ceiling"),
    ],
)
def test_bad_policy_or_progress_is_a_spec_error_naming_the_field(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(raw_spec(**change))
    assert message in str(info.value)


def test_the_spec_parses_policy_and_auto_settings() -> None:
    spec = parse_spec(raw_spec(failurePolicy={"rules": RULES}, progress={"mode": "Auto"}))
    assert len(spec.failure_policy.rules) == 2
    assert spec.progress_auto == AutoSettings()
    plain = parse_spec(raw_spec())
    assert plain.failure_policy.rules == () and plain.progress_auto is None


def _exited_pod(message: str, reason: str = "Error", code: int = 14) -> PodView:
    pod = build_worker_pod(JOB, job_spec(), 0, 0)
    terminated = {"exitCode": code, "reason": reason, "message": message}
    pod["status"] = {
        "phase": "Failed",
        "containerStatuses": [{"name": "trainer", "state": {"terminated": terminated}}],
    }
    view = pod_view(pod)
    assert view is not None
    return view


def test_pod_view_reads_the_decision_and_oom_killed() -> None:
    failure = WorkerFailure(local_rank=0, time=1.0, rank=0, exit_code=3)
    decision = PolicyDecision(Action.FAIL_JOB, 0, "failure", 2, failure.summary(), 9.0)
    view = _exited_pod(termination_message(failure, decision=decision.to_json()).decode())
    assert view.policy_decision == decision and view.last_failure == failure
    assert not view.oom_killed
    assert _exited_pod("", reason="OOMKilled", code=137).oom_killed
    assert _exited_pod('x\n{"failurePolicy": {"rule": -1}}\n').policy_decision is None


def _decision(round_: int, at: float, action: Action = Action.IGNORE) -> PolicyDecision:
    return PolicyDecision(action, 0, "failure", round_, "rank 0 exited with code 4", at)


def _reporting(decision: PolicyDecision | None, run_id: str = RUN_ID) -> HealthReport:
    return replace(report("a", run_id=run_id), failure_policy=decision)


def test_the_newest_decision_is_the_latest_round_then_the_latest_time() -> None:
    old, new = _decision(1, 50.0), _decision(2, 40.5)
    assert newest_decision(None, {"a": _reporting(old)}, RUN_ID, []) == old
    assert newest_decision(old, {"a": _reporting(old)}, RUN_ID, []) is None  # nothing new
    assert newest_decision(old, {"a": _reporting(new)}, RUN_ID, []) == new
    assert newest_decision(new, {"a": _reporting(old)}, RUN_ID, []) is None
    assert newest_decision(None, {"a": _reporting(new, "other-run")}, RUN_ID, []) is None
    stored = JobStatus.from_json(JobStatus(failure_policy=new).to_json()).failure_policy
    assert stored is not None and stored != new  # the time is stored in whole seconds
    assert newest_decision(stored, {"a": _reporting(new)}, RUN_ID, []) is None
    exited = PodView("p", "worker", 0, 0, PodPhase.FAILED, policy_decision=_decision(3, 1.0))
    assert newest_decision(new, {}, RUN_ID, [exited]) == exited.policy_decision


def test_the_decision_is_a_condition_and_survives_the_status_round_trip() -> None:
    decision = _decision(2, 1_795_000_000.0, Action.FAIL_JOB)
    conds = with_condition([], decision, now=5.0)
    cond = find_condition(conds, ConditionType.FAILURE_POLICY)
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "FailJob"
    assert "failurePolicy.rules[0] (FailJob)" in cond["message"]
    status = JobStatus(failure_policy=decision)
    stored = json.loads(json.dumps(status.to_json()))
    assert stored["failurePolicy"]["time"] == rfc3339(decision.time)
    assert JobStatus.from_json(stored).failure_policy == decision
    assert JobStatus.from_json({"failurePolicy": {"rule": "x"}}).failure_policy is None


def test_the_operator_decides_a_pod_failure_it_alone_sees() -> None:
    policy = parse_policy(
        {
            "rules": [
                {"action": "FailJob", "onReasons": ["OOMKilled"]},
                {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [4]}},
            ]
        }
    )
    oom = PodView("p", "worker", 0, 0, PodPhase.FAILED, exit_code=137, oom_killed=True)
    decided = pod_decision(policy, oom, 0, 10.0)
    assert decided is not None and decided.action is Action.FAIL_JOB and decided.rule == 0
    assert decided.reason == "pod-failure" and "OOMKilled" in decided.root_cause
    flaky = replace(oom, exit_code=4, oom_killed=False)
    decided = pod_decision(policy, flaky, 0, 10.0)
    assert decided is not None and decided.action is Action.IGNORE and decided.rule == 1
    assert pod_decision(policy, replace(flaky, exit_code=1), 0, 10.0) is None


def test_status_progress_shows_the_timeout_in_force() -> None:
    reports = [
        replace(report("a"), last_step=5, last_step_at=100.0, progress_timeout_seconds=12.5),
        replace(report("b"), last_step=5, last_step_at=100.0, progress_timeout_seconds=20.0),
    ]
    seen = group_progress(reports, RUN_ID)
    assert seen == GroupProgress(5, 100.0, False, 20.0)
    state = advance(None, seen)
    assert state == ProgressState(5, 100.0, timeout_seconds=20.0)
    assert ProgressState.from_json(state.to_json() if state else None) == state
