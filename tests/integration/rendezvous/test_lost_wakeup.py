"""Lost wake-ups: a waiting node learns that its round completed even when its watch never says so.

Regression: one N = 1024 benchmark run never returned. The round's completion key was written,
yet nodes stayed blocked for minutes with their leases alive. A waiter's only news was its watch,
and creating a watch could block forever: when the client's watch stream is cancelled (the
connection dropped because another request on the same client failed) before the stream sent
its first message, grpc never finishes the pending write of the watch request, and nothing bounded
that await. Now every wait is bounded by its re-check deadline and ends with a fresh read.

The same holds when etcd compacted the revision a waiter watches from: the waiter reads again
instead of failing.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from elasticjob_agent.etcd.client import EtcdClient, Watch
from elasticjob_agent.etcd.session import LeaseKeeper
from elasticjob_agent.protocol.keys import JobKeys
from elasticjob_agent.rendezvous.executor import Executor, Outcome
from elasticjob_agent.rendezvous.state import Context
from elasticjob_agent.rendezvous.wire import RendezvousKeys

from tests.support.etcd_server import EtcdServer
from tests.support.rendezvous_handlers import new_run_id

RECHECK = 0.5
# Far above one re-check interval, far below the join timeout: a hang fails the test.
RETURN_WITHIN = 20.0


class DroppedWhileWatching(EtcdClient):
    """A client whose connection drops while its first watch is being created, as when a
    concurrent request on the same client fails and drops the channel."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dropped = asyncio.Event()
        self._closing: asyncio.Task[None] | None = None

    def watch(self, *args: Any, **kwargs: Any) -> Watch:
        watch = super().watch(*args, **kwargs)
        if self._closing is None:
            # Runs once the watch has started creating its stream and waits to write to it.
            self._closing = asyncio.ensure_future(self._drop())
        return watch

    async def _drop(self) -> None:
        await asyncio.sleep(0)
        await self.close()
        self.dropped.set()


class CompactedBeforeWatching(EtcdClient):
    """A client that, before its first watch, lets etcd compact past the revision it watches
    from (auto-compaction, or an operator's ``etcdctl compact``)."""

    def __init__(self, server: EtcdServer, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._server = server
        self.compacted = asyncio.Event()

    def watch(self, *args: Any, **kwargs: Any) -> Watch:
        if not self.compacted.is_set():
            self.compacted.set()
            self._server.etcdctl("put", "/unrelated", "x")
            self._server.etcdctl("put", "/unrelated", "y")
            status = json.loads(self._server.etcdctl("get", "/unrelated", "-w", "json"))
            self._server.etcdctl("compact", str(status["header"]["revision"]))
        return super().watch(*args, **kwargs)


def _executor(client: EtcdClient, keys: RendezvousKeys, node: str) -> tuple[Executor, LeaseKeeper]:
    lease = LeaseKeeper(client, 10)
    executor = Executor(client, keys, node, lease, etcd_timeout=10)
    return executor, lease


def _context() -> Context:
    return Context(
        min_nodes=2,
        max_nodes=2,
        last_call_timeout=1.0,
        join_deadline=time.time() + 60,
        recheck_interval=RECHECK,
    )


async def _pair(first: EtcdClient, endpoint: str, waiting_since: asyncio.Event) -> list[Outcome]:
    """Node a (on ``first``) starts waiting; once ``waiting_since`` is set, node b joins and
    completes the round."""
    keys = RendezvousKeys.of(JobKeys("/lost-wakeup", new_run_id()))
    second = EtcdClient(endpoint, request_timeout=2)
    a, a_lease = _executor(first, keys, "node-a")
    b, b_lease = _executor(second, keys, "node-b")
    try:
        waiting = asyncio.ensure_future(a.next_rendezvous(_context(), 0))
        await asyncio.wait_for(waiting_since.wait(), RETURN_WITHIN)
        completing = asyncio.ensure_future(b.next_rendezvous(_context(), 0))
        _, pending = await asyncio.wait({waiting, completing}, timeout=RETURN_WITHIN)
        for task in pending:
            task.cancel()
        assert not pending, "a node never returned although its round completed"
        return [waiting.result(), completing.result()]
    finally:
        for lease in (a_lease, b_lease):
            await lease.stop()
        await first.close()
        await second.close()


@pytest.mark.timeout(60)
async def test_a_watch_lost_while_it_is_created_costs_one_recheck(
    etcd_server_session: EtcdServer,
) -> None:
    client = DroppedWhileWatching(etcd_server_session.endpoint, request_timeout=2)
    outcomes = await _pair(client, etcd_server_session.endpoint, client.dropped)
    assert sorted(o.rank for o in outcomes) == [0, 1]
    assert {o.round for o in outcomes} == {0}


@pytest.mark.timeout(60)
async def test_a_waiter_whose_history_was_compacted_reads_again(
    etcd_server: EtcdServer,
) -> None:
    client = CompactedBeforeWatching(etcd_server, etcd_server.endpoint, request_timeout=2)
    outcomes = await _pair(client, etcd_server.endpoint, client.compacted)
    assert sorted(o.rank for o in outcomes) == [0, 1]
