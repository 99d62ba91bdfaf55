"""The job's root cause in the status: the agents' records and what the operator sees of the
job's pods, nodes and etcd, ranked job-wide (``root_cause``), with a follow-up Event when better
evidence of the same failure corrects a cause already stored.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from elasticjob_agent.protocol.failure import WorkerFailure

from .. import root_cause
from ..evidence import Cause, CauseKind, Evidence, Tier
from ..observed import IMAGE_PULL_REASONS, Observed, PodPhase, PodView, current_etcd
from ..stall import StallReason
from ..status import JobStatus, Phase
from .actions import Draft

PREEMPTED = frozenset({"PreemptionByScheduler", "PreemptionByKubeScheduler"})
"""``DisruptionTarget`` reasons of a pod the scheduler preempted."""
LOST_WITH_NODE = frozenset({"DeletionByTaintManager", "DeletionByPodGC"})
"""``DisruptionTarget`` reasons of a pod deleted because its node is gone or unreachable."""


def note_cause(
    draft: Draft,
    observed: Observed,
    records: Sequence[tuple[str, WorkerFailure]],
    now: float,
    window: float,
    *,
    worker_pods: int | None = None,
) -> tuple[Cause | None, tuple[str, ...], bool]:
    """Store the job's root cause from the agents' ``records`` (``(reporting pod, record)`` of
    this run) and what ``observed`` shows; returns it (the stored one when nothing changed),
    why any record was refused (``worker_pods``: the group's pods by the spec, see
    ``sightings``) and whether it is a new failure's cause, stored in this step (the caller
    posts it when no ``Restarted`` Event quotes it). A correction of the stored cause to a real
    cause (not another symptom) posts a Warning Event ``RootCause``."""
    nodes = {p.name: p.node for p in observed.workers}
    reported = [
        (pod, Evidence.of_failure(_placed(f, pod, nodes.get(pod)), node=nodes.get(pod)))
        for pod, f in records
    ]
    kept, refused = root_cause.vet(reported, nodes.keys(), now)
    stored = root_cause.parse_stored(draft.status.last_failure)
    decided = root_cause.update(
        stored, kept, sightings(observed, draft.status, now, worker_pods), window=window
    )
    if decided.cause is None:
        return stored, tuple(refused), False
    draft.status = draft.status.evolve(last_failure=decided.cause.to_json())
    if decided.corrected is not None and decided.cause.headline.tier is not Tier.SYMPTOM:
        round_ = decided.cause.round
        draft.event(
            "Warning",
            "RootCause",
            f"{decided.cause.quoted()}"
            + ("" if round_ is None else f" (round {round_})")
            + f"; first reported: {decided.corrected.summary()}",
        )
    news = decided.corrected is None and (
        stored is None or stored.headline.identity() != decided.cause.headline.identity()
    )
    return decided.cause, tuple(refused), news


def post_new_cause(draft: Draft, cause: Cause) -> None:
    """A Warning Event ``RootCause`` naming a new failure's cause (not a survivor's symptom:
    its correction posts one), for a step in which no ``Restarted`` Event quotes it: the
    restart was counted before the cause was known, or was not a failure's."""
    if cause.headline.tier is Tier.SYMPTOM:
        return
    round_ = cause.round
    draft.event(
        "Warning", "RootCause", cause.quoted() + ("" if round_ is None else f" (round {round_})")
    )


_IPV4 = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?![\d.])")
MAX_SUSPECT_TEXT = 4096
"""Characters of a symptom's text searched for a peer's address."""


def suspect(cause: Cause | None, observed: Observed) -> str | None:
    """The pod a survivor's symptom points at, as ``pod X (node Y)``: the one other worker pod
    of the job whose IP the error names (gloo's ``Read error [10.100.1.3]:47024: Connection
    reset by peer``); ``None`` when the headline is not a symptom, or names no such pod or
    more than one."""
    if cause is None or cause.headline.tier is not Tier.SYMPTOM:
        return None
    failure = cause.headline.failure
    if failure is None:
        return None
    text = " ".join(t for t in (failure.message, failure.output_tail) if t)
    addresses = set(_IPV4.findall(text[:MAX_SUSPECT_TEXT]))
    peers = [
        p
        for p in observed.workers
        if p.ip is not None and p.ip in addresses and p.name != cause.headline.pod
    ]
    if len(peers) != 1:
        return None
    (peer,) = peers
    return f"pod {peer.name}" + ("" if peer.node is None else f" (node {peer.node})")


def _placed(failure: WorkerFailure, pod: str, node: str | None) -> WorkerFailure:
    """The record with its pod (the reporter's, when the agent did not say) and the Kubernetes
    node the operator knows the pod runs on."""
    return replace(failure, pod=failure.pod or pod, node=node or failure.node)


