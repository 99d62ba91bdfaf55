"""Networking on real nodes: cluster DNS (CoreDNS), ClusterIP Services through kube-proxy, pods
and nodes cut off."""

from __future__ import annotations

from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.testing import real_pod

pytestmark = pytest.mark.e2e

# Answers every connection with its pod name, then closes it.
NAME_SERVER = (
    "import socket, os\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('0.0.0.0', 8080)); s.listen(16)\n"
    "while True:\n"
    "    c, _ = s.accept(); c.sendall(os.environ['HOSTNAME'].encode()); c.close()\n"
)
ASK = (
    "import socket, sys\n"
    "c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)\n"
    "print(c.recv(100).decode())\n"
)


def _servers(cluster: LocalCluster, namespace: str, nodes: list[str]) -> list[str]:
    names = []
    for i, node in enumerate(nodes):
        name = f"server-{i}"
        cluster.apply(real_pod(name, NAME_SERVER, node=node, labels={"app": "names"}, grace=1),
                      namespace)  # fmt: skip
        names.append(name)
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "names"},
            "spec": {"selector": {"app": "names"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
        namespace,
    )
    for name in names:
        cluster.wait_pod_phase(namespace, name, "Running", timeout=120)
    return names


def _client(cluster: LocalCluster, namespace: str, node: str) -> None:
    cluster.apply(real_pod("client", "import time; time.sleep(3600)", node=node, grace=1),
                  namespace)  # fmt: skip
    cluster.wait_pod_phase(namespace, "client", "Running", timeout=120)


def _ask(cluster: LocalCluster, namespace: str, host: str, port: int) -> str:
    done = cluster.exec_in_pod(namespace, "client", ["python", "-c", ASK, host, str(port)])
    return done.stdout.strip() if done.returncode == 0 else f"failed: {done.stderr[-300:]}"


def test_service_names_resolve_through_cluster_dns(
    cluster: LocalCluster, namespace: str, real_nodes: list[str]
) -> None:
    _servers(cluster, namespace, real_nodes[:1])
    _client(cluster, namespace, real_nodes[1])
    cluster_ip = cluster.get_json("service", "names", "-n", namespace)["spec"]["clusterIP"]
    names = [
        "names",
        f"names.{namespace}",
        f"names.{namespace}.svc",
        f"names.{namespace}.svc.cluster.local",
        "kubernetes.default",
    ]
    code = "import socket, sys\nfor n in sys.argv[1:]: print(socket.gethostbyname(n))\n"
    done = cluster.exec_in_pod(namespace, "client", ["python", "-c", code, *names], check=True)
    api_ip = cluster.get_json("service", "kubernetes", "-n", "default")["spec"]["clusterIP"]
    assert done.stdout.split() == [cluster_ip] * 4 + [api_ip]
    # A name outside the cluster fails (there is no upstream resolver), and fails fast.
    missing = cluster.exec_in_pod(
        namespace, "client", ["python", "-c", code, "no-such-service"], timeout=30
    )
    assert missing.returncode != 0 and "gaierror" in missing.stderr


def test_cluster_ip_service_routes_to_its_pods(
    cluster: LocalCluster, namespace: str, real_nodes: list[str]
) -> None:
    servers = _servers(cluster, namespace, real_nodes)
    _client(cluster, namespace, real_nodes[0])
    cluster_ip = cluster.get_json("service", "names", "-n", namespace)["spec"]["clusterIP"]
    cluster.wait_for(
        "the Service's endpoints",
        lambda: (
            len(
                cluster.get_json("endpoints", "names", "-n", namespace)
                .get("subsets", [{}])[0]
                .get("addresses", [])
            )
            == len(servers)
        ),
    )
    seen: set[str] = set()

    def every_backend_answered() -> bool:
        seen.add(_ask(cluster, namespace, cluster_ip, 80))
        return seen >= set(servers)

    # kube-proxy picks a backend at random per connection: ask until both have answered.
    cluster.wait_for("answers from every backend through the ClusterIP", every_backend_answered,
                     timeout=120)  # fmt: skip
    assert seen == set(servers), seen
    # Pod to pod across nodes, without the Service.
    pod_ip = cluster.pod_ip(namespace, servers[1])
    assert _ask(cluster, namespace, pod_ip, 8080) == servers[1]


def test_cut_pod_and_cut_node(cluster: LocalCluster, namespace: str, real_nodes: list[str]) -> None:
    servers = _servers(cluster, namespace, real_nodes[1:2])
    _client(cluster, namespace, real_nodes[0])
    ip = cluster.pod_ip(namespace, servers[0])
    assert _ask(cluster, namespace, ip, 8080) == servers[0]

    cluster.cut_pod(namespace, servers[0])
    assert _ask(cluster, namespace, ip, 8080).startswith("failed")
    cluster.restore_pod(namespace, servers[0])
    cluster.wait_for("the pod to answer again",
                     lambda: _ask(cluster, namespace, ip, 8080) == servers[0])  # fmt: skip

    node = real_nodes[1]
    cluster.cut_node(node)
    try:
        assert _ask(cluster, namespace, ip, 8080).startswith("failed")

        def not_ready() -> bool:
            conditions: list[dict[str, Any]] = cluster.get_json("node", node)["status"][
                "conditions"
            ]
            return any(c["type"] == "Ready" and c["status"] == "Unknown" for c in conditions)

        # The node's kubelet cannot reach the API server either: the node goes silent.
        cluster.wait_for(f"{node} Ready=Unknown", not_ready, timeout=90)
    finally:
        cluster.restore_node(node)
    cluster.wait_for(
        "the pod to answer after the node's link is back",
        lambda: _ask(cluster, namespace, ip, 8080) == servers[0],
        timeout=90,
    )
