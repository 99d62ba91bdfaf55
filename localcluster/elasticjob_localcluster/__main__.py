"""``python -m elasticjob_localcluster up|down|status|logs|serve``."""

from __future__ import annotations

import argparse
import logging
import sys

from .config import ClusterConfig, tool_path
from .daemon import serve
from .handle import ClusterError, connect, start_cluster, stop_cluster


def _config(args: argparse.Namespace) -> ClusterConfig:
    return ClusterConfig(
        name=args.name,
        nodes=args.nodes,
        real_nodes=args.real_nodes,
        gpus_per_node=args.gpus_per_node,
        cpu_per_node=args.cpu_per_node,
        memory_per_node=args.memory_per_node,
        kueue=args.kueue,
        network_policies=not args.no_network_policies,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m elasticjob_localcluster")
    parser.add_argument("command", choices=["up", "down", "status", "logs", "serve"])
    parser.add_argument("rest", nargs="*", help="logs: NAMESPACE POD [CONTAINER]")
    parser.add_argument("--name", default="dev", help="cluster name (default: dev)")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument(
        "--real-nodes", type=int, default=0, help="real nodes (kubelet, containerd) besides --nodes"
    )
    parser.add_argument("--gpus-per-node", type=int, default=4)
    parser.add_argument("--cpu-per-node", default="8")
    parser.add_argument("--memory-per-node", default="32Gi")
    parser.add_argument("--kueue", action="store_true", help="also start Kueue (plain pods)")
    parser.add_argument(
        "--no-network-policies",
        action="store_true",
        help="real nodes without the NetworkPolicy enforcer (kube-router's firewall)",
    )
    parser.add_argument("--owner-pid", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument(
        "--previous", action="store_true", help="logs: the run before the last restart"
    )
    args = parser.parse_args(argv)
    try:
        config = _config(args)
    except ValueError as err:
        parser.error(str(err))
    if args.command == "serve":
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s"
        )
        return serve(config, owner_pid=args.owner_pid)
    try:
        if args.command == "up":
            cluster = connect(config) or start_cluster(config)
            info = cluster.info
            print(
                f"cluster {config.name!r} is up: Kubernetes {info['version']}, "
                f"{len(info['nodes'])} nodes x {info['gpus_per_node']} nvidia.com/gpu"
                f" ({len(info.get('real_nodes', {}))} real)\n"
                f"  control plane started in {info['control_plane_seconds']} s, "
                + (
                    f"real nodes in {info['real_nodes_seconds']} s, "
                    f"CoreDNS in {info['dns_seconds']} s, "
                    if info.get("real_nodes")
                    else ""
                )
                + f"ready in {info['start_seconds']} s\n\n"
                f"  export KUBECONFIG={cluster.kubeconfig}\n"
                f"  export PATH={tool_path('kubectl').parent}:$PATH   # kubectl and helm\n"
                "  kubectl get nodes\n"
                f"  python -m elasticjob_localcluster logs NAMESPACE POD   # or kubectl logs\n\n"
                "stop it with `make cluster-down"
                + ("" if config.name == "dev" else f" CLUSTER={config.name}")
                + "`"
            )
            return 0
        if args.command == "down":
            stopped = stop_cluster(config)
            print(
                f"cluster {config.name!r} "
                + ("stopped" if stopped else "was not running; cleaned up")
            )
            return 0
        cluster_or_none = connect(config)
        if cluster_or_none is None:
            print(f"cluster {config.name!r} is not running (start it with `make cluster-up`)")
            return 1
        if args.command == "status":
            print(cluster_or_none.kubectl("get", "nodes,pods", "-A", "-o", "wide").stdout)
            return 0
        if len(args.rest) not in (2, 3):
            parser.error("logs needs NAMESPACE POD [CONTAINER]")
        container = args.rest[2] if len(args.rest) == 3 else None
        sys.stdout.write(
            cluster_or_none.pod_logs(args.rest[0], args.rest[1], container, args.previous)
        )
        return 0
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
