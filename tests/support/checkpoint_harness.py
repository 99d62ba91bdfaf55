"""Real checkpoint services (``python -m elasticjob_agent.checkpoint``, one per "node", each with
its own memory directory and no storage shared with the others) and real ranks (torch gloo)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from elasticjob_agent.checkpoint.serving import scope
from elasticjob_agent.ports import free_port
from elasticjob_agent.protocol.keys import DEFAULT_PREFIX, JobKeys

from tests.support.paths import REPO

WORKER = REPO / "tests" / "integration" / "checkpoint" / "scripts" / "ckpt_worker.py"
RESIZE_WORKER = REPO / "tests" / "integration" / "checkpoint" / "scripts" / "ckpt_resize_worker.py"
READY_TIMEOUT = 180.0
"""A service imports torch (through the etcd session's errors): slow on a loaded machine."""
RANK_TIMEOUT = 240.0


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "agent"), env.get("PYTHONPATH", "")])
    env.pop("ELASTICJOB_CHECKPOINT_SOCKET", None)
    env.update(extra)
    return env


class Node:
    """One node's checkpoint service. ``memory``: its shared-memory directory (a tmpfs);
    ``persist``: its own local disk path, or None; ``replicas``: peers each shard is copied
    to (None: the service's default)."""

    def __init__(
        self,
        base: Path,
        name: str,
        *,
        etcd: str,
        run_id: str,
        tls: dict[str, Path] | None,
        limit: str = "256Mi",
        persist: bool = False,
        timeout: float = 20.0,
        memory: Path | None = None,
        replicas: int | None = None,
    ) -> None:
        self.name = name
        self.work = base / name
        self.work.mkdir(parents=True, exist_ok=True)
        self.memory = memory or Path("/dev/shm") / f"ej-test-{uuid.uuid4().hex[:10]}" / name
        # The service keeps its shards in a directory of its own (job and node) under it.
        self.shards = self.memory / scope(JobKeys(DEFAULT_PREFIX, run_id), name) / "shards"
        self.persist = self.work / "disk" if persist else None
        env = {
            "ELASTICJOB_CHECKPOINT_MEMORY_LIMIT": limit,
            "ELASTICJOB_CHECKPOINT_MEMORY_DIR": str(self.memory),
            "ELASTICJOB_CHECKPOINT_PORT": "0",
            "ELASTICJOB_CHECKPOINT_ADDR": "127.0.0.1",
            "ELASTICJOB_CHECKPOINT_TIMEOUT": str(timeout),
        }
        if self.persist is not None:
            env["ELASTICJOB_CHECKPOINT_PERSIST_DIR"] = str(self.persist)
        if replicas is not None:
            env["ELASTICJOB_CHECKPOINT_REPLICAS"] = str(replicas)
        if tls is not None:
            env.update(
                ELASTICJOB_CHECKPOINT_CACERT=str(tls["ca"]),
                ELASTICJOB_CHECKPOINT_CERT=str(tls["cert"]),
                ELASTICJOB_CHECKPOINT_KEY=str(tls["key"]),
            )
        self.log_path = self.work / "service.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        argv = [sys.executable, "-u", "-m", "elasticjob_agent.checkpoint"]
        argv += ["--etcd", etcd, "--run-id", run_id, "--node", name]
        argv += ["--addr", "127.0.0.1", "--work-dir", str(self.work)]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=self._log, env=_env(env), start_new_session=True
        )
        self.socket = self._wait_ready()

    def _wait_ready(self) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT
        os.set_blocking(self.proc.stdout.fileno(), False)
        buffer = b""
        while time.monotonic() < deadline:
            chunk = self.proc.stdout.read()
            if chunk:
                buffer += chunk
                for line in buffer.splitlines():
                    if line.startswith(b"ready "):
                        return line.split()[1].decode()
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"node {self.name} did not start: {self.log_path.read_text()[-3000:]}")

    def shard_file(self, step: int, rank: int, world: int, name: str = "state.bin") -> Path:
        return self.shards / str(step) / f"{rank}-{world}" / name

    def lose(self) -> None:
        """The node is gone: its service killed, its memory (and local disk) with it."""
        self.stop(signal.SIGKILL)
        shutil.rmtree(self.memory, ignore_errors=True)
        if self.persist is not None:
            shutil.rmtree(self.persist, ignore_errors=True)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.memory.parent, ignore_errors=True)


def run_ranks(
    base: Path,
    sockets: Sequence[str | None],
    mode: str,
    *args: str,
    env: dict[str, str] | None = None,
    worker: Path = WORKER,
) -> list[dict[str, Any]]:
    """One real process per rank of ``worker`` (rank i talks to ``sockets[i]``'s service, or to
    a node of its own when None); returns each rank's JSON result."""
    world = len(sockets)
    port = free_port()
    procs = []
    outs = []
    for rank, sock in enumerate(sockets):
        out = base / f"rank{rank}-{mode}-{uuid.uuid4().hex[:6]}.json"
        outs.append(out)
        extra = {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            **(env or {}),
        }
        if sock is not None:
            extra["ELASTICJOB_CHECKPOINT_SOCKET"] = sock
        with open(base / f"rank{rank}-{mode}.log", "ab") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(worker), "--mode", mode, "--out", str(out), *args],
                    env=_env(extra),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    deadline = time.monotonic() + RANK_TIMEOUT
    for rank, proc in enumerate(procs):
        try:
            code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise AssertionError(
                f"rank {rank} ({mode}) did not finish in {RANK_TIMEOUT}s"
            ) from None
        if code != 0:
            for p in procs:
                p.kill()
            tail = (base / f"rank{rank}-{mode}.log").read_text()[-4000:]
            raise AssertionError(f"rank {rank} ({mode}) exited {code}:\n{tail}")
    return [json.loads(out.read_text()) for out in outs]
