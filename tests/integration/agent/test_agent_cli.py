"""Bad flags and bad --rdzv-conf values: a clear message and exit code 2, nothing started."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.agent_harness import TRAIN
from tests.support.paths import REPO

EP = ["--rdzv-endpoint", "127.0.0.1:1", "--rdzv-id", "cli"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--no-such-flag", str(TRAIN)], "unrecognized arguments: --no-such-flag"),
        ([*EP, "--nnodes", "4:2", str(TRAIN)], "--nnodes '4:2': need 0 < MIN <= MAX"),
        ([*EP, "--rdzv-backend", "static", str(TRAIN)], "--rdzv-backend 'static' is not supported"),
        (
            [*EP, "--rdzv-backend", "c10d", "--rdzv-conf", "heartbeat=0.5", str(TRAIN)],
            "heartbeat '0.5' must be a positive whole number",
        ),
        ([*EP, "--rdzv-conf", "join_timeout=soon", str(TRAIN)], "join_timeout 'soon'"),
        ([*EP, "--rdzv-conf", "colour=blue", str(TRAIN)], "unknown key 'colour'"),
        ([*EP, "--rdzv-conf", "heartbeat=0.5", str(TRAIN)], "heartbeat must be >= 1"),
        ([*EP, "--max-restarts", "many", str(TRAIN)], "--max-restarts 'many' is not an integer"),
        (["--rdzv-id", "x", str(TRAIN)], "--rdzv-endpoint host:port is required"),
    ],
)
def test_bad_input_exits_2_with_a_message(argv: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "elasticjob_agent", "--health-port", "0", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_pet_variable_with_a_bad_value_exits_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "elasticjob_agent", "--health-port", "0", *EP, str(TRAIN)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={"PET_NPROC_PER_NODE": "lots", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "--nproc-per-node 'lots'" in result.stderr
