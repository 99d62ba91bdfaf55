"""One watch, used once: the first events under a key range after a revision.

The rendezvous and the store never keep a watch open across waits: each wait creates one from
the revision of the read it follows (so nothing written after that read is missed), takes the
first batch of events and drops it. Callers bound the whole thing with ``deadline.until`` and
read again afterwards, so this module never decides what a change means.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any

from elasticjob_agent.etcd.client import EtcdClient, EtcdRequestError, Watch
from elasticjob_agent.rendezvous.deadline import Timer, detach


async def first_events(
    client: EtcdClient, key: bytes, end: bytes, after: int, timer: Timer
) -> list[Any]:
    """The first non-empty batch of events on ``[key, end)`` after revision ``after``.

    ``[]`` when etcd has compacted that revision: the caller must read the current state again
    (what it would have learnt from the events is in it). See ``events_until``."""
    first: list[Any] = []

    def take(events: list[Any]) -> bool:
        first.extend(events)
        return True

    await events_until(client, key, end, after, timer, take=take)
    return first


async def events_until(
    client: EtcdClient,
    key: bytes,
    end: bytes,
    after: int,
    timer: Timer,
    *,
    take: Callable[[list[Any]], bool],
) -> None:
    """Feed the events on ``[key, end)`` after revision ``after`` to ``take``, batch by batch,
    until it returns True. Returns at once when etcd has compacted that revision (the caller
    reads again). Errors of an unreachable etcd propagate.

    Cancelling the watch is one more message on the stream, sent in the background (bounded by
    the client's request timeout): a caller never waits for it. Writes to the client's watch
    stream (creations, cancellations) go one at a time.
    """
    watch = client.watch(key, end, start_revision=after + 1)
    lock = _writes(client)
    try:
        async with lock:
            await watch.__aenter__()
    except EtcdRequestError as exc:
        if "compacted" in exc.details:
            return
        raise
    try:
        while True:
            events = await watch.next(None)
            if events and take(events):
                return
    finally:
        detach(timer, client.request_timeout, _cancel(lock, watch))


# grpc refuses a second write on a stream while one is in flight ("Internal error from Core"):
# the creation of one watch and the cancellation of another share the client's watch stream.
_LOCKS: weakref.WeakKeyDictionary[EtcdClient, asyncio.Lock] = weakref.WeakKeyDictionary()


def _writes(client: EtcdClient) -> asyncio.Lock:
    lock = _LOCKS.get(client)
    if lock is None:
        lock = _LOCKS[client] = asyncio.Lock()
    return lock


async def _cancel(lock: asyncio.Lock, watch: Watch) -> None:
    async with lock:
        await watch.__aexit__(None, None, None)
