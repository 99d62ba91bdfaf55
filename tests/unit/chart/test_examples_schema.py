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

from tests.support.chart import as_json_schema, crd_schema
from tests.support.paths import REPO

# The Kueue folder's job too (queues.yaml there holds only Kueue's objects).
EXAMPLES = sorted([*(REPO / "examples").glob("*.yaml"), *(REPO / "examples").glob("kueue/*job*")])


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
    validator = jsonschema.Draft7Validator(as_json_schema(crd_schema()))
    for job in jobs:
        errors = [
            f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
            for e in validator.iter_errors(job)
        ]
        assert not errors, f"{path.name}: {errors}"
        assert job["apiVersion"] == "elasticjob.dev/v1alpha1"
