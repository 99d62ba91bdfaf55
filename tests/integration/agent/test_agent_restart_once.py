"""A node that leaves or dies restarts the group once for the job, whatever every agent sees.

Real agents, real gloo workers, real etcd: when one of three nodes goes away, the survivors'
workers fail (their peer is gone) and they re-form; neither those failures nor a failure of the
freshly re-formed group while it connects may be counted as extra restarts, and no worker may
die at start-up for reasons of the agent's own (see ``elasticjob_agent._fork_safe_grpc``).
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_harness import (
    SCRIPTS,
    TRAIN,
    Agent,
    expire_lease_of,
    job_counts,
    pid_alive,
    rdzv_flags,
    wait_for,
)

pytestmark = pytest.mark.timeout(420)

SETTLE = 6.0
"""Seconds past the re-formed round in which a late count or a second restart would show: a
lapsed lease (the 2 s heartbeat), a few membership checks and a peer's count grace (3 s)."""

Spawn = Callable[..., Agent]

# Long enough that training outlives the test; the fixture kills the agents at the end.
_STEPS = "100000"


def _three_agents(
    ep: str, spawn_agent: Spawn, tmp_path: Path, *extra: str, nnodes: str = "2:3"
) -> tuple[str, list[Agent], dict[str, int]]:
    """Three agents training together, and the job's counts at that point: empty, or one
    ``membership`` restart when a loaded machine started the third agent after the first two
    had formed a round (it then waits and is admitted; elastic, and free)."""
    run_id = f"t-{uuid.uuid4().hex[:10]}"
    flags = [*rdzv_flags(ep, run_id, nnodes), "--nproc-per-node", "1", "--max-restarts", "3"]
    flags += extra
    train = [
        str(TRAIN),
        "--steps", _STEPS,
        "--step-sleep", "0.05",
        "--checkpoint-every", "20",
        "--checkpoint-dir", str(tmp_path / "ckpt"),
    ]  # fmt: skip
    agents = [spawn_agent(n, [*flags, *train]) for n in ("a", "b", "c")]
    for agent in agents:
        agent.wait_running(world_size=3, timeout=240)
    # Mid-training: every rank has taken steps together.
    wait_for((tmp_path / "ckpt" / "step-20.pt").exists, 180, "the first checkpoint")
    baseline = job_counts(ep, run_id)
    assert baseline in ({}, {"membership": 1}), baseline
    return run_id, agents, baseline


def _minus(counts: dict[str, int], baseline: dict[str, int]) -> dict[str, int]:
    """The restarts counted since ``baseline``."""
    return {k: v - baseline.get(k, 0) for k, v in counts.items() if v - baseline.get(k, 0)}


def _settled(survivors: list[Agent], ep: str, run_id: str, world_size: int = 2) -> dict[str, int]:
    """Wait until the survivors train together again (all running, in one round: one may
    still report the old round), then until each proves it ran ``SETTLE`` seconds longer
    (late counts or a second restart would show by then)."""
    rounds: dict[str, int] = {}

    def together() -> bool:
        rounds.clear()
        for agent in survivors:
            status = agent.status()
            if status is None or status["state"] != "Running" or not status["workers"]:
                return False
            if status["worldSize"] != world_size:
                return False
            rounds[agent.name] = status["round"]
        return len(set(rounds.values())) == 1

    wait_for(together, 240, f"the survivors running together (world size {world_size})")
    past = time.time() + SETTLE
    for agent in survivors:
        status = agent.report_after(past)
        assert status["state"] == "Running", (agent.name, status)
        assert status["round"] == rounds[agent.name], (agent.name, rounds, status)
    return job_counts(ep, run_id)


def _stopped(log: str) -> list[str]:
    return [line for line in log.splitlines() if "event=group_stopped" in line]


