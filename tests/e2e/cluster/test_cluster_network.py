"""Pod addresses, Service names inside pods, and cutting pods off the network."""

from __future__ import annotations

from functools import partial

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.testing import (
    HTTP_SERVER,
    fetch_code,
    log_contains,
    python_pod,
    service,
)

pytestmark = pytest.mark.e2e

SLEEP = "import time; print('up', flush=True); time.sleep(3600)"


def _reaches(cluster: LocalCluster, namespace: str, pod: str, url: str) -> bool:
    return cluster.exec_in_pod(namespace, pod, fetch_code(url), timeout=30).returncode == 0


def test_pods_reach_each_other_by_service_name_until_cut(
    cluster: LocalCluster, namespace: str
) -> None:
    readiness = {"readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}}
    cluster.apply(
        python_pod("server", HTTP_SERVER, labels={"app": "server"}, extra_container=readiness),
        namespace,
    )
    cluster.apply(service("server", {"app": "server"}, 8080), namespace)
    cluster.apply(python_pod("client", SLEEP), namespace)
    cluster.kubectl(
        "wait",
        "--for=condition=Ready",
        "pod/server",
        "pod/client",
        "-n",
        namespace,
        "--timeout=60s",
    )
    cluster.wait_for("client up", lambda: log_contains(cluster, namespace, "client", "up"))
    server_ip = cluster.pod_ip(namespace, "server")
    assert server_ip != cluster.pod_ip(namespace, "client")
    for name in (
        "server",
        f"server.{namespace}",
        f"server.{namespace}.svc",
        f"server.{namespace}.svc.cluster.local",
    ):
        url = f"http://{name}:8080/"
        cluster.wait_for(f"{name} resolves", partial(_reaches, cluster, namespace, "client", url))
    show = "import socket; print(socket.gethostbyname('server'), socket.gethostname())"
    resolved = cluster.exec_in_pod(namespace, "client", ["python", "-c", show], check=True)
    assert resolved.stdout.split() == [server_ip, "client"]

    cluster.cut_pod(namespace, "client")
    assert not _reaches(cluster, namespace, "client", "http://server:8080/")
    cluster.restore_pod(namespace, "client")
    cluster.wait_for(
        "client reconnected", lambda: _reaches(cluster, namespace, "client", "http://server:8080/")
    )

    cluster.cut_pod(namespace, "server")
    assert not _reaches(cluster, namespace, "client", f"http://{server_ip}:8080/")
    cluster.restore_pod(namespace, "server")
    cluster.wait_for(
        "server reconnected", lambda: _reaches(cluster, namespace, "client", "http://server:8080/")
    )

    cluster.cut_all_pods()
    assert not _reaches(cluster, namespace, "client", "http://server:8080/")
    cluster.restore_all_pods()
    cluster.wait_for(
        "all reconnected", lambda: _reaches(cluster, namespace, "client", "http://server:8080/")
    )


def test_headless_service_gives_each_pod_a_name(cluster: LocalCluster, namespace: str) -> None:
    cluster.apply(service("workers", {"job": "train"}, 8080, headless=True), namespace)
    for name in ("worker-0", "worker-1"):
        spec = {"hostname": name, "subdomain": "workers"}
        cluster.apply(
            python_pod(name, HTTP_SERVER, labels={"job": "train"}, extra_spec=spec), namespace
        )
    cluster.kubectl(
        "wait",
        "--for=condition=Ready",
        "pod/worker-0",
        "pod/worker-1",
        "-n",
        namespace,
        "--timeout=60s",
    )
    fqdn = f"worker-1.workers.{namespace}.svc"
    cluster.wait_for(
        f"{fqdn} reachable",
        lambda: _reaches(cluster, namespace, "worker-0", f"http://{fqdn}:8080/"),
    )
    own = cluster.exec_in_pod(
        namespace,
        "worker-0",
        ["python", "-c", "import socket; print(socket.getfqdn())"],
        check=True,
    )
    assert own.stdout.strip() == f"worker-0.workers.{namespace}.svc.cluster.local"
