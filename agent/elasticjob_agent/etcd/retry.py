"""The agent's one retry helper for etcd requests: bounded by an outage budget and a deadline.

Every caller that must ride out a short etcd outage (the rendezvous executor, the store, the
restart counter) retries through ``retry_until``, so there is one backoff, one rule for what is
retried, and one clock per caller for the deadline. The request deadline that grows while etcd
is slow lives in the client (``elasticjob_agent.etcd.pacing``); ``retry_until`` bounds it by
what is left of the caller's budget.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from elasticjob_agent.errors import RendezvousConnectionError
from elasticjob_agent.etcd import pacing
from elasticjob_agent.etcd.client import LeaseNotFoundError, caller_budget

log = logging.getLogger(__name__)
T = TypeVar("T")


async def retry_until(
    op: Callable[[], Awaitable[T]],
    *,
    patience: float = math.inf,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_lease_lost: Callable[[], Awaitable[None]] | None = None,
    what: str = "etcd request",
) -> T:
    """Run ``op`` until it returns; retry it while etcd is unreachable.

    Contract:

    - ``RendezvousConnectionError`` is retried after a pause (its bound doubles from 50 ms to
      1 s; each pause is drawn from the upper half of the bound, ``pacing.jittered``) while the
      outage, measured from this call's first failure, is shorter than ``patience`` seconds
      and ``clock()`` is before ``deadline`` (a time on ``clock``; ``None``: no deadline). When
      either bound would pass before the next attempt, it raises ``RendezvousConnectionError``
      saying how long etcd was away.
    - Each attempt runs under ``caller_budget``: no request of it waits past the earlier of
      the two bounds (once an outage started) or ``deadline``, unless that is under the
      client's base request deadline.
    - ``LeaseNotFoundError``: when ``on_lease_lost`` is given it is awaited (it forgets the dead
      lease, so ``op`` grants a new one) and ``op`` is retried at once; otherwise it propagates.
    - Every other error propagates unchanged.
    """
    outage_start: float | None = None
    delay = pacing.FIRST_PAUSE
    while True:
        limit = math.inf if outage_start is None else outage_start + patience
        if deadline is not None:
            limit = min(limit, deadline)
        try:
            with caller_budget(None if math.isinf(limit) else limit - clock()):
                return await op()
        except RendezvousConnectionError as exc:
            now = clock()
            if outage_start is None:
                outage_start = now
                log.debug("%s: etcd unreachable (%s); retrying", what, exc)
            limit = outage_start + patience
            if deadline is not None:
                limit = min(limit, deadline)
            if now + delay >= limit:
                raise RendezvousConnectionError(
                    f"{what}: etcd unreachable for {now - outage_start:.1f}s "
                    f"(gave up after {min(patience, max(0.0, limit - outage_start)):g}s): {exc}"
                ) from exc
        except LeaseNotFoundError:
            if on_lease_lost is None:
                raise
            log.warning("%s: lease lost; granting a new one", what)
            await on_lease_lost()
            continue
        await asyncio.sleep(pacing.jittered(delay))
        delay = pacing.next_pause(delay)
