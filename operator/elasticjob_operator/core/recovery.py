"""What each failure cost (``status.lastRecovery``) and what training kept (``status.goodput``).
Pure; the clock is an argument.

A recovery is the way from a fault back to training: ``faultAt`` (the earliest evidence of the
fault) -> ``detectedAt`` (the restart began) -> ``rendezvousAt`` (the new round completed) ->
``restoredAt`` (the first step began) -> ``firstStepAt`` (the first step completed), with the step
training resumed from (``restoredStep``) and the steps done twice (``stepsLost``). It is read
from the agents of the newest running round (their health reports: ``roundStartedAt``,
``firstStep``/``firstStepAt``, ``previousStep``/``previousStepAt``, ``lastRendezvousSeconds``)
and the job's root cause (``status.lastFailure``). A round is a recovery when one of its agents
took part in an earlier round that reported a step; the job's first round is none.

The agents' clocks are untrusted: a time further in the future than
``root_cause.MAX_CLOCK_SKEW_SECONDS`` (by the operator's clock) is ignored, and the phases are
put in order (each time at least the one before it), so no phase is negative.

``trainingSeconds`` (``account``) is the time the group spent in steps the model kept, by the
agents' clocks: the time between two progress samples in which the step advanced; at a
recovery, the time stepped after the last sample up to the last step before the fault
(``previousStepAt``) is added and the time of the lost steps (``stepsLost`` at the rate sampled
before the fault) taken off, never below 0; a sample after a recovery counts from the first
step after it, not across the outage. ``wallSeconds`` is the time since the job started
(``status.startTime``, the operator's clock), and ``ratio`` their quotient in [0, 1]. Goodput
changes only when a progress sample is taken or a recovery recorded, so it costs no status
write of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from elasticjob_agent.protocol.health import AgentState, HealthReport

from .evidence import Cause
from .progress import ProgressState
from .root_cause import MAX_CLOCK_SKEW_SECONDS

MEMBERSHIP = "membership"
"""``lastRecovery.reason`` of a restart with no failure of its own (a scale-up or -down, a
spare called in): the restart reason agents count for it."""
PHASES = ("detect", "rendezvous", "restore", "first_step")
"""The phases of a recovery, as the ``phase`` label of ``elasticjob_recovery_seconds``."""


@dataclass(frozen=True)
class RoundStart:
    """What the agents of the newest running round say about how it started (their clocks)."""

    round: int
    started_at: float
    """When the round's workers started: the latest an agent reports."""
    entered_at: float
    """When the first agent entered the rendezvous that formed the round (the restart began)."""
    first_step: int
    """The lowest first step an agent reports in the round."""
    first_step_at: float
    """When the first step of the round completed: the earliest an agent reports."""
    previous_step: int
    """The highest step of an earlier round an agent reports (the last step before the fault)."""
    previous_step_at: float | None
    """When ``previous_step`` was reported; ``None`` when that time was refused."""


def round_start(reports: Iterable[HealthReport], run_id: str, now: float) -> RoundStart | None:
    """The start of the newest running round of ``run_id``; ``None`` before its first step is
    reported, or when it is not a recovery (no agent of it stepped in an earlier round)."""
    latest = now + MAX_CLOCK_SKEW_SECONDS

    def ok(value: float | None) -> float | None:
        return value if value is not None and value <= latest else None

    running = [
        r
        for r in reports
        if r.run_id == run_id and r.state is AgentState.RUNNING and r.round is not None
    ]
    top = max((r.round or 0 for r in running), default=None)
    members = [r for r in running if r.round == top]
    started = [t for r in members if (t := ok(r.round_started_at)) is not None]
    firsts = [
        (r.first_step, t)
        for r in members
        if r.first_step is not None and (t := ok(r.first_step_at)) is not None
    ]
    previous = [(r.previous_step, ok(r.previous_step_at)) for r in members]
    stepped = [(step, at) for step, at in previous if step is not None]
    if top is None or not started or not firsts or not stepped:
        return None
    started_at = max(started)
    entered = [
        t - r.last_rendezvous_seconds
        for r in members
        if r.last_rendezvous_seconds is not None and (t := ok(r.round_started_at)) is not None
    ]
    last_step = max(step for step, _ in stepped)
    return RoundStart(
        round=top,
        started_at=started_at,
        entered_at=max(0.0, min(entered, default=started_at)),
        first_step=min(step for step, _ in firsts),
        first_step_at=min(at for _, at in firsts),
        previous_step=last_step,
        previous_step_at=max(
            (at for step, at in stepped if step == last_step and at is not None), default=None
        ),
    )


