"""The job's NetworkPolicies (pure builder) and the settings that feed them."""

from __future__ import annotations

from typing import Any

import pytest
from elasticjob_operator.core.netpol import Peer, build_network_policies
from elasticjob_operator.settings import OperatorSettings, SettingsError

from tests.support.operator_model import JOB

OPERATOR = Peer.in_namespace("ops", {"app": "op"})
PROMETHEUS = Peer({"team": "mon"}, {"app": "prom"})


def _by_name(policies: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in policies}


def test_etcd_accepts_clients_only_from_the_jobs_workers_and_the_operator() -> None:
    policies = _by_name(build_network_policies(JOB, OPERATOR, PROMETHEUS, managed_etcd=True))
    etcd = policies["demo-etcd"]
    assert etcd["spec"]["podSelector"]["matchLabels"] == {
        "elasticjob.dev/job-name": "demo",
        "elasticjob.dev/role": "etcd",
    }
    assert etcd["spec"]["policyTypes"] == ["Ingress"]
    client, metrics = etcd["spec"]["ingress"]
    assert client["ports"] == [{"protocol": "TCP", "port": 2379}]
    assert client["from"] == [
        {
            "podSelector": {
                "matchLabels": {"elasticjob.dev/job-name": "demo", "elasticjob.dev/role": "worker"}
            }
        },
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
            "podSelector": {"matchLabels": {"app": "op"}},
        },
    ]
    # A bare podSelector peer means "pods of the policy's namespace": never another namespace.
    assert "namespaceSelector" not in client["from"][0]
    assert metrics["ports"] == [{"protocol": "TCP", "port": 2381}]
    assert etcd["metadata"]["ownerReferences"][0]["uid"] == JOB.uid


def test_the_health_port_only_from_the_operator_and_prometheus() -> None:
    workers = _by_name(build_network_policies(JOB, OPERATOR, PROMETHEUS, managed_etcd=True))[
        "demo-workers"
    ]
    peers, health = workers["spec"]["ingress"]
    assert "ports" not in peers  # the group's own traffic, any port
    assert health["ports"] == [{"protocol": "TCP", "port": 29401}]
    assert len(health["from"]) == 2 and health["from"][1]["podSelector"]["matchLabels"] == {
        "app": "prom"
    }
    without = _by_name(build_network_policies(JOB, OPERATOR, None, managed_etcd=False))
    assert set(without) == {"demo-workers"}  # no managed etcd, no etcd policy
    assert len(without["demo-workers"]["spec"]["ingress"][1]["from"]) == 1


def test_settings_read_peers_and_refuse_bad_labels() -> None:
    settings = OperatorSettings.from_env(
        {
            "POD_NAMESPACE": "ops",
            "ELASTICJOB_OPERATOR_POD_LABELS": "app=op,tier=ctl",
            "ELASTICJOB_PROMETHEUS_POD_LABELS": "app=prom",
        }
    )
    policies = settings.loop.policies
    assert policies is not None
    assert policies.operator == Peer.in_namespace("ops", {"app": "op", "tier": "ctl"})
    assert policies.prometheus == Peer({}, {"app": "prom"})
    assert OperatorSettings.from_env({"ELASTICJOB_NETWORK_POLICY": "false"}).loop.policies is None
    with pytest.raises(SettingsError, match="ELASTICJOB_OPERATOR_POD_LABELS"):
        OperatorSettings.from_env({"ELASTICJOB_OPERATOR_POD_LABELS": "novalue"})
    with pytest.raises(SettingsError, match="finite"):
        OperatorSettings.from_env({"ELASTICJOB_INTERVAL_SECONDS": "inf"})