def sightings(
    observed: Observed, status: JobStatus, now: float, worker_pods: int | None = None
) -> list[Evidence]:
    """What the operator sees for itself of the pods that were in the group (their agent
    joined a round) and of the job's etcd, dated as precisely as Kubernetes tells; before the
    group first formed, also an image that cannot be pulled (the job cannot start: that is
    its failure).

    A pod being deleted is ``PodDeleted`` when the operator did not ask for it: the pod is its
    replica's current attempt, within ``worker_pods`` (not scaled away) and the job is not
    suspended; a deletion the operator asked for is no evidence (``None``: ``worker_pods``
    unknown, every deletion is)."""
    found: list[Evidence] = []
    for pod in observed.workers:
        if pod.joined and pod.phase is not PodPhase.SUCCEEDED:
            item = _sighting(pod, observed.lost_nodes, now)
            if (
                item is not None
                and item.kind == CauseKind.POD_DELETED
                and worker_pods is not None
                and _deleted_by_the_operator(pod, status, worker_pods)
            ):
                item = None
            if item is not None:
                found.append(replace(item, round=status.round))
        elif not pod.joined and status.round == 0 and _image_not_pulled(pod):
            item = _sighting(pod, frozenset(), now)
            if item is not None:
                found.append(replace(item, round=status.round))
    found += _etcd_sightings(observed, status, now)
    return found


def _etcd_sightings(observed: Observed, status: JobStatus, now: float) -> list[Evidence]:
    """The job's managed etcd lost: the pod of a generation that was up ended, is being
    deleted or is on a lost node (seen in the step the operator replaces it, while the pod is
    still there to name), or the job stalled with ``EtcdUnavailable`` after its etcd was up and
    nobody reaches it in this step (named by the pod of the generation that was up, while it
    exists)."""
    found: list[Evidence] = []
    state = status.etcd
    up = {p.index: p for p in observed.etcd_pods}.get(state.ready_generation)
    if up is not None and state.ready_generation == state.generation:
        how = (
            "its pod ended" if up.terminal
            else "its pod is being deleted" if up.deleting
            else f"its node {up.node} is lost" if up.node in observed.lost_nodes
            else None
        )  # fmt: skip
        if how is not None:
            at = up.finished_at or up.deleted_at or now
            found.append(
                Evidence(
                    kind=CauseKind.ETCD_LOST,
                    at=at,
                    node=up.node,
                    pod=up.name,
                    message=how,
                    round=status.round,
                )
            )
    stall = status.stall
    was_up = state.ready_generation >= 0  # an etcd that never came up was never lost
    # An agent that cannot reach etcd while the operator's probe or another agent does is
    # no loss of etcd (a starved agent, its own network): its stall names no cause.
    nobody_reaches = observed.etcd_reachable is not True and not observed.agent_reaches_etcd(
        status.run_id
    )
    if (
        stall is not None
        and stall.reason == StallReason.ETCD_UNAVAILABLE
        and was_up
        and nobody_reaches
    ):
        etcd = up or current_etcd(observed.etcd_pods, state.generation)
        found.append(
            Evidence(
                kind=CauseKind.ETCD_LOST,
                at=state.unreachable_since or stall.since,
                node=None if etcd is None else etcd.node,
                pod=None if etcd is None else etcd.name,
                message=stall.message,
                round=status.round,
            )
        )
    return found


def _sighting(pod: PodView, lost_nodes: frozenset[str], now: float) -> Evidence | None:
    def seen(kind: CauseKind, at: float | None, message: str | None = None) -> Evidence:
        return Evidence(
            kind=kind, at=now if at is None else at, node=pod.node, pod=pod.name, message=message
        )

    if pod.node is not None and pod.node in lost_nodes:
        return seen(CauseKind.NODE_LOST, None)
    if pod.disruption in LOST_WITH_NODE:
        return seen(CauseKind.NODE_LOST, pod.deleted_at)
    if pod.oom_killed:
        return seen(CauseKind.OOM_KILLED, pod.finished_at)
    if pod.disruption in PREEMPTED:
        return seen(CauseKind.POD_PREEMPTED, pod.deleted_at)
    if pod.evicted or pod.disruption is not None:
        return seen(CauseKind.POD_EVICTED, pod.deleted_at or pod.finished_at, pod.disruption)
    if _image_not_pulled(pod) and pod.start_failure is not None:
        failure = pod.start_failure
        return seen(CauseKind.IMAGE_NOT_PULLED, None, f"{failure.reason}: {failure.message}")
    if pod.deleting and not pod.terminal:
        return seen(CauseKind.POD_DELETED, pod.deleted_at)
    return None


def _image_not_pulled(pod: PodView) -> bool:
    return pod.start_failure is not None and pod.start_failure.reason in IMAGE_PULL_REASONS


def _deleted_by_the_operator(pod: PodView, status: JobStatus, worker_pods: int) -> bool:
    """Whether the operator deletes ``pod`` itself: replaced (an older attempt), scaled away,
    or the job suspended (``planning.workers``, ``planning.suspend``)."""
    superseded = pod.attempt < status.attempts.get(pod.index, 0)
    return superseded or pod.index >= worker_pods or status.phase is Phase.SUSPENDED
