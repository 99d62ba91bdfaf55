"""The root cause of a restart, from real gloo workers, in the health report and the
termination message."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_harness import SCRIPTS, Agent, rdzv_flags
from elasticjob_agent.protocol.health import HealthReport

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

Spawn = Callable[..., Agent]


def _fail_once(
    etcd: Any, spawn_agent: Spawn, tmp_path: Path, how: str
) -> tuple[dict[str, Any], bytes]:
    termination_log = tmp_path / "termination-log"
    flags = [
        *rdzv_flags(etcd.endpoint, f"t-{uuid.uuid4().hex[:10]}", "1:1"),
        "--nproc-per-node", "2",
        "--max-restarts", "2",
    ]  # fmt: skip
    agent = spawn_agent(
        "a",
        [*flags, str(SCRIPTS / "fail_once.py"), how],
        env={"ELASTICJOB_TERMINATION_LOG": str(termination_log), "POD_NAME": "job-worker-0-0"},
    )
    report = agent.wait_status(
        lambda s: s.get("lastFailure") is not None, 180, "lastFailure in the health report"
    )
    HealthReport.from_json(report)  # what the operator's strict parser accepts
    assert "collective_timeout_not_enforced" in agent.log()
    return report["lastFailure"], termination_log.read_bytes()


def test_an_exception_under_record_is_the_root_cause(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    failure, message = _fail_once(etcd_server_session, spawn_agent, tmp_path, "raise")
    assert failure["rank"] == 1
    assert failure["localRank"] == 1
    assert failure["pod"] == "job-worker-0-0"
    assert failure["node"] == "a"
    assert failure["exitCode"] == 1
    assert failure["exceptionType"] == "ValueError"
    assert failure["message"] == "loss is nan at step 7"
    assert failure["frame"].endswith("fail_once.py:15 in explode")
    assert "signal" not in failure
    first_line, record = message.split(b"\n", 1)
    assert first_line.startswith(b"rank 1 on job-worker-0-0 exited with code 1: ValueError")
    assert json.loads(record)["lastFailure"] == failure


def test_a_rank_killed_by_a_signal_shows_the_signal(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    failure, message = _fail_once(etcd_server_session, spawn_agent, tmp_path, "kill")
    assert failure["rank"] == 1
    assert failure["signal"] == "SIGKILL"
    assert "exitCode" not in failure and "exceptionType" not in failure
    assert message.startswith(b"rank 1 on job-worker-0-0 killed by SIGKILL\n")
