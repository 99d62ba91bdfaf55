"""torchrun parity: what a torchrun user types works unchanged under ``elasticjob-agent``."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from elasticjob_agent.ports import free_port

from tests.support.agent_harness import TRAIN, Agent, wait_for

pytestmark = pytest.mark.timeout(300)

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


def test_c10d_backend_runs_under_our_supervisor_and_a_killed_worker_restarts_the_group(
    spawn_agent: Spawn, tmp_path: Path
) -> None:
    """torchrun's default rendezvous (torch's c10d handler on a TCPStore that one of the agents
    hosts), no etcd anywhere: two agents train, a SIGKILLed worker restarts both groups, and
    the job finishes. Restarts are counted per agent, as torchrun does."""
    flags = [
        "--nnodes", "2",
        "--nproc-per-node", "1",
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
        "--rdzv-id", f"t-{uuid.uuid4().hex[:10]}",
        "--rdzv-conf", "last_call_timeout=1",
        "--max-restarts", "1",
    ]  # fmt: skip
    train = [
        str(TRAIN),
        "--steps", "40",
        "--step-sleep", "0.2",
        "--checkpoint-every", "5",
        "--checkpoint-dir", str(tmp_path / "ckpt"),
    ]  # fmt: skip
    a = spawn_agent("a", [*flags, *train])
    b = spawn_agent("b", [*flags, *train])
    a.wait_running(world_size=2)
    running = b.wait_running(world_size=2)
    assert running["etcd"]["endpoints"] == []  # no etcd: the report says so
    wait_for((tmp_path / "ckpt" / "step-5.pt").exists, 120, "the first checkpoint")
    os.kill(running["workers"][0]["pid"], signal.SIGKILL)

    # Each agent counts what it saw (torchrun's rule): b its worker's failure; a either b's
    # return to the rendezvous (membership) or its own worker's lost connection (failure),
    # whichever it noticed first. One restart each, whatever the order.
    b.wait_status(
        lambda s: s["restarts"]["byReason"].get("failure") == 1 and s["state"] == "Running",
        120,
        "b restarted after its worker failed",
    )
    restarted = a.wait_status(
        lambda s: s["restarts"]["total"] == 1 and s["state"] == "Running", 120, "a restarted"
    )
    counted = {reason for reason, n in restarted["restarts"]["byReason"].items() if n}
    assert counted <= {"failure", "membership"}, restarted
    assert a.wait_exit(240) == 0, a.log()[-3000:]
    assert b.wait_exit(60) == 0, b.log()[-3000:]
    logs = a.log() + b.log()
    assert "resumed from step=" in logs and "done step=40" in logs, logs[-3000:]
    assert "killed by SIGKILL" in b.log(), b.log()[-3000:]
    for agent in (a, b):
        log = agent.log()
        assert log.count("event=workers_started") == 2, log[-3000:]
        # The agent's own output: no traceback (the peer's gloo error is a worker's, "[rank0]:").
        own = [line for line in log.splitlines() if not line.startswith("[rank")]
        assert not any("Traceback" in line for line in own), log[-3000:]
