"""``EtcdStore``: a ``torch.distributed.Store`` in etcd, scoped to one key prefix (one round).

Values are stored as raw bytes; counters (``add``) as ASCII decimal like torch's own stores, so
``add`` and ``get`` interoperate. Waiting (``get`` of a missing key, ``wait``) watches the prefix
instead of polling, and reads again at least every ``recheck_interval`` in case an event is
lost. Every blocking call honours the store timeout (``set_timeout``) or the one passed in, and
raises ``torch.distributed.DistStoreError`` when it passes; an etcd outage longer than that
raises ``RendezvousConnectionError``.
"""

from __future__ import annotations

import contextlib
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import TypeVar

import torch.distributed as dist

from elasticjob_agent.errors import RendezvousConnectionError
from elasticjob_agent.etcd.client import EtcdClient
from elasticjob_agent.etcd.messages import (
    op_range,
    prefix_end,
)
from elasticjob_agent.etcd.retry import retry_until
from elasticjob_agent.etcd.session import EtcdSession
from elasticjob_agent.protocol.endpoints import Endpoint, parse_endpoints
from elasticjob_agent.rendezvous import store_transactions
from elasticjob_agent.rendezvous.config import MAX_REQUEST_TIMEOUT
from elasticjob_agent.rendezvous.deadline import ClockTimer, DeadlineReached, until
from elasticjob_agent.rendezvous.kv import AsyncEtcdStore, StoreTimeout
from elasticjob_agent.rendezvous.watching import first_events

T = TypeVar("T")
_DEFAULT_TIMEOUT = timedelta(seconds=300)
_TXN_RANGES = 100


def _bytes(value: str | bytes | bytearray | Sequence[int]) -> bytes:
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


