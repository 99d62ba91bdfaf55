"""Fixtures of the operator's end-to-end tests on real nodes (kubelet, containerd, runc).

The operator runs from its image (``ghcr.io/elasticjob/elasticjob-operator:0.1.0``), installed by
``helm install`` of the chart with default values but the namespace to watch. The real nodes
are the cluster's ordinary nodes (the virtual nodes that share the session cluster are tainted),
so the operator, the jobs and their managed etcd land there as they would on any cluster. The
operator and the jobs live in two namespaces labelled
``pod-security.kubernetes.io/enforce=restricted``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.paths import CHART
from tests.support.realnodes import Release, restricted_namespace

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def release(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """The operator installed by ``helm install --wait`` (default values but the watched
    namespace) in a ``restricted`` namespace, once per session for every module that needs the
    chart as it is (each test's jobs are deleted by ``work``); uninstalled at the end."""
    if len(cluster.real_nodes) < 2:
        pytest.fail(
            f"these tests need 2 real nodes; cluster {cluster.config.name!r} has "
            f"{sorted(cluster.real_nodes)}: set ELASTICJOB_E2E_REAL_NODES=2 (the default)"
        )
    suffix = uuid.uuid4().hex[:6]
    rel = Release(name=f"ejr{suffix}", system=f"ejrsys-{suffix}", work=f"ejrwork-{suffix}")
    restricted_namespace(cluster, rel.system)
    restricted_namespace(cluster, rel.work)
    # Default values but for what this cluster needs: the watched namespace.
    values = tmp_path_factory.mktemp("chart") / "values.yaml"
    values.write_text(json.dumps({"watchNamespaces": [rel.work]}))
    try:
        cluster.helm(
            "install", rel.name, str(CHART), "--namespace", rel.system,
            "--values", str(values), "--wait", "--timeout", "5m",
        )  # fmt: skip
        yield rel
    finally:
        cluster.kubectl("delete", "ej", "--all", "-n", rel.work, "--wait=false", check=False)
        cluster.helm("uninstall", rel.name, "--namespace", rel.system, "--wait", check=False)
        cluster.kubectl("delete", "namespace", rel.work, rel.system, "--wait=false", check=False)


@pytest.fixture
def work(cluster: LocalCluster, release: Release) -> Iterator[str]:
    """The watched namespace, with every job deleted after each test."""
    yield release.work
    cluster.kubectl("delete", "ej", "--all", "-n", release.work, "--wait=true", check=False)
