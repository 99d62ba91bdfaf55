"""What the agents' checkpoints kept, merged into ``status.checkpoint``, with its Events: a
``CheckpointRestored`` (Normal) per restore, a ``CheckpointNotRestored`` (Warning) per round in
which an agent restored nothing although a checkpoint existed, and the reason the STEP column
went back (``stepRewound``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from elasticjob_agent.protocol.checkpoint import RestoreReport
from elasticjob_agent.protocol.health import HealthReport

from ..checkpoint_status import (
    MAX_REASON_CHARS,
    NO_RESTORE,
    NOT_RESTORED,
    RESTORED,
    CheckpointStatus,
    RestoreFailure,
    StepRewind,
    failure_round,
    restore_round,
)
from ..observed import Observed
from ..status import JobStatus
from .actions import Draft


def merge_checkpoints(draft: Draft, observed: Observed) -> None:
    """``lastRestore`` and ``lastRestoreFailure`` (the newest by round, never an older one),
    with an Event for each round newer than the stored one."""
    reports = _run_reports(draft, observed)
    before = draft.status.checkpoint
    after = before
    restore = newest_restore(r for _, r in reports)
    if restore is not None and restore_round(restore) > restore_round(before.last_restore):
        after = replace(after, last_restore=restore)
        draft.event("Normal", "CheckpointRestored", restored_message(restore))
    failure = newest_failure(reports)
    if failure is not None and failure[1].round > failure_round(before.last_restore_failure):
        after = replace(after, last_restore_failure=failure[1])
        draft.event(
            "Warning",
            "CheckpointNotRestored",
            f"pod {failure[0]}: no checkpoint restored in round {failure[1].round} although "
            f"one exists: {failure[1].reason}",
        )
    draft.status = draft.status.evolve(checkpoint=after)


def sample_saved_step(draft: Draft, before: JobStatus, observed: Observed) -> None:
    """``lastSavedStep``: the highest step any agent of the run holds now (kept while none
    says), taken with the progress sample only, so that a job saving every step does not
    write its status every step. Runs after ``track_progress``; the first save is taken at
    once."""
    stored = draft.status.checkpoint.last_saved_step
    if stored is not None and draft.status.progress == before.progress:
        return
    saved = [
        r.last_saved_step for _, r in _run_reports(draft, observed) if r.last_saved_step is not None
    ]
    if saved:
        checkpoint = replace(draft.status.checkpoint, last_saved_step=max(saved))
        draft.status = draft.status.evolve(checkpoint=checkpoint)


def _run_reports(draft: Draft, observed: Observed) -> list[tuple[str, HealthReport]]:
    """The reports of the job's current run, by pod name."""
    return sorted(
        (pod, r) for pod, r in observed.reports.items() if r.run_id == draft.status.run_id
    )


def newest_restore(reports: Iterable[HealthReport]) -> RestoreReport | None:
    """The restore of the newest round the reports carry (of two in one round, the higher
    step, then the first pod's); restores without a round are not taken."""
    found: RestoreReport | None = None
    for report in reports:
        restore = report.last_restore
        if restore is None or restore.round is None:
            continue
        if found is None or (restore.round, restore.step) > (restore_round(found), found.step):
            found = restore
    return found


def newest_failure(
    reports: list[tuple[str, HealthReport]],
) -> tuple[str, RestoreFailure] | None:
    """The pod and restore failure of the newest round the reports carry (first pod wins)."""
    found: tuple[str, RestoreFailure] | None = None
    for pod, r in reports:
        if r.restore_failure is None or r.restore_failure_round is None:
            continue
        if found is None or r.restore_failure_round > found[1].round:
            reason = r.restore_failure[:MAX_REASON_CHARS]
            found = (pod, RestoreFailure(r.restore_failure_round, reason))
    return found


def restored_message(restore: RestoreReport) -> str:
    return (
        f"restored step {restore.step} saved by {restore.saved_world_size} ranks into "
        f"{restore.world_size} ranks from {restore.source} in {restore.seconds:.2f}s "
        f"(round {restore.round})"
    )


def note_rewind(draft: Draft, before: JobStatus) -> None:
    """When the sampled step (``status.progress.step``, the STEP column) went below the stored
    one, say why in ``status.checkpoint.stepRewound``."""
    old, new = before.progress, draft.status.progress
    if old is None or new is None or new.step >= old.step:
        return
    draft.status = draft.status.evolve(
        checkpoint=replace(
            draft.status.checkpoint,
            step_rewound=rewind(old.step, new.step, draft.status.checkpoint),
        )
    )


def rewind(from_step: int, to_step: int, checkpoint: CheckpointStatus) -> StepRewind:
    """Why the step went from ``from_step`` back to ``to_step``: the newest of the last restore
    (at or below ``to_step``) and the last restore failure explains it; else no restore did."""
    restore, failure = checkpoint.last_restore, checkpoint.last_restore_failure
    if failure is not None and failure.round > restore_round(restore):
        return StepRewind(
            from_step,
            to_step,
            NOT_RESTORED,
            f"no checkpoint restored in round {failure.round}: {failure.reason}"[:MAX_REASON_CHARS],
        )
    if restore is not None and restore.step <= to_step:
        return StepRewind(from_step, to_step, RESTORED, restored_message(restore))
    return StepRewind(
        from_step,
        to_step,
        NO_RESTORE,
        "the workers restarted and no agent reported a checkpoint restore",
    )
