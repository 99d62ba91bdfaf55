"""The agent's end of the timers: a Unix datagram socket read by a daemon thread, and
optionally torch's timer FIFO (``timers.torch_fifo``), both feeding one table."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from elasticjob_agent.protocol.compute import ComputeFigure
from elasticjob_agent.protocol.hang_timeout import AutoSettings, StepIntervals
from elasticjob_agent.timers.compute import ComputeTimes
from elasticjob_agent.timers.steps import StepProgress, first_step
from elasticjob_agent.timers.table import Expired, TimerMessage, TimerMessageError, TimerTable
from elasticjob_agent.timers.torch_fifo import TorchTimerFifo

logger = logging.getLogger(__name__)


class TimerServer:
    """Receives ``timer.expires`` messages at ``path`` (and torch's ``FileTimerClient`` requests
    at ``torch_fifo``, when given); thread-safe queries for the supervisor."""

    def __init__(
        self,
        path: str,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        *,
        torch_fifo: str | None = None,
        auto_timeout: AutoSettings | None = None,
    ) -> None:
        self.path = path
        self._clock = clock
        self._monotonic = monotonic
        self._steps: StepProgress | None = None
        self._table = TimerTable()
        self._lock = threading.Lock()
        self._last_progress: float | None = None
        self._first: tuple[int, float] | None = None
        """The round's first step report (step, Unix time), for the job's recovery record."""
        self._previous: tuple[int, float] | None = None
        """The latest step of the last round that had one (step, Unix time)."""
        self._intervals = None if auto_timeout is None else StepIntervals(auto_timeout)
        """With an automatic progress timeout: the pace learned from the step reports."""
        self._compute = ComputeTimes()
        """The current group's compute time per step (``progress.step_timer``)."""
        if os.path.exists(path):
            os.unlink(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(path)
        self._sock.settimeout(0.5)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="timer-server", daemon=True)
        self._thread.start()
        self.torch_fifo = None if torch_fifo is None else TorchTimerFifo(torch_fifo, self.submit)

    def _serve(self) -> None:
        while not self._stopped.is_set():
            try:
                raw = self._sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                msg = TimerMessage.decode(raw)
            except TimerMessageError as exc:
                logger.warning("ignoring a bad timer message: %s", exc)
                continue
            self.submit(msg)

    def submit(self, msg: TimerMessage) -> None:
        """Apply one message (from any transport); a message of a current worker is progress."""
        with self._lock:
            if msg.op in ("step", "done", "heartbeat", "compute"):
                msg = self._from_worker(msg)
            if msg.op == "compute":
                if msg.pid in self._table.pids:  # a stopped group's late timing is no timing
                    self._compute.observe(msg.pid, msg.seconds)
                return
            if self._table.apply(msg):
                self._last_progress = self._clock()
                if msg.step is not None:
                    self._note_step(msg.step)
                elif msg.op == "done" and self._steps is not None:
                    self._steps = self._steps.finish()

    def _from_worker(self, msg: TimerMessage) -> TimerMessage:
        """A sign of progress from a process in a worker's session counts as the worker's
        (each worker leads its own session: a script run by a shell wrapper, with
        ``--no-python``, is the wrapper's child). Only for progress: a timer kills its pid."""
        if msg.pid in self._table.pids:
            return msg
        try:
            session = os.getsid(msg.pid)
        except OSError:  # gone already, or not ours to ask about
            return msg
        return replace(msg, pid=session) if session in self._table.pids else msg

    def _note_step(self, step: int) -> None:
        at, mono = self._last_progress or self._clock(), self._monotonic()
        if self._steps is None:
            self._first = (step, at)
        if self._intervals is not None:
            self._intervals = self._intervals.observe(step, mono)
        self._steps = (
            first_step(step, at, mono)
            if self._steps is None
            else self._steps.observe(step, at, mono)
        )

    def reset(self, pids: frozenset[int]) -> None:
        with self._lock:
            self._table.reset(pids)
            self._last_progress = self._clock()
            if self._steps is not None:
                self._previous = (self._steps.step, self._steps.at)
            self._steps = None
            self._first = None
            self._compute.reset()
            if self._intervals is not None:
                self._intervals = self._intervals.new_round()

    def expired(self) -> list[Expired]:
        with self._lock:
            return self._table.expired(self._clock())

    @property
    def last_progress(self) -> float | None:
        with self._lock:
            return self._last_progress

    def steps(self) -> StepProgress | None:
        """The group's step progress since the last ``reset`` (``None``: no step yet)."""
        with self._lock:
            return self._steps

    def first_step(self) -> tuple[int, float] | None:
        """The first step reported since the last ``reset``, and when (``None``: none yet)."""
        with self._lock:
            return self._first

    def previous_step(self) -> tuple[int, float] | None:
        """The highest step of the last round before the current one that reported a step, and
        when it was last reported (``None``: no earlier round had one)."""
        with self._lock:
            return self._previous

    def compute(self) -> ComputeFigure:
        """The current group's compute time per step (``timers.compute``)."""
        with self._lock:
            return self._compute.figure()

    def learned_timeout(self) -> float | None:
        """The automatic progress timeout in force (``protocol.hang_timeout``); ``None`` without
        one, or while the round's first steps are exempt."""
        with self._lock:
            return None if self._intervals is None else self._intervals.timeout()

    def close(self) -> None:
        if self.torch_fifo is not None:
            self.torch_fifo.close()
        self._stopped.set()
        self._sock.close()
        self._thread.join(2.0)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
