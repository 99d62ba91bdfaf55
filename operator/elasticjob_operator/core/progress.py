"""Training progress in the job's status, and the ``NoProgress`` stall (pure; the clock is an
argument).

Agents report the highest step their workers reached in the current round and when
(``lastStep``, ``lastStepAt``; ``elasticjob_agent.progress.report_step``). The job's progress is
the highest step over the agents of the newest running round, and its time the newest report.
``status.progress`` moves at most once per sample period of the agents' time, so steady training
costs one status write per job per period, and ``stepsPerSecond`` is the rate between two
samples. The period (``sample_period``) is at least ``ELASTICJOB_PROGRESS_SAMPLE_SECONDS`` (30 s)
and long enough that all jobs together write at most ``ELASTICJOB_PROGRESS_WRITES_PER_SECOND``
(5) samples a second: 30 s up to 150 jobs, 200 s at 1000. The steady state's writes stay within
a budget whatever the number of jobs. Each job samples in its own slot of the period (``phase_of``
its uid), so jobs started together do not write together: a budget of 5 a second is 5 a second
in any stretch of time, not 40 in one burst and none after.

``NoProgress`` (with ``spec.progressTimeoutSeconds``): no rank reported a step for the timeout
after the first one, seen either in the reports or, more reliably, as a group restart the agents
counted under ``hang`` (the agents act on the timeout themselves; the operator polls reports and
may never see the silent window). It lasts until a step is reported after it began: the restarted
group loading its model is still the same stall, and no amount of waiting fails the job for it
(``stallTimeoutSeconds`` does not apply; the restart budget does).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from elasticjob_agent.protocol.health import AgentState, HealthReport

from .conditions import rfc3339
from .observed import parse_time

SAMPLE_SECONDS = 30.0
"""Least time (agents' clocks) between two updates of ``status.progress``, by default."""
WRITES_PER_SECOND = 5.0
"""Progress samples written per second across all jobs at most, by default."""
NO_PROGRESS = "NoProgress"


@dataclass(frozen=True)
class GroupProgress:
    """What the agents of the newest running round report now."""

    step: int
    at: float
    """Unix time of the newest step report (an agent's clock)."""
    done: bool = False
    """A worker said its training loop is over (``report_done``): silence is no hang now."""
    timeout: float | None = None
    """The highest hang timeout in force an agent of the round reports (fixed or learned)."""


@dataclass(frozen=True)
class ProgressState:
    """``status.progress``: the last sample and the rate since the one before."""

    step: int
    at: float
    steps_per_second: float | None = None
    timeout_seconds: float | None = None
    """The hang timeout in force at the sample (``GroupProgress.timeout``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "lastStepTime": rfc3339(self.at),
            "sampledAt": self.at,
            "stepsPerSecond": self.steps_per_second,
            "timeoutSeconds": self.timeout_seconds,
        }

    @classmethod
    def from_json(cls, data: object) -> ProgressState | None:
        """A stored ``status.progress``; ``None`` when absent or not what we write."""
        if not isinstance(data, Mapping):
            return None
        step, at, rate = data.get("step"), data.get("sampledAt"), data.get("stepsPerSecond")
        if type(step) is not int or step < 0:
            return None
        if isinstance(at, bool) or not isinstance(at, int | float):
            at = parse_time(data.get("lastStepTime"))
            if at is None:
                return None
        if isinstance(rate, bool) or not isinstance(rate, int | float) or rate < 0:
            rate = None
        timeout = data.get("timeoutSeconds")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            timeout = None
        return cls(
            step,
            float(at),
            None if rate is None else float(rate),
            None if timeout is None else float(timeout),
        )


def group_progress(reports: Iterable[HealthReport], run_id: str) -> GroupProgress | None:
    """The job's progress from the agents of its newest running round; ``None`` before a step."""
    running = [
        r
        for r in reports
        if r.run_id == run_id and r.state is AgentState.RUNNING and r.round is not None
    ]
    top = max((r.round or 0 for r in running), default=None)
    stepped = [
        r
        for r in running
        if r.round == top and r.last_step is not None and r.last_step_at is not None
    ]
    if not stepped:
        return None
    timeouts = [
        r.progress_timeout_seconds for r in stepped if r.progress_timeout_seconds is not None
    ]
    return GroupProgress(
        max(r.last_step or 0 for r in stepped),
        max(r.last_step_at or 0.0 for r in stepped),
        any(r.steps_done for r in stepped),
        max(timeouts, default=None),
    )


def phase_of(uid: str) -> float:
    """Where in each sample period a job samples (a stable fraction of its uid, in [0, 1))."""
    return zlib.crc32(uid.encode()) / 2**32


def _slot(at: float, period: float, phase: float) -> int:
    return math.floor(at / period - phase)


def advance(
    state: ProgressState | None,
    seen: GroupProgress | None,
    period: float = SAMPLE_SECONDS,
    phase: float = 0.0,
) -> ProgressState | None:
    """The next ``status.progress``: unchanged until ``period`` seconds passed since the last
    sample, or half of it when a boundary of the job's slots (``phase`` of the period) lies in
    between: the samples of a job move onto its slot boundaries within two periods. A step lower
    than the last (a restart resumed from a checkpoint) starts anew."""
    if seen is None:
        return state
    timeout = None if seen.timeout is None else round(seen.timeout, 1)
    if state is None:
        return ProgressState(seen.step, seen.at, timeout_seconds=timeout)
    if seen.done and seen.step == state.step:
        return state  # finished at this step: nothing new to sample
    elapsed = seen.at - state.at
    crossed = _slot(seen.at, period, phase) != _slot(state.at, period, phase)
    if elapsed < period and not (crossed and elapsed >= period / 2):
        return state
    if seen.step < state.step:
        return ProgressState(seen.step, seen.at, timeout_seconds=timeout)
    rate = round((seen.step - state.step) / elapsed, 3)
    return ProgressState(seen.step, seen.at, rate, timeout)


def sample_period(least: float, jobs: int, writes_per_second: float) -> float:
    """Seconds between two samples of one job's progress when the operator runs ``jobs`` jobs:
    ``least``, or longer so that all jobs write at most ``writes_per_second`` samples a second
    (no budget when it is 0)."""
    if writes_per_second <= 0:
        return least
    return max(least, jobs / writes_per_second)


@dataclass(frozen=True)
class NoProgress:
    message: str


def no_progress(
    *,
    timeout: int | None,
    seen: GroupProgress | None,
    current: tuple[float, str] | None,
    hang_restarts_added: int,
    now: float,
) -> NoProgress | None:
    """Whether the job is stalled with reason ``NoProgress`` in this step.

    ``current``: since when and with which message the job is already stalled with
    ``NoProgress`` (``None``: it is not); ``hang_restarts_added``: group restarts the agents
    counted under ``hang`` since the previous step.
    """
    if timeout is None:
        return None
    if hang_restarts_added > 0:
        return NoProgress(_message(timeout, seen, restarted=True))
    if current is not None:
        since, message = current
        if seen is not None and seen.at > since:
            return None
        return NoProgress(message)
    if seen is not None and not seen.done and now - seen.at >= timeout:
        return NoProgress(_message(timeout, seen, restarted=False))
    return None


def _message(timeout: int, seen: GroupProgress | None, *, restarted: bool) -> str:
    last = "" if seen is None else f" (last step {seen.step})"
    if restarted:
        return (
            f"no rank advanced for progressTimeoutSeconds ({timeout} s){last}; the agents "
            "restarted the worker group (restart reason hang); waiting for its first step"
        )
    return f"no rank advanced for progressTimeoutSeconds ({timeout} s){last}"
