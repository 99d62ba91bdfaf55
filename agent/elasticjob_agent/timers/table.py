"""Pure bookkeeping of the workers' expiration timers (no clock, no sockets)."""

from __future__ import annotations

import json
import math
import signal
from dataclasses import dataclass, field
from typing import NamedTuple

from elasticjob_agent.protocol.compute import valid_seconds

DEFAULT_SIGNAL = int(signal.SIGKILL)
"""What an expired timer's worker gets unless its client asked for another signal."""

MAX_STEP = 2**53
"""Largest step a worker may report (exact in every JSON implementation, like the report's)."""


class TimerMessageError(ValueError):
    """A datagram on the timer socket is not a timer message."""


@dataclass(frozen=True)
class TimerMessage:
    op: str
    pid: int
    scope: str = "default"
    deadline: float | None = None
    signal: int = DEFAULT_SIGNAL
    """Sent to the worker when the timer expires; ``<= 0``: only report it (torch's rule)."""
    step: int | None = None
    """``op == "step"``: the training step the worker reports (``progress.report_step``)."""
    seconds: float | None = None
    """``op == "compute"``: the worker's compute time of one step (``progress.step_timer``);
    ``None`` when what it sent is not a plausible duration (``protocol.compute.valid_seconds``)."""

    @classmethod
    def decode(cls, raw: bytes) -> TimerMessage:
        try:
            data = json.loads(raw)
            op = data["op"]
            pid = data["pid"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
            raise TimerMessageError(f"not a timer message: {raw[:200]!r}") from exc
        known = ("acquire", "release", "heartbeat", "step", "done", "compute")
        if op not in known or not isinstance(pid, int):
            raise TimerMessageError(f"not a timer message: {raw[:200]!r}")
        deadline = data.get("deadline")
        if op == "acquire" and not isinstance(deadline, int | float):
            raise TimerMessageError(f"acquire without a numeric deadline: {raw[:200]!r}")
        step = data.get("step")
        if op == "step" and (type(step) is not int or not 0 <= step <= MAX_STEP):
            raise TimerMessageError(f"step without an integer in 0..{MAX_STEP}: {raw[:200]!r}")
        seconds = valid_seconds(data.get("seconds")) if op == "compute" else None
        return cls(op, pid, str(data.get("scope", "default")), deadline, step=step, seconds=seconds)

    @classmethod
    def decode_torch(cls, line: bytes) -> TimerMessage:
        """One line of torch's ``FileTimerClient`` (``FileTimerRequest.to_json``):
        ``{"version": 1, "pid": P, "scope_id": S, "expiration_time": T, "signal": N}``;
        a negative ``expiration_time`` is a release. Strict: anything else raises
        ``TimerMessageError``."""
        try:
            data = json.loads(line)
            pid, scope, when, sig = (
                data["pid"],
                data["scope_id"],
                data["expiration_time"],
                data.get("signal", DEFAULT_SIGNAL),
            )
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
            raise TimerMessageError(f"not a torch timer request: {line[:200]!r}") from exc
        if (
            type(pid) is not int
            or not isinstance(scope, str)
            or isinstance(when, bool)
            or not isinstance(when, int | float)
            or not math.isfinite(when)
            or type(sig) is not int
            or not -1 <= sig <= 64
        ):
            raise TimerMessageError(f"not a torch timer request: {line[:200]!r}")
        if when < 0:
            return cls("release", pid, scope)
        return cls("acquire", pid, scope, float(when), sig)


class Expired(NamedTuple):
    """A timer past its deadline: the worker, the timer's scope and the signal it asked for."""

    pid: int
    scope: str
    signal: int = DEFAULT_SIGNAL


@dataclass
class TimerTable:
    """Deadlines by ``(pid, scope)``; only pids of the current group are accepted."""

    pids: frozenset[int] = frozenset()
    deadlines: dict[tuple[int, str], tuple[float, int]] = field(default_factory=dict)

    def reset(self, pids: frozenset[int]) -> None:
        """A new worker group started: forget every old timer."""
        self.pids = pids
        self.deadlines.clear()

    def apply(self, msg: TimerMessage) -> bool:
        """Apply a message; False when it comes from a pid outside the group (ignored)."""
        if msg.pid not in self.pids:
            return False
        key = (msg.pid, msg.scope)
        if msg.op == "acquire" and msg.deadline is not None:
            self.deadlines[key] = (msg.deadline, msg.signal)
        elif msg.op == "release":
            self.deadlines.pop(key, None)
        return True

    def expired(self, now: float) -> list[Expired]:
        """Timers past their deadline; each is reported once (then dropped)."""
        due = sorted(key for key, (deadline, _) in self.deadlines.items() if deadline <= now)
        return [Expired(pid, scope, self.deadlines.pop((pid, scope))[1]) for pid, scope in due]
