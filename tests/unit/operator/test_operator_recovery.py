"""What a failure cost (``status.lastRecovery``) and what training kept (``status.goodput``):
the pure rules as tables, then plan() through a fault and back, and the metrics."""

from __future__ import annotations

from dataclasses import replace

import pytest
from elasticjob_agent.protocol.health import AgentState, HealthReport
from elasticjob_operator import metrics
from elasticjob_operator.core import recovery
from elasticjob_operator.core.evidence import Cause, CauseKind, Evidence
from elasticjob_operator.core.observed import Observed
from elasticjob_operator.core.planning.actions import Draft
from elasticjob_operator.core.planning.recoveries import track_recovery
from elasticjob_operator.core.progress import ProgressState
from elasticjob_operator.core.recovery import Goodput, Recovery, RoundStart
from elasticjob_operator.core.status import JobStatus
from prometheus_client import REGISTRY

from tests.support.operator_model import RUN_ID, T0, Cluster, job_spec, report, step

PODS = ("demo-worker-0-0", "demo-worker-1-0")


def _agent(
    node: str = "a",
    *,
    round_: int = 2,
    started: float | None = T0 + 30,
    rdzv: float | None = 4.0,
    first: tuple[int, float] | None = (51, T0 + 40),
    previous: tuple[int, float | None] | None = (60, T0 + 10),
    state: AgentState = AgentState.RUNNING,
    run_id: str = RUN_ID,
) -> HealthReport:
    return replace(
        report(node, state, round_=round_, last_rendezvous_seconds=rdzv, run_id=run_id),
        round_started_at=started,
        first_step=None if first is None else first[0],
        first_step_at=None if first is None else first[1],
        previous_step=None if previous is None else previous[0],
        previous_step_at=None if previous is None else previous[1],
    )


START = RoundStart(
    round=2,
    started_at=T0 + 30,
    entered_at=T0 + 26,
    first_step=51,
    first_step_at=T0 + 40,
    previous_step=60,
    previous_step_at=T0 + 10,
)


@pytest.mark.parametrize(
    ("reports", "expected"),
    [
        ([], None),
        ([_agent(previous=None)], None),  # the job's first round: no recovery
        ([_agent(first=None)], None),  # no step in the new round yet
        ([_agent(started=None)], None),
        ([_agent(run_id="other")], None),
        ([_agent(state=AgentState.RESTARTING)], None),
        ([_agent()], START),
        # Over the round: the latest start, the first rendezvous entry, the first step first
        # reported, the highest step before; an older round's agent is history.
        (
            [
                _agent("a", started=T0 + 29, rdzv=2.0, first=(52, T0 + 41)),
                _agent("b", started=T0 + 30, rdzv=8.0, first=(51, T0 + 40), previous=(58, T0 + 9)),
                _agent("c", round_=1, previous=(99, T0 + 11)),
            ],
            replace(START, entered_at=T0 + 22),
        ),
        # A new pod's agent has no earlier round; its partner has.
        ([_agent("a", previous=None), _agent("b")], START),
        # A time in the future (an agent's clock) is ignored.
        ([_agent("a"), _agent("b", started=T0 + 10_000)], START),
        ([_agent(previous=(60, T0 + 10_000))], replace(START, previous_step_at=None)),
        ([_agent(rdzv=None)], replace(START, entered_at=T0 + 30)),
    ],
)
def test_round_start(reports: list[HealthReport], expected: RoundStart | None) -> None:
    assert recovery.round_start(reports, RUN_ID, T0 + 60) == expected


def _cause(kind: str, at: float, *secondary: float) -> Cause:
    return Cause(
        Evidence(kind, at, pod="p"),
        tuple(Evidence("ConnectionLost", s, pod="q") for s in secondary),
    )


DONE = Recovery("WorkerFailed", T0 - 50, T0 - 48, T0 - 45, T0 - 44, 10, T0 - 43, 2, 1)


