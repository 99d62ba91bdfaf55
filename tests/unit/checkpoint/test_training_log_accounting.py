"""The reading of examples/train.py's log the resize tests rely on (tests/support/training_log):
runs and changes, and the sample accounting catching a step that read the wrong samples."""

from __future__ import annotations

from elasticjob_agent.checkpoint.sampler import epoch_order

from tests.support.training_log import (
    changes_of,
    data_of,
    digest,
    runs_of,
    sample_problems,
    steps_of,
)

LENGTH, SEED, BATCH = 100, 3, 2


def _run(first: int, last: int, world: int, epoch: int, consumed: int) -> list[str]:
    """The ``train`` lines of steps ``first..last`` in ``world`` ranks from ``(epoch,
    consumed)``, as train.py prints them (an epoch ends when less than a batch a rank is left)."""
    lines = []
    for step in range(first, last + 1):
        if LENGTH - consumed < BATCH * world:
            epoch, consumed = epoch + 1, 0
        taken = epoch_order(LENGTH, SEED, epoch)[consumed : consumed + BATCH * world]
        consumed += BATCH * world
        lines.append(
            f"[rank0]: train step={step} loss={2.0 - step / 100:.4f} world_size={world} "
            f"epoch={epoch} consumed={consumed} samples={digest(taken)}"
        )
    return lines


HEAD = [f"data samples={LENGTH} seed={SEED} batch={BATCH} context=8 vocab=5 params=9"]


def test_a_resize_that_resumes_from_the_saved_position_checks_out() -> None:
    # 4 ranks to step 15 (8 a step: epoch 0 ends after 12 steps), restored at step 10 into 2.
    log = "\n".join(HEAD + _run(1, 15, 4, 0, 0) + _run(11, 30, 2, 0, 80))
    runs = runs_of(steps_of(log))
    assert [(r[0].step, r[-1].step, r[0].world_size) for r in runs] == [(1, 15, 4), (11, 30, 2)]
    (change,) = changes_of(runs)
    assert change.restored_step == 10
    assert (change.last_loss_before, change.first_loss_after) == (1.85, 1.89)
    assert sample_problems(data_of(log), runs) == []


def test_a_restore_that_lost_or_repeated_samples_is_reported() -> None:
    # The new run starts at step 11 from position 64 of epoch 0, not step 10's 80.
    log = "\n".join(HEAD + _run(1, 15, 4, 0, 0) + _run(11, 14, 2, 0, 64))
    problems = sample_problems(data_of(log), runs_of(steps_of(log)))
    assert problems == [
        "step 11 (world size 2): at epoch 0 position 68, after epoch 0 position 80: expected "
        "position 84 of epoch 0"
    ]


def test_a_step_that_read_other_samples_is_reported() -> None:
    lines = HEAD + _run(1, 5, 4, 0, 0)
    lines[3] = lines[3][:-8] + "00000000"
    problems = sample_problems(data_of("\n".join(lines)), runs_of(steps_of("\n".join(lines))))
    assert len(problems) == 1 and problems[0].startswith("step 3: its samples (crc 00000000)")
