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

from tests.support.agent_harness import (
    TRAIN,
    Agent,
    job_counts,
    pid_alive,
    rdzv_flags,
    wait_for,
)
from tests.support.rendezvous_handlers import node_keys

pytestmark = pytest.mark.timeout(420)

Spawn = Callable[..., Agent]
JOIN_TIMEOUT = 15
"""Short, so that the tests see a spare stand by longer than its join timeout."""
SETTLE = 6.0
"""Seconds past an event in which a wrong reaction to it would show: a lapsed lease (the 2 s
heartbeat), a few membership checks (0.2 s each) and a peer's restart-count grace (3 s). Each
check reads reports that prove the agents ran past that point (``Agent.report_after``)."""


def _past_join_timeout(spare: Agent) -> float:
    """When the spare's current rendezvous attempt passes its join timeout (and a bit)."""
    return spare.event_times("rendezvous_started")[-1] + JOIN_TIMEOUT + 1


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
    past = _past_join_timeout(spare)
    assert spare.report_after(past)["state"] == "Standby", spare.log()[-3000:]
    for member in members:
        now = member.report_after(past)
        assert now["state"] == "Running", (member.name, now)
        assert now["round"] == running["round"], (member.name, running, now)
    assert job_counts(ep, run_id) in ({}, {"membership": 1})


def test_a_lost_member_is_replaced_by_the_spare_and_counted_once(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep = etcd_server_session.endpoint
    run_id, (survivor, lost), spare, running = _spare_job(ep, spawn_agent, tmp_path)
    baseline = job_counts(ep, run_id)
    # The spare has stood by longer than its join timeout.
    assert spare.report_after(_past_join_timeout(spare))["state"] == "Standby"

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
    # Late counts or a second restart would land within SETTLE of the new round.
    past = time.time() + SETTLE
    reports = {agent.name: agent.report_after(past) for agent in (survivor, spare)}
    counts = job_counts(ep, run_id)
    added = {k: v - baseline.get(k, 0) for k, v in counts.items() if v != baseline.get(k, 0)}
    assert added == {"failure": 1}, (baseline, counts)
    for agent in (survivor, spare):
        now = reports[agent.name]
        assert now["state"] == "Running", (agent.name, now)
        assert now["round"] == after["round"], (agent.name, after, now)


def test_the_spare_dying_restarts_nothing(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep = etcd_server_session.endpoint
    run_id, members, spare, running = _spare_job(ep, spawn_agent, tmp_path)
    baseline = job_counts(ep, run_id)

    assert node_keys(ep, run_id, spare.name), "the spare holds no key: nothing to lose"
    spare.signal(signal.SIGKILL)
    spare.wait_exit(30)
    # Its lease lapses (the heartbeat's TTL) and its keys vanish: the members may see it now.
    wait_for(lambda: not node_keys(ep, run_id, spare.name), 60, "the spare's keys to lapse")
    past = time.time() + SETTLE
    for member in members:
        now = member.report_after(past)
        assert now["state"] == "Running", (member.name, now)
        assert now["round"] == running["round"], (member.name, running, now)
        assert "event=group_stopped" not in member.log(), member.log()[-3000:]
    assert job_counts(ep, run_id) == baseline
