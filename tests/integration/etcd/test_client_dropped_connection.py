"""The shared etcd client when one request drops the connection under others in flight.

A link that answers nothing is dropped after a few silent deadlines; grpc then cancels every
other call on that channel with ``CancelledError``. Those calls must surface as the documented
``RendezvousConnectionError`` (which callers retry), not as a cancellation of their task: that
leaked out of ``next_rendezvous`` once (random schedules, seed 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from aetcd import rpc
from elasticjob_agent.etcd.client import EtcdClient
from elasticjob_agent.rendezvous import RendezvousConnectionError

from tests.support.etcd_server import EtcdServer
from tests.support.waiting import wait_until

TIMEOUT = 0.5


async def _requests_until(client: EtcdClient, stop_at: float, seen: list[BaseException]) -> None:
    while time.monotonic() < stop_at:
        try:
            await client.range(b"k")
        except RendezvousConnectionError as exc:
            seen.append(exc)


@pytest.mark.timeout(60)
async def test_calls_on_a_dropped_connection_raise_connection_errors(
    etcd_server: EtcdServer,
) -> None:
    client = EtcdClient(etcd_server.endpoint, request_timeout=TIMEOUT)
    await client.prepare()
    etcd_server.freeze()
    try:
        stop_at = time.monotonic() + 8 * TIMEOUT
        seen: list[BaseException] = []
        # Staggered callers: whenever one hits the deadline that drops the channel, another is
        # in flight on it.
        callers = []
        for _ in range(4):
            callers.append(asyncio.create_task(_requests_until(client, stop_at, seen)))
            await asyncio.sleep(TIMEOUT / 4)
        results = await asyncio.gather(*callers, return_exceptions=True)
    finally:
        etcd_server.thaw()
    assert results == [None] * 4, f"a caller died with {results!r}"
    dropped = [e for e in seen if "dropped during the request" in str(e)]
    assert dropped, f"no call was in flight when the channel dropped: {seen!r}"
    assert not client.reachability().reachable
    await client.range(b"k")  # and it reconnects once etcd answers again
    assert client.reachability().reachable
    await client.close()


@pytest.mark.timeout(60)
async def test_a_watch_hears_when_its_stream_is_dropped(etcd_server: EtcdServer) -> None:
    client = EtcdClient(etcd_server.endpoint, request_timeout=TIMEOUT)
    await client.prepare()
    async with client.watch(b"w") as watch:
        etcd_server.freeze()
        try:
            waiting = asyncio.create_task(watch.next(within=None))
            # Silent deadlines until the client drops the channel, and the watch stream with it.
            while client.reachability().reachable or client._channel is not None:
                with contextlib.suppress(RendezvousConnectionError):
                    await client.range(b"k")
            with pytest.raises(RendezvousConnectionError):
                await asyncio.wait_for(waiting, 1.0)
        finally:
            etcd_server.thaw()
    await client.close()


async def test_cancelling_the_caller_still_cancels(etcd_server: EtcdServer) -> None:
    client = EtcdClient(etcd_server.endpoint, request_timeout=5)
    await client.prepare()
    etcd_server.freeze()
    try:
        sent = client.requests
        task = asyncio.create_task(client.range(b"k"))
        await wait_until(lambda: client.requests > sent, "the request in flight")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        etcd_server.thaw()
    await client.close()


@pytest.mark.timeout(60)
async def test_a_keep_alive_after_etcd_restarted_uses_a_new_stream(etcd_server: EtcdServer) -> None:
    # The long-lived keep-alive stream dies with the server. The next refresh must open a new
    # one, not write to the finished stream (grpc: InvalidStateError "RPC already finished"),
    # which once killed the lease keeper for good: the node's keys expired every TTL.
    client = EtcdClient(etcd_server.endpoint, request_timeout=2.0)
    await client.prepare()
    lease = await client.grant(30)
    assert await client.keepalive(lease) > 0
    etcd_server.kill()
    etcd_server.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            assert await client.keepalive(lease) > 0  # the lease survives a restart
            break
        except RendezvousConnectionError:
            assert time.monotonic() < deadline, "no keep-alive got through after the restart"
            await asyncio.sleep(0.2)
    await client.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["call cancelled", "connection dropped"])
async def test_watch_requests_on_a_stream_cancelled_before_it_started_are_bounded(
    etcd_server: EtcdServer, how: str
) -> None:
    """grpc never completes a write on a stream call cancelled before its initial metadata was
    sent (a channel dropped under a fresh watch stream): the watch creation and the cancel that
    write on it must fail within the request deadline, never hang (the N = 1024 hang)."""
    client = EtcdClient(etcd_server.endpoint, request_timeout=TIMEOUT)
    try:
        await client.prepare()
        stream = client._watch_stream()
        if how == "call cancelled":
            stream._call.cancel()  # before anything was written on it
        else:
            client._failed(drop=True)  # what a failed request does: cancel streams, close channel
        create = rpc.WatchCreateRequest(key=b"k")
        with pytest.raises(RendezvousConnectionError):
            await asyncio.wait_for(stream.add(create), 20 * TIMEOUT)
        await asyncio.wait_for(stream.cancel(1), 20 * TIMEOUT)  # best effort, bounded
        # The client opens a new stream and works again.
        async with client.watch(b"k") as watch:
            await client.put(b"k", b"v")
            assert [bytes(e.kv.value) for e in await watch.next(5.0)] == [b"v"]
    finally:
        await client.close()


@pytest.mark.timeout(60)
async def test_concurrent_watch_creations_share_one_stream(etcd_server: EtcdServer) -> None:
    """Two writes at once on one stream fail in grpc ("Internal error from Core"): the stream
    serializes them, so many watchers created together all work."""
    client = EtcdClient(etcd_server.endpoint, request_timeout=5.0)
    try:
        await client.prepare()
        watches = [client.watch(f"k{i}".encode()) for i in range(32)]
        await asyncio.gather(*(w.__aenter__() for w in watches))
        await client.put(b"k7", b"seven")
        assert [bytes(e.kv.value) for e in await watches[7].next(5.0)] == [b"seven"]
        await asyncio.gather(*(w.__aexit__(None, None, None) for w in watches))
    finally:
        await client.close()
