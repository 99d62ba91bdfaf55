"""`make demo`'s script, run end to end on the session cluster's real nodes: the chart with
default values (watching the demo's own namespace, so it leaves the other suites' jobs alone),
examples/elasticjob.yaml as it is, a worker killed through ``kubectl exec``, the node of the
other worker lost (its replacement resumes from the checkpoint the surviving node's agent
holds: no shared storage), the managed etcd cut off, and Succeeded. What broke the demo once
(its chaos reaching past the job's NetworkPolicy from the host) fails here first."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.paths import REPO

pytestmark = pytest.mark.e2e


def test_the_demo_script_passes_on_the_real_nodes(cluster: LocalCluster) -> None:
    suffix = uuid.uuid4().hex[:6]
    ns, release, system = f"ejdemo-{suffix}", f"ejdemo{suffix}", f"ejdemosys-{suffix}"
    cluster.kubectl("create", "namespace", ns)
    try:
        done = subprocess.run(
            [
                sys.executable, str(REPO / "scripts" / "demo_cluster.py"),
                "--cluster", cluster.config.name, "--namespace", ns, "--watch-namespace",
                "--release", release, "--operator-namespace", system, "--timeout", "600",
            ],
            capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        evidence = f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        assert done.returncode == 0, evidence
        summary = done.stdout[done.stdout.index("==> Summary") :]
        assert "outcome:        Succeeded" in summary, evidence
        # The worker kill and the lost node are a failure restart each; the etcd outage is a
        # free recovery.
        assert "failure: 2" in summary and "etcd-recovered" in summary, evidence
        assert "inject: kill -9 training process" in done.stdout, evidence
        assert "Stalled, reason EtcdUnavailable" in done.stdout, evidence
        # The lost node's pod came back on the survivor, from a peer's copy of its checkpoint.
        (lost,) = [line for line in summary.splitlines() if "node lost:" in line]
        assert "(from peer;" in lost, evidence
    finally:
        cluster.kubectl("delete", "ej", "--all", "-n", ns, "--wait=true", "--timeout=120s",
                        check=False)  # fmt: skip
        cluster.helm("uninstall", release, "--namespace", system, "--wait", check=False)
        cluster.kubectl("delete", "namespace", ns, system, "--wait=false", check=False)
