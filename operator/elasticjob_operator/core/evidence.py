"""Evidence of why a job's worker group failed, and the cause the job names (pure).

Evidence comes from two sides. The agents report what their workers died of
(``protocol.failure.WorkerFailure``): a rank's own failure (an exception, an exit code, a
signal, an expired timer, a hang) or a symptom (``protocol.symptoms``: a survivor's lost
connection, collective timeout or store error). The operator sees what Kubernetes says: a node
lost, a pod deleted, evicted or preempted, a container OOMKilled or whose image cannot be
pulled, the job's etcd lost. ``root_cause.rank`` orders them; the winner is the headline of
``status.lastFailure`` (``Cause``), the rest its secondary evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum, StrEnum
from typing import Any

from elasticjob_agent.protocol.failure import (
    MAX_MESSAGE,
    MAX_NAME,
    FailureRecordError,
    WorkerFailure,
    cap,
)
from elasticjob_agent.protocol.symptoms import Symptom


class CauseKind(StrEnum):
    """``lastFailure.kind`` beside the ``Symptom`` kinds."""

    NODE_LOST = "NodeLost"
    POD_DELETED = "PodDeleted"
    POD_EVICTED = "PodEvicted"
    POD_PREEMPTED = "PodPreempted"
    OOM_KILLED = "OOMKilled"
    IMAGE_NOT_PULLED = "ImageNotPulled"
    ETCD_LOST = "EtcdLost"
    WORKER_FAILED = "WorkerFailed"
    """A rank's own failure, as its agent recorded it."""


INFRASTRUCTURE = frozenset(
    {
        CauseKind.NODE_LOST,
        CauseKind.POD_DELETED,
        CauseKind.POD_EVICTED,
        CauseKind.POD_PREEMPTED,
        CauseKind.OOM_KILLED,
        CauseKind.IMAGE_NOT_PULLED,
        CauseKind.ETCD_LOST,
    }
)
"""What the operator sees for itself: these outrank anything a worker reports."""
SYMPTOMS = frozenset(s.value for s in Symptom)
KINDS = frozenset({*(k.value for k in CauseKind), *SYMPTOMS})


class Tier(IntEnum):
    """The rank of a kind of evidence: lower wins."""

    INFRASTRUCTURE = 0
    FAILURE = 1
    SYMPTOM = 2


MAX_SECONDARY = 8
"""Secondary evidence kept beside the headline, at most."""
MAX_SUMMARY = 300
"""Characters of a secondary entry's summary."""


def tier(kind: str) -> Tier:
    if kind in INFRASTRUCTURE:
        return Tier.INFRASTRUCTURE
    return Tier.SYMPTOM if kind in SYMPTOMS else Tier.FAILURE


_WHAT_HAPPENED: Mapping[str, str] = {
    CauseKind.POD_DELETED: "deleted",
    CauseKind.POD_EVICTED: "evicted",
    CauseKind.POD_PREEMPTED: "preempted",
    CauseKind.OOM_KILLED: "OOMKilled",
    CauseKind.IMAGE_NOT_PULLED: "image not pulled",
}


