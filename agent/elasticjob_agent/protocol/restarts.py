"""Restart facts shared by the agent and the operator: reasons, the budget rule, the codecs.

Pure and the one home of each fact: the agent's restart counter and restart policy and the
operator's ``restarts`` module import them from here.

Values in etcd (``protocol.keys``):

- ``<restarts>/<reason>``: the count, ASCII decimal digits, ``0 <= n <= MAX_COUNT``.
- ``<restarts>/events/<round>``: ``{"reason", "node", "at"}``, the restart that tore ``round``
  down.
- ``restart-seed``: ``{"byReason": {"failure": 2, ...}}``, written by the operator.
- ``close-reason``: ``{"reason": "MaxRestartsExceeded", "node", "byReason", "maxRestarts",
  "at"}``, written by the agent that closed the rendezvous because the budget was spent.

Everything read from etcd is untrusted (anyone who can write etcd can write these keys): a value
that is not exactly what the writer writes raises ``RestartStateError`` naming the key, never
another exception; counts above ``MAX_COUNT`` and negative counts are rejected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class RestartReason(str, Enum):
    """Why the worker group restarted, as agents count it. ``FAILURE``, ``TIMER`` and ``HANG``
    spend ``max_restarts`` (``SPENDS_BUDGET``)."""

    FAILURE = "failure"
    """A worker process exited non-zero (or a node's agent died after the round completed)."""

    TIMER = "timer"
    """A worker's expiration timer fired and the agent killed it."""

    HANG = "hang"
    """No local worker reported a step for the progress timeout (``--progress-timeout``) after
    the first one, so the agent stopped its group."""

    MEMBERSHIP = "membership"
    """Nodes joined (scale-up) or left cleanly (scale-down): free."""

    PREEMPTION = "preemption"
    """A node was terminated (SIGTERM) by Kubernetes: free."""

    ETCD_RECOVERED = "etcd-recovered"
    """The group re-formed after etcd was lost and recreated: free; the operator counts it."""

    IGNORED = "ignored"
    """A failure that a failure-policy rule with action ``Ignore`` matched
    (``protocol.failure_policy``): free."""

    @property
    def spends_budget(self) -> bool:
        return self.value in SPENDS_BUDGET


POD_FAILURE = "pod-failure"
"""Operator-counted: a worker pod failed before its agent joined a round; spends the budget."""
POD_LOST = "pod-lost"
"""Operator-counted: a worker pod was lost before its agent joined a round; free."""
POD_IGNORED = "pod-ignored"
"""Operator-counted: a ``pod-failure`` that a failure-policy rule with action ``Ignore``
matched; free."""
STRAGGLER = "straggler"
"""Operator-counted: the pods of a node found a straggler were replaced (``spec.health``
``stragglers.action: Replace``); free."""
ETCD_RECOVERED = RestartReason.ETCD_RECOVERED.value
"""Operator-counted: once per managed etcd it recreated."""

SPENDS_BUDGET = frozenset(
    {RestartReason.FAILURE.value, RestartReason.TIMER.value, RestartReason.HANG.value, POD_FAILURE}
)
"""The reasons whose restarts spend ``max_restarts``; every other reason is free."""
AGENT_COUNTED = frozenset(r.value for r in RestartReason if r is not RestartReason.ETCD_RECOVERED)
"""The reasons agents count in etcd (``etcd-recovered`` is the operator's alone)."""

JOB_MAX_RESTARTS_DEFAULT = 3
"""An ``ElasticJob``'s ``spec.maxRestarts`` when it sets none: the CRD's default (a unit test
holds the CRD to it) and the operator's, which passes it to every agent as ``--max-restarts``."""
TORCHRUN_MAX_RESTARTS_DEFAULT = 0
"""``--max-restarts`` of an agent started without it: torchrun's default, so that a torchrun
command line means the same under ``elasticjob-agent``. Pods the operator creates always pass
the job's value."""

BUDGET_SPENT_REASON = "MaxRestartsExceeded"
"""The ``close-reason`` an agent writes when it closed the rendezvous on a spent budget."""

MAX_COUNT = 1_000_000
"""The largest restart count accepted from etcd: more is corruption, not a job's history."""
MAX_VALUE_BYTES = 4096
"""The largest restart value (seed, event, close reason) accepted from etcd."""
_MAX_COUNT_DIGITS = len(str(MAX_COUNT))


class RestartStateError(ValueError):
    """A stored counter, seed, event or close reason is not what an agent or the operator
    writes: corrupt (or hostile) state. The message names the key."""


def spent(by_reason: Mapping[str, int]) -> int:
    """Restarts that spend the budget."""
    return sum(count for reason, count in by_reason.items() if reason in SPENDS_BUDGET)


def budget_exhausted(by_reason: Mapping[str, int], max_restarts: int) -> bool:
    """torchrun's rule, job-wide: ``max_restarts`` restarts are allowed; one more ends it."""
    return spent(by_reason) > max_restarts


@dataclass(frozen=True)
class RestartCounts:
    """Job-wide restarts of the worker group, by reason (reason value -> count)."""

    by_reason: Mapping[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())

    @property
    def spent(self) -> int:
        """Restarts that spend ``max_restarts`` (``SPENDS_BUDGET``)."""
        return spent(self.by_reason)

    def plus(self, reason: RestartReason) -> RestartCounts:
        counts = dict(self.by_reason)
        counts[reason.value] = counts.get(reason.value, 0) + 1
        return RestartCounts(counts)

    def full(self) -> dict[str, int]:
        """Every agent reason, zero where none happened (for status and metrics)."""
        counts = {r.value: 0 for r in RestartReason}
        counts.update(self.by_reason)
        return counts


# --- codecs ----------------------------------------------------------------------------------


def encode_counter(count: int) -> bytes:
    if not 0 <= count <= MAX_COUNT:
        raise ValueError(f"restart count {count} is outside 0..{MAX_COUNT}")
    return str(count).encode()


def decode_counter(key: str, raw: bytes) -> int:
    """A counter: ASCII decimal digits, at most ``MAX_COUNT``; anything else is corrupt."""
    text = raw.strip()
    if not text or len(text) > _MAX_COUNT_DIGITS or not all(48 <= b <= 57 for b in text):
        shown = raw[:40].decode("utf-8", errors="replace")
        raise RestartStateError(
            f"restart counter {key} holds {shown!r}, not a non-negative integer <= {MAX_COUNT}"
        )
    count = int(text)
    if count > MAX_COUNT:
        raise RestartStateError(f"restart counter {key} holds {count}, more than {MAX_COUNT}")
    return count


def _load(key: str, what: str, raw: bytes) -> Any:
    if len(raw) > MAX_VALUE_BYTES:
        raise RestartStateError(f"{what} {key} is {len(raw)} bytes, more than {MAX_VALUE_BYTES}")
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise RestartStateError(f"{what} {key} is not valid JSON: {exc}") from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _count(key: str, what: str, reason: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise RestartStateError(
            f"{what} {key}: count of {reason!r} must be an integer in 0..{MAX_COUNT}, "
            f"got {value!r:.40}"
        )
    return value


def encode_seed(by_reason: Mapping[str, int]) -> str:
    """The ``restart-seed`` value: only the reasons agents know, only non-zero counts."""
    known = {r.value for r in RestartReason}
    return json.dumps(
        {"byReason": {k: v for k, v in sorted(by_reason.items()) if k in known and v > 0}},
        sort_keys=True,
    )


def decode_seed(key: str, raw: bytes) -> RestartCounts:
    """Parse the operator's seed ``{"byReason": {"failure": 2, ...}}``."""
    data = _load(key, "restart seed", raw)
    by_reason = data.get("byReason") if isinstance(data, dict) else None
    if not isinstance(by_reason, dict):
        raise RestartStateError(f'restart seed {key} must be {{"byReason": {{...}}}}')
    counts: dict[str, int] = {}
    for reason, value in by_reason.items():
        try:
            RestartReason(reason)
        except ValueError:
            raise RestartStateError(f"restart seed {key}: unknown reason {reason!r:.40}") from None
        counts[reason] = _count(key, "restart seed", reason, value)
    return RestartCounts(counts)


def encode_event(reason: RestartReason, node: str, at: float) -> bytes:
    return json.dumps({"reason": reason.value, "node": node, "at": at}, sort_keys=True).encode()


def decode_event_reason(key: str, raw: bytes) -> RestartReason:
    """The reason of a restart event."""
    data = _load(key, "restart event", raw)
    reason = data.get("reason") if isinstance(data, dict) else None
    try:
        return RestartReason(reason)
    except ValueError:
        raise RestartStateError(
            f"restart event {key} has no known reason (got {reason!r:.40})"
        ) from None


def encode_close_reason(
    by_reason: Mapping[str, int], node: str, max_restarts: int, at: float
) -> bytes:
    payload = {
        "reason": BUDGET_SPENT_REASON,
        "node": node,
        "byReason": dict(by_reason),
        "maxRestarts": max_restarts,
        "at": at,
    }
    return json.dumps(payload, sort_keys=True).encode()


def decode_close_reason(key: str, raw: bytes) -> str:
    """The ``reason`` of a close-reason record (a short CamelCase word)."""
    data = _load(key, "close reason", raw)
    reason = data.get("reason") if isinstance(data, dict) else None
    if not isinstance(reason, str) or not re.fullmatch(r"[A-Za-z0-9]{1,64}", reason):
        raise RestartStateError(f"close reason {key} has no valid reason (got {reason!r:.40})")
    return reason
