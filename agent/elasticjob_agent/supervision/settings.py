"""``SupervisorSettings``: what the command line fixes for the supervisor's whole life (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field

from elasticjob_agent.protocol.failure_policy import FailurePolicy
from elasticjob_agent.supervision.worker_env import AgentKnobs


@dataclass(frozen=True)
class SupervisorSettings:
    role: str
    nproc_per_node: int
    max_restarts: int
    monitor_interval: float
    shutdown_timeout: float
    etcd_timeout: float
    local_addr: str | None
    knobs: AgentKnobs
    progress_timeout: float | None = None
    """``--progress-timeout``: restart with reason ``hang`` after this long without a step."""
    progress_auto: bool = False
    """``--progress-timeout auto``: the timeout is the one the timers learned from the steps
    (``protocol.hang_timeout``); ``progress_timeout`` is unused."""
    failure_policy: FailurePolicy = field(default_factory=FailurePolicy)
    """``--failure-policy``: what a failure that would spend the budget does instead."""