def test_deleted_node_counts_one_preemption(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep = etcd_server_session.endpoint
    run_id, (a, b, c), baseline = _three_agents(ep, spawn_agent, tmp_path)

    c.signal(signal.SIGTERM)
    assert c.wait_exit(60) == 143, c.log()[-3000:]
    counts = _minus(_settled([a, b], ep, run_id), baseline)
    detail = "\n".join(_stopped(a.log()) + _stopped(b.log()) + _stopped(c.log()))
    assert counts == {"preemption": 1}, f"{counts}\n{detail}"


def test_lost_node_counts_one_restart(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep = etcd_server_session.endpoint
    # Cold starts only: every worker is forked by the agent while its etcd client is busy
    # (a fork that crashed with SIGSEGV under load used to count as an extra failure).
    run_id, (a, b, c), baseline = _three_agents(ep, spawn_agent, tmp_path, "--warm-workers", "0")

    c.signal(signal.SIGKILL)
    c.wait_exit(30)
    wait_for(lambda: not any(pid_alive(p) for p in c.seen_pids), 30, "c's workers to die")
    counts = _minus(_settled([a, b], ep, run_id), baseline)
    detail = "\n".join(_stopped(a.log()) + _stopped(b.log()))
    assert sum(counts.values()) == 1, f"{counts}\n{detail}"
    assert set(counts) <= {"failure", "membership"}, f"{counts}\n{detail}"


def test_a_member_whose_lease_lapsed_while_it_trained_is_one_free_membership_restart(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    """etcd dropped a live node's keys (it saw no keep-alive within the TTL: a starved etcd or
    agent). Nobody failed: the node counts the restart itself as ``membership``, the others wait
    for it instead of counting a ``failure``, and all three train on together."""
    ep = etcd_server_session.endpoint
    # 3:3: the other two cannot re-form without c, so its slower re-join adds no restart.
    run_id, (a, b, c), baseline = _three_agents(ep, spawn_agent, tmp_path, nnodes="3:3")

    expire_lease_of(ep, run_id, "c")
    wait_for(lambda: job_counts(ep, run_id) != baseline, 60, "the restart to be counted")
    counts = _minus(_settled([a, b, c], ep, run_id, world_size=3), baseline)
    detail = "\n".join(_stopped(a.log()) + _stopped(b.log()) + _stopped(c.log()))
    assert counts == {"membership": 1}, f"{counts}\n{detail}"
    assert "event=lease_lapsed" in c.log(), c.log()[-3000:]


def test_a_lease_lapse_after_a_node_finished_does_not_restart_the_group(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    """Node a's workers all exited 0 (it waits in the exit barrier); b's are still exiting when
    etcd drops b's keys. Re-forming then would leave a (finished, never joining again) and b
    waiting for each other until a timeout. b must let its workers finish instead: both exit 0
    and nothing is counted."""
    ep = etcd_server_session.endpoint
    run_id = f"t-{uuid.uuid4().hex[:10]}"
    go = tmp_path / "go"
    flags = [*rdzv_flags(ep, run_id, "2:2"), "--nproc-per-node", "1", "--max-restarts", "3"]
    script = [str(SCRIPTS / "linger_after_done.py"), str(go)]
    a, b = (spawn_agent(n, [*flags, *script]) for n in ("a", "b"))
    a.wait_status(lambda s: s["state"] == "Succeeded", 240, "a's workers to exit 0")
    b.wait_running(world_size=2, timeout=30)
    baseline = job_counts(ep, run_id)

    expire_lease_of(ep, run_id, "b")
    wait_for(lambda: "event=group_finishing" in b.log(), 30, "b to see the group finishing")
    go.touch()
    assert b.wait_exit(60) == 0, b.log()[-3000:]
    assert a.wait_exit(30) == 0, a.log()[-3000:]
    assert job_counts(ep, run_id) == baseline, (job_counts(ep, run_id), baseline)
    assert not _stopped(b.log()), b.log()[-3000:]
    assert "exiting rank=1 restart_count=0" in b.log(), b.log()[-3000:]
