"""Step progress: the worker API, the message on the timer socket, the hang rule, the report."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from elasticjob_agent.health.status import AgentStatus
from elasticjob_agent.progress import report_done, report_step
from elasticjob_agent.protocol.health import (
    AgentState,
    EtcdStatus,
    HealthReport,
    HealthReportError,
)
from elasticjob_agent.protocol.restarts import SPENDS_BUDGET, RestartReason
from elasticjob_agent.timers import TIMER_SOCKET_ENV
from elasticjob_agent.timers.server import TimerServer
from elasticjob_agent.timers.steps import StepProgress, first_step, is_hung
from elasticjob_agent.timers.table import MAX_STEP, TimerMessage, TimerMessageError

AGENT_DIR = str(Path(__file__).resolve().parents[3] / "agent")


@pytest.mark.parametrize(
    ("raw", "step"),
    [
        ({"op": "step", "pid": 7, "step": 0}, 0),
        ({"op": "step", "pid": 7, "step": 12}, 12),
        ({"op": "step", "pid": 7, "step": MAX_STEP}, MAX_STEP),
        ({"op": "heartbeat", "pid": 7}, None),
        ({"op": "done", "pid": 7}, None),
    ],
)
def test_step_messages_decode(raw: dict[str, object], step: int | None) -> None:
    assert TimerMessage.decode(json.dumps(raw).encode()).step == step


@pytest.mark.parametrize(
    "raw",
    [
        {"op": "step", "pid": 7},
        {"op": "step", "pid": 7, "step": -1},
        {"op": "step", "pid": 7, "step": 1.5},
        {"op": "step", "pid": 7, "step": True},
        {"op": "step", "pid": 7, "step": "3"},
        {"op": "step", "pid": 7, "step": MAX_STEP + 1},
    ],
)
def test_bad_step_messages_are_refused(raw: dict[str, object]) -> None:
    with pytest.raises(TimerMessageError, match="step"):
        TimerMessage.decode(json.dumps(raw).encode())


@pytest.mark.parametrize(
    ("progress", "timeout", "now", "hung"),
    [
        (None, 5.0, 1000.0, False),  # no step yet: loading the model is never a hang
        (first_step(3, 50.0, 100.0), None, 1000.0, False),  # detection off
        (first_step(3, 50.0, 100.0), 5.0, 104.9, False),
        (first_step(3, 50.0, 100.0), 5.0, 105.0, True),
        (first_step(3, 50.0, 100.0).observe(3, 60.0, 110.0), 5.0, 114.0, False),  # a repeat
        (first_step(3, 50.0, 100.0).finish(), 5.0, 1000.0, False),  # the loop is over
        (first_step(3, 50.0, 100.0).finish().observe(4, 60.0, 110.0), 5.0, 1000.0, False),
    ],
)
def test_the_hang_rule(
    progress: StepProgress | None, timeout: float | None, now: float, hung: bool
) -> None:
    assert is_hung(progress, timeout, now) is hung


def test_progress_keeps_the_highest_step_and_the_latest_time() -> None:
    p = first_step(5, 10.0, 1.0).observe(4, 11.0, 2.0).observe(6, 12.0, 3.0)
    assert p == StepProgress(6, 12.0, 3.0)


def test_report_step_validates_its_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMER_SOCKET_ENV, raising=False)
    report_step(0)  # outside the agent: nothing happens
    for bad in (-1, 1.0, True, "2"):
        with pytest.raises(ValueError, match="report_step"):
            report_step(bad)  # type: ignore[arg-type]


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _send_raw(path: str, message: dict[str, object]) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(json.dumps(message).encode(), path)


def _wait_for_steps(
    server: TimerServer, done: Callable[[StepProgress | None], bool], timeout: float = 10.0
) -> StepProgress | None:
    """The server's progress once ``done`` holds (or at the deadline, for the assertion)."""
    deadline = time.monotonic() + timeout
    while not done(server.steps()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return server.steps()


def test_steps_reach_the_server_from_group_pids_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wall, mono = _Clock(), _Clock()
    server = TimerServer(str(tmp_path / "t.sock"), clock=wall, monotonic=mono)
    try:
        monkeypatch.setenv(TIMER_SOCKET_ENV, server.path)
        other = os.getpid() + 1
        server.reset(frozenset({other}))
        report_step(1)  # not a member of the group: ignored
        # The server reads its socket in order: once the member's step 0 (sent after ours) is
        # in, ours was read first, and with the old group. Resetting earlier would race it.
        _send_raw(server.path, {"op": "step", "pid": other, "step": 0})
        progress = _wait_for_steps(server, lambda p: p is not None)
        assert progress == StepProgress(0, 100.0, 100.0)  # step 1 would have stayed the highest
        assert server.first_step() == (0, 100.0) and server.previous_step() is None
        server.reset(frozenset({os.getpid()}))
        assert server.steps() is None
        # The new round's first step is not yet known; the last round's is the step before it.
        assert server.first_step() is None and server.previous_step() == (0, 100.0)
        report_step(7)
        assert _wait_for_steps(server, lambda p: p is not None) == StepProgress(7, 100.0, 100.0)
        assert server.first_step() == (7, 100.0)
        report_done()
        progress = _wait_for_steps(server, lambda p: p is not None and p.done)
        assert progress == StepProgress(7, 100.0, 100.0, done=True)
        server.reset(frozenset({os.getpid()}))  # a new group starts without a step
        assert server.steps() is None
        assert server.previous_step() == (7, 100.0)
        server.reset(frozenset({os.getpid()}))  # a round without a step keeps the last one
        assert server.previous_step() == (7, 100.0)
    finally:
        server.close()


def test_steps_from_a_process_in_a_workers_session_count(tmp_path: Path) -> None:
    """A worker leads its own session; a script its shell wrapper runs reports for it."""
    server = TimerServer(str(tmp_path / "t.sock"))
    report = f"import sys; sys.path.insert(0, {AGENT_DIR!r}); "
    report += "from elasticjob_agent.progress import report_done, report_step; report_step(3)"
    wrapper = subprocess.Popen(
        ["sh", "-c", 'read go; "$0" -c "$1"; exit $?', sys.executable, report],
        stdin=subprocess.PIPE,
        env={**os.environ, TIMER_SOCKET_ENV: server.path},
        start_new_session=True,
    )
    try:
        server.reset(frozenset({wrapper.pid}))  # the worker: the session leader
        assert wrapper.stdin is not None
        wrapper.stdin.write(b"go\n")
        wrapper.stdin.close()
        assert wrapper.wait(60) == 0
        progress = _wait_for_steps(server, lambda p: p is not None)
        assert progress is not None and progress.step == 3
    finally:
        wrapper.kill()
        wrapper.wait()
        server.close()


def _status(steps: tuple[int, float, bool] | None) -> AgentStatus:
    return AgentStatus(
        "run",
        "node",
        3,
        60.0,
        etcd=lambda: EtcdStatus(True, None, None),
        steps=lambda: steps,
        clock=lambda: 5.0,
    )


def test_the_report_carries_the_step_only_while_running() -> None:
    status = _status((42, 1234.5, True))
    assert status.report().last_step is None  # starting
    status.update(state=AgentState.RUNNING)
    report = status.report()
    assert (report.last_step, report.last_step_at, report.steps_done) == (42, 1234.5, True)
    parsed = HealthReport.loads(report.dumps())
    assert (parsed.last_step, parsed.last_step_at, parsed.steps_done) == (42, 1234.5, True)
    status.update(state=AgentState.RESTARTING)
    assert status.report().last_step is None


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("lastStep", -1, "lastStep"),
        ("lastStep", 1.5, "lastStep"),
        ("lastStep", True, "lastStep"),
        ("lastStep", 2**53 + 1, "lastStep"),
        ("lastStepAt", -3.0, "lastStepAt"),
        ("lastStepAt", "now", "lastStepAt"),
        ("stepsDone", 1, "stepsDone"),
        ("stepsDone", "yes", "stepsDone"),
    ],
)
def test_bad_progress_fields_make_the_report_invalid(field: str, value: object, error: str) -> None:
    data = _status(None).report().to_json()
    data[field] = value
    with pytest.raises(HealthReportError, match=error):
        HealthReport.from_json(data)


def test_hang_is_an_agent_reason_that_spends_the_budget() -> None:
    assert RestartReason.HANG.value == "hang"
    assert "hang" in SPENDS_BUDGET and RestartReason.HANG.spends_budget
