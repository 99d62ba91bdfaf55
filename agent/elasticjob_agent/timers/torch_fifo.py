"""torch's file-based timer protocol, served by the agent (``TORCHELASTIC_TIMER_FILE``).

A worker that calls ``timer.configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))``
writes one JSON line per ``acquire``/``release`` into a FIFO the agent created (torch's
``LocalElasticAgent`` runs ``FileTimerServer`` on it). Each line is at most ``PIPE_BUF`` bytes,
so concurrent writers never interleave. This reader feeds the lines, decoded by
``TimerMessage.decode_torch``, into the agent's one timer table; the supervisor then kills and
restarts exactly as for ``elasticjob_agent.timers.expires``.

Why not torch's ``FileTimerServer`` itself: after reaping an expired worker it sends the same
signal (SIGKILL by default) to its own process, i.e. the agent, so the node would vanish
instead of restarting its group; it kills from its own thread, so the supervisor could not tell
a timer from a crash (``timer`` vs ``failure``); and it signals any pid a line names, while the
agent acts only on the pids of its current workers.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import stat
import threading
from collections.abc import Callable

from elasticjob_agent.timers.table import TimerMessage, TimerMessageError

logger = logging.getLogger(__name__)

_MAX_LINE = select.PIPE_BUF
_POLL_SECONDS = 0.5


class TorchTimerFifo:
    """Creates the FIFO at ``path`` (replacing whatever is there, as torch does) and hands
    every valid request to ``submit`` from a daemon thread until ``close()``."""

    def __init__(self, path: str, submit: Callable[[TimerMessage], None]) -> None:
        self.path = path
        self._submit = submit
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.mkfifo(path, 0o600)
        self._read_fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        # Our own writer keeps the FIFO open between clients: without one, every client that
        # closes it leaves the reader at end-of-file and poll() returns at once, forever.
        self._keep_fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="torch-timer-fifo", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        pending = b""
        while not self._stopped.is_set():
            try:
                ready, _, _ = select.select([self._read_fd], [], [], _POLL_SECONDS)
                if not ready:
                    continue
                chunk = os.read(self._read_fd, 65536)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EINTR):
                    continue
                return  # closed under us by close()
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            if len(pending) > _MAX_LINE:
                logger.warning("dropping an overlong torch timer request (%d bytes)", len(pending))
                pending = b""
            for line in lines:
                if line.strip():
                    self._handle(line)

    def _handle(self, line: bytes) -> None:
        try:
            msg = TimerMessage.decode_torch(line)
        except TimerMessageError as exc:
            logger.warning("ignoring a bad torch timer request: %s", exc)
            return
        self._submit(msg)

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(2 * _POLL_SECONDS + 1.0)
        for fd in (self._keep_fd, self._read_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            if stat.S_ISFIFO(os.lstat(self.path).st_mode):
                os.unlink(self.path)
