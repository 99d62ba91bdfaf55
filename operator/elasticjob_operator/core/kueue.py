"""Queueing through Kueue's plain-pod integration (pure: no Kubernetes client, no clock).

A job opts in with ``spec.queueName`` or the label ``kueue.x-k8s.io/queue-name`` on the job (as
Kueue users write it). Its worker pods then carry Kueue's labels, and Kueue's pod webhook gates
them (scheduling gate ``kueue.x-k8s.io/admission``) until their Workload is admitted:

- the **core**: worker indexes ``0 .. minNodes-1``, one pod group (label
  ``kueue.x-k8s.io/pod-group-name``, annotation ``kueue.x-k8s.io/pod-group-total-count =
  minNodes``): Kueue admits all of them or none. A failed core pod is replaced inside the group
  while another core pod is active; once none is (suspend, deletion, preemption, a lone core pod
  failing) the group is finished (``kueue.x-k8s.io/retriable-in-group: "false"``), its quota
  released, and the next core pods form a new Workload of the same name that queues again.
- the **extras**: each index from ``minNodes`` up (hot spares included: they hold their quota
  while they stand by), a single-pod Workload of its own, with the
  WorkloadPriorityClass named by the job's annotation :data:`EXTRAS_PRIORITY_ANNOTATION` (when
  set), so that preemption takes extras first and the job shrinks instead of dying.

Kueue's names live in ``kueue_names``, the job's queueing settings (``KueueSpec``) in ``spec``.

The operator creates extras only while the core is admitted and deletes them when the core lost
its admission (preempted and queued again): a queued job never holds part of its GPUs. The
managed etcd pod carries no queue label: Kueue neither gates it nor counts it against quota.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .kueue_names import (
    GROUP_LABEL,
    GROUP_TOTAL_ANNOTATION,
    LABEL_PART,
    PART_CORE,
    PART_EXTRA,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    RETRIABLE_ANNOTATION,
)
from .names import JobRef
from .observed import PodView
from .spec import JobSpec
from .status import JobStatus

_WEBHOOK_REFUSAL = re.compile(r'failed calling webhook \\?"(?P<hook>[^"\\]+)', re.IGNORECASE)


# -- worker pods ---------------------------------------------------------------------------------


def group_name(job: JobRef) -> str:
    """The core's pod group (one per job incarnation): ``<job>-core-<uid prefix>``, a valid
    label value (at most 63 characters; long job names are cut and hashed)."""
    name = f"{job.name}-core-{job.uid[:8]}"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(job.name.encode()).hexdigest()[:8]
    return f"{job.name[:37].rstrip('-.')}-{digest}-core-{job.uid[:8]}"


def is_core(spec: JobSpec, index: int) -> bool:
    return index < spec.min_nodes


def worker_metadata(
    job: JobRef, spec: JobSpec, index: int
) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations Kueue reads on worker pod ``index`` (empty when not queued)."""
    queue = spec.kueue
    if queue is None:
        return {}, {}
    labels = {QUEUE_LABEL: queue.queue_name}
    annotations: dict[str, str] = {}
    if is_core(spec, index):
        labels[LABEL_PART] = PART_CORE
        labels[GROUP_LABEL] = group_name(job)
        annotations[GROUP_TOTAL_ANNOTATION] = str(spec.min_nodes)
        annotations[RETRIABLE_ANNOTATION] = "false"
        priority = queue.priority_class
    else:
        labels[LABEL_PART] = PART_EXTRA
        priority = queue.extras_priority_class or queue.priority_class
    if priority:
        labels[PRIORITY_LABEL] = priority
    return labels, annotations


# -- planning ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Admission:
    """What Kueue's admission means for one planning step of a queued job."""

    queued: bool = False
    """The core waits for admission: its live pods are all gated."""
    hold: frozenset[int] = frozenset()
    """Worker indexes not to create or replace in this step."""
    release: tuple[PodView, ...] = ()
    """Extras to delete (the core is queued); their indexes take the next attempt."""


