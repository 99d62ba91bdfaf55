"""The infrastructure images (pause, etcd, CoreDNS) in real containers, as a restricted pod runs
them: a non-root uid, read-only root, no capabilities beyond what each needs.
"""

from __future__ import annotations

import json
import secrets
import socket
import struct
from pathlib import Path

from elasticjob_localcluster.versions import ETCD_VERSION

from tests.support.images import REFS, Podman, wait_until

HARDENED = ("--read-only", "--read-only-tmpfs=false", "--cap-drop=ALL")


def test_pause_runs_as_65535_and_stops_on_sigterm(podman: Podman) -> None:
    podman.build("pause")
    name = podman.start(*HARDENED, "--network=none", image=REFS["pause"])
    assert podman.run("top", name, "huser", "hgroup").split()[2:4] == ["65535", "65535"]
    podman.run("stop", "--time", "30", name, timeout=60)
    state = podman.inspect(name)["State"]
    assert isinstance(state, dict)
    assert state["ExitCode"] == 0, state  # pause exits 0 on SIGTERM; 137 would be a SIGKILL


def test_etcd_serves_as_a_non_root_user_with_a_read_only_root(
    podman: Podman, tmp_path: Path
) -> None:
    podman.build("etcd")
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o777)
    name = podman.start(
        *HARDENED,
        "--network=none",
        "--user=65532:65532",
        f"--volume={data}:/var/lib/etcd-data",
        image=REFS["etcd"],
        # The operator's managed etcd pod calls it by name, so PATH must find it.
        command=["etcd", "--data-dir=/var/lib/etcd-data/default"],
    )

    def healthy() -> bool:
        probe = podman.run("exec", name, "etcdctl", "endpoint", "health", "-w", "json", check=False)
        return '"health":true' in probe.replace(" ", "")

    wait_until("etcd to report healthy", healthy, 60, lambda: podman.run("logs", name))
    podman.run("exec", name, "etcdctl", "put", "k", "v")
    got = json.loads(podman.run("exec", name, "etcdctl", "get", "k", "-w", "json"))
    assert got["count"] == 1
    version = podman.run("exec", name, "etcd", "--version")
    assert f"etcd Version: {ETCD_VERSION.removeprefix('v')}" in version, version


def _dns_query(server: str, port: int, qname: str) -> list[str]:
    """One A query over UDP; the answer's IPv4 addresses (a plain, minimal DNS client)."""
    ident = secrets.randbits(16)
    question = b"".join(bytes([len(p)]) + p.encode() for p in qname.split(".")) + b"\0"
    packet = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0) + question + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        sock.sendto(packet, (server, port))
        reply, _ = sock.recvfrom(4096)
    got_id, _flags, _qd, answers = struct.unpack(">HHHH", reply[:8])
    assert got_id == ident
    offset = 12 + len(question) + 4
    addresses = []
    for _ in range(answers):
        if reply[offset] & 0xC0 == 0xC0:  # a compressed name: 2 bytes
            offset += 2
        else:
            while reply[offset]:
                offset += reply[offset] + 1
            offset += 1
        rtype, _cls, _ttl, length = struct.unpack(">HHIH", reply[offset : offset + 10])
        offset += 10
        if rtype == 1:
            addresses.append(socket.inet_ntoa(reply[offset : offset + length]))
        offset += length
    return addresses


def test_coredns_binds_port_53_as_65532_with_only_net_bind_service(
    podman: Podman, tmp_path: Path
) -> None:
    podman.build("coredns")
    corefile = tmp_path / "Corefile"
    corefile.write_text(".:53 {\n    hosts {\n        10.1.2.3 probe.elasticjob.test\n    }\n}\n")
    corefile.chmod(0o644)
    # Port 53 inside the container's own network namespace, as in a pod; as the kubeadm
    # Deployment does: drop ALL, add NET_BIND_SERVICE, read-only root.
    name = podman.start(
        *HARDENED,
        "--cap-add=NET_BIND_SERVICE",
        "--security-opt=no-new-privileges",
        f"--volume={corefile}:/etc/coredns/Corefile:ro",
        image=REFS["coredns"],
        command=["-conf", "/etc/coredns/Corefile"],
    )
    address = podman.run(
        "inspect", name, "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
    ).strip()
    assert address, podman.run("inspect", name)
    answers: list[list[str]] = []

    def resolved() -> bool:
        try:
            answers.append(_dns_query(address, 53, "probe.elasticjob.test"))
        except OSError:
            state = podman.inspect(name)["State"]
            assert isinstance(state, dict) and state["Status"] == "running", podman.run(
                "logs", name, check=False
            )
            return False
        return True

    wait_until("CoreDNS to answer", resolved, 60, lambda: podman.run("logs", name))
    assert answers[-1] == ["10.1.2.3"]
    assert podman.run("top", name, "huser", "hgroup").split()[2:4] == ["65532", "65532"]
