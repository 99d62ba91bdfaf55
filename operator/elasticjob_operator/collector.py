"""The garbage collector's settings for one process that holds every job's objects.

CPython collects its youngest generation every 700 net allocations. An operator with hundreds of
probes and watch events in flight keeps many short-lived objects (a response being parsed, a
step's status) alive across 700 allocations: they are promoted, pile up in the oldest generation,
and set off its collection, which walks every object the process holds (the bodies of every pod
and job in kopf's indexes, millions of objects at 1000 jobs) and stops the event loop for the
whole walk. At 1000 jobs of 4 nodes a quarter of the operator's CPU went to the collector
(py-spy ``--native``), and a stopped loop answers every probe and step late at once.

So the youngest generation is much larger (a transient object dies young instead of being
promoted), and what exists at start-up (modules, classes, settings) is frozen out of every
collection. Each collection's pause is a metric (``elasticjob_gc_pause_seconds``).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping
from typing import Any

YOUNG_THRESHOLD = 50_000
"""Net allocations between two collections of the youngest generation (CPython: 700)."""
MIDDLE_THRESHOLD = 20
"""Young collections between two of the middle generation (CPython: 10)."""
OLD_THRESHOLD = 10
"""Middle collections before the oldest is considered (CPython: 10; it also waits until a
quarter more objects than it last kept were promoted into it)."""

Observe = Callable[[int, float], None]
"""Told each collection's generation and pause (seconds)."""


_observers: dict[Observe, Callable[[str, Mapping[str, Any]], None]] = {}


def tune(observe: Observe | None = None) -> None:
    """Set the thresholds, freeze what exists now, and report each collection to ``observe``
    (once, however often this is called with it)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
    if observe is not None and observe not in _observers:
        _observers[observe] = _timer(observe)
        gc.callbacks.append(_observers[observe])


def _timer(observe: Observe) -> Callable[[str, Mapping[str, Any]], None]:
    started = [0.0]

    def callback(phase: str, info: Mapping[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            observe(int(info["generation"]), time.perf_counter() - started[0])

    return callback
