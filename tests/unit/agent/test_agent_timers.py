"""Timer bookkeeping (injected time) and the worker-side client against a real socket."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from elasticjob_agent.timers import TIMER_SOCKET_ENV, expires
from elasticjob_agent.timers.server import TimerServer
from elasticjob_agent.timers.table import Expired, TimerMessage, TimerMessageError, TimerTable


def test_table_expires_acquired_timers_once() -> None:
    table = TimerTable()
    table.reset(frozenset({10, 11}))
    assert table.apply(TimerMessage("acquire", 10, "step", 5.0))
    assert table.apply(TimerMessage("acquire", 11, "step", 9.0))
    assert not table.apply(TimerMessage("acquire", 99, "step", 1.0))  # not our worker
    assert table.expired(4.9) == []
    assert table.expired(5.0) == [Expired(10, "step", signal.SIGKILL)]
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
            found: list[Expired] = []
            while not found and time.monotonic() < deadline:
                time.sleep(0.05)
                found = server.expired()
        assert found == [Expired(os.getpid(), "stuck", signal.SIGKILL)]
        # A timer released in time never fires. The server reads its socket in order, so the
        # later timer's expiry proves it read the release, after the released deadline passed.
        with expires(after=0.2, scope="released"):
            pass
        with expires(after=0.3, scope="later"):
            found = _wait_expired(server)
        assert found == [Expired(os.getpid(), "later", signal.SIGKILL)]
        assert server.last_progress is not None
    finally:
        server.close()


def test_expires_without_agent_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMER_SOCKET_ENV, raising=False)
    with expires(after=1):
        pass
    with pytest.raises(ValueError, match="positive"), expires(after=0):
        pass


def test_torch_requests_decode_strictly() -> None:
    acquire = TimerMessage.decode_torch(
        b'{"version": 1, "pid": 7, "scope_id": "a.py#3", "expiration_time": 12.5, "signal": 15}'
    )
    assert acquire == TimerMessage("acquire", 7, "a.py#3", 12.5, signal.SIGTERM)
    release = TimerMessage.decode_torch(
        b'{"version": 1, "pid": 7, "scope_id": "a.py#3", "expiration_time": -1, "signal": 0}'
    )
    assert release == TimerMessage("release", 7, "a.py#3")
    for bad in (
        b"x",
        b'{"pid": 7, "scope_id": "s"}',
        b'{"pid": "7", "scope_id": "s", "expiration_time": 1}',
        b'{"pid": 7, "scope_id": 3, "expiration_time": 1}',
        b'{"pid": 7, "scope_id": "s", "expiration_time": true}',
        b'{"pid": 7, "scope_id": "s", "expiration_time": NaN}',
        b'{"pid": 7, "scope_id": "s", "expiration_time": 1, "signal": 99}',
    ):
        with pytest.raises(TimerMessageError):
            TimerMessage.decode_torch(bad)


def test_a_timer_with_signal_zero_expires_without_asking_for_a_kill() -> None:
    table = TimerTable()
    table.reset(frozenset({3}))
    table.apply(TimerMessage("acquire", 3, "s", 1.0, 0))
    assert table.expired(2.0) == [Expired(3, "s", 0)]


def _wait_expired(server: TimerServer) -> list[Expired]:
    deadline = time.monotonic() + 10
    found: list[Expired] = []
    while not found and time.monotonic() < deadline:
        time.sleep(0.05)
        found = server.expired()
    return found


def test_torch_file_timer_client_reaches_the_server(tmp_path: Path) -> None:
    """torch's own ``FileTimerClient`` against our FIFO: acquire, release, expiry, bad lines."""
    from torch.distributed.elastic.timer.api import configure  # noqa: PLC0415
    from torch.distributed.elastic.timer.api import expires as torch_expires  # noqa: PLC0415
    from torch.distributed.elastic.timer.file_based_local_timer import (  # noqa: PLC0415
        FileTimerClient,
    )

    fifo = tmp_path / "timer.fifo"
    server = TimerServer(str(tmp_path / "t.sock"), torch_fifo=str(fifo))
    try:
        server.reset(frozenset({os.getpid()}))
        # A stray writer's garbage is dropped; the reader goes on.
        with open(fifo, "w") as stray:
            stray.write("not json\n" + json.dumps({"pid": 1}) + "\n")
        configure(FileTimerClient(str(fifo)))
        with torch_expires(after=60, scope="quick"):
            pass
        with torch_expires(after=0.05, scope="stuck"):
            found = _wait_expired(server)
        assert found == [Expired(os.getpid(), "stuck", signal.SIGKILL)]
        assert server.expired() == []
        assert server.last_progress is not None
    finally:
        server.close()
    assert not fifo.exists()
