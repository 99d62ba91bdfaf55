"""The failure policy in a step: the agents' decisions (reports, termination messages) into the
status, the ``FailurePolicy`` condition and an Event (``policy_status`` decides what is new)."""

from __future__ import annotations

from collections.abc import Mapping

from elasticjob_agent.protocol.failure_policy import PolicyDecision

from .. import policy_status
from ..observed import Observed, PodView
from .actions import Draft


def note_policy(
    draft: Draft, observed: Observed, workers: Mapping[int, PodView], now: float
) -> None:
    """A failure-policy decision the agents made that is newer than the stored one goes to the
    status, the ``FailurePolicy`` condition and an Event."""
    decided = policy_status.newest_decision(
        draft.status.failure_policy, observed.reports, draft.status.run_id, workers.values()
    )
    if decided is not None:
        record_decision(draft, decided, now)


def record_decision(draft: Draft, decided: PolicyDecision, now: float) -> None:
    conditions = policy_status.with_condition(draft.status.conditions, decided, now)
    draft.status = draft.status.evolve(failure_policy=decided, conditions=tuple(conditions))
    draft.event("Warning", "FailurePolicy", decided.summary()[:1024])
