"""Progress reports and hang detection with real agents, real gloo workers and a real etcd.

One rank stops reporting progress (it sleeps inside the loop) while its peer blocks in an
all-reduce: gloo's own timeout is 30 minutes away, so only the agents' progress timeout ends it.
The group restarts once for the job, counted as ``hang`` (which spends the budget), and the job
then finishes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from elasticjob_agent.protocol.exit_codes import ExitCode

from tests.support.agent_harness import SCRIPTS, Agent, job_counts, pid_alive, rdzv_flags

pytestmark = pytest.mark.timeout(420)

Spawn = Callable[..., Agent]


def test_a_hung_rank_restarts_the_group_once_as_hang(
    etcd_server_session: Any, spawn_agent: Spawn
) -> None:
    ep, run_id = etcd_server_session.endpoint, f"t-{uuid.uuid4().hex[:10]}"
    flags = [*rdzv_flags(ep, run_id, "2:2"), "--nproc-per-node", "1", "--max-restarts", "1"]
    flags += ["--progress-timeout", "10"]
    script = str(SCRIPTS / "hang_once.py")
    a = spawn_agent("a", [*flags, script])
    b = spawn_agent("b", [*flags, script])
    # Both report steps while training (the health report's lastStep / lastStepAt).
    for agent in (a, b):
        seen = agent.wait_status(
            lambda s: s["state"] == "Running" and s.get("lastStep") is not None,
            240,
            "a reported step",
        )
        assert seen["lastStep"] >= 1 and seen["lastStepAt"] > 0, seen
    assert a.wait_exit(300) == ExitCode.SUCCEEDED, a.log()[-3000:]
    assert b.wait_exit(60) == ExitCode.SUCCEEDED, b.log()[-3000:]
    logs = a.log() + b.log()
    assert "hanging" in logs
    assert "event=no_progress" in logs, logs[-3000:]
    # The root cause names the silence, not a peer's lost connection.
    assert "failed: no training step for" in logs, logs[-3000:]
    assert "finished rank=0 restarts=1" in logs and "finished rank=1 restarts=1" in logs
    # Once for the job, whoever saw it first; the peer's failed all-reduce is the same restart.
    assert job_counts(ep, run_id) == {"hang": 1}
    for agent in (a, b):
        assert not any(pid_alive(p) for p in agent.seen_pids), agent.name


def test_without_a_first_step_nothing_is_a_hang(
    etcd_server_session: Any, spawn_agent: Spawn
) -> None:
    """A worker that never reports a step (a script that does not opt in, or one still loading
    its model) is never restarted for want of progress, however long it runs."""
    ep, run_id = etcd_server_session.endpoint, f"t-{uuid.uuid4().hex[:10]}"
    flags = [*rdzv_flags(ep, run_id, "1:1"), "--nproc-per-node", "1", "--max-restarts", "0"]
    flags += ["--progress-timeout", "1", "--no-python"]
    a = spawn_agent("a", [*flags, "sh", "-c", "sleep 4; echo slept"])
    assert a.wait_exit(120) == ExitCode.SUCCEEDED, a.log()[-3000:]
    assert "slept" in a.log() and "event=no_progress" not in a.log()
    assert job_counts(ep, run_id) == {}
