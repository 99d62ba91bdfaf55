"""Expiration timers (reference: torchelastic timers).

Worker side: ``from elasticjob_agent.timers import expires, heartbeat`` (``timers.worker``).
Agent side: ``timers.server`` (the socket the workers talk to) and ``timers.table`` (pure).
"""

from elasticjob_agent.timers.worker import (
    TIMER_SOCKET_ENV,
    expires,
    heartbeat,
    report_done,
    report_step,
)

__all__ = ["TIMER_SOCKET_ENV", "expires", "heartbeat", "report_done", "report_step"]
