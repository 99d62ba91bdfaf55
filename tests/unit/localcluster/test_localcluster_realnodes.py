"""Real nodes: names and addresses, rendered configurations, the image index (pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from elasticjob_localcluster.config import ClusterConfig
from elasticjob_localcluster.network import Subnet
from elasticjob_localcluster.placement import REAL_NODE_LABEL
from elasticjob_localcluster.realnodes.images import (
    REQUIRED,
    ImageError,
    missing_required,
    parse_index,
    stamps_match,
)
from elasticjob_localcluster.realnodes.layout import CLUSTER_DNS_IP, NodeLayout, cluster_cidr
from elasticjob_localcluster.realnodes.render import (
    cni_conflist,
    containerd_config,
    coredns_manifests,
    kube_proxy_config,
    kubelet_config,
    network_policy_rbac,
)
from elasticjob_localcluster.versions import PAUSE_IMAGE

STATE = Path("/state")


def test_layout_names_and_addresses_per_slot_and_node() -> None:
    lay = NodeLayout(Subnet(3), 2, STATE)
    assert (lay.name, lay.netns, lay.host_veth) == ("real-2", "ej3-n2", "ej3n2")
    assert lay.node_ip == "10.203.255.12"  # on the bridge's 10.203.0.0/16
    assert (lay.pod_cidr, lay.pod_gateway) == ("10.103.2.0/24", "10.103.2.1")
    assert cluster_cidr(Subnet(3)) == "10.103.0.0/16"
    assert (lay.cgroup, lay.system_cgroup) == ("/ej3-nodes/real-2", "/ej3-nodes/real-2/system")
    assert lay.dir == STATE / "nodes" / "real-2"
    assert "/var/lib/kubelet/device-plugins" in lay.private_mounts


def test_layouts_of_one_slot_never_overlap() -> None:
    layouts = [NodeLayout(Subnet(0), i, STATE) for i in range(1, 9)]
    for attr in ("netns", "host_veth", "node_ip", "pod_cidr", "cgroup"):
        assert len({getattr(lay, attr) for lay in layouts}) == 8, attr


@pytest.mark.parametrize("index", [0, 9])
def test_layout_rejects_out_of_range_index(index: int) -> None:
    with pytest.raises(ValueError, match="real node index"):
        NodeLayout(Subnet(0), index, STATE)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"real_nodes": -1}, "real_nodes=-1"), ({"real_nodes": 9}, "real_nodes=9"),
     ({"nodes": 0, "real_nodes": 0}, "at least one node")],
)  # fmt: skip
def test_config_rejects_bad_real_node_counts(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClusterConfig(**kwargs)  # type: ignore[arg-type]


def test_config_real_nodes_only() -> None:
    config = ClusterConfig(nodes=0, real_nodes=2)
    assert config.node_names() == []
    assert config.real_node_names() == ["real-1", "real-2"]


def test_containerd_config_carries_the_fixes_this_machine_needs() -> None:
    text = containerd_config(
        root=Path("/r"), state=Path("/s"), socket=Path("/s.sock"),
        runc_root=Path("/runc"), cni_conf_dir=Path("/cni"),
    )  # fmt: skip
    for line in (
        'root = "/r"',
        "restrict_oom_score_adj = true",  # runc cannot lower oom_score_adj here
        "SystemdCgroup = false",
        'Root = "/runc"',
        "netns_mounts_under_state_dir = true",
        "enable_unprivileged_ports = true",
        f'sandbox_image = "{PAUSE_IMAGE}"',
        'conf_dir = "/cni"',
    ):
        assert line in text, line


def test_cni_routes_pods_without_masquerading() -> None:
    conf = json.loads(cni_conflist(NodeLayout(Subnet(1), 1, STATE)))
    bridge = conf["plugins"][0]
    assert bridge["ipMasq"] is False and bridge["hairpinMode"] is True
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.101.1.0/24", "gateway": "10.101.1.1"}]]


def test_kubelet_config() -> None:
    lay = NodeLayout(Subnet(0), 1, STATE)
    config = json.loads(
        kubelet_config(
            lay, ca_file=Path("/ca"), tls_cert=Path("/c"), tls_key=Path("/k"),
            pod_logs_dir=Path("/logs"), max_pods=110,
        )
    )  # fmt: skip
    assert config["cgroupRoot"] == "/ej0-nodes/real-1"
    assert config["protectKernelDefaults"] is True
    assert config["clusterDNS"] == [CLUSTER_DNS_IP]
    assert config["authentication"]["anonymous"] == {"enabled": False}
    # Real nodes are the ordinary nodes: only the virtual ones are tainted.
    assert "registerWithTaints" not in config


def test_kube_proxy_leaves_machine_wide_conntrack_alone() -> None:
    config = json.loads(
        kube_proxy_config(NodeLayout(Subnet(0), 1, STATE), Path("/kc"), "10.100.0.0/16")
    )
    assert config["mode"] == "iptables"
    assert config["conntrack"]["maxPerCore"] == 0
    assert config["clusterCIDR"] == "10.100.0.0/16"


def test_the_policy_enforcer_may_read_policies_pods_and_namespaces_and_nothing_more() -> None:
    role, binding = network_policy_rbac("elasticjob:kube-router")
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "elasticjob:kube-router"}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    granted = {
        (group, resource)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert {("networking.k8s.io", "networkpolicies"), ("", "pods"), ("", "namespaces")} <= granted
    assert {verb for rule in role["rules"] for verb in rule["verbs"]} == {"get", "list", "watch"}


def test_real_nodes_enforce_network_policies_unless_turned_off() -> None:
    assert ClusterConfig().network_policies
    assert not ClusterConfig(real_nodes=1, network_policies=False).network_policies


def test_coredns_runs_on_real_nodes_behind_kube_dns() -> None:
    manifests = {m["kind"]: m for m in coredns_manifests()}
    service = manifests["Service"]
    assert (service["metadata"]["name"], service["spec"]["clusterIP"]) == (
        "kube-dns",
        CLUSTER_DNS_IP,
    )
    pod = manifests["Deployment"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {REAL_NODE_LABEL: "true"}
    assert pod["containers"][0]["imagePullPolicy"] == "Never"


def test_coredns_runs_one_replica_per_node_so_a_lost_node_leaves_names_resolving() -> None:
    manifests = {m["kind"]: m for m in coredns_manifests(replicas=2)}
    spec = manifests["Deployment"]["spec"]
    assert spec["replicas"] == 2
    (term,) = spec["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]


def test_parse_index_and_required_images() -> None:
    text = json.dumps([{"ref": r, "archive": f"/a/{i}.tar", "id": f"sha256:{i}"}
                       for i, r in enumerate(REQUIRED)])  # fmt: skip
    entries = parse_index(text)
    assert [e.ref for e in entries] == list(REQUIRED)
    assert missing_required(entries) == []
    assert missing_required(entries[1:]) == [REQUIRED[0]]


@pytest.mark.parametrize(
    ("text", "message"),
    [("{", "not JSON"), ("{}", "JSON list"), ('[{"ref": "x", "archive": ""}]', "entry 0")],
)
def test_parse_index_names_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ImageError, match=message):
        parse_index(text)


def test_stamps_match(tmp_path: Path) -> None:
    entries = parse_index(json.dumps([{"ref": "a", "archive": "/a.tar", "id": "1"}]))
    assert not stamps_match(tmp_path, entries)
    (tmp_path / "imported.json").write_text(json.dumps({"a": "1"}))
    assert stamps_match(tmp_path, entries)
    (tmp_path / "imported.json").write_text(json.dumps({"a": "2"}))
    assert not stamps_match(tmp_path, entries)
