"""Leader election: the loop around ``leadership.decide`` (the Lease I/O goes through ``kube``).

``acquire`` returns once this process holds the Lease; ``hold`` renews it and returns when the
Lease is lost (another holder, or no successful renewal for ``renew_deadline``). The caller stops
acting at once when ``hold`` returns: ``__main__`` exits the process.

``LeaseKeeper`` runs ``hold`` in a thread of its own, with its own event loop and API client:
the operator's loop may be busy for seconds (hundreds of jobs created at once), and a renewal
queued behind that work once cost the leader its Lease. client-go renews from a goroutine of its
own for the same reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable

from .core.leadership import (
    LeaseRecord,
    LeaseTimings,
    Move,
    Observation,
    decide,
    next_record,
    released,
)
from .core.leadership import observe as observe_lease
from .kube import Kube, KubeError, micro_time

log = logging.getLogger(__name__)


class Elector:
    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        name: str,
        identity: str,
        timings: LeaseTimings,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._timings = timings
        self._monotonic = monotonic
        self._wall = wall
        self._seen: Observation | None = None

    @property
    def where(self) -> str:
        return f"lease {self._namespace}/{self._name}"

    async def _try(self) -> tuple[Move, bool]:
        """One round: read, decide, write. (move, whether this process holds the Lease now)."""
        record = await self._kube.read_lease(self._namespace, self._name)
        self._seen = observe_lease(self._seen, record, self._monotonic())
        move = decide(self._seen, self.identity, self._monotonic())
        if move is Move.WAIT:
            return move, False
        new = next_record(
            record,
            move,
            self.identity,
            micro_time(self._wall()),
            max(1, round(self._timings.duration)),
        )
        return move, await self._kube.write_lease(self._namespace, self._name, new)

    async def acquire(self) -> None:
        """Wait until this process holds the Lease."""
        announced = False
        while True:
            try:
                move, held = await self._try()
                if held:
                    log.info("%s acquired by %s (%s)", self.where, self.identity, move.value)
                    return
                if not announced and self._seen is not None:
                    log.info("%s is held by %s: standing by", self.where, self._seen.record.holder)
                    announced = True
            except KubeError as exc:
                log.warning("%s: %s", self.where, exc)
            await asyncio.sleep(self._timings.retry_period)

    async def hold(self) -> str:
        """Renew until the Lease is lost; returns why."""
        renewed = self._monotonic()
        while True:
            await asyncio.sleep(self._timings.retry_period)
            try:
                move, held = await self._try()
                if held:
                    renewed = self._monotonic()
                    continue
                if move is Move.WAIT and self._seen is not None:
                    return f"{self.where} is now held by {self._seen.record.holder}"
            except KubeError as exc:
                log.warning("%s: cannot renew: %s", self.where, exc)
            if self._monotonic() - renewed >= self._timings.renew_deadline:
                return f"{self.where} not renewed for {self._timings.renew_deadline:g} s"

    async def release(self) -> None:
        """Hand the Lease back (clean shutdown), so a standby takes over without waiting."""
        try:
            record = await self._kube.read_lease(self._namespace, self._name)
            back: LeaseRecord | None = released(record, self.identity)
            if back is not None and await self._kube.write_lease(self._namespace, self._name, back):
                log.info("%s released", self.where)
        except KubeError as exc:
            log.warning("%s: cannot release: %s", self.where, exc)


class LeaseKeeper:
    """Holds the Lease from a thread of its own (see the module's docstring).

    ``connect`` makes the thread's own API client (a client belongs to the event loop that made
    it); ``make`` builds the elector on it. ``on_lost(reason)`` is called from the keeper's
    thread when the Lease is lost; it must stop the process from acting (``__main__`` exits).
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[Kube]],
        make: Callable[[Kube], Elector],
        on_lost: Callable[[str], None],
    ) -> None:
        self._connect = connect
        self._make = make
        self._on_lost = on_lost
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="lease-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Stop renewing and hand the Lease back (a clean shutdown); returns within ``timeout``
        seconds."""
        deadline = time.monotonic() + timeout
        self._ready.wait(timeout)
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            # The loop may close in between: the thread is ending anyway.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(max(0.0, deadline - time.monotonic()))

    def _main(self) -> None:
        try:
            reason = asyncio.run(self._keep())
        except Exception as exc:  # any failure of the keeper loses the Lease
            log.exception("lease keeper failed")
            reason = f"the lease keeper failed: {exc!r}"
        finally:
            self._ready.set()
        if reason is not None:
            self._on_lost(reason)

    async def _keep(self) -> str | None:
        """``None`` after a clean stop (the Lease handed back), else why it was lost."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        kube = await self._connect()
        try:
            elector = self._make(kube)
            holding = asyncio.ensure_future(elector.hold())
            stopping = asyncio.ensure_future(self._stop.wait())
            await asyncio.wait({holding, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if holding.done():
                stopping.cancel()
                return holding.result()
            holding.cancel()
            await elector.release()
            return None
        finally:
            await kube.close()
