"""An etcd slower than the request deadline: the client waits longer instead of re-sending.

etcd is stopped (SIGSTOP: connections stay open, nothing answers) until the client has seen
requests go unanswered, then resumed. Each unanswered request doubles the next one's deadline
(etcd/pacing.py), so the number of attempts grows with the logarithm of the slowness, not with
its length (the N = 4096 retry storm in bench/RESULTS.md). Attempts are counted, never timed.

A request abandoned at its deadline may still be applied once etcd runs again (it was in etcd's
socket buffer or queue): the rendezvous test checks that a join applied twice, or a retry that
finds its first attempt applied, still gives every node one rank.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from elasticjob_agent.etcd.client import EtcdClient
from elasticjob_agent.etcd.messages import cmp_version, op_put, prefix_end
from elasticjob_agent.etcd.retry import retry_until
from elasticjob_agent.etcd.session import LeaseKeeper
from elasticjob_agent.protocol.keys import JobKeys
from elasticjob_agent.rendezvous.executor import Executor
from elasticjob_agent.rendezvous.state import Context
from elasticjob_agent.rendezvous.wire import RendezvousKeys

from tests.support.etcd_server import EtcdServer
from tests.support.rendezvous_handlers import new_run_id
from tests.support.waiting import WAIT_LIMIT, wait_until

BASE = 0.5
SILENT_BEFORE_THAW = 3


async def thaw_after(server: EtcdServer, clients: list[EtcdClient], silent: int) -> None:
    """Resume etcd once every client has seen ``silent`` requests go unanswered."""
    try:
        await wait_until(
            lambda: all(c.unanswered >= silent for c in clients),
            f"{silent} unanswered requests per client",
        )
    finally:
        server.thaw()


@pytest.mark.timeout(90)
async def test_a_request_outlasts_a_stopped_etcd_with_doubling_deadlines(
    etcd_server: EtcdServer,
) -> None:
    client = EtcdClient(etcd_server.endpoint, request_timeout=BASE)
    await client.prepare()
    deadlines: list[float] = []

    async def create_once() -> bool:
        # What a join is: a write guarded by a compare, so a re-sent copy cannot apply twice.
        deadlines.append(client.request_deadline)
        response = await client.txn([cmp_version(b"slow/k", "==", 0)], [op_put(b"slow/k", b"v")])
        return bool(response.succeeded)

    etcd_server.freeze()
    thawing = asyncio.ensure_future(thaw_after(etcd_server, [client], SILENT_BEFORE_THAW))
    try:
        await retry_until(create_once, patience=WAIT_LIMIT, what="test")
    finally:
        etcd_server.thaw()
        await thawing
    # The attempt that found the key created may be the one after an abandoned attempt that
    # etcd applied late: either way the key holds the one value, created once.
    got = await client.get(b"slow/k")
    assert got is not None and bytes(got.value) == b"v" and got.version == 1
    assert client.unanswered >= SILENT_BEFORE_THAW
    assert deadlines[:4] == [BASE, 2 * BASE, 4 * BASE, 8 * BASE], deadlines
    # The schedule stops at 8x the base: at most one more attempt after each unanswered one.
    assert len(deadlines) == client.unanswered + 1, (deadlines, client.unanswered)
    assert max(deadlines) <= 8 * BASE
    await client.close()


@pytest.mark.timeout(90)
async def test_a_rendezvous_completes_when_its_joins_were_resent_to_a_stopped_etcd(
    etcd_server: EtcdServer,
) -> None:
    keys = RendezvousKeys.of(JobKeys("/slow-etcd", new_run_id()))
    clients = [EtcdClient(etcd_server.endpoint, request_timeout=BASE) for _ in range(2)]
    leases = [LeaseKeeper(c, 30) for c in clients]
    for client in clients:
        await client.prepare()
    nodes = [
        Executor(c, keys, f"node-{i}", lease, etcd_timeout=WAIT_LIMIT)
        for i, (c, lease) in enumerate(zip(clients, leases, strict=True))
    ]
    ctx = Context(
        min_nodes=2,
        max_nodes=2,
        last_call_timeout=1.0,
        join_deadline=time.time() + 60,
        recheck_interval=1.0,
    )
    etcd_server.freeze()
    thawing = asyncio.ensure_future(thaw_after(etcd_server, clients, 2))
    try:
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(n.next_rendezvous(ctx, 0) for n in nodes)), 2 * WAIT_LIMIT
        )
    finally:
        etcd_server.thaw()
        await thawing
        for lease in leases:
            await lease.stop()
    assert sorted(o.rank for o in outcomes) == [0, 1]
    assert {(o.round, o.world_size) for o in outcomes} == {(0, 2)}
    # Both nodes' joined keys exist once each (a late duplicate join re-put its own key).
    joined = keys.joined_prefix(0)
    response = await clients[0].range(joined, prefix_end(joined))
    assert sorted(bytes(kv.key)[len(joined) :] for kv in response.kvs) == [b"node-0", b"node-1"]
    for client in clients:
        await client.close()
