"""Helpers for rendezvous integration tests: handlers for a run, run concurrently in threads."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from elasticjob_agent.etcd.client import EtcdClient
from elasticjob_agent.etcd.messages import prefix_end
from elasticjob_agent.protocol.endpoints import parse_endpoints
from elasticjob_agent.protocol.keys import DEFAULT_PREFIX, JobKeys
from elasticjob_agent.rendezvous.config import RendezvousConfig
from elasticjob_agent.rendezvous.handler import EtcdRendezvousHandler
from elasticjob_agent.rendezvous.wire import RendezvousKeys


def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:10]}"


def make_handler(endpoint: str, run_id: str, node: str, **overrides: Any) -> EtcdRendezvousHandler:
    settings: dict[str, Any] = {
        "min_nodes": 2,
        "max_nodes": 2,
        "join_timeout": 30.0,
        "last_call_timeout": 0.5,
        "heartbeat": 1.0,
        "etcd_timeout": 10.0,
    }
    settings.update(overrides)
    return EtcdRendezvousHandler(
        RendezvousConfig(
            run_id=run_id,
            endpoints=parse_endpoints(endpoint),
            node_id=node,
            local_addr="127.0.0.1",
            **settings,
        )
    )


def node_keys(endpoint: str, run_id: str, node: str, key_prefix: str = DEFAULT_PREFIX) -> list[str]:
    """The run's rendezvous keys of ``node`` (joined and waiting keys: on its lease, so they
    vanish when the lease lapses)."""
    root = RendezvousKeys.of(JobKeys(key_prefix, run_id)).everything

    async def read() -> list[str]:
        client = EtcdClient(parse_endpoints(endpoint), request_timeout=5.0)
        try:
            response = await client.range(root, prefix_end(root), keys_only=True)
        finally:
            await client.close()
        return [bytes(kv.key).decode() for kv in response.kvs]

    return [key for key in asyncio.run(read()) if key.endswith(f"/{node}")]


@dataclass
class Result:
    node: str
    rank: int | None = None
    world_size: int | None = None
    round: int | None = None
    master: tuple[str, int] | None = None
    error: BaseException | None = None


def rendezvous_all(handlers: Sequence[EtcdRendezvousHandler], timeout: float = 60) -> list[Result]:
    """Call ``next_rendezvous()`` on every handler at once; collect ranks or errors."""
    results = [Result(h.config.node_id) for h in handlers]

    def run(i: int) -> None:
        try:
            info = handlers[i].next_rendezvous()
            results[i].rank = info.rank
            results[i].world_size = info.world_size
            results[i].round = handlers[i].round
            store_info = info.bootstrap_store_info
            if store_info is not None:
                results[i].master = (store_info.master_addr, store_info.master_port)
        except BaseException as exc:  # the test inspects it
            results[i].error = exc

    in_threads(run, range(len(handlers)), timeout)
    return results


def in_threads(fn: Callable[[int], None], items: Sequence[int] | range, timeout: float) -> None:
    threads = [threading.Thread(target=fn, args=(i,), daemon=True) for i in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        if t.is_alive():
            raise AssertionError(f"a rendezvous thread hung for more than {timeout}s")


def assert_one_group(results: Sequence[Result], world_size: int) -> None:
    """Everyone succeeded in one group of ``world_size`` with ranks 0..n-1 and one master."""
    for r in results:
        assert r.error is None, f"{r.node}: {r.error!r}"
    assert sorted(r.rank for r in results if r.rank is not None) == list(range(world_size))
    assert {r.world_size for r in results} == {world_size}
    assert len({r.round for r in results}) == 1
    assert len({r.master for r in results}) == 1
