"""Checkpoints through the real ``elasticjob-agent`` (its checkpoint service wired in by the
environment), and without any agent (plain torchrun's case: memory and disk, no peer)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticjob_agent.ports import free_port

from tests.support.checkpoint_harness import run_ranks
from tests.support.paths import REPO

SCRIPTS = Path(__file__).resolve().parent / "scripts"

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def memory_dir() -> Iterator[Path]:
    path = Path("/dev/shm") / f"ej-test-{uuid.uuid4().hex[:10]}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_agent_serves_its_workers_and_a_restarted_group_resumes(
    tmp_path: Path, memory_dir: Path
) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "agent"), env.get("PYTHONPATH", "")])
    port = free_port()
    env.update(
        ELASTICJOB_CHECKPOINT_MEMORY_LIMIT="64Mi",
        ELASTICJOB_CHECKPOINT_MEMORY_DIR=str(memory_dir),
        HEALTH_PORT=str(port),
    )
    out = tmp_path / "restored"
    argv = [sys.executable, "-m", "elasticjob_agent", "--standalone", "--nproc-per-node", "2"]
    argv += ["--max-restarts", "1", "--health-port", str(port), "--health-addr", "127.0.0.1"]
    argv += ["--monitor-interval", "0.5"]
    argv += [str(SCRIPTS / "ckpt_train_fail_once.py"), str(out)]
    proc = subprocess.run(
        argv,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        timeout=500,
        check=False,
    )
    log = proc.stdout.decode()[-3000:] + proc.stderr.decode()[-5000:]
    assert proc.returncode == 0, log
    results = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in (0, 1)]
    report = results[0].pop("report")
    assert results == [{"step": 3, "source": "memory", "ok": True}] * 2, log
    # The agent's health report says what the restore kept, and in which round.
    restore = report["lastRestore"]
    assert restore is not None, (report, log)
    assert isinstance(restore.pop("round"), int), (report, log)
    assert restore.pop("seconds") >= 0
    assert restore == {"step": 3, "savedWorldSize": 2, "worldSize": 2, "source": "memory"}
    assert report["lastSavedStep"] == 3, (report, log)
    assert "checkpoint service: memory" in proc.stderr.decode()


def test_without_an_agent_memory_then_disk(tmp_path: Path, memory_dir: Path) -> None:
    env = {
        "ELASTICJOB_CHECKPOINT_MEMORY_LIMIT": "64Mi",
        "ELASTICJOB_CHECKPOINT_MEMORY_DIR": str(memory_dir),
        "ELASTICJOB_CHECKPOINT_PERSIST_DIR": str(tmp_path / "disk"),
    }
    saved = run_ranks(tmp_path, [None], "save", "--steps", "1,2,3", env=env)
    assert saved[0]["flushed"] and saved[0]["saved"] == [[1, True], [2, True], [3, True]]
    loaded = run_ranks(tmp_path, [None], "load", env=env)
    assert (loaded[0]["step"], loaded[0]["source"], loaded[0]["ok"]) == (3, "memory", True)
    shutil.rmtree(memory_dir)  # the node rebooted: memory gone, local disk kept
    loaded = run_ranks(tmp_path, [None], "load", env=env)
    assert (loaded[0]["step"], loaded[0]["source"], loaded[0]["ok"]) == (3, "disk", True)
