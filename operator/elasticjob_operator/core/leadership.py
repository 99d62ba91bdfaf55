"""Leader election on a ``coordination.k8s.io/v1`` Lease: the decisions (pure).

Only one operator process acts at a time. Each candidate reads the Lease and calls ``decide``:

- no Lease: create it, naming itself the holder;
- it holds the Lease: renew it (``renewTime`` = now) every ``retry_period``;
- another holder whose record has not changed for ``duration`` seconds *of the candidate's own
  clock* (client-go's rule: expiry never compares two machines' clocks), or an empty holder (a
  holder that stepped down): take it over, bumping ``leaseTransitions``;
- otherwise: wait.

Writes go through ``replace`` with the ``resourceVersion`` that was read, so of two candidates
that decide to take over at once exactly one succeeds (the other gets 409 and reads again).
A holder that has not renewed for ``renew_deadline`` (< ``duration``) stops acting at once,
before any other candidate can consider the Lease expired.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum


class SettingsError(ValueError):
    """Lease timings that cannot work together."""


@dataclass(frozen=True)
class LeaseTimings:
    duration: float = 15.0
    """Seconds a candidate waits on an unchanged Lease before taking it over."""
    renew_deadline: float = 10.0
    """Seconds a holder may fail to renew before it stops acting (must be < ``duration``)."""
    retry_period: float = 2.0
    """Seconds between two attempts to acquire or renew."""

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.duration:
            raise SettingsError(
                "leader election needs 0 < retry period < renew deadline < lease duration, got "
                f"{self.retry_period:g} / {self.renew_deadline:g} / {self.duration:g} s"
            )


@dataclass(frozen=True)
class LeaseRecord:
    """The parts of a Lease the election reads and writes (times as RFC 3339 strings: they are
    compared for change only, never against a local clock)."""

    holder: str = ""
    duration_seconds: int = 15
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0
    resource_version: str | None = None
    """``None``: the Lease does not exist."""


@dataclass(frozen=True)
class Observation:
    """What a candidate last saw of the Lease, and when by its own clock."""

    record: LeaseRecord
    seen_at: float


class Move(StrEnum):
    CREATE = "create"
    RENEW = "renew"
    TAKE_OVER = "take-over"
    WAIT = "wait"


def observe(previous: Observation | None, record: LeaseRecord, now: float) -> Observation:
    """Update the observation: the clock restarts only when the holder's record changed."""
    if previous is not None and _same_term(previous.record, record):
        return Observation(record, previous.seen_at)
    return Observation(record, now)


def _same_term(a: LeaseRecord, b: LeaseRecord) -> bool:
    return (a.holder, a.renew_time, a.transitions) == (b.holder, b.renew_time, b.transitions)


def decide(seen: Observation, me: str, now: float) -> Move:
    record = seen.record
    if record.resource_version is None:
        return Move.CREATE
    if record.holder == me:
        return Move.RENEW
    if not record.holder or now - seen.seen_at >= record.duration_seconds:
        return Move.TAKE_OVER
    return Move.WAIT


def next_record(record: LeaseRecord, move: Move, me: str, stamp: str, duration: int) -> LeaseRecord:
    """The record to write for ``move`` (``stamp``: now, RFC 3339)."""
    if move is Move.RENEW:
        return replace(record, renew_time=stamp, duration_seconds=duration)
    if move in (Move.CREATE, Move.TAKE_OVER):
        return LeaseRecord(
            holder=me,
            duration_seconds=duration,
            acquire_time=stamp,
            renew_time=stamp,
            transitions=record.transitions + (1 if move is Move.TAKE_OVER else 0),
            resource_version=record.resource_version,
        )
    return record


def released(record: LeaseRecord, me: str) -> LeaseRecord | None:
    """The record that hands the Lease back on a clean shutdown; ``None`` unless ``me`` holds it."""
    if record.holder != me or record.resource_version is None:
        return None
    return replace(record, holder="")
