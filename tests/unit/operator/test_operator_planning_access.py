"""The plan creates what guards a job (its NetworkPolicies, its managed etcd's certificates
Secret) as actions, first in the step, and nothing once the job is finished."""

from __future__ import annotations

from typing import Any

import pytest
from elasticjob_operator.core import planning
from elasticjob_operator.core.netpol import Peer, PolicySettings, build_network_policies
from elasticjob_operator.core.observed import Observed
from elasticjob_operator.core.status import JobStatus, Phase

from tests.support.operator_model import JOB, T0, job_spec

POLICIES = PolicySettings(Peer.in_namespace("ops", {"app": "op"}), None)
EXTERNAL_TLS = {"mode": "External", "endpoints": ["e:2379"], "tlsSecretName": "client"}


def _guarding(
    etcd: dict[str, Any], phase: Phase, policies: PolicySettings | None, missing: bool
) -> list[str]:
    """The guarding actions of a plan, by kind, in order."""
    plan = planning.plan(
        JOB,
        spec=job_spec(etcd=etcd),
        generation=1,
        status=JobStatus(phase=phase),
        observed=Observed(tls_secret_missing=missing),
        now=T0,
        policies=policies,
    )
    kinds = []
    for action in plan.actions:
        if isinstance(action, planning.CreatePolicies):
            kinds.append(f"policies:{len(action.manifests)}")
        elif isinstance(action, planning.CreateEtcdTlsSecret):
            kinds.append("tls-secret")
        else:
            break  # the guarding actions come first: the rest is the job's objects
    return kinds


@pytest.mark.parametrize(
    ("etcd", "phase", "policies", "missing", "expected"),
    [
        # A managed etcd: two policies (workers, etcd), then its Secret when it is missing.
        ({}, Phase.PENDING, POLICIES, True, ["policies:2", "tls-secret"]),
        ({}, Phase.RUNNING, POLICIES, False, ["policies:2"]),
        # Policies created already (or turned off): only the Secret.
        ({}, Phase.PENDING, None, True, ["tls-secret"]),
        ({}, Phase.RUNNING, None, False, []),
        # An insecure managed etcd has no Secret to create.
        ({"insecure": True}, Phase.PENDING, None, True, []),
        # An external etcd: no etcd policy, and its Secret is the user's, never created.
        (EXTERNAL_TLS, Phase.PENDING, POLICIES, True, ["policies:1"]),
        # A finished job gets nothing.
        ({}, Phase.SUCCEEDED, POLICIES, True, []),
        ({}, Phase.FAILED, POLICIES, True, []),
    ],
)
def test_guarding_actions(
    etcd: dict[str, Any],
    phase: Phase,
    policies: PolicySettings | None,
    missing: bool,
    expected: list[str],
) -> None:
    assert _guarding(etcd, phase, policies, missing) == expected


def test_the_policies_are_the_ones_netpol_builds() -> None:
    plan = planning.plan(
        JOB,
        spec=job_spec(),
        generation=1,
        status=JobStatus(),
        observed=Observed(),
        now=T0,
        policies=POLICIES,
    )
    first = plan.actions[0]
    assert isinstance(first, planning.CreatePolicies)
    assert list(first.manifests) == build_network_policies(
        JOB, POLICIES.operator, POLICIES.prometheus, managed_etcd=True
    )
