"""values.schema.json: defaults pass; unknown keys and wrong types fail (jsonschema and helm)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import yaml

from tests.support.chart import HelmError, render
from tests.support.paths import CHART

SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())

# (--set flags, a fragment helm's error message must contain); each one a mistake a user makes.
BAD_VALUES = {
    "unknown top-level key": ({"replicas": "2"}, "replicas"),
    "typo in a nested key": ({"serviceMonitor.enable": "true"}, "enable"),
    "tag given as a number": ({"image.tag": "5"}, "/image/tag"),
    "watchNamespaces as a string": ({"watchNamespaces": "default"}, "/watchNamespaces"),
    "namespace that is no DNS label": ({"watchNamespaces": "{Team_A}"}, "/watchNamespaces/0"),
    "boolean as a string": ({"rbac.create:string": "yes"}, "/rbac/create"),
    "unknown pull policy": ({"image.pullPolicy": "Sometimes"}, "/image/pullPolicy"),
    "port out of range": ({"metricsPort": "70000"}, "/metricsPort"),
    "log level not offered": ({"operator.logLevel": "verbose"}, "/operator/logLevel"),
    "log format not offered": ({"operator.logFormat": "xml"}, "/operator/logFormat"),
    "etcd image as a number": ({"etcd.image": "5"}, "/etcd/image"),
    "bad interval": ({"serviceMonitor.interval": "30"}, "/serviceMonitor/interval"),
    "bad quantity": ({"resources.limits.memory": "lots"}, "/resources/limits/memory"),
    "label value not a string": ({"dashboard.labels.grafana_dashboard": "1"}, "grafana_dashboard"),
    "bad digest": ({"image.digest": "latest"}, "/image/digest"),
    "unknown probe field": ({"livenessProbe.path": "/x"}, "path"),
}


def test_schema_is_draft_07_and_valid() -> None:
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(SCHEMA)


def test_defaults_satisfy_the_schema() -> None:
    jsonschema.Draft7Validator(SCHEMA).validate(DEFAULTS)


def test_values_yaml_points_editors_at_the_schema() -> None:
    first = (CHART / "values.yaml").read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=values.schema.json"


def _object_schemas(node: Any, path: str = "#") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield path, node
        for key, child in node.items():
            yield from _object_schemas(child, f"{path}/{key}")
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from _object_schemas(child, f"{path}/{i}")


def test_every_object_rejects_unknown_keys() -> None:
    """Objects with named fields forbid others; free-form maps constrain their values' type.

    Only the Kubernetes pass-through objects (affinity terms, valueFrom, a parent's ``global``)
    are open, since the API server validates those.
    """
    open_ok = {
        "#/properties/global",
        "#/properties/affinity/properties/nodeAffinity",
        "#/properties/affinity/properties/podAffinity",
        "#/properties/affinity/properties/podAntiAffinity",
        "#/properties/operator/properties/extraEnv/items/properties/valueFrom",
    }
    for path, node in _object_schemas(SCHEMA):
        if path in open_ok:
            continue
        extra = node.get("additionalProperties")
        assert extra is False or isinstance(extra, dict), f"{path} accepts any extra key"


def test_every_default_key_is_described_by_the_schema() -> None:
    def walk(values: dict[str, Any], schema: dict[str, Any], path: str) -> None:
        props = schema.get("properties", {})
        for key, value in values.items():
            assert key in props, f"values.yaml has {path}{key} but the schema does not"
            sub = props[key]
            if isinstance(value, dict) and "properties" in sub:
                walk(value, sub, f"{path}{key}.")

    walk(DEFAULTS, SCHEMA, "")


@pytest.mark.parametrize("flags,fragment", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_helm_rejects_bad_values(flags: dict[str, str], fragment: str) -> None:
    with pytest.raises(HelmError) as excinfo:
        render(flags)
    message = str(excinfo.value)
    assert "schema" in message.lower() or "at '" in message, message
    assert fragment in message, message


def test_good_overrides_are_accepted() -> None:
    docs = render(
        {
            "watchNamespaces": "{ml,research}",
            "image.tag:string": "0.2.0",
            "resources.limits.memory": "1Gi",
            "resources.requests.cpu": "250m",
            "serviceMonitor.enabled": "true",
            "serviceMonitor.interval": "15s",
            "dashboard.labels.grafana_dashboard:string": "1",
            "operator.logLevel": "debug",
            "tolerations[0].key": "dedicated",
            "tolerations[0].operator": "Exists",
        }
    )
    assert docs
