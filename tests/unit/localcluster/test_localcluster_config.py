"""Cluster configuration and pod-network naming (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from elasticjob_localcluster.config import ClusterConfig
from elasticjob_localcluster.kubeconfig import render_kubeconfig
from elasticjob_localcluster.network import MAX_SLOTS, Subnet


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "Bad Name"}, "cluster name"),
        ({"nodes": 0}, "nodes=0"),
        ({"gpus_per_node": -1}, "gpus_per_node"),
        ({"memory_per_node": "lots"}, "memory_per_node"),
        ({"cpu_per_node": "8 cores"}, "cpu_per_node"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClusterConfig(**kwargs)


def test_config_defaults() -> None:
    config = ClusterConfig()
    assert config.node_names() == ["node-1", "node-2", "node-3", "node-4"]
    assert (config.gpus_per_node, config.cpu_per_node, config.memory_per_node) == (4, "8", "32Gi")


def test_subnet_names_fit_linux_limits() -> None:
    subnet = Subnet(MAX_SLOTS - 1)
    netns, veth, peer = subnet.pod_names(64999)
    assert len(veth) <= 15 and len(peer) <= 15 and len(subnet.bridge) <= 15
    assert netns.startswith(subnet.netns_prefix)
    assert subnet.pod_ip(0) == f"10.{200 + MAX_SLOTS - 1}.0.2"
    assert subnet.pod_ip(254) == f"10.{200 + MAX_SLOTS - 1}.1.0"
    with pytest.raises(ValueError, match="slot"):
        Subnet(MAX_SLOTS)


def test_kubeconfig_is_valid_json_yaml() -> None:
    config = json.loads(render_kubeconfig("https://10.0.0.1:6443", b"PEM", "admin", "tok", "ctx"))
    assert config["current-context"] == "ctx"
    assert config["users"][0]["user"]["token"] == "tok"
    assert config["clusters"][0]["cluster"]["server"] == "https://10.0.0.1:6443"
