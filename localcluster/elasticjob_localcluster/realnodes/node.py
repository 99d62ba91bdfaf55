"""One real node: containerd, kubelet, kube-proxy, the NetworkPolicy enforcer and the fake GPU
device plugin in a network namespace, a mount namespace and a cgroup of their own.

:meth:`RealNode.create` makes the node's network (namespace, veth on the cluster bridge, routes)
once; :meth:`RealNode.start` starts its processes (again after :meth:`RealNode.kill`, as a
rebooted machine would); :meth:`RealNode.teardown` removes everything. Needs root.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..config import k8s_bin_dir, network_policy_binary
from ..controlplane import SERVICE_CIDR, ControlPlane
from ..network import NetworkError, Subnet
from ..pki import NETWORK_POLICY_IDENTITY, issue_certificate
from ..placement import REAL_NODE_LABEL
from . import cgroups
from .layout import NodeLayout, cluster_cidr
from .render import (
    KUBELET_SYSCTLS,
    cni_conflist,
    containerd_config,
    kube_proxy_config,
    kubelet_config,
)

log = logging.getLogger(__name__)

DEVICE_PLUGIN = "elasticjob-fake-gpu-plugin"
ENFORCER = "kube-router"

# The parent-death signal (setpriv --pdeathsig) fires when the *thread* that forked the child
# ends, not the process: every long-lived node process is forked by this one thread, which
# lives as long as the cluster process.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="node-spawner")


def _popen(argv: list[str], log_file: Path) -> subprocess.Popen[bytes]:
    def spawn() -> subprocess.Popen[bytes]:
        with log_file.open("ab") as out:
            return subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    return _SPAWNER.submit(spawn).result()


class NodeError(RuntimeError):
    """A node's process did not start or did not become ready (its log is named)."""