@pytest.mark.parametrize(
    ("start", "cause", "previous", "step_seconds", "expected"),
    [
        # No cause: a membership change; the fault is when the restart began.
        (
            START,
            None,
            None,
            None,
            Recovery("membership", T0 + 26, T0 + 26, T0 + 30, T0 + 40, 50, T0 + 40, 10, 2),
        ),
        # A rank failed at +20; the step took 2 s: the restore ends 2 s before the first step.
        (
            START,
            _cause(CauseKind.WORKER_FAILED, T0 + 20),
            DONE,
            2.0,
            Recovery("WorkerFailed", T0 + 20, T0 + 26, T0 + 30, T0 + 38, 50, T0 + 40, 10, 2),
        ),
        # The node lost is seen late; its survivors' symptom is the earliest evidence.
        (
            START,
            _cause(CauseKind.NODE_LOST, T0 + 35, T0 + 18),
            None,
            None,
            Recovery("NodeLost", T0 + 18, T0 + 26, T0 + 30, T0 + 40, 50, T0 + 40, 10, 2),
        ),
        # The cause is older than the last recovery, or than the last step: not this one's.
        (
            START,
            _cause(CauseKind.WORKER_FAILED, T0 - 46),
            DONE,
            None,
            Recovery("membership", T0 + 26, T0 + 26, T0 + 30, T0 + 40, 50, T0 + 40, 10, 2),
        ),
        (
            START,
            _cause(CauseKind.WORKER_FAILED, T0 - 100),
            None,
            None,
            Recovery("membership", T0 + 26, T0 + 26, T0 + 30, T0 + 40, 50, T0 + 40, 10, 2),
        ),
        # Dated after the round's first step: a later failure, not this one's.
        (
            START,
            _cause(CauseKind.WORKER_FAILED, T0 + 45),
            None,
            None,
            Recovery("membership", T0 + 26, T0 + 26, T0 + 30, T0 + 40, 50, T0 + 40, 10, 2),
        ),
        # Clocks out of order: every phase still ends no earlier than it began; a resume from
        # a later step than the last (a checkpoint of a bigger step) loses nothing.
        (
            replace(START, started_at=T0 + 20, first_step_at=T0 + 25, first_step=70),
            None,
            None,
            30.0,
            Recovery("membership", T0 + 26, T0 + 26, T0 + 26, T0 + 26, 69, T0 + 26, 0, 2),
        ),
        (
            replace(START, first_step=0),
            None,
            None,
            None,
            Recovery("membership", T0 + 26, T0 + 26, T0 + 30, T0 + 40, 0, T0 + 40, 60, 2),
        ),
    ],
)
def test_recovery(
    start: RoundStart,
    cause: Cause | None,
    previous: Recovery | None,
    step_seconds: float | None,
    expected: Recovery,
) -> None:
    got = recovery.recovery(start, cause, previous, step_seconds)
    assert got == expected
    phases = got.phases()
    assert all(v >= 0 for v in phases.values())
    assert sum(phases.values()) == pytest.approx(got.seconds)
    assert list(phases) == list(recovery.PHASES)


def test_recovery_identity() -> None:
    got = recovery.recovery(START, None, None, None)
    assert got.same_as(got) and not got.same_as(None)
    assert got.same_as(replace(got, rendezvous_at=T0 + 31))  # a later agent's clock
    assert not got.same_as(replace(got, round=1))
    # The same round number again, long after (a new etcd started counting anew).
    assert not replace(got, rendezvous_at=T0 + 500).same_as(got)


P100 = ProgressState(100, T0, 2.0)
LAST = Recovery("WorkerFailed", T0 + 20, T0 + 26, T0 + 30, T0 + 38, 50, T0 + 40, 10, 2)


@pytest.mark.parametrize(
    ("goodput", "kw", "expected"),
    [
        # Nothing sampled, nothing recovered: unchanged, even None.
        (None, {"before": P100, "after": P100}, None),
        (Goodput(5, 10), {"before": P100, "after": P100}, Goodput(5, 10)),
        # The first sample of the job: nothing to measure yet, the wall clock runs.
        (None, {"before": None, "after": P100}, Goodput(0, 100)),
        # Two samples 30 s apart: 30 s kept.
        (Goodput(5, 10), {"before": P100, "after": ProgressState(160, T0 + 30)}, Goodput(35, 100)),
        # A recovery whose last step before the fault (60) is below the sample's (100): nothing
        # to add; 10 lost steps at 2 steps/s take 5 s off.
        (
            Goodput(50, 10),
            {"before": P100, "after": P100, "last": LAST, "new": START},
            Goodput(45, 100),
        ),
        # Stepped past the last sample before the fault: that time is kept, minus what was lost.
        (
            Goodput(50, 10),
            {
                "before": ProgressState(40, T0 - 20, 2.0),
                "after": ProgressState(40, T0 - 20, 2.0),
                "last": LAST,
                "new": START,
            },
            Goodput(75, 100),
        ),
        # Never below 0.
        (
            Goodput(1, 10),
            {"before": P100, "after": P100, "last": LAST, "new": START},
            Goodput(0, 100),
        ),
        # A sample after the recovery counts from its first step, not across the outage.
        (
            Goodput(50, 10),
            {"before": P100, "after": ProgressState(71, T0 + 50), "last": LAST},
            Goodput(60, 100),
        ),
        # A restart nobody described (old agents): the step went down, nothing is known kept.
        (Goodput(50, 10), {"before": P100, "after": ProgressState(3, T0 + 50)}, Goodput(50, 100)),
    ],
)
def test_account(goodput: Goodput | None, kw: dict[str, object], expected: Goodput | None) -> None:
    args: dict[str, object] = {"last": None, "new": None, **kw}
    got = recovery.account(goodput, **args, started=T0 - 100, now=T0)  # type: ignore[arg-type]
    assert got == expected


def test_ratio_is_within_0_and_1() -> None:
    assert Goodput(30, 60).ratio == 0.5
    assert Goodput(90, 60).ratio == 1.0  # the agents' clocks ran ahead of the operator's
    assert Goodput(5, 0).ratio == 0.0


