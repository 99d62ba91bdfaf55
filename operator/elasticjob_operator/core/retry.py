"""When a job's loop tries again after the API server failed or refused a request: the one
back-off rule of the operator, used by ``handlers.py`` (a step that raised) and by
``reconciler.py`` (a step that went on after a refusal, which became a condition)."""

from __future__ import annotations

REJECTED_BACKOFF_MAX = 60.0
"""Longest wait between steps while the API server keeps refusing a request (4xx)."""
TRANSIENT_BACKOFF_MAX = 30.0
"""Longest wait between steps while the API server cannot be reached or fails (5xx, network)."""
_DOUBLINGS = 6
"""At most this many doublings of the interval, whatever the cap."""


def backed_off(interval: float, doublings: int, *, rejected: bool) -> float:
    """``interval`` doubled ``doublings`` times (at most six), capped at
    ``REJECTED_BACKOFF_MAX`` when the server refused the request and at
    ``TRANSIENT_BACKOFF_MAX`` otherwise; ``interval`` itself when ``doublings`` is 0."""
    if doublings <= 0:
        return interval
    cap = REJECTED_BACKOFF_MAX if rejected else TRANSIENT_BACKOFF_MAX
    return min(cap, interval * 2.0 ** min(doublings, _DOUBLINGS))