NOT_QUEUED = Admission()


def decide(
    spec: JobSpec,
    current: Mapping[int, PodView],
    workers: Iterable[PodView],
    lost_nodes: frozenset[str],
) -> Admission:
    """Which worker pods may be created now. ``current``: the newest pod per index;
    ``workers``: every worker pod of the job (older attempts included).

    - The core is *admitted* when one of its live pods is not gated (a replacement inside an
      admitted group is gated for a moment; its siblings are not).
    - Extras are not created while the core is not admitted, and are released once the core
      is *queued* (live core pods exist and all are gated), not during the moment a core pod is
      being replaced.
    - While a core pod (of any attempt) still terminates on a live node, its index gets no new
      pod: Kueue counts it as an active member of the group and would delete a replacement as
      an excess pod. The replacement's attempt is committed at once; only its creation waits.
    """
    if spec.kueue is None:
        return NOT_QUEUED
    core = [p for i, p in current.items() if is_core(spec, i)]
    live_core = [p for p in core if not p.terminal and not p.deleting]
    admitted = any(not p.gated for p in live_core)
    queued = bool(live_core) and not admitted
    hold = {
        p.index
        for p in workers
        if is_core(spec, p.index)
        and p.deleting
        and not p.terminal
        and p.node is not None
        and p.node not in lost_nodes
    }
    release: list[PodView] = []
    if not admitted:
        hold.update(range(spec.min_nodes, spec.worker_pods))
    if queued:
        release = [p for i, p in current.items() if not is_core(spec, i) and not p.deleting]
    return Admission(queued, frozenset(hold), tuple(sorted(release, key=lambda p: p.index)))


def queued_message(spec: JobSpec, kueue_reason: str | None) -> str:
    """The ``Queued`` condition's message: the LocalQueue and Kueue's own reason, when known."""
    queue = spec.kueue.queue_name if spec.kueue is not None else "?"
    text = f"waiting for Kueue to admit the core ({spec.min_nodes} pods) in LocalQueue {queue}"
    return f"{text}: {kueue_reason}" if kueue_reason else text


def workload_reason(workload: Mapping[str, Any] | None) -> str | None:
    """Kueue's reason a Workload is not admitted (its ``QuotaReserved`` or ``Admitted``
    condition's message), or ``None``."""
    if not workload:
        return None
    conditions = (workload.get("status") or {}).get("conditions") or []
    for kind in ("QuotaReserved", "Admitted", "Evicted"):
        for cond in conditions:
            if cond.get("type") == kind and cond.get("status") == "False" and cond.get("message"):
                return str(cond["message"])[:400]
    return None


def webhook_refusal(error: str) -> str | None:
    """The webhook's name when an API error says an admission webhook could not be called
    (Kueue is down or unreachable), else ``None``."""
    match = _WEBHOOK_REFUSAL.search(error)
    return match["hook"] if match else None


REFUSED_REASON = "PodCreationRefused"
"""``status.reason`` while an admission webhook (Kueue's) cannot be called."""


def refusal_message(manifest: Mapping[str, Any], error: str) -> str | None:
    """A user-facing message when ``error`` (from creating ``manifest``) says an admission
    webhook could not be called, else ``None``."""
    hook = webhook_refusal(error)
    if hook is None:
        return None
    kind = manifest.get("kind", "object")
    name = (manifest.get("metadata") or {}).get("name", "?")
    return (
        f"creating {kind} {name} was refused: the API server could not call admission webhook "
        f"{hook} (is Kueue running?); the operator retries"
    )


def report_refusal(
    status: JobStatus, previous: JobStatus, message: str
) -> tuple[JobStatus, tuple[str, str, str] | None]:
    """``status`` with the refusal as its reason and message, and the Warning Event to post
    (only when the previous status did not already report a refusal)."""
    event = None if previous.reason == REFUSED_REASON else ("Warning", REFUSED_REASON, message)
    return status.evolve(reason=REFUSED_REASON, message=message), event
