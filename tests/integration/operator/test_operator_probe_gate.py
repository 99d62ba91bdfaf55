"""The operator's probe bound (``probes.ProbeGate``) and its verdict under CPU starvation,
against real HTTP servers on loopback.

The gate bounds how many probes are in flight across all jobs, and a probe's timeout starts
only once it holds a slot: a probe queued behind others is not a pod that did not answer. A
timeout that fires long after it was due means the operator's own loop was starved: the probe
gets one more timeout's time (the answer may be waiting unread), and when that fires late too it
gives no verdict (``None``, ``no_verdict``) instead of "unreachable" or "silent".
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import pytest
from elasticjob_agent.protocol.health import AgentState, EtcdStatus, HealthReport
from elasticjob_operator import probes

from tests.support.waiting import wait_until

REPORT = HealthReport(
    run_id="run",
    node="n",
    state=AgentState.RUNNING,
    etcd=EtcdStatus(reachable=True, last_contact=1.0, unreachable_since=None),
).dumps()
PORT = 29_556
T = TypeVar("T")


class Server:
    """Answers every request after ``delay`` s; counts the requests it holds at once."""

    def __init__(self, delay: float, body: bytes) -> None:
        self.delay = delay
        self.body = body
        self.active = 0
        self.most = 0
        self.received = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            self.received += 1
            self.active += 1
            self.most = max(self.most, self.active)
            await asyncio.sleep(self.delay)
            self.active -= 1
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(self.body), self.body)
            )
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def address() -> AsyncIterator[str]:
    yield f"127.{10 + uuid.uuid4().int % 200}.1.1"


async def test_the_gate_bounds_probes_in_flight_and_queued_probes_do_not_time_out(
    address: str,
) -> None:
    # Three probes through one slot take 3 x 0.8 s, longer than the 2 s timeout: each still
    # answers, because its timeout starts when it gets the slot.
    server = Server(0.8, REPORT.encode())
    listening = await asyncio.start_server(server.handle, address, PORT)
    try:
        async with probes.new_session() as session:
            reports = await probes.fetch_reports(
                session,
                {"a": address, "b": address, "c": address},
                within=2.0,
                port=PORT,
                gate=probes.ProbeGate(1),
            )
    finally:
        listening.close()
    assert sorted(reports.valid) == ["a", "b", "c"]
    assert server.most == 1


async def test_an_unbounded_gate_lets_every_probe_run_at_once(address: str) -> None:
    server = Server(0.5, REPORT.encode())
    listening = await asyncio.start_server(server.handle, address, PORT)
    try:
        async with probes.new_session() as session:
            reports = await probes.fetch_reports(
                session, {str(i): address for i in range(4)}, within=5.0, port=PORT
            )
    finally:
        listening.close()
    assert len(reports.valid) == 4
    assert server.most == 4


def starve(times: int) -> None:
    """Stop the whole process for 1 s (as a CPU-starved operator would), ``times`` times: now,
    and again 0.1 s after each stop (inside the extra time a late timeout grants)."""
    loop = asyncio.get_running_loop()
    for i in range(1, times):
        loop.call_at(loop.time() + i * 1.1, time.sleep, 1.0)
    time.sleep(1.0)


async def _starved_probe(
    address: str, body: bytes, delay: float, starved: int, probe: Callable[[Any], Awaitable[T]]
) -> T:
    """``probe(session)`` against a server that answers ``body`` after ``delay`` s, while the
    process is stopped ``starved`` times (``starve``)."""
    server = Server(delay, body)
    listening = await asyncio.start_server(server.handle, address, PORT)
    try:
        async with probes.new_session() as session:
            running = asyncio.ensure_future(probe(session))
            # Starve while the probe waits for its answer.
            await wait_until(lambda: server.received > 0, "the probe reaching the server")
            starve(starved)
            return await running
    finally:
        listening.close()


async def _etcd_verdict(address: str, delay: float, starved: int) -> bool | None:
    return await _starved_probe(
        address,
        b'{"health": "true"}',
        delay,
        starved,
        lambda session: probes.probe_etcd(session, [f"{address}:{PORT}"], within=0.2),
    )


async def test_an_etcd_answer_delayed_by_a_starved_loop_still_counts(address: str) -> None:
    # etcd answered 0.3 s in; the probe's 0.2 s timeout fired 0.8 s late, with the answer
    # unread: it gets one more timeout's time instead of being cut.
    assert await _etcd_verdict(address, 0.3, starved=1) is True


async def test_an_etcd_probe_starved_twice_gives_no_verdict(address: str) -> None:
    assert await _etcd_verdict(address, 5.0, starved=2) is None


async def test_an_etcd_silent_through_the_extra_time_is_unreachable(address: str) -> None:
    # Starved once, then given its timeout on time: it had its chance.
    assert await _etcd_verdict(address, 5.0, starved=1) is False


async def _reports(address: str, delay: float, starved: int) -> probes.Reports:
    return await _starved_probe(
        address,
        REPORT.encode(),
        delay,
        starved,
        lambda session: probes.fetch_reports(session, {"a": address}, within=0.2, port=PORT),
    )


async def test_a_report_delayed_by_a_starved_loop_still_counts(address: str) -> None:
    reports = await _reports(address, 0.3, starved=1)
    assert list(reports.valid) == ["a"] and not reports.no_verdict


async def test_a_report_starved_twice_gives_no_verdict(address: str) -> None:
    # Neither a report, nor refused, nor silent: nothing is known of the pod.
    reports = await _reports(address, 5.0, starved=2)
    assert (reports.valid, reports.invalid, reports.no_verdict) == ({}, {}, frozenset({"a"}))


async def test_an_etcd_that_refuses_is_unreachable(address: str) -> None:
    async with probes.new_session() as session:
        assert await probes.probe_etcd(session, [f"{address}:{PORT}"], within=1.0) is False


async def test_an_etcd_that_answers_is_reachable(address: str) -> None:
    server = Server(0.0, b'{"health": "true"}')
    listening = await asyncio.start_server(server.handle, address, PORT)
    try:
        async with probes.new_session() as session:
            assert await probes.probe_etcd(
                session, [f"{address}:{PORT}"], within=5.0, gate=probes.ProbeGate(2)
            )
    finally:
        listening.close()


async def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        probes.ProbeGate(-1)


def test_a_session_has_no_pool_bound_of_its_own() -> None:
    async def limit() -> int:
        async with probes.new_session() as session:
            connector = session.connector
            assert isinstance(connector, aiohttp.TCPConnector)
            return connector.limit

    assert asyncio.run(limit()) == 0
