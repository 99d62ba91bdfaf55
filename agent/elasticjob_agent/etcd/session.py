"""The agent's one way to etcd: a private event-loop thread, one ``EtcdClient``, one lease.

An agent process opens exactly one ``EtcdSession``; the rendezvous handler, the round's stores,
the restart counter and the reachability probe all run on it (one loop thread, one gRPC
channel, one reachability record). torch's ``RendezvousHandler`` and ``Store`` interfaces are
synchronous (and the store is called from C++ by gloo's bootstrap). ``EtcdSession.run`` hands a
coroutine to the session's own loop thread and blocks for its result, so it is safe from any
thread, including the agent's main thread inside a signal handler, but never from the loop
thread itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from elasticjob_agent.errors import RendezvousConnectionError
from elasticjob_agent.etcd.client import EtcdClient, LeaseNotFoundError, Reachability
from elasticjob_agent.protocol.endpoints import Endpoint

log = logging.getLogger(__name__)
T = TypeVar("T")

PROBE_KEY = b"/elasticjob-probe"
"""A key nobody writes: reading it is the cheapest request that proves etcd answers."""


class LeaseKeeper:
    """One lease with TTL ``ttl``, refreshed every ``ttl / 4`` to ``ttl / 3`` s while it lives.

    ``current()`` grants a lease when there is none (first use, or after ``lost()``), so an etcd
    that was wiped or a lease that expired during an outage is replaced on the next request.
    Keys attached to a lost lease are gone: the rendezvous notices and joins again.

    Each refresh gets at most ``ttl / 3`` s, and a failed one is retried within
    ``ttl / 10`` s: a refresh stuck on a silent stream must not outlast the lease. A new lease
    starts a new refresh schedule, so nothing left over from the old one (a refresh of a lease
    etcd no longer has, stuck on the old connection) delays its first refresh.
    """

    def __init__(self, client: EtcdClient, ttl: int) -> None:
        self._client = client
        self.ttl = ttl
        self._id: int | None = None
        self._task: asyncio.Task[None] | None = None
        self.refreshes = 0
        self.unanswered = 0
        """Refreshes given up for want of an answer within ``ttl / 3`` s."""

    @property
    def id(self) -> int | None:
        return self._id

    async def current(self) -> int:
        if self._id is None:
            lease = await self._client.grant(self.ttl)
            log.debug("granted lease %x (ttl=%ds)", lease, self.ttl)
            if self._id is None:  # else another task granted one meanwhile: keep that
                self._id = lease
                self._restart()
        if self._task is None or self._task.done():
            self._restart()
        return self._id

    def _restart(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
        self._task = asyncio.get_running_loop().create_task(self._keep_alive())

    async def lost(self) -> None:
        lease, self._id = self._id, None
        if lease is not None:
            self._client.end_keepalive(lease)

    def _pause(self, failing: bool) -> float:
        # Jitter: agents that started (or recovered) together must not refresh in lockstep.
        if failing:
            return self.ttl * random.uniform(0.05, 0.1)
        return self.ttl * random.uniform(0.25, 1 / 3)

    async def _keep_alive(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(self._pause(failing))
            lease = self._id
            if lease is None:
                continue
            try:
                # etcd applies a refresh it received even when its answer comes too late for
                # us, so giving up on the answer early costs nothing and leaves time for
                # another attempt (on a new stream) before the lease expires.
                await asyncio.wait_for(self._client.keepalive(lease), self.ttl / 3)
                self.refreshes += 1
                failing = False
            except LeaseNotFoundError:
                log.warning("lease %x expired; a new one is granted on the next request", lease)
                if self._id == lease:
                    self._id = None
            except (RendezvousConnectionError, TimeoutError) as exc:
                if isinstance(exc, TimeoutError):
                    self.unanswered += 1
                # Once per outage: the health report carries the rest.
                (log.debug if failing else log.warning)(
                    "lease %x keep-alive failed: %s",
                    lease,
                    str(exc) or f"no answer within {self.ttl / 3:.1f} s",
                )
                failing = True
            except Exception as exc:  # this task must outlive any one refresh: keys hang on it
                log.warning("lease %x keep-alive failed unexpectedly: %r", lease, exc)
                failing = True

    async def revoke(self) -> None:
        """Revoke the lease now: every key on it (joined, waiting) is deleted at once."""
        lease, self._id = self._id, None
        if lease is not None:
            self._client.end_keepalive(lease)
            await self._client.revoke(lease)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class EtcdSession:
    """An event loop on a daemon thread plus the client and lease that live on it."""

    def __init__(
        self, endpoints: tuple[Endpoint, ...], *, request_timeout: float, lease_ttl: int
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="elasticjob-etcd", daemon=True)
        self._thread.start()
        self.client = EtcdClient(endpoints, request_timeout=request_timeout)
        self.lease = LeaseKeeper(self.client, lease_ttl)
        self._probe: concurrent.futures.Future[None] | None = None
        self._closed = False
        # Guards _closed against run() from other threads (torch's keep-alive timer calls the
        # backend whenever it likes, also while or after the backend is closed).
        self._close_lock = threading.Lock()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the session's loop and return its result (or raise its error)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("EtcdSession.run() called from its own event loop thread")
        with self._close_lock:
            if self._closed:
                coro.close()
                raise _closed_error()
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.CancelledError:
            if self._closed:  # cancelled by close(): say so in torch's error taxonomy
                raise _closed_error() from None
            raise

    def reachability(self) -> Reachability:
        """The one record of whether etcd answers this process (health report and metrics)."""
        return self.client.reachability()

    def start_probe(self, interval: float, timeout: float) -> None:
        """Read one key every ``interval`` s, so the reachability record stays current while
        nothing else talks to etcd (training). A probe unanswered within ``timeout`` s counts
        as a silent request (``EtcdClient.note_silence``). Stops with ``close()``."""
        if self._probe is None:
            self._probe = asyncio.run_coroutine_threadsafe(
                self._probe_loop(interval, timeout), self.loop
            )

    def probe(self, timeout: float) -> bool:
        """One probe now: True when etcd answered within ``timeout`` s."""
        return self.run(self._probe_once(timeout))

    async def _probe_once(self, within: float) -> bool:
        try:
            await asyncio.wait_for(self.client.get(PROBE_KEY), within)
        except TimeoutError:
            self.client.note_silence()
            return False
        except Exception as exc:  # the reachability record has it
            log.debug("etcd probe failed: %s", exc)
            return False
        return True

    async def _probe_loop(self, interval: float, within: float) -> None:
        while True:
            await self._probe_once(within)
            await asyncio.sleep(interval)

    def close(self) -> None:
        """Stop the keep-alive, close the channel and the loop thread. Idempotent.

        Calls of ``run()`` still in flight are cancelled; later ones raise
        ``RendezvousConnectionError`` (a ``RendezvousError``, which torch's handler logs as a
        warning), never "Event loop is closed" from a loop that is gone.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True

        probe, self._probe = self._probe, None
        if probe is not None:
            probe.cancel()

        async def _shutdown() -> None:
            await self.lease.stop()
            await self.client.close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(_shutdown(), self.loop).result(timeout=5)
        except Exception as exc:  # closing must not fail
            log.debug("closing the etcd session: %s", exc)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            # Closing the loop lets grpc's asyncio layer bind to the next loop of this process.
            self.loop.close()


def _closed_error() -> RendezvousConnectionError:
    return RendezvousConnectionError("the etcd session is closed")
