"""All real nodes of one cluster, and the cluster DNS that runs on them (blocking I/O; the
cluster process calls it from a worker thread)."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..config import ClusterConfig, tool_path
from ..controlplane import ControlPlane
from ..network import Subnet, created_mount_points_file
from ..pki import NETWORK_POLICY_USER
from .images import ImageEntry, prepare_store, read_index, remove_root
from .layout import NodeLayout
from .node import NodeError, RealNode, remove_leftovers, teardown
from .render import coredns_manifests, network_policy_rbac

log = logging.getLogger(__name__)

#: How long a start waits for the image index to list the pause and CoreDNS images.
IMAGE_INDEX_WAIT_S = 30.0
#: Container waiting reasons that no amount of waiting cures.
FATAL_WAITING = {"ErrImageNeverPull", "CreateContainerConfigError", "InvalidImageName"}


class Fleet:
    """The real nodes of a cluster; :meth:`start`, then :meth:`stop` (always)."""

    def __init__(self, config: ClusterConfig, cp: ControlPlane, subnet: Subnet) -> None:
        self.config = config
        self.cp = cp
        self.subnet = subnet
        self.layouts = [
            NodeLayout(subnet, i, config.state_dir) for i in range(1, config.real_nodes + 1)
        ]
        self.nodes = {
            lay.name: RealNode(
                lay,
                cp,
                gpus=config.gpus_per_node,
                max_pods=config.pods_per_node,
                created_mount_points=created_mount_points_file(),
                network_policies=config.network_policies,
            )
            for lay in self.layouts
        }
        self.images: list[ImageEntry] = []
        self.timings: dict[str, float] = {}

    def kubectl(self, *args: str, input: str | None = None) -> str:
        done = subprocess.run(
            [str(tool_path("kubectl")), f"--kubeconfig={self.cp.kubeconfig('admin')}", *args],
            capture_output=True, text=True, input=input, timeout=120, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise NodeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def start(self) -> None:
        """Networks, then every node's processes (in parallel), image imports included."""
        began = time.monotonic()
        remove_leftovers(self.subnet)
        self.images = read_index(wait_s=IMAGE_INDEX_WAIT_S)
        nodes = list(self.nodes.values())
        for node in nodes:
            node.create_network(self.layouts)
        imported = time.monotonic()
        prepare_store(self.images, [node.containerd_root for node in nodes])
        self.timings["image_import_seconds"] = round(time.monotonic() - imported, 1)
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            for future in [pool.submit(n.boot) for n in nodes]:
                future.result()
        if self.config.network_policies:
            rbac = network_policy_rbac(NETWORK_POLICY_USER)
            self.kubectl("apply", "-f", "-", input="\n".join(json.dumps(m) for m in rbac))
        for node in nodes:
            node.start_kubelet()
        if self.config.network_policies:
            self.wait_registered()
            for node in nodes:
                node.start_enforcer()
        self.timings["real_nodes_seconds"] = round(time.monotonic() - began, 1)

    def wait_registered(self, timeout: float = 120) -> None:
        """Until every real node's kubelet has registered its Node."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            listed: Any = json.loads(self.kubectl("get", "nodes", "-o", "json"))
            have = {n["metadata"]["name"] for n in listed.get("items", [])}
            missing = sorted(set(self.nodes) - have)
            if not missing:
                return
            if time.monotonic() > deadline:
                raise NodeError(f"real nodes {missing} not registered after {timeout:.0f} s")
            time.sleep(0.3)

    def deploy_dns(self, timeout: float = 180) -> None:
        """Apply CoreDNS and wait until its pod is Ready behind the kube-dns Service."""
        began = time.monotonic()
        text = "\n".join(json.dumps(m) for m in coredns_manifests(min(2, len(self.nodes))))
        self.kubectl("apply", "-f", "-", input=text)
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            pods: Any = json.loads(
                self.kubectl(
                    "get", "pods", "-n", "kube-system", "-l", "k8s-app=kube-dns", "-o", "json"
                )
            )
            ready = [
                p for p in pods.get("items", [])
                if any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in p.get("status", {}).get("conditions", []))
            ]  # fmt: skip
            if ready:
                break
            stuck = [
                w["reason"] + ": " + w.get("message", "")
                for p in pods.get("items", [])
                for c in p.get("status", {}).get("containerStatuses", [])
                for w in [c.get("state", {}).get("waiting", {})]
                if w.get("reason") in FATAL_WAITING
            ]
            if stuck:
                raise NodeError(f"CoreDNS cannot start: {'; '.join(stuck)}")
            if time.monotonic() > deadline:
                raise NodeError(
                    f"CoreDNS not Ready after {timeout:.0f} s: "
                    + json.dumps([p.get("status", {}) for p in pods.get("items", [])])[:3000]
                )
            time.sleep(0.5)
        self.timings["dns_seconds"] = round(time.monotonic() - began, 1)

    def check_alive(self) -> None:
        for node in self.nodes.values():
            node.check_alive()

    def node(self, name: str) -> RealNode:
        try:
            return self.nodes[name]
        except KeyError:
            raise NodeError(f"no real node {name!r} (real nodes: {sorted(self.nodes)})") from None

    def pods_on(self, name: str) -> list[str]:
        pods: Any = json.loads(
            self.kubectl(
                "get", "pods", "-A", "--field-selector", f"spec.nodeName={name}", "-o", "json"
            )
        )
        return [
            f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods.get("items", [])
        ]

    def lose(self, name: str) -> list[str]:
        """Kill every process of the node at once; returns the pods bound to it."""
        node = self.node(name)
        node.kill()
        return self.pods_on(name)

    def cut(self, name: str) -> None:
        """Take the node's link down: it reaches nothing and nothing reaches it."""
        self.node(name).set_link(up=False)

    def restore(self, name: str) -> None:
        """Undo :meth:`lose` (the node boots again) and :meth:`cut` (its link goes up)."""
        node = self.node(name)
        if node.cut:
            node.set_link(up=True)
        if node.lost:
            node.start()

    def node_info(self) -> dict[str, Any]:
        """What the test handle needs to act on nodes and pods without asking this process."""
        return {
            n.name: {
                "netns": n.layout.netns,
                "host_veth": n.layout.host_veth,
                "node_ip": n.layout.node_ip,
                "pod_cidr": n.layout.pod_cidr,
                "containerd_socket": str(n.layout.containerd_socket),
                "logs": str(n.layout.logs),
            }
            for n in self.nodes.values()
        }

    def stop(self) -> None:
        for node in self.nodes.values():
            try:
                node.stop()
            except Exception as err:  # keep tearing the others down
                log.warning("stopping %s: %s", node.name, err)
        for lay in self.layouts:
            teardown(lay)
            remove_root(lay.containerd_root)
        remove_leftovers(self.subnet)
