"""Fixtures of the operator's end-to-end tests: the CRD, the chart's RBAC, the operator process.

The operator runs as a host process (the local cluster's pods are host processes too) with a
kubeconfig whose identity is the chart's ServiceAccount, bound by the chart's own RBAC template in
namespaced mode: every API call the operator makes in these tests is one that RBAC allows, or the
test fails on the log line saying it was forbidden.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.operator_e2e import (
    POOL,
    SYSTEM_NS,
    OperatorProcess,
    apply_chart_rbac,
    sa_kubeconfig,
)
from tests.support.paths import REPO

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def operator(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The operator, watching the POOL namespaces, as the chart's ServiceAccount."""
    work = tmp_path_factory.mktemp("operator")
    cluster.kubectl("apply", "-f", str(REPO / "crds" / "elasticjob.yaml"))
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/elasticjobs.elasticjob.dev", "--timeout=60s"
    )
    existing = set(cluster.kubectl("get", "ns", "-o", "name").stdout.split())
    for ns in [SYSTEM_NS, *POOL]:
        if f"namespace/{ns}" not in existing:
            cluster.kubectl("create", "namespace", ns)
    apply_chart_rbac(cluster)
    proc = OperatorProcess(sa_kubeconfig(cluster, work / "operator.kubeconfig"), POOL, work)
    proc.start()
    try:
        yield proc
    finally:
        proc.kill(signal.SIGTERM)
        for ns in POOL:
            cluster.kubectl("delete", "ej", "--all", "-n", ns, "--wait=false", check=False)


_next = iter(POOL)


@pytest.fixture
def ns(cluster: LocalCluster, operator: OperatorProcess) -> Iterator[str]:
    """A namespace the operator watches, to this test alone; its jobs are deleted afterwards."""
    name = next(_next)
    yield name
    cluster.kubectl("delete", "ej", "--all", "-n", name, "--wait=false", check=False)
    forbidden = operator.forbidden()
    assert not forbidden, "the operator hit RBAC denials:\n" + "\n".join(forbidden[:10])
