"""Bounded waits for asynchronous tests: a condition polled until it holds, a hang fails."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

WAIT_LIMIT = 30.0
"""Bound of every wait of these tests (a hang fails them)."""


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` on the running loop until it holds; fail after ``WAIT_LIMIT``."""
    stop_at = time.monotonic() + WAIT_LIMIT
    while not condition():
        if time.monotonic() > stop_at:
            raise AssertionError(f"not within {WAIT_LIMIT}s: {what}")
        await asyncio.sleep(0.02)
