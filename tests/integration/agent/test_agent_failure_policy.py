"""The failure policy with real agents, real gloo workers and a real etcd.

``FailJob`` on a deterministic exit ends the job at the first failure without spending a
restart; ``Ignore`` on a known-flaky exit restarts the group for free (counted ``ignored``),
so a job with ``--max-restarts 0`` survives two of them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from elasticjob_agent.protocol.exit_codes import ExitCode

from tests.support.agent_harness import (
    SCRIPTS,
    Agent,
    close_reason,
    job_counts,
    pid_alive,
    rdzv_flags,
)

pytestmark = pytest.mark.timeout(420)

Spawn = Callable[..., Agent]
SCRIPT = str(SCRIPTS / "exit_code_runs.py")


def _policy(tmp_path: Path, *rules: dict[str, Any]) -> str:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"rules": list(rules)}))
    return str(path)


def test_fail_job_on_exit_code_3_fails_at_once_with_no_restart_spent(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep, run_id = etcd_server_session.endpoint, f"t-{uuid.uuid4().hex[:10]}"
    policy = _policy(
        tmp_path,
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [4]}},
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}},
    )
    flags = [*rdzv_flags(ep, run_id, "2:2"), "--nproc-per-node", "1", "--max-restarts", "5"]
    flags += ["--failure-policy", policy]
    a = spawn_agent("a", [*flags, SCRIPT, "3", "1000"])
    b = spawn_agent("b", [*flags, SCRIPT, "3", "1000"])
    assert a.wait_exit(240) == ExitCode.FAILURE_POLICY, a.log()[-3000:]
    assert b.wait_exit(60) == ExitCode.FAILURE_POLICY, b.log()[-3000:]
    logs = a.log() + b.log()
    assert logs.count("exits 3") == 2, logs[-3000:]  # one run, never a restart
    assert "event=failure_policy" in logs and "action=FailJob" in logs and "rule=1" in logs
    assert "failurePolicy.rules[1] (FailJob)" in logs, logs[-3000:]
    assert job_counts(ep, run_id) == {}  # nothing spent, nothing counted
    assert close_reason(ep, run_id) == "FailurePolicy"
    for agent in (a, b):
        assert not any(pid_alive(p) for p in agent.seen_pids), agent.name


def test_ignore_on_exit_code_4_restarts_for_free(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep, run_id = etcd_server_session.endpoint, f"t-{uuid.uuid4().hex[:10]}"
    policy = _policy(
        tmp_path, {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [4]}}
    )
    flags = [*rdzv_flags(ep, run_id, "2:2"), "--nproc-per-node", "1", "--max-restarts", "0"]
    flags += ["--failure-policy", policy]
    a = spawn_agent("a", [*flags, SCRIPT, "4", "2"])
    b = spawn_agent("b", [*flags, SCRIPT, "4", "2"])
    assert a.wait_exit(300) == ExitCode.SUCCEEDED, a.log()[-3000:]
    assert b.wait_exit(60) == ExitCode.SUCCEEDED, b.log()[-3000:]
    logs = a.log() + b.log()
    assert "run 2: rank 0 finished" in logs and "run 2: rank 1 finished" in logs, logs[-3000:]
    assert job_counts(ep, run_id) == {"ignored": 2}  # once per round for the job, free
    assert "action=Ignore" in logs


def test_without_a_matching_rule_the_budget_is_spent_as_before(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep, run_id = etcd_server_session.endpoint, f"t-{uuid.uuid4().hex[:10]}"
    policy = _policy(
        tmp_path, {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}
    )
    flags = [*rdzv_flags(ep, run_id, "1:1"), "--nproc-per-node", "1", "--max-restarts", "1"]
    flags += ["--failure-policy", policy]
    a = spawn_agent("a", [*flags, SCRIPT, "5", "1000"])
    assert a.wait_exit(240) == ExitCode.MAX_RESTARTS_EXCEEDED, a.log()[-3000:]
    assert job_counts(ep, run_id) == {"failure": 2}
    assert "event=failure_policy" not in a.log()


def test_a_bad_policy_file_is_a_usage_error_naming_the_field(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    ep, run_id = etcd_server_session.endpoint, f"t-{uuid.uuid4().hex[:10]}"
    policy = _policy(tmp_path, {"action": "FailJob", "onRootCause": {"pattern": "(oops"}})
    flags = [*rdzv_flags(ep, run_id, "1:1"), "--failure-policy", policy]
    a = spawn_agent("a", [*flags, SCRIPT, "3", "1"])
    assert a.wait_exit(60) == ExitCode.USAGE, a.log()[-3000:]
    assert "rules[0].onRootCause.pattern" in a.log() and "not a valid RE2" in a.log()
