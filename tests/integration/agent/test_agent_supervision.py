"""Real agents, real gloo workers, real etcd: failures, membership changes, budget, timers."""

from __future__ import annotations

import os
import re
import signal
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.health import HealthReport

from tests.support.agent_harness import (
    SCRIPTS,
    TRAIN,
    Agent,
    close_reason,
    job_counts,
    pid_alive,
    rdzv_flags,
    wait_for,
)

pytestmark = pytest.mark.timeout(420)

Spawn = Callable[..., Agent]


def _run_id() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def _train(tmp_path: Path, steps: int, sleep: float = 0.1) -> list[str]:
    return [
        str(TRAIN),
        "--steps", str(steps),
        "--step-sleep", str(sleep),
        "--checkpoint-every", "5",
        "--checkpoint-dir", str(tmp_path / "ckpt"),
    ]  # fmt: skip


def _ranks_started(log: str, world_size: int) -> set[int]:
    # Not \b after the size: the workers share the agent's output, unbuffered, and print() writes
    # a line and its newline apart, so another rank's line may follow with no newline between.
    return {
        int(m.group(1))
        for m in re.finditer(rf"start step=\d+ rank=(\d+) world_size={world_size}(?!\d)", log)
    }


def test_worker_killed_restarts_every_group_once_and_resumes(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep, run_id = etcd_server_session.endpoint, _run_id()
    flags = [*rdzv_flags(ep, run_id, "2:2"), "--nproc-per-node", "2", "--max-restarts", "3"]
    a = spawn_agent("a", [*flags, *_train(tmp_path, 60)])
    b = spawn_agent("b", [*flags, *_train(tmp_path, 60)])
    a.wait_running(world_size=4)
    running = b.wait_running(world_size=4)
    wait_for((tmp_path / "ckpt" / "step-5.pt").exists, 120, "the first checkpoint")

    # The health server while training: liveness, the v1 report, and the metrics.
    assert a.get("/healthz")[0] == 200
    report = HealthReport.loads(a.get("/status")[1])
    assert report.state.value == "Running" and report.world_size == 4
    assert report.worst_case_time_to_fail_seconds == 4 * (1800 + 600)
    metrics = a.get("/metrics")[1].decode()
    for name in (
        "elasticjob_agent_job_restarts",
        "elasticjob_agent_rendezvous_round",
        "elasticjob_agent_rendezvous_duration_seconds_bucket",
        "elasticjob_agent_world_size",
        "elasticjob_agent_etcd_reachable",
    ):
        assert name in metrics

    victim = running["workers"][1]["pid"]
    os.kill(victim, signal.SIGKILL)

    assert a.wait_exit(300) == ExitCode.SUCCEEDED, a.log()[-3000:]
    assert b.wait_exit(60) == ExitCode.SUCCEEDED, b.log()[-3000:]
    assert job_counts(ep, run_id) == {"failure": 1}
    logs = a.log() + b.log()
    assert "resumed from step=" in logs
    assert "done step=60" in logs
    # Both groups restarted: each agent started its workers twice.
    for agent in (a, b):
        assert agent.log().count("event=workers_started") == 2
        assert "TORCHELASTIC_RESTART_COUNT" not in agent.log()  # env is not logged


def test_nodes_leave_and_join_a_running_job(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep, run_id = etcd_server_session.endpoint, _run_id()
    flags = [*rdzv_flags(ep, run_id, "1:3"), "--nproc-per-node", "2", "--max-restarts", "5"]
    train = _train(tmp_path, 100_000, sleep=0.05)
    a, b, c = (spawn_agent(n, [*flags, *train]) for n in ("a", "b", "c"))
    for agent in (a, b, c):
        agent.wait_running(world_size=6)

    # SIGKILL one agent: its workers die with it; the other two re-form with contiguous ranks.
    c.signal(signal.SIGKILL)
    c.wait_exit(30)
    wait_for(lambda: not any(pid_alive(p) for p in c.seen_pids), 30, "c's workers to die")
    sa = a.wait_running(world_size=4, timeout=180)
    sb = b.wait_running(world_size=4, timeout=180)
    assert {sa["groupRank"], sb["groupRank"]} == {0, 1}
    wait_for(lambda: _ranks_started(a.log() + b.log(), 4) == {0, 1, 2, 3}, 120, "ranks 0..3")

    # SIGTERM another: it leaves at once with exit 143; the last one goes on alone.
    b.signal(signal.SIGTERM)
    assert b.wait_exit(60) == ExitCode.TERMINATED
    alone = a.wait_running(world_size=2, timeout=180)
    assert alone["groupRank"] == 0
    counts = job_counts(ep, run_id)
    assert counts.get("preemption", 0) >= 1, counts

    # A new node joins the running job and is admitted.
    d = spawn_agent("d", [*flags, *train])
    a.wait_running(world_size=4, timeout=180)
    d.wait_running(world_size=4, timeout=180)
    assert job_counts(ep, run_id).get("membership", 0) >= 1

    for agent in (a, d):
        agent.signal(signal.SIGTERM)
    for agent in (a, d):
        assert agent.wait_exit(60) == ExitCode.TERMINATED
    for agent in (a, b, c, d):
        assert not any(pid_alive(p) for p in agent.seen_pids), agent.name


def test_budget_spent_every_agent_exits_10(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep, run_id = etcd_server_session.endpoint, _run_id()
    flags = [*rdzv_flags(ep, run_id, "2:2"), "--nproc-per-node", "2", "--max-restarts", "1"]
    script = str(SCRIPTS / "always_fail.py")
    a = spawn_agent("a", [*flags, script])
    b = spawn_agent("b", [*flags, script])
    a.wait_running(world_size=4)
    assert a.wait_exit(300) == ExitCode.MAX_RESTARTS_EXCEEDED, a.log()[-3000:]
    assert b.wait_exit(60) == ExitCode.MAX_RESTARTS_EXCEEDED, b.log()[-3000:]
    # One count per group restart, not one per agent: 2 failures = max_restarts + 1.
    assert job_counts(ep, run_id) == {"failure": 2}
    assert close_reason(ep, run_id) == "MaxRestartsExceeded"
    for agent in (a, b):
        assert not any(pid_alive(p) for p in agent.seen_pids), agent.name


def test_worker_stuck_past_its_timer_is_killed_and_restarted(
    etcd_server_session: Any, spawn_agent: Spawn
) -> None:
    ep, run_id = etcd_server_session.endpoint, _run_id()
    flags = [*rdzv_flags(ep, run_id, "1:1"), "--nproc-per-node", "2", "--max-restarts", "1"]
    a = spawn_agent("a", [*flags, str(SCRIPTS / "stuck_once.py")])
    assert a.wait_exit(240) == ExitCode.SUCCEEDED, a.log()[-3000:]
    log = a.log()
    assert "stuck" in log and "event=timer_expired" in log
    assert "finished rank=0" in log and "finished rank=1" in log
    assert job_counts(ep, run_id) == {"timer": 1}


def test_standalone_runs_and_cleans_up(spawn_agent: Spawn, tmp_path: Path) -> None:
    a = spawn_agent("solo", ["--standalone", "--nproc-per-node", "2", *_train(tmp_path, 10, 0)])
    assert a.wait_exit(240) == ExitCode.SUCCEEDED, a.log()[-3000:]
    assert "done step=10" in a.log()
    match = re.search(r"embedded etcd at (\S+)", a.log())
    assert match is not None
    leftovers = [
        p for p in Path("/proc").iterdir()
        if p.name.isdigit() and match.group(1).encode() in _cmdline(p)
    ]  # fmt: skip
    assert leftovers == []


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""
