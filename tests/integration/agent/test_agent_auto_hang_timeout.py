"""The automatic hang timeout with real agents, real gloo workers and a real etcd: the timeout
learned from the steps is reported while the group trains, a hung rank is restarted as ``hang``
once for the job, and the job then finishes."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from elasticjob_agent.protocol.exit_codes import ExitCode

from tests.support.agent_harness import SCRIPTS, Agent, job_counts, rdzv_flags

pytestmark = pytest.mark.timeout(420)

Spawn = Callable[..., Agent]


def test_a_learned_timeout_is_reported_and_ends_a_hang(
    etcd_server_session: Any, spawn_agent: Spawn
) -> None:
    ep, run_id = etcd_server_session.endpoint, f"t-{uuid.uuid4().hex[:10]}"
    flags = [*rdzv_flags(ep, run_id, "2:2"), "--nproc-per-node", "1", "--max-restarts", "1"]
    flags += ["--progress-timeout", "auto"]
    flags += ["--progress-auto-conf", "factor=3,percentile=100,floor=3,ceiling=120,exempt=2"]
    script = str(SCRIPTS / "hang_once.py")
    a = spawn_agent("a", [*flags, script])
    b = spawn_agent("b", [*flags, script])
    # Steps take ~0.1 s (more on a loaded machine): 3 x the slowest, at least the 3 s floor.
    seen = a.wait_status(
        lambda s: s["state"] == "Running" and s.get("progressTimeoutSeconds") is not None,
        240,
        "a learned timeout in the report",
    )
    assert 3.0 <= seen["progressTimeoutSeconds"] <= 120.0, seen
    assert a.wait_exit(300) == ExitCode.SUCCEEDED, a.log()[-3000:]
    assert b.wait_exit(60) == ExitCode.SUCCEEDED, b.log()[-3000:]
    logs = a.log() + b.log()
    assert "event=no_progress" in logs and "learned=True" in logs, logs[-3000:]
    assert job_counts(ep, run_id) == {"hang": 1}