def _run(argv: list[str], what: str, timeout: float = 60) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise NetworkError(f"{what}: {' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def _ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def host_mount_points(layout: NodeLayout) -> list[Path]:
    return [Path(p) for p in layout.private_mounts]


class RealNode:
    """A real node of one cluster (see :mod:`.layout` for its names and addresses)."""

    def __init__(
        self,
        layout: NodeLayout,
        cp: ControlPlane,
        *,
        gpus: int,
        max_pods: int,
        created_mount_points: Path,
        network_policies: bool = True,
    ) -> None:
        self.layout = layout
        self.cp = cp
        self.gpus = gpus
        self.max_pods = max_pods
        self.created_mount_points = created_mount_points
        self.network_policies = network_policies
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.holder: subprocess.Popen[bytes] | None = None
        self.lost = False
        self.cut = False
        self.containerd_root = layout.containerd_root

    @property
    def name(self) -> str:
        return self.layout.name

    # ------------------------------------------------------------------ network

    def create_network(self, peers: list[NodeLayout]) -> None:
        """The node's namespace with ``eth0`` on the cluster bridge, a default route to the
        API server's host, routes to the ``peers``' pod subnets via their addresses, and the
        host's route to this node's pod subnet."""
        lay, subnet = self.layout, self.layout.subnet
        _ip("netns", "delete", lay.netns, check=False)
        _ip("link", "delete", lay.host_veth, check=False)
        _ip("netns", "add", lay.netns)
        _ip("link", "add", lay.host_veth, "type", "veth", "peer", "name", lay.peer_veth)
        _ip("link", "set", lay.peer_veth, "netns", lay.netns)
        _ip("link", "set", lay.host_veth, "master", subnet.bridge, "up")
        _ip("-n", lay.netns, "link", "set", lay.peer_veth, "name", "eth0")
        _ip("-n", lay.netns, "addr", "add", f"{lay.node_ip}/16", "dev", "eth0")
        _ip("-n", lay.netns, "link", "set", "eth0", "up")
        _ip("-n", lay.netns, "link", "set", "lo", "up")
        _ip("-n", lay.netns, "route", "add", "default", "via", subnet.gateway)
        for peer in peers:
            if peer.index != lay.index:
                _ip("-n", lay.netns, "route", "replace", peer.pod_cidr, "via", peer.node_ip)
        _ip("route", "replace", lay.pod_cidr, "via", lay.node_ip, "dev", subnet.bridge)
        # Forwarding for the pods, and the bridge's frames through iptables so that kube-proxy's
        # Service NAT applies between pods of one node (both settings are per namespace).
        for key, value in (
            ("net.ipv4.ip_forward", "1"),
            ("net.bridge.bridge-nf-call-iptables", "1"),
        ):
            _run(
                ["nsenter", f"--net=/run/netns/{lay.netns}", "sysctl", "-qw", f"{key}={value}"],
                f"sysctl in {lay.netns}",
            )

    def set_link(self, up: bool) -> None:
        """Connect (``up``) or cut off the node: its veth on the cluster bridge."""
        _ip("link", "set", self.layout.host_veth, "up" if up else "down")
        self.cut = not up

    # ------------------------------------------------------------------ processes

    def _write_files(self) -> tuple[Path, Path]:
        lay = self.layout
        for path in (lay.dir, lay.logs, lay.cni_conf_dir, lay.kubelet_root, lay.pki,
                     *lay.private_mounts.values(), self.containerd_root):  # fmt: skip
            path.mkdir(parents=True, exist_ok=True)
        # Fresh runtime state, IP allocations and plugin sockets at every (re)start, as after a
        # reboot; the content store and snapshots in the containerd root are kept.
        shutil.rmtree(lay.containerd_state, ignore_errors=True)
        for mount in lay.private_mounts.values():
            for child in mount.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        # The kubelet's serving certificate, signed by this cluster's CA (new at every start).
        cert, key = issue_certificate(
            self.cp.pki, f"kubelet-{lay.name}", common_name=f"system:node:{lay.name}",
            organization="system:nodes", ip_sans=[lay.node_ip], dns_sans=[lay.name],
        )  # fmt: skip
        lay.containerd_config.write_text(
            containerd_config(
                root=self.containerd_root, state=lay.containerd_state,
                socket=lay.containerd_socket, runc_root=lay.dir / "runc",
                cni_conf_dir=lay.cni_conf_dir,
            )
        )  # fmt: skip
        (lay.cni_conf_dir / "10-elasticjob.conflist").write_text(cni_conflist(lay))
        lay.resolv_conf.write_text("# no upstream resolver on this machine\n")
        lay.kubelet_config.write_text(
            kubelet_config(
                lay, ca_file=self.cp.pki.ca_cert, tls_cert=cert, tls_key=key,
                pod_logs_dir=lay.private_mounts["/var/log/pods"],
                max_pods=self.max_pods,
            )
        )  # fmt: skip
        lay.kube_proxy_config.write_text(
            kube_proxy_config(lay, self.cp.kubeconfig("kube-proxy"), cluster_cidr(lay.subnet))
        )
        sysctl_dir = lay.dir / "sysctl"
        sysctl_dir.mkdir(exist_ok=True)
        for name, value in KUBELET_SYSCTLS.items():
            (sysctl_dir / name.replace("/", ".")).write_text(value + "\n")
        return cert, key

    def _enforcer_argv(self) -> list[str]:
        """kube-router with its firewall alone (the NetworkPolicy controller: iptables and
        ipset), as its ``kube-router-firewall`` DaemonSet runs it, in the node's namespace."""
        return [
            str(network_policy_binary()), "--run-firewall=true", "--run-router=false",
            "--run-service-proxy=false", "--run-loadbalancer=false", "--enable-cni=false",
            f"--kubeconfig={self.cp.kubeconfig(NETWORK_POLICY_IDENTITY)}",
            f"--hostname-override={self.layout.name}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--health-port=0", "--metrics-port=0", "--v=1",
        ]  # fmt: skip

    def _mount_script(self) -> str:
        lay = self.layout
        lines = ["set -e"]
        for target, source in lay.private_mounts.items():
            lines.append(f"mount --bind '{source}' '{target}'")
        for name in KUBELET_SYSCTLS:
            source = lay.dir / "sysctl" / name.replace("/", ".")
            lines.append(f"mount --bind '{source}' '/proc/sys/{name}'")
        lines.append(f"echo ready > '{lay.dir / 'mntns.ready'}'")
        lines.append("exec sleep infinity")
        return "\n".join(lines)

    def _record_mount_points(self) -> None:
        created: list[Path] = []
        for target in host_mount_points(self.layout):
            # Top down, one directory at a time: the nodes boot in parallel threads and may make
            # the same one; each records only what it made (removed when the last cluster stops).
            for path in [*reversed(target.parents), target]:
                try:
                    path.mkdir()
                except FileExistsError:
                    continue
                created.append(path)
        if created:
            with self.created_mount_points.open("a") as record:
                record.write("".join(f"{path}\n" for path in created))

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Start ``argv`` in the node's namespaces and ``system`` cgroup; it dies with us."""
        if self.holder is None:
            raise NodeError(f"{self.name}: mount namespace not set up")
        prefix = [
            "nsenter", f"--mount=/proc/{self.holder.pid}/ns/mnt",
            f"--net=/run/netns/{self.layout.netns}", "--",
            *cgroups.enter_command(self.layout.system_cgroup),
            "setpriv", "--pdeathsig", "KILL", "--",
        ]  # fmt: skip
        proc = _popen([*prefix, *argv], self.layout.logs / f"{name}.log")
        self.processes[name] = proc
        return proc

    def check_alive(self) -> None:
        """Raise if one of the node's processes exited (unless the node was lost on purpose)."""
        if self.lost:
            return
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                log_file = self.layout.logs / f"{name}.log"
                tail = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
                raise NodeError(
                    f"{self.name}: {name} exited with {proc.returncode}; log {log_file}:\n{tail}"
                )

    def _wait(self, what: str, ready: object, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            if self.holder is not None and self.holder.poll() is not None:
                raise NodeError(f"{self.name}: mount namespace holder exited")
            if callable(ready) and ready():
                return
            if time.monotonic() > deadline:
                raise NodeError(f"{self.name}: {what} not ready after {timeout:.0f} s")
            time.sleep(0.2)

    def _ctr_ok(self) -> bool:
        done = subprocess.run(
            ["ctr", "--address", str(self.layout.containerd_socket), "version"],
            capture_output=True, timeout=10, check=False,
        )  # fmt: skip
        return done.returncode == 0

    def _start_containerd(self) -> None:
        self.layout.containerd_socket.unlink(missing_ok=True)
        self._spawn("containerd", ["containerd", "--config", str(self.layout.containerd_config)])
        self._wait("containerd", self._ctr_ok, 60)

    def start(self) -> None:
        """Start the node's processes (its containerd root holds the images); returns once the
        kubelet runs. After :meth:`kill` this is the node booting again: its containers are
        gone, its images and the kubelet's pods are not."""
        self.boot()
        self.start_kubelet()
        self.start_enforcer()

    def boot(self) -> None:
        """Mount namespace, cgroups and containerd."""
        lay = self.layout
        self.lost = False
        self.processes = {}
        self._write_files()
        cgroups.create(lay.system_cgroup)
        self._record_mount_points()
        ready_file = lay.dir / "mntns.ready"
        ready_file.unlink(missing_ok=True)
        self.holder = _popen(
            [*cgroups.enter_command(lay.system_cgroup), "setpriv", "--pdeathsig", "KILL",
             "--", "unshare", "--mount", "--propagation", "private", "--",
             "sh", "-c", self._mount_script()],
            lay.logs / "mntns.log",
        )  # fmt: skip
        self._wait("mount namespace", ready_file.exists, 30)
        self._start_containerd()

    def start_enforcer(self) -> None:
        """The NetworkPolicy enforcer, unless turned off. Only once the node is registered:
        kube-router exits when it cannot find its Node."""
        if self.network_policies:
            self._spawn(ENFORCER, self._enforcer_argv())

    def start_kubelet(self) -> None:
        """The kubelet, kube-proxy and the device plugin (containerd runs)."""
        lay = self.layout
        bins = k8s_bin_dir()
        self._spawn("kubelet", [
            str(bins / "kubelet"),
            f"--config={lay.kubelet_config}",
            f"--kubeconfig={self.cp.kubeconfig(f'node-{lay.name}')}",
            f"--hostname-override={lay.name}",
            f"--node-ip={lay.node_ip}",
            f"--root-dir={lay.kubelet_root}",
            f"--cert-dir={lay.pki}",
            f"--node-labels={REAL_NODE_LABEL}=true",
            "--v=1",
        ])  # fmt: skip
        self._spawn(
            "kube-proxy", [str(bins / "kube-proxy"), f"--config={lay.kube_proxy_config}", "--v=1"]
        )
        if self.gpus:
            self._spawn(DEVICE_PLUGIN, [
                str(bins / DEVICE_PLUGIN), "-count", str(self.gpus),
                "-id-prefix", f"GPU-{lay.name}-",
            ])  # fmt: skip

    def kill(self) -> None:
        """Every process of the node dies at once (SIGKILL, frozen first): a lost machine."""
        self.lost = True
        cgroups.kill_all(self.layout.cgroup)
        for proc in [*self.processes.values(), *([self.holder] if self.holder else [])]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self.holder = None

    def stop(self) -> None:
        """Stop the node for good: kill its processes, remove its cgroups, namespace and veth."""
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(cgroups.CgroupError):
            self.kill()
        teardown(self.layout)


def teardown(layout: NodeLayout) -> None:
    """Remove what a node left (processes, cgroups, namespace, veth); safe to repeat."""
    with contextlib.suppress(cgroups.CgroupError):
        cgroups.remove(layout.cgroup)
    _ip("netns", "delete", layout.netns, check=False)
    _ip("link", "delete", layout.host_veth, check=False)


def remove_leftovers(subnet: Subnet) -> None:
    """Remove every real node of slot ``subnet`` (processes, cgroups, namespaces, veths), e.g.
    what a crashed cluster left behind; safe to repeat."""
    parent = f"/ej{subnet.slot}-nodes"
    try:
        cgroups.remove(parent)
    except cgroups.CgroupError as err:
        log.warning("%s", err)
    for line in _ip("netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(f"ej{subnet.slot}-n"):
            _ip("netns", "delete", name, check=False)
    for line in _ip("-o", "link", "show").splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith(f"ej{subnet.slot}n"):
                _ip("link", "delete", name, check=False)
