"""Volumes, environment, probes and init containers of emulated pods."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.testing import HTTP_SERVER, log_contains, python_pod

pytestmark = pytest.mark.e2e

REPORT = """
import json, os, socket
def read(path):
    with open(path) as f:
        return f.read()
os.makedirs('/scratch', exist_ok=True)
open('/scratch/x', 'w').write('scratch')
print(json.dumps({
    'env': {k: os.environ.get(k) for k in ('POD', 'NS', 'ROLE', 'FROM_CM', 'CM_color', 'GREETING')},
    'hostname': socket.gethostname(),
    'cwd': os.getcwd(),
    'config': read('/etc/app/color'),
    'shared': read('/shared/data.txt'),
    'init': read('/work-dir/init.txt'),
}))
"""


def test_volumes_env_and_init_containers(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    (tmp_path / "data.txt").write_text("from the host")
    cluster.kubectl("create", "configmap", "settings", "--from-literal=color=blue", "-n", namespace)
    pod = python_pod(
        "report",
        REPORT,
        labels={"role": "reporter"},
        extra_spec={
            "hostname": "custom-host",
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "work", "emptyDir": {}},
                {"name": "settings", "configMap": {"name": "settings"}},
                {"name": "shared", "hostPath": {"path": str(tmp_path)}},
            ],
            "initContainers": [
                {
                    "name": "prepare",
                    "image": "unused",
                    "command": ["sh", "-c", "echo prepared > /work-dir/init.txt"],
                    "volumeMounts": [{"name": "work", "mountPath": "/work-dir"}],
                }
            ],
        },
        extra_container={
            "workingDir": "/tmp",
            "env": [
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {
                    "name": "ROLE",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['role']"}},
                },
                {
                    "name": "FROM_CM",
                    "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "color"}},
                },
                {"name": "GREETING", "value": "hi $(POD)"},
            ],
            "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CM_"}],
            "volumeMounts": [
                {"name": "scratch", "mountPath": "/scratch"},
                {"name": "work", "mountPath": "/work-dir"},
                {"name": "settings", "mountPath": "/etc/app", "readOnly": True},
                {"name": "shared", "mountPath": "/shared"},
            ],
        },
    )
    cluster.apply(pod, namespace)
    status = cluster.wait_pod_phase(namespace, "report", "Succeeded", "Failed")["status"]
    assert status["phase"] == "Succeeded", cluster.pod_logs(namespace, "report")
    assert status["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    report: dict[str, Any] = json.loads(cluster.pod_logs(namespace, "report").splitlines()[-1])
    assert report["env"] == {
        "POD": "report",
        "NS": namespace,
        "ROLE": "reporter",
        "FROM_CM": "blue",
        "CM_color": "blue",
        "GREETING": "hi report",
    }
    assert report["hostname"] == "custom-host"
    assert report["cwd"] == "/tmp"
    assert report["config"] == "blue"
    assert report["shared"] == "from the host"
    assert report["init"] == "prepared\n"
    # The emptyDir was private to the pod: the host's /scratch (a bare mount point) stays empty.
    assert not Path("/scratch/x").exists()


def test_readiness_and_liveness_probes(cluster: LocalCluster, namespace: str) -> None:
    ready_file = "/tmp/elasticjob-probe-ready"
    probes = {
        "readinessProbe": {"exec": {"command": ["test", "-f", ready_file]}, "periodSeconds": 1},
        "livenessProbe": {
            "httpGet": {"path": "/", "port": 8080},
            "periodSeconds": 1,
            "failureThreshold": 2,
            "initialDelaySeconds": 3,
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    pod = python_pod(
        "probed",
        HTTP_SERVER,
        restart_policy="Always",
        extra_container=probes,
        extra_spec={"volumes": [{"name": "tmp", "emptyDir": {}}]},
    )
    cluster.apply(pod, namespace)
    cluster.wait_pod_phase(namespace, "probed", "Running")
    cluster.wait_for("server up", lambda: log_contains(cluster, namespace, "probed", "Serving"))

    def ready() -> bool:
        pod = cluster.pod(namespace, "probed") or {}
        statuses = pod.get("status", {}).get("containerStatuses") or [{}]
        return bool(statuses[0].get("ready"))

    assert not ready()
    cluster.exec_in_pod(namespace, "probed", ["touch", ready_file], check=True)
    cluster.wait_for("ready after the readiness file appears", ready, timeout=20)

    # Kill the HTTP server's listener by stopping the process: liveness fails, the container
    # is restarted (and the pod's /tmp, an emptyDir, keeps the readiness file).
    cluster.kill_container(namespace, "probed", 19)  # SIGSTOP: alive but unresponsive

    def restarted() -> bool:
        pod = cluster.pod(namespace, "probed") or {}
        statuses = pod.get("status", {}).get("containerStatuses") or [{}]
        return int(statuses[0].get("restartCount", 0)) >= 1

    cluster.wait_for("restart by the liveness probe", restarted, timeout=30)
    events = cluster.kubectl("get", "events", "-n", namespace).stdout
    assert "failed liveness probe" in events
