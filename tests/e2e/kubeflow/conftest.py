"""Fixtures of the Kubeflow peer's end-to-end tests: its training operator (built from its Go
module by ``localcluster/kubeflow/build.sh``, cached) running against the session's cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.kubeflow import TrainingOperator


@pytest.fixture(scope="module")
def training_operator(cluster: LocalCluster) -> Iterator[TrainingOperator]:
    """Kubeflow's training operator (PyTorchJob only) as a host process, with its CRDs and its
    validating webhook installed; stopped (webhook removed) after the module."""
    with TrainingOperator.for_cluster(cluster) as operator:
        yield operator
