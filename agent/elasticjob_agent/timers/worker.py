"""Expiration timers for worker code: ``with expires(after=60): step()``.

If the block is still running ``after`` seconds later, the agent kills this worker (SIGKILL) and
the group restarts with reason ``timer`` (it spends ``max_restarts``, like a failure). Every timer
message also counts as a sign of progress in the agent's health report (``lastProgress``).

The agent passes a Unix datagram socket in ``ELASTICJOB_TIMER_SOCKET``. Outside the agent (plain
``python train.py``) the variable is absent and ``expires`` does nothing, so scripts stay runnable.
This module imports only the standard library (and the agent's pure ``protocol.defaults``).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

from elasticjob_agent.protocol import defaults

TIMER_SOCKET_ENV = defaults.TIMER_SOCKET_ENV
_MAX_SCOPE = 200
_MAX_STEP = 2**53


def _send(message: dict[str, object]) -> None:
    path = os.environ.get(TIMER_SOCKET_ENV)
    if not path:
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendto(json.dumps(message).encode(), path)
        except OSError:
            # The agent is gone or restarting us: nothing useful to do from inside the worker.
            return


@contextmanager
def expires(after: float, scope: str | None = None) -> Iterator[None]:
    """Ask the agent to kill this process unless the block ends within ``after`` seconds.

    ``scope`` names the timer (default: the caller's pid); nested timers need distinct scopes.
    Raises ``ValueError`` for a non-positive ``after``.
    """
    if not after > 0:
        raise ValueError(f"expires(after={after!r}): after must be a positive number of seconds")
    name = (scope or "default")[:_MAX_SCOPE]
    pid = os.getpid()
    _send({"op": "acquire", "pid": pid, "scope": name, "deadline": time.time() + after})
    try:
        yield
    finally:
        _send({"op": "release", "pid": pid, "scope": name})


def report_step(step: int) -> None:
    """Tell the agent this worker finished training step ``step`` (``elasticjob_agent.progress``).

    Raises ``ValueError`` for a step that is not an integer in ``0..2**53``.
    """
    if type(step) is not int or not 0 <= step <= _MAX_STEP:
        raise ValueError(f"report_step({step!r}): step must be an integer in 0..{_MAX_STEP}")
    _send({"op": "step", "pid": os.getpid(), "step": step})


def report_done() -> None:
    """Tell the agent this worker's training loop is over (``elasticjob_agent.progress``): what
    follows (a final checkpoint, teardown) is not watched by ``--progress-timeout``."""
    _send({"op": "done", "pid": os.getpid()})


def report_compute(seconds: float) -> None:
    """Tell the agent this worker computed for ``seconds`` in one training step
    (``elasticjob_agent.progress``). Never raises: a value that is not a plausible duration is
    ignored by the agent and counted (``computeRejected`` in its health report)."""
    value = seconds if isinstance(seconds, int | float) and not isinstance(seconds, bool) else None
    _send({"op": "compute", "pid": os.getpid(), "seconds": value})


@contextmanager
def step_timer() -> Iterator[None]:
    """Time the block as this step's compute (``elasticjob_agent.progress``): wall time on a
    monotonic clock, sent when the block ends without an exception (a failed step is no
    timing). Wrap work that does not wait for other ranks (see ``progress``)."""
    if not os.environ.get(TIMER_SOCKET_ENV):
        yield  # outside the agent: nothing to time, nothing to send
        return
    began = time.perf_counter()
    yield
    report_compute(time.perf_counter() - began)


def heartbeat() -> None:
    """Tell the agent this worker is making progress (shown as ``lastProgress``)."""
    _send({"op": "heartbeat", "pid": os.getpid()})
