"""What the supervisor does after a monitor tick, decided from its observations alone (pure).

The monitor observes (``observation.Tick``), ``decide`` chooses, the monitor carries it out.
The failure policy's verdict on a restart is turned into what is counted by ``after_policy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from elasticjob_agent.protocol.failure_policy import Action
from elasticjob_agent.protocol.restarts import RestartReason
from elasticjob_agent.supervision.observation import Membership, Tick
from elasticjob_agent.timers.steps import is_hung


class Verdict(str, Enum):
    CONTINUE = "continue"
    """Nothing to do: watch on."""
    PREEMPT = "preempt"
    """SIGTERM: count a preemption, leave the rendezvous, stop the workers, exit 143."""
    SUCCEED = "succeed"
    """Every local worker exited 0: wait in the exit barrier, exit 0."""
    RESTART = "restart"
    """Stop the group and count a restart under ``reason``."""
    READ_EXIT_BARRIER = "read_exit_barrier"
    """The membership changed: first read whether a node of the round already finished."""
    FINISHING = "finishing"
    """A node finished: ignore the membership change; our workers finish or fail on their own."""


class Cause(str, Enum):
    """What made the decision: the attribution of a restart, or the membership change."""

    TIMER = "timer"
    """An expiration timer fired: kill its workers, the first is the root cause."""
    HANG = "hang"
    """No local step for the progress timeout: this node's hang is the root cause."""
    WORKERS = "workers"
    """Local workers exited non-zero: the first failure is the root cause."""
    NODES_WAITING = "nodes_waiting"
    """Nodes wait to be admitted (scale-up)."""
    MEMBER_LOST = "member_lost"
    """A member vanished: give it time to count its own restart before counting a failure."""
    LEASE_LAPSED = "lease_lapsed"
    """Our own key is gone: etcd saw no keep-alive in time; nobody failed."""
    ROUND_LOST = "round_lost"
    """etcd lost the round (recreated empty): the operator counts the restart."""


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: RestartReason | None = None
    """The restart's reason (``RESTART``), or the membership change's (the other verdicts)."""
    cause: Cause | None = None


def decide(tick: Tick) -> Decision:
    """The decision for one tick; local facts first (they need no etcd), membership last."""
    if tick.stop_requested:
        return Decision(Verdict.PREEMPT)
    if tick.timer_kills:
        return Decision(Verdict.RESTART, RestartReason.TIMER, Cause.TIMER)
    if is_hung(tick.steps, tick.hang_timeout, tick.now):
        return Decision(Verdict.RESTART, RestartReason.HANG, Cause.HANG)
    if tick.failures:
        return Decision(Verdict.RESTART, RestartReason.FAILURE, Cause.WORKERS)
    if tick.exit_codes and all(c == 0 for c in tick.exit_codes.values()):
        return Decision(Verdict.SUCCEED)
    change = membership_change(tick.membership)
    if change is None:
        return Decision(Verdict.CONTINUE)
    reason, cause = change
    if tick.barrier is None:
        return Decision(Verdict.READ_EXIT_BARRIER, reason, cause)
    if tick.barrier.finished_rank is None:
        return Decision(Verdict.RESTART, reason, cause)
    # Re-forming now would leave the finished node (in its exit barrier, never joining again)
    # and us waiting for each other.
    return Decision(Verdict.FINISHING, reason, cause)


def membership_change(m: Membership | None) -> tuple[RestartReason, Cause] | None:
    """Why the group must re-form, from a membership check; ``None``: it need not."""
    if m is None:
        return None
    if not m.members_alive:
        if m.round_state_lost:
            return RestartReason.ETCD_RECOVERED, Cause.ROUND_LOST
        if not m.holds_membership:
            return RestartReason.MEMBERSHIP, Cause.LEASE_LAPSED
        return RestartReason.FAILURE, Cause.MEMBER_LOST
    if m.waiting > 0:
        return RestartReason.MEMBERSHIP, Cause.NODES_WAITING
    return None


def after_policy(reason: RestartReason, action: Action | None) -> tuple[RestartReason, bool]:
    """The failure policy's action on a restart counted as ``reason`` (``None``: no rule
    matched): the reason to count it under, and whether the job fails (``FailJob``) instead."""
    if action is Action.FAIL_JOB:
        return reason, True
    if action is Action.IGNORE:
        return RestartReason.IGNORED, False
    return reason, False
