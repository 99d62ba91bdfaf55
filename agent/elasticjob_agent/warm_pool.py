"""Warm workers: spare interpreters with torch already imported, ready to become workers.

A worker's start-up is mostly ``import torch``; on a busy node that is seconds to tens of
seconds, paid again on every restart. The pool keeps ``size`` spares (``zygote.py``) so a restart
only pays for the rendezvous and the script's own set-up. Spares are started from the
supervisor's thread only: ``PR_SET_PDEATHSIG`` fires when the spawning *thread* ends.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence

from elasticjob_agent.parent_death import die_with_parent

logger = logging.getLogger(__name__)


class WarmPool:
    def __init__(self, python: str, env: Mapping[str, str], size: int) -> None:
        self._command = [python, "-u", "-m", "elasticjob_agent.zygote"]
        self._env = dict(env)
        self._size = size
        self._spares: list[subprocess.Popen[bytes]] = []

    def fill(self) -> None:
        """Start spares until there are ``size`` live ones (call from the supervisor's thread)."""
        self._spares = [p for p in self._spares if p.poll() is None]
        while len(self._spares) < self._size:
            self._spares.append(
                subprocess.Popen(
                    self._command,
                    env=self._env,
                    stdin=subprocess.PIPE,
                    start_new_session=True,
                    preexec_fn=die_with_parent,  # noqa: PLW1509 - only calls prctl(2)
                )
            )

    def take(
        self, argv: Sequence[str], envs: Sequence[Mapping[str, str]], module: bool
    ) -> list[subprocess.Popen[bytes]] | None:
        """Turn one spare per environment into a worker; ``None`` if not enough spares."""
        live = [p for p in self._spares if p.poll() is None]
        if len(live) < len(envs):
            return None
        taken, self._spares = live[: len(envs)], live[len(envs) :]
        for proc, env in zip(taken, envs, strict=True):
            message = json.dumps({"argv": list(argv), "env": dict(env), "module": module})
            if proc.stdin is None:  # cannot happen: stdin=PIPE
                raise RuntimeError("warm worker has no stdin")
            try:
                proc.stdin.write(message.encode() + b"\n")
                proc.stdin.close()
            except OSError:
                logger.warning("warm worker %d died before it got its work", proc.pid)
        return taken

    def close(self) -> None:
        for proc in self._spares:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self._spares.clear()
