"""The health server: ``/healthz`` (liveness), ``/status`` (HealthReport v1), ``/metrics``.

A stdlib ``ThreadingHTTPServer`` in a daemon thread; handlers only call the providers given to
``HealthServer`` (which must be thread-safe and quick).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST

from elasticjob_agent.protocol.health import HealthReport

logger = logging.getLogger(__name__)


class HealthServer:
    def __init__(
        self,
        addr: str,
        port: int,
        report: Callable[[], HealthReport],
        metrics: Callable[[], bytes],
        alive: Callable[[], bool],
    ) -> None:
        providers = (report, metrics, alive)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                get_report, get_metrics, is_alive = providers
                path = self.path.split("?", 1)[0]
                if path in ("/healthz", "/livez"):
                    ok = is_alive()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"stalled\n", "text/plain")
                elif path == "/status":
                    body = get_report().dumps().encode()
                    self._send(200, body, "application/json")
                elif path == "/metrics":
                    self._send(200, get_metrics(), CONTENT_TYPE_LATEST)
                else:
                    self._send(404, b"not found: try /healthz, /status or /metrics\n", "text/plain")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                logger.debug("health %s", format % args)

        self._server = ThreadingHTTPServer((addr, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health-server", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(2.0)
