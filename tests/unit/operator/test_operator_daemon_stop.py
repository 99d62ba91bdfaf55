"""The job daemon stops at once when asked, even in the middle of a long step.

Uses kopf's own stop flag (the object kopf hands every daemon), no fake.
"""

from __future__ import annotations

import asyncio

import pytest
from elasticjob_operator.handlers import _unless_stopped
from kopf._cogs.aiokits.aioenums import AsyncFlagWaiter, FlagSetter
from kopf._core.intents.stoppers import DaemonStoppingReason


def _flag() -> tuple[FlagSetter[DaemonStoppingReason], AsyncFlagWaiter[DaemonStoppingReason]]:
    setter: FlagSetter[DaemonStoppingReason] = FlagSetter()
    return setter, setter.async_waiter


async def test_a_stop_cuts_a_long_step_short() -> None:
    setter, stopped = _flag()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def probing_a_pod_that_is_going_away() -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    running = asyncio.create_task(_unless_stopped(stopped, probing_a_pod_that_is_going_away()))
    await asyncio.wait_for(started.wait(), 5)  # a stop before the step began would cancel less
    setter.set(DaemonStoppingReason.RESOURCE_DELETED)
    assert await asyncio.wait_for(running, 5) is None
    assert cancelled.is_set()


async def test_a_step_that_ends_returns_its_result() -> None:
    _, stopped = _flag()

    async def step() -> str:
        return "stepped"

    assert await _unless_stopped(stopped, step()) == "stepped"


async def test_a_failing_step_raises_its_error() -> None:
    _, stopped = _flag()

    async def step() -> str:
        raise RuntimeError("API down")

    with pytest.raises(RuntimeError, match="API down"):
        await _unless_stopped(stopped, step())


async def test_cancelling_the_daemon_cancels_its_step() -> None:
    # kopf cancels a daemon that ignores its flag past cancellation_timeout: nothing may linger.
    _, stopped = _flag()
    step_started, step_cancelled = asyncio.Event(), asyncio.Event()

    async def step() -> None:
        step_started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            step_cancelled.set()
            raise

    running = asyncio.create_task(_unless_stopped(stopped, step()))
    await asyncio.wait_for(step_started.wait(), 5)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await asyncio.wait_for(step_cancelled.wait(), 5)
