"""torchrun parity: what a torchrun user types works unchanged under ``elasticjob-agent``."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_harness import TRAIN, Agent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

Spawn = Callable[..., Agent]


def test_two_agents_on_one_host_with_default_flags_finish_a_job(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    # torchrun's usual flags only: no health port, no node id; both agents want port 29401
    # and default to the same hostname-based node id scheme.
    run_id = f"t-{uuid.uuid4().hex[:10]}"
    flags = [
        "--nnodes", "2",
        "--nproc-per-node", "1",
        "--rdzv-backend", "etcd-v3",
        "--rdzv-endpoint", etcd_server_session.endpoint,
        "--rdzv-id", run_id,
        "--max-restarts", "1",
    ]  # fmt: skip
    train = [str(TRAIN), "--steps", "8", "--checkpoint-dir", str(tmp_path / "ckpt")]
    a = spawn_agent("a", [*flags, *train], as_torchrun=True)
    port_a = a.serving_port(timeout=120)
    b = spawn_agent("b", [*flags, "--start-method", "fork", *train], as_torchrun=True)
    port_b = b.serving_port(timeout=120)
    assert port_a != port_b
    if port_a == 29401:  # else 29401 was taken by something else before the test: both fell back
        assert "is in use" in b.log()
    # The fallback port is the one reported in /status.
    a.health_port, b.health_port = port_a, port_b
    report = b.wait_status(lambda s: s.get("healthPort") == port_b, 60, "healthPort in /status")
    assert report["node"] != (a.status() or {}).get("node", "")

    assert a.wait_exit(180) == 0, a.log()[-3000:]
    assert b.wait_exit(60) == 0, b.log()[-3000:]
    for agent in (a, b):
        log = agent.log()
        assert "done step=8" in log
        assert "Traceback" not in log, log[-3000:]
