"""Fixtures of the Kueue end-to-end tests: a real Kueue (plain-pod integration) in the cluster.

``kueue`` (session) asks the cluster process to start Kueue (built by localcluster/kueue/build.sh
on first use); ``kueue_ns`` is a fresh namespace labelled for Kueue's pod integration with its own
ClusterQueue (``<ns>``, quota set per test) and LocalQueue ``main``.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.kueue import MANAGED_NAMESPACE_LABEL, build_kueue

from tests.support.kueue import (
    FLAVOR,
    POOL,
    RELEASE,
    SERVICE_ACCOUNT,
    SYSTEM_NS,
    set_quota,
)
from tests.support.operator_e2e import OperatorProcess, sa_kubeconfig
from tests.support.paths import REPO

pytestmark = pytest.mark.e2e

_next = iter(POOL)


@pytest.fixture(scope="session")
def kueue(cluster: LocalCluster) -> dict[str, Any]:
    """Kueue running in the cluster (started once; stopped with the cluster)."""
    # Build here (a no-op once cached): a cold build takes minutes, longer than the cluster
    # process's control requests may.
    build_kueue()
    info = cluster.start_kueue()
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": FLAVOR},
        }
    )
    for name, value in (("extras", 100), ("core", 1000), ("urgent", 10000)):
        cluster.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": f"ej-test-{name}"},
                "value": value,
            }
        )
    return info


@pytest.fixture
def kueue_ns(cluster: LocalCluster, kueue: dict[str, Any]) -> Iterator[str]:
    """A namespace managed by Kueue with ClusterQueue ``<ns>`` (4 GPUs) and LocalQueue ``main``."""
    name = f"kq-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("label", "namespace", name, f"{MANAGED_NAMESPACE_LABEL}=true")
    cluster.wait_for(
        f"default ServiceAccount in {name}",
        lambda: cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
    )
    set_quota(cluster, name, 4)
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "main", "namespace": name},
            "spec": {"clusterQueue": name},
        }
    )
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
    cluster.kubectl("delete", "clusterqueue", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def kueue_operator(
    cluster: LocalCluster, kueue: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The operator as the chart's ServiceAccount (the chart's RBAC, Kueue rule included),
    watching the POOL namespaces, which Kueue manages."""
    work = tmp_path_factory.mktemp("kueue-operator")
    cluster.kubectl("apply", "-f", str(REPO / "crds" / "elasticjob.yaml"))
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/elasticjobs.elasticjob.dev", "--timeout=60s"
    )
    existing = set(cluster.kubectl("get", "ns", "-o", "name").stdout.split())
    for ns in [SYSTEM_NS, *POOL]:
        if f"namespace/{ns}" not in existing:
            cluster.kubectl("create", "namespace", ns)
    for ns in POOL:
        cluster.kubectl("label", "namespace", ns, f"{MANAGED_NAMESPACE_LABEL}=true", "--overwrite")
    rendered = cluster.helm(
        "template", RELEASE, str(REPO / "charts" / "elasticjob-operator"),
        "--namespace", SYSTEM_NS, "--set", "watchNamespaces={" + ",".join(POOL) + "}",
        "--show-only", "templates/rbac.yaml", "--show-only", "templates/serviceaccount.yaml",
    ).stdout  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=rendered)
    proc = OperatorProcess(
        sa_kubeconfig(cluster, work / "operator.kubeconfig", SYSTEM_NS, SERVICE_ACCOUNT),
        POOL,
        work,
        lease=(SYSTEM_NS, SERVICE_ACCOUNT),  # this release's Lease, the one its Role names
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.kill(signal.SIGTERM)
        for ns in POOL:
            cluster.kubectl("delete", "ej", "--all", "-n", ns, "--wait=false", check=False)


@pytest.fixture
def kq(cluster: LocalCluster, kueue_operator: OperatorProcess) -> Iterator[str]:
    """A namespace the operator watches and Kueue manages, with ClusterQueue ``<ns>`` (4 GPUs,
    preempting lower priorities) and LocalQueue ``main``; cleaned up afterwards."""
    name = next(_next)
    set_quota(cluster, name, 4)
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "main", "namespace": name},
            "spec": {"clusterQueue": name},
        }
    )
    yield name
    cluster.kubectl("delete", "ej", "--all", "-n", name, "--wait=false", check=False)
    cluster.kubectl("delete", "pods", "--all", "-n", name, "--wait=false", check=False)
    forbidden = kueue_operator.forbidden()
    assert not forbidden, "the operator hit RBAC denials:\n" + "\n".join(forbidden[:10])
