"""Pods on real nodes (kubelet, containerd, runc): our image runs, restart policies, OOM kills,
graceful deletion, PodSecurity admission."""

from __future__ import annotations

import functools
import signal
from pathlib import Path
from typing import Any

import pytest
from elasticjob_localcluster import ClusterError, LocalCluster
from elasticjob_localcluster.testing import log_contains, real_pod

pytestmark = pytest.mark.e2e


def _status(pod: dict[str, Any]) -> dict[str, Any]:
    statuses: list[dict[str, Any]] = pod["status"].get("containerStatuses", [])
    return statuses[0] if statuses else {}


def _up(cluster: LocalCluster, namespace: str, pod: str) -> bool:
    return log_contains(cluster, namespace, pod, "up")


def test_pod_from_our_image_runs(
    cluster: LocalCluster, namespace: str, real_nodes: list[str]
) -> None:
    code = "import torch, elasticjob_agent; print('torch', torch.__version__)"
    cluster.apply(real_pod("image", code, node=real_nodes[0]), namespace)
    pod = cluster.wait_pod_phase(namespace, "image", "Succeeded", "Failed", timeout=120)
    assert pod["status"]["phase"] == "Succeeded", _status(pod)
    assert pod["spec"]["nodeName"] == real_nodes[0]
    assert "torch " in cluster.pod_logs(namespace, "image")


def test_restart_policies(cluster: LocalCluster, namespace: str, real_nodes: list[str]) -> None:
    # Fails on its first run only: the emptyDir outlives the container, not the pod.
    flaky = (
        "import os, sys\n"
        "if os.path.exists('/scratch/ran'): sys.exit(0)\n"
        "open('/scratch/ran', 'w').close(); sys.exit(3)\n"
    )
    cluster.apply(
        real_pod(
            "onfailure", flaky, restart_policy="OnFailure",
            extra_spec={"volumes": [{"name": "scratch", "emptyDir": {}}]},
            extra_container={"volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
        ),
        namespace,
    )  # fmt: skip
    cluster.apply(real_pod("never", "import sys; sys.exit(3)", restart_policy="Never"), namespace)
    cluster.apply(
        real_pod("always", "import time; time.sleep(3600)", restart_policy="Always", grace=1),
        namespace,
    )

    never = cluster.wait_pod_phase(namespace, "never", "Failed", timeout=120)
    terminated = _status(never)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    assert _status(never)["restartCount"] == 0

    onfailure = cluster.wait_pod_phase(namespace, "onfailure", "Succeeded", timeout=120)
    assert _status(onfailure)["restartCount"] == 1
    assert _status(onfailure)["state"]["terminated"]["exitCode"] == 0

    cluster.wait_pod_phase(namespace, "always", "Running", timeout=120)
    cluster.kill_container(namespace, "always", signal.SIGKILL)

    def restarted() -> dict[str, Any] | None:
        pod = cluster.pod(namespace, "always")
        status = _status(pod) if pod else {}
        return status if status.get("restartCount") == 1 and "running" in status["state"] else None

    status = cluster.wait_for("the Always container to run again", restarted, timeout=120)
    assert status["lastState"]["terminated"]["exitCode"] == 137


def test_container_over_its_memory_limit_is_oomkilled(
    cluster: LocalCluster, namespace: str, real_nodes: list[str]
) -> None:
    hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 2**20))\n"
    cluster.apply(
        real_pod("hog", hog, extra_container={"resources": {"limits": {"memory": "64Mi"}}}),
        namespace,
    )
    pod = cluster.wait_pod_phase(namespace, "hog", "Failed", timeout=120)
    terminated = _status(pod)["state"]["terminated"]
    assert terminated["reason"] == "OOMKilled"
    assert terminated["exitCode"] == 137


def test_graceful_deletion_honours_the_grace_period(
    cluster: LocalCluster, namespace: str, real_nodes: list[str], tmp_path: Path
) -> None:
    # "stubborn" ignores SIGTERM: only the kubelet's SIGKILL after the grace period ends it.
    # "polite" needs a second after SIGTERM to finish: it must be given that second.
    stubborn = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: print('TERM ignored', flush=True))\n"
        "print('up', flush=True)\n"
        "while True: time.sleep(1)\n"
    )
    polite = (
        "import signal, sys, time\n"
        "def term(*a):\n"
        "    out = open('/out/log', 'a'); out.write('TERM received\\n'); out.flush()\n"
        "    time.sleep(1); out.write('checkpoint written\\n'); out.close(); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, term)\n"
        "print('up', flush=True)\n"
        "while True: time.sleep(1)\n"
    )
    # The node's filesystem is this machine's: the test reads what the pod wrote after it is gone.
    out_dir = tmp_path / "polite"
    out_dir.mkdir()
    out_dir.chmod(0o777)  # the image's user is not root
    cluster.apply(real_pod("stubborn", stubborn, grace=4), namespace)
    cluster.apply(
        real_pod(
            "polite", polite, grace=30,
            extra_spec={"volumes": [{"name": "out", "hostPath": {"path": str(out_dir)}}]},
            extra_container={"volumeMounts": [{"name": "out", "mountPath": "/out"}]},
        ),
        namespace,
    )  # fmt: skip
    for name in ("stubborn", "polite"):
        cluster.wait_pod_phase(namespace, name, "Running", timeout=120)
        cluster.wait_for(f"{name} up", functools.partial(_up, cluster, namespace, name))
    cluster.kubectl("delete", "pod", "stubborn", "polite", "-n", namespace, "--wait=false")

    # SIGTERM came first, and the pod is still there (being deleted) after it.
    cluster.wait_for(
        "stubborn to get SIGTERM",
        lambda: log_contains(cluster, namespace, "stubborn", "TERM ignored"),
    )
    pod = cluster.pod(namespace, "stubborn")
    assert pod is not None and pod["metadata"].get("deletionTimestamp")
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 4
    cluster.wait_for("stubborn to be killed and removed",
                     lambda: cluster.pod(namespace, "stubborn") is None, timeout=90)  # fmt: skip

    cluster.wait_for("polite to be removed",
                     lambda: cluster.pod(namespace, "polite") is None, timeout=90)  # fmt: skip
    assert (out_dir / "log").read_text() == "TERM received\ncheckpoint written\n"


def test_privileged_pod_rejected_in_restricted_namespace(
    cluster: LocalCluster, namespace: str, real_nodes: list[str]
) -> None:
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    privileged = real_pod(
        "privileged", "print('hi')", extra_container={"securityContext": {"privileged": True}}
    )
    with pytest.raises(ClusterError, match="violates PodSecurity"):
        cluster.apply(privileged, namespace)
    assert cluster.pod(namespace, "privileged") is None

    # A pod that meets the profile is admitted and runs.
    compliant = real_pod(
        "compliant",
        "print('hi')",
        extra_spec={"securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                        "seccompProfile": {"type": "RuntimeDefault"}}},
        extra_container={"securityContext": {"allowPrivilegeEscalation": False,
                                             "capabilities": {"drop": ["ALL"]}}},
    )  # fmt: skip
    cluster.apply(compliant, namespace)
    pod = cluster.wait_pod_phase(namespace, "compliant", "Succeeded", "Failed", timeout=120)
    assert pod["status"]["phase"] == "Succeeded", _status(pod)