class EtcdStore(dist.Store):  # type: ignore[misc,name-defined]  # torch stubs lack Store
    """A ``torch.distributed.Store`` whose keys live under ``prefix`` in etcd.

    Use ``EtcdStore.connect(endpoints, prefix)`` to open one with its own connection (the store
    then owns it; ``close()`` releases it), or let ``EtcdRendezvousHandler`` hand out one per
    completed round.
    """

    def __init__(
        self,
        session: EtcdSession,
        prefix: bytes,
        timeout: timedelta = _DEFAULT_TIMEOUT,
        *,
        owns_session: bool = False,
        recheck_interval: float = 5.0,
    ) -> None:
        super().__init__()
        self._timer = ClockTimer(time.monotonic)
        self._recheck = recheck_interval
        self._kv = AsyncEtcdStore(
            session.client,
            prefix,
            timeout=timeout.total_seconds(),
            recheck_interval=recheck_interval,
        )
        if not prefix.endswith(b"/"):
            raise ValueError(f"store prefix must end with '/': {prefix!r}")
        self._session = session
        self._prefix = prefix
        # ``add``'s once-only markers: beside the store's keys, outside their range (num_keys).
        self._add_markers = prefix[:-1] + b".adds/"
        self._token = uuid.uuid4().hex
        self._add_calls = itertools.count()
        self._owns_session = owns_session
        self.set_timeout(timeout)

    @classmethod
    def connect(
        cls,
        endpoints: str | tuple[Endpoint, ...],
        prefix: str,
        timeout: timedelta = _DEFAULT_TIMEOUT,
    ) -> EtcdStore:
        eps = parse_endpoints(endpoints) if isinstance(endpoints, str) else endpoints
        session = EtcdSession(eps, request_timeout=MAX_REQUEST_TIMEOUT, lease_ttl=10)
        return cls(session, prefix.encode(), timeout, owns_session=True)

    def close(self) -> None:
        if self._owns_session:
            self._session.close()

    # --- helpers -----------------------------------------------------------------------------

    @property
    def _client(self) -> EtcdClient:
        return self._session.client

    def _key(self, key: str) -> bytes:
        return self._prefix + key.encode()

    def _seconds(self, timeout: timedelta | None) -> float:
        chosen = self.timeout if timeout is None else timeout
        return float(chosen.total_seconds())

    def _run(self, op: Callable[[], Awaitable[T]], timeout: float) -> T:
        """Run ``op`` on the session loop, retrying while etcd is unreachable within timeout."""
        deadline = time.monotonic() + max(timeout, 1.0)
        return self._session.run(retry_until(op, deadline=deadline))

    # --- the Store API -----------------------------------------------------------------------

    def set(self, key: str, value: str | bytes) -> None:
        k, v = self._key(key), _bytes(value)
        self._run(lambda: self._client.put(k, v), self._seconds(None))

    def get(self, key: str) -> bytes:
        return self.multi_get([key])[0]

    def multi_get(self, keys: list[str]) -> list[bytes]:
        """The values of ``keys``, waiting for missing ones: one range read and one watch,
        whatever the number of keys (see ``AsyncEtcdStore.multi_get``)."""
        seconds = self._seconds(None)
        self._kv.timeout = seconds
        try:
            return self._run(lambda: self._kv.multi_get(keys), seconds)
        except StoreTimeout as exc:
            raise dist.DistStoreError(str(exc)) from exc
        except RendezvousConnectionError as exc:
            raise dist.DistStoreError(f"etcd unreachable while reading {keys[:3]}: {exc}") from exc

    def set_then_get(self, set_key: str, value: str | bytes, get_key: str) -> bytes:
        """``set(set_key, value)`` then ``get(get_key)`` for a key written after it, in one
        transaction and at most one watch (``AsyncEtcdStore.set_then_get``); the role
        exchange's step of every node but rank 0."""
        seconds = self._seconds(None)
        self._kv.timeout = seconds
        v = _bytes(value)
        try:
            return self._run(lambda: self._kv.set_then_get(set_key, v, get_key), seconds)
        except StoreTimeout as exc:
            raise dist.DistStoreError(str(exc)) from exc
        except RendezvousConnectionError as exc:
            raise dist.DistStoreError(f"etcd unreachable while reading {get_key}: {exc}") from exc

    def add(self, key: str, amount: int) -> int:
        """Add ``amount`` exactly once, also when etcd applied an attempt whose answer was lost
        (a retry would add again): the transaction that bumps the counter also writes a marker
        unique to this call, and an attempt that finds its marker returns the value it holds."""
        k = self._key(key)
        marker = self._add_markers + f"{self._token}/{next(self._add_calls)}".encode()

        async def add_once() -> int:
            while True:
                read = await self._client.txn([], [op_range(k), op_range(marker)])
                counter, done = (r.response_range.kvs for r in read.responses)
                if done:
                    return int(done[0].value)
                kv = counter[0] if counter else None
                current = int(kv.value) if kv is not None else 0
                new = str(current + int(amount)).encode()
                fence = int(kv.mod_revision) if kv is not None else 0
                response = await self._client.cas(store_transactions.add(k, marker, fence, new))
                if response.succeeded:
                    return int(new)

        return self._run(add_once, self._seconds(None))

    def compare_set(
        self, key: str, expected_value: str | bytes, desired_value: str | bytes
    ) -> bytes:
        """Set to ``desired`` if the value is ``expected`` (or missing and ``expected`` empty).

        Returns the value after the call; for a missing key with a non-empty ``expected``,
        returns ``expected`` (torch's semantics).
        """
        k, expected, desired = self._key(key), _bytes(expected_value), _bytes(desired_value)
        cas = store_transactions.compare_set(k, expected, desired)
        response = self._run(lambda: self._client.cas(cas), self._seconds(None))
        if response.succeeded:
            return desired
        kvs = response.responses[0].response_range.kvs
        return bytes(kvs[0].value) if kvs else expected

    def check(self, keys: list[str]) -> bool:
        return self._run(lambda: self._all_exist(keys), self._seconds(None))[0]

    async def _all_exist(self, keys: Sequence[str]) -> tuple[bool, int]:
        """Whether every key exists, and the revision that answer holds at (of the first
        missing key's read). Chunked: etcd refuses transactions past ``--max-txn-ops`` (128)."""
        if not keys:
            response = await self._client.range(self._key("__none__"))
            return True, int(response.header.revision)
        revision = 0
        for start in range(0, len(keys), _TXN_RANGES):
            chunk = keys[start : start + _TXN_RANGES]
            response = await self._client.txn(
                [], [op_range(self._key(key), count_only=True) for key in chunk]
            )
            revision = int(response.header.revision)
            if not all(r.response_range.count > 0 for r in response.responses):
                return False, revision
        return True, revision

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        seconds = self._seconds(timeout)
        deadline = time.monotonic() + seconds

        async def wait_all() -> None:
            while True:
                ok, revision = await self._all_exist(keys)
                if ok:
                    return
                now = time.monotonic()
                if now >= deadline:
                    break
                # Bounded: a watch event that never comes costs one re-check, not the timeout.
                end = prefix_end(self._prefix)
                watch = first_events(self._client, self._prefix, end, revision, self._timer)
                with contextlib.suppress(DeadlineReached):
                    await until(self._timer, min(deadline, now + self._recheck), watch)
            raise dist.DistStoreError(
                f"timed out after {seconds:g}s waiting for store keys {list(keys)} "
                f"under {self._prefix.decode()!r}"
            )

        try:
            self._run(wait_all, seconds)
        except RendezvousConnectionError as exc:
            raise dist.DistStoreError(f"etcd unreachable while waiting for {keys}: {exc}") from exc

    def delete_key(self, key: str) -> bool:
        k = self._key(key)
        return self._run(lambda: self._client.delete(k), self._seconds(None)) > 0

    def num_keys(self) -> int:
        end = prefix_end(self._prefix)
        response = self._run(
            lambda: self._client.range(self._prefix, end, count_only=True), self._seconds(None)
        )
        return int(response.count)
