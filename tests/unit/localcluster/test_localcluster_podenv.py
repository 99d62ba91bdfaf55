"""A container's environment and argv, as the kubelet computes them (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from elasticjob_localcluster.podenv import (
    PodConfigError,
    PodContext,
    container_argv,
    container_env,
    expand,
)

POD: dict[str, Any] = {
    "metadata": {
        "name": "p",
        "namespace": "ns",
        "uid": "u-1",
        "labels": {"role": "worker"},
        "annotations": {"note": "hi"},
    },
    "spec": {"nodeName": "node-2", "serviceAccountName": "sa"},
}


def ctx(**kw: Any) -> PodContext:
    values: dict[str, Any] = {
        "pod_ip": "10.1.0.5",
        "host_ip": "10.1.0.1",
        "node_name": "node-2",
        "api_host": "10.1.0.1",
        "api_port": 6443,
        "path": "/repo/.venv/bin:/usr/bin",
        "home": "/root",
        "config_maps": {("ns", "cm"): {"A": "1", "B": "2"}},
        "secrets": {("ns", "s"): {"PASSWORD": "pw"}},
    }
    values.update(kw)
    return PodContext(**values)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(X)/bin", "x/bin"),
        ("$$(X)", "$(X)"),
        ("$(MISSING)", "$(MISSING)"),
        ("a$(X)b$(X)", "axbx"),
        ("$X", "$X"),
    ],
)
def test_expand(text: str, expected: str) -> None:
    assert expand(text, {"X": "x"}) == expected


def test_env_sources_in_order() -> None:
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['role']"}}},
            {
                "name": "NOTE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['note']"}},
            },
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "PASSWORD"}}},
            {"name": "ADDR", "value": "$(IP):29500"},
        ],
    }
    env = container_env(POD, container, ctx())
    assert env["PATH"].startswith("/repo/.venv/bin")
    assert env["HOSTNAME"] == "p"
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("10.1.0.1", "6443")
    assert (env["CM_A"], env["CM_B"]) == ("1", "2")
    assert (env["POD"], env["IP"], env["ROLE"], env["NOTE"]) == ("p", "10.1.0.5", "worker", "hi")
    assert (env["UID"], env["NODE"], env["PW"]) == ("u-1", "node-2", "pw")
    assert env["ADDR"] == "10.1.0.5:29500"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ([{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}], "spec.bogus"),
        ([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}], "nope"),
        ([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "Z"}}}], "key Z"),
        ([{"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}], "only"),
    ],
)
def test_env_errors_name_what_to_fix(env: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(PodConfigError, match=message):
        container_env(POD, {"name": "c", "env": env}, ctx())


def test_optional_references_may_be_missing() -> None:
    env = [
        {"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}}}
    ]
    assert "X" not in container_env(POD, {"name": "c", "env": env}, ctx())


def test_argv_needs_a_command_and_expands_variables() -> None:
    argv = container_argv({"name": "c", "command": ["echo"], "args": ["$(A)", "b"]}, {"A": "a"})
    assert argv == ["echo", "a", "b"]
    with pytest.raises(PodConfigError, match="no command"):
        container_argv({"name": "c", "args": ["x"]}, {})