def test_both_round_trip_through_the_stored_status() -> None:
    status = JobStatus(last_recovery=LAST, goodput=Goodput(12.5, 50.0))
    stored = status.to_json()
    back = JobStatus.from_json(stored)
    assert (back.last_recovery, back.goodput) == (LAST, Goodput(12.5, 50.0))
    assert stored["lastRecovery"]["seconds"] == 20.0 and stored["goodput"]["ratio"] == 0.25
    assert set(stored["lastRecovery"]) >= {
        "reason", "faultAt", "detectedAt", "rendezvousAt", "restoredStep", "firstStepAt",
        "stepsLost", "seconds",
    }  # fmt: skip
    assert set(stored["goodput"]) == {"trainingSeconds", "wallSeconds", "ratio"}
    for bad in ({"reason": "x"}, {**stored["lastRecovery"], "stepsLost": -1}, "x", None):
        assert JobStatus.from_json({"lastRecovery": bad}).last_recovery is None
    for bad_goodput in ({"trainingSeconds": 1}, {"trainingSeconds": True, "wallSeconds": 1}):
        assert JobStatus.from_json({"goodput": bad_goodput}).goodput is None


def _reports(
    step_: int, at: float, *, round_: int = 1, first: tuple[int, float] | None = None,
    previous: tuple[int, float] | None = None, started: float = T0 + 1,
) -> dict[str, HealthReport]:  # fmt: skip
    return {
        name: replace(
            report(name, round_=round_, last_rendezvous_seconds=3.0),
            last_step=step_,
            last_step_at=at,
            round_started_at=started,
            first_step=None if first is None else first[0],
            first_step_at=None if first is None else first[1],
            previous_step=None if previous is None else previous[0],
            previous_step_at=None if previous is None else previous[1],
        )
        for name in PODS
    }


def test_plan_records_a_recovery_once_and_goodput_with_the_samples() -> None:
    cluster = Cluster()
    spec = job_spec()
    status = step(cluster, JobStatus(), spec, T0).status
    cluster.run_all()
    status = step(cluster, status, spec, T0 + 1, etcd_reachable=True).status

    def at(now: float, reports: dict[str, HealthReport]) -> JobStatus:
        return step(cluster, status, spec, now, etcd_reachable=True, reports=reports).status

    status = at(T0 + 10, _reports(1, T0 + 9, first=(1, T0 + 9)))
    assert status.last_recovery is None and status.goodput == Goodput(0.0, 10.0)
    status = at(T0 + 40, _reports(61, T0 + 39, first=(1, T0 + 9)))
    assert status.goodput == Goodput(30.0, 40.0)
    steady = at(T0 + 45, _reports(71, T0 + 44, first=(1, T0 + 9)))
    assert steady == status  # between samples nothing changes: no status write

    # Step 75 at +46, the fault at +47; round 2 re-forms at +52 and steps from 70 at +55.
    back = _reports(
        71, T0 + 55, round_=2, first=(71, T0 + 55), previous=(75, T0 + 46), started=T0 + 52
    )
    status = at(T0 + 56, back)
    assert status.last_recovery == Recovery(
        "membership", T0 + 49, T0 + 49, T0 + 52, T0 + 54.5, 70, T0 + 55, 5, 2
    )
    # Stepped from the sample to the fault (61 at +39 to 75 at +46): +7 s; 5 steps lost at
    # 2 steps/s: -2.5 s.
    assert status.goodput == Goodput(34.5, 56.0)
    again = at(T0 + 57, back)
    assert again == status  # recorded once

    # Better evidence of that failure: the record's cause is corrected, nothing else.
    failed = Cause(Evidence(CauseKind.NODE_LOST, T0 + 47, pod=PODS[1]))
    patched = replace(status, last_failure=failed.to_json())
    draft = Draft(patched)
    track_recovery(draft, status, Observed(reports=back), T0 + 58)
    assert draft.status.last_recovery == replace(
        status.last_recovery, reason="NodeLost", fault_at=T0 + 47
    )
    assert draft.status.goodput == status.goodput


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_metrics_observe_each_recovery_once_and_forget_the_job() -> None:
    labels = {"namespace": "ns", "job": "rec"}
    count = "elasticjob_recovery_seconds_count"
    metrics.recovered("ns", "rec", None, LAST)
    metrics.recovered("ns", "rec", LAST, replace(LAST, reason="NodeLost"))  # a correction
    for phase in recovery.PHASES:
        assert _sample(count, {**labels, "phase": phase}) == 1
    assert _sample("elasticjob_recovery_seconds_sum", {**labels, "phase": "detect"}) == 6
    metrics.publish("ns", "rec", JobStatus(goodput=Goodput(30, 60)))
    assert _sample("elasticjob_job_goodput_ratio", labels) == 0.5
    metrics.forget("ns", "rec")
    assert REGISTRY.get_sample_value("elasticjob_job_goodput_ratio", labels) is None
    assert REGISTRY.get_sample_value(count, {**labels, "phase": "detect"}) is None
