"""The agent turns gRPC's fork handlers off before grpc loads, and gives workers the user's value.

A real ``fork()`` (``Popen(preexec_fn=...)``) while the etcd client's threads are inside gRPC can
kill the child with SIGSEGV before it execs when gRPC's fork handlers are installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[3] / "agent"

_PROBE = """
import json, os, sys
import elasticjob_agent.cli as cli
from elasticjob_agent._fork_safe_grpc import worker_environ
print(json.dumps({
    "agent": os.environ.get("GRPC_ENABLE_FORK_SUPPORT"),
    "worker": worker_environ(os.environ).get("GRPC_ENABLE_FORK_SUPPORT", "<unset>"),
    "grpc_loaded": "grpc" in sys.modules,
}))
"""


def _probe(user_value: str | None) -> dict[str, object]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(AGENT), env.get("PYTHONPATH", "")])
    env.pop("GRPC_ENABLE_FORK_SUPPORT", None)
    if user_value is not None:
        env["GRPC_ENABLE_FORK_SUPPORT"] = user_value
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, check=True, timeout=120
    ).stdout
    result: dict[str, object] = json.loads(out.decode().strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(("user", "worker"), [(None, "<unset>"), ("true", "true")])
def test_agent_disables_grpc_fork_handlers_workers_keep_the_user_value(
    user: str | None, worker: str
) -> None:
    got = _probe(user)
    assert got["grpc_loaded"] is True  # the cli did import grpc, after setting the variable
    assert got["agent"] == "false"
    assert got["worker"] == worker
