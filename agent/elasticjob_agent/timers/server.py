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
        *,
        torch_fifo: str | None = None,
    ) -> None:
        self.path = path
        self._clock = clock
        self._table = TimerTable()
        self._lock = threading.Lock()
        self._last_progress: float | None = None
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
            if self._table.apply(msg):
                self._last_progress = self._clock()

    def reset(self, pids: frozenset[int]) -> None:
        with self._lock:
            self._table.reset(pids)
            self._last_progress = self._clock()

    def expired(self) -> list[Expired]:
        with self._lock:
            return self._table.expired(self._clock())

    @property
    def last_progress(self) -> float | None:
        with self._lock:
            return self._last_progress

    def close(self) -> None:
        if self.torch_fifo is not None:
            self.torch_fifo.close()
        self._stopped.set()
        self._sock.close()
        self._thread.join(2.0)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
