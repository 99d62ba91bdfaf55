"""examples/train.py itself across resizes: real ranks (torchrun, gloo) train the character
transformer on the shipped text with 4 ranks, resume with 2, then with 3, from the checkpoint
directory. Its loss falls and continues after each resize, and every step consumes exactly the
next samples of the epoch from the restored position (the log's ``samples=`` digests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.training_log import (
    changes_of,
    data_of,
    runs_of,
    sample_problems,
    steps_of,
)

TRAIN = REPO / "examples" / "train.py"

pytestmark = pytest.mark.timeout(900)


def _torchrun(tmp_path: Path, nproc: int, steps: int) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "agent"), env.get("PYTHONPATH", "")])
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    argv += ["--nproc-per-node", str(nproc), str(TRAIN), "--steps", str(steps)]
    argv += ["--checkpoint-every", "10", "--checkpoint-dir", str(tmp_path / "ckpt")]
    done = subprocess.run(
        argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=400, check=False
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert f"done step={steps} rank=0" in log, log[-4000:]
    return done.stdout


def test_the_example_keeps_its_loss_and_data_position_across_resizes(tmp_path: Path) -> None:
    # 4 ranks: 32 samples a step; 2 ranks: 16; 3 ranks: 24 (6227 samples: no epoch ends here).
    log = _torchrun(tmp_path, 4, 40)
    log += _torchrun(tmp_path, 2, 60)
    log += _torchrun(tmp_path, 3, 80)
    data = data_of(log)
    assert (data.batch, data.seed) == (8, 0), data
    runs = runs_of(steps_of(log))
    assert [(r[0].step, r[-1].step, r[0].world_size) for r in runs] == [
        (1, 40, 4),
        (41, 60, 2),
        (61, 80, 3),
    ], log[-4000:]
    assert sample_problems(data, runs) == []
    # It learns: the loss of the last step is well below the first one's (ln 48 = 3.9).
    assert runs[-1][-1].loss < 0.8 * runs[0][0].loss, [s.loss for r in runs for s in r]
    for change in changes_of(runs):
        # Resumed where it stopped (the last step was checkpointed), at the loss it had.
        assert change.restored_step == change.before[-1].step
        ratio = change.first_loss_after / change.last_loss_before
        assert 0.8 <= ratio <= 1.2, (change.last_loss_before, change.first_loss_after)
