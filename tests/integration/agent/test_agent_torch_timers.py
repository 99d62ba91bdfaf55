"""torch's own file-based expiration timers (``FileTimerClient`` on ``TORCHELASTIC_TIMER_FILE``)
under ``elasticjob-agent``: a real gloo worker stuck past its timer is killed, the agent lives,
the group restarts under reason ``timer`` and the root cause says why."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.health import HealthReport

from tests.support.agent_harness import SCRIPTS, Agent, job_counts, rdzv_flags

pytestmark = pytest.mark.timeout(300)

Spawn = Callable[..., Agent]


def test_torch_file_timer_kills_a_stuck_worker_and_the_group_restarts(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep, run_id = etcd_server_session.endpoint, f"t-{uuid.uuid4().hex[:10]}"
    termination_log = tmp_path / "termination-log"
    flags = [*rdzv_flags(ep, run_id, "1:1"), "--nproc-per-node", "2", "--max-restarts", "1"]
    agent = spawn_agent(
        "a",
        [*flags, str(SCRIPTS / "torch_timer_stuck_once.py")],
        env={"ELASTICJOB_TERMINATION_LOG": str(termination_log), "POD_NAME": "job-worker-0-0"},
    )
    report = agent.wait_status(
        lambda s: s.get("lastFailure") is not None, 180, "lastFailure in the health report"
    )
    HealthReport.from_json(report)
    failure = report["lastFailure"]
    assert failure["signal"] == "SIGKILL", failure
    assert failure["rank"] == 1 and failure["pod"] == "job-worker-0-0", failure
    assert failure["message"] == "expiration timer 'step' expired", failure
    assert agent.wait_exit(180) == ExitCode.SUCCEEDED, agent.log()[-3000:]
    log = agent.log()
    assert "stuck" in log and "event=timer_expired" in log, log[-3000:]
    assert "scope=step" in log and "scope=warmup" not in log, log[-3000:]
    assert "finished rank=0" in log and "finished rank=1" in log, log[-3000:]
    assert job_counts(ep, run_id) == {"timer": 1}
    message = termination_log.read_text()
    assert message.startswith(
        "rank 1 on job-worker-0-0 killed by SIGKILL: expiration timer 'step' expired"
    ), message
