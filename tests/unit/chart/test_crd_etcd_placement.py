"""The CRD's ``spec.etcd`` placement fields: the schema and the CEL rules name the field.

The API server evaluates the CEL rules in tests/e2e/chart; here, without a cluster, the schema
half runs (jsonschema) and each rule is checked to name its field (message and ``fieldPath``)
and to say what the operator says of the same mistake (core/spec.py).
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from elasticjob_operator.core.spec import SpecError, parse_spec

from tests.support.chart import as_json_schema, crd_schema

FIELDS = ("nodeSelector", "tolerations", "affinity", "priorityClassName")


def _etcd_schema() -> dict[str, Any]:
    etcd: dict[str, Any] = crd_schema()["properties"]["spec"]["properties"]["etcd"]
    return etcd


def _job(etcd: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "elasticjob.dev/v1alpha1",
        "kind": "ElasticJob",
        "metadata": {"name": "j"},
        "spec": {
            "replicas": 1,
            "etcd": etcd,
            "template": {"spec": {"containers": [{"name": "trainer", "command": ["python"]}]}},
        },
    }


def _errors(job: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(as_json_schema(crd_schema()))
    return [".".join(str(p) for p in e.absolute_path) for e in validator.iter_errors(job)]


GOOD: list[dict[str, Any]] = [
    {"nodeSelector": {"pool": "system"}},
    {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra"}]},
    {"tolerations": [{"operator": "Exists"}]},
    {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}},
    {"priorityClassName": "system-cluster-critical"},
]


@pytest.mark.parametrize("etcd", GOOD, ids=[next(iter(e)) for e in GOOD])
def test_placement_fits_the_schema(etcd: dict[str, Any]) -> None:
    assert _errors(_job(etcd)) == []


BAD = [
    ({"nodeSelector": {"pool": 1}}, "spec.etcd.nodeSelector.pool"),
    ({"nodeSelector": ["pool=system"]}, "spec.etcd.nodeSelector"),
    ({"tolerations": {"key": "x"}}, "spec.etcd.tolerations"),
    ({"tolerations": [{"key": "x", "operator": "Sometimes"}]}, "spec.etcd.tolerations.0.operator"),
    ({"tolerations": [{"key": "x", "effect": "NoRun"}]}, "spec.etcd.tolerations.0.effect"),
    ({"tolerations": [{"key": "x", "tolerationSecond": 5}]}, "spec.etcd.tolerations.0"),
    ({"affinity": "anywhere"}, "spec.etcd.affinity"),
    ({"priorityClassName": "High Priority"}, "spec.etcd.priorityClassName"),
]


@pytest.mark.parametrize(("etcd", "path"), BAD, ids=[p for _, p in BAD])
def test_the_schema_names_the_bad_field(etcd: dict[str, Any], path: str) -> None:
    assert path in _errors(_job(etcd))


def test_the_image_has_no_schema_default() -> None:
    # A default here would be stored in every job, and the chart's etcd.image never apply.
    assert "default" not in _etcd_schema()["properties"]["image"]


def _rule(node: dict[str, Any], field: str) -> dict[str, Any]:
    rules: list[dict[str, Any]] = node["x-kubernetes-validations"]
    (rule,) = [r for r in rules if r.get("fieldPath") == f".{field}"]
    return rule


@pytest.mark.parametrize("field", FIELDS)
def test_managed_only_rule_names_the_field_as_the_operator_does(field: str) -> None:
    rule = _rule(_etcd_schema(), field)
    assert rule["message"].startswith(f"spec.etcd.{field} is for Managed mode"), rule
    value: Any = {"nodeSelector": {}, "tolerations": [], "affinity": {}}.get(field, "high")
    with pytest.raises(SpecError) as info:
        parse_spec(_job({"mode": "External", "endpoints": ["etcd:2379"], field: value})["spec"])
    assert str(info.value) == rule["message"]


@pytest.mark.parametrize("field", ["value", "operator"])
def test_toleration_rules_name_their_field(field: str) -> None:
    rule = _rule(_etcd_schema()["properties"]["tolerations"]["items"], field)
    assert rule["message"].startswith("spec.etcd.tolerations[]"), rule
