"""Compute time per step in the health report, with real agents, real gloo workers and a real
etcd: each node's figure is its own ranks' compute (the all-reduce outside the timer does not
even it out), and a rank's nonsense timings are ignored and counted."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from elasticjob_agent.protocol.exit_codes import ExitCode

from tests.support.agent_harness import SCRIPTS, Agent, rdzv_flags

pytestmark = pytest.mark.timeout(420)

Spawn = Callable[..., Agent]


def test_each_node_reports_its_own_compute_time(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep, run_id = etcd_server_session.endpoint, f"t-{uuid.uuid4().hex[:10]}"
    flags = [*rdzv_flags(ep, run_id, "2:2"), "--nproc-per-node", "2", "--max-restarts", "0"]
    script = str(SCRIPTS / "timed_steps.py")
    stop = tmp_path / "stop"
    fast = spawn_agent(
        "fast", [*flags, "--preflight", script], {"SLOW_SECONDS": "0.01", "STOP_FILE": str(stop)}
    )
    slow = spawn_agent(
        "slow",
        [*flags, script],
        {"SLOW_SECONDS": "0.2", "STOP_FILE": str(stop), "BAD_TIMINGS": "1"},
    )
    try:

        def settled(s: dict[str, Any]) -> bool:
            return s["state"] == "Running" and (s.get("computeSamples") or 0) >= 20

        fast_seen = fast.wait_status(settled, 240, "20 timings")
        slow_seen = slow.wait_status(settled, 240, "20 timings")
    finally:
        stop.touch()
    # Two ranks a node, each with its own window: the median of 0.01 s sleeps, and of 0.2 s ones.
    assert 0.01 <= fast_seen["computeSeconds"] < 0.1, fast_seen
    assert 0.2 <= slow_seen["computeSeconds"] < 0.5, slow_seen
    assert fast_seen["computeRejected"] == 0, fast_seen
    # The pre-flight check ran (and only where asked for), before the round.
    assert 0 < fast_seen["preflightSeconds"] < 10, fast_seen
    assert slow_seen["preflightSeconds"] is None, slow_seen
    assert slow_seen["computeRejected"] >= 20, slow_seen  # one nonsense timing a step, a rank
    assert fast.wait_exit(120) == ExitCode.SUCCEEDED, fast.log()[-3000:]
    assert slow.wait_exit(60) == ExitCode.SUCCEEDED, slow.log()[-3000:]
    assert "finished rank=" in fast.log()