@dataclass(frozen=True)
class Evidence:
    """One fact about a failure: what, where, when."""

    kind: str
    """A ``CauseKind`` or a ``Symptom`` value."""
    at: float
    """Unix time it happened (or, for what the operator sees late, when it first saw it)."""
    node: str | None = None
    """The Kubernetes node."""
    pod: str | None = None
    message: str | None = None
    """What the operator's kinds add (the kubelet's or the eviction's message)."""
    round: int | None = None
    """The rendezvous round of an agent's record; for what the operator sees, the job's round
    when it saw it."""
    failure: WorkerFailure | None = None
    """The agent's record, for ``WorkerFailed`` and the symptoms."""
    text: str | None = None
    """The summary as stored, for secondary evidence read back from the status."""

    @classmethod
    def of_failure(cls, failure: WorkerFailure, *, node: str | None = None) -> Evidence:
        """An agent's record; ``node``: the pod's Kubernetes node, when the operator knows it."""
        symptom = failure.symptom()
        kind = CauseKind.WORKER_FAILED.value if symptom is None else symptom.value
        if failure.oom_killed:
            # The agent saw its cgroup's OOM count rise with the kill: the same fact as a
            # kubelet's ``OOMKilled`` where the kernel kills the process, not the container.
            kind = CauseKind.OOM_KILLED.value
        return cls(
            kind=kind,
            at=failure.time,
            node=node or failure.node,
            pod=failure.pod,
            round=failure.round,
            failure=failure,
        )

    @property
    def tier(self) -> Tier:
        return tier(self.kind)

    @property
    def from_agent(self) -> bool:
        return self.failure is not None or self.kind not in INFRASTRUCTURE

    def identity(self) -> tuple[str, str | None, str | None, str, int | None, float | None]:
        """Two sightings of one fact share it: an agent's record polled twice, a pod seen on a
        lost node in two steps (what the operator sees is dated when seen: not compared)."""
        when = (self.round, self.at) if self.from_agent else (None, None)
        return (self.kind, self.pod, self.node, cap(self.summary(), MAX_SUMMARY) or "", *when)

    def order(self) -> tuple[int, float, str, int]:
        """``root_cause.rank``'s order: tier, then the first in time, then pod and rank."""
        rank = self.failure.rank if self.failure is not None else None
        return (self.tier, self.at, self.pod or "", -1 if rank is None else rank)

    def summary(self) -> str:
        """One line naming the node and pod: ``node real-1 lost (pod job-worker-1-0)``."""
        if self.text is not None:
            return self.text
        if self.failure is not None:
            return _worker_summary(self.failure, self.pod, self.node)
        pod, node = self.pod or "?", self.node or "?"
        if self.kind == CauseKind.NODE_LOST:
            text = f"node {node} lost (pod {pod})"
        elif self.kind == CauseKind.ETCD_LOST:
            text = "etcd lost" + (f" (pod {pod} on node {node})" if self.pod else "")
        else:
            what = _WHAT_HAPPENED.get(self.kind, self.kind)
            text = f"pod {pod} {what} (node {node})"
        return f"{text}: {self.message}" if self.message else text

    def to_json(self) -> dict[str, Any]:
        """A secondary entry of ``status.lastFailure``."""
        data = {
            "kind": self.kind,
            "node": cap(self.node, MAX_NAME),
            "pod": cap(self.pod, MAX_NAME),
            "time": self.at,
            "round": self.round,
            "summary": cap(self.summary(), MAX_SUMMARY),
        }
        return {k: v for k, v in data.items() if v is not None}

    @classmethod
    def from_json(cls, data: Any) -> Evidence | None:
        """A stored secondary entry; ``None`` when it is not one (read, never trusted)."""
        if not isinstance(data, Mapping):
            return None
        kind, at, summary = data.get("kind"), data.get("time"), data.get("summary")
        at = _time(at)
        if kind not in KINDS or not isinstance(summary, str) or at is None:
            return None
        node, pod, round_ = data.get("node"), data.get("pod"), data.get("round")
        return cls(
            kind=str(kind),
            at=at,
            node=cap(node, MAX_NAME) if isinstance(node, str) else None,
            pod=cap(pod, MAX_NAME) if isinstance(pod, str) else None,
            round=round_ if type(round_) is int else None,
            text=cap(summary, MAX_SUMMARY),
        )


_WORKER_KEYS = (
    "localRank",
    "rank",
    "exitCode",
    "signal",
    "exceptionType",
    "frame",
    "outputTail",
    "oomKilled",
)
STORED_KEYS = ("kind", "time", "node", "pod", "message", "round", *_WORKER_KEYS, "secondary")
"""Every key of ``status.lastFailure``: a written cause names them all (``None`` for the absent
ones), since the status is merge-patched and a key left out would keep the previous cause's."""


