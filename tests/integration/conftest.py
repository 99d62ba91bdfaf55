"""Fixtures for integration tests: a real etcd server started by the test itself.

``etcd_server`` (function scope) and ``etcd_server_session`` (session scope, cheaper: one process
for the whole run; tests must then use their own run ids/prefixes) both yield an ``EtcdServer``:

- ``endpoint``: ``"127.0.0.1:<client port>"``, the value for ``--rdzv-endpoint``;
  ``host``/``port``/``peer_port``/``data_dir`` are there too.
- ``start()``: start etcd (again) on the same ports and data dir; waits until it serves requests.
- ``stop()``: SIGTERM and wait (a clean shutdown, the data stays).
- ``kill()``: SIGKILL (a crash, the data stays).
- ``wipe()``: stop, delete the data dir, start: a new empty etcd on the same address, as when the
  operator recreates a lost managed etcd.
- ``running``: whether the process is alive.
- ``etcdctl(*args)``: run ``etcdctl`` against it and return stdout (raises on failure).

The ``etcd`` binary must be on ``PATH`` (``scripts/setup.sh`` installs Debian's ``etcd-server``);
without it the fixture fails loudly, it never skips.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

_START_TIMEOUT = 20.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EtcdServer:
    """One etcd member on loopback, with its data in a private temporary directory."""

    def __init__(self, base_dir: Path, *, extra_args: tuple[str, ...] = ()) -> None:
        binary = shutil.which("etcd")
        if binary is None:
            raise RuntimeError("etcd binary not found on PATH: run scripts/setup.sh (etcd-server)")
        self.binary = binary
        self.host = "127.0.0.1"
        self.port = free_port()
        self.peer_port = free_port()
        self.base_dir = base_dir
        self.data_dir = base_dir / "data"
        self.log_path = base_dir / "etcd.log"
        self.extra_args = extra_args
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _command(self) -> list[str]:
        client = f"http://{self.host}:{self.port}"
        peer = f"http://{self.host}:{self.peer_port}"
        return [
            self.binary,
            "--name=default",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--log-level=warn",
            *self.extra_args,
        ]

    def start(self) -> None:
        if self.running:
            return
        log = self.log_path.open("ab")
        try:
            self._proc = subprocess.Popen(
                self._command(), stdout=log, stderr=log, start_new_session=True
            )
        finally:
            log.close()
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"etcd exited with {self._proc.returncode}: see {self.log_path}:\n"
                    + self.log_path.read_text(errors="replace")[-2000:]
                )
            try:
                self.etcdctl("endpoint", "health", timeout=2.0)
                return
            except subprocess.SubprocessError:
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
        out = subprocess.run(
            ["etcdctl", f"--endpoints={self.endpoint}", *args],
            env=dict(os.environ, ETCDCTL_API="3"),
            capture_output=True,
            check=True,
            timeout=timeout,
        )
        return out.stdout.decode()


def _serve(extra_args: tuple[str, ...] = ()) -> Iterator[EtcdServer]:
    base = Path(tempfile.mkdtemp(prefix="elasticjob-etcd-"))
    server = EtcdServer(base, extra_args=extra_args)
    try:
        server.start()
        yield server
    finally:
        server.kill()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def etcd_server() -> Iterator[EtcdServer]:
    """A fresh etcd for this test only; stop/start/kill/wipe it freely."""
    yield from _serve()


@pytest.fixture(scope="session")
def etcd_server_session() -> Iterator[EtcdServer]:
    """One etcd shared by the whole session: never stop it; use unique run ids."""
    yield from _serve()
