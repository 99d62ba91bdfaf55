"""Training progress in the status and the NoProgress stall: the pure rules, then plan()."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from elasticjob_agent.protocol.endpoints import Endpoint
from elasticjob_agent.protocol.health import AgentState, HealthReport
from elasticjob_operator import metrics
from elasticjob_operator.core import progress
from elasticjob_operator.core.agent_command import AgentTarget, agent_args
from elasticjob_operator.core.conditions import ConditionType, find_condition
from elasticjob_operator.core.progress import GroupProgress, ProgressState
from elasticjob_operator.core.spec import SpecError
from elasticjob_operator.core.status import JobStatus
from elasticjob_operator.settings import OperatorSettings
from prometheus_client import REGISTRY

from tests.support.operator_model import RUN_ID, T0, Cluster, job_spec, report, step

TARGET = AgentTarget((Endpoint("etcd", 2379),), RUN_ID, "node-0", 2)


def _stepped(
    node: str, step_: int | None, at: float | None, *, round_: int = 1, **kw: object
) -> HealthReport:
    return replace(report(node, round_=round_, **kw), last_step=step_, last_step_at=at)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reports", "expected"),
    [
        ([], None),
        ([_stepped("a", None, None)], None),
        ([_stepped("a", 5, 100.0), _stepped("b", 7, 90.0)], GroupProgress(7, 100.0)),
        # Only the newest running round counts: the old round's higher step is history.
        ([_stepped("a", 50, 100.0), _stepped("b", 3, 95.0, round_=2)], GroupProgress(3, 95.0)),
        ([_stepped("a", 5, 100.0, run_id="other")], None),
        ([replace(_stepped("a", 5, 100.0), state=AgentState.RESTARTING)], None),
        (
            [replace(_stepped("a", 9, 100.0), steps_done=True), _stepped("b", 9, 99.0)],
            GroupProgress(9, 100.0, done=True),
        ),
    ],
)
def test_group_progress(reports: list[HealthReport], expected: GroupProgress | None) -> None:
    assert progress.group_progress(reports, RUN_ID) == expected


@pytest.mark.parametrize(
    ("state", "seen", "expected"),
    [
        (None, None, None),
        (None, GroupProgress(4, 100.0), ProgressState(4, 100.0)),
        (ProgressState(4, 100.0), None, ProgressState(4, 100.0)),
        # Within a sample period nothing changes (no status write per poll).
        (ProgressState(4, 100.0), GroupProgress(9, 109.0), ProgressState(4, 100.0)),
        (ProgressState(4, 100.0), GroupProgress(24, 110.0), ProgressState(24, 110.0, 2.0)),
        # Resumed from an older checkpoint: start again, no rate.
        (ProgressState(40, 100.0, 2.0), GroupProgress(30, 200.0), ProgressState(30, 200.0)),
        # Finished at the sampled step: the last rate stands.
        (
            ProgressState(40, 100.0, 2.0),
            GroupProgress(40, 200.0, True),
            ProgressState(40, 100.0, 2.0),
        ),
    ],
)
def test_advance(
    state: ProgressState | None, seen: GroupProgress | None, expected: ProgressState | None
) -> None:
    assert progress.advance(state, seen, 10.0) == expected


@pytest.mark.parametrize(
    ("timeout", "seen", "current", "hang_added", "now", "stalled"),
    [
        (None, GroupProgress(1, 0.0), None, 1, 1000.0, False),  # off
        (30, None, None, 0, 1000.0, False),  # no step yet: never a hang
        (30, GroupProgress(1, 100.0), None, 0, 129.0, False),
        (30, GroupProgress(1, 100.0), None, 0, 130.0, True),
        (30, GroupProgress(1, 100.0, done=True), None, 0, 500.0, False),  # the loop is over
        (30, GroupProgress(1, 100.0), None, 1, 101.0, True),  # the agents counted a hang
        (30, None, (130.0, "m"), 0, 500.0, True),  # the restarted group has no step yet
        (30, GroupProgress(1, 120.0), (130.0, "m"), 0, 500.0, True),  # an old step
        (30, GroupProgress(2, 131.0), (130.0, "m"), 0, 500.0, False),  # a new step
    ],
)
def test_no_progress(  # noqa: PLR0917 - one parameter per table column
    timeout: int | None,
    seen: GroupProgress | None,
    current: tuple[float, str] | None,
    hang_added: int,
    now: float,
    stalled: bool,
) -> None:
    verdict = progress.no_progress(
        timeout=timeout, seen=seen, current=current, hang_restarts_added=hang_added, now=now
    )
    assert (verdict is not None) is stalled


def test_progress_round_trips_through_the_stored_status() -> None:
    status = JobStatus(progress=ProgressState(12, T0 + 0.25, 1.5))
    assert JobStatus.from_json(status.to_json()).progress == status.progress
    stored = status.to_json()["progress"]
    assert stored["lastStepTime"].endswith("Z") and stored["stepsPerSecond"] == 1.5
    for bad in ({"step": -1, "sampledAt": 1.0}, {"step": "3"}, "x", None):
        assert JobStatus.from_json({"progress": bad}).progress is None


def test_the_spec_field_and_the_agent_flag() -> None:
    assert job_spec().progress_timeout_seconds is None
    assert not any(a.startswith("--progress-timeout") for a in agent_args(job_spec(), TARGET, []))
    spec = job_spec(progressTimeoutSeconds=30)
    assert "--progress-timeout=30" in agent_args(spec, TARGET, ["train.py"])
    for bad in (5, 0, "30", True):
        with pytest.raises(SpecError, match=r"spec\.progressTimeoutSeconds"):
            job_spec(progressTimeoutSeconds=bad)


def _running(cluster: Cluster, spec_kw: dict[str, object]) -> JobStatus:
    spec = job_spec(**spec_kw)
    status = step(cluster, JobStatus(), spec, T0).status
    cluster.run_all()
    return step(cluster, status, spec, T0 + 1, etcd_reachable=True).status


def _reports(
    step_: int | None, at: float | None, *, round_: int = 1, hang: int = 0
) -> dict[str, HealthReport]:
    counts = {"hang": hang} if hang else {}
    return {
        name: _stepped(name, step_, at, round_=round_, restarts=counts)
        for name in ("demo-worker-0-0", "demo-worker-1-0")
    }


def test_a_hang_makes_the_job_stalled_until_the_restarted_group_steps() -> None:
    cluster = Cluster()
    kw: dict[str, object] = {"progressTimeoutSeconds": 30}
    spec = job_spec(**kw)
    status = _running(cluster, kw)

    training = step(
        cluster, status, spec, T0 + 10, etcd_reachable=True, reports=_reports(5, T0 + 9)
    )
    assert training.status.progress == ProgressState(5, T0 + 9)
    assert training.status.stall is None
    later = step(
        cluster, training.status, spec, T0 + 40, etcd_reachable=True, reports=_reports(65, T0 + 39)
    )
    assert later.status.progress == ProgressState(65, T0 + 39, 2.0)

    # The agents restarted the group for want of progress and counted it as hang.
    hung = step(
        cluster,
        later.status,
        spec,
        T0 + 72,
        etcd_reachable=True,
        reports=_reports(None, None, round_=2, hang=1),
    )
    assert hung.status.restarts == {"hang": 1}
    assert hung.status.stall is not None and hung.status.stall.reason == "NoProgress"
    cond = find_condition(hung.status.conditions, ConditionType.STALLED)
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", "NoProgress")
    assert "progressTimeoutSeconds (30 s)" in cond["message"]
    reasons = [e.reason for e in hung.events]
    assert "NoProgress" in reasons and "Restarted" in reasons
    assert hung.new_stall == "NoProgress"  # the stalls counter metric
    assert hung.status.progress is not None and hung.status.progress.steps_per_second == 0.0

    # Loading the model again takes longer than stallTimeoutSeconds (60): still only a stall.
    loading = step(
        cluster,
        hung.status,
        spec,
        T0 + 200,
        etcd_reachable=True,
        reports=_reports(None, None, round_=2, hang=1),
    )
    assert loading.status.stall is not None and loading.status.phase.value == "Running"

    # The restarted group steps: recovered.
    back = step(
        cluster,
        loading.status,
        spec,
        T0 + 210,
        etcd_reachable=True,
        reports=_reports(21, T0 + 209, round_=2, hang=1),
    )
    assert back.status.stall is None
    cond = find_condition(back.status.conditions, ConditionType.STALLED)
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "Recovered")
    assert back.status.progress == ProgressState(21, T0 + 209)


def test_silence_in_the_reports_is_noticed_before_the_agents_restart() -> None:
    cluster = Cluster()
    kw: dict[str, object] = {"progressTimeoutSeconds": 30}
    status = _running(cluster, kw)
    result = step(
        cluster, status, job_spec(**kw), T0 + 45, etcd_reachable=True, reports=_reports(5, T0 + 14)
    )
    assert result.status.stall is not None and result.status.stall.reason == "NoProgress"


def test_without_the_timeout_silence_is_no_stall() -> None:
    cluster = Cluster()
    status = _running(cluster, {})
    result = step(
        cluster, status, job_spec(), T0 + 900, etcd_reachable=True, reports=_reports(5, T0 + 2)
    )
    assert result.status.stall is None
    assert result.status.progress == ProgressState(5, T0 + 2)


def test_the_metrics_show_progress_and_the_stall_reason() -> None:
    assert "NoProgress" in metrics.STALL_REASONS
    metrics.publish("ns", "progress-metrics", JobStatus(progress=ProgressState(42, T0, 2.5)))
    try:
        labels = {"namespace": "ns", "job": "progress-metrics"}
        assert REGISTRY.get_sample_value("elasticjob_job_step", labels) == 42
        assert REGISTRY.get_sample_value("elasticjob_job_steps_per_second", labels) == 2.5
    finally:
        metrics.forget("ns", "progress-metrics")


def _writes_per_stretch(jobs: int, period: float, poll: float, until: float) -> list[int]:
    """Progress samples written per ``period / 10`` stretch after two periods, when ``jobs``
    jobs start together and each is polled every ``poll`` s (offset a little per job)."""
    stretch = period / 10
    counts = [0] * int((until - 2 * period) // stretch)
    for j in range(jobs):
        phase = progress.phase_of(f"uid-{j}")
        state: ProgressState | None = None
        t = (j % 7) * poll / 7
        while t < until:
            new = progress.advance(state, GroupProgress(int(t), t), period, phase)
            if new != state and t >= 2 * period and state is not None:
                counts[min(len(counts) - 1, int((t - 2 * period) // stretch))] += 1
            state, t = new, t + poll
    return counts


def test_jobs_started_together_sample_their_progress_spread_over_the_period() -> None:
    # 1000 jobs at the 5-a-second budget (200 s): each stretch of 20 s carries about a tenth.
    counts = _writes_per_stretch(1000, 200.0, 18.0, 1400.0)
    assert sum(counts) >= 1000 * 4  # about one sample per job per period, over 5 periods
    assert max(counts) <= 1.5 * sum(counts) / len(counts), counts


def test_a_job_samples_once_per_period_and_never_twice_in_half_of_one() -> None:
    phase = progress.phase_of("some-uid")
    assert 0.0 <= phase < 1.0
    assert phase == progress.phase_of("some-uid")
    state: ProgressState | None = None
    sampled = []
    for t in range(0, 2000, 3):
        new = progress.advance(state, GroupProgress(t, float(t)), 100.0, phase)
        if new != state:
            sampled.append(t)
        state = new
    gaps = [b - a for a, b in itertools.pairwise(sampled)]
    assert min(gaps) >= 50
    assert all(gap <= 103 for gap in gaps[2:])  # on its slot boundaries after two samples


def test_the_sample_period_is_a_setting() -> None:
    state, seen = ProgressState(4, 100.0), GroupProgress(24, 115.0)
    assert progress.advance(state, seen) == state  # 15 s: within the default 30 s
    assert progress.advance(state, seen, 10.0) == ProgressState(24, 115.0, 1.333)
    settings = OperatorSettings.from_env({"ELASTICJOB_PROGRESS_SAMPLE_SECONDS": "10"})
    assert settings.loop.stall.progress_sample == 10.0
    assert OperatorSettings.from_env({}).loop.stall.progress_sample == progress.SAMPLE_SECONDS


@pytest.mark.parametrize(
    ("jobs", "budget", "period"),
    [(1, 5.0, 30.0), (150, 5.0, 30.0), (1000, 5.0, 200.0), (1000, 0.0, 30.0)],
)
def test_the_sample_period_keeps_all_jobs_within_the_write_budget(
    jobs: int, budget: float, period: float
) -> None:
    assert progress.sample_period(30.0, jobs, budget) == period
    env = {"ELASTICJOB_PROGRESS_WRITES_PER_SECOND": str(budget)}
    assert OperatorSettings.from_env(env).loop.stall.progress_writes_per_second == budget
