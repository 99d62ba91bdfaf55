"""The local cluster's pure modules do no I/O: they import no client, process or socket module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "localcluster" / "elasticjob_localcluster"
PURE = ["hostsfile", "podenv", "podstatus", "kubeconfig"]
FORBIDDEN = {
    "aiohttp",
    "asyncio",
    "socket",
    "ssl",
    "subprocess",
    "urllib",
    "kubeapi",
    "network",
    "controlplane",
    "emulator",
    "podworker",
    "volumes",
}


def imported(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_no_io(module: str) -> None:
    assert not imported(module) & FORBIDDEN
