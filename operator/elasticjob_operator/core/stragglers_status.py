"""``status.stragglers``: the nodes whose compute time per step stands out, as stored (pure).

An entry is written when its node's story changes (it became slow, was found a straggler, was
replaced, started to recover), never at every poll: the figures are the ones seen at that
moment, so a job in the steady state writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .conditions import rfc3339
from .observed import parse_time

TRAINING = "training"
PREFLIGHT = "preflight"

MAX_ENTRIES = 32
"""Most entries kept: candidates and stragglers of the current nodes, then the nodes replaced
(the oldest replaced is forgotten first, and is no longer avoided)."""


@dataclass(frozen=True)
class StragglerEntry:
    node: str
    """The Kubernetes node (the pod's name when it has none yet)."""
    pod: str
    """A pod of the job on it (the first by name) when the entry was last written."""
    compute_seconds: float
    """The node's compute time per step (the median of its pods' figures)."""
    median_seconds: float
    """The median of the other nodes' compute time per step, at the same moment."""
    above_since: float
    """Since when it has been above ``factor`` times that median (Unix time)."""
    detected_at: float | None = None
    """When it had stayed above for the window: a straggler from then on."""
    below_since: float | None = None
    """A straggler that is no longer above: since when (it recovers after the window)."""
    replaced_at: float | None = None
    """With ``action: Replace``: when its pods were replaced; the job avoids the node."""
    check: str = TRAINING
    """What found it: ``training`` (compute time per step, over the window) or ``preflight``
    (the pre-flight check, at once; such an entry stays while the node holds a pod)."""

    @property
    def ratio(self) -> float:
        if self.median_seconds <= 0:
            return math.inf if self.compute_seconds > 0 else 1.0
        return self.compute_seconds / self.median_seconds

    @property
    def straggling(self) -> bool:
        """Found a straggler, and still in the job (not replaced)."""
        return self.detected_at is not None and self.replaced_at is None

    def describe(self) -> str:
        """One line for the condition, the Event and logs; names the node."""
        ratio = "inf" if math.isinf(self.ratio) else f"{self.ratio:.2f}"
        what = (
            "took {:.3f} s for the pre-flight check"
            if self.check == PREFLIGHT
            else "computes {:.3f} s per step"
        ).format(self.compute_seconds)
        return (
            f"node {self.node} (pod {self.pod}) {what}, "
            f"{ratio}x the median of the other nodes ({self.median_seconds:.3f} s)"
        )

    def to_json(self) -> dict[str, Any]:
        ratio = self.ratio
        return {
            "node": self.node,
            "pod": self.pod,
            "computeSeconds": round(self.compute_seconds, 6),
            "medianSeconds": round(self.median_seconds, 6),
            "ratio": None if math.isinf(ratio) else round(ratio, 3),
            "aboveSince": rfc3339(self.above_since),
            "detectedAt": None if self.detected_at is None else rfc3339(self.detected_at),
            "belowSince": None if self.below_since is None else rfc3339(self.below_since),
            "replacedAt": None if self.replaced_at is None else rfc3339(self.replaced_at),
            "check": self.check,
        }

    @classmethod
    def from_json(cls, data: Any) -> StragglerEntry | None:
        """A stored entry; ``None`` when it is not one (a stored status is read, never
        trusted)."""
        if not isinstance(data, Mapping):
            return None
        node, pod = data.get("node"), data.get("pod")
        compute, median = _seconds(data.get("computeSeconds")), _seconds(data.get("medianSeconds"))
        above = parse_time(data.get("aboveSince"))
        if not (isinstance(node, str) and node and isinstance(pod, str)):
            return None
        if compute is None or median is None or above is None:
            return None
        return cls(
            node=node[:253],
            pod=pod[:253],
            compute_seconds=compute,
            median_seconds=median,
            above_since=above,
            detected_at=parse_time(data.get("detectedAt")),
            below_since=parse_time(data.get("belowSince")),
            replaced_at=parse_time(data.get("replacedAt")),
            check=PREFLIGHT if data.get("check") == PREFLIGHT else TRAINING,
        )


def entries_from_json(value: Any) -> tuple[StragglerEntry, ...]:
    if not isinstance(value, list):
        return ()
    parsed = (StragglerEntry.from_json(item) for item in value[:MAX_ENTRIES])
    return tuple(entry for entry in parsed if entry is not None)


def entries_to_json(entries: tuple[StragglerEntry, ...]) -> list[dict[str, Any]] | None:
    """The stored list (``None``, which clears the field, when there is none)."""
    return [entry.to_json() for entry in entries] or None


def avoided_nodes(entries: tuple[StragglerEntry, ...]) -> frozenset[str]:
    """The nodes this job's new worker pods keep off (replaced stragglers)."""
    return frozenset(entry.node for entry in entries if entry.replaced_at is not None)


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    seconds = float(value)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
