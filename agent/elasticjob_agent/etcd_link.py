"""A small synchronous view of etcd for the agent (restart counters, reachability probe).

The rendezvous owns its own etcd client; the agent's supervisor is synchronous (like torch's
agent), so this module runs an ``aetcd`` client on a private event loop in a daemon thread and
exposes blocking calls with a per-call deadline. Every call updates the reachability record
(``status()``), which the health report shows: etcd cannot say that it is gone, we can.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aetcd
import aetcd.exceptions

from elasticjob_agent.etcd.client import Reachability
from elasticjob_agent.etcd.endpoints import Endpoint

logger = logging.getLogger(__name__)

T = TypeVar("T")

# gRPC's default reconnect back-off grows to minutes; an agent must notice a returning etcd fast.
_CHANNEL_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 200,
    "grpc.min_reconnect_backoff_ms": 200,
    "grpc.max_reconnect_backoff_ms": 1000,
}


class EtcdUnavailableError(ConnectionError):
    """etcd did not answer within the call's deadline (or refused the connection)."""


def parse_endpoints(text: str) -> tuple[Endpoint, ...]:
    """Parse ``host:port[,host:port...]`` (an ``http://`` scheme is tolerated).

    Stricter than ``elasticjob_agent.etcd.parse_endpoints`` for the command line: the port is
    required and TLS endpoints are refused.

    Raises ``ValueError`` naming the bad item.
    """
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError("--rdzv-endpoint is empty: give etcd's client address as host:port")
    endpoints = []
    for item in items:
        bare = item.removeprefix("http://")
        if bare.startswith("https://"):
            raise ValueError(f"--rdzv-endpoint {item!r}: TLS endpoints are not supported")
        host, sep, port = bare.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"--rdzv-endpoint item {item!r} is not host:port (e.g. 127.0.0.1:2379)"
            )
        endpoints.append(Endpoint(host.strip("[]"), int(port)))
    return tuple(endpoints)


class EtcdLink:
    """Blocking etcd calls with deadlines, tried against each endpoint in turn.

    Thread-safe: calls from any thread are run on the private loop. ``close()`` stops it.
    """

    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        call_timeout: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not endpoints:
            raise ValueError("EtcdLink needs at least one endpoint")
        self._endpoints = tuple(endpoints)
        self._call_timeout = call_timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._reach = Reachability(True, None, None)
        self._current = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="etcd-link", daemon=True
        )
        self._thread.start()
        self._clients: dict[int, aetcd.Client] = {}

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        return self._endpoints

    def status(self) -> Reachability:
        with self._lock:
            return self._reach

    def _mark(self, ok: bool) -> None:
        now = self._clock()
        with self._lock:
            if ok:
                self._reach = Reachability(True, now, None)
            elif self._reach.reachable:
                self._reach = Reachability(False, self._reach.last_contact, now)

    async def _client(self, index: int) -> aetcd.Client:
        client = self._clients.get(index)
        if client is None:
            ep = self._endpoints[index]
            client = aetcd.Client(
                ep.host, ep.port, timeout=self._call_timeout, options=dict(_CHANNEL_OPTIONS)
            )
            self._clients[index] = client
        return client

    def call(self, op: Callable[[aetcd.Client], Awaitable[T]], timeout: float | None = None) -> T:
        """Run ``op(client)`` on the loop; try every endpoint once within ``timeout``.

        Raises ``EtcdUnavailableError`` when no endpoint answered.
        """
        deadline = timeout if timeout is not None else self._call_timeout

        async def attempt() -> T:
            last: BaseException | None = None
            for offset in range(len(self._endpoints)):
                index = (self._current + offset) % len(self._endpoints)
                try:
                    client = await self._client(index)
                    result = await asyncio.wait_for(op(client), deadline)
                except (aetcd.exceptions.ClientError, TimeoutError, OSError) as exc:
                    last = exc
                    continue
                self._current = index
                return result
            raise EtcdUnavailableError(f"etcd at {self._describe()} did not answer: {last!r}")

        future = asyncio.run_coroutine_threadsafe(attempt(), self._loop)
        try:
            result = future.result(deadline * len(self._endpoints) + 1.0)
        except EtcdUnavailableError:
            self._mark(False)
            raise
        except TimeoutError as exc:
            future.cancel()
            self._mark(False)
            raise EtcdUnavailableError(f"etcd at {self._describe()} timed out") from exc
        self._mark(True)
        return result

    def probe(self, timeout: float = 1.0) -> bool:
        """One cheap request (a read of a key nobody writes); True when etcd answered."""
        try:
            self.call(lambda c: c.get(b"/elasticjob-probe"), timeout)
        except EtcdUnavailableError:
            return False
        return True

    def get(self, key: str) -> tuple[bytes, int] | None:
        """``(value, mod_revision)`` of ``key``, or ``None`` when absent."""

        async def op(client: aetcd.Client) -> Any:
            return await client.get(key.encode())

        got = self.call(op)
        if got is None:
            return None
        return bytes(got.value), int(got.mod_revision)

    def get_prefix(self, prefix: str) -> dict[str, tuple[bytes, int]]:
        """Every key under ``prefix`` with ``(value, mod_revision)``."""

        async def op(client: aetcd.Client) -> Any:
            return await client.get_prefix(prefix.encode())

        got = self.call(op)
        return {bytes(kv.key).decode(): (bytes(kv.value), int(kv.mod_revision)) for kv in got}

    def put(self, key: str, value: bytes) -> None:
        async def op(client: aetcd.Client) -> Any:
            return await client.put(key.encode(), value)

        self.call(op)

    def transaction(
        self,
        build: Callable[[Any], tuple[list[Any], list[Any]]],
    ) -> bool:
        """Run one txn; ``build(transactions)`` returns ``(compare, success)``. True if applied."""

        async def op(client: aetcd.Client) -> Any:
            compare, success = build(client.transactions)
            return await client.transaction(compare=compare, success=success, failure=[])

        succeeded, _ = self.call(op)
        return bool(succeeded)

    def _describe(self) -> str:
        return ",".join(str(e) for e in self._endpoints)

    def close(self) -> None:
        async def shutdown() -> None:
            for client in self._clients.values():
                try:
                    await client.close()
                except Exception:  # closing a half-dead channel must not mask the exit path
                    logger.debug("closing etcd client failed", exc_info=True)

        if self._loop.is_running():
            future = asyncio.run_coroutine_threadsafe(shutdown(), self._loop)
            try:
                future.result(2.0)
            except Exception:
                logger.debug("etcd link shutdown timed out", exc_info=True)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(2.0)
