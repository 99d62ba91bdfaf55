"""Stragglers in a planning step: the verdict (``core/stragglers.py``) into the status, the
``Straggler`` condition and Events, and with ``action: Replace`` the slow node's pods replaced
(restart reason ``straggler``, which spends nothing) and the node kept out of the job's new
worker pods (a required node affinity ``NotIn`` on every pod the step creates).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from .. import manifests, names, restarts
from ..conditions import ConditionType, find_condition, set_condition
from ..observed import Observed, PodView
from ..spec import JobSpec
from ..stragglers import judge, judge_preflight, node_figures, node_of
from ..stragglers_spec import StragglerAction
from ..stragglers_status import PREFLIGHT, StragglerEntry, avoided_nodes
from .actions import CreateObject, DeletePod, Draft

NODE_NAME_FIELD = "metadata.name"
"""The node field an avoided node is matched by (``matchFields``: the node's own name, which a
label such as ``kubernetes.io/hostname`` need not equal)."""


def track_stragglers(
    draft: Draft,
    job: names.JobRef,
    spec: JobSpec,
    *,
    observed: Observed,
    current: Mapping[int, PodView],
    now: float,
    hold: frozenset[int] = frozenset(),
) -> None:
    """Judge this step's figures; with ``Replace``, replace the pods of each new straggler
    (``hold``: indexes Kueue holds back, created later)."""
    settings = spec.health.stragglers
    pods = [pod for index, pod in current.items() if index < spec.worker_pods]
    figures = node_figures(observed, pods, job.run_id)
    present = frozenset(node_of(pod) for pod in pods if not pod.deleting)
    verdict = judge(draft.status.stragglers, figures, present, settings, now)
    detected = list(verdict.detected)
    if spec.health.preflight:
        checks = node_figures(observed, pods, job.run_id, preflight=True)
        checked = judge_preflight(verdict.entries, checks, settings, now)
        figures = {**figures, **{e.node: checks[e.node] for e in checked.detected}}
        verdict = replace(checked, detected=(), recovered=verdict.recovered)
        detected += checked.detected
    entries = list(verdict.entries)
    for found in detected:
        if settings.action is StragglerAction.REPLACE:
            replaced = _replace(draft, job, spec, figures[found.node].pods, hold)
            entries = [
                replace(e, replaced_at=now) if e.node == found.node and replaced else e
                for e in entries
            ]
            then = (
                f"replacing {', '.join(replaced)} elsewhere; the job avoids the node"
                if replaced
                else "its pods are being replaced already"
            )
            draft.event(
                "Warning",
                "Straggler",
                f"{found.describe()}{_lasting(found, settings.window_seconds)}: {then}",
            )
        else:
            draft.event(
                "Warning",
                "Straggler",
                f"{found.describe()}{_lasting(found, settings.window_seconds)}",
            )
    for gone in verdict.recovered:
        draft.event(
            "Normal",
            "StragglerRecovered",
            f"node {gone.node} is back within {settings.factor}x the median of the other nodes "
            f"for {settings.window_seconds} s ({gone.compute_seconds:.3f} s per step)",
        )
    draft.status = draft.status.evolve(stragglers=tuple(entries))
    _condition(draft, tuple(entries), bool(detected or verdict.recovered), now)


def _lasting(entry: StragglerEntry, window: int) -> str:
    return "" if entry.check == PREFLIGHT else f" for {window} s"


def _replace(
    draft: Draft,
    job: names.JobRef,
    spec: JobSpec,
    pods: Iterable[PodView],
    hold: frozenset[int],
) -> list[str]:
    """A new attempt of each pod's index (counted ``straggler`` unless the pod is a hot spare
    that never joined, written before the pods are created and deleted, like every
    replacement); returns the names replaced."""
    attempts = dict(draft.status.attempts)
    counts = dict(draft.status.restarts)
    done: list[str] = []
    for pod in pods:
        if pod.deleting or pod.attempt != attempts.get(pod.index, 0):
            continue  # already being replaced in this step, or superseded
        attempts[pod.index] = pod.attempt + 1
        if pod.joined or not pod.stood_by:  # a hot spare held no place: nothing restarts
            counts = restarts.bump(counts, restarts.STRAGGLER)
        draft.actions.append(DeletePod(pod.name))
        if pod.index not in hold:
            draft.actions.append(
                CreateObject(manifests.build_worker_pod(job, spec, pod.index, pod.attempt + 1))
            )
        done.append(pod.name)
    if done:
        draft.commit_first = True
        draft.status = draft.status.evolve(attempts=attempts, restarts=counts)
    return done


def _condition(
    draft: Draft, entries: tuple[StragglerEntry, ...], changed: bool, now: float
) -> None:
    """``Straggler``: True while a node straggles (and was not replaced); set once a first
    straggler was found, so a job that never had one carries no such condition."""
    existing = find_condition(draft.status.conditions, ConditionType.STRAGGLER)
    if existing is None and not changed:
        return
    slow = [e for e in entries if e.straggling]
    replaced = [e for e in entries if e.replaced_at is not None and e.replaced_at == now]
    if slow:
        status, reason = True, "SlowNode"
        message = "; ".join(e.describe() for e in slow)
    elif replaced:
        status, reason = False, "Replaced"
        message = "; ".join(f"{e.describe()}: replaced, the job avoids it" for e in replaced)
    elif existing is None or existing.get("status") == "True":
        status, reason, message = False, "Recovered", "no node is slower than the others"
    else:
        return  # already False: keep its reason and message (Replaced stays readable)
    draft.status = draft.status.evolve(
        conditions=tuple(
            set_condition(
                draft.status.conditions, ConditionType.STRAGGLER, status, reason, message, now=now
            )
        )
    )


__all__ = ["NODE_NAME_FIELD", "avoided_nodes", "track_stragglers"]
