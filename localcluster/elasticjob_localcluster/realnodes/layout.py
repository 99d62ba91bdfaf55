"""Names, addresses and paths of the real nodes of one cluster slot (pure).

Slot ``k`` (see :mod:`..network`) gives real node ``i`` (1-based, ``real-<i>``):

- network namespace ``ej<k>-n<i>``, host-side veth ``ej<k>n<i>`` on the cluster bridge and the
  node address ``10.<200+k>.255.<10+i>`` (on the bridge's /16, next to the API server on
  ``10.<200+k>.0.1``);
- pod subnet ``10.<100+k>.<i>.0/24`` (the slot's cluster CIDR is ``10.<100+k>.0.0/16``);
  other nodes reach it through a route via the node address;
- cgroup ``/ej<k>-nodes/real-<i>`` in every hierarchy: ``system`` holds the node's daemons
  (containerd, shims, kubelet, kube-proxy, device plugin), the kubelet's ``cgroupRoot`` is the
  node cgroup itself, so every process of the node lives below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import MAX_REAL_NODES
from ..network import Subnet

#: The cluster DNS Service's address (kube-dns in kube-system), inside the Service CIDR.
CLUSTER_DNS_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"


def real_node_name(index: int) -> str:
    """``real-<index>`` (1-based), as :meth:`ClusterConfig.real_node_names` names them."""
    return f"real-{index}"


def cluster_cidr(subnet: Subnet) -> str:
    """All pod subnets of the slot's real nodes."""
    return f"10.{100 + subnet.slot}.0.0/16"


@dataclass(frozen=True)
class NodeLayout:
    """Everything that names one real node; ``state_dir`` is the cluster's state directory."""

    subnet: Subnet
    index: int
    cluster_state_dir: Path

    def __post_init__(self) -> None:
        if not 1 <= self.index <= MAX_REAL_NODES:
            raise ValueError(f"real node index {self.index}: must be in 1..{MAX_REAL_NODES}")

    @property
    def name(self) -> str:
        return real_node_name(self.index)

    # ------------------------------------------------------------------ network

    @property
    def netns(self) -> str:
        return f"ej{self.subnet.slot}-n{self.index}"

    @property
    def host_veth(self) -> str:
        return f"ej{self.subnet.slot}n{self.index}"

    @property
    def peer_veth(self) -> str:
        """The node-side veth before it moves into the namespace and becomes ``eth0``."""
        return f"ej{self.subnet.slot}m{self.index}"

    @property
    def node_ip(self) -> str:
        return f"10.{200 + self.subnet.slot}.255.{10 + self.index}"

    @property
    def pod_cidr(self) -> str:
        return f"10.{100 + self.subnet.slot}.{self.index}.0/24"

    @property
    def pod_gateway(self) -> str:
        """The CNI bridge's address inside the node: the pods' default gateway."""
        return f"10.{100 + self.subnet.slot}.{self.index}.1"

    # ------------------------------------------------------------------ cgroups

    @property
    def cgroup_parent(self) -> str:
        """The slot's cgroup (all real nodes of the cluster), absolute in each hierarchy."""
        return f"/ej{self.subnet.slot}-nodes"

    @property
    def cgroup(self) -> str:
        """The node's cgroup: the kubelet's ``cgroupRoot``."""
        return f"{self.cgroup_parent}/{self.name}"

    @property
    def system_cgroup(self) -> str:
        """Where the node's daemons run (the shims inherit it from containerd)."""
        return f"{self.cgroup}/system"

    # ------------------------------------------------------------------ files

    @property
    def dir(self) -> Path:
        return self.cluster_state_dir / "nodes" / self.name

    @property
    def containerd_root(self) -> Path:
        """Content store, snapshots and metadata: a hard-linked clone of the image store made
        at cluster start (see :mod:`.images`), kept while the cluster runs."""
        return self.dir / "containerd"

    @property
    def containerd_state(self) -> Path:
        """Runtime state (sockets, tasks, pod netns mounts): fresh at every start."""
        return self.dir / "containerd-state"

    @property
    def containerd_socket(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.dir / "containerd.toml"

    @property
    def cni_conf_dir(self) -> Path:
        return self.dir / "cni" / "net.d"

    @property
    def kubelet_root(self) -> Path:
        return self.dir / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.dir / "kubelet.yaml"

    @property
    def kube_proxy_config(self) -> Path:
        return self.dir / "kube-proxy.yaml"

    @property
    def resolv_conf(self) -> Path:
        """The node's resolv.conf (what ``dnsPolicy: Default`` pods get): no upstream here."""
        return self.dir / "resolv.conf"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def pki(self) -> Path:
        return self.dir / "pki"

    @property
    def private_mounts(self) -> dict[str, Path]:
        """Host paths some components use whatever their flags say, each bound to a directory
        of this node inside the node's own mount namespace (two nodes share one host)."""
        return {
            "/var/lib/kubelet/device-plugins": self.dir / "device-plugins",
            "/var/log/containers": self.dir / "var-log-containers",
            "/var/log/pods": self.dir / "var-log-pods",
            "/var/lib/cni": self.dir / "var-lib-cni",
        }
