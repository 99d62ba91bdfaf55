"""The pod network: one Linux bridge per cluster, one network namespace and veth pair per pod.

Layout of cluster slot ``k`` (0-54): bridge ``ejbr<k>`` with gateway ``10.<200+k>.0.1/16``; pod
``n`` gets namespace ``ej<k>-p<n>``, host-side veth ``ej<k>v<n>`` and address ``10.<200+k>.x.y``.
The API server listens on the gateway address, which pods reach through their default route.
Cutting a pod off sets its host-side veth down: the pod can reach nothing and nothing reaches it.
Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN); there is no loopback-only fallback.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .config import cache_dir

MAX_SLOTS = 55


class NetworkError(RuntimeError):
    """An ``ip`` command failed, or this machine cannot host the pod network."""


@dataclass(frozen=True)
class Subnet:
    """Names and addresses of the pod network of one cluster slot (pure)."""

    slot: int

    def __post_init__(self) -> None:
        if not 0 <= self.slot < MAX_SLOTS:
            raise ValueError(f"slot {self.slot}: must be in 0..{MAX_SLOTS - 1}")

    @property
    def bridge(self) -> str:
        return f"ejbr{self.slot}"

    @property
    def gateway(self) -> str:
        return f"10.{200 + self.slot}.0.1"

    @property
    def cidr(self) -> str:
        return f"10.{200 + self.slot}.0.0/16"

    @property
    def netns_prefix(self) -> str:
        return f"ej{self.slot}-p"

    def pod_ip(self, index: int) -> str:
        """Address of pod ``index`` (0-based); the gateway is ``.0.1``."""
        if not 0 <= index < 65000:
            raise ValueError(f"pod index {index} out of range")
        return str(ipaddress.IPv4Address(f"10.{200 + self.slot}.0.0") + index + 2)

    def pod_names(self, index: int) -> tuple[str, str, str]:
        """(netns, host veth, pod-side veth before it is renamed eth0) of pod ``index``."""
        return f"{self.netns_prefix}{index}", f"ej{self.slot}v{index}", f"ej{self.slot}c{index}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def run_ip(*args: str) -> str:
    """``ip <args>``; returns its output, raises :class:`NetworkError` on failure."""
    return _ip(*args).stdout


def acquire_slot(lock_dir: Path) -> tuple[Subnet, IO[str]]:
    """Lock the first free slot; the lock lasts as long as the returned file stays open."""
    if os.geteuid() != 0:
        raise NetworkError(
            "the local cluster needs root for network namespaces and veth pairs; run as root"
        )
    lock_dir.mkdir(parents=True, exist_ok=True)
    for slot in range(MAX_SLOTS):
        handle = (lock_dir / f"slot-{slot}.lock").open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return Subnet(slot), handle
    raise NetworkError(f"all {MAX_SLOTS} cluster slots are in use: stop some clusters first")


def created_mount_points_file() -> Path:
    """Where pods record the mount points they had to create on the host (all clusters)."""
    return cache_dir() / "cluster" / "created-mount-points"


def other_slots_in_use(own: int) -> bool:
    """Whether a cluster other than slot ``own`` runs on this machine now."""
    lock_dir = created_mount_points_file().parent / "slots"
    for slot in range(MAX_SLOTS):
        lock = lock_dir / f"slot-{slot}.lock"
        if slot == own or not lock.exists():
            continue
        with lock.open("a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
    return False


def remove_slot_leftovers(subnet: Subnet) -> None:
    """Delete the namespaces, veths and bridge a crashed earlier owner of this slot left."""
    for line in _ip("netns", "list").stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(subnet.netns_prefix):
            kill_netns_processes(name)
            _ip("netns", "delete", name, check=False)
    for line in _ip("-o", "link", "show").stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith(f"ej{subnet.slot}v") or name == subnet.bridge:
                _ip("link", "delete", name, check=False)


def kill_netns_processes(netns: str) -> None:
    """SIGKILL every process in ``netns`` (whatever its ancestry)."""
    for pid in _ip("netns", "pids", netns, check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def create_bridge(subnet: Subnet) -> None:
    """Create the bridge with the gateway address; pods' traffic is switched through it."""
    remove_slot_leftovers(subnet)
    _ip("link", "add", subnet.bridge, "type", "bridge")
    _ip("addr", "add", f"{subnet.gateway}/16", "dev", subnet.bridge)
    _ip("link", "set", subnet.bridge, "up")


def delete_bridge(subnet: Subnet) -> None:
    """Remove every namespace and link of this slot, then the bridge."""
    remove_slot_leftovers(subnet)


def create_pod_network(subnet: Subnet, index: int) -> tuple[str, str, str]:
    """Create pod ``index``'s namespace and veth pair; returns (netns, host veth, pod IP)."""
    netns, host_veth, peer = subnet.pod_names(index)
    ip = subnet.pod_ip(index)
    _ip("netns", "delete", netns, check=False)
    _ip("link", "delete", host_veth, check=False)
    _ip("netns", "add", netns)
    _ip("link", "add", host_veth, "type", "veth", "peer", "name", peer)
    _ip("link", "set", peer, "netns", netns)
    _ip("link", "set", host_veth, "master", subnet.bridge, "up")
    _ip("-n", netns, "link", "set", peer, "name", "eth0")
    _ip("-n", netns, "addr", "add", f"{ip}/16", "dev", "eth0")
    _ip("-n", netns, "link", "set", "eth0", "up")
    _ip("-n", netns, "link", "set", "lo", "up")
    _ip("-n", netns, "route", "add", "default", "via", subnet.gateway)
    return netns, host_veth, ip


def delete_pod_network(netns: str, host_veth: str) -> None:
    """Remove a pod's namespace (which destroys its veth pair) and its ``/etc/netns`` files."""
    kill_netns_processes(netns)
    _ip("netns", "delete", netns, check=False)
    _ip("link", "delete", host_veth, check=False)
    etc = Path("/etc/netns") / netns
    for child in etc.glob("*"):
        child.unlink(missing_ok=True)
    if etc.exists():
        etc.rmdir()


def set_link(host_veth: str, up: bool) -> None:
    """Connect (``up``) or cut off (not ``up``) the pod behind ``host_veth``."""
    _ip("link", "set", host_veth, "up" if up else "down")
