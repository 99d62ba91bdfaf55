"""Leader election: the loop around ``leadership.decide`` (the Lease I/O goes through ``kube``).

``acquire`` returns once this process holds the Lease; ``hold`` renews it and returns when the
Lease is lost (another holder, or no successful renewal for ``renew_deadline``). The caller stops
acting at once when ``hold`` returns: ``__main__`` exits the process.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from .kube import Kube, KubeError, micro_time
from .leadership import LeaseRecord, LeaseTimings, Move, Observation, decide, next_record, released
from .leadership import observe as observe_lease

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
