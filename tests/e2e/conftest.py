"""Fixtures of the end-to-end tests: a real local Kubernetes cluster (see docs/local-cluster.md).

``cluster`` (session): by default a cluster of its own, named ``e2e-<pid>``, started once per
pytest session and stopped (state removed) at the end, so concurrent sessions never collide.
Set ``ELASTICJOB_E2E_CLUSTER=<name>`` to reuse a running cluster instead (e.g. ``dev``, the one
``make cluster-up`` starts); it is left running. ``ELASTICJOB_E2E_NODES`` and
``ELASTICJOB_E2E_GPUS_PER_NODE`` size the fixture's own cluster (defaults 4 and 4);
``ELASTICJOB_E2E_REAL_NODES`` adds real nodes (default 2; kubelet, containerd, CoreDNS; their
images come from ``localcluster/images/build.sh``, run first when present).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticjob_localcluster import ClusterConfig, LocalCluster, connect, start_cluster

REPO = Path(__file__).resolve().parents[2]


def _report(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    if capture is None:
        reporter.write_line(line)
        return
    # Fixture output is captured; this line is for the person (or CI log) watching the run.
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """The running local cluster (admin access; see :class:`LocalCluster` for the API)."""
    reuse = os.environ.get("ELASTICJOB_E2E_CLUSTER")
    if reuse:
        running = connect(ClusterConfig(name=reuse))
        if running is None:
            pytest.fail(
                f"ELASTICJOB_E2E_CLUSTER={reuse}: no such cluster is running (make cluster-up)"
            )
        yield running
        return
    began = time.monotonic()
    # Builds Kubernetes on first use; a no-op (seconds) once the binaries are cached.
    build = subprocess.run(
        [str(REPO / "localcluster" / "build.sh")], capture_output=True, text=True, check=False
    )
    if build.returncode != 0:
        pytest.fail(f"localcluster/build.sh failed:\n{build.stderr[-4000:]}")
    built = time.monotonic() - began
    config = ClusterConfig(
        name=f"e2e-{os.getpid()}",
        nodes=int(os.environ.get("ELASTICJOB_E2E_NODES", "4")),
        real_nodes=int(os.environ.get("ELASTICJOB_E2E_REAL_NODES", "2")),
        gpus_per_node=int(os.environ.get("ELASTICJOB_E2E_GPUS_PER_NODE", "4")),
        network_policies=os.environ.get("ELASTICJOB_E2E_NETWORK_POLICIES", "1") != "0",
    )
    images_built = 0.0
    images_script = REPO / "localcluster" / "images" / "build.sh"
    if config.real_nodes and images_script.exists():
        # The images real nodes run (content-cached: seconds when nothing changed).
        began = time.monotonic()
        images = subprocess.run([str(images_script)], capture_output=True, text=True, check=False)
        if images.returncode != 0:
            pytest.fail(f"localcluster/images/build.sh failed:\n{images.stderr[-4000:]}")
        images_built = time.monotonic() - began
    started = time.monotonic()
    handle = start_cluster(config, owned=True)
    _report(
        request.config,
        f"\nlocal cluster {config.name}: build/check {built:.1f} s, images {images_built:.1f} s, "
        f"start {time.monotonic() - started:.1f} s "
        f"(control plane {handle.info['control_plane_seconds']} s"
        + (
            f", {config.real_nodes} real nodes {handle.info['real_nodes_seconds']} s of which "
            f"image import {handle.info['image_import_seconds']} s, "
            f"CoreDNS {handle.info['dns_seconds']} s"
            if config.real_nodes
            else ""
        )
        + f"), Kubernetes {handle.info['version']}",
    )
    try:
        yield handle
    finally:
        handle.stop()
        if not os.environ.get("ELASTICJOB_KEEP_CLUSTER_STATE"):
            shutil.rmtree(config.state_dir, ignore_errors=True)


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    """A fresh namespace for one test, deleted (in the background) afterwards."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    cluster.wait_for(
        f"default ServiceAccount in {name}",
        lambda: (
            cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode
            == 0
        ),
    )
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def real_nodes(cluster: LocalCluster) -> list[str]:
    """Names of the cluster's real nodes; fails the test when it has fewer than two."""
    names = sorted(cluster.real_nodes)
    if len(names) < 2:
        pytest.fail(
            f"this test needs 2 real nodes; cluster {cluster.config.name!r} has {names}: "
            "set ELASTICJOB_E2E_REAL_NODES=2 (the default) or reuse a cluster started with "
            "`up --real-nodes 2`"
        )
    return names
