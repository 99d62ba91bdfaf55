"""A small synchronous view of etcd for the agent (restart counters, reachability probe).

The rendezvous owns its own etcd client; the agent's supervisor is synchronous (like torch's
agent), so this module runs an ``EtcdClient`` on a private event loop in a daemon thread and
exposes blocking calls with a per-call deadline. Every call updates the reachability record
(``status()``), which the health report shows: etcd cannot say that it is gone, we can.

It is the same client as the rendezvous's on purpose: a connection that goes silent (a cut
network, a deleted pod) is dropped after a few deadlines and the next call resolves the Service
name again, so the probe and the restart counter find a recreated etcd at its new address.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from elasticjob_agent.etcd.client import (
    EtcdClient,
    EtcdRequestError,
    Reachability,
    prefix_end,
)
from elasticjob_agent.etcd.endpoints import Endpoint
from elasticjob_agent.rendezvous.errors import RendezvousConnectionError

logger = logging.getLogger(__name__)

T = TypeVar("T")


class EtcdUnavailableError(ConnectionError):
    """etcd did not answer within the call's deadline (or refused the request)."""


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
    """Blocking etcd calls with deadlines; the client fails over between endpoints itself.

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
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="etcd-link", daemon=True
        )
        self._thread.start()
        self._client: EtcdClient | None = None

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

    def _ensure_client(self, timeout: float) -> EtcdClient:
        # Created on the loop's thread: grpc's asyncio channels belong to the loop that made them.
        if self._client is None:
            self._client = EtcdClient(self._endpoints, request_timeout=timeout)
        return self._client

    def call(self, op: Callable[[EtcdClient], Awaitable[T]], timeout: float | None = None) -> T:
        """Run ``op(client)`` on the loop within ``timeout`` seconds.

        Raises ``EtcdUnavailableError`` when etcd did not answer (or refused the request).
        """
        deadline = timeout if timeout is not None else self._call_timeout

        async def attempt() -> T:
            client = self._ensure_client(self._call_timeout)
            try:
                return await asyncio.wait_for(op(client), deadline)
            except TimeoutError:
                # Our deadline beat grpc's: count it, or a silent link would never be dropped.
                client.note_silence()
                raise

        future = asyncio.run_coroutine_threadsafe(attempt(), self._loop)
        try:
            result = future.result(deadline + 1.0)
        except (RendezvousConnectionError, TimeoutError) as exc:
            future.cancel()
            self._mark(False)
            raise EtcdUnavailableError(f"etcd at {self._describe()} did not answer: {exc}") from exc
        except EtcdRequestError as exc:
            # etcd answered (it is reachable) but refused, e.g. overloaded: retryable all the same.
            self._mark(True)
            raise EtcdUnavailableError(f"etcd at {self._describe()} refused: {exc}") from exc
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
        got = self.call(lambda c: c.get(key.encode()))
        if got is None:
            return None
        return bytes(got.value), int(got.mod_revision)

    def get_prefix(self, prefix: str) -> dict[str, tuple[bytes, int]]:
        """Every key under ``prefix`` with ``(value, mod_revision)``."""
        raw = prefix.encode()
        got = self.call(lambda c: c.range(raw, prefix_end(raw)))
        return {bytes(kv.key).decode(): (bytes(kv.value), int(kv.mod_revision)) for kv in got.kvs}

    def put(self, key: str, value: bytes) -> None:
        self.call(lambda c: c.put(key.encode(), value))

    def transaction(self, compare: Sequence[Any], success: Sequence[Any]) -> bool:
        """Run one txn built with ``elasticjob_agent.etcd.client``'s ``cmp_*``/``op_*``
        helpers; True if its compares held and ``success`` was applied."""
        response = self.call(lambda c: c.txn(compare, success))
        return bool(response.succeeded)

    def _describe(self) -> str:
        return ",".join(str(e) for e in self._endpoints)

    def close(self) -> None:
        async def shutdown() -> None:
            client, self._client = self._client, None
            if client is not None:
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
