"""Timer bookkeeping (injected time) and the worker-side client against a real socket."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from elasticjob_agent.timers import TIMER_SOCKET_ENV, expires
from elasticjob_agent.timers.server import TimerServer
from elasticjob_agent.timers.table import TimerMessage, TimerMessageError, TimerTable


def test_table_expires_acquired_timers_once() -> None:
    table = TimerTable()
    table.reset(frozenset({10, 11}))
    assert table.apply(TimerMessage("acquire", 10, "step", 5.0))
    assert table.apply(TimerMessage("acquire", 11, "step", 9.0))
    assert not table.apply(TimerMessage("acquire", 99, "step", 1.0))  # not our worker
    assert table.expired(4.9) == []
    assert table.expired(5.0) == [(10, "step")]
    assert table.expired(6.0) == []
    table.apply(TimerMessage("release", 11, "step"))
    assert table.expired(100.0) == []


def test_reset_forgets_old_timers() -> None:
    table = TimerTable()
    table.reset(frozenset({1}))
    table.apply(TimerMessage("acquire", 1, "s", 1.0))
    table.reset(frozenset({2}))
    assert table.expired(10.0) == []


def test_bad_messages() -> None:
    for raw in (b"x", b'{"op": "acquire", "pid": 1}', b'{"op": "boom", "pid": 1}'):
        with pytest.raises(TimerMessageError):
            TimerMessage.decode(raw)


def test_expires_reaches_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = TimerServer(str(tmp_path / "t.sock"))
    try:
        server.reset(frozenset({os.getpid()}))
        monkeypatch.setenv(TIMER_SOCKET_ENV, server.path)
        with expires(after=0.05, scope="stuck"):
            deadline = time.monotonic() + 5
            found: list[tuple[int, str]] = []
            while not found and time.monotonic() < deadline:
                time.sleep(0.05)
                found = server.expired()
        assert found == [(os.getpid(), "stuck")]
        with expires(after=60):
            pass
        time.sleep(0.1)
        assert server.expired() == []
        assert server.last_progress is not None
    finally:
        server.close()


def test_expires_without_agent_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMER_SOCKET_ENV, raising=False)
    with expires(after=1):
        pass
    with pytest.raises(ValueError, match="positive"), expires(after=0):
        pass
