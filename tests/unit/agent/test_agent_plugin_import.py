"""Importing the error taxonomy first imports torch's rendezvous package, which loads our
torchrun plugin while ``elasticjob_agent.errors`` is still half-initialised: the plugin's
package must not need it then (a circular import that torch reports with a traceback)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "first", ["elasticjob_agent.errors", "elasticjob_agent.etcd.client", "elasticjob_agent.cli"]
)
def test_the_torchrun_plugin_loads_whatever_is_imported_first(first: str) -> None:
    code = (
        f"import {first}\n"
        "from torch.distributed.elastic.rendezvous import rendezvous_handler_registry as r\n"
        "assert r._registry.get('etcd-v3') is not None, r._registry\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "Exception while registering" not in result.stderr, result.stderr
