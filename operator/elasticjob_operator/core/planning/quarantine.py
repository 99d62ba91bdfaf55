"""Bad nodes in a step: count the job's hardware-like failures per node, move its pods off nodes
with a bad condition, and keep its new worker pods off both (``quarantine`` holds the ledger).

``note_failures`` runs once the step knows the job's root cause; ``move_off_bad_nodes`` before
``manage_workers`` (a move is a new attempt of the pod's index, which ``manage_workers`` then
creates, deleting the old pod as superseded); ``keep_off`` last, on the step's actions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .. import manifests, names, quarantine, restarts, root_cause
from ..node_conditions import NODE_CONDITION as NODE_CONDITION_RESTART
from ..node_conditions import NodeCondition
from ..observed import Observed, PodView, current_workers
from ..quarantine import NODE_CONDITION, AvoidedNode, QuarantineSettings
from ..spec import JobSpec
from ..status import JobStatus
from .actions import Action, CreateObject, Draft, TaintNode

MAX_KEPT_OFF = 64
"""Nodes a new worker pod's anti-affinity names at most (avoided ones first)."""


def note_failures(
    draft: Draft, before: JobStatus, settings: QuarantineSettings, window: float, now: float
) -> None:
    """Count a new hardware-like root cause on its node (``before``: the status the step
    started from; ``window``: the root-cause correction window) and drop watched nodes whose
    window has passed. A node that becomes avoided gets a Warning Event ``NodeAvoided`` and,
    with ``settings.taint``, a ``TaintNode`` action."""
    entries = quarantine.expire(draft.status.avoided_nodes, settings, now)
    failure = quarantine.new_failure(
        root_cause.parse_stored(before.last_failure),
        root_cause.parse_stored(draft.status.last_failure),
        window,
    )
    if failure is not None:
        entries, newly = quarantine.count_failure(entries, failure, settings)
        if newly is not None:
            tainted = ""
            if settings.taint:
                draft.actions.append(TaintNode(newly.node))
                tainted = (
                    f"; tainted {quarantine.TAINT_KEY}:{quarantine.TAINT_EFFECT} for every job "
                    f"(remove with kubectl taint nodes {newly.node} {quarantine.TAINT_KEY}-)"
                )
            draft.event(
                "Warning",
                "NodeAvoided",
                f"node {newly.node}: {newly.failures} hardware-like failures of the job's "
                f"workers within {settings.window:.0f} s (last: {newly.message}); the job's new "
                f"worker pods keep off it{tainted}",
            )
    draft.status = draft.status.evolve(avoided_nodes=entries)


def move_now(
    pod: PodView,
    *,
    has_checkpoint: bool,
    ready_spares: int,
    saved_then: int | None,
    saved_now: int | None,
) -> str | None:
    """Why ``pod``, on a node with a bad condition, is moved in this step; ``None``: it waits
    for the job's next checkpoint. At once: a pod not in the group (a spare standing by, or one
    whose agent never joined a round), when a ready spare can take its place, or when the job
    has no checkpoint config (nothing to wait for: the operator cannot see the script's own
    checkpoints). Otherwise once the agents hold a checkpoint newer than ``saved_then`` (their
    ``lastSavedStep`` when the condition was first seen)."""
    if not pod.joined:
        return "it is not in the worker group"
    if ready_spares > 0:
        return "a ready spare takes its place"
    if not has_checkpoint:
        return "the job keeps no checkpoints to wait for"
    if saved_now is not None and (saved_then is None or saved_now > saved_then):
        return f"checkpoint step {saved_now} was saved since the condition"
    return None


