"""``status.checkpoint``: the agents' reports merged (the highest saved step, the newest restore
by round), the Events decided (once per restore, once per round that restored nothing), why the
STEP column went back, and the stored shape read leniently."""

from __future__ import annotations

from dataclasses import replace

import pytest
from elasticjob_agent.protocol.checkpoint import RestoreReport
from elasticjob_agent.protocol.health import HealthReport
from elasticjob_operator.core.checkpoint_status import (
    NO_RESTORE,
    NOT_RESTORED,
    RESTORED,
    CheckpointStatus,
    RestoreFailure,
    StepRewind,
)
from elasticjob_operator.core.planning.actions import Draft, Event
from elasticjob_operator.core.planning.checkpoints import (
    merge_checkpoints,
    rewind,
    sample_saved_step,
)
from elasticjob_operator.core.progress import ProgressState
from elasticjob_operator.core.status import JobStatus, never_lower

from tests.support.operator_model import RUN_ID, T0, Cluster, job_spec, report, started, step

R2 = RestoreReport(40, 4, 2, "memory", 1.5, round=2)
R3 = RestoreReport(60, 2, 3, "peer demo-worker-0-0", 2.0, round=3)


def _agent(
    node: str,
    *,
    saved: int | None = None,
    restore: RestoreReport | None = None,
    failure: tuple[str, int] | None = None,
    run_id: str = RUN_ID,
) -> HealthReport:
    return replace(
        report(node, run_id=run_id),
        last_saved_step=saved,
        last_restore=restore,
        restore_failure=None if failure is None else failure[0],
        restore_failure_round=None if failure is None else failure[1],
    )


def _merge(
    before: CheckpointStatus, *agents: HealthReport, sampled: bool = True
) -> tuple[CheckpointStatus, list[Event]]:
    """One step's merge; ``sampled``: the step took a progress sample."""
    status = JobStatus(run_id=RUN_ID, checkpoint=before, progress=ProgressState(5, T0))
    draft = Draft(status)
    observed = Cluster().observed(reports={a.node: a for a in agents})
    merge_checkpoints(draft, observed)
    if sampled:
        draft.status = draft.status.evolve(progress=ProgressState(9, T0 + 10))
    sample_saved_step(draft, status, observed)
    return draft.status.checkpoint, draft.events


def test_the_saved_step_moves_with_the_progress_sample_only() -> None:
    """A job saving every step must not write its status every step."""
    held, _ = _merge(CheckpointStatus(last_saved_step=50), _agent("a", saved=60), sampled=False)
    assert held.last_saved_step == 50
    first, _ = _merge(CheckpointStatus(), _agent("a", saved=60), sampled=False)
    assert first.last_saved_step == 60


@pytest.mark.parametrize(
    ("before", "agents", "after", "events"),
    [
        # No agent holds anything: nothing to say.
        (CheckpointStatus(), [_agent("a")], CheckpointStatus(), []),
        # The highest saved step any agent holds.
        (CheckpointStatus(), [_agent("a", saved=10), _agent("b", saved=30)], 30, []),
        # It follows the agents down (a restore dropped newer steps)...
        (CheckpointStatus(last_saved_step=50), [_agent("a", saved=40)], 40, []),
        # ...and is kept while no agent says (not polled, checkpoints restarting).
        (CheckpointStatus(last_saved_step=50), [_agent("a")], 50, []),
        # Another run's agents do not count.
        (CheckpointStatus(), [_agent("a", saved=9, run_id="other")], CheckpointStatus(), []),
        # A restore: stored, one Event naming what it kept.
        (CheckpointStatus(), [_agent("a", restore=R2)], R2, ["CheckpointRestored"]),
        # Every agent reports the same round: still one Event.
        (
            CheckpointStatus(),
            [_agent("a", restore=R2), _agent("b", restore=replace(R2, source="disk"))],
            R2,
            ["CheckpointRestored"],
        ),
        # The newest round wins, whatever the pod order.
        (CheckpointStatus(), [_agent("a", restore=R3), _agent("b", restore=R2)], R3, None),
        # A round already stored: no second Event, never an older restore.
        (CheckpointStatus(last_restore=R2), [_agent("a", restore=R2)], R2, []),
        (CheckpointStatus(last_restore=R3), [_agent("a", restore=R2)], R3, []),
        # A restore without a round is not taken.
        (CheckpointStatus(), [_agent("a", restore=replace(R2, round=None))], None, []),
        # Nothing restored although a checkpoint exists: a Warning, once per round.
        (
            CheckpointStatus(),
            [_agent("a", failure=("torn step", 4))],
            RestoreFailure(4, "torn step"),
            ["CheckpointNotRestored"],
        ),
        (
            CheckpointStatus(last_restore_failure=RestoreFailure(4, "torn step")),
            [_agent("a", failure=("torn step", 4)), _agent("b", failure=("other", 4))],
            RestoreFailure(4, "torn step"),
            [],
        ),
        (
            CheckpointStatus(last_restore_failure=RestoreFailure(4, "torn step")),
            [_agent("a", failure=("corrupt", 5))],
            RestoreFailure(5, "corrupt"),
            ["CheckpointNotRestored"],
        ),
    ],
)
def test_merge(
    before: CheckpointStatus,
    agents: list[HealthReport],
    after: object,
    events: list[str] | None,
) -> None:
    merged, posted = _merge(before, *agents)
    if isinstance(after, CheckpointStatus):
        assert merged == after
    elif isinstance(after, int):
        assert merged.last_saved_step == after
    elif isinstance(after, RestoreFailure):
        assert merged.last_restore_failure == after
    else:
        assert merged.last_restore == after
    if events is not None:
        assert [e.reason for e in posted] == events


