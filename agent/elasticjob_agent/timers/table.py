"""Pure bookkeeping of the workers' expiration timers (no clock, no sockets)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

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
    step: int | None = None
    """``op == "step"``: the training step the worker reports (``progress.report_step``)."""

    @classmethod
    def decode(cls, raw: bytes) -> TimerMessage:
        try:
            data = json.loads(raw)
            op = data["op"]
            pid = data["pid"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
            raise TimerMessageError(f"not a timer message: {raw[:200]!r}") from exc
        known = ("acquire", "release", "heartbeat", "step", "done")
        if op not in known or not isinstance(pid, int):
            raise TimerMessageError(f"not a timer message: {raw[:200]!r}")
        deadline = data.get("deadline")
        if op == "acquire" and not isinstance(deadline, int | float):
            raise TimerMessageError(f"acquire without a numeric deadline: {raw[:200]!r}")
        step = data.get("step")
        if op == "step" and (type(step) is not int or not 0 <= step <= MAX_STEP):
            raise TimerMessageError(f"step without an integer in 0..{MAX_STEP}: {raw[:200]!r}")
        return cls(op, pid, str(data.get("scope", "default")), deadline, step)


@dataclass
class TimerTable:
    """Deadlines by ``(pid, scope)``; only pids of the current group are accepted."""

    pids: frozenset[int] = frozenset()
    deadlines: dict[tuple[int, str], float] = field(default_factory=dict)

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
            self.deadlines[key] = msg.deadline
        elif msg.op == "release":
            self.deadlines.pop(key, None)
        return True

    def expired(self, now: float) -> list[tuple[int, str]]:
        """Timers past their deadline; each is reported once (then dropped)."""
        due = sorted(key for key, deadline in self.deadlines.items() if deadline <= now)
        for key in due:
            del self.deadlines[key]
        return due
