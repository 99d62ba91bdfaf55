"""etcd goes away while training and while rendezvousing: reported within seconds, survived
when it comes back in time, a clean exit 13 when it does not."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from elasticjob_agent.protocol.exit_codes import ExitCode

from tests.support.agent_harness import TRAIN, Agent, job_counts, rdzv_flags, wait_for

pytestmark = pytest.mark.timeout(420)

Spawn = Callable[..., Agent]
REPORT_WITHIN = 5.0  # "within a few seconds": probe every 1 s with a 1 s deadline


def _flags(ep: str, nnodes: str, etcd_timeout: float) -> list[str]:
    run_id = f"t-{uuid.uuid4().hex[:10]}"
    return [
        *rdzv_flags(ep, run_id, nnodes),
        "--nproc-per-node", "2",
        "--max-restarts", "3",
        "--etcd-timeout", str(etcd_timeout),
    ]  # fmt: skip


def _train(tmp_path: Path, steps: int) -> list[str]:
    return [
        str(TRAIN),
        "--steps", str(steps),
        "--step-sleep", "0.1",
        "--checkpoint-dir", str(tmp_path / "ckpt"),
    ]  # fmt: skip


def _wait_unreachable(agent: Agent, since: float) -> dict[str, Any]:
    status = agent.wait_status(lambda s: not s["etcd"]["reachable"], 30, "etcd unreachable")
    assert time.monotonic() - since < REPORT_WITHIN + 2.0, "outage reported too late"
    assert status["etcd"]["unreachableSince"] is not None
    assert status["etcd"]["lastContact"] is not None
    return status


def test_outage_while_training_etcd_back_in_time(
    etcd_server: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    flags = _flags(etcd_server.endpoint, "2:2", etcd_timeout=120)
    a = spawn_agent("a", [*flags, *_train(tmp_path, 150)])
    b = spawn_agent("b", [*flags, *_train(tmp_path, 150)])
    a.wait_running(world_size=4)
    b.wait_running(world_size=4)
    etcd_server.kill()
    stopped = time.monotonic()
    for agent in (a, b):
        status = _wait_unreachable(agent, stopped)
        assert status["state"] == "Running"  # training does not need etcd
    # The outage lasts a while: the agents live through 3 s of it.
    later = time.time() + 3
    for agent in (a, b):
        status = agent.wait_status(lambda s: s["updatedAt"] >= later, 30, "a report 3 s later")
        assert not status["etcd"]["reachable"], status
    etcd_server.start()
    for agent in (a, b):
        agent.wait_status(lambda s: s["etcd"]["reachable"], 30, "etcd reachable again")
    assert a.wait_exit(300) == ExitCode.SUCCEEDED, a.log()[-3000:]
    assert b.wait_exit(60) == ExitCode.SUCCEEDED, b.log()[-3000:]


def test_etcd_recreated_empty_while_training_re_forms_without_a_failure(
    etcd_server: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    # What the operator does after an outage: a new, empty etcd at the same address, seeded
    # with the job's counts. Every key of the round is gone, which must not read as members
    # lost or workers failed: the group re-forms and nothing spends the budget.
    flags = _flags(etcd_server.endpoint, "2:2", etcd_timeout=120)
    run_id = flags[flags.index("--rdzv-id") + 1]
    a = spawn_agent("a", [*flags, *_train(tmp_path, 200)])
    b = spawn_agent("b", [*flags, *_train(tmp_path, 200)])
    a.wait_running(world_size=4)
    b.wait_running(world_size=4)
    wait_for(
        lambda: a.log().count("start step=") + b.log().count("start step=") >= 4,
        120,
        "all four ranks training",
    )
    etcd_server.wipe()
    seed = '{"byReason": {"etcd-recovered": 1}}'
    etcd_server.etcdctl("put", f"/elasticjob/{run_id}/restart-seed", seed, timeout=30)
    assert a.wait_exit(300) == ExitCode.SUCCEEDED, a.log()[-3000:]
    assert b.wait_exit(60) == ExitCode.SUCCEEDED, b.log()[-3000:]
    logs = a.log() + b.log()
    assert "event=rendezvous_state_lost" in logs, logs[-3000:]
    assert logs.count("event=rendezvous_completed") >= 4, "the group did not re-form"
    assert job_counts(etcd_server.endpoint, run_id) == {"etcd-recovered": 1}


def test_outage_while_training_then_a_failure_exits_13(
    etcd_server: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    flags = _flags(etcd_server.endpoint, "2:2", etcd_timeout=6)
    a = spawn_agent("a", [*flags, *_train(tmp_path, 100_000)])
    b = spawn_agent("b", [*flags, *_train(tmp_path, 100_000)])
    a.wait_running(world_size=4)
    running = b.wait_running(world_size=4)
    # Training proper, not just started processes: a worker killed inside init_process_group
    # would leave its peers blocked there (gloo's own timeout), which no agent can see without
    # etcd.
    wait_for(
        lambda: a.log().count("start step=") + b.log().count("start step=") >= 4,
        120,
        "all four ranks training",
    )
    etcd_server.kill()
    _wait_unreachable(b, time.monotonic())
    # A restart now needs etcd (counting, rendezvous): it never comes back.
    os.kill(running["workers"][0]["pid"], signal.SIGKILL)
    assert a.wait_exit(120) == ExitCode.ETCD_UNREACHABLE, a.log()[-3000:]
    assert b.wait_exit(60) == ExitCode.ETCD_UNREACHABLE, b.log()[-3000:]


def test_outage_while_rendezvousing(etcd_server: Any, spawn_agent: Spawn, tmp_path: Path) -> None:
    # Back in time: the waiting agent rides out the outage and the job forms once b arrives.
    flags = _flags(etcd_server.endpoint, "2:2", etcd_timeout=60)
    a = spawn_agent("a", [*flags, *_train(tmp_path, 10)])
    a.wait_status(lambda s: s["state"] == "Rendezvous", 60, "waiting in rendezvous")
    etcd_server.kill()
    status = _wait_unreachable(a, time.monotonic())
    assert status["state"] == "Rendezvous" and status["waitingSince"] is not None
    # The agent rides out a while of the outage: a report 2 s later still waits, unreachable.
    later = status["updatedAt"] + 2
    status = a.wait_status(lambda s: s["updatedAt"] >= later, 30, "a report 2 s into the outage")
    assert status["state"] == "Rendezvous" and not status["etcd"]["reachable"], status
    etcd_server.start()
    b = spawn_agent("b", [*flags, *_train(tmp_path, 10)])
    assert a.wait_exit(240) == ExitCode.SUCCEEDED, a.log()[-3000:]
    assert b.wait_exit(60) == ExitCode.SUCCEEDED, b.log()[-3000:]


def test_outage_while_rendezvousing_not_back_in_time_exits_13(
    etcd_server: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    flags = _flags(etcd_server.endpoint, "2:2", etcd_timeout=5)
    a = spawn_agent("a", [*flags, *_train(tmp_path, 10)])
    a.wait_status(lambda s: s["state"] == "Rendezvous", 60, "waiting in rendezvous")
    etcd_server.kill()
    killed = time.monotonic()
    assert a.wait_exit(60) == ExitCode.ETCD_UNREACHABLE, a.log()[-3000:]
    assert time.monotonic() - killed < 5 + 15, "exit 13 took far longer than --etcd-timeout"
