"""The operator's reads from pods and etcd against real servers on loopback.

Hostile ``/status`` servers (huge, endless, slow, gzip bomb, NaN, Infinity, deeply nested, wrong
types, too many headers) each make their pod's report invalid with a reason, while the operator's
memory stays bounded and a good agent polled in the same sweep is read as usual. The seed race
runs against a real etcd with the agent's own restart counter.
"""

from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc
import uuid
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import pytest
from elasticjob_agent.etcd.session import EtcdSession
from elasticjob_agent.protocol.endpoints import parse_endpoints
from elasticjob_agent.protocol.health import AgentState, EtcdStatus, HealthReport
from elasticjob_agent.protocol.keys import JobKeys
from elasticjob_agent.protocol.restarts import RestartReason
from elasticjob_agent.supervision.restart_counter import JobRestartCounter
from elasticjob_operator import probes
from elasticjob_operator.core import seeding

GOOD = HealthReport(
    run_id="run",
    node="good",
    state=AgentState.RUNNING,
    etcd=EtcdStatus(reachable=True, last_contact=1.0, unreachable_since=None),
    round=1,
    world_size=2,
)

Writer = Callable[[asyncio.StreamWriter], Awaitable[None]]


def _headers(length: int | None = None, extra: str = "") -> bytes:
    head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra
    if length is not None:
        head += f"Content-Length: {length}\r\n"
    return (head + "Connection: close\r\n\r\n").encode()


async def _body(body: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(_headers(len(body)) + body)
    await writer.drain()


async def _endless(writer: asyncio.StreamWriter) -> None:
    """300 MiB and more without a Content-Length, as fast as the reader takes it."""
    writer.write(_headers())
    chunk = b"[" * 65536
    for _ in range(300 * 16):
        writer.write(chunk)
        await writer.drain()


async def _declared_huge(writer: asyncio.StreamWriter) -> None:
    writer.write(_headers(300 * 1024 * 1024))
    chunk = b" " * 65536
    for _ in range(300 * 16):
        writer.write(chunk)
        await writer.drain()


async def _slow(writer: asyncio.StreamWriter) -> None:
    body = GOOD.dumps().encode()
    writer.write(_headers(len(body)))
    for byte in body:
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0.05)


BOMB = zlib.compress(b" " * (50 * 1024 * 1024), 9)
"""50 MiB that deflate to 50 KiB (made once, before any memory is measured)."""


async def _gzip_bomb(writer: asyncio.StreamWriter) -> None:
    writer.write(_headers(len(BOMB), "Content-Encoding: deflate\r\n") + BOMB)
    await writer.drain()


