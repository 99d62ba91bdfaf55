"""Training progress of the local worker group, and when it counts as hung (pure: no clock).

Workers report their step with ``elasticjob_agent.progress.report_step``; the timer server feeds
each report of a pid of the current group to ``StepProgress.observe`` with the agent's own clocks
(a worker's clock is never trusted). The group is hung when a step was seen in this round and
no local worker has reported one for ``timeout`` seconds since: model loading, compilation and
whatever else runs before the first step never counts, nor does what runs after a worker said
its loop is over (``report_done``: a final checkpoint, the process group's teardown).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class StepProgress:
    """The latest step any local worker of the group reported, and when (agent clocks)."""

    step: int
    """The highest step reported in this round (ranks may report different steps)."""
    at: float
    """Unix time of the latest report (for the health report)."""
    monotonic: float
    """Monotonic time of the latest report (for the hang judgement: immune to clock steps)."""
    done: bool = False
    """A local worker said its training loop is over: no hang is judged for the rest of the
    round."""

    def observe(self, step: int, at: float, monotonic: float) -> StepProgress:
        """Another report: every report restarts the hang clock, also one that repeats a step
        (a long evaluation may call ``report_step`` again to say it is alive)."""
        return StepProgress(max(self.step, step), at, monotonic, self.done)

    def finish(self) -> StepProgress:
        return replace(self, done=True)


def first_step(step: int, at: float, monotonic: float) -> StepProgress:
    return StepProgress(step, at, monotonic)


def is_hung(progress: StepProgress | None, timeout: float | None, now_monotonic: float) -> bool:
    """Whether the group made no progress for ``timeout`` seconds after its first step.

    ``None`` progress (no step yet in this round), ``None`` timeout (detection off) and a
    finished loop (``done``) are never a hang.
    """
    if progress is None or timeout is None or progress.done:
        return False
    return now_monotonic - progress.monotonic >= timeout
