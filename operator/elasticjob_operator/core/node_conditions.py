"""Node conditions that make a node bad for a job, read from a Node object (pure).

A cluster names the condition types it trusts (``ELASTICJOB_BAD_NODE_CONDITIONS``: what
node-problem-detector or a GPU health agent sets, e.g. ``GpuUnhealthy``, ``KernelDeadlock``);
a node with one of them at status ``True`` is bad. ``bad_conditions`` reduces a Node to those
conditions only, so the operator's node index keeps a few strings per bad node and nothing per
healthy one. What the operator does about a bad node is ``planning/quarantine.py``'s.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

NODE_CONDITION = "node-condition"
"""Operator-counted restart reason: a worker pod whose agent had not joined a round was moved
off a node with a bad condition (free: it spends no ``maxRestarts``)."""
MAX_CONDITION_MESSAGE = 256
"""The condition's message is kept up to this many characters (Events and the status stay
small)."""
MAX_CONDITIONS = 8
"""Bad conditions kept per node, at most (a Node is read, never trusted)."""


@dataclass(frozen=True)
class NodeCondition:
    """One condition of a node that makes it bad for jobs."""

    type: str
    since: float | None
    """Its ``lastTransitionTime`` as Unix time; ``None`` when the node does not say."""
    message: str = ""

    def summary(self) -> str:
        """``GpuUnhealthy: Xid 79`` (the message when the node gives one)."""
        return f"{self.type}: {self.message}" if self.message else self.type


def bad_conditions(node: Mapping[str, Any], types: Collection[str]) -> tuple[NodeCondition, ...]:
    """The conditions of ``node`` (a Node object as the API returns it) whose type is one of
    ``types`` and whose status is ``True``, in the node's order; empty for a healthy node or
    when ``types`` is empty. Entries that are not conditions are skipped."""
    if not types:
        return ()
    found: list[NodeCondition] = []
    for cond in (node.get("status") or {}).get("conditions") or []:
        if not isinstance(cond, Mapping) or cond.get("status") != "True":
            continue
        kind = cond.get("type")
        if not isinstance(kind, str) or kind not in types:
            continue
        message = cond.get("message")
        text = message if isinstance(message, str) else ""
        if len(text) > MAX_CONDITION_MESSAGE:
            text = text[: MAX_CONDITION_MESSAGE - 3] + "..."
        found.append(NodeCondition(kind, _time(cond.get("lastTransitionTime")), text))
        if len(found) >= MAX_CONDITIONS:
            break
    return tuple(found)


def _time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
