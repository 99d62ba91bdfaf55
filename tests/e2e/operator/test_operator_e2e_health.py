"""``spec.health`` on the real API server: what the CRD's schema and CEL rules refuse, naming
the field, and the defaults it fills in."""

from __future__ import annotations

import json
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.operator_e2e import OperatorProcess, job_manifest

pytestmark = pytest.mark.e2e

REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("factor-one", {"stragglers": {"factor": 1}}, "spec.health.stragglers.factor must be above 1"),
    ("factor-huge", {"stragglers": {"factor": 500}}, "spec.health.stragglers.factor"),
    ("window-short", {"stragglers": {"windowSeconds": 2}}, "spec.health.stragglers.windowSeconds"),
    ("window-text", {"stragglers": {"windowSeconds": "1m"}}, "windowSeconds"),
    ("action", {"stragglers": {"action": "Kill"}}, "action: Unsupported value"),
    ("preflight", {"preflight": "yes"}, "preflight"),
]


@pytest.mark.parametrize(("name", "health", "says"), REFUSED, ids=[c[0] for c in REFUSED])
def test_the_crd_refuses_bad_health_settings_naming_the_field(
    cluster: LocalCluster, operator: OperatorProcess, name: str, health: dict[str, Any], says: str
) -> None:
    manifest = job_manifest(f"health-{name}")
    manifest["spec"]["health"] = health
    done = cluster.kubectl(
        "apply", "--dry-run=server", "-n", "default", "-f", "-",
        input=json.dumps(manifest), check=False,
    )  # fmt: skip
    assert done.returncode != 0, f"{name} was accepted"
    assert says in done.stderr, done.stderr


def _applied(cluster: LocalCluster, manifest: dict[str, Any]) -> dict[str, Any]:
    out = cluster.kubectl(
        "apply", "--dry-run=server", "-n", "default", "-o", "json", "-f", "-",
        input=json.dumps(manifest),
    ).stdout  # fmt: skip
    health: dict[str, Any] = json.loads(out)["spec"]["health"]
    return health


def test_health_defaults_apply_with_or_without_the_field(
    cluster: LocalCluster, operator: OperatorProcess
) -> None:
    defaults = {
        "preflight": False,
        "stragglers": {"factor": 1.5, "windowSeconds": 60, "action": "Report"},
    }
    assert _applied(cluster, job_manifest("health-absent")) == defaults
    manifest = job_manifest("health-set")
    manifest["spec"]["health"] = {"preflight": True, "stragglers": {"action": "Replace"}}
    assert _applied(cluster, manifest) == {
        "preflight": True,
        "stragglers": {"factor": 1.5, "windowSeconds": 60, "action": "Replace"},
    }
