"""A real etcd server started by a test itself (the integration suites' fixtures use it).

``EtcdServer``: ``endpoint`` (``"127.0.0.1:<client port>"``, the value for ``--rdzv-endpoint``;
``host``/``port``/``peer_port``/``data_dir`` are there too); ``start()`` starts etcd (again) on
the same ports and data dir and waits until it serves requests; ``stop()`` (SIGTERM, the data
stays); ``kill()`` (SIGKILL, a crash, the data stays); ``freeze()``/``thaw()`` (SIGSTOP/SIGCONT);
``wipe()`` (a new empty etcd on the same address, as when the operator recreates a lost managed
etcd); ``running``; ``etcdctl(*args)`` (stdout; raises on failure).

``serve()`` yields a started server in a private temporary directory and removes both after.
The binary is ``etcd_binary()``: without one the fixtures fail loudly, they never skip.
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from elasticjob_agent.ports import free_port
from elasticjob_operator.core import pki

_START_TIMEOUT = 20.0


@dataclass(frozen=True)
class TlsMaterial:
    """PEM files of a test CA with a server and a client certificate, and a client certificate
    of ANOTHER CA (which etcd must refuse). The server certificate names 127.0.0.1 and
    localhost."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_ca: Path
    stranger_cert: Path
    stranger_key: Path


