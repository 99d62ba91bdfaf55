"""examples/train_dcp.py under the real agent: the character transformer sharded with FSDP2
(gloo), saved with DCP into the agent's checkpoint service by 2 ranks, then loaded, resharded, by
3 ranks of a new agent on the same memory and persistence path. The loss and the data position
continue across the resize."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticjob_agent.ports import free_port

from tests.support.paths import REPO
from tests.support.training_log import changes_of, data_of, runs_of, sample_problems, steps_of

TRAIN_DCP = REPO / "examples" / "train_dcp.py"

pytestmark = pytest.mark.timeout(900)


@pytest.fixture
def memory_dir() -> Iterator[Path]:
    path = Path("/dev/shm") / f"ej-test-{uuid.uuid4().hex[:10]}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _agent(tmp_path: Path, memory_dir: Path, nproc: int, steps: int) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "agent"), env.get("PYTHONPATH", "")])
    env.update(
        ELASTICJOB_CHECKPOINT_MEMORY_LIMIT="256Mi",
        ELASTICJOB_CHECKPOINT_MEMORY_DIR=str(memory_dir),
        ELASTICJOB_CHECKPOINT_PERSIST_DIR=str(tmp_path / "disk"),
    )
    port = free_port()
    argv = [sys.executable, "-m", "elasticjob_agent", "--standalone"]
    argv += ["--nproc-per-node", str(nproc), "--health-port", str(port)]
    argv += ["--health-addr", "127.0.0.1", str(TRAIN_DCP), "--steps", str(steps)]
    done = subprocess.run(
        argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=400, check=False
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-5000:]
    assert f"done step={steps} rank=0" in log, log[-5000:]
    return done.stdout


def test_the_dcp_example_reshards_its_checkpoint_into_more_ranks(
    tmp_path: Path, memory_dir: Path
) -> None:
    log = _agent(tmp_path, memory_dir, 2, 20)
    log += _agent(tmp_path, memory_dir, 3, 30)
    assert "resumed from step=20 rank=2 world_size=3 saved_world_size=2" in log, log[-3000:]
    runs = runs_of(steps_of(log))
    assert [(r[0].step, r[-1].step, r[0].world_size) for r in runs] == [(1, 20, 2), (21, 30, 3)]
    assert sample_problems(data_of(log), runs) == []
    (change,) = changes_of(runs)
    ratio = change.first_loss_after / change.last_loss_before
    assert 0.8 <= ratio <= 1.2, (change.last_loss_before, change.first_loss_after)
