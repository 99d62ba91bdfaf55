"""The operator's settings table: one default per setting, read by the dataclass and the
environment reader alike, and one namespace for the operator's Lease and its NetworkPolicies."""

from __future__ import annotations

from pathlib import Path

import pytest
from elasticjob_operator.core.netpol import NAMESPACE_NAME_LABEL
from elasticjob_operator.settings import VARIABLES, OperatorSettings, Variable

DOCS = Path(__file__).resolve().parents[3] / "docs" / "operator.md"


def _field(settings: object, dotted: str) -> object:
    for name in dotted.split("."):
        settings = getattr(settings, name)
    return settings


@pytest.mark.parametrize("row", VARIABLES, ids=lambda row: row.env)
def test_an_unset_variable_gives_the_dataclass_default(row: Variable) -> None:
    assert _field(OperatorSettings.from_env({}), row.field) == row.default
    assert _field(OperatorSettings(), row.field) == row.default


def test_every_variable_is_documented() -> None:
    text = DOCS.read_text()
    assert [row.env for row in VARIABLES if row.env not in text] == []


def test_a_set_variable_reaches_its_field() -> None:
    settings = OperatorSettings.from_env(
        {"ELASTICJOB_STEADY_ETCD_SECONDS": "7", "ELASTICJOB_LEASE_RETRY_PERIOD_SECONDS": "1"}
    )
    assert settings.loop.cadence.etcd_interval == 7.0
    assert settings.lease.retry_period == 1.0


@pytest.mark.parametrize(
    ("env", "namespace"),
    [
        ({}, "default"),
        ({"POD_NAMESPACE": "ops"}, "ops"),
        ({"ELASTICJOB_LEASE_NAMESPACE": "lease"}, "lease"),
        # Set on purpose, the variable wins over the pod's namespace, in both places.
        ({"ELASTICJOB_LEASE_NAMESPACE": "lease", "POD_NAMESPACE": "ops"}, "lease"),
        ({"ELASTICJOB_LEASE_NAMESPACE": "", "POD_NAMESPACE": "ops"}, "ops"),
    ],
)
def test_the_operators_namespace_is_one(env: dict[str, str], namespace: str) -> None:
    settings = OperatorSettings.from_env(env)
    assert settings.lease_namespace == namespace
    policies = settings.loop.policies
    assert policies is not None
    assert policies.operator.namespace_labels == {NAMESPACE_NAME_LABEL: namespace}
