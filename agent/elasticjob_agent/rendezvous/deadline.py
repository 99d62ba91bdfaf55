"""Bounded waits: every await of the rendezvous ends by a deadline, whatever the awaited does.

A watch is an optimisation, never the only way to learn of a change: a waiter races its watch
against a timer and re-reads the state when the timer wins. A lost watch event (a stream
dropped while the watch was being created, an event etcd never sent) then costs at most one
re-check interval instead of a hang.

The timer is injected (``Timer``): production uses the wall clock; unit tests advance a fake
one, so deadlines are tested without sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


class Timer(Protocol):
    """A clock and a way to sleep until one of its times."""

    def now(self) -> float:
        """The current time (unix seconds for the wall clock)."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once ``now() >= deadline`` (at once if it already is)."""
        ...


class ClockTimer:
    """A real clock (the wall clock by default) and ``asyncio.sleep``."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.now = clock

    async def sleep_until(self, deadline: float) -> None:
        while True:
            left = deadline - self.now()
            if left <= 0:
                return
            await asyncio.sleep(left)


class DeadlineReached(Exception):
    """``until`` gave up on its work at its deadline."""


def _forget(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` without waiting for it (it may be stuck in a call that ignores the
    cancel for a while); its outcome is retrieved so that asyncio logs nothing."""

    def retrieve(t: asyncio.Future[Any]) -> None:
        if not t.cancelled():
            t.exception()

    task.cancel()
    task.add_done_callback(retrieve)


async def until(timer: Timer, deadline: float, work: Awaitable[T]) -> T:
    """The result of ``work`` if it finishes before ``timer`` reaches ``deadline`` (its
    exception propagates); else ``DeadlineReached``. ``work`` is then cancelled and left
    behind, never awaited, so not even a coroutine that swallows its cancellation can hold the
    caller past ``deadline``."""
    task = asyncio.ensure_future(work)
    if timer.now() >= deadline:
        _forget(task)
        raise DeadlineReached(f"deadline {deadline:.3f} reached")
    alarm = asyncio.ensure_future(timer.sleep_until(deadline))
    try:
        await asyncio.wait({task, alarm}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        _forget(task)
        _forget(alarm)
        raise
    if task.done():
        _forget(alarm)
        return task.result()
    _forget(task)
    raise DeadlineReached(f"deadline {deadline:.3f} reached")


_BACKGROUND: set[asyncio.Future[Any]] = set()


def detach(timer: Timer, within: float, cleanup: Awaitable[Any]) -> None:
    """Run ``cleanup`` in the background for at most ``within`` seconds of ``timer``; its
    errors are logged at debug level (cleanups are best effort)."""

    async def bounded() -> None:
        try:
            await until(timer, timer.now() + within, cleanup)
        except Exception as exc:
            log.debug("background cleanup failed: %r", exc)

    task = asyncio.ensure_future(bounded())
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


async def drain(within: float) -> None:
    """Wait up to ``within`` seconds (loop clock) for the background cleanups of this loop, so
    that closing the loop right after leaves no call half done."""
    loop = asyncio.get_running_loop()
    mine = {t for t in _BACKGROUND if t.get_loop() is loop}
    if mine:
        await asyncio.wait(mine, timeout=within)
