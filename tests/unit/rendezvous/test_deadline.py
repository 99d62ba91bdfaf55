"""``until``: work bounded by a deadline on an injected clock (no sleeps, no wall time)."""

from __future__ import annotations

import asyncio

import pytest
from elasticjob_agent.rendezvous.deadline import ClockTimer, DeadlineReached, until


class FakeTimer:
    """A clock that moves only when the test says so."""

    def __init__(self, now: float = 100.0) -> None:
        self._now = now
        self._moved = asyncio.Event()

    def now(self) -> float:
        return self._now

    async def sleep_until(self, deadline: float) -> None:
        while self._now < deadline:
            self._moved.clear()
            await self._moved.wait()

    def advance(self, seconds: float) -> None:
        self._now += seconds
        self._moved.set()


async def settle() -> None:
    """Let every ready task run (a fixed number of loop turns, not a duration)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def never() -> None:
    await asyncio.get_running_loop().create_future()


async def stubborn(cancelled: list[bool]) -> None:
    """Swallows its first cancellation, like a call stuck in a layer that ignores it."""
    try:
        await never()
    except asyncio.CancelledError:
        cancelled.append(True)
        await never()


async def test_work_that_never_finishes_ends_at_the_deadline_not_before() -> None:
    timer = FakeTimer()
    waiter = asyncio.ensure_future(until(timer, timer.now() + 5, never()))
    await settle()
    timer.advance(4.9)
    await settle()
    assert not waiter.done()
    timer.advance(0.1)
    with pytest.raises(DeadlineReached):
        await waiter


async def test_work_that_ignores_its_cancellation_cannot_hold_the_caller() -> None:
    timer = FakeTimer()
    cancelled: list[bool] = []
    waiter = asyncio.ensure_future(until(timer, timer.now() + 1, stubborn(cancelled)))
    await settle()
    timer.advance(1)
    with pytest.raises(DeadlineReached):
        await waiter
    await settle()
    assert cancelled == [True]


async def test_the_result_of_work_that_finishes_first() -> None:
    timer = FakeTimer()

    async def answer() -> int:
        return 42

    assert await until(timer, timer.now() + 1, answer()) == 42


async def test_the_error_of_work_propagates() -> None:
    timer = FakeTimer()

    async def fail() -> None:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        await until(timer, timer.now() + 1, fail())


async def test_a_deadline_already_past_gives_up_at_once_and_cancels_the_work() -> None:
    timer = FakeTimer()
    work = asyncio.ensure_future(never())
    with pytest.raises(DeadlineReached):
        await until(timer, timer.now(), work)
    await settle()
    assert work.cancelled()


async def test_cancelling_the_caller_cancels_the_work() -> None:
    timer = FakeTimer()
    work = asyncio.ensure_future(never())
    waiter = asyncio.ensure_future(until(timer, timer.now() + 10, work))
    await settle()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await settle()
    assert work.cancelled()


async def test_clock_timer_sleeps_until_its_clock_reaches_the_deadline() -> None:
    now = [0.0]
    timer = ClockTimer(lambda: now[0])
    sleeper = asyncio.ensure_future(timer.sleep_until(-1.0))
    await settle()
    assert sleeper.done()
