"""The root cause of a restart, from real gloo workers, in the health report and the
termination message."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.failure import (
    FinalCounts,
    counts_from_termination_message,
    from_termination_message,
)
from elasticjob_agent.protocol.health import HealthReport

from tests.support.agent_harness import SCRIPTS, Agent, rdzv_flags

pytestmark = pytest.mark.timeout(300)

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


def test_the_budget_spending_exit_leaves_the_final_counts_in_the_termination_message(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    # The agent exits as soon as it counted the restart that spent the budget, before the
    # operator may poll that count: the termination message carries it.
    termination_log = tmp_path / "termination-log"
    run_id = f"t-{uuid.uuid4().hex[:10]}"
    flags = [*rdzv_flags(etcd_server_session.endpoint, run_id, "1:1"), "--max-restarts", "1"]
    agent = spawn_agent(
        "a",
        [*flags, str(SCRIPTS / "always_fail.py")],
        env={"ELASTICJOB_TERMINATION_LOG": str(termination_log), "POD_NAME": "job-worker-0-0"},
    )
    assert agent.wait_exit(240) == ExitCode.MAX_RESTARTS_EXCEEDED, agent.log()[-3000:]
    message = termination_log.read_text()
    assert message.startswith("rank 0 on job-worker-0-0 exited with code 3"), message
    failure = from_termination_message(message)
    assert failure is not None and failure.exit_code == 3 and failure.round == 1, message
    counts = counts_from_termination_message(message)
    assert counts == FinalCounts(run_id, {"failure": 2}), message


def test_a_succeeding_agent_leaves_the_final_counts_in_the_termination_message(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    # The last restarts may come after the operator's last poll and the job may finish within
    # a second of them: the succeeded pod's termination message carries the count (seen in CI:
    # a job restarted twice finished with one restart in its status).
    termination_log = tmp_path / "termination-log"
    run_id = f"t-{uuid.uuid4().hex[:10]}"
    flags = [*rdzv_flags(etcd_server_session.endpoint, run_id, "1:1"), "--max-restarts", "2"]
    agent = spawn_agent(
        "a",
        [*flags, str(SCRIPTS / "exit_code_runs.py"), "3", "2"],
        env={"ELASTICJOB_TERMINATION_LOG": str(termination_log), "POD_NAME": "job-worker-0-0"},
    )
    assert agent.wait_exit(240) == ExitCode.SUCCEEDED, agent.log()[-3000:]
    message = termination_log.read_text()
    assert message.startswith("rank 0 on job-worker-0-0 exited with code 3"), message
    failure = from_termination_message(message)
    assert failure is not None and failure.round == 1, message
    assert counts_from_termination_message(message) == FinalCounts(run_id, {"failure": 2}), message


@pytest.mark.parametrize("warm", ["1", "0"], ids=["warm-worker", "cold-worker"])
def test_a_missing_script_is_explained_by_the_workers_stderr(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path, warm: str
) -> None:
    # No error file: python fails before torch's @record can write one. What it printed is
    # the root cause (torchrun shows only the exit code).
    missing = tmp_path / "workspace" / "train.py"
    termination_log = tmp_path / "termination-log"
    flags = [
        *rdzv_flags(etcd_server_session.endpoint, f"t-{uuid.uuid4().hex[:10]}", "1:1"),
        "--max-restarts", "0",
        "--warm-workers", warm,
    ]  # fmt: skip
    agent = spawn_agent(
        "a",
        [*flags, str(missing)],
        env={"ELASTICJOB_TERMINATION_LOG": str(termination_log), "POD_NAME": "job-worker-0-0"},
    )
    assert agent.wait_exit(240) == ExitCode.MAX_RESTARTS_EXCEEDED, agent.log()[-3000:]
    message = termination_log.read_text()
    failure = from_termination_message(message)
    assert failure is not None, message
    assert failure.exit_code == 2
    said = f"can't open file '{missing}': [Errno 2] No such file or directory"
    assert failure.output_tail is not None and said in failure.output_tail, message
    first_line = message.splitlines()[0]
    assert first_line.startswith("rank 0 on job-worker-0-0 exited with code 2: "), first_line
    assert said in first_line
    # The worker's stderr still reaches the agent's own output (the container's log).
    assert said in agent.log()


def test_the_stderr_tail_keeps_the_last_twenty_lines(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    script = tmp_path / "noisy.py"
    script.write_text(
        "import sys\nfor i in range(100):\n    print(f'line {i}', file=sys.stderr)\nsys.exit(5)\n"
    )
    flags = [
        *rdzv_flags(etcd_server_session.endpoint, f"t-{uuid.uuid4().hex[:10]}", "1:1"),
        "--max-restarts", "1",
    ]  # fmt: skip
    agent = spawn_agent("a", [*flags, str(script)])
    report = agent.wait_status(
        lambda s: s.get("lastFailure") is not None, 180, "lastFailure in the health report"
    )
    HealthReport.from_json(report)
    tail = report["lastFailure"]["outputTail"]
    assert tail.splitlines() == [f"line {i}" for i in range(80, 100)]
    assert report["lastFailure"]["exitCode"] == 5


def test_a_command_that_does_not_exist_fails_with_127_and_says_so(
    etcd_server_session: Any, spawn_agent: Spawn, tmp_path: Path
) -> None:
    termination_log = tmp_path / "termination-log"
    flags = [
        *rdzv_flags(etcd_server_session.endpoint, f"t-{uuid.uuid4().hex[:10]}", "1:1"),
        "--max-restarts", "0",
        "--no-python",
    ]  # fmt: skip
    agent = spawn_agent(
        "a",
        [*flags, "no-such-trainer"],
        env={"ELASTICJOB_TERMINATION_LOG": str(termination_log), "POD_NAME": "job-worker-0-0"},
    )
    assert agent.wait_exit(240) == ExitCode.MAX_RESTARTS_EXCEEDED, agent.log()[-3000:]
    failure = from_termination_message(termination_log.read_text())
    assert failure is not None and failure.exit_code == 127
    assert failure.summary() == (
        "rank 0 on job-worker-0-0 exited with code 127: elasticjob-agent: cannot run "
        "'no-such-trainer': [Errno 2] No such file or directory"
    )
