"""An embedded etcd on free loopback ports, for ``--standalone`` runs and for tests.

Started from the ``etcd`` binary in a temporary directory; ``stop()`` and ``start()`` again keep
the data and the ports (tests use this to simulate an outage); ``close()`` removes everything.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from elasticjob_agent.ports import free_port
from elasticjob_agent.supervision.parent_death import die_with_parent


class EtcdStartError(RuntimeError):
    """The etcd binary is missing or did not become healthy."""


class EmbeddedEtcd:
    def __init__(self, binary: str | None = None, host: str = "127.0.0.1") -> None:
        found = binary or shutil.which("etcd")
        if found is None:
            raise EtcdStartError(
                "the etcd binary is not on PATH: install it (Debian package etcd-server) "
                "or run scripts/setup.sh"
            )
        self._binary = found
        self.host = host
        self.client_port = free_port(host)
        self.peer_port = free_port(host)
        self.dir = Path(tempfile.mkdtemp(prefix="elasticjob-etcd-"))
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"

    def start(self, timeout: float = 20.0) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        client = f"http://{self.endpoint}"
        peer = f"http://{self.host}:{self.peer_port}"
        log = open(self.dir / "etcd.log", "ab")  # noqa: SIM115 - handed to the child
        self._proc = subprocess.Popen(
            [
                self._binary,
                "--name",
                "default",
                "--data-dir",
                str(self.dir / "data"),
                "--listen-client-urls",
                client,
                "--advertise-client-urls",
                client,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"default={peer}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own session (a Ctrl-C or a group signal reaches the agent, which cleans up),
            # and it dies with the agent even if the agent is SIGKILLed.
            start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - only calls prctl(2)
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise EtcdStartError(
                    f"etcd exited with {self._proc.returncode}: see {self.dir}/etcd.log"
                )
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1) as resp:
                    if b"true" in resp.read():
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise EtcdStartError(
            f"etcd did not become healthy within {timeout}s: see {self.dir}/etcd.log"
        )

    def stop(self) -> None:
        """Kill etcd (keeps its data and ports for a later ``start``)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedEtcd:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
