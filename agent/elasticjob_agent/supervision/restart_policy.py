"""Restart policy, pure: what a restart is counted as, who counts it, when the job must end.

The supervisor orchestrates (reads etcd, stops workers, closes the rendezvous); these functions
decide. The budget rule itself is ``protocol.restarts.budget_exhausted``, shared with the
operator.
"""

from __future__ import annotations

from dataclasses import dataclass

from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.restarts import (
    BUDGET_SPENT_REASON,
    RestartCounts,
    RestartReason,
    budget_exhausted,
)

ROUND_LOSS_SUSPECTS = frozenset({RestartReason.FAILURE, RestartReason.MEMBERSHIP})
"""Restarts that may really be etcd's loss of the round: when etcd was recreated empty, a peer
that re-formed first stopped its workers (ours fail) and our members' keys are gone."""


def suspects_round_loss(observed: RestartReason) -> bool:
    """Whether the supervisor must ask etcd if it still holds the round before counting."""
    return observed in ROUND_LOSS_SUSPECTS


@dataclass(frozen=True)
class RestartPlan:
    """How one group restart is counted."""

    reason: RestartReason
    """The reason it is counted under."""
    agent_counts: bool
    """True: this agent records it in etcd (once per round for the job, whoever is first).
    False: the operator counts it (``etcd-recovered``: once per etcd it recreated)."""


def plan_restart(observed: RestartReason, round_lost: bool) -> RestartPlan:
    """The plan for a restart the supervisor observed as ``observed``.

    ``round_lost``: etcd no longer holds the round this group completed (only meaningful for
    ``suspects_round_loss`` reasons; pass False otherwise). Then the restart is etcd's loss, not
    a failure or a membership change, and it is free and counted by the operator alone.
    """
    reason = observed
    if round_lost and observed in ROUND_LOSS_SUSPECTS:
        reason = RestartReason.ETCD_RECOVERED
    return RestartPlan(reason, agent_counts=reason is not RestartReason.ETCD_RECOVERED)


@dataclass(frozen=True)
class BudgetVerdict:
    exhausted: bool
    detail: str = ""


def judge_budget(counts: RestartCounts, max_restarts: int) -> BudgetVerdict:
    """After a restart was counted: whether the job's budget is spent (close the rendezvous,
    exit ``MAX_RESTARTS_EXCEEDED``)."""
    if budget_exhausted(counts.by_reason, max_restarts):
        return BudgetVerdict(
            True, f"{counts.spent} restarts after failures > max_restarts={max_restarts}"
        )
    return BudgetVerdict(False)


def exit_for_closed(close_reason: str | None) -> ExitCode:
    """The exit code when the rendezvous was found closed, by the reason its closer recorded."""
    if close_reason == BUDGET_SPENT_REASON:
        return ExitCode.MAX_RESTARTS_EXCEEDED
    if close_reason == ExitCode.FAILURE_POLICY.reason:
        return ExitCode.FAILURE_POLICY
    return ExitCode.RENDEZVOUS_CLOSED
