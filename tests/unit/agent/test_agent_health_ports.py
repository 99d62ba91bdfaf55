"""A busy health port falls back to a free one; other bind errors stay errors."""

from __future__ import annotations

import errno
import json
import logging
import urllib.request

import pytest
from elasticjob_agent.health.ports import start_with_fallback
from elasticjob_agent.health.server import HealthServer
from elasticjob_agent.health.status import AgentStatus
from elasticjob_agent.protocol.health import EtcdStatus, HealthReport


def _start(status: AgentStatus, port: int) -> HealthServer:
    return HealthServer("127.0.0.1", port, status.report, lambda: b"", lambda: True)


def test_a_busy_port_falls_back_and_the_report_says_which(
    caplog: pytest.LogCaptureFixture,
) -> None:
    status = AgentStatus("job", "n", 0, 1.0, etcd=lambda: EtcdStatus(True, 1.0, None))
    first = _start(status, 0)
    try:
        with caplog.at_level(logging.WARNING):
            second = start_with_fallback(
                lambda p: _start(status, p), "127.0.0.1", first.port, lambda s: s.port
            )
        try:
            assert second.port != first.port
            assert f"health port 127.0.0.1:{first.port} is in use" in caplog.text
            status.update(health_port=second.port)
            with urllib.request.urlopen(
                f"http://127.0.0.1:{second.port}/status", timeout=5
            ) as resp:
                body = resp.read()
            assert json.loads(body)["healthPort"] == second.port
            assert HealthReport.loads(body).health_port == second.port
        finally:
            second.close()
    finally:
        first.close()


def test_other_bind_errors_are_raised() -> None:
    def refuse(port: int) -> object:
        raise OSError(errno.EADDRNOTAVAIL, "cannot assign requested address")

    with pytest.raises(OSError) as info:
        start_with_fallback(refuse, "10.255.255.1", 29401, lambda s: 0)
    assert info.value.errno == errno.EADDRNOTAVAIL


def test_a_report_with_an_impossible_port_is_refused() -> None:
    status = AgentStatus("job", "n", 0, 1.0, etcd=lambda: EtcdStatus(True, 1.0, None))
    data = status.report().to_json()
    data["healthPort"] = 70000
    with pytest.raises(ValueError, match="healthPort"):
        HealthReport.from_json(data)
