"""The lease keeper against a real etcd: a lease outlives what happens to the ones before it.

The keys of a node hang on its lease; a refresh that comes too late loses them, and the node's
peers see it vanish. Waits are bounded; nothing here is timed except by etcd's own TTL.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from elasticjob_agent.etcd.client import EtcdClient
from elasticjob_agent.etcd.messages import op_put
from elasticjob_agent.etcd.session import LeaseKeeper

from tests.support.etcd_server import EtcdServer
from tests.support.waiting import WAIT_LIMIT, wait_until

# The agent's request deadline: longer than a third of the TTLs used here.
REQUEST_TIMEOUT = 5.0


async def _put_on(client: EtcdClient, key: bytes, lease: int) -> None:
    await client.txn([], [op_put(key, b"1", lease=lease)])


async def _exists(client: EtcdClient, key: bytes) -> bool:
    return int((await client.range(key, count_only=True)).count) > 0


@pytest.mark.timeout(90)
async def test_a_replaced_lease_is_refreshed_on_a_schedule_of_its_own(
    etcd_server: EtcdServer,
) -> None:
    client = EtcdClient(etcd_server.endpoint, request_timeout=REQUEST_TIMEOUT)
    keeper = LeaseKeeper(client, 2)
    try:
        first = await keeper.current()
        old_task = keeper._task
        await keeper.lost()  # what a request that found the lease gone does
        second = await keeper.current()
        assert second != first
        assert keeper._task is not old_task, "the new lease kept the old refresh schedule"
        assert old_task is not None
        await wait_until(old_task.done, "the old refresh schedule to end")
        assert old_task.cancelled()
        await _put_on(client, b"/lk/second", second)
        refreshed = keeper.refreshes
        # Three TTLs: without refreshes, etcd drops the key after one.
        await wait_until(lambda: keeper.refreshes >= refreshed + 4, "four refreshes")
        assert await _exists(client, b"/lk/second")
        assert list(client._keepalive_calls) == [second], "the old lease's stream stayed open"
    finally:
        await keeper.stop()
        await client.close()


@pytest.mark.timeout(90)
async def test_two_leases_refresh_on_streams_of_their_own(etcd_server: EtcdServer) -> None:
    client = EtcdClient(etcd_server.endpoint, request_timeout=REQUEST_TIMEOUT)
    a, b = LeaseKeeper(client, 2), LeaseKeeper(client, 3)
    try:
        la, lb = await a.current(), await b.current()
        await wait_until(lambda: a.refreshes >= 2 and b.refreshes >= 2, "both leases refreshed")
        assert set(client._keepalive_calls) == {la, lb}
        await b.revoke()
        assert set(client._keepalive_calls) == {la}
        refreshed = a.refreshes
        await wait_until(lambda: a.refreshes >= refreshed + 2, "a refreshed after b was revoked")
    finally:
        await a.stop()
        await b.stop()
        await client.close()


@pytest.mark.timeout(90)
async def test_a_refresh_without_an_answer_is_given_up_for_another_within_the_ttl(
    etcd_server: EtcdServer,
) -> None:
    """etcd answers nothing (SIGSTOP). The keeper must not wait the client's request deadline
    (longer than the TTL) for one answer: it gives up after a third of the TTL and tries again,
    so one refresh lost on the way cannot cost the lease."""
    client = EtcdClient(etcd_server.endpoint, request_timeout=REQUEST_TIMEOUT)
    keeper = LeaseKeeper(client, 3)
    try:
        lease = await keeper.current()
        await _put_on(client, b"/lk/held", lease)
        await wait_until(lambda: keeper.refreshes >= 1, "a first refresh")
        etcd_server.freeze()
        try:
            await wait_until(lambda: keeper.unanswered >= 2, "two refreshes given up")
        finally:
            etcd_server.thaw()
        # The client's own deadline never passed: the keeper gave up first.
        assert client.unanswered == 0, client.unanswered
        # etcd may have expired the lease while it stood still: a request replaces it (as the
        # agent's next request would).
        refreshed = keeper.refreshes
        stop_at = time.monotonic() + WAIT_LIMIT
        while keeper.refreshes <= refreshed:
            assert time.monotonic() < stop_at, "no refresh once etcd answered again"
            await keeper.current()
            await asyncio.sleep(0.05)
    finally:
        await keeper.stop()
        await client.close()
