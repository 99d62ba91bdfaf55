"""Every ElasticJob in examples/ fits the CRD's OpenAPI schema (the fast half of the check).

The API server's own validation, CEL rules included, runs in tests/e2e/chart/test_examples.py;
this one runs without a cluster, so a typo in an example fails `make test-fast` too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.support.paths import REPO

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def _crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / "elasticjob.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _as_json_schema(node: Any) -> Any:
    """OpenAPI v3 (structural) to JSON Schema: drop the x-kubernetes-* extensions, and turn
    ``x-kubernetes-int-or-string`` into the union it means."""
    if isinstance(node, list):
        return [_as_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _as_json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
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


def _jobs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "ElasticJob"]


def test_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {
        "elasticjob.yaml",
        "elasticjob-external-etcd.yaml",
        "elasticjob-gpu-nccl.yaml",
        "elasticjob-scaling.yaml",
        "elasticjob-suspended.yaml",
    } <= names, names


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_fits_the_crd_schema(path: Path) -> None:
    jobs = _jobs(path)
    assert jobs, f"{path.name} holds no ElasticJob"
    validator = jsonschema.Draft7Validator(_as_json_schema(_crd_schema()))
    for job in jobs:
        errors = [
            f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
            for e in validator.iter_errors(job)
        ]
        assert not errors, f"{path.name}: {errors}"
        assert job["apiVersion"] == "elasticjob.dev/v1alpha1"