@dataclass(frozen=True)
class Cause:
    """``status.lastFailure``: the headline and its secondary evidence."""

    headline: Evidence
    secondary: tuple[Evidence, ...] = ()

    @property
    def kind(self) -> str:
        return self.headline.kind

    @property
    def time(self) -> float:
        return self.headline.at

    @property
    def round(self) -> int | None:
        return self.headline.round

    def summary(self) -> str:
        return self.headline.summary()

    def quoted(self, label: str = "root cause", *, suspect: str | None = None) -> str:
        """The headline as Events and conditions quote it: ``root cause: <summary>``, or, when
        only a survivor's symptom is known, says so (the cause may be reported later) and names
        the ``suspect`` (``pod X (node Y)``, the peer its error names), when known."""
        if self.headline.tier is Tier.SYMPTOM:
            points = "" if suspect is None else f" points at {suspect}"
            return (
                f"{label} not known yet; a survivor's symptom ({self.kind}){points}: "
                f"{self.summary()}"
            )
        return f"{label}: {self.summary()}"

    def to_json(self) -> dict[str, Any]:
        head = self.headline
        data: dict[str, Any] = dict.fromkeys(STORED_KEYS)
        if head.failure is not None:
            data.update(head.failure.to_json())
        elif head.text is None:
            data["message"] = cap(head.message, MAX_MESSAGE)
        node, pod = cap(head.node, MAX_NAME), cap(head.pod, MAX_NAME)
        data.update(kind=head.kind, time=head.at, node=node, pod=pod, round=head.round)
        data["secondary"] = [e.to_json() for e in self.secondary[:MAX_SECONDARY]]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Cause | None:
        """The stored ``status.lastFailure``; ``None`` when absent or not one. A record stored
        before causes had a kind reads as the agent's record it is."""
        if not data:
            return None
        fields = {k: v for k, v in data.items() if v is not None}
        secondary = tuple(
            e
            for e in (Evidence.from_json(d) for d in _list(fields.pop("secondary", None)))
            if e is not None
        )[:MAX_SECONDARY]
        kind = fields.pop("kind", None)
        node = fields.get("node")
        try:
            if "localRank" in fields:
                failure = WorkerFailure.from_json(fields)
                head = Evidence.of_failure(failure)
                return cls(head, secondary)
        except FailureRecordError:
            return None
        at, pod, message = _time(fields.get("time")), fields.get("pod"), fields.get("message")
        if kind not in INFRASTRUCTURE or at is None:
            return None
        round_ = fields.get("round")
        head = Evidence(
            kind=str(kind),
            at=at,
            node=cap(node, MAX_NAME) if isinstance(node, str) else None,
            pod=cap(pod, MAX_NAME) if isinstance(pod, str) else None,
            message=cap(message, MAX_MESSAGE) if isinstance(message, str) else None,
            round=round_ if type(round_) is int else None,
        )
        return cls(head, secondary)


def _worker_summary(failure: WorkerFailure, pod: str | None, node: str | None) -> str:
    """The agent's summary of a rank's failure (``WorkerFailure.summary``) with both the pod
    and the Kubernetes node named: ``rank 1 on pod job-worker-1-0 (node real-1) exited with
    code 1: ValueError: loss is nan``."""
    bare = replace(failure, pod=None, node=None).summary()
    who = f"rank {failure.rank}" if failure.rank is not None else f"local rank {failure.local_rank}"
    if pod is not None:
        where = f" on pod {pod}" + (f" (node {node})" if node is not None else "")
    else:
        where = "" if node is None else f" on node {node}"
    return who + where + bare[len(who) :]


def full_json(stored: Mapping[str, Any]) -> dict[str, Any]:
    """``stored`` (a ``status.lastFailure`` as read) with every key of ``STORED_KEYS``."""
    return {**dict.fromkeys(STORED_KEYS), **stored}


def _time(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 2**53:
        return None
    return float(value)


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else []
