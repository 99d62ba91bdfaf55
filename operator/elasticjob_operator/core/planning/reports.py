"""What the agents report, merged into the status: restart counts with their root cause,
refused (invalid) reports, and the pods whose agent joined a round.
"""

from __future__ import annotations

from elasticjob_agent.protocol.health import AgentState
from elasticjob_agent.protocol.restarts import RestartReason

from .. import restarts, spares
from ..observed import Observed, current_workers
from .actions import Draft, MarkJoined, MarkStoodBy
from .causes import note_cause, post_new_cause, suspect

# Restarts whose agent recorded a root cause (a failed worker, an expired timer, no progress).
_HAS_ROOT_CAUSE = frozenset(
    {RestartReason.FAILURE.value, RestartReason.TIMER.value, RestartReason.HANG.value}
)


def merge_reports(
    draft: Draft, observed: Observed, now: float, window: float, *, worker_pods: int | None = None
) -> None:
    """Restart counts and the root cause the agents report (``causes.note_cause``, ranked with
    what the operator sees within ``window``; ``worker_pods``: the spec's), with a
    ``Restarted`` Event per counted reason."""
    before = draft.status.restarts
    current = current_workers(observed.workers, draft.status.attempts)
    merged = restarts.merge_reports(
        before,
        observed.reports.values(),
        draft.status.run_id,
        [p.final_counts for p in current.values() if p.final_counts is not None],
    )
    records = [
        (pod, r.last_failure)
        for pod, r in sorted(observed.reports.items())
        if r.last_failure is not None and r.run_id == draft.status.run_id
    ]
    # An agent that exited (the budget spent) may never be polled with its last report, but the
    # kubelet keeps the record in its termination message.
    records += [(p.name, p.last_failure) for p in current.values() if p.last_failure is not None]
    failure, refused, news = note_cause(
        draft, observed, records, now, window, worker_pods=worker_pods
    )
    draft.refused_evidence.extend(refused)
    # A cause older than the window is an earlier failure's: not this restart's.
    recent = failure is not None and now - failure.time <= window
    quoted = False
    for reason in sorted(merged):
        added = merged[reason] - before.get(reason, 0)
        if added > 0:
            cause = ""
            if reason in _HAS_ROOT_CAUSE and failure is not None and recent:
                cause = f"; {failure.quoted(suspect=suspect(failure, observed))}"
                quoted = True
            elif reason == RestartReason.HANG.value:
                cause = "; no rank advanced for progressTimeoutSeconds"
            draft.event(
                "Warning" if reason in restarts.SPENDS_BUDGET else "Normal",
                "Restarted",
                f"worker group restarted ({reason}), {added} time(s); job-wide restarts: "
                f"{restarts.total(merged)}, failures {restarts.failures(merged)}{cause}",
            )
    if news and not quoted and failure is not None:
        post_new_cause(draft, failure)
    draft.status = draft.status.evolve(restarts=merged)


MAX_INVALID_REPORTS = 16
"""Pods listed in ``status.invalidReports`` at most (the status stays small whatever pods send)."""


MAX_REASON_CHARS = 200


def note_invalid_reports(draft: Draft, observed: Observed) -> None:
    """List pods whose answer was refused (untrusted input), with an Event when one turns bad.

    A pod that did not answer at all in this step keeps its entry (no news); one that answered
    with a valid report, or is gone, loses it.
    """
    alive = {p.name for p in observed.workers}
    before = draft.status.invalid_reports
    now = {
        pod: reason
        for pod, reason in before.items()
        if pod in alive and pod not in observed.reports and pod not in observed.invalid_reports
    }
    for pod, reason in observed.invalid_reports.items():
        now[pod] = reason[:MAX_REASON_CHARS]
    kept = dict(sorted(now.items())[:MAX_INVALID_REPORTS])
    for pod, reason in kept.items():
        if before.get(pod) != reason:
            draft.event("Warning", "InvalidHealthReport", f"pod {pod}: {reason}")
    draft.status = draft.status.evolve(invalid_reports=kept)


def mark_joined(draft: Draft, observed: Observed) -> None:
    pods = {p.name: p for p in observed.workers}
    for name, report in observed.reports.items():
        pod = pods.get(name)
        if (
            pod is not None
            and not pod.joined
            and report.run_id == draft.status.run_id
            and report.state is AgentState.RUNNING
            and report.round is not None
        ):
            draft.actions.append(MarkJoined(name, report.round))
        elif pod is not None and not pod.stood_by and spares.stood_by(report, draft.status.run_id):
            draft.actions.append(MarkStoodBy(name))
