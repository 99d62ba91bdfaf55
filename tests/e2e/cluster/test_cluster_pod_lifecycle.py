"""Container exits, restart policies, kills and graceful deletion, as a kubelet reports them."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.testing import log_contains, python_pod

pytestmark = pytest.mark.e2e


def _status(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    pod = cluster.pod(namespace, name)
    assert pod is not None, f"pod {name} vanished"
    status: dict[str, Any] = pod["status"]
    return status


def _container(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    statuses = _status(cluster, namespace, name).get("containerStatuses") or [{}]
    return dict(statuses[0])


def test_failed_container_with_restart_never_fails_the_pod(
    cluster: LocalCluster, namespace: str
) -> None:
    cluster.apply(python_pod("once", "import sys; print('bye'); sys.exit(3)"), namespace)
    cluster.wait_pod_phase(namespace, "once", "Failed")
    container = _container(cluster, namespace, "once")
    assert container["restartCount"] == 0
    assert container["state"]["terminated"]["exitCode"] == 3
    assert container["state"]["terminated"]["reason"] == "Error"
    assert "bye" in cluster.kubectl("logs", "once", "-n", namespace).stdout


def test_successful_container_completes(cluster: LocalCluster, namespace: str) -> None:
    cluster.apply(python_pod("done", "print('fine')", restart_policy="OnFailure"), namespace)
    cluster.wait_pod_phase(namespace, "done", "Succeeded")
    container = _container(cluster, namespace, "done")
    assert container["state"]["terminated"] == {
        **container["state"]["terminated"],
        "exitCode": 0,
        "reason": "Completed",
    }
    assert container["restartCount"] == 0
    conditions = _status(cluster, namespace, "done")["conditions"]
    ready = next(c for c in conditions if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "PodCompleted"


def test_failing_container_with_restart_on_failure_is_restarted(
    cluster: LocalCluster, namespace: str
) -> None:
    cluster.apply(
        python_pod("flaky", "import sys; sys.exit(7)", restart_policy="OnFailure"), namespace
    )
    container = cluster.wait_for(
        "two restarts",
        lambda: (c := _container(cluster, namespace, "flaky")).get("restartCount", 0) >= 2 and c,
        timeout=60,
    )
    assert container["lastState"]["terminated"]["exitCode"] == 7
    assert _status(cluster, namespace, "flaky")["phase"] == "Running"


def test_killed_container_is_restarted_per_policy(cluster: LocalCluster, namespace: str) -> None:
    code = "import time; print('start', flush=True); time.sleep(3600)"
    cluster.apply(python_pod("victim", code, restart_policy="Always"), namespace)
    cluster.wait_pod_phase(namespace, "victim", "Running")
    cluster.wait_for("first log line", lambda: log_contains(cluster, namespace, "victim", "start"))
    cluster.kill_container(namespace, "victim", signal.SIGKILL)
    container = cluster.wait_for(
        "restart after the kill",
        lambda: (
            (c := _container(cluster, namespace, "victim")).get("restartCount") == 1
            and "running" in c["state"]
            and c
        ),
    )
    assert container["lastState"]["terminated"]["exitCode"] == 128 + signal.SIGKILL
    assert container["lastState"]["terminated"]["reason"] == "Error"
    cluster.wait_for(
        "log of the restarted run", lambda: log_contains(cluster, namespace, "victim", "start")
    )
    assert "start" in cluster.pod_logs(namespace, "victim", previous=True)
    assert "start" in cluster.kubectl("logs", "victim", "-n", namespace, "--previous").stdout

    cluster.apply(python_pod("never", code, restart_policy="Never"), namespace)
    cluster.wait_pod_phase(namespace, "never", "Running")
    cluster.wait_for("never's pid", lambda: log_contains(cluster, namespace, "never", "start"))
    cluster.kill_container(namespace, "never", signal.SIGTERM)
    cluster.wait_pod_phase(namespace, "never", "Failed")
    assert (
        _container(cluster, namespace, "never")["state"]["terminated"]["exitCode"]
        == 128 + signal.SIGTERM
    )


def test_deletion_is_graceful(cluster: LocalCluster, namespace: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    polite = (
        "import signal, sys, time\n"
        "def bye(*_):\n"
        f"    time.sleep(1); open({str(marker)!r}, 'w').write('got SIGTERM'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\nprint('up', flush=True)\ntime.sleep(3600)\n"
    )
    cluster.apply(python_pod("polite", polite, grace=20), namespace)
    cluster.wait_for("polite up", lambda: log_contains(cluster, namespace, "polite", "up"))
    began = time.monotonic()
    cluster.kubectl("delete", "pod", "polite", "-n", namespace, "--timeout=60s")
    took = time.monotonic() - began
    assert marker.read_text() == "got SIGTERM"
    assert 1 <= took < 15, took

    stubborn = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('up', flush=True)\ntime.sleep(3600)\n"
    )
    cluster.apply(python_pod("stubborn", stubborn, grace=3), namespace)
    cluster.wait_for("stubborn up", lambda: log_contains(cluster, namespace, "stubborn", "up"))
    began = time.monotonic()
    cluster.kubectl("delete", "pod", "stubborn", "-n", namespace, "--timeout=60s")
    took = time.monotonic() - began
    assert 3 <= took < 20, took
    assert cluster.pod(namespace, "stubborn") is None
