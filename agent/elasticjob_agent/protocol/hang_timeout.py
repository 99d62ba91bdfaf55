"""The automatic hang timeout (``spec.progress.mode: Auto``, ``--progress-timeout auto``): pure,
the clock is an argument.

The timeout in force is ``factor`` times a high ``percentile`` of the intervals between step
advances (a new highest step of the local group) over the last ``window`` of them, bounded by
``floor`` and ``ceiling`` seconds. The first ``exempt`` steps of every round are not measured
(compilation, warm-up, the first data loads) and never judged; after them, until an interval was
measured, the ceiling is in force. Intervals carry across rounds: a restarted group that warmed
up again is judged with what the job already showed.

The settings travel from the operator to the agent as ``--progress-auto-conf key=value,...``
(``to_conf``/``from_conf``: one codec for both ends).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

MIN_FLOOR = 1.0
MAX_SECONDS = 604800.0
MAX_WINDOW = 10_000


class HangTimeoutError(ValueError):
    """Settings that cannot be used; the message names the field."""


@dataclass(frozen=True)
class AutoSettings:
    factor: float = 5.0
    """The safety factor over the percentile interval."""
    percentile: float = 95.0
    window: int = 100
    """How many of the latest intervals count."""
    floor: float = 10.0
    """The shortest timeout in force, seconds."""
    ceiling: float = 1800.0
    """The longest timeout in force, seconds, and the one in force before an interval is known."""
    exempt: int = 5
    """Steps at the start of every round that are neither measured nor judged."""

    def check(self, where: str = "spec.progress") -> AutoSettings:
        """Raise ``HangTimeoutError`` naming the first bad field."""
        names = {
            "factor": "factor",
            "percentile": "percentile",
            "window": "windowSteps",
            "floor": "floorSeconds",
            "ceiling": "ceilingSeconds",
            "exempt": "exemptSteps",
        }
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise HangTimeoutError(f"{where}.{names[f.name]} must be a number")
            if not math.isfinite(value):
                raise HangTimeoutError(f"{where}.{names[f.name]} must be finite")
        if not 1.0 <= self.factor <= 100.0:
            raise HangTimeoutError(f"{where}.factor must be in 1..100 (got {self.factor:g})")
        if not 50.0 <= self.percentile <= 100.0:
            raise HangTimeoutError(
                f"{where}.percentile must be in 50..100 (got {self.percentile:g})"
            )
        if not 1 <= self.window <= MAX_WINDOW:
            raise HangTimeoutError(f"{where}.windowSteps must be in 1..{MAX_WINDOW}")
        if not 0 <= self.exempt <= MAX_WINDOW:
            raise HangTimeoutError(f"{where}.exemptSteps must be in 0..{MAX_WINDOW}")
        if not MIN_FLOOR <= self.floor <= MAX_SECONDS:
            raise HangTimeoutError(
                f"{where}.floorSeconds must be in {MIN_FLOOR:g}..{MAX_SECONDS:g}"
            )
        if not self.floor <= self.ceiling <= MAX_SECONDS:
            raise HangTimeoutError(
                f"{where}.ceilingSeconds must be >= floorSeconds and <= {MAX_SECONDS:g}"
            )
        return self

    def to_conf(self) -> str:
        return ",".join(f"{f.name}={getattr(self, f.name):g}" for f in fields(self))

    @classmethod
    def from_conf(cls, text: str, where: str = "--progress-auto-conf") -> AutoSettings:
        """``key=value,...`` with the field names above; unknown keys are an error."""
        known = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for item in filter(None, (p.strip() for p in text.split(","))):
            key, sep, raw = item.partition("=")
            if not sep or key not in known:
                raise HangTimeoutError(
                    f"{where}: {item!r} is not key=value with a key of {', '.join(known)}"
                )
            try:
                number = float(raw)
            except ValueError:
                raise HangTimeoutError(f"{where}: {key}={raw!r} is not a number") from None
            if key in ("window", "exempt"):
                if not number.is_integer():
                    raise HangTimeoutError(f"{where}: {key} must be an integer")
                values[key] = int(number)
            else:
                values[key] = number
        return replace(cls(), **values).check(where)

    @classmethod
    def from_spec(cls, data: Mapping[str, Any], where: str = "spec.progress") -> AutoSettings:
        """From the CRD's ``spec.progress`` (camelCase names, defaults for absent ones)."""
        keys = {
            "factor": "factor",
            "percentile": "percentile",
            "windowSteps": "window",
            "floorSeconds": "floor",
            "ceilingSeconds": "ceiling",
            "exemptSteps": "exempt",
        }
        values = {keys[k]: v for k, v in data.items() if k in keys}
        return replace(cls(), **values).check(where)


def percentile(values: tuple[float, ...], pct: float) -> float:
    """The nearest-rank percentile of non-empty ``values``."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class StepIntervals:
    """What the agent learned of its group's pace. Frozen: ``observe`` returns the next value."""

    settings: AutoSettings
    intervals: tuple[float, ...] = ()
    """The latest intervals between step advances, oldest first, at most ``window``."""
    steps_this_round: int = 0
    """Step advances seen in the current round."""
    last_advance: float | None = None
    """Monotonic time of the current round's latest step advance."""
    top_step: int | None = field(default=None)

    def new_round(self) -> StepIntervals:
        """A new group started: the exemption applies again; the intervals stay."""
        return replace(self, steps_this_round=0, last_advance=None, top_step=None)

    def observe(self, step: int, now: float) -> StepIntervals:
        """A step report at monotonic ``now``; only a new highest step is an advance."""
        if self.top_step is not None and step <= self.top_step:
            return self
        seen = self.steps_this_round + 1
        intervals = self.intervals
        if seen > self.settings.exempt and self.last_advance is not None:
            intervals = (*intervals, max(0.0, now - self.last_advance))[-self.settings.window :]
        return replace(
            self, intervals=intervals, steps_this_round=seen, last_advance=now, top_step=step
        )

    def timeout(self) -> float | None:
        """The timeout in force, seconds; ``None`` while the round's first steps are exempt."""
        s = self.settings
        if self.steps_this_round < max(1, s.exempt):
            return None
        if not self.intervals:
            return s.ceiling
        learned = s.factor * percentile(self.intervals, s.percentile)
        return min(s.ceiling, max(s.floor, learned))