def test_the_events_say_what_was_kept_and_why_not() -> None:
    _, restored = _merge(CheckpointStatus(), _agent("a", restore=R2))
    assert restored == [
        Event(
            "Normal",
            "CheckpointRestored",
            "restored step 40 saved by 4 ranks into 2 ranks from memory in 1.50s (round 2)",
        )
    ]
    _, failed = _merge(CheckpointStatus(), _agent("demo-worker-1-0", failure=("torn", 7)))
    assert failed == [
        Event(
            "Warning",
            "CheckpointNotRestored",
            "pod demo-worker-1-0: no checkpoint restored in round 7 although one exists: torn",
        )
    ]


@pytest.mark.parametrize(
    ("checkpoint", "to_step", "reason"),
    [
        (CheckpointStatus(), 0, NO_RESTORE),
        (CheckpointStatus(last_restore=R2), 45, RESTORED),
        (CheckpointStatus(last_restore=R2), 40, RESTORED),
        # A restore of a later step cannot explain a step below it.
        (CheckpointStatus(last_restore=R2), 12, NO_RESTORE),
        (CheckpointStatus(last_restore_failure=RestoreFailure(1, "torn")), 0, NOT_RESTORED),
        # The newer of the two explains it.
        (
            CheckpointStatus(last_restore=R3, last_restore_failure=RestoreFailure(2, "torn")),
            60,
            RESTORED,
        ),
        (
            CheckpointStatus(last_restore=R2, last_restore_failure=RestoreFailure(3, "torn")),
            0,
            NOT_RESTORED,
        ),
    ],
)
def test_rewind(checkpoint: CheckpointStatus, to_step: int, reason: str) -> None:
    found = rewind(100, to_step, checkpoint)
    assert (found.from_step, found.to_step, found.reason) == (100, to_step, reason)
    assert found.message


def test_a_step_going_back_is_explained_in_the_status() -> None:
    cluster = Cluster()
    spec = job_spec(replicas=2)
    status = started(cluster)
    names = ("demo-worker-0-0", "demo-worker-1-0")

    def reports(step_: int, at: float, **kw: object) -> dict[str, HealthReport]:
        return {
            n: replace(_agent(n, **kw), last_step=step_, last_step_at=at)  # type: ignore[arg-type]
            for n in names
        }

    training = step(
        cluster, status, spec, T0 + 10, etcd_reachable=True, reports=reports(90, T0 + 9)
    )
    assert training.status.progress == ProgressState(90, T0 + 9)
    restored = replace(R2, round=1)
    back = step(
        cluster,
        training.status,
        spec,
        T0 + 60,
        etcd_reachable=True,
        reports=reports(41, T0 + 59, restore=restored, saved=40),
    )
    assert back.status.progress is not None and back.status.progress.step == 41
    assert back.status.checkpoint.step_rewound == StepRewind(
        90,
        41,
        RESTORED,
        "restored step 40 saved by 4 ranks into 2 ranks from memory in 1.50s (round 1)",
    )
    assert [e.reason for e in back.events].count("CheckpointRestored") == 1
    stored = back.status.to_json()["checkpoint"]
    assert stored["lastSavedStep"] == 40
    assert stored["lastRestore"] == restored.as_status()
    assert stored["stepRewound"]["reason"] == RESTORED

    # The same reports again: no second Event, the explanation stays.
    again = step(
        cluster,
        back.status,
        spec,
        T0 + 70,
        etcd_reachable=True,
        reports=reports(45, T0 + 69, restore=restored, saved=40),
    )
    assert "CheckpointRestored" not in [e.reason for e in again.events]
    assert again.status.checkpoint.step_rewound == back.status.checkpoint.step_rewound


def test_the_status_round_trips_and_is_read_leniently() -> None:
    full = CheckpointStatus(60, R3, RestoreFailure(2, "torn"), StepRewind(90, 60, RESTORED, "m"))
    status = JobStatus(checkpoint=full)
    assert JobStatus.from_json(status.to_json()).checkpoint == full
    assert JobStatus().to_json()["checkpoint"] is None
    junk = {
        "lastSavedStep": -4,
        "lastRestore": {"step": "x"},
        "lastRestoreFailure": {"round": True},
        "stepRewound": [],
    }
    assert JobStatus.from_json({"checkpoint": junk}).checkpoint == CheckpointStatus()
    assert JobStatus.from_json({"checkpoint": "nope"}).checkpoint == CheckpointStatus()
    # A stored restore without its round cannot order Events: dropped.
    no_round = replace(R2, round=None).as_status()
    assert JobStatus.from_json({"checkpoint": {"lastRestore": no_round}}).checkpoint == (
        CheckpointStatus()
    )


def test_a_conflict_never_takes_the_rounds_back() -> None:
    ours = JobStatus(checkpoint=CheckpointStatus(last_restore=R2))
    theirs = JobStatus(
        checkpoint=CheckpointStatus(last_restore=R3, last_restore_failure=RestoreFailure(3, "torn"))
    )
    merged = never_lower(ours, theirs).checkpoint
    assert (merged.last_restore, merged.last_restore_failure) == (R3, RestoreFailure(3, "torn"))
    assert never_lower(theirs, ours).checkpoint == theirs.checkpoint
