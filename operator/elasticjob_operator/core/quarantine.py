"""Bad nodes of one job: the ledger in ``status.avoidedNodes`` and how it changes (pure).

A node is avoided by the job's new worker pods (required node anti-affinity on its name,
``manifests.with_avoided_nodes``) when:

- the job's workers failed on it ``QuarantineSettings.failures`` times within
  ``QuarantineSettings.window`` seconds, for a hardware-like cause (``hardware_cause``: the
  node lost, a worker killed by a signal from outside, a device error; an OOM is not one). One
  failure is one new root cause of the job (``status.lastFailure``), so a record polled twice,
  or the several ranks of one node killed together, count once. Such a node stays avoided for
  the job's life (reason ``Failures``);
- or it has a bad node condition now (``node_conditions``; reason ``NodeCondition``), for as
  long as it has.

A node with fewer failures than the threshold is listed too, with ``avoided: false``: the
status is the only memory that survives an operator restart. The list holds at most
``MAX_ENTRIES``; past that the oldest watched node goes first, then the oldest avoided one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from elasticjob_agent.protocol.integers import IntegerError, bounded_int

from .evidence import Cause, CauseKind, Evidence

MAX_ENTRIES = 16
"""``status.avoidedNodes`` holds at most this many nodes."""
MAX_MESSAGE = 300
"""Characters of an entry's ``message``."""
MAX_NODE_NAME = 253

FAILURES = "Failures"
"""Reason of a node avoided for its hardware-like failures."""
NODE_CONDITION = "NodeCondition"
"""Reason of a node avoided while it has a bad node condition."""

NODE_LOST = "NodeLost"
SIGNAL = "Signal"
DEVICE_ERROR = "DeviceError"

OUTSIDE_SIGNALS = frozenset({"SIGKILL", "SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGBUS"})
"""Signals that end a worker from outside its own code (a kill, the kernel's machine-check
``SIGBUS``); ``SIGSEGV``, ``SIGABRT`` and ``SIGFPE`` are the program's own faults. A worker
killed by the OOM killer shows ``SIGKILL`` too, but then the kubelet reports the container
``OOMKilled`` and that cause outranks the signal (``root_cause.rank``)."""
DEVICE_PATTERNS = re.compile(
    r"uncorrectable ECC|ECC error|cudaErrorECCUncorrectable|\bXid\b|GPU is lost|"
    r"fallen off the bus|NVLink error|CUDA error: (?!out of memory)"
    r"(?:unspecified launch failure|an illegal instruction|uncorrectable|"
    r"the launch timed out|hardware|system not yet initialized|GPU is lost)",
    re.IGNORECASE,
)
"""What a device fault says in a worker's exception or output (a GPU fallen off the bus, an
uncorrectable ECC error, an Xid): not a CUDA out-of-memory, not a user's assert."""


@dataclass(frozen=True)
class QuarantineSettings:
    """When a node is avoided for its failures (the operator's settings)."""

    failures: int = 2
    """Hardware-like failures on one node, within ``window``, that make the job avoid it;
    0 turns the quarantine off (``ELASTICJOB_QUARANTINE_FAILURES``)."""
    window: float = 3600.0
    """Seconds within which the failures count (``ELASTICJOB_QUARANTINE_WINDOW_SECONDS``)."""
    taint: bool = False
    """Also taint a node when a job starts avoiding it for its failures (``TAINT_KEY``,
    ``NoSchedule``): cluster-wide, so only when the cluster admin opts in
    (``ELASTICJOB_TAINT_BAD_NODES``, the chart's ``badNodes.taint``)."""


TAINT_KEY = "elasticjob.dev/bad-node"
"""The taint a node gets with ``QuarantineSettings.taint``; an admin removes it with
``kubectl taint nodes NODE elasticjob.dev/bad-node-``."""
TAINT_EFFECT = "NoSchedule"
"""New pods without a toleration keep off the node; those running there stay."""