def make_tls_material(directory: Path) -> TlsMaterial:
    """The operator's own certificates for a job's etcd (``pki.generate``: the server
    certificate names localhost and 127.0.0.1), and the client certificate of another job's CA."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ours = pki.generate("tests", "integration", "etcd", now)
    theirs = pki.generate("another-tenant", "integration", "etcd", now)
    files = {
        "ca.crt": ours.ca_cert,
        "server.crt": ours.server_cert,
        "server.key": ours.server_key,
        "client.crt": ours.client_cert,
        "client.key": ours.client_key,
        "stranger-ca.crt": theirs.ca_cert,
        "stranger.crt": theirs.client_cert,
        "stranger.key": theirs.client_key,
    }
    for name, pem in files.items():
        (directory / name).write_text(pem)
    return TlsMaterial(
        ca=directory / "ca.crt",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
        stranger_ca=directory / "stranger-ca.crt",
        stranger_cert=directory / "stranger.crt",
        stranger_key=directory / "stranger.key",
    )


def etcd_binary() -> str:
    """The etcd server the tests run: the release the operator deploys (scripts/test.sh sets
    ``ELASTICJOB_ETCD`` from `make etcd-release`), else the one on PATH (Debian's, `make
    setup`) for a bare `pytest`."""
    binary = os.environ.get("ELASTICJOB_ETCD") or shutil.which("etcd")
    if binary is None or not os.access(binary, os.X_OK):
        raise RuntimeError(
            f"etcd binary not found ({binary or 'none on PATH'}): run `make etcd-release` and "
            "set ELASTICJOB_ETCD to the path it prints, or scripts/setup.sh (etcd-server)"
        )
    return binary


class EtcdServer:
    """One etcd member on loopback, with its data in a private temporary directory.

    With ``tls``, it serves clients on https only and requires a client certificate signed by
    ``tls.ca`` (``--client-cert-auth``); ``endpoint`` is then an ``https://`` URL."""

    def __init__(
        self,
        base_dir: Path,
        *,
        extra_args: tuple[str, ...] = (),
        tls: TlsMaterial | None = None,
    ) -> None:
        self.binary = etcd_binary()
        self.host = "127.0.0.1"
        self.port = free_port()
        self.peer_port = free_port()
        # A name of its own: the start check accepts only this server, never another test
        # session's etcd that took the same (briefly free) port first.
        self.member_name = f"ejtest-{uuid.uuid4().hex[:12]}"
        self._started = False
        self.base_dir = base_dir
        self.data_dir = base_dir / "data"
        self.log_path = base_dir / "etcd.log"
        self.extra_args = extra_args
        self.tls = tls
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        if self.tls is not None:
            return f"https://{self.host}:{self.port}"
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _command(self) -> list[str]:
        client = f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"
        peer = f"http://{self.host}:{self.peer_port}"
        tls: list[str] = []
        if self.tls is not None:
            # etcd 3.4's names (Debian's etcd-server): client TLS with required client certs.
            tls = [
                "--client-cert-auth",
                f"--trusted-ca-file={self.tls.ca}",
                f"--cert-file={self.tls.server_cert}",
                f"--key-file={self.tls.server_key}",
            ]
        return [
            self.binary,
            f"--name={self.member_name}",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={self.member_name}={peer}",
            "--log-level=warn",
            *tls,
            *self.extra_args,
        ]

    def start(self) -> None:
        """Start (or restart, on the same ports and data) and wait until it answers.

        Ports are chosen free but bound only when etcd starts, so on a busy machine another
        test session's etcd can take one first. The check accepts only our own member name; on
        a first start that lost the race, new ports are chosen (at most three times).
        """
        if self.running:
            return
        for _ in range(3):
            if self._start_once():
                self._started = True
                return
            if self._started:
                break  # a restart must keep its ports: the clients know them
            self.port, self.peer_port = free_port(), free_port()
        raise RuntimeError(f"another etcd answers on {self.endpoint}: the port was taken")

    def _start_once(self) -> bool:
        """True when our etcd answers; False when another process holds the port."""
        log = self.log_path.open("ab")
        try:
            self._proc = subprocess.Popen(
                self._command(), stdout=log, stderr=log, start_new_session=True
            )
        finally:
            log.close()
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            try:
                members = self.etcdctl("member", "list", timeout=2.0)
            except subprocess.SubprocessError:
                members = ""
            if self.member_name in members:
                return True
            if members:  # somebody else's etcd answers on our port
                self.kill()
                return False
            if self._proc.poll() is not None:
                text = self.log_path.read_text(errors="replace")
                if "address already in use" in text[-4000:]:
                    return False
                raise RuntimeError(
                    f"etcd exited with {self._proc.returncode}: see {self.log_path}:\n"
                    + text[-2000:]
                )
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"etcd did not become healthy in {_START_TIMEOUT}s: see {self.log_path}")

    def _signal(self, sig: signal.Signals) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        self._signal(signal.SIGTERM)

    def freeze(self) -> None:
        """SIGSTOP: connections stay open but nothing answers, like a link cut mid-stream."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)
        # kill() returns before the threads stop: one may still answer a request sent right
        # after. Frozen means every thread of the process is in state T.
        tasks = Path(f"/proc/{self._proc.pid}/task")
        deadline = time.monotonic() + 10
        while not all(_stopped(t) for t in tasks.iterdir()):
            assert time.monotonic() < deadline, f"etcd {self._proc.pid} did not stop on SIGSTOP"
            time.sleep(0.01)

    def thaw(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def wipe(self) -> None:
        self.kill()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.start()

    def etcdctl(self, *args: str, timeout: float = 10.0) -> str:
        tls: list[str] = []
        if self.tls is not None:
            tls = [
                f"--cacert={self.tls.ca}",
                f"--cert={self.tls.client_cert}",
                f"--key={self.tls.client_key}",
            ]
        out = subprocess.run(
            ["etcdctl", f"--endpoints={self.endpoint}", *tls, *args],
            env=dict(os.environ, ETCDCTL_API="3"),
            capture_output=True,
            check=True,
            timeout=timeout,
        )
        return out.stdout.decode()


def _stopped(task: Path) -> bool:
    """Whether the thread ``task`` (a /proc/PID/task/TID directory) is stopped by a signal."""
    try:
        stat = (task / "stat").read_text()
    except FileNotFoundError:  # the thread exited
        return True
    return stat.rpartition(")")[2].split()[0] == "T"


def serve(extra_args: tuple[str, ...] = (), *, tls: bool = False) -> Iterator[EtcdServer]:
    """A started server (with ``tls``: TLS only, client certificates of its own CA), killed
    and its directory removed when the generator is closed."""
    base = Path(tempfile.mkdtemp(prefix="elasticjob-etcd-"))
    material = make_tls_material(base / "tls") if tls else None
    server = EtcdServer(base, extra_args=extra_args, tls=material)
    try:
        server.start()
        yield server
    finally:
        server.kill()
        shutil.rmtree(base, ignore_errors=True)
