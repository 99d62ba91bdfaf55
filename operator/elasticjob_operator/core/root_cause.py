"""The job's root cause (``status.lastFailure``): evidence ranked job-wide. Pure.

Each agent reports the first worker failure of its latest failed round (``protocol.failure``);
the operator adds what it saw itself (``evidence.CauseKind``: a node lost, a pod deleted,
evicted or preempted, OOMKilled, etcd lost). ``rank`` orders them: what the operator saw, then a
rank's own failure, then a survivor's symptom (``protocol.symptoms``); within each, the first in
time. ``update`` decides what the status keeps: a newer failure replaces the stored cause, and
better evidence of the same failure corrects it (the caller posts a follow-up Event).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .evidence import MAX_SECONDARY, Cause, CauseKind, Evidence

CORRECTION_WINDOW_SECONDS = 60.0
"""Default of how far apart in time evidence of one failure may be (the node controller marks
a node lost 40 s after its last heartbeat by default, well after the survivors' errors);
``ELASTICJOB_ROOT_CAUSE_WINDOW_SECONDS``."""
MAX_CLOCK_SKEW_SECONDS = 30.0
"""A record dated further in the future than this (by the operator's clock) is refused."""
MAX_EVIDENCE = 256
"""Evidence looked at per step, at most (the rest is refused: ``too-much``)."""

CREATES_FAILURE = frozenset(
    {
        CauseKind.NODE_LOST,
        CauseKind.POD_EVICTED,
        CauseKind.POD_PREEMPTED,
        CauseKind.OOM_KILLED,
        CauseKind.ETCD_LOST,
        CauseKind.IMAGE_NOT_PULLED,
        CauseKind.POD_DELETED,
    }
)
"""What the operator sees that is a failure of the group by itself: a member gone (a pod
deleted only when the operator did not ask for it), or, before the group first formed, a
member that cannot start for its image (``causes.sightings``)."""


@dataclass(frozen=True)
class Update:
    """What ``update`` decided."""

    cause: Cause | None = None
    """The cause to store; ``None``: the stored one stands."""
    corrected: Cause | None = None
    """The stored cause that ``cause`` corrects (the same failure, a better headline)."""
    refused: tuple[str, ...] = ()
    """Why each refused piece of evidence was refused (``unknown-pod``, ``foreign-pod``,
    ``future-time``, ``too-much``): counted, never trusted."""


def rank(evidence: Iterable[Evidence]) -> Cause | None:
    """The headline (first in ``Evidence.order``) and, as its secondary evidence, the rest
    (at most ``MAX_SECONDARY``, best first); one fact seen twice counts once, at its first
    time. ``None`` without evidence."""
    first: dict[tuple[object, ...], Evidence] = {}
    for item in evidence:
        key = item.identity()
        known = first.get(key)
        if known is None or item.at < known.at:
            first[key] = item
    ordered = sorted(first.values(), key=Evidence.order)
    if not ordered:
        return None
    return Cause(ordered[0], tuple(ordered[1 : 1 + MAX_SECONDARY]))


def vet(
    reported: Iterable[tuple[str, Evidence]], pods: Collection[str], now: float
) -> tuple[list[Evidence], list[str]]:
    """The agents' evidence, by reporting pod, that may be trusted, and why the rest is not: a
    record that names a pod not in the job (``unknown-pod``) or another pod of it than its
    reporter (``foreign-pod``), or is dated in the future (``future-time``)."""
    kept: list[Evidence] = []
    refused: list[str] = []
    for count, (reporter, item) in enumerate(reported):
        if count >= MAX_EVIDENCE:
            refused.append("too-much")
        elif item.pod is not None and item.pod not in pods:
            refused.append("unknown-pod")
        elif item.pod is not None and item.pod != reporter:
            refused.append("foreign-pod")
        elif item.at > now + MAX_CLOCK_SKEW_SECONDS:
            refused.append("future-time")
        else:
            kept.append(item)
    return kept, refused


def update(
    stored: Cause | None,
    reported: Iterable[Evidence],
    seen: Iterable[Evidence],
    *,
    window: float = CORRECTION_WINDOW_SECONDS,
) -> Update:
    """The cause ``status.lastFailure`` should hold, given the ``stored`` one, the agents'
    (vetted) ``reported`` evidence and what the operator has ``seen`` in this step.

    A failure newer than the stored one (an agent's record of a later round, or anything dated
    more than ``window`` after it) starts afresh: ranked with the evidence of that failure (the
    same round, and what the operator saw within ``window`` of it). Otherwise the stored
    headline and secondary evidence are ranked again with what belongs to them: a better
    headline is a correction."""
    records = list(reported)
    observations = list(seen)
    newer = [e for e in [*records, *observations] if _starts_failure(e, stored, window)]
    if newer:
        anchor = max(newer, key=lambda e: (-1 if e.round is None else e.round, e.at))
        pool = [e for e in [*records, *observations] if _belongs(e, anchor, window)]
        return Update(cause=rank(pool))
    if stored is None:
        return Update()
    pool = [e for e in [*records, *observations] if _belongs(e, stored.headline, window)]
    ranked = rank([stored.headline, *stored.secondary, *pool])
    if ranked is None or ranked == stored:
        return Update()
    if ranked.headline.identity() != stored.headline.identity():
        return Update(cause=ranked, corrected=stored)
    return Update(cause=ranked)


def _starts_failure(item: Evidence, stored: Cause | None, window: float) -> bool:
    """Whether ``item`` is news: an agent's record of a later round than the stored cause's, or
    anything that can stand for a failure dated more than ``window`` after it (what the
    operator saw is dated when first seen; one fact seen again is no news)."""
    if not item.from_agent and item.kind not in CREATES_FAILURE:
        return False
    if stored is None:
        return True
    if item.identity() in {e.identity() for e in (stored.headline, *stored.secondary)}:
        return False
    head = stored.headline
    if item.from_agent and item.round is not None and head.round is not None:
        return item.round > head.round
    return item.at > head.at + window


def _belongs(item: Evidence, anchor: Evidence, window: float) -> bool:
    """Evidence of the failure ``anchor`` stands for: the same round for two agents' records,
    else within ``window`` of it (the operator may see a node lost well after the survivors'
    errors, and after the group re-formed)."""
    if item.from_agent and anchor.from_agent and None not in (item.round, anchor.round):
        return item.round == anchor.round
    return abs(item.at - anchor.at) <= window


def parse_stored(known: Mapping[str, Any] | None) -> Cause | None:
    """The stored ``status.lastFailure`` as a ``Cause``; ``None`` when absent or not one."""
    return Cause.from_json(known)
