"""Fixtures of the operator's end-to-end tests on real nodes (kubelet, containerd, runc).

The operator runs from its image (``ghcr.io/elasticjob/elasticjob-operator:0.1.0``), installed by
``helm install`` of the chart with default values but the namespace to watch. The real nodes
are the cluster's ordinary nodes (the virtual nodes that share the session cluster are tainted),
so the operator, the jobs and their managed etcd land there as they would on any cluster. The
operator and the jobs live in two namespaces labelled
``pod-security.kubernetes.io/enforce=restricted``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.realnodes import Release, installed_release

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def release(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """The operator installed by ``helm install --wait`` (default values but the watched
    namespace) in a ``restricted`` namespace, once per session for every module that needs the
    chart as it is (each test's jobs are deleted by ``work``); uninstalled at the end. A module
    that checks the install itself defines its own ``release``."""
    with installed_release(cluster, tmp_path_factory.mktemp("chart")) as rel:
        yield rel


@pytest.fixture
def work(cluster: LocalCluster, release: Release) -> Iterator[str]:
    """The watched namespace, with every job and its pods gone after each test: the garbage
    collector deletes a job's pods after the job, and the next test counts pods per node."""
    yield release.work
    cluster.kubectl("delete", "ej", "--all", "-n", release.work, "--wait=true", check=False)
    cluster.kubectl(
        "delete", "pod", "-l", "elasticjob.dev/job-name", "-n", release.work,
        "--wait=true", "--timeout=180s", check=False, timeout=200,
    )  # fmt: skip
