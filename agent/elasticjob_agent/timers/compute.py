"""Compute time per step of the local ranks, and the node's figure for the health report (pure:
no clock, no sockets).

Workers time their compute with ``elasticjob_agent.progress.step_timer`` (or report a duration
with ``report_compute``); the timer server feeds each timing of a pid of the current group to
``ComputeTimes.observe``. The node's figure is the median over its ranks of each rank's median
over its last ``window`` timings: one slow step (a checkpoint, a page fault) moves neither. A
timing is untrusted: one that ``protocol.compute.valid_seconds`` refuses is ignored and counted
(``rejected``), never stored.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from statistics import median

from elasticjob_agent.protocol import defaults
from elasticjob_agent.protocol.compute import ComputeFigure, valid_seconds

MAX_RANKS = 1024
"""Most ranks tracked at once (as many as a report lists workers); later pids are refused."""


@dataclass
class ComputeTimes:
    """Each rank's last ``window`` timings, by pid; ``reset`` at every new group."""

    window: int = defaults.COMPUTE_WINDOW_STEPS
    rejected: int = 0
    by_rank: dict[int, deque[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"ComputeTimes(window={self.window}): window must be >= 1")

    def observe(self, rank: int, value: object) -> bool:
        """Record one timing of ``rank`` (a pid); False (and counted) when it is refused."""
        seconds = valid_seconds(value)
        times = self.by_rank.get(rank)
        if times is None and seconds is not None and len(self.by_rank) < MAX_RANKS:
            times = self.by_rank[rank] = deque(maxlen=self.window)
        if seconds is None or times is None:
            self.rejected += 1
            return False
        times.append(seconds)
        return True

    def reset(self) -> None:
        """A new group: its ranks' timings start over (the rejected count does not)."""
        self.by_rank.clear()

    def figure(self) -> ComputeFigure:
        per_rank = [median(times) for times in self.by_rank.values() if times]
        samples = sum(len(times) for times in self.by_rank.values())
        return ComputeFigure(median(per_rank) if per_rank else None, samples, self.rejected)
