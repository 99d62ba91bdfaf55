"""A real local Kubernetes cluster: control plane built from source plus a node emulator.

``start_cluster(ClusterConfig(...))`` starts one in the background and returns a
:class:`LocalCluster` (the handle the end-to-end tests use); ``connect`` finds a running one;
``stop_cluster`` stops it. See docs/local-cluster.md.
"""

from .config import ClusterConfig
from .handle import ClusterError, LocalCluster, connect, start_cluster, stop_cluster
from .versions import K8S_VERSION

__all__ = [
    "K8S_VERSION",
    "ClusterConfig",
    "ClusterError",
    "LocalCluster",
    "connect",
    "start_cluster",
    "stop_cluster",
]
