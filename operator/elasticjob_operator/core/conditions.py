"""Status conditions: one helper that keeps ``lastTransitionTime`` when the status did not change.

Conditions are plain dicts in the Kubernetes shape (``type``, ``status``, ``reason``, ``message``,
``lastTransitionTime``, ``observedGeneration``) so they round-trip through the API unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


class ConditionType(StrEnum):
    RUNNING = "Running"
    """The worker group completed a rendezvous and trains."""
    STALLED = "Stalled"
    """Agents are blocked: reason EtcdUnavailable, PodsUnschedulable, PodsNotStarting or
    WaitingForNodes."""
    SUSPENDED = "Suspended"
    QUEUED = "Queued"
    """Kueue has not admitted the job's core; the reason and message say why."""
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PODS_NOT_STARTING = "PodsNotStarting"
    """The kubelet cannot start a container of the job's pods: the reason is the kubelet's
    (``ErrImagePull``, ``StartError``, ...), the message names pod, container and cause."""
    SPARES_READY = "SparesReady"
    """Every hot spare (``spec.spares``) stands by with its workers warm; when not, the reason
    says why (``SpareUnschedulable`` with the scheduler's message, ``SpareNotStarting``,
    ``SparesStarting``). Never holds the group back."""

    FAILURE_POLICY = "FailurePolicy"
    """A failure-policy rule decided a failure of the job (reason: the action; the message
    names the rule and the root cause)."""
    INVALID_SPEC = "InvalidSpec"
    """The spec cannot be run as written (the message names the field); the operator waits for
    a fixed spec."""
    STRAGGLER = "Straggler"
    """A node's compute time per step stays above ``spec.health.stragglers.factor`` times the
    other nodes' median (reason ``SlowNode``; the message names the node); False with reason
    ``Replaced`` or ``Recovered`` after one was (``stragglers.py``)."""
    REQUEST_REJECTED = "RequestRejected"
    """The API server refused a request of the operator (403, 422, 400), with its message;
    the operator retries with a growing back-off until the cause is fixed."""


def rfc3339(unix_time: float) -> str:
    """Unix time as the API server writes timestamps (UTC, whole seconds, ``Z``)."""
    return datetime.fromtimestamp(int(unix_time), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: ConditionType,
    status: bool,
    reason: str,
    message: str,
    *,
    now: float,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """Return ``conditions`` with ``type_`` set; other conditions are kept as they are.

    ``lastTransitionTime`` changes only when ``status`` flips (or the condition is new), so a
    reason or message update does not look like a new transition.
    """
    value = "True" if status else "False"
    result: list[dict[str, Any]] = []
    found = False
    for cond in conditions:
        if cond.get("type") != type_.value:
            result.append(dict(cond))
            continue
        found = True
        updated = dict(cond)
        if cond.get("status") != value:
            updated["lastTransitionTime"] = rfc3339(now)
        updated.update(status=value, reason=reason, message=message)
        if generation is not None:
            updated["observedGeneration"] = generation
        result.append(updated)
    if not found:
        new: dict[str, Any] = {
            "type": type_.value,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": rfc3339(now),
        }
        if generation is not None:
            new["observedGeneration"] = generation
        result.append(new)
    return result


def find_condition(
    conditions: Sequence[Mapping[str, Any]], type_: ConditionType
) -> Mapping[str, Any] | None:
    for cond in conditions:
        if cond.get("type") == type_.value:
            return cond
    return None


def is_true(conditions: Sequence[Mapping[str, Any]], type_: ConditionType) -> bool:
    cond = find_condition(conditions, type_)
    return cond is not None and cond.get("status") == "True"


def stamp_generation(
    conditions: Sequence[Mapping[str, Any]], generation: int
) -> tuple[dict[str, Any], ...]:
    """Every condition with ``observedGeneration``: the spec generation it was computed from."""
    return tuple({**dict(c), "observedGeneration": generation} for c in conditions)
