"""Reconciliation as a pure function: ``plan(job, spec, status, observed, now) -> Plan``.

The plan holds the next status and the actions that bring the cluster towards the spec. The
step (``reconciler.py``) writes the status *first* when it commits a counter (a pod attempt,
an etcd generation, a restart), then the executor (``executor.py``) runs the actions, each
idempotent; no write happens anywhere else. Killing the operator
between any two steps therefore neither duplicates an object nor loses or doubles a count.

One module per concern of a step, in the order ``plan`` runs them: ``reports`` (what the agents
counted and said) with ``causes`` (the job's root cause, ranked job-wide), ``checkpoints``
(what their checkpoints kept, and why the step went back), ``policy`` (the
failure-policy decisions they made), ``terminal`` (failed, succeeded, cleaned up), ``suspend``,
``workers`` and ``etcd`` (the objects; ``quarantine`` keeps the job's pods off its bad
nodes), ``stalls``, ``recoveries`` (what a failure cost) and
``summary``; ``access`` creates what guards the job (its NetworkPolicies and etcd certificates),
``actions`` holds what a step decides and ``rejection`` the condition for a request the API
server refused.
"""

from __future__ import annotations

from dataclasses import replace

from .. import names, progress
from ..conditions import ConditionType, set_condition, stamp_generation
from ..netpol import PolicySettings
from ..observed import Observed, current_workers, without_witnessed_nodes
from ..quarantine import QuarantineSettings
from ..spec import JobSpec
from ..stall import StallSettings, classify
from ..status import JobStatus, Phase
from .access import guard
from .actions import (
    Action,
    CreateEtcdTlsSecret,
    CreateObject,
    CreatePolicies,
    DeleteJob,
    DeletePod,
    Draft,
    Event,
    MarkJoined,
    MarkStoodBy,
    Plan,
    TaintNode,
    WriteSeed,
)
from .checkpoints import merge_checkpoints, note_rewind, sample_saved_step
from .etcd import manage_etcd
from .policy import note_policy
from .quarantine import keep_off, kept_off, move_off_bad_nodes, note_failures
from .recoveries import track_recovery
from .rejection import Rejection, note_rejection
from .reports import mark_joined, merge_reports, note_invalid_reports
from .stalls import no_progress, note_start_failures, track_progress, track_stall
from .stragglers import avoided_nodes, track_stragglers
from .summary import summarize
from .suspend import suspend
from .terminal import finish, finish_cleanup, peers_still_exiting, succeeded, terminal_failure
from .workers import ensure_services, manage_workers, policy_fails_a_pod

__all__ = [
    "Action",
    "CreateEtcdTlsSecret",
    "CreateObject",
    "CreatePolicies",
    "DeleteJob",
    "DeletePod",
    "Event",
    "MarkJoined",
    "MarkStoodBy",
    "Plan",
    "Rejection",
    "TaintNode",
    "WriteSeed",
    "note_rejection",
    "plan",
]


def plan(
    job: names.JobRef,
    *,
    spec: JobSpec,
    generation: int,
    status: JobStatus,
    observed: Observed,
    now: float,
    settings: StallSettings | None = None,
    services: frozenset[str] = frozenset(),
    policies: PolicySettings | None = None,
    quarantine: QuarantineSettings | None = None,
) -> Plan:
    """Decide the next status and actions of one job.

    ``observed`` holds only objects owned by this job incarnation (uid); ``services`` the names of
    its existing Services; ``policies`` whom the job's NetworkPolicies let in, when they are to
    be created in this step (``None``: not). Nothing here performs I/O or reads the clock. Every
    condition of the result carries ``observedGeneration`` = ``generation``. The actions that
    guard the job (``access.py``) come first; every worker pod the step creates keeps off the
    job's bad nodes (``quarantine.py``, settings ``quarantine``).
    """
    result = _plan(
        job,
        spec=spec,
        generation=generation,
        status=status,
        observed=without_witnessed_nodes(observed),
        now=now,
        settings=settings,
        services=services,
        quarantine=quarantine,
    )
    conditions = stamp_generation(result.status.conditions, generation)
    # The job's bad nodes and its replaced stragglers, one affinity term each.
    avoid = tuple(
        sorted(
            set(kept_off(result.status, observed.node_conditions))
            | avoided_nodes(result.status.stragglers)
        )
    )
    return replace(
        result,
        status=result.status.evolve(conditions=conditions),
        actions=(*guard(job, spec, status, observed, policies), *keep_off(result.actions, avoid)),
    )


