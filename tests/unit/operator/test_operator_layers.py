"""The pure core imports no kopf, no Kubernetes client and no network library (layer contract).

Checked in a fresh interpreter per module, since importing anything here would pollute
``sys.modules`` for the check itself.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PURE = [
    "spec",
    "names",
    "agent_command",
    "manifests",
    "observed",
    "conditions",
    "restarts",
    "stall",
    "status",
    "planning",
    "kueue",
]
EDGES = ("kopf", "kubernetes_asyncio", "aetcd", "aiohttp", "grpc", "prometheus_client")


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_no_io_library(module: str) -> None:
    code = (
        f"import sys, elasticjob_operator.{module}\n"
        f"bad = sorted(m for m in {EDGES!r} if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "", f"elasticjob_operator.{module} pulls in {done.stdout}"
