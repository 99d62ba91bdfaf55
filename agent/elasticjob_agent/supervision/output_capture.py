"""The end of each worker's stderr, kept by the agent whatever the log settings.

A worker that dies before torch's ``@record`` writes its error file (a missing script, a bad
flag, an import error) leaves only its exit code and what it printed. The agent reads a worker's
stderr through a pipe, passes every line on (to the console and/or the rank's log file, as the
log settings say) and keeps the last lines in a bounded :class:`OutputTail`, so the root cause can
say what happened: ``python: can't open file '/workspace/train.py': [Errno 2] ...``.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import IO

from elasticjob_agent.protocol.failure import MAX_TAIL, MAX_TAIL_LINES

MAX_LINE = 64 * 1024
"""Longest piece read at once: a line without a newline (a progress bar) cannot grow memory."""
DRAIN_TIMEOUT = 1.0
"""How long a dead worker's last output may take to drain from its pipe."""


class OutputTail:
    """The last :data:`MAX_TAIL_LINES` lines of a stream, at most ``limit`` bytes in all.

    Fed by one pump thread, read by the supervisor's: the lock keeps a read whole."""

    def __init__(self, lines: int = MAX_TAIL_LINES, limit: int = MAX_TAIL) -> None:
        self._lines: collections.deque[bytes] = collections.deque(maxlen=lines)
        self._limit = limit
        self._size = 0
        self._lock = threading.Lock()

    def feed(self, line: bytes) -> None:
        piece = line[-self._limit :]
        with self._lock:
            if len(self._lines) == self._lines.maxlen:
                self._size -= len(self._lines[0])
            self._lines.append(piece)
            self._size += len(piece)
            while self._size > self._limit and len(self._lines) > 1:
                self._size -= len(self._lines.popleft())

    def value(self) -> bytes:
        with self._lock:
            return b"".join(self._lines)


def pump(
    src: IO[bytes],
    tail: OutputTail,
    *,
    file: IO[bytes] | None = None,
    console: IO[bytes] | None = None,
    prefix: bytes = b"",
) -> None:
    """Copy ``src`` line by line to ``file`` and ``console`` (with ``prefix``), keeping its end
    in ``tail``, until end of stream; then close ``src``. A failing sink is dropped, never the
    pump: the worker must not block on a full pipe."""
    for line in iter(lambda: src.readline(MAX_LINE), b""):
        tail.feed(line)
        if file is not None:
            try:
                file.write(line)
                file.flush()
            except (OSError, ValueError):  # closed by stop(), or a full disk
                file = None
        if console is not None:
            try:
                console.write(prefix + line)
                console.flush()
            except (OSError, ValueError):
                console = None
    src.close()


@dataclass(frozen=True)
class CapturedStream:
    """A stream being pumped on its own thread, and the end of it kept so far."""

    tail: OutputTail
    pump: threading.Thread

    def drained(self, timeout: float = DRAIN_TIMEOUT) -> bytes | None:
        """The kept end once the stream ended (waiting at most ``timeout``: a child of the
        worker may hold the pipe open), else what it is so far; ``None`` if empty."""
        self.pump.join(timeout)
        return self.tail.value() or None


def capture(
    src: IO[bytes],
    *,
    file: IO[bytes] | None = None,
    console: IO[bytes] | None = None,
    prefix: bytes = b"",
) -> CapturedStream:
    """:func:`pump` on a daemon thread, started; its end kept in a new :class:`OutputTail`."""
    tail = OutputTail()
    thread = threading.Thread(
        target=pump,
        args=(src, tail),
        kwargs={"file": file, "console": console, "prefix": prefix},
        daemon=True,
        name="worker-output",
    )
    thread.start()
    return CapturedStream(tail, thread)


def console_bytes(stream: object) -> IO[bytes] | None:
    """The binary side of a text console (``sys.stderr.buffer``), if it has one."""
    buffer: IO[bytes] | None = getattr(stream, "buffer", None)
    return buffer
