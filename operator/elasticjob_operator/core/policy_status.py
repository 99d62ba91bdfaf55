"""The failure policy in the job's status (pure): which decision is the latest, the condition
``FailurePolicy`` and its Event, and the operator's own decision on a pod failure.

The agents decide the failures they see and report the decision they counted (health report
``failurePolicy``; on a ``FailJob`` exit, the termination message). The operator decides only what
no agent sees: a worker pod that failed before its agent joined a round (``pod-failure``), with
the container's exit code, its termination message's root cause and the kubelet's ``OOMKilled``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from elasticjob_agent.protocol.failure_policy import (
    Action,
    FailureFacts,
    FailurePolicy,
    PolicyDecision,
    decision_record,
    root_cause_text,
)
from elasticjob_agent.protocol.health import HealthReport
from elasticjob_agent.protocol.restarts import POD_FAILURE

from .conditions import ConditionType, set_condition
from .observed import PodView

CONDITION_REASONS = {Action.FAIL_JOB: "FailJob", Action.IGNORE: "Ignore", Action.COUNT: "Count"}


def newest_decision(
    stored: PolicyDecision | None,
    reports: Mapping[str, HealthReport],
    run_id: str,
    pods: Iterable[PodView],
) -> PolicyDecision | None:
    """The decision reported for ``run_id`` (health reports, termination messages of exited
    worker pods) that is newer than ``stored`` (a later round, else a later time), or ``None``."""
    seen = [r.failure_policy for r in reports.values() if r.run_id == run_id]
    seen += [p.policy_decision for p in pods]
    best = stored
    for decision in seen:
        if decision is not None and _newer(decision, best):
            best = decision
    return None if best is stored else best


def _newer(decision: PolicyDecision, than: PolicyDecision | None) -> bool:
    if than is None:
        return True
    # Whole seconds: the status keeps the time as RFC 3339 (a stored decision reads back so).
    return (decision.round, int(decision.time)) > (than.round, int(than.time))


def pod_decision(
    policy: FailurePolicy, pod: PodView, round_: int, now: float
) -> PolicyDecision | None:
    """The policy's decision on a worker pod that failed before its agent joined a round
    (``pod-failure``); ``None`` when no rule matches."""
    if not policy.rules:
        return None
    failure = pod.last_failure
    cause = root_cause_text(failure) if failure is not None else ""
    if failure is None:
        cause = f"pod {pod.name} failed with exit code {pod.exit_code}"
        if pod.oom_killed:
            cause += " (OOMKilled)"
    facts = FailureFacts(POD_FAILURE, pod.exit_code, cause, oom_killed=pod.oom_killed)
    summary = f"pod {pod.name}: " + (cause.split("\n", 1)[0] if failure is not None else cause)
    return decision_record(policy.decide(facts), facts, round_, now, summary)


def with_condition(
    conditions: Sequence[Mapping[str, Any]], decision: PolicyDecision, now: float
) -> list[dict[str, Any]]:
    """``conditions`` with ``FailurePolicy`` set to the decision (True, reason the action)."""
    return set_condition(
        conditions,
        ConditionType.FAILURE_POLICY,
        True,
        CONDITION_REASONS[decision.action],
        decision.summary()[:1024],
        now=now,
    )
