"""The agent's health server on real loopback sockets: endpoints, timeouts, connection cap.

Idle, half-sent requests (a slow or hostile client) must neither hold a thread each nor lock
out the operator's probe: the server serves every connection on one loop thread, closes a
request that is not complete within ``request_timeout`` and, past ``max_connections``, drops the
oldest unanswered connection.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from elasticjob_agent.health.server import MAX_REQUEST_BYTES, HealthServer
from elasticjob_agent.health.status import AgentStatus
from elasticjob_agent.protocol.health import EtcdStatus, HealthReport

# Generous: a deadline for the checks below, never a measure of speed.
_DEADLINE = 30.0


def serve(alive: list[bool], **limits: float) -> HealthServer:
    status = AgentStatus("job", "n", 3, 60.0, etcd=lambda: EtcdStatus(True, 1.0, None, ("e:1",)))
    return HealthServer(
        "127.0.0.1",
        0,
        status.report,
        lambda: b"m 1\n",
        lambda: alive[0],
        **limits,  # type: ignore[arg-type]
    )


@pytest.fixture
def server() -> Iterator[HealthServer]:
    s = serve([True], request_timeout=60.0, max_connections=16)
    yield s
    s.close()


def get(server: HealthServer, path: str, method: str = "GET") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=_DEADLINE)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def half_sent(server: HealthServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=_DEADLINE)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # no blank line: never complete
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """The server closed the connection: EOF, or a reset when our bytes were still unread."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_endpoints() -> None:
    alive = [True]
    s = serve(alive)
    try:
        assert get(s, "/healthz") == (200, b"ok\n")
        assert get(s, "/livez?verbose=1") == (200, b"ok\n")
        alive[0] = False
        assert get(s, "/healthz") == (503, b"stalled\n")
        code, body = get(s, "/status")
        assert code == 200 and HealthReport.loads(body.decode()).run_id == "job"
        assert json.loads(body)["etcd"]["reachable"] is True
        assert get(s, "/metrics") == (200, b"m 1\n")
        assert get(s, "/nope")[0] == 404
        assert get(s, "/healthz", method="POST")[0] == 405
        assert get(s, "/metrics", method="HEAD") == (200, b"")
    finally:
        s.close()


def test_many_idle_half_sent_connections_hold_no_threads_and_healthz_answers(
    server: HealthServer,
) -> None:
    before = threading.active_count()
    idle = [half_sent(server) for _ in range(300)]
    try:
        # Every idle connection was accepted and none of them got a thread.
        assert get(server, "/healthz") == (200, b"ok\n")
        assert threading.active_count() <= before
        assert server.connections <= 16
        # The oldest were dropped to admit the newest: they read EOF.
        assert closed_by_server(idle[0])
        assert get(server, "/status")[0] == 200
    finally:
        for sock in idle:
            sock.close()


def test_a_request_that_never_completes_is_closed_after_the_timeout() -> None:
    s = serve([True], request_timeout=0.2)
    try:
        sock = half_sent(s)
        with sock:
            assert closed_by_server(sock)  # well before _DEADLINE
        assert get(s, "/healthz")[0] == 200
    finally:
        s.close()


def test_an_oversized_request_is_closed(server: HealthServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=_DEADLINE) as sock:
        with contextlib.suppress(ConnectionResetError):  # the server may close mid-send
            sock.sendall(b"GET /healthz HTTP/1.1\r\nX: " + b"a" * (2 * MAX_REQUEST_BYTES))
        assert closed_by_server(sock)


def test_garbage_is_a_bad_request(server: HealthServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=_DEADLINE) as sock:
        sock.sendall(b"hello\r\n\r\n")
        assert sock.recv(64).startswith(b"HTTP/1.1 400")


def test_a_taken_port_is_an_os_error(server: HealthServer) -> None:
    with pytest.raises(OSError):
        HealthServer("127.0.0.1", server.port, lambda: None, lambda: b"", lambda: True)  # type: ignore[arg-type,return-value]


def _request(sock: socket.socket, path: str, extra: str = "") -> bytes:
    """One request on ``sock`` and its whole response (``Content-Length`` bytes of body)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[
            1
        ]
    )
    while len(body) < length:
        chunk = sock.recv(4096)
        assert chunk
        body += chunk
    return head


def test_a_connection_serves_request_after_request(server: HealthServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=_DEADLINE) as sock:
        for path in ("/status", "/healthz", "/status", "/nothing-here"):
            head = _request(sock, path)
            assert b"Connection: keep-alive" in head, head
        # Idle, waiting for the next request (counted once the server is back to reading).
        deadline = time.monotonic() + _DEADLINE
        while server.connections != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.connections == 1


def test_connection_close_and_http_1_0_close_after_the_answer(server: HealthServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=_DEADLINE) as sock:
        assert b"Connection: close" in _request(sock, "/status", "Connection: close\r\n")
        assert closed_by_server(sock)
    with socket.create_connection(("127.0.0.1", server.port), timeout=_DEADLINE) as sock:
        sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 200") and b"Connection: close" in reply


def test_an_idle_connection_is_closed_after_the_idle_timeout() -> None:
    s = serve([True], request_timeout=60.0, idle_timeout=0.2)
    try:
        with socket.create_connection(("127.0.0.1", s.port), timeout=_DEADLINE) as sock:
            _request(sock, "/healthz")
            assert closed_by_server(sock)  # well before _DEADLINE
    finally:
        s.close()


def test_idle_connections_give_way_to_new_ones_past_the_cap() -> None:
    s = serve([True], request_timeout=60.0, max_connections=4)
    try:
        idle = [
            socket.create_connection(("127.0.0.1", s.port), timeout=_DEADLINE) for _ in range(4)
        ]
        for sock in idle:
            _request(sock, "/healthz")
        # A fifth connection evicts the one idle for longest; the operator's next probe would
        # open a new connection.
        with socket.create_connection(("127.0.0.1", s.port), timeout=_DEADLINE) as fifth:
            assert b"200 OK" in _request(fifth, "/status")
            assert closed_by_server(idle[0])
        assert b"200 OK" in _request(idle[3], "/healthz")
        for sock in idle:
            sock.close()
    finally:
        s.close()
