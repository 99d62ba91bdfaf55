"""The agents' replication channel: mutual TLS with the job's CA, one request per connection.

Both ends present the node's certificate and accept only a certificate signed by the job's CA
(``ssl.CERT_REQUIRED`` on both sides). Peers are reached by pod IP, so the peer's host name is
not checked: the job's CA, whose private key nobody keeps, is the identity. The certificate
therefore carries both ``serverAuth`` and ``clientAuth``.

Wire (after the TLS handshake): one JSON line, at most 64 KiB, then raw bytes.

- ``{"op": "put", "manifest": {...}}`` + the files in manifest order: store a replica. Answer:
  ``{"ok": true}`` or ``{"ok": false, "error": "..."}``.
- ``{"op": "get", "shard": [step, rank, world_size]}``: answer ``{"ok": true, "manifest":
  {...}}`` + the files, or ``{"ok": false, ...}``.

The receiver of bytes always checks them against the manifest (``ShardStore.commit`` with
``expected``): a replica corrupted in the sender's memory or on the way is never installed.
Every transfer has a deadline (``timeout``); a peer that goes away mid-transfer is an error
for the caller, who tries the next source.
"""

from __future__ import annotations

import json
import logging
import socket
import socketserver
import ssl
import threading
import time
import zlib
from pathlib import Path
from typing import Any, BinaryIO

from elasticjob_agent.checkpoint.config import TlsPaths
from elasticjob_agent.checkpoint.manifest import ManifestError, ShardId, ShardManifest
from elasticjob_agent.checkpoint.store import (
    CHUNK,
    CheckpointError,
    CorruptShardError,
    ShardStore,
)
from elasticjob_agent.protocol.endpoints import Endpoint, parse_endpoints

logger = logging.getLogger(__name__)

MAX_HEADER = 64 << 10
MAX_CONNECTIONS = 8


class PeerError(CheckpointError):
    """A peer that refused, broke off or timed out; the caller tries the next source."""


