"""etcd, kube-apiserver, kube-controller-manager and kube-scheduler as local processes."""

from __future__ import annotations

import json
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from elasticjob_agent.ports import free_port

from .config import k8s_bin_dir
from .kubeconfig import render_kubeconfig
from .pki import Pki, issue_certificate, make_pki, node_identities
from .versions import K8S_VERSION

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_ISSUER = "https://kubernetes.default.svc.cluster.local"


class ControlPlaneError(RuntimeError):
    """A component is missing, did not start, or did not become ready."""


@dataclass
class ControlPlane:
    """The running control plane of one cluster, as :func:`start_control_plane` leaves it."""

    state_dir: Path
    host: str
    api_port: int
    etcd_port: int
    pki: Pki
    tokens: dict[str, str]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def server(self) -> str:
        return f"https://{self.host}:{self.api_port}"

    def kubeconfig(self, identity: str = "admin") -> Path:
        return self.state_dir / f"{identity}.kubeconfig"

    def check_alive(self) -> None:
        """Raise if a component exited (its log says why)."""
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                log = self.state_dir / "logs" / f"{name}.log"
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise ControlPlaneError(f"{name} exited with {proc.returncode}; log {log}:\n{tail}")

    def stop(self) -> None:
        """Stop the components in reverse start order: SIGTERM, then SIGKILL after 10 s."""
        for _name, proc in reversed(list(self.processes.items())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.processes.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _binary(name: str) -> str:
    path = k8s_bin_dir() / name
    if path.exists():
        return str(path)
    raise ControlPlaneError(f"{path} is missing: build it with `make cluster-build`")


def _spawn(cp: ControlPlane, name: str, argv: list[str]) -> None:
    logs = cp.state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / f"{name}.log").open("wb") as out:
        # setpriv's parent-death signal: the component dies with the supervisor even when that
        # is SIGKILLed, so nothing is left behind.
        cp.processes[name] = subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", "--", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def _get(cp: ControlPlane, path: str) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(cp.pki.ca_cert))
    request = urllib.request.Request(
        cp.server + path, headers={"Authorization": f"Bearer {cp.tokens['admin']}"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as err:
        return 0, str(err)


def _wait(
    cp: ControlPlane, what: str, timeout: float, ready: Callable[[], tuple[bool, str]]
) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        cp.check_alive()
        ok, last = ready()
        if ok:
            return
        time.sleep(0.2)
    raise ControlPlaneError(f"{what} not ready after {timeout:.0f} s: {last}")


def start_control_plane(
    state_dir: Path, host: str, etcd_data_dir: Path, real_nodes: list[str] | None = None
) -> ControlPlane:
    """Start etcd and the three components on ``host`` and wait until the API is ready,
    controllers run and the ``default`` ServiceAccount exists.

    ``real_nodes``: names of the kubelets that will join; each gets a static identity
    ``system:node:<name>`` (and kube-proxy one of its own). The API server reaches kubelets
    with a client certificate of the cluster CA and verifies their serving certificates.

    Writes ``<state_dir>/<identity>.kubeconfig`` for every static identity. On failure the
    processes started so far are stopped before the error propagates.
    """
    for name in ("etcd", "openssl"):
        if shutil.which(name) is None:
            raise ControlPlaneError(f"{name} not found on PATH: run `make setup`")
    binaries = {
        c: _binary(c) for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    }
    pki, tokens = make_pki(
        state_dir / "pki",
        ip_sans=[host, "127.0.0.1", "10.96.0.1"],
        dns_sans=[
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
        extra_identities=node_identities(real_nodes or []),
    )
    issue_certificate(
        pki, "kubelet-client", common_name="kube-apiserver-kubelet-client",
        organization="system:masters", usage="clientAuth",
    )  # fmt: skip
    cp = ControlPlane(
        state_dir=state_dir,
        host=host,
        api_port=free_port(host),
        etcd_port=free_port("127.0.0.1"),
        pki=pki,
        tokens=tokens,
    )
    ca_pem = pki.ca_cert.read_bytes()
    for identity, token in tokens.items():
        cp.kubeconfig(identity).write_text(
            render_kubeconfig(cp.server, ca_pem, identity, token, "elasticjob-local")
        )
        cp.kubeconfig(identity).chmod(0o600)
    try:
        _start_components(cp, binaries, etcd_data_dir)
    except BaseException:
        cp.stop()
        raise
    return cp


def _start_components(cp: ControlPlane, binaries: dict[str, str], etcd_data_dir: Path) -> None:
    shutil.rmtree(etcd_data_dir, ignore_errors=True)
    etcd_url = f"http://127.0.0.1:{cp.etcd_port}"
    peer_url = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    _spawn(cp, "etcd", [
        "etcd", "--name", "control-plane", "--data-dir", str(etcd_data_dir),
        "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
        "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", f"control-plane={peer_url}",
        # etcd 3.4 sends no watch progress notifications unless asked; the API server needs them.
        "--experimental-watch-progress-notify-interval=5s",
        "--log-level=warn",
    ])  # fmt: skip
    pki = cp.pki
    _spawn(cp, "kube-apiserver", [
        binaries["kube-apiserver"],
        f"--etcd-servers={etcd_url}",
        f"--bind-address={cp.host}", f"--advertise-address={cp.host}",
        f"--secure-port={cp.api_port}",
        f"--tls-cert-file={pki.serving_cert}", f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_cert}",
        f"--token-auth-file={pki.token_file}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        f"--kubelet-client-certificate={pki.directory / 'kubelet-client.crt'}",
        f"--kubelet-client-key={pki.directory / 'kubelet-client.key'}",
        f"--kubelet-certificate-authority={pki.ca_cert}",
        f"--service-account-issuer={SERVICE_ISSUER}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        "--kubelet-preferred-address-types=InternalIP",
        "--profiling=false",
        "--v=0",
    ])  # fmt: skip
    _wait(cp, "kube-apiserver", 90, lambda: _ready(cp, "/readyz"))
    common = [
        "--leader-elect=false",
        f"--authentication-kubeconfig={cp.kubeconfig('admin')}",
        f"--authorization-kubeconfig={cp.kubeconfig('admin')}",
        "--bind-address=127.0.0.1",
        "--profiling=false",
    ]
    _spawn(cp, "kube-controller-manager", [
        binaries["kube-controller-manager"],
        f"--kubeconfig={cp.kubeconfig('controller-manager')}",
        *common,
        f"--secure-port={free_port('127.0.0.1')}",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca_cert}",
        f"--cluster-signing-cert-file={pki.ca_cert}",
        f"--cluster-signing-key-file={pki.ca_key}",
        # Notice a lost node within seconds rather than the default 40 s.
        "--node-monitor-period=2s",
        "--node-monitor-grace-period=20s",
        "--controllers=*,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
    ])  # fmt: skip
    _spawn(cp, "kube-scheduler", [
        binaries["kube-scheduler"],
        f"--kubeconfig={cp.kubeconfig('scheduler')}",
        *common,
        f"--secure-port={free_port('127.0.0.1')}",
    ])  # fmt: skip
    _wait(cp, "default ServiceAccount", 90, lambda: _ready(
        cp, "/api/v1/namespaces/default/serviceaccounts/default"))  # fmt: skip


def _ready(cp: ControlPlane, path: str) -> tuple[bool, str]:
    status, body = _get(cp, path)
    return status == 200, f"GET {path}: {status} {body[:200]}"


def version(cp: ControlPlane) -> str:
    """The API server's ``gitVersion`` (stamped at build time)."""
    status, body = _get(cp, "/version")
    if status != 200:
        raise ControlPlaneError(f"GET /version: {status} {body[:200]}")
    return str(json.loads(body).get("gitVersion", "")) or K8S_VERSION