@dataclass(frozen=True)
class Recovery:
    """``status.lastRecovery``: one recovery, times as Unix seconds (agents' clocks)."""

    reason: str
    """The root cause's kind (``lastFailure.kind``) when the cause is of this recovery, else
    ``membership``."""
    fault_at: float
    detected_at: float
    rendezvous_at: float
    restored_at: float
    restored_step: int
    first_step_at: float
    steps_lost: int
    round: int

    @property
    def seconds(self) -> float:
        """From the fault to the first step completed after it."""
        return round(self.first_step_at - self.fault_at, 3)

    def phases(self) -> dict[str, float]:
        """Seconds per phase (``PHASES``), each >= 0, together ``seconds``."""
        return {
            "detect": round(self.detected_at - self.fault_at, 3),
            "rendezvous": round(self.rendezvous_at - self.detected_at, 3),
            "restore": round(self.restored_at - self.rendezvous_at, 3),
            "first_step": round(self.first_step_at - self.restored_at, 3),
        }

    def same_as(self, other: Recovery | None) -> bool:
        """Whether ``other`` is a record of the same recovery: the same round, unless this one
        began after ``other``'s first step (a round number used again after etcd was lost),
        give or take the agents' clock skew (agents polled later may report a later start)."""
        return (
            other is not None
            and other.round == self.round
            and self.rendezvous_at <= other.first_step_at + MAX_CLOCK_SKEW_SECONDS
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "faultAt": self.fault_at,
            "detectedAt": self.detected_at,
            "rendezvousAt": self.rendezvous_at,
            "restoredAt": self.restored_at,
            "restoredStep": self.restored_step,
            "firstStepAt": self.first_step_at,
            "stepsLost": self.steps_lost,
            "seconds": self.seconds,
            "round": self.round,
        }

    @classmethod
    def from_json(cls, data: object) -> Recovery | None:
        """A stored ``status.lastRecovery``; ``None`` when absent or not what we write."""
        if not isinstance(data, Mapping) or not isinstance(data.get("reason"), str):
            return None
        times = [
            _number(data.get(k))
            for k in ("faultAt", "detectedAt", "rendezvousAt", "restoredAt", "firstStepAt")
        ]
        counts = [_count(data.get(k)) for k in ("restoredStep", "stepsLost", "round")]
        if None in times or None in counts:
            return None
        fault, detected, rendezvous, restored, first = (t or 0.0 for t in times)
        step, lost, round_ = (c or 0 for c in counts)
        return cls(
            str(data["reason"]), fault, detected, rendezvous, restored, step, first, lost, round_
        )


def recovery(
    start: RoundStart,
    cause: Cause | None,
    previous: Recovery | None,
    step_seconds: float | None,
) -> Recovery:
    """The recovery that led to the round ``start`` describes.

    ``cause``: the job's root cause; it is of this recovery when its earliest evidence lies
    after ``previous``'s first step (the last recovery recorded; ``None``: none, or this one
    corrected), not long before the last step before the fault, and no later than this round's
    first step. ``step_seconds``: how long a step took before the fault (the sampled rate),
    which tells the first step's own time from the restore before it.
    """
    detected = start.entered_at
    reason, fault = MEMBERSHIP, detected
    if cause is not None:
        earliest = min(e.at for e in (cause.headline, *cause.secondary))
        after = previous is None or earliest > previous.first_step_at
        if start.previous_step_at is not None:
            # The group stepped until the fault: a cause dated well before its last step is older.
            after = after and earliest >= start.previous_step_at - MAX_CLOCK_SKEW_SECONDS
        if after and earliest <= start.first_step_at:
            reason, fault = cause.kind, min(earliest, detected)
    # In order: each phase ends no earlier than it began, whatever the clocks say.
    detected = max(detected, fault)
    rendezvous = max(start.started_at, detected)
    first = max(start.first_step_at, rendezvous)
    restored = max(rendezvous, first - (step_seconds or 0.0))
    restored_step = max(0, start.first_step - 1)
    return Recovery(
        reason=reason,
        fault_at=round(fault, 3),
        detected_at=round(detected, 3),
        rendezvous_at=round(rendezvous, 3),
        restored_at=round(restored, 3),
        restored_step=restored_step,
        first_step_at=round(first, 3),
        steps_lost=max(0, start.previous_step - restored_step),
        round=start.round,
    )


@dataclass(frozen=True)
class Goodput:
    """``status.goodput``: training time kept over wall time since the job started."""

    training_seconds: float
    wall_seconds: float

    @property
    def ratio(self) -> float:
        if self.wall_seconds <= 0:
            return 0.0
        return round(min(1.0, max(0.0, self.training_seconds / self.wall_seconds)), 4)

    def to_json(self) -> dict[str, Any]:
        return {
            "trainingSeconds": self.training_seconds,
            "wallSeconds": self.wall_seconds,
            "ratio": self.ratio,
        }

    @classmethod
    def from_json(cls, data: object) -> Goodput | None:
        """A stored ``status.goodput``; ``None`` when absent or not what we write."""
        if not isinstance(data, Mapping):
            return None
        training, wall = _number(data.get("trainingSeconds")), _number(data.get("wallSeconds"))
        if training is None or wall is None:
            return None
        return cls(training, wall)


def account(
    goodput: Goodput | None,
    *,
    before: ProgressState | None,
    after: ProgressState | None,
    last: Recovery | None,
    new: RoundStart | None,
    started: float,
    now: float,
) -> Goodput | None:
    """The next ``status.goodput``: ``goodput`` unchanged unless a progress sample was taken
    (``after`` is not ``before``) or a recovery recorded in this step (``new``: the round it
    led to; ``last``: the recovery stored now, the new one included). ``started``: when the
    job started (operator's clock)."""
    sampled = after is not None and after != before
    if not sampled and new is None:
        return goodput
    training = 0.0 if goodput is None else goodput.training_seconds
    if new is not None and last is not None and before is not None:
        # The steps after the last sample, up to the fault, were trained; the lost ones are
        # done again (their time, at the rate sampled before the fault, was not kept).
        if new.previous_step > before.step and new.previous_step_at is not None:
            training += max(0.0, new.previous_step_at - before.at)
        if before.steps_per_second:
            training -= last.steps_lost / before.steps_per_second
        training = max(0.0, training)
    if sampled and after is not None and before is not None:
        since = before.at
        if last is not None and last.first_step_at > since:
            since = last.first_step_at  # not across the outage
        elif after.step < before.step:
            since = after.at  # a restart the agents did not describe: nothing known kept
        training += max(0.0, after.at - since)
    return Goodput(round(training, 3), round(max(0.0, now - started), 3))


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 2**53:
        return None
    return float(value)


def _count(value: object) -> int | None:
    if type(value) is not int or not 0 <= value < 2**53:
        return None
    return value
