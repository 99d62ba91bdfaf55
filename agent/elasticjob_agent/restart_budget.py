"""Pure logic of the job-wide restart budget: counts by reason, seeds, and the budget rule.

No I/O here; ``restart_counter`` stores these values in etcd.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from elasticjob_agent.protocol.keys import RestartReason


class RestartStateError(ValueError):
    """A stored counter, seed or event is not what this agent wrote: corrupt state."""


@dataclass(frozen=True)
class RestartCounts:
    """Job-wide restarts of the worker group, by reason (reason value -> count)."""

    by_reason: Mapping[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())

    @property
    def spent(self) -> int:
        """Restarts that spend ``max_restarts``: failures and expired timers."""
        return sum(self.by_reason.get(r.value, 0) for r in RestartReason if r.spends_budget)

    def plus(self, reason: RestartReason) -> RestartCounts:
        counts = dict(self.by_reason)
        counts[reason.value] = counts.get(reason.value, 0) + 1
        return RestartCounts(counts)

    def full(self) -> dict[str, int]:
        """Every known reason, zero where none happened (for status and metrics)."""
        counts = {r.value: 0 for r in RestartReason}
        counts.update(self.by_reason)
        return counts


def budget_exhausted(counts: RestartCounts, max_restarts: int) -> bool:
    """torchrun's rule, job-wide: ``max_restarts`` restarts are allowed; one more ends it."""
    return counts.spent > max_restarts


def decode_counter(key: str, raw: bytes) -> int:
    """A counter value is a non-negative decimal integer; anything else is corrupt state."""
    text = raw.decode("utf-8", errors="replace").strip()
    if not text.isdigit():
        raise RestartStateError(f"restart counter {key} holds {text!r}, not a non-negative integer")
    return int(text)


def decode_seed(key: str, raw: bytes) -> RestartCounts:
    """Parse the operator's seed ``{"byReason": {"failure": 2, ...}}``."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RestartStateError(f"restart seed {key} is not JSON: {exc}") from exc
    by_reason = data.get("byReason") if isinstance(data, dict) else None
    if not isinstance(by_reason, dict):
        raise RestartStateError(f'restart seed {key} must be {{"byReason": {{...}}}}, got {data!r}')
    counts: dict[str, int] = {}
    for reason, value in by_reason.items():
        try:
            RestartReason(reason)
        except ValueError as exc:
            raise RestartStateError(f"restart seed {key}: unknown reason {reason!r}") from exc
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RestartStateError(
                f"restart seed {key}: count of {reason!r} must be a non-negative integer"
            )
        counts[reason] = value
    return RestartCounts(counts)


def encode_event(reason: RestartReason, node: str, at: float) -> bytes:
    return json.dumps({"reason": reason.value, "node": node, "at": at}, sort_keys=True).encode()


def decode_event_reason(key: str, raw: bytes) -> RestartReason:
    try:
        return RestartReason(json.loads(raw)["reason"])
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as exc:
        raise RestartStateError(f"restart event {key} is corrupt: {raw!r}") from exc