def move_off_bad_nodes(draft: Draft, spec: JobSpec, observed: Observed, now: float) -> None:
    """Track the nodes with a bad condition that host the job's pods (``avoidedNodes``, reason
    ``NodeCondition``, gone when the condition is) and move each pod off such a node when
    ``move_now`` says: a new attempt of its index (committed first), counted under
    ``node-condition`` only when no agent counts it (its agent never joined a round; a spare's
    loss is no restart), with a Warning Event ``NodeConditionMove``."""
    bad = observed.node_conditions
    status = draft.status
    entries = {e.node: e for e in status.avoided_nodes}
    for node, entry in list(entries.items()):
        if entry.reason == NODE_CONDITION and node not in bad:
            del entries[node]
            draft.event("Normal", "NodeConditionCleared", f"node {node}: {entry.message} is over")
    saved = _saved_step(status, observed)
    current = current_workers(observed.workers, status.attempts)
    placed = {
        i: p
        for i, p in current.items()
        if i < spec.worker_pods and p.node in bad and not p.terminal and not p.deleting
    }
    for node in sorted({p.node for p in placed.values() if p.node is not None}):
        if node not in entries:
            entries[node] = _entry(node, bad[node], now, saved)
            pods = ", ".join(sorted(p.name for p in placed.values() if p.node == node))
            draft.event(
                "Warning",
                "BadNodeCondition",
                f"node {node}: {entries[node].message}; the job moves its pods off it ({pods})",
            )
    attempts = dict(status.attempts)
    counts = dict(status.restarts)
    for index, pod in sorted(placed.items()):
        held = entries.get(pod.node or "")
        if held is None:
            continue
        why = move_now(
            pod,
            has_checkpoint=spec.checkpoint is not None,
            ready_spares=status.ready_spares,
            saved_then=held.saved_step if held.reason == NODE_CONDITION else None,
            saved_now=saved,
        )
        if why is None:
            continue
        attempts[index] = max(attempts.get(index, 0), pod.attempt) + 1
        counted = not pod.joined and not pod.stood_by
        if counted:
            counts = restarts.bump(counts, NODE_CONDITION_RESTART)
        draft.commit_first = True
        draft.event(
            "Warning",
            "NodeConditionMove",
            f"worker pod {pod.name} on node {pod.node} ({held.message}) moves: {why}; "
            f"creating attempt {attempts[index]}"
            + (f" (restart reason {NODE_CONDITION_RESTART})" if counted else ""),
        )
    draft.status = draft.status.evolve(
        avoided_nodes=quarantine.bounded(entries.values()), attempts=attempts, restarts=counts
    )


def _saved_step(status: JobStatus, observed: Observed) -> int | None:
    """The newest checkpoint step the agents of the run hold: what they report now (not only
    the sampled ``lastSavedStep``, so that a pod waiting for a checkpoint moves at once)."""
    steps = [
        r.last_saved_step
        for r in observed.reports.values()
        if r.run_id == status.run_id and r.last_saved_step is not None
    ]
    if status.checkpoint.last_saved_step is not None:
        steps.append(status.checkpoint.last_saved_step)
    return max(steps, default=None)


def _entry(
    node: str, conditions: Iterable[NodeCondition], now: float, saved: int | None
) -> AvoidedNode:
    found = tuple(conditions)
    since = min((c.since for c in found if c.since is not None), default=now)
    return AvoidedNode(
        node=node,
        reason=NODE_CONDITION,
        failures=0,
        since=since,
        avoided=True,
        message=", ".join(c.summary() for c in found)[: quarantine.MAX_MESSAGE],
        saved_step=saved,
    )


def kept_off(status: JobStatus, bad: Mapping[str, object]) -> tuple[str, ...]:
    """The nodes the job's new worker pods keep off: its avoided nodes, then every node with a
    bad condition now, at most ``MAX_KEPT_OFF``."""
    first = sorted(quarantine.avoided(status.avoided_nodes))
    rest = sorted(n for n in bad if n not in first)
    return tuple([*first, *rest][:MAX_KEPT_OFF])


def keep_off(actions: Iterable[Action], nodes: tuple[str, ...]) -> tuple[Action, ...]:
    """``actions`` with every worker pod they create kept off ``nodes``
    (``manifests.with_avoided_nodes``)."""
    if not nodes:
        return tuple(actions)
    return tuple(
        CreateObject(manifests.with_avoided_nodes(a.manifest, nodes))
        if isinstance(a, CreateObject) and _is_worker_pod(a.manifest)
        else a
        for a in actions
    )


def _is_worker_pod(manifest: Mapping[str, object]) -> bool:
    meta = manifest.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return (
        manifest.get("kind") == "Pod"
        and isinstance(labels, Mapping)
        and labels.get(names.LABEL_ROLE) == names.ROLE_WORKER
    )


__all__ = ["keep_off", "kept_off", "move_now", "move_off_bad_nodes", "note_failures"]