def _plan(
    job: names.JobRef,
    *,
    spec: JobSpec,
    generation: int,
    status: JobStatus,
    observed: Observed,
    now: float,
    settings: StallSettings | None = None,
    services: frozenset[str] = frozenset(),
    quarantine: QuarantineSettings | None = None,
) -> Plan:
    settings = settings or StallSettings()
    draft = Draft(
        status.evolve(
            run_id=job.run_id,
            selector=names.selector_string(names.worker_selector(job.name)),
            observed_generation=generation,
            start_time=status.start_time if status.start_time is not None else now,
        )
    )
    workers = current_workers(observed.workers, status.attempts)

    if status.phase.finished:
        finish_cleanup(draft, spec, observed, now)
        return draft.freeze()

    merge_reports(draft, observed, now, settings.root_cause_window, worker_pods=spec.worker_pods)
    note_failures(
        draft, status, quarantine or QuarantineSettings(), settings.root_cause_window, now
    )
    merge_checkpoints(draft, observed)
    note_policy(draft, observed, workers, now)
    note_invalid_reports(draft, observed)
    mark_joined(draft, observed)

    failure = terminal_failure(spec, draft.status, workers, now) or policy_fails_a_pod(
        draft, spec, workers, observed.lost_nodes, now
    )
    if failure is not None and peers_still_exiting(failure[0], draft.status, workers, now):
        return draft.freeze()  # the next pod event (or the deadline) decides, with their word
    if failure is not None:
        finish(
            draft,
            spec=spec,
            observed=observed,
            phase=Phase.FAILED,
            reason=failure[0],
            message=failure[1],
            now=now,
        )
        return draft.freeze()
    if succeeded(workers.values(), observed.reports, now):
        finish(
            draft,
            spec=spec,
            observed=observed,
            phase=Phase.SUCCEEDED,
            reason="Succeeded",
            message="the worker group finished",
            now=now,
        )
        return draft.freeze()

    ensure_services(draft, job, spec, services)
    if spec.run_policy.suspend:
        suspend(draft, observed, now)
        return draft.freeze()
    if draft.status.phase is Phase.SUSPENDED:
        draft.status = draft.status.evolve(
            phase=Phase.PENDING,
            conditions=tuple(
                set_condition(
                    draft.status.conditions,
                    ConditionType.SUSPENDED,
                    False,
                    "Resumed",
                    "spec.runPolicy.suspend is false",
                    now=now,
                )
            ),
        )

    etcd_view = manage_etcd(draft, job, spec, observed, now, settings=settings)
    move_off_bad_nodes(draft, spec, observed, now)
    admission = manage_workers(draft, job, spec, observed, now)

    current = current_workers(observed.workers, draft.status.attempts)
    note_start_failures(draft, spec, observed, now, etcd_generation=status.etcd.generation)
    stall = classify(
        observed,
        etcd_view,
        current_workers=[p for i, p in current.items() if i < spec.worker_pods],
        min_nodes=spec.min_nodes,
        run_id=job.run_id,
        now=now,
        settings=settings,
    )
    seen = progress.group_progress(observed.reports.values(), job.run_id)
    if stall is None:
        stall = no_progress(draft, spec, status, seen, now)
    track_progress(draft, seen, stall, settings.progress_sample, progress.phase_of(job.uid))
    track_recovery(draft, status, observed, now)
    sample_saved_step(draft, status, observed)
    note_rewind(draft, status)
    track_stragglers(
        draft, job, spec, observed=observed, current=current, now=now, hold=admission.hold
    )
    if track_stall(draft, spec, stall, now):
        finish(
            draft,
            spec=spec,
            observed=observed,
            phase=Phase.FAILED,
            reason=draft.status.reason,
            message=draft.status.message,
            now=now,
            force_all=True,
        )
        return draft.freeze()
    summarize(draft, spec, observed, now, admission)
    return draft.freeze()
