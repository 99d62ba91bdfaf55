"""The agent's checkpoint service for its workers: a Unix socket (``ELASTICJOB_CHECKPOINT_SOCKET``)
in front of the node's ``CheckpointNode``, and the worker's client of it.

One JSON line per request and per answer, on a connection a worker keeps open:

- ``{"op": "reserve", "shard": [step, rank, world], "size": n}``: ``{"token": t, "dir": path}``
- ``{"op": "commit", "token": t}``, ``{"op": "abort", "token": t}``: ``{}``
- ``{"op": "candidates"}``: ``{"shards": [[step, rank, world], ...]}``
- ``{"op": "fetch", "shard": [...]}``: ``{"dir": path, "source": "memory" | "peer <node>" |
  "disk"}``
- ``{"op": "restored", "step": s, "report": {...}}``: ``{}`` (``report``: optional,
  ``RestoreReport.as_status()``'s shape)
- ``{"op": "restore_failed", "reason": "..."}``: ``{}``
- ``{"op": "flush", "timeout": seconds}``: ``{"idle": bool}``

Every answer also has ``"ok": true``. A refusal is ``{"ok": false, "error": "...", "limit":
bool}`` (``limit``: over the memory limit).
The socket lives in the agent's private work directory; only the node's workers reach it.
"""

from __future__ import annotations

import json
import logging
import socket
import socketserver
import threading
from pathlib import Path
from typing import Any

from elasticjob_agent.checkpoint.manifest import ManifestError, ShardId
from elasticjob_agent.checkpoint.node import CheckpointNode, Source
from elasticjob_agent.checkpoint.resize import RestoreReport
from elasticjob_agent.checkpoint.store import (
    CheckpointError,
    CheckpointLimitError,
    Reservation,
)

logger = logging.getLogger(__name__)

MAX_LINE = 1 << 20
MAX_REASON = 4096


class CheckpointService:
    """Serves ``node`` to the workers at the Unix socket ``path``."""

    def __init__(self, node: CheckpointNode, path: str) -> None:
        self.node = node
        self.path = path
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                while line := self.rfile.readline(MAX_LINE):
                    answer = outer.answer(line)
                    self.wfile.write(json.dumps(answer).encode() + b"\n")
                    self.wfile.flush()

        class Server(socketserver.ThreadingUnixStreamServer):
            daemon_threads = True

        Path(path).unlink(missing_ok=True)
        self._server = Server(path, Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="elasticjob-ckpt-workers", daemon=True
        )
        self._thread.start()

    def answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("a request is a JSON object")
            return {"ok": True, **self._do(request)}
        except CheckpointLimitError as exc:
            return {"ok": False, "error": str(exc), "limit": True}
        except (CheckpointError, ManifestError, ValueError, KeyError, TypeError) as exc:
            return {"ok": False, "error": str(exc), "limit": False}

    def _do(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        node = self.node
        if op == "reserve":
            reservation = node.reserve(ShardId.from_list(request["shard"]), int(request["size"]))
            return {"token": reservation.token, "dir": str(reservation.directory)}
        if op == "commit":
            node.commit(str(request["token"]))
            return {}
        if op == "abort":
            node.abort(str(request["token"]))
            return {}
        if op == "candidates":
            return {"shards": [s.as_list() for s in node.candidates()]}
        if op == "fetch":
            source = node.fetch(ShardId.from_list(request["shard"]))
            return {"dir": str(source.directory), "source": source.kind}
        if op == "restored":
            raw = request.get("report")
            report = RestoreReport.from_status(raw) if raw is not None else None
            node.restored(int(request["step"]), report)
            return {}
        if op == "restore_failed":
            node.restore_failed(str(request["reason"])[:MAX_REASON])
            return {}
        if op == "flush":
            return {"idle": node.flush(float(request.get("timeout", 60)))}
        raise ValueError(f"unknown checkpoint request {op!r}")

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        Path(self.path).unlink(missing_ok=True)


class ServiceClient:
    """A worker's connection to its agent's checkpoint service; the same methods as
    ``CheckpointNode`` (what ``checkpoint.api`` needs of either)."""

    def __init__(self, path: str, timeout: float = 600.0) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        self._sock.connect(path)
        self._file = self._sock.makefile("rwb")
        self._lock = threading.Lock()

    def _call(self, **request: Any) -> dict[str, Any]:
        with self._lock:
            self._file.write(json.dumps(request).encode() + b"\n")
            self._file.flush()
            line = self._file.readline(MAX_LINE)
        if not line:
            raise CheckpointError("the agent's checkpoint service closed the connection")
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            error = str(answer.get("error"))
            raise CheckpointLimitError(error) if answer.get("limit") else CheckpointError(error)
        return answer

    def reserve(self, shard: ShardId, size: int) -> Reservation:
        answer = self._call(op="reserve", shard=shard.as_list(), size=size)
        return Reservation(str(answer["token"]), shard, size, Path(answer["dir"]))

    def commit(self, token: str) -> None:
        self._call(op="commit", token=token)

    def abort(self, token: str) -> None:
        self._call(op="abort", token=token)

    def candidates(self) -> list[ShardId]:
        return [ShardId.from_list(s) for s in self._call(op="candidates")["shards"]]

    def fetch(self, shard: ShardId) -> Source:
        answer = self._call(op="fetch", shard=shard.as_list())
        return Source(str(answer["source"]), Path(answer["dir"]))

    def restored(self, step: int, report: RestoreReport | None = None) -> None:
        self._call(
            op="restored", step=step, report=report.as_status() if report is not None else None
        )

    def restore_failed(self, reason: str) -> None:
        self._call(op="restore_failed", reason=reason[:MAX_REASON])

    def flush(self, timeout: float) -> bool:
        return bool(self._call(op="flush", timeout=timeout)["idle"])

    def close(self) -> None:
        self._file.close()
        self._sock.close()
