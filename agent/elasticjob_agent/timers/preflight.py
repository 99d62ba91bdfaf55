"""The pre-flight compute check (``--preflight``, ``spec.health.preflight``): how long this node
takes for a fixed amount of work, before its first round's workers start.

The work is SHA-256 over a fixed buffer: C code that keeps one core busy without allocating,
so a node whose CPU is throttled, shared or slow takes longer, and one that is well takes about
as long as its peers. Three runs; the figure is their median (one preempted run moves nothing).
Bounded: once ``deadline`` seconds have passed the check stops and extrapolates the rest from
what it did. The operator compares the nodes' figures (``preflightSeconds``); no collective is
run (see docs/operator.md, "Stragglers").
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from statistics import median

CHUNK_BYTES = 1 << 20
CHUNKS = 32
"""Chunks of ``CHUNK_BYTES`` hashed per run (about 0.05 to 0.2 s on one core of a server)."""
RUNS = 3
DEADLINE_SECONDS = 10.0
"""The check never takes (much) longer than this, however slow the node."""


def extrapolate(elapsed: float, done: int, total: int) -> float:
    """The time ``total`` units would take at the pace of ``done`` units in ``elapsed`` (none
    done counts as one: the figure stays finite)."""
    return elapsed * total / max(done, 1)


def measure(
    *,
    chunks: int = CHUNKS,
    runs: int = RUNS,
    deadline: float = DEADLINE_SECONDS,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Seconds this node takes for one run of ``chunks`` chunks (the median of ``runs``)."""
    if chunks < 1 or runs < 1 or not deadline > 0:
        raise ValueError(f"measure(chunks={chunks}, runs={runs}, deadline={deadline}): all > 0")
    buffer = bytes(CHUNK_BYTES)
    began = clock()
    figures: list[float] = []
    for _ in range(runs):
        start, done = clock(), 0
        digest = hashlib.sha256()
        while done < chunks and clock() - began < deadline:
            digest.update(buffer)
            done += 1
        figures.append(extrapolate(clock() - start, done, chunks))
        if clock() - began >= deadline:
            break
    return median(figures)
