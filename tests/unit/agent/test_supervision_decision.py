"""The supervisor's decision after a monitor tick, as a table: observations -> decision."""

from __future__ import annotations

import pytest
from elasticjob_agent.protocol.failure_policy import Action
from elasticjob_agent.protocol.restarts import RestartReason as R
from elasticjob_agent.supervision.decision import (
    Cause,
    Decision,
    Verdict,
    after_policy,
    decide,
)
from elasticjob_agent.supervision.observation import ExitBarrier, Membership, Tick
from elasticjob_agent.timers.steps import StepProgress
from elasticjob_agent.timers.table import Expired

KILL = Expired(pid=11, scope="step", signal=9)
REPORT_ONLY = Expired(pid=11, scope="step", signal=0)
STEP_AT_100 = StepProgress(step=5, at=1000.0, monotonic=100.0)
RUNNING = {0: None, 1: None}
LOST = Membership(members_alive=False)
NONE_FINISHED = ExitBarrier(None)
RANK_2_FINISHED = ExitBarrier(2)

CASES = [
    ("nothing happened", Tick(exit_codes=RUNNING), Decision(Verdict.CONTINUE)),
    ("no workers yet", Tick(), Decision(Verdict.CONTINUE)),
    ("sigterm", Tick(stop_requested=True), Decision(Verdict.PREEMPT)),
    (
        "sigterm wins over a failed worker",
        Tick(stop_requested=True, exit_codes={0: 1}),
        Decision(Verdict.PREEMPT),
    ),
    (
        "timer fired with a signal",
        Tick(expired=(KILL,), exit_codes=RUNNING),
        Decision(Verdict.RESTART, R.TIMER, Cause.TIMER),
    ),
    (
        "timer that only reports",
        Tick(expired=(REPORT_ONLY,), exit_codes=RUNNING),
        Decision(Verdict.CONTINUE),
    ),
    (
        "timer wins over a hang and a failure",
        Tick(expired=(KILL,), steps=STEP_AT_100, hang_timeout=10, now=200, exit_codes={0: 1}),
        Decision(Verdict.RESTART, R.TIMER, Cause.TIMER),
    ),
    (
        "hung past the progress timeout",
        Tick(steps=STEP_AT_100, hang_timeout=10, now=110, exit_codes=RUNNING),
        Decision(Verdict.RESTART, R.HANG, Cause.HANG),
    ),
    (
        "slow but within the progress timeout",
        Tick(steps=STEP_AT_100, hang_timeout=10, now=109.9, exit_codes=RUNNING),
        Decision(Verdict.CONTINUE),
    ),
    (
        "no hang detection without a timeout",
        Tick(steps=STEP_AT_100, hang_timeout=None, now=1e9, exit_codes=RUNNING),
        Decision(Verdict.CONTINUE),
    ),
    (
        "no hang after the loop said it is done",
        Tick(steps=STEP_AT_100.finish(), hang_timeout=10, now=1e9, exit_codes=RUNNING),
        Decision(Verdict.CONTINUE),
    ),
    (
        "hang wins over a failed worker",
        Tick(steps=STEP_AT_100, hang_timeout=10, now=200, exit_codes={0: 1}),
        Decision(Verdict.RESTART, R.HANG, Cause.HANG),
    ),
    (
        "a worker failed while another runs",
        Tick(exit_codes={0: None, 1: 3}),
        Decision(Verdict.RESTART, R.FAILURE, Cause.WORKERS),
    ),
    (
        "a worker was killed by a signal",
        Tick(exit_codes={0: 0, 1: -9}),
        Decision(Verdict.RESTART, R.FAILURE, Cause.WORKERS),
    ),
    (
        "a failure wins over waiting nodes",
        Tick(exit_codes={0: 1}, membership=Membership(waiting=2)),
        Decision(Verdict.RESTART, R.FAILURE, Cause.WORKERS),
    ),
    ("every worker exited 0", Tick(exit_codes={0: 0, 1: 0}), Decision(Verdict.SUCCEED)),
    (
        "success wins over a lost member",
        Tick(exit_codes={0: 0, 1: 0}, membership=LOST),
        Decision(Verdict.SUCCEED),
    ),
    (
        "some workers exited 0, others run",
        Tick(exit_codes={0: 0, 1: None}),
        Decision(Verdict.CONTINUE),
    ),
    (
        "membership checked, unchanged",
        Tick(exit_codes=RUNNING, membership=Membership()),
        Decision(Verdict.CONTINUE),
    ),
    (
        "nodes waiting: read the exit barrier first",
        Tick(exit_codes=RUNNING, membership=Membership(waiting=1)),
        Decision(Verdict.READ_EXIT_BARRIER, R.MEMBERSHIP, Cause.NODES_WAITING),
    ),
    (
        "nodes waiting, nobody finished: admit them",
        Tick(exit_codes=RUNNING, membership=Membership(waiting=1), barrier=NONE_FINISHED),
        Decision(Verdict.RESTART, R.MEMBERSHIP, Cause.NODES_WAITING),
    ),
    (
        "member lost: read the exit barrier first",
        Tick(exit_codes=RUNNING, membership=LOST),
        Decision(Verdict.READ_EXIT_BARRIER, R.FAILURE, Cause.MEMBER_LOST),
    ),
    (
        "member lost, nobody finished: a failure",
        Tick(exit_codes=RUNNING, membership=LOST, barrier=NONE_FINISHED),
        Decision(Verdict.RESTART, R.FAILURE, Cause.MEMBER_LOST),
    ),
    (
        "member lost after a node finished: let ours finish",
        Tick(exit_codes=RUNNING, membership=LOST, barrier=RANK_2_FINISHED),
        Decision(Verdict.FINISHING, R.FAILURE, Cause.MEMBER_LOST),
    ),
    (
        "member lost with nodes waiting: the loss decides",
        Tick(exit_codes=RUNNING, membership=Membership(waiting=3, members_alive=False)),
        Decision(Verdict.READ_EXIT_BARRIER, R.FAILURE, Cause.MEMBER_LOST),
    ),
    (
        "our own lease lapsed: a free membership restart",
        Tick(
            exit_codes=RUNNING,
            membership=Membership(members_alive=False, holds_membership=False),
            barrier=NONE_FINISHED,
        ),
        Decision(Verdict.RESTART, R.MEMBERSHIP, Cause.LEASE_LAPSED),
    ),
    (
        "etcd lost the round: the operator counts it",
        Tick(
            exit_codes=RUNNING,
            membership=Membership(
                members_alive=False, round_state_lost=True, holds_membership=False
            ),
            barrier=NONE_FINISHED,
        ),
        Decision(Verdict.RESTART, R.ETCD_RECOVERED, Cause.ROUND_LOST),
    ),
    (
        "etcd lost the round after a node finished",
        Tick(
            exit_codes=RUNNING,
            membership=Membership(members_alive=False, round_state_lost=True),
            barrier=RANK_2_FINISHED,
        ),
        Decision(Verdict.FINISHING, R.ETCD_RECOVERED, Cause.ROUND_LOST),
    ),
]


@pytest.mark.parametrize(("tick", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide(tick: Tick, expected: Decision) -> None:
    assert decide(tick) == expected


POLICY_CASES = [
    ("no rule matched", R.FAILURE, None, (R.FAILURE, False)),
    ("Count", R.FAILURE, Action.COUNT, (R.FAILURE, False)),
    ("Ignore", R.HANG, Action.IGNORE, (R.IGNORED, False)),
    ("FailJob", R.TIMER, Action.FAIL_JOB, (R.TIMER, True)),
]


@pytest.mark.parametrize(
    ("reason", "action", "expected"),
    [c[1:] for c in POLICY_CASES],
    ids=[c[0] for c in POLICY_CASES],
)
def test_after_policy(reason: R, action: Action | None, expected: tuple[R, bool]) -> None:
    assert after_policy(reason, action) == expected
