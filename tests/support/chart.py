"""Helpers for the chart tests: find helm, render the chart, pick objects out of the render."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.support.paths import CHART, REPO

RELEASE = "ej"
NAMESPACE = "elasticjob-system"

Manifest = dict[str, Any]


class HelmError(RuntimeError):
    """helm exited non-zero; the message carries its stderr."""


def helm_binary() -> str:
    """The helm that localcluster/build.sh caches, else one on PATH; fail loudly if neither."""
    cache = Path(os.environ.get("ELASTICJOB_CACHE", Path.home() / ".cache" / "elasticjob"))
    cached = cache / "bin" / "helm"
    if cached.is_file() and os.access(cached, os.X_OK):
        return str(cached)
    found = shutil.which("helm")
    if found:
        return found
    raise RuntimeError(
        f"helm not found in {cached} or on PATH: run `make cluster-build` (localcluster/build.sh),"
        " which caches helm there"
    )


def helm(*args: str) -> str:
    """Run helm and return stdout; raise ``HelmError`` with stderr on failure."""
    proc = subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0:
        raise HelmError(proc.stderr.strip() or proc.stdout.strip())
    return proc.stdout


def set_args(values: Mapping[str, str]) -> list[str]:
    """``--set``/``--set-string`` flags; a key ending in ``:string`` is set as a string."""
    out: list[str] = []
    for key, value in values.items():
        if key.endswith(":string"):
            out += ["--set-string", f"{key.removesuffix(':string')}={value}"]
        else:
            out += ["--set", f"{key}={value}"]
    return out


def render(
    values: Mapping[str, str] | None = None, *, namespace: str = NAMESPACE
) -> list[Manifest]:
    """``helm template`` the chart (hooks and tests included) and parse every document."""
    text = helm("template", RELEASE, str(CHART), "--namespace", namespace, *set_args(values or {}))
    return [doc for doc in yaml.safe_load_all(text) if doc]


def lint(values: Mapping[str, str] | None = None) -> str:
    return helm("lint", "--strict", str(CHART), *set_args(values or {}))


def of_kind(docs: Iterable[Manifest], kind: str) -> list[Manifest]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: Iterable[Manifest], kind: str) -> Manifest:
    found = of_kind(docs, kind)
    if len(found) != 1:
        raise AssertionError(f"expected one {kind}, found {len(found)}")
    return found[0]


def operator_container(docs: Iterable[Manifest]) -> Manifest:
    deployment = one(docs, "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    by_name = {c["name"]: c for c in containers}
    return dict(by_name["operator"])


def helm_test_pod(docs: Iterable[Manifest]) -> Manifest:
    pods = [
        d
        for d in of_kind(docs, "Pod")
        if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"
    ]
    if len(pods) != 1:
        raise AssertionError(f"expected one helm test pod, found {len(pods)}")
    return pods[0]


def crd_schema() -> dict[str, Any]:
    """The OpenAPI schema of the CRD's storage version (crds/elasticjob.yaml)."""
    crd = yaml.safe_load((REPO / "crds" / "elasticjob.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def as_json_schema(node: Any) -> Any:
    """OpenAPI v3 (structural) to JSON Schema: drop the x-kubernetes-* extensions, and turn
    ``x-kubernetes-int-or-string`` into the union it means."""
    if isinstance(node, list):
        return [as_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: as_json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if (
        node.get("type") == "object"
        and "properties" in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        # A structural schema prunes unknown fields; for an example that is a silent typo.
        out.setdefault("additionalProperties", False)
    return out
