"""How long one etcd request may wait, and how long to pause before retrying one. Pure.

Why: a request that etcd has not answered within its deadline may still be queued in etcd (a
transaction waits for etcd's apply loop); re-sending it adds one more transaction to the queue
it waits in. Under load (thousands of nodes joining while etcd's apply loop is starved of CPU)
a fixed 5 s deadline turned every slow join into a retry every 5 s, and the retries kept the
queue long (9 transactions per node at N = 4096, and the round never completed).

The rule:

- A client starts with its configured deadline ``base``. Each request left unanswered (its
  deadline passed, or etcd said it timed out or is overloaded) doubles the deadline, up to
  ``CEILING * base``: a client sends O(log CEILING) extra requests per slow spell instead of
  one per ``base`` seconds.
- An answer that took ``latency`` seconds brings the deadline back to ``max(base, min(deadline,
  2 * latency))``: at once to ``base`` when etcd is fast again, and never below twice what the
  slow etcd just needed.
- One request never waits longer than its caller can (``remaining``: the retry's outage budget
  or deadline), but always at least ``base``, as before this rule.
- The pause before a retry doubles from ``FIRST_PAUSE`` to ``MAX_PAUSE`` and is drawn uniformly
  from its upper half, so nodes that failed together do not retry together.
"""

from __future__ import annotations

import random

GROWTH = 2.0
CEILING = 8.0
"""The longest deadline is ``CEILING * base`` (40 s for the agent's 5 s)."""
FIRST_PAUSE = 0.05
MAX_PAUSE = 1.0


def after_silence(deadline: float, base: float) -> float:
    """The deadline after a request went unanswered within ``deadline``."""
    return min(max(deadline, base) * GROWTH, CEILING * base)


def after_answer(deadline: float, base: float, latency: float) -> float:
    """The deadline after etcd answered a request in ``latency`` seconds."""
    return max(base, min(deadline, GROWTH * latency))


def for_request(deadline: float, base: float, remaining: float | None) -> float:
    """The deadline of the next request: the client's ``deadline``, cut to the caller's
    ``remaining`` seconds (``None``: no bound), never below ``base``."""
    if remaining is None:
        return deadline
    return max(base, min(deadline, remaining))


def next_pause(pause: float) -> float:
    """The (upper bound of the) pause after ``pause``: doubling, at most ``MAX_PAUSE``."""
    return min(pause * 2, MAX_PAUSE)


def jittered(pause: float, rng: random.Random | None = None) -> float:
    """A pause drawn uniformly from ``[pause / 2, pause]``."""
    draw = (rng or _RNG).uniform(0.5, 1.0)
    return pause * draw


_RNG = random.Random()