def server_context(tls: TlsPaths) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(tls.cert, tls.key)
    ctx.load_verify_locations(tls.cacert)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(tls: TlsPaths) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False  # peers are pod IPs; the job's CA is the identity
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(tls.cacert)
    ctx.load_cert_chain(tls.cert, tls.key)
    return ctx


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` (the project's one endpoint parser); ``ValueError``
    otherwise."""
    parsed = parse_endpoints(endpoint, default_port=None)
    if len(parsed) != 1 or parsed[0].tls is not None:
        raise ValueError(f"invalid checkpoint peer endpoint {endpoint!r}: expected host:port")
    return parsed[0].host, parsed[0].port


def join_endpoint(host: str, port: int) -> str:
    return str(Endpoint(host, port))


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def arm(self, sock: socket.socket) -> None:
        left = self.end - time.monotonic()
        if left <= 0:
            raise PeerError("transfer deadline passed")
        sock.settimeout(left)


def _read_header(stream: BinaryIO) -> dict[str, Any]:
    line = stream.readline(MAX_HEADER + 1)
    if not line.endswith(b"\n"):
        raise PeerError("connection closed or header too long")
    try:
        doc = json.loads(line)
    except ValueError as exc:
        raise PeerError(f"bad header: {exc}") from None
    if not isinstance(doc, dict):
        raise PeerError("bad header: not an object")
    return doc


def _send_line(sock: socket.socket, doc: dict[str, Any]) -> None:
    sock.sendall(json.dumps(doc, separators=(",", ":")).encode() + b"\n")


def _send_files(
    sock: socket.socket, directory: Path, manifest: ShardManifest, deadline: _Deadline
) -> None:
    for entry in manifest.files:
        with open(directory / entry.name, "rb", buffering=0) as f:
            left = entry.size
            while left > 0:
                chunk = f.read(min(CHUNK, left))
                if not chunk:
                    raise PeerError(f"{manifest.shard}: {entry.name} is shorter than its manifest")
                deadline.arm(sock)
                sock.sendall(chunk)
                left -= len(chunk)


def _receive_into(
    store: ShardStore,
    manifest: ShardManifest,
    stream: BinaryIO,
    sock: socket.socket,
    *,
    deadline: _Deadline,
    origin: str,
) -> None:
    """Stream a shard's files into ``store`` and install it if it matches ``manifest``."""
    reservation = store.reserve(manifest.shard, manifest.size)
    crcs: dict[str, int] = {}
    try:
        for entry in manifest.files:
            crc = 0
            with open(reservation.directory / entry.name, "wb", buffering=0) as f:
                left = entry.size
                while left > 0:
                    deadline.arm(sock)
                    chunk = stream.read(min(CHUNK, left))
                    if not chunk:
                        raise PeerError(f"{manifest.shard}: the peer closed mid-transfer")
                    f.write(chunk)
                    crc = zlib.crc32(chunk, crc)  # summed on the way in: no second pass
                    left -= len(chunk)
            crcs[entry.name] = crc
    except BaseException:
        store.release(reservation)
        raise
    store.commit(reservation, origin=origin, expected=manifest, computed=crcs)


class PeerServer:
    """Serves ``put`` and ``get`` on ``host:port`` for one agent's store, over mutual TLS."""

    def __init__(
        self, store: ShardStore, tls: TlsPaths, host: str, port: int, *, timeout: float
    ) -> None:
        self.store = store
        self.timeout = timeout
        self._context = server_context(tls)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.on_replica: list[Any] = []
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer._handle(self.request, self.client_address)

        family = socket.AF_INET6 if ":" in host else socket.AF_INET

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True
            address_family = family

        self._server = Server((host, port), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="elasticjob-ckpt-peer", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, raw: socket.socket, address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            raw.close()
            return
        try:
            deadline = _Deadline(self.timeout)
            deadline.arm(raw)
            with self._context.wrap_socket(raw, server_side=True) as sock:
                stream = sock.makefile("rb")
                request = _read_header(stream)
                op = request.get("op")
                if op == "put":
                    self._put(sock, stream, request, deadline)
                elif op == "get":
                    self._get(sock, request, deadline)
                else:
                    _send_line(sock, {"ok": False, "error": f"unknown op {op!r}"})
        except (OSError, PeerError, ssl.SSLError) as exc:
            logger.info("checkpoint peer %s: %s", address, exc)
        finally:
            self._slots.release()

    def _put(
        self, sock: ssl.SSLSocket, stream: BinaryIO, request: dict[str, Any], deadline: _Deadline
    ) -> None:
        try:
            manifest = ShardManifest.decode(json.dumps(request.get("manifest")).encode())
            _receive_into(
                self.store, manifest, stream, sock, deadline=deadline, origin=manifest.origin
            )
        except (CheckpointError, ManifestError) as exc:
            _send_line(sock, {"ok": False, "error": str(exc)})
            return
        logger.info("checkpoint: holding a replica of %s from %s", manifest.shard, manifest.origin)
        _send_line(sock, {"ok": True})
        for callback in self.on_replica:
            callback(manifest)

    def _get(self, sock: ssl.SSLSocket, request: dict[str, Any], deadline: _Deadline) -> None:
        try:
            shard = ShardId.from_list(request.get("shard"))
        except ManifestError as exc:
            _send_line(sock, {"ok": False, "error": str(exc)})
            return
        manifest = self.store.manifest(shard)
        if manifest is None:
            _send_line(sock, {"ok": False, "error": f"{shard} is not held here"})
            return
        # Open the files before answering: a shard dropped meanwhile is refused, not torn.
        directory = self.store.shard_dir(shard)
        try:
            _send_line(sock, {"ok": True, "manifest": json.loads(manifest.encode())})
            _send_files(sock, directory, manifest, deadline)
        except FileNotFoundError:
            return  # the receiver sees a short transfer and tries its next source


def _connect(endpoint: str, tls: TlsPaths, deadline: _Deadline) -> ssl.SSLSocket:
    host, port = split_endpoint(endpoint)
    left = deadline.end - time.monotonic()
    try:
        raw = socket.create_connection((host, port), timeout=max(0.01, left))
        deadline.arm(raw)
        return client_context(tls).wrap_socket(raw, server_side=False)
    except (OSError, ssl.SSLError) as exc:
        raise PeerError(f"checkpoint peer {endpoint}: {exc}") from exc


def push(
    endpoint: str, tls: TlsPaths, store: ShardStore, shard: ShardId, *, timeout: float
) -> None:
    """Send this node's ``shard`` to the peer at ``endpoint`` as a replica; ``PeerError`` if the
    peer refuses (over its limit, a checksum mismatch) or breaks off."""
    manifest = store.manifest(shard)
    if manifest is None:
        raise CheckpointError(f"{shard} is not held here")
    deadline = _Deadline(timeout)
    with _connect(endpoint, tls, deadline) as sock:
        try:
            _send_line(sock, {"op": "put", "manifest": json.loads(manifest.encode())})
            _send_files(sock, store.shard_dir(shard), manifest, deadline)
            deadline.arm(sock)
            answer = _read_header(sock.makefile("rb"))
        except (OSError, ssl.SSLError) as exc:
            raise PeerError(f"checkpoint peer {endpoint}: {exc}") from exc
    if not answer.get("ok"):
        raise PeerError(f"checkpoint peer {endpoint} refused {shard}: {answer.get('error')}")


def fetch(
    endpoint: str, tls: TlsPaths, store: ShardStore, shard: ShardId, *, timeout: float
) -> None:
    """Copy ``shard`` from the peer at ``endpoint`` into ``store`` (checked against the peer's
    manifest); ``PeerError`` or ``CorruptShardError`` and nothing installed otherwise."""
    deadline = _Deadline(timeout)
    with _connect(endpoint, tls, deadline) as sock:
        try:
            _send_line(sock, {"op": "get", "shard": shard.as_list()})
            stream = sock.makefile("rb")
            deadline.arm(sock)
            answer = _read_header(stream)
            if not answer.get("ok"):
                raise PeerError(f"checkpoint peer {endpoint}: {answer.get('error')}")
            manifest = ShardManifest.decode(json.dumps(answer.get("manifest")).encode())
            if manifest.shard != shard:
                raise PeerError(f"checkpoint peer {endpoint} sent {manifest.shard}, not {shard}")
            _receive_into(store, manifest, stream, sock, deadline=deadline, origin=manifest.origin)
        except (OSError, ssl.SSLError, ManifestError) as exc:
            raise PeerError(f"checkpoint peer {endpoint}: {exc}") from exc
        except CorruptShardError as exc:
            raise CorruptShardError(f"from {endpoint}: {exc}") from exc
