"""Hot spares with real agents, real gloo workers and a real etcd.

A fixed-size job (``--nnodes 2:2``) with three agents: two form the group, the third stands by
(health state ``Standby``, its warm worker has imported torch), past its join timeout, without
making the group re-rendezvous. A member lost calls the spare into the next round, counted once
as that member's failure; the spare's own death restarts and counts nothing.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_harness import TRAIN, Agent, job_counts, pid_alive, rdzv_flags, wait_for

pytestmark = pytest.mark.timeout(420)

Spawn = Callable[..., Agent]
JOIN_TIMEOUT = 15
"""Short, so that the tests see a spare stand by longer than its join timeout."""


def _spare_job(
    ep: str, spawn_agent: Spawn, tmp_path: Path
) -> tuple[str, list[Agent], Agent, dict[str, Any]]:
    """Three agents on a 2:2 job: the two members training, and the spare standing by with
    its warm worker ready. Returns the run id, the members, the spare and a member's status."""
    run_id = f"t-{uuid.uuid4().hex[:10]}"
    flags = [
        *rdzv_flags(ep, run_id, "2:2", join_timeout=JOIN_TIMEOUT),
        "--nproc-per-node", "1",
        "--max-restarts", "3",
    ]  # fmt: skip
    train = [
        str(TRAIN),
        "--steps", "100000",
        "--step-sleep", "0.05",
        "--checkpoint-every", "20",
        "--checkpoint-dir", str(tmp_path / "ckpt"),
    ]  # fmt: skip
    agents = [spawn_agent(n, [*flags, *train]) for n in ("a", "b", "c")]
    states: dict[str, dict[str, Any]] = {}

    def settled() -> bool:
        for agent in agents:
            status = agent.status()
            assert agent.proc.poll() is None, f"{agent.name} exited:\n{agent.log()[-3000:]}"
            if status is not None:
                states[agent.name] = status
        return sorted(s["state"] for s in states.values()) == ["Running", "Running", "Standby"]

    wait_for(settled, 240, "two members running and one spare standing by")
    (spare,) = [a for a in agents if states[a.name]["state"] == "Standby"]
    members = [a for a in agents if a is not spare]
    spare.wait_status(
        lambda s: s["warmWorkers"] == s["warmPool"] == 1, 180, "the spare's warm worker (torch)"
    )
    running = members[0].wait_running(world_size=2)
    wait_for((tmp_path / "ckpt" / "step-20.pt").exists, 180, "the first checkpoint")
    return run_id, members, spare, running


def test_a_spare_stands_by_warm_without_moving_the_group(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep = etcd_server_session.endpoint
    run_id, members, spare, running = _spare_job(ep, spawn_agent, tmp_path)

    status = spare.status()
    assert status is not None
    assert status["waitingSince"] is None, status  # the job lacks nothing: no stall to judge
    assert status["workers"] == [], status  # not in the group: no worker runs
    assert "event=standing_by" in spare.log()
    # Past its join timeout the spare still stands by, and the group never re-rendezvoused.
    time.sleep(JOIN_TIMEOUT + 5)
    assert spare.status()["state"] == "Standby", spare.log()[-3000:]  # type: ignore[index]
    for member in members:
        now = member.status()
        assert now is not None and now["state"] == "Running", (member.name, now)
        assert now["round"] == running["round"], (member.name, running, now)
    assert job_counts(ep, run_id) in ({}, {"membership": 1})


def test_a_lost_member_is_replaced_by_the_spare_and_counted_once(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep = etcd_server_session.endpoint
    run_id, (survivor, lost), spare, running = _spare_job(ep, spawn_agent, tmp_path)
    baseline = job_counts(ep, run_id)
    time.sleep(JOIN_TIMEOUT + 2)  # the spare has stood by longer than its join timeout

    lost.signal(signal.SIGKILL)  # the node is gone: its agent and its workers die at once
    lost.wait_exit(30)
    wait_for(lambda: not any(pid_alive(p) for p in lost.seen_pids), 30, "the lost workers")

    after = spare.wait_running(world_size=2, timeout=240)
    again = survivor.wait_running(world_size=2, timeout=240)
    assert after["round"] == again["round"] > running["round"], (running, after, again)
    log = spare.log()
    assert "event=called_in" in log, log[-3000:]
    # Its worker was the warm one: torch was imported while it stood by.
    started = [line for line in log.splitlines() if "event=workers_started" in line]
    assert started and "warm=True" in started[-1], started
    time.sleep(8)  # late counts would land here
    counts = job_counts(ep, run_id)
    added = {k: v - baseline.get(k, 0) for k, v in counts.items() if v != baseline.get(k, 0)}
    assert added == {"failure": 1}, (baseline, counts)
    for agent in (survivor, spare):
        now = agent.status()
        assert now is not None and now["state"] == "Running", (agent.name, now)
        assert now["round"] == after["round"], (agent.name, after, now)


def test_the_spare_dying_restarts_nothing(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep = etcd_server_session.endpoint
    run_id, members, spare, running = _spare_job(ep, spawn_agent, tmp_path)
    baseline = job_counts(ep, run_id)

    spare.signal(signal.SIGKILL)
    spare.wait_exit(30)
    time.sleep(10)  # several heartbeats and membership checks
    for member in members:
        now = member.status()
        assert now is not None and now["state"] == "Running", (member.name, now)
        assert now["round"] == running["round"], (member.name, running, now)
        assert "event=group_stopped" not in member.log(), member.log()[-3000:]
    assert job_counts(ep, run_id) == baseline
