"""Pods whose containers cannot start, kept in ``status.startFailures`` (pure).

The kubelet keeps such a pod ``Pending`` with a waiting reason (``ErrImagePull``,
``ImagePullBackOff``, ``CreateContainerConfigError``, ``CreateContainerError``,
``RunContainerError``, ...) and retries for ever, or under ``restartPolicy: Never`` ends the
container at once with ``StartError`` (exit code 128), after which the operator replaces the pod.
Either way the job would wait without a word of why; the status names the pod, the container and
the kubelet's reason and message instead (condition ``PodsNotStarting``, an Event per new cause).

One entry per slot (``worker-<index>``, ``etcd``), so the cause outlives the pod that showed it:
a replacement that is still being created keeps its predecessor's entry until it starts (or shows
a cause of its own), and the condition does not flicker while the operator replaces pods that all
fail the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .conditions import ConditionType, find_condition, set_condition
from .observed import PodPhase, PodView, StartFailure

_SAME_CAUSE = {"ImagePullBackOff": "ErrImagePull"}
"""The kubelet alternates between these two for one missing image: one cause, one Event."""


def track(
    before: Sequence[StartFailure],
    *,
    workers: Mapping[int, PodView],
    replicas: int,
    etcd: PodView | None,
    managed_etcd: bool,
) -> tuple[StartFailure, ...]:
    """The entries after this step, sorted by slot.

    ``workers`` holds the newest pod per replica index (missing: none exists), ``etcd`` the
    newest managed etcd pod. A slot's entry is the current pod's cause when it has one;
    it is dropped once that pod started (any phase but ``Pending``) or the slot is gone (scaled
    away, etcd not managed); otherwise (pod missing or still on its way) the old entry stays.
    """
    kept = {f.slot: f for f in before}
    pods: dict[str, PodView | None] = {f"worker-{i}": workers.get(i) for i in range(replicas)}
    if managed_etcd:
        pods["etcd"] = etcd
    after: dict[str, StartFailure] = {}
    for slot, pod in pods.items():
        if pod is not None and pod.start_failure is not None:
            after[slot] = pod.start_failure
        elif pod is not None and pod.phase is not PodPhase.PENDING:
            continue
        elif slot in kept:
            after[slot] = kept[slot]
    return tuple(after[slot] for slot in sorted(after))


def news(before: Sequence[StartFailure], after: Sequence[StartFailure]) -> list[StartFailure]:
    """Entries of ``after`` worth an Event: a pod not listed before, or a different cause."""
    seen = {(f.pod, _cause(f.reason)) for f in before}
    return [f for f in after if (f.pod, _cause(f.reason)) not in seen]


def condition(
    conditions: Sequence[Mapping[str, Any]], failures: Sequence[StartFailure], *, now: float
) -> list[dict[str, Any]]:
    """``conditions`` with ``PodsNotStarting``: True with the first entry's kubelet reason and
    its pod, container and message; False (reason ``Started``) once no entry is left. A job
    that never had one gets no such condition."""
    if not failures:
        before = find_condition(conditions, ConditionType.PODS_NOT_STARTING)
        if before is None or before.get("status") != "True":
            return [dict(c) for c in conditions]
        return set_condition(
            conditions,
            ConditionType.PODS_NOT_STARTING,
            False,
            "Started",
            "the kubelet started every pod it could not start before",
            now=now,
        )
    first = failures[0]
    more = f"; {len(failures) - 1} more pod(s) cannot start" if len(failures) > 1 else ""
    return set_condition(
        conditions,
        ConditionType.PODS_NOT_STARTING,
        True,
        first.reason,
        first.summary() + more,
        now=now,
    )


def _cause(reason: str) -> str:
    return _SAME_CAUSE.get(reason, reason)
