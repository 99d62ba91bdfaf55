"""The local worker processes of one round: start, poll, kill, stop (SIGTERM, then SIGKILL).

Each worker runs in its own session (so a stop reaches its children too) and dies with the
agent (``PR_SET_PDEATHSIG``), so a SIGKILLed agent never leaves orphans training alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import IO

from elasticjob_agent.supervision.output_capture import CapturedStream, capture, console_bytes
from elasticjob_agent.supervision.parent_death import die_with_parent
from elasticjob_agent.supervision.warm_pool import WarmPool
from elasticjob_agent.supervision.worker_launch import GroupOutcome, group_outcome, streams_for

logger = logging.getLogger(__name__)

# Warm workers are refilled this long after a group started, not during its own start-up.
_REFILL_AFTER = 2.0


@dataclass(frozen=True)
class WarmLaunch:
    """How a warm worker runs the script: ``argv`` = ``[script, *args]``, as ``-m`` or a path."""

    pool: WarmPool
    argv: tuple[str, ...]
    module: bool


@dataclass(frozen=True)
class LogSettings:
    directory: Path
    redirects: str = "0"
    tee: str = "0"
    prefix_template: str | None = None
    ranks_filter: frozenset[int] | None = None


class LocalWorkers:
    """One group of local workers. Not thread-safe: the supervisor's thread owns it."""

    def __init__(
        self, command: Sequence[str], logs: LogSettings, warm: WarmLaunch | None = None
    ) -> None:
        self._command = list(command)
        self._logs = logs
        # Warm workers write to the agent's console, so only without redirects, tee or filters.
        plain = logs.redirects == "0" and logs.tee == "0" and logs.ranks_filter is None
        self._warm = warm if plain else None
        self._started_at: float | None = None
        self.warm_started = False
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._files: list[IO[bytes]] = []
        self._pumps: list[threading.Thread] = []
        self._stderr: dict[int, CapturedStream] = {}
        self.error_files: dict[int, Path] = {}

    def error_file(self, attempt: int, local_rank: int) -> Path:
        return self._logs.directory / f"attempt_{attempt}" / str(local_rank) / "error.json"

    def start(self, envs: Mapping[int, Mapping[str, str]], attempt: int, role: str) -> None:
        """Start one process per local rank with its environment."""
        if self._procs:
            raise RuntimeError("workers are already running; stop() them first")
        self._started_at = time.monotonic()
        ranks = sorted(envs)
        if self._warm is not None:
            for local_rank in ranks:
                rank_dir = self._logs.directory / f"attempt_{attempt}" / str(local_rank)
                rank_dir.mkdir(parents=True, exist_ok=True)
            procs = self._warm.pool.take(
                self._warm.argv, [envs[r] for r in ranks], self._warm.module
            )
            if procs is not None:
                self._procs = dict(zip(ranks, procs, strict=True))
                for local_rank, proc in self._procs.items():
                    captured = self._warm.pool.output_of(proc)
                    if captured is not None:
                        self._stderr[local_rank] = captured
                self.warm_started = True
                return
        self.warm_started = False
        for local_rank in ranks:
            env = dict(envs[local_rank])
            rank_dir = self._logs.directory / f"attempt_{attempt}" / str(local_rank)
            rank_dir.mkdir(parents=True, exist_ok=True)
            streams = streams_for(self._logs.redirects, self._logs.tee, local_rank)
            show = self._logs.ranks_filter is None or local_rank in self._logs.ranks_filter
            stdout: int | IO[bytes] | None = None if show else subprocess.DEVNULL
            prefix = Template(self._logs.prefix_template or "[${role_name}${local_rank}]:")
            line_prefix = prefix.safe_substitute(
                role_name=role,
                rank=env.get("RANK", ""),
                local_rank=local_rank,
                hostname=os.uname().nodename,
            )
            # (file, console, prefix) of each stream read through a pipe. stderr always is, so
            # its end is kept for the root cause (output_capture); stdout only when tee'd.
            piped: dict[str, tuple[IO[bytes] | None, IO[bytes] | None, bytes]] = {}
            for name, to_file, tee, console in (
                ("stdout", streams.stdout_to_file, streams.stdout_tee, sys.stdout),
                ("stderr", streams.stderr_to_file, streams.stderr_tee, sys.stderr),
            ):
                file: IO[bytes] | None = None
                if to_file:
                    file = open(rank_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
                    self._files.append(file)
                if tee:
                    piped[name] = (file, console_bytes(console), line_prefix.encode())
                elif name == "stderr":
                    # Untee'd: to the file if redirected, else as the console would show it.
                    shown = console_bytes(console) if show and file is None else None
                    piped[name] = (file, shown, b"")
                elif file is not None:
                    stdout = file
            if "stdout" in piped:
                stdout = subprocess.PIPE
            try:
                proc = subprocess.Popen(
                    self._command,
                    env=env,
                    stdout=stdout,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    preexec_fn=die_with_parent,  # noqa: PLW1509 - only calls prctl(2)
                )
            except OSError as exc:
                # As a shell would: the worker "ran" and failed with 127 and a message, so the
                # failure is counted and explained like any other instead of crashing the agent.
                proc = subprocess.Popen(
                    _cannot_run(self._command[0], exc),
                    stdout=stdout,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    preexec_fn=die_with_parent,  # noqa: PLW1509 - only calls prctl(2)
                )
            for name, (log_file, console, prefix_bytes) in piped.items():
                src = proc.stdout if name == "stdout" else proc.stderr
                if src is None:  # cannot happen: PIPE was requested for this stream
                    continue
                captured = capture(
                    src, file=log_file, console=console if show else None, prefix=prefix_bytes
                )
                self._pumps.append(captured.pump)
                if name == "stderr":
                    self._stderr[local_rank] = captured
            self._procs[local_rank] = proc
            self.error_files[local_rank] = rank_dir / "error.json"

    def maintain(self) -> None:
        """Called every monitor tick: refill the warm pool once the group is past its start."""
        if self._warm is None:
            return
        started = self._started_at
        if started is None or time.monotonic() - started >= _REFILL_AFTER:
            self._warm.pool.fill()

    def stderr_tail(self, local_rank: int) -> bytes | None:
        """What the agent kept of a worker's stderr (its last lines), once its pipe drained."""
        captured = self._stderr.get(local_rank)
        return captured.drained() if captured is not None else None

    def pids(self) -> dict[int, int]:
        return {rank: proc.pid for rank, proc in self._procs.items()}

    def exit_codes(self) -> dict[int, int | None]:
        return {rank: proc.poll() for rank, proc in self._procs.items()}

    def poll(self) -> GroupOutcome:
        return group_outcome(self.exit_codes())

    def kill(self, pid: int, sig: int = signal.SIGKILL) -> None:
        """Signal one worker (and its session; SIGKILL by default), e.g. after its timer
        expired."""
        for proc in self._procs.values():
            if proc.pid == pid and proc.poll() is None:
                _signal_session(proc, sig)

    def signal_all(self, sig: int) -> None:
        for proc in self._procs.values():
            if proc.poll() is None:
                _signal_session(proc, sig)

    def stop(self, grace: float) -> dict[int, int | None]:
        """SIGTERM every worker, SIGKILL whatever is left after ``grace`` seconds; wait for all."""
        if not self._procs:
            return {}
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.poll() is None for p in self._procs.values()):
            time.sleep(0.02)
        for proc in self._procs.values():
            # Kill the whole session even if the leader exited: its children may linger.
            _signal_session(proc, signal.SIGKILL)
            proc.wait()
        codes = self.exit_codes()
        for pump in self._pumps:
            pump.join(1.0)
        for file in self._files:
            file.close()
        self._procs.clear()
        self._files.clear()
        self._pumps.clear()
        self._stderr.clear()
        return codes


CANNOT_RUN_EXIT = 127
"""A worker whose command cannot be started exits so, as in a shell."""


def _cannot_run(command: str, exc: OSError) -> list[str]:
    """argv of a process that reports why ``command`` cannot run and exits 127."""
    message = f"elasticjob-agent: cannot run {command!r}: [Errno {exc.errno}] {exc.strerror}"
    code = f"import sys; sys.stderr.write({message!r} + '\\n'); sys.exit({CANNOT_RUN_EXIT})"
    return [sys.executable, "-c", code]


def _signal_session(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
