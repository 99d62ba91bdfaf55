"""Start the health server on the asked port, or on a free one when that port is taken.

torchrun needs no port of its own, so two torchrun processes on one host just work; ours serves
``/status`` on ``--health-port`` (default 29401). A busy port must not stop the second agent:
it falls back to a free port, logs it and reports it in ``/status`` (``healthPort``). The operator
probes only pods, one agent each, where the default port is always free.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from typing import TypeVar

logger = logging.getLogger(__name__)

_Server = TypeVar("_Server")


def start_with_fallback(
    start: Callable[[int], _Server], addr: str, port: int, port_of: Callable[[_Server], int]
) -> _Server:
    """``start(port)``; if that port is in use, ``start(0)`` (any free port), logged as a warning.

    Any other ``OSError`` (a bad address, no permission for a low port) is raised unchanged: the
    user asked for something that cannot work on any port.
    """
    try:
        return start(port)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE or port == 0:
            raise
        server = start(0)
        logger.warning(
            "health port %s:%d is in use (another agent on this host?); serving health on "
            "port %d instead (reported as healthPort in /status)",
            addr,
            port,
            port_of(server),
        )
        return server
