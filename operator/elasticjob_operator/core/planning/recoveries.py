"""What the latest recovery cost and what training kept, in the status (``recovery.py``):
``status.lastRecovery`` once the first step of a round after a restart is reported, corrected
when a better root cause of it arrives, and ``status.goodput`` with each progress sample.
"""

from __future__ import annotations

from .. import recovery
from ..evidence import Cause
from ..observed import Observed
from ..status import JobStatus
from .actions import Draft


def track_recovery(draft: Draft, before: JobStatus, observed: Observed, now: float) -> None:
    """Record a recovery the newest running round shows, and account goodput; ``before`` is
    the status the step started from (its progress sample, its root cause). Runs after
    ``track_progress``; writes nothing that did not change."""
    status = draft.status
    stored = status.last_recovery
    start = recovery.round_start(observed.reports.values(), status.run_id, now)
    rate = None if before.progress is None else before.progress.steps_per_second
    step_seconds = 1.0 / rate if rate else None
    cause = Cause.from_json(status.last_failure)
    last, new = stored, None
    if start is not None:
        candidate = recovery.recovery(start, cause, stored, step_seconds)
        if not candidate.same_as(stored):
            last, new = candidate, start
        elif status.last_failure != before.last_failure:
            # Better evidence of the failure arrived: its kind and time correct the record.
            corrected = recovery.recovery(start, cause, None, step_seconds)
            last = stored if stored is None else _corrected(stored, corrected)
    goodput = recovery.account(
        status.goodput,
        before=before.progress,
        after=status.progress,
        last=last,
        new=new,
        started=status.start_time if status.start_time is not None else now,
        now=now,
    )
    draft.status = status.evolve(last_recovery=last, goodput=goodput)


def _corrected(stored: recovery.Recovery, better: recovery.Recovery) -> recovery.Recovery:
    """``stored`` with the cause's part (``reason``, ``faultAt``, ``detectedAt``) of ``better``:
    the rest was measured once, when the round was first seen."""
    if better.reason == recovery.MEMBERSHIP:
        return stored
    fault = min(better.fault_at, stored.detected_at)
    return recovery.Recovery(
        reason=better.reason,
        fault_at=fault,
        detected_at=stored.detected_at,
        rendezvous_at=stored.rendezvous_at,
        restored_at=stored.restored_at,
        restored_step=stored.restored_step,
        first_step_at=stored.first_step_at,
        steps_lost=stored.steps_lost,
        round=stored.round,
    )