def taint_patch(node: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch that adds the bad-node taint to ``node`` (a Node as the API returns
    it), guarded by its ``resourceVersion`` (a node changed since it was read answers 409);
    ``None`` when the node has a taint with that key already."""
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if isinstance(t, Mapping)]
    if any(t.get("key") == TAINT_KEY for t in taints):
        return None
    version = (node.get("metadata") or {}).get("resourceVersion")
    return {
        "metadata": {"resourceVersion": version},
        "spec": {"taints": [*taints, {"key": TAINT_KEY, "effect": TAINT_EFFECT}]},
    }


@dataclass(frozen=True)
class AvoidedNode:
    """One entry of ``status.avoidedNodes``."""

    node: str
    reason: str
    """``FAILURES`` or ``NODE_CONDITION``."""
    failures: int
    """Hardware-like failures counted on the node within the window (0 for a condition)."""
    since: float
    """First failure of the window, or when the condition became True."""
    avoided: bool
    """New worker pods of the job keep off the node."""
    message: str = ""
    """The last failure's summary, or the condition."""
    saved_step: int | None = None
    """For a condition: ``status.checkpoint.lastSavedStep`` when it was first seen (a pod is
    moved once a newer checkpoint exists)."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "node": self.node,
            "reason": self.reason,
            "failures": self.failures,
            "since": self.since,
            "avoided": self.avoided,
            "message": self.message,
        }
        if self.saved_step is not None:
            data["savedStep"] = self.saved_step
        return data

    @classmethod
    def from_json(cls, data: Any) -> AvoidedNode | None:
        """A stored entry; ``None`` when it is not one (a stored status is read, never trusted)."""
        if not isinstance(data, Mapping):
            return None
        node, reason, since = data.get("node"), data.get("reason"), data.get("since")
        if not isinstance(node, str) or not node or len(node) > MAX_NODE_NAME:
            return None
        if reason not in (FAILURES, NODE_CONDITION):
            return None
        if isinstance(since, bool) or not isinstance(since, int | float) or not 0 <= since < 2**53:
            return None
        message = data.get("message")
        return cls(
            node=node,
            reason=str(reason),
            failures=_count(data.get("failures")) or 0,
            since=float(since),
            avoided=data.get("avoided") is True,
            message=_cap(message) if isinstance(message, str) else "",
            saved_step=_count(data.get("savedStep")),
        )


def read(stored: Any) -> tuple[AvoidedNode, ...]:
    """``status.avoidedNodes`` as stored: what is not an entry is dropped, one entry per node,
    at most ``MAX_ENTRIES``."""
    entries: dict[str, AvoidedNode] = {}
    for item in stored if isinstance(stored, list) else []:
        entry = AvoidedNode.from_json(item)
        if entry is not None and entry.node not in entries:
            entries[entry.node] = entry
    return bounded(entries.values())


def avoided(entries: Iterable[AvoidedNode]) -> frozenset[str]:
    """The nodes the job's new worker pods keep off."""
    return frozenset(e.node for e in entries if e.avoided)


def bounded(entries: Iterable[AvoidedNode]) -> tuple[AvoidedNode, ...]:
    """At most ``MAX_ENTRIES``, ordered by node name: the watched (not yet avoided) nodes go
    first, oldest first, then the oldest avoided ones."""
    ordered = sorted(entries, key=lambda e: (e.avoided, e.since, e.node), reverse=True)
    return tuple(sorted(ordered[:MAX_ENTRIES], key=lambda e: e.node))


def hardware_cause(evidence: Evidence) -> str | None:
    """``NODE_LOST``, ``SIGNAL`` or ``DEVICE_ERROR`` when ``evidence`` (a root cause's headline)
    is a hardware-like failure of its node; ``None`` otherwise (an OOM, a program error, a
    survivor's symptom, a pod deleted or preempted)."""
    if evidence.kind == CauseKind.NODE_LOST:
        return NODE_LOST
    failure = evidence.failure
    if evidence.kind != CauseKind.WORKER_FAILED or failure is None:
        return None
    said = " ".join(t for t in (failure.exception_type, failure.message, failure.output_tail) if t)
    if said and DEVICE_PATTERNS.search(said):
        return DEVICE_ERROR
    if failure.signal in OUTSIDE_SIGNALS:
        return SIGNAL
    return None


def new_failure(before: Cause | None, after: Cause | None, window: float) -> Evidence | None:
    """The headline of ``after`` when it is a hardware-like failure of a node that ``before``
    (the root cause stored at the start of the step) did not already stand for; ``None``
    otherwise. A correction of a symptom to its real cause counts; a correction between two
    hardware-like headlines of one failure (the same round, or within ``window`` seconds when
    a round is unknown) does not count again."""
    if after is None or hardware_cause(after.headline) is None or not after.headline.node:
        return None
    if before is None:
        return after.headline
    head, old = after.headline, before.headline
    if head.identity() == old.identity():
        return None
    if hardware_cause(old) is not None and _same_failure(head, old, window):
        return None
    return head


def _same_failure(one: Evidence, other: Evidence, window: float) -> bool:
    if one.from_agent and other.from_agent and None not in (one.round, other.round):
        return one.round == other.round
    return abs(one.at - other.at) <= window


def count_failure(
    entries: Iterable[AvoidedNode], failure: Evidence, settings: QuarantineSettings
) -> tuple[tuple[AvoidedNode, ...], AvoidedNode | None]:
    """``entries`` with ``failure`` (``new_failure``'s result) counted on its node, and the
    entry when this failure made the node avoided (``None`` otherwise). A count older than the
    window starts again at this failure; a node already avoided for its failures only counts
    on. With ``settings.failures`` 0 nothing changes."""
    kept = {e.node: e for e in entries}
    node = failure.node
    if settings.failures <= 0 or not node:
        return tuple(kept.values()), None
    message = _cap(f"{hardware_cause(failure)}: {failure.summary()}")
    known = kept.get(node)
    if known is not None and known.reason == NODE_CONDITION:
        return tuple(kept.values()), None  # avoided already, for as long as the condition lasts
    if known is not None and known.avoided:
        kept[node] = replace(known, failures=known.failures + 1, message=message)
        return bounded(kept.values()), None
    fresh = known is None or failure.at - known.since > settings.window
    count = 1 if fresh or known is None else known.failures + 1
    since = failure.at if fresh or known is None else known.since
    entry = AvoidedNode(
        node=node,
        reason=FAILURES,
        failures=count,
        since=since,
        avoided=count >= settings.failures,
        message=message,
    )
    kept[node] = entry
    return bounded(kept.values()), entry if entry.avoided else None


def expire(
    entries: Iterable[AvoidedNode], settings: QuarantineSettings, now: float
) -> tuple[AvoidedNode, ...]:
    """``entries`` less the watched nodes whose window has passed (an avoided node stays)."""
    return tuple(
        e for e in entries if e.avoided or e.reason != FAILURES or now - e.since <= settings.window
    )


def _cap(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def _count(value: Any) -> int | None:
    try:
        return bounded_int(value, 0, 2**53)
    except IntegerError:
        return None
