"""Terminal states: the job failed (budget spent, bad arguments, closed rendezvous, deadline)
or succeeded, the pods cleaned up as ``cleanPodPolicy`` says, and the job deleted after its TTL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.failure_policy import Action as PolicyAction
from elasticjob_agent.protocol.health import AgentState, HealthReport

from .. import restarts, root_cause
from ..conditions import ConditionType, set_condition
from ..observed import Observed, PodPhase, PodView
from ..spec import CleanPodPolicy, JobSpec
from ..status import JobStatus, Phase
from .actions import DeleteJob, DeletePod, Draft

SUCCESS_GRACE_SECONDS = 60.0
"""After a worker succeeded, how long other workers that still run may take to finish."""


ROOT_CAUSE_WAIT_SECONDS = 30.0
"""How long a spent budget's ``Failed`` verdict waits for the other agents to exit after the first
did (they all exit within a second or two of each other)."""


def peers_still_exiting(
    reason: str, status: JobStatus, workers: Mapping[int, PodView], now: float
) -> bool:
    """Whether a ``MaxRestartsExceeded`` verdict should wait: one agent exited on the spent budget
    and others still run, or none has exited yet though the counts say the budget is spent.
    Each leaves its root cause in its termination message, and the one whose rank raised may
    reach the API after a peer that only lost its connection; the verdict quotes the root cause,
    so it waits (at most ``ROOT_CAUSE_WAIT_SECONDS``) for all of them. So does a
    ``FailurePolicy`` verdict whose decision (the agent that made it leaves it in its
    termination message) is not known yet: a peer that found the rendezvous closed may exit
    first."""
    if reason == ExitCode.FAILURE_POLICY.reason:
        decided = status.failure_policy
        if decided is not None and decided.action is PolicyAction.FAIL_JOB:
            return False
    elif reason != ExitCode.MAX_RESTARTS_EXCEEDED.reason:
        return False
    exited = [p.finished_at for p in workers.values() if p.terminal and p.finished_at is not None]
    running = [p for p in workers.values() if p.phase is PodPhase.RUNNING and not p.deleting]
    if not running:
        return False
    if any(p.terminal for p in workers.values()):
        return bool(exited) and now - min(exited) < ROOT_CAUSE_WAIT_SECONDS
    # The counts (an agent's report) told of the spent budget before any agent exited: a verdict
    # now would delete the running pods (``cleanPodPolicy: Running``) and, with them, the
    # termination message each agent is about to write. Wait from the failure that spent it.
    last = root_cause.parse_stored(status.last_failure)
    return last is not None and now - last.time < ROOT_CAUSE_WAIT_SECONDS


def terminal_failure(
    spec: JobSpec, status: JobStatus, workers: Mapping[int, PodView], now: float
) -> tuple[str, str] | None:
    codes = {p.exit_code for p in workers.values() if p.phase is PodPhase.FAILED}
    failures = restarts.failures(status.restarts)
    spent = restarts.budget_spent(status.restarts, spec.max_restarts)
    if ExitCode.MAX_RESTARTS_EXCEEDED in codes or spent:
        last = root_cause.parse_stored(status.last_failure)
        return (
            ExitCode.MAX_RESTARTS_EXCEEDED.reason,
            f"job-wide restart budget spent: {failures} failure restarts, "
            f"maxRestarts {spec.max_restarts}"
            + ("" if last is None else f"; {last.quoted('last root cause')}")
            + "".join(f"; cannot start: {f.summary()}" for f in status.start_failures[:1]),
        )
    if ExitCode.FAILURE_POLICY in codes:
        decided = status.failure_policy
        if decided is not None and decided.action is PolicyAction.FAIL_JOB:
            return (ExitCode.FAILURE_POLICY.reason, decided.summary())
        return (
            ExitCode.FAILURE_POLICY.reason,
            "an agent applied a failure-policy rule with action FailJob (exit code 14); "
            "see the worker pods' logs",
        )
    if ExitCode.USAGE in codes:
        return (
            ExitCode.USAGE.reason,
            "elasticjob-agent rejected its arguments (exit code 2); see the worker pod's log",
        )
    if ExitCode.RENDEZVOUS_CLOSED in codes and not any(
        p.phase is PodPhase.SUCCEEDED for p in workers.values()
    ):
        return (ExitCode.RENDEZVOUS_CLOSED.reason, "the rendezvous was closed; no worker succeeded")
    deadline = spec.run_policy.active_deadline_seconds
    if (
        deadline is not None
        and status.start_time is not None
        and now - status.start_time > deadline
    ):
        return ("DeadlineExceeded", f"the job ran longer than activeDeadlineSeconds ({deadline})")
    return None


def succeeded(
    workers: Sequence[PodView] | Any, reports: Mapping[str, HealthReport], now: float
) -> bool:
    """A worker succeeded and no other worker still trains (or the grace after success ran out)."""
    pods = list(workers)
    done = [p for p in pods if p.phase is PodPhase.SUCCEEDED]
    if not done:
        return False
    first = min((p.finished_at for p in done if p.finished_at is not None), default=now)
    if now - first >= SUCCESS_GRACE_SECONDS:
        return True
    for pod in pods:
        if pod.terminal or pod.deleting:
            continue
        report = reports.get(pod.name)
        if report is None or report.state in (AgentState.RUNNING, AgentState.STOPPING):
            return False
    return True


def finish(
    draft: Draft,
    *,
    spec: JobSpec,
    observed: Observed,
    phase: Phase,
    reason: str,
    message: str,
    now: float,
    force_all: bool = False,
) -> None:
    conds: list[dict[str, Any]] = [dict(c) for c in draft.status.conditions]
    conds = set_condition(conds, ConditionType.RUNNING, False, reason, message, now=now)
    if phase is Phase.FAILED:
        conds = set_condition(conds, ConditionType.FAILED, True, reason, message, now=now)
    else:
        conds = set_condition(conds, ConditionType.SUCCEEDED, True, reason, message, now=now)
    stalled = next((c for c in conds if c.get("type") == ConditionType.STALLED.value), None)
    if stalled is not None and stalled.get("status") == "True" and not force_all:
        conds = set_condition(conds, ConditionType.STALLED, False, reason, message, now=now)
    draft.status = draft.status.evolve(
        phase=phase,
        reason=reason,
        message=message,
        conditions=tuple(conds),
        completion_time=now,
        ready_nodes=0,
        waiting_nodes=0,
        ready_spares=0,
    )
    draft.commit_first = True
    draft.event("Warning" if phase is Phase.FAILED else "Normal", reason, message)
    clean_pods(
        draft, observed, CleanPodPolicy.ALL if force_all else spec.run_policy.clean_pod_policy
    )


def finish_cleanup(draft: Draft, spec: JobSpec, observed: Observed, now: float) -> None:
    forced = draft.status.stall is not None and draft.status.phase is Phase.FAILED
    clean_pods(draft, observed, CleanPodPolicy.ALL if forced else spec.run_policy.clean_pod_policy)
    ttl = spec.run_policy.ttl_seconds_after_finished
    done = draft.status.completion_time
    if ttl is not None and done is not None and now - done >= ttl:
        draft.actions.append(DeleteJob())


def clean_pods(draft: Draft, observed: Observed, policy: CleanPodPolicy) -> None:
    if policy is CleanPodPolicy.NONE:
        return
    for pod in (*observed.workers, *observed.etcd_pods):
        if pod.deleting:
            if pod.node in observed.lost_nodes:
                draft.actions.append(DeletePod(pod.name, force=True))
            continue
        if policy is CleanPodPolicy.ALL or not pod.terminal:
            draft.actions.append(DeletePod(pod.name, force=pod.node in observed.lost_nodes))
