"""``AsyncEtcdStore``: the asynchronous core of the round's store (``set``, ``get``,
``multi_get``) on one client and key prefix; ``EtcdStore`` runs it for torch's synchronous API.

Reads that wait (``get`` of a missing key, ``multi_get``) cost one range read and one watch,
whatever the number of keys (``set_then_get``: one transaction and one watch): the watch
collects the missing keys' writes as they come, and the whole wait is bounded (a re-read at
least every ``recheck_interval``; ``StoreTimeout`` at the timeout).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

from elasticjob_agent.etcd.client import EtcdClient
from elasticjob_agent.etcd.messages import is_put, op_put, op_range
from elasticjob_agent.rendezvous.deadline import ClockTimer, DeadlineReached, Timer, until
from elasticjob_agent.rendezvous.watching import events_until


class StoreTimeout(Exception):
    """A store read waited longer than its timeout."""


class AsyncEtcdStore:
    """Keys under ``prefix`` (bytes ending in ``/``); values are raw bytes."""

    def __init__(
        self,
        client: EtcdClient,
        prefix: bytes,
        *,
        timeout: float,
        recheck_interval: float = 5.0,
        timer: Timer | None = None,
    ) -> None:
        if not prefix.endswith(b"/"):
            raise ValueError(f"store prefix must end with '/': {prefix!r}")
        self.client = client
        self.prefix = prefix
        self.timeout = timeout
        self.recheck = recheck_interval
        self.timer: Timer = timer if timer is not None else ClockTimer(time.monotonic)

    def key(self, key: str) -> bytes:
        return self.prefix + key.encode()

    async def set(self, key: str, value: bytes) -> None:
        await self.client.put(self.key(key), value)

    async def get(self, key: str) -> bytes:
        (value,) = await self.multi_get([key])
        return value

    async def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        """The values of ``keys``, waiting until all exist (``StoreTimeout`` after the store's
        ``timeout``). One range read over ``[min(keys), max(keys)]`` and one watch on
        it per re-check: cheap when the keys are close in key order (a common prefix)."""
        return await self._gather(keys, None)

    async def set_then_get(self, set_key: str, value: bytes, get_key: str) -> bytes:
        """Write ``set_key`` and read ``get_key`` in one transaction; if ``get_key`` is not
        there yet, wait for it with a watch from that transaction's revision (no second read).
        One request and one watch per re-check, where ``set`` then ``get`` costs two requests
        and a watch: for a key that is written after, and because of, ``set_key``."""
        response = await self.client.txn(
            [], [op_put(self.key(set_key), value), op_range(self.key(get_key))]
        )
        kvs = response.responses[1].response_range.kvs
        if kvs:
            return bytes(kvs[0].value)
        (found,) = await self._gather([get_key], int(response.header.revision))
        return found

    async def _gather(self, keys: Sequence[str], read_at: int | None) -> list[bytes]:
        """``multi_get``; ``read_at``: the caller has just read the keys at that revision and
        found none, so the first read is skipped (the watch starts there)."""
        if not keys:
            return []
        wanted = {self.key(k) for k in keys}
        lo, hi = min(wanted), max(wanted) + b"\0"
        deadline = self.timer.now() + self.timeout
        found: dict[bytes, bytes] = {}

        def take(events: list[Any]) -> bool:
            for e in events:
                k = bytes(e.kv.key)
                if k in wanted:
                    if is_put(e):
                        found[k] = bytes(e.kv.value)
                    else:
                        found.pop(k, None)
            return len(found) == len(wanted)

        while True:
            if read_at is None:
                response = await self.client.range(lo, hi)
                found = {
                    bytes(kv.key): bytes(kv.value) for kv in response.kvs if bytes(kv.key) in wanted
                }
                if len(found) == len(wanted):
                    break
                revision = int(response.header.revision)
            else:
                revision, read_at = read_at, None
            now = self.timer.now()
            if now >= deadline:
                missing = sorted(k.decode() for k in wanted - found.keys())
                raise StoreTimeout(
                    f"timed out waiting for {len(missing)} store key(s) under "
                    f"{self.prefix.decode()!r}, e.g. {missing[:3]}"
                )
            watch = events_until(self.client, lo, hi, revision, self.timer, take=take)
            with contextlib.suppress(DeadlineReached):
                await until(self.timer, min(deadline, now + self.recheck), watch)
            if len(found) == len(wanted):
                break
        return [found[self.key(k)] for k in keys]
