"""Carrying out a group restart: count it once for the job (or let the failure policy end the
job), stop the workers, and end the job when the budget is spent. What is counted is decided by
the pure ``restart_policy`` and ``decision.after_policy``."""

from __future__ import annotations

import time

from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.failure_policy import PolicyDecision, decision_record, facts_of
from elasticjob_agent.protocol.health import AgentState
from elasticjob_agent.protocol.restarts import RestartCounts, RestartReason
from elasticjob_agent.supervision.context import AgentExit, Supervision
from elasticjob_agent.supervision.decision import after_policy
from elasticjob_agent.supervision.exits import close_rendezvous
from elasticjob_agent.supervision.probes import await_peer_count, round_state_lost
from elasticjob_agent.supervision.restart_counter import Recorded
from elasticjob_agent.supervision.restart_policy import (
    judge_budget,
    plan_restart,
    suspects_round_loss,
)


def restart(sup: Supervision, observed: RestartReason) -> None:
    """Restart the group for ``observed``; raises ``AgentExit`` when the job ends instead."""
    s = sup.settings
    sup.status.update(state=AgentState.RESTARTING)
    counts: RestartCounts | None = None
    round_lost = False
    if suspects_round_loss(observed):
        # Reading waits for etcd (with the counter's patience) before we ask about the round.
        counts = sup.etcd(sup.counter.read)
        round_lost = round_state_lost(sup)
    plan = plan_restart(observed, round_lost)
    reason = plan.reason
    decision: PolicyDecision | None = None
    if plan.agent_counts and reason.spends_budget and s.failure_policy.rules:
        reason, decision = _apply_policy(sup, reason)  # a FailJob ends the job here
    if plan.agent_counts:
        # Count first, then stop: peers racing to count the same round see our reason.
        counted_as = reason
        recorded = sup.etcd(lambda: sup.counter.record(sup.round, counted_as))
        if decision is not None and recorded.counted:
            sup.status.update(failure_policy=decision)
            sup.decision = decision.to_json()
            sup.write_termination()
    else:
        if counts is None:
            counts = sup.etcd(sup.counter.read)
        recorded = Recorded(False, reason, counts)
    codes = sup.workers.stop(s.shutdown_timeout)
    counts = recorded.counts
    sup.counts = counts
    sup.metrics.set_restarts(counts.full())
    sup.status.update(restarts_by_reason=counts.full())
    sup.events.info(
        "group_stopped",
        reason=reason.value,
        counted_reason=recorded.reason.value,
        counted_here=recorded.counted,
        restarts_total=counts.total,
        restarts_spent=counts.spent,
        exit_codes=codes,
    )
    verdict = judge_budget(counts, s.max_restarts)
    if verdict.exhausted:
        spent = counts
        sup.etcd(lambda: sup.counter.mark_budget_spent(spent, s.max_restarts))
        # The operator may never poll this count (we exit now).
        sup.write_termination(final=True)
        close_rendezvous(sup)
        raise AgentExit(ExitCode.MAX_RESTARTS_EXCEEDED, verdict.detail)


def _apply_policy(
    sup: Supervision, reason: RestartReason
) -> tuple[RestartReason, PolicyDecision | None]:
    """The failure policy's verdict on this round's failure, as the reason to count it under
    and the decision to report (``None``: no rule matched). One decision per round for the
    job: the first agent to count the round decides (``record``), so an agent that only saw
    a peer's lost connection first gives the peer that saw the cause time to decide."""
    cause = sup.round_cause
    if cause is not None and cause.is_consequence():
        await_peer_count(sup)  # (a lost member was given that time already)
    facts = facts_of(reason.value, cause, oom_killed=cause is not None and cause.oom_killed)
    verdict = sup.settings.failure_policy.decide(facts)
    summary = None if cause is None else cause.summary()
    decision = decision_record(verdict, facts, sup.round, time.time(), summary)
    if decision is None:
        return reason, None
    sup.events.warning(
        "failure_policy",
        rule=decision.rule,
        action=decision.action.value,
        reason=reason.value,
        root_cause=decision.root_cause[:500],
    )
    counted, fail_job = after_policy(reason, decision.action)
    if fail_job:
        _fail_by_policy(sup, reason, decision)
        return reason, None  # a peer decided the round first: its decision stands
    return counted, decision


def _fail_by_policy(sup: Supervision, reason: RestartReason, decision: PolicyDecision) -> None:
    """``FailJob``: claim the round without counting it, say why the rendezvous closes,
    close it and exit; peers find it closed and exit the same way. Returns only when a peer
    had already counted the round (its decision stands)."""
    claimed = sup.etcd(lambda: sup.counter.record(sup.round, reason, spend=False))
    if not claimed.counted:
        sup.events.info("failure_policy_decided_by_peer", counted_reason=claimed.reason.value)
        return
    sup.status.update(failure_policy=decision)
    sup.etcd(lambda: sup.counter.mark_failed_by_policy(decision))
    sup.decision = decision.to_json()
    sup.write_termination()
    close_rendezvous(sup)
    raise AgentExit(ExitCode.FAILURE_POLICY, decision.summary())
