"""``replicaCount``: one operator pod by default; above 1, standbys that are ready without
reconciling, a PodDisruptionBudget, spreading over nodes and one-at-a-time rollouts."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.chart import HelmError, lint, of_kind, one, operator_container, render

HA = {"replicaCount": "2"}
SELECTOR = {
    "app.kubernetes.io/name": "elasticjob-operator",
    "app.kubernetes.io/instance": "ej",
    "app.kubernetes.io/component": "operator",
}


def _pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


def test_one_replica_by_default_without_budget_or_spread() -> None:
    docs = render()
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    # The one pod hands its Lease back on SIGTERM before the next starts.
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert not of_kind(docs, "PodDisruptionBudget"), "a budget on one pod blocks every drain"
    assert "topologySpreadConstraints" not in _pod_spec(docs)
    # Alone, the pod is ready once it leads: its metrics are served.
    assert operator_container(docs)["readinessProbe"]["httpGet"] == {
        "path": "/metrics",
        "port": "metrics",
    }


@pytest.mark.parametrize("replicas", [2, 3])
def test_above_one_replica_a_budget_spread_and_rolling_updates(replicas: int) -> None:
    docs = render({"replicaCount": str(replicas)})
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == replicas
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    budget = one(docs, "PodDisruptionBudget")
    assert budget["apiVersion"] == "policy/v1"
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": SELECTOR}}
    assert budget["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert deployment["spec"]["selector"]["matchLabels"] == SELECTOR
    (spread,) = _pod_spec(docs)["topologySpreadConstraints"]
    assert spread == {
        "topologyKey": "kubernetes.io/hostname",
        "maxSkew": 1,
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": SELECTOR},
    }


def test_above_one_replica_a_standby_is_ready_on_its_health_endpoint() -> None:
    # A standby answers /healthz but serves no /metrics (kopf has not started): readiness on
    # /metrics would keep it unready, `helm install --wait` would never return, and the budget
    # would count it unhealthy and refuse to evict the leader.
    container = operator_container(render(HA))
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    # Every replica names the same Lease (in its own namespace): the election is shared.
    assert env["ELASTICJOB_LEASE_NAME"] == "ej-elasticjob-operator"
    assert "ELASTICJOB_LEADER_ELECTION" not in env, "leader election stays on (the default)"


def test_budget_and_spread_can_be_tuned_or_turned_off() -> None:
    docs = render(
        {
            **HA,
            "podDisruptionBudget.maxUnavailable": "2",
            "topologySpread.topologyKey": "topology.kubernetes.io/zone",
            "topologySpread.whenUnsatisfiable": "DoNotSchedule",
        }
    )
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 2
    (spread,) = _pod_spec(docs)["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    assert spread["whenUnsatisfiable"] == "DoNotSchedule"
    off = render({**HA, "podDisruptionBudget.enabled": "false", "topologySpread.enabled": "false"})
    assert not of_kind(off, "PodDisruptionBudget")
    assert "topologySpreadConstraints" not in _pod_spec(off)


def test_ha_values_lint_clean() -> None:
    out = lint(HA)
    assert "0 chart(s) failed" in out
    assert "[WARNING]" not in out and "[ERROR]" not in out, out


@pytest.mark.parametrize(
    "flags,fragment",
    [
        ({"replicaCount": "0"}, "/replicaCount"),
        ({"replicaCount:string": "2"}, "/replicaCount"),
        ({"podDisruptionBudget.maxUnavailable": "0"}, "/podDisruptionBudget/maxUnavailable"),
        ({"topologySpread.whenUnsatisfiable": "Never"}, "/topologySpread/whenUnsatisfiable"),
        ({"topologySpread.key": "zone"}, "key"),
    ],
    ids=["zero replicas", "replicas as a string", "zero budget", "unknown policy", "typo"],
)
def test_bad_ha_values_are_rejected(flags: dict[str, str], fragment: str) -> None:
    with pytest.raises(HelmError) as excinfo:
        render(flags)
    assert fragment in str(excinfo.value), str(excinfo.value)
