"""The health server: ``/healthz`` (liveness), ``/status`` (HealthReport v1), ``/metrics``.

One asyncio loop on one daemon thread serves every connection, so idle or slow clients cost a
coroutine, never a thread. Limits (untrusted clients share the pod network):

- a request must arrive complete (request line and headers, at most ``MAX_REQUEST_BYTES``)
  within ``request_timeout`` seconds of connecting, else the connection is closed;
- at most ``max_connections`` connections are open at once; a new connection beyond that
  closes the oldest unanswered one (half-sent, or idle between two requests), so half-sent
  requests cannot lock out the operator's probe;
- a connection stays open for the next request (HTTP/1.1 keep-alive) up to ``idle_timeout``
  seconds, longer than the operator keeps an idle connection (30 s): the operator polls every
  agent every few seconds, and a TCP handshake per poll costs its one event loop more than the
  request itself. A client that asks ``Connection: close`` (or speaks HTTP/1.0) gets it.

The providers given to ``HealthServer`` run on the server's loop: they must be thread-safe and
quick (they read lock-guarded records).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST

from elasticjob_agent.protocol.health import HealthReport

logger = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 8192
DEFAULT_REQUEST_TIMEOUT = 5.0
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_IDLE_TIMEOUT = 60.0
_START_TIMEOUT = 10.0
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_REASONS[503] = "Service Unavailable"


class HealthServer:
    """Serves the three endpoints on ``addr:port`` (port 0: any free port, see ``port``)."""

    def __init__(
        self,
        addr: str,
        port: int,
        report: Callable[[], HealthReport],
        metrics: Callable[[], bytes],
        alive: Callable[[], bool],
        *,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    ) -> None:
        if not request_timeout > 0 or max_connections < 1 or not idle_timeout > 0:
            raise ValueError(
                "request_timeout and idle_timeout must be > 0 and max_connections >= 1"
            )
        self._idle = idle_timeout
        self._report = report
        self._metrics = metrics
        self._alive = alive
        self._timeout = request_timeout
        self._max = max_connections
        self._open: OrderedDict[asyncio.Task[None], asyncio.StreamWriter] = OrderedDict()
        """Connections waiting for a request (half-sent or idle), longest waiting first."""
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        failure: list[BaseException] = []
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._server = self._loop.run_until_complete(
                    asyncio.start_server(self._accept, addr, port, limit=MAX_REQUEST_BYTES)
                )
            except BaseException as exc:  # handed to the constructor's thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="health-server", daemon=True)
        self._thread.start()
        ready.wait(_START_TIMEOUT)
        if failure:
            self._thread.join(1.0)
            self._loop.close()
            raise failure[0]
        if self._server is None:
            raise OSError(f"the health server did not start within {_START_TIMEOUT}s")

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def connections(self) -> int:
        """Connections open and waiting for a request right now (for tests)."""
        return len(self._open)

    # --- per connection ----------------------------------------------------------------------

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A plain callback: start_server runs it at once; the task is ours to cancel.
        task = self._loop.create_task(self._serve_one(reader, writer))
        self._open[task] = writer
        while len(self._open) > self._max:
            oldest, oldest_writer = self._open.popitem(last=False)
            # Close the socket here: a task cancelled before its first step never runs its
            # ``finally``.
            oldest.cancel()
            oldest_writer.transport.abort()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        try:
            # The first request must be complete within the request timeout of connecting; a
            # later one may start within the idle timeout, then has the request timeout too.
            async with asyncio.timeout(self._timeout):
                head = await reader.readuntil(b"\r\n\r\n")
            while True:
                if task is not None:
                    self._open.pop(task, None)
                code, body, content_type = self._answer(head)
                keep = code < 400 or code in (404, 503)
                keep = keep and _keeps_alive(head)
                writer.write(
                    _response(
                        code,
                        body,
                        content_type,
                        with_body=not head.startswith(b"HEAD "),
                        keep_alive=keep,
                    )
                )
                async with asyncio.timeout(self._timeout):
                    await writer.drain()
                if not keep:
                    return
                if task is not None:
                    self._open[task] = writer  # idle now: among the first to go past the cap
                async with asyncio.timeout(self._idle):
                    start = await reader.readexactly(1)
                async with asyncio.timeout(self._timeout):
                    head = start + await reader.readuntil(b"\r\n\r\n")
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            logger.debug("health: closing an incomplete or slow request")
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._open.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                writer.transport.abort()

    def _answer(self, head: bytes) -> tuple[int, bytes, str]:
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return 400, b"bad request\n", "text/plain"
        method, target = parts[0], parts[1]
        if method not in ("GET", "HEAD"):
            return 405, b"only GET\n", "text/plain"
        path = target.split("?", 1)[0]
        if path in ("/healthz", "/livez"):
            ok = self._alive()
            return (200, b"ok\n", "text/plain") if ok else (503, b"stalled\n", "text/plain")
        if path == "/status":
            return 200, self._report().dumps().encode(), "application/json"
        if path == "/metrics":
            return 200, self._metrics(), CONTENT_TYPE_LATEST
        return 404, b"not found: try /healthz, /status or /metrics\n", "text/plain"

    # --- shutdown ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop accepting, drop open connections, stop the thread. Idempotent."""
        if self._loop.is_closed():
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for task, writer in list(self._open.items()):
                task.cancel()
                writer.transport.abort()
            self._open.clear()

        if self._loop.is_running():
            future = asyncio.run_coroutine_threadsafe(shutdown(), self._loop)
            with contextlib.suppress(Exception):
                future.result(2.0)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(2.0)
        if not self._thread.is_alive():
            self._loop.close()


def _keeps_alive(head: bytes) -> bool:
    """Whether the client lets the connection stay open: HTTP/1.1 without ``Connection:
    close`` (HTTP/1.0 and anything else close)."""
    lines = head.split(b"\r\n")
    if not lines[0].endswith(b" HTTP/1.1"):
        return False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"connection" and b"close" in value.lower():
            return False
    return True


def _response(
    code: int,
    body: bytes,
    content_type: str,
    *,
    with_body: bool = True,
    keep_alive: bool = False,
) -> bytes:
    """The whole response; ``with_body=False`` for HEAD (same headers, no body)."""
    head = (
        f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode("latin-1") + (body if with_body else b"")
