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
import resource
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

from elasticjob_agent.supervision.output_capture import CapturedStream, capture, console_bytes
from elasticjob_agent.supervision.parent_death import die_with_parent

logger = logging.getLogger(__name__)


SPARE_NICE = 19


def can_restore_priority(euid: int, nice_limit: int, current_nice: int) -> bool:
    """Whether a spare started at ``SPARE_NICE`` may raise itself back to ``current_nice``.

    Root may; others only within ``RLIMIT_NICE`` (the ceiling is ``20 - limit``). Pure.
    """
    return euid == 0 or 20 - nice_limit <= current_nice


def _spare_preexec(niced: bool) -> None:
    die_with_parent()
    if niced:
        os.nice(SPARE_NICE)


class WarmPool:
    """Spares import torch at the lowest CPU priority, so they never slow a running group, and
    are raised back to the agent's priority (every thread) when they become workers. Where that
    is not permitted, spares run at normal priority."""

    def __init__(self, python: str, env: Mapping[str, str], size: int) -> None:
        self._command = [python, "-u", "-m", "elasticjob_agent.supervision.zygote"]
        self._env = dict(env)
        self._size = size
        self._spares: list[subprocess.Popen[bytes]] = []
        # Each spare's stderr goes to the agent's console through a pipe whose end is kept:
        # the root cause of a warm worker's failure (output_capture).
        self._outputs: dict[int, CapturedStream] = {}
        self._nice = os.getpriority(os.PRIO_PROCESS, 0)
        soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
        limit = 40 if soft == resource.RLIM_INFINITY else int(soft)
        self._niced = can_restore_priority(os.geteuid(), limit, self._nice)

    def fill(self) -> None:
        """Start spares until there are ``size`` live ones (call from the supervisor's thread)."""
        self._spares = [p for p in self._spares if p.poll() is None]
        live = {p.pid for p in self._spares}
        self._outputs = {pid: out for pid, out in self._outputs.items() if pid in live}
        while len(self._spares) < self._size:
            proc = subprocess.Popen(
                self._command,
                env=self._env,
                stdin=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=lambda: _spare_preexec(self._niced),  # noqa: PLW1509 - prctl, nice
            )
            self._spares.append(proc)
            if proc.stderr is not None:  # always: PIPE was requested
                self._outputs[proc.pid] = capture(proc.stderr, console=console_bytes(sys.stderr))

    def output_of(self, proc: subprocess.Popen[bytes]) -> CapturedStream | None:
        """The kept stderr of a worker :meth:`take` returned (and its pump), handed over once."""
        return self._outputs.pop(proc.pid, None)

    def take(
        self, argv: Sequence[str], envs: Sequence[Mapping[str, str]], module: bool
    ) -> list[subprocess.Popen[bytes]] | None:
        """Turn one spare per environment into a worker; ``None`` if not enough spares."""
        live = [p for p in self._spares if p.poll() is None]
        if len(live) < len(envs):
            return None
        taken, self._spares = live[: len(envs)], live[len(envs) :]
        for proc, env in zip(taken, envs, strict=True):
            message = json.dumps(
                {
                    "argv": list(argv),
                    "env": dict(env),
                    "module": module,
                    "nice": self._nice if self._niced else None,
                }
            )
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
        self._outputs.clear()