async def _many_headers(writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\n")
    for i in range(100_000):
        writer.write(f"X-Junk-{i}: {'j' * 4000}\r\n".encode())
        await writer.drain()


def _report(**changes: Any) -> bytes:
    data = GOOD.to_json()
    data.update(changes)
    return json.dumps(data).encode()


HOSTILE: dict[str, tuple[Writer, str]] = {
    "endless": (_endless, "larger than"),
    "declared-huge": (_declared_huge, "declares"),
    "slow": (_slow, "not complete within"),
    "gzip-bomb": (_gzip_bomb, "Content-Encoding"),
    "nan": (lambda w: _body(_report().replace(b'"worldSize": 2', b'"worldSize": NaN'), w), "NaN"),
    "infinity": (lambda w: _body(_report().replace(b'"round": 1', b'"round": Infinity'), w), "Inf"),
    "nested": (lambda w: _body(b'{"a":' * 5000 + b"1" + b"}" * 5000, w), "deeper"),
    "wrong-types": (lambda w: _body(_report(round="one"), w), "round"),
    "big-int": (lambda w: _body(_report(round=10**19), w), "round"),
}


async def _serve(host: str, handler: Writer) -> asyncio.Server:
    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            await handler(writer)
        except (
            ConnectionError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            asyncio.CancelledError,
        ):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(on_connect, host, PORT)


PORT = 29_555
WITHIN = 5.0
"""The probe timeout here: long enough that the good server always answers in time although it
shares this process's event loop (and a loaded machine) with the hostile ones; the slow server
still takes 10 s."""


@pytest.fixture
async def servers() -> AsyncIterator[dict[str, str]]:
    """``{pod name: ip}``: one loopback address per server, all on ``PORT``."""
    base = 10 + uuid.uuid4().int % 200
    pods: dict[str, str] = {}
    started = []
    cases: dict[str, Writer] = {name: writer for name, (writer, _) in HOSTILE.items()}
    cases["good"] = lambda w: _body(GOOD.dumps().encode(), w)
    cases["headers"] = _many_headers
    for i, (name, handler) in enumerate(cases.items()):
        ip = f"127.{base}.0.{i + 1}"
        started.append(await _serve(ip, handler))
        pods[name] = ip
    yield pods
    for server in started:
        server.close()
    for server in started:
        await server.wait_closed()


async def test_hostile_reports_are_refused_with_a_reason_and_memory_stays_bounded(
    servers: dict[str, str],
) -> None:
    async with probes.new_session() as session:
        gc.collect()
        tracemalloc.start()
        try:
            for _ in range(3):
                got = await probes.fetch_reports(session, servers, within=WITHIN, port=PORT)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert got.valid == {"good": GOOD}
    for name, (_, says) in HOSTILE.items():
        assert says in got.invalid.get(name, ""), (name, got.invalid.get(name))
    # A pod that sends 100 000 headers is refused by the HTTP parser's limits.
    assert "malformed HTTP response" in got.invalid.get("headers", ""), got.invalid.get("headers")
    # 11 pods polled three times: bounded by the cap per pod, nowhere near the 300 MiB served
    # (1.5 MiB measured).
    print(f"peak traced memory over 3 sweeps of {len(servers)} pods: {peak / 2**20:.1f} MiB")
    assert peak < 8 * 1024 * 1024, peak


async def test_one_hostile_pod_does_not_hold_up_the_others(servers: dict[str, str]) -> None:
    async with probes.new_session() as session:
        sweeps = [
            probes.fetch_reports(session, servers, within=WITHIN, port=PORT) for _ in range(5)
        ]
        results = await asyncio.gather(*sweeps)
    assert all(r.valid.get("good") == GOOD for r in results)


@pytest.fixture
def link(etcd_server: Any) -> Iterator[EtcdSession]:
    session = EtcdSession(parse_endpoints(etcd_server.endpoint), request_timeout=2.0, lease_ttl=5)
    yield session
    session.close()


async def test_the_seed_race_an_agent_counts_before_the_seed_lands(
    etcd_server: Any, link: EtcdSession
) -> None:
    """After a recreation the status says failure 3; an agent counts a failure in the new etcd
    before the operator's seed lands. The job has had 4 failures, and etcd must say so."""
    keys = JobKeys("/elasticjob", f"run-{uuid.uuid4().hex[:8]}")
    agent = JobRestartCounter(link, keys, "node-a", patience=5)
    assert agent.record(1, RestartReason.FAILURE).counts.by_reason == {"failure": 1}
    async with aiohttp.ClientSession() as session:
        seed = {"failure": 3, "membership": 2}
        assert await probes.write_seed(
            session, etcd_server.endpoint, seeding.SeedKeys.of(keys), seed
        )
        # Idempotent: a second write (an operator restarted before recording it) changes nothing.
        assert await probes.write_seed(
            session, etcd_server.endpoint, seeding.SeedKeys.of(keys), seed
        )
    assert agent.read().by_reason == {"failure": 4, "membership": 2}
    # The next restart continues from there.
    assert agent.record(2, RestartReason.FAILURE).counts.by_reason == {
        "failure": 5,
        "membership": 2,
    }


async def test_the_seed_lands_first_and_the_agents_continue_from_it(
    etcd_server: Any, link: EtcdSession
) -> None:
    keys = JobKeys("/elasticjob", f"run-{uuid.uuid4().hex[:8]}")
    async with aiohttp.ClientSession() as session:
        assert await probes.write_seed(
            session, etcd_server.endpoint, seeding.SeedKeys.of(keys), {"failure": 2}
        )
    agent = JobRestartCounter(link, keys, "node-a", patience=5)
    assert agent.read().by_reason == {"failure": 2}
    assert agent.record(1, RestartReason.TIMER).counts.by_reason == {"failure": 2, "timer": 1}


async def test_the_etcd_probe_reads_a_real_etcd(etcd_server: Any) -> None:
    async with probes.new_session() as session:
        assert await probes.probe_etcd(session, [etcd_server.endpoint])
        etcd_server.stop()
        assert not await probes.probe_etcd(session, [etcd_server.endpoint])
