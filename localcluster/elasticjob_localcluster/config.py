"""Where the local cluster finds its binaries and keeps its state, and how big it is."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .versions import K8S_VERSION, KUBE_ROUTER_VERSION

#: Real nodes per cluster: each costs about 150 MB and a copy of every image.
MAX_REAL_NODES = 8

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")
_QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$")


def repo_root() -> Path:
    """The repository this package lives in (``<repo>/localcluster/elasticjob_localcluster``)."""
    return Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """``$ELASTICJOB_CACHE`` (default ``~/.cache/elasticjob``): binaries and cluster state."""
    raw = os.environ.get("ELASTICJOB_CACHE")
    return Path(raw) if raw else Path.home() / ".cache" / "elasticjob"


def run_cached_build(tool: str, error: type[Exception]) -> None:
    """Run ``localcluster/<tool>/build.sh`` (a no-op when its cache is built); ``error`` with the
    end of its stderr when it fails."""
    script = repo_root() / "localcluster" / tool / "build.sh"
    done = subprocess.run([str(script)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise error(f"{script} failed:\n{done.stderr[-4000:]}")


def k8s_bin_dir() -> Path:
    """Directory holding kube-apiserver, kube-controller-manager and kube-scheduler."""
    version = os.environ.get("ELASTICJOB_K8S_VERSION", K8S_VERSION)
    return cache_dir() / "k8s" / version / "bin"


def network_policy_binary() -> Path:
    """The real nodes' NetworkPolicy enforcer: kube-router (its firewall only)."""
    version = os.environ.get("ELASTICJOB_KUBE_ROUTER_VERSION", KUBE_ROUTER_VERSION)
    return cache_dir() / "kube-router" / version / "bin" / "kube-router"


def tool_path(name: str) -> Path:
    """``kubectl`` or ``helm`` as ``localcluster/build.sh`` caches them."""
    return cache_dir() / "bin" / name


def venv_bin_dir() -> Path:
    """The repository's virtualenv ``bin``: first on every pod's PATH."""
    return repo_root() / ".venv" / "bin"


@dataclass(frozen=True)
class ClusterConfig:
    """The shape of one local cluster.

    ``name`` keys its state directory (``$ELASTICJOB_CACHE/cluster/<name>``) and must be unique
    among clusters running at the same time on this machine.
    """

    name: str = "dev"
    #: Number of virtual nodes the node emulator registers (``node-1`` ... ``node-N``).
    nodes: int = 4
    #: Number of real nodes (``real-1`` ... ``real-M``): kubelet, containerd and runc, CNI bridge,
    #: kube-proxy, the fake GPU device plugin; CoreDNS runs on them. 0: emulated nodes only.
    real_nodes: int = 0
    #: ``nvidia.com/gpu`` capacity of each node.
    gpus_per_node: int = 4
    #: CPU capacity of each node (a Kubernetes quantity).
    cpu_per_node: str = "8"
    #: Memory capacity of each node (a Kubernetes quantity).
    memory_per_node: str = "32Gi"
    #: Maximum pods per node.
    pods_per_node: int = 110
    #: Start Kueue (plain-pod integration) once the nodes are Ready (see ``kueue.py``).
    kueue: bool = False
    #: Enforce NetworkPolicies on the real nodes (kube-router's firewall on each). Virtual nodes
    #: never enforce them.
    network_policies: bool = True

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(
                f"cluster name {self.name!r}: use 1-31 lowercase letters, digits or '-'"
            )
        if not 0 <= self.nodes <= 64:
            raise ValueError(f"nodes={self.nodes}: choose between 0 and 64 virtual nodes")
        if not 0 <= self.real_nodes <= MAX_REAL_NODES:
            raise ValueError(
                f"real_nodes={self.real_nodes}: choose between 0 and {MAX_REAL_NODES} real nodes"
            )
        if self.nodes + self.real_nodes == 0:
            raise ValueError("nodes=0 and real_nodes=0: a cluster needs at least one node")
        if self.gpus_per_node < 0:
            raise ValueError(f"gpus_per_node={self.gpus_per_node}: must be >= 0")
        for field, value in (
            ("cpu_per_node", self.cpu_per_node),
            ("memory_per_node", self.memory_per_node),
        ):
            if not _QUANTITY_RE.match(value):
                raise ValueError(
                    f"{field}={value!r}: not a Kubernetes quantity such as '8' or '32Gi'"
                )
        if self.pods_per_node < 1:
            raise ValueError(f"pods_per_node={self.pods_per_node}: must be >= 1")

    @property
    def state_dir(self) -> Path:
        """Everything this cluster writes: PKI, kubeconfigs, logs, pod records."""
        return cache_dir() / "cluster" / self.name

    def node_names(self) -> list[str]:
        """Names of the virtual nodes, ``node-1`` ... ``node-N``."""
        return [f"node-{i}" for i in range(1, self.nodes + 1)]

    def real_node_names(self) -> list[str]:
        """Names of the real nodes, ``real-1`` ... ``real-M``."""
        return [f"real-{i}" for i in range(1, self.real_nodes + 1)]


INFO_FILE = "cluster.json"
"""In the state directory: what the cluster process tells its clients (``handle.py``)."""


def etcd_data_dir(config: ClusterConfig) -> Path:
    """etcd's data lives in memory (``/dev/shm``) when possible: fsync on a shared disk is slow."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else config.state_dir
    return base / f"elasticjob-{config.name}-etcd"
