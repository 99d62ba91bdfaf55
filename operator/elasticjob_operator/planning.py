"""Reconciliation as a pure function: ``plan(job, spec, status, observed, now) -> Plan``.

The plan holds the next status and the actions that bring the cluster towards the spec. The
executor (``reconciler.py``) writes the status *first* when it commits a counter (a pod attempt,
an etcd generation, a restart), then runs the actions, each idempotent. Killing the operator
between any two steps therefore neither duplicates an object nor loses or doubles a count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.health import AgentState, HealthReport
from elasticjob_agent.protocol.keys import JobKeys
from elasticjob_agent.protocol.restarts import RestartReason

from . import kueue, manifests, names, progress, restarts, root_cause, seeding, start_failures
from .conditions import ConditionType, find_condition, set_condition, stamp_generation
from .observed import Observed, PodPhase, PodView, without_witnessed_nodes
from .spec import CleanPodPolicy, EtcdMode, JobSpec
from .stall import EtcdView, Stall, StallReason, StallSettings, classify
from .status import EtcdState, JobStatus, Phase, StallState

SUCCESS_GRACE_SECONDS = 60.0
"""After a worker succeeded, how long other workers that still run may take to finish."""


@dataclass(frozen=True)
class CreateObject:
    manifest: Mapping[str, Any]


@dataclass(frozen=True)
class DeletePod:
    name: str
    force: bool = False
    """Grace period 0: the pod's node is lost, so no kubelet will ever confirm a graceful stop."""


@dataclass(frozen=True)
class MarkJoined:
    pod: str
    round: int


@dataclass(frozen=True)
class WriteSeed:
    """Write the restart seed into a recreated etcd, then record ``seededGeneration``."""

    endpoint: str
    keys: seeding.SeedKeys
    seed: Mapping[str, int]
    generation: int


@dataclass(frozen=True)
class DeleteJob:
    """``ttlSecondsAfterFinished`` elapsed."""


@dataclass(frozen=True)
class Event:
    type: str
    """``Normal`` or ``Warning``."""
    reason: str
    message: str


Action = CreateObject | DeletePod | MarkJoined | WriteSeed | DeleteJob


@dataclass(frozen=True)
class Plan:
    status: JobStatus
    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()
    commit_first: bool = False
    """Write ``status`` before running ``actions`` (it names objects they create)."""
    new_stall: str | None = None
    """Reason of a stall that started in this step (for the stalls counter metric)."""


@dataclass
class _Draft:
    """Mutable scratchpad of one planning step; only ``plan`` sees it."""

    status: JobStatus
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    commit_first: bool = False
    new_stall: str | None = None

    def event(self, type_: str, reason: str, message: str) -> None:
        self.events.append(Event(type_, reason, message))

    def freeze(self) -> Plan:
        return Plan(
            self.status,
            tuple(self.actions),
            tuple(self.events),
            self.commit_first,
            self.new_stall,
        )


def plan(
    job: manifests.JobRef,
    *,
    spec: JobSpec,
    generation: int,
    status: JobStatus,
    observed: Observed,
    now: float,
    settings: StallSettings | None = None,
    services: frozenset[str] = frozenset(),
) -> Plan:
    """Decide the next status and actions of one job.

    ``observed`` holds only objects owned by this job incarnation (uid); ``services`` the names of
    its existing Services. Nothing here performs I/O or reads the clock. Every condition of the
    result carries ``observedGeneration`` = ``generation``.
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
    )
    conditions = stamp_generation(result.status.conditions, generation)
    return replace(result, status=result.status.evolve(conditions=conditions))


@dataclass(frozen=True)
class Rejection:
    """The API server refused one of the operator's requests."""

    what: str
    """The request, e.g. ``create Pod ns/name``."""
    http_status: int
    message: str
    """The server's own explanation."""

    @property
    def reason(self) -> str:
        return {400: "BadRequest", 403: "Forbidden", 422: "Invalid"}.get(
            self.http_status, f"HTTP{self.http_status}"
        )


def note_rejection(
    status: JobStatus, rejection: Rejection | None, *, now: float, generation: int
) -> tuple[JobStatus, Event | None]:
    """Record (or clear) the ``RequestRejected`` condition; the Event to post when it turns
    True or its message changes (not on every retry)."""
    before = find_condition(status.conditions, ConditionType.REQUEST_REJECTED)
    if rejection is None:
        if before is None or before.get("status") != "True":
            return status, None
        conds = set_condition(
            status.conditions,
            ConditionType.REQUEST_REJECTED,
            False,
            "Accepted",
            "the API server accepts the operator's requests again",
            now=now,
            generation=generation,
        )
        return status.evolve(conditions=tuple(conds)), None
    message = f"{rejection.what}: {rejection.message}"[:1024]
    conds = set_condition(
        status.conditions,
        ConditionType.REQUEST_REJECTED,
        True,
        rejection.reason,
        message,
        now=now,
        generation=generation,
    )
    fresh = before is None or before.get("status") != "True" or before.get("message") != message
    event = Event("Warning", rejection.reason, message) if fresh else None
    return status.evolve(conditions=tuple(conds)), event


def _plan(
    job: manifests.JobRef,
    *,
    spec: JobSpec,
    generation: int,
    status: JobStatus,
    observed: Observed,
    now: float,
    settings: StallSettings | None = None,
    services: frozenset[str] = frozenset(),
) -> Plan:
    settings = settings or StallSettings()
    draft = _Draft(
        status.evolve(
            run_id=job.run_id,
            selector=names.selector_string(names.worker_selector(job.name)),
            observed_generation=generation,
            start_time=status.start_time if status.start_time is not None else now,
        )
    )
    workers = _current_workers(observed.workers, status.attempts)

    if status.phase.finished:
        _finish_cleanup(draft, spec, observed, now)
        return draft.freeze()

    _merge_reports(draft, observed)
    _note_invalid_reports(draft, observed)
    _mark_joined(draft, observed)

    failure = _terminal_failure(spec, draft.status, workers, now)
    if failure is not None and _peers_still_exiting(failure[0], workers, now):
        return draft.freeze()  # the next pod event (or the deadline) decides, with their word
    if failure is not None:
        _finish(
            draft,
            spec=spec,
            observed=observed,
            phase=Phase.FAILED,
            reason=failure[0],
            message=failure[1],
            now=now,
        )
        return draft.freeze()
    if _succeeded(workers.values(), observed.reports, now):
        _finish(
            draft,
            spec=spec,
            observed=observed,
            phase=Phase.SUCCEEDED,
            reason="Succeeded",
            message="the worker group finished",
            now=now,
        )
        return draft.freeze()

    _ensure_services(draft, job, spec, services)
    if spec.run_policy.suspend:
        _suspend(draft, observed, now)
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

    etcd_view = _manage_etcd(draft, job, spec, observed, now, settings=settings)
    admission = _manage_workers(draft, job, spec, observed, now)

    current = _current_workers(observed.workers, draft.status.attempts)
    _note_start_failures(draft, spec, observed, now)
    stall = classify(
        observed,
        etcd_view,
        current_workers=[p for i, p in current.items() if i < spec.replicas],
        min_nodes=spec.min_nodes,
        run_id=job.run_id,
        now=now,
        settings=settings,
    )
    seen = progress.group_progress(observed.reports.values(), job.run_id)
    if stall is None:
        stall = _no_progress(draft, spec, status, seen, now)
    _track_progress(draft, seen, stall)
    if _track_stall(draft, spec, stall, now):
        _finish(
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
    _summarize(draft, spec, observed, now, admission)
    return draft.freeze()


# -- restarts ------------------------------------------------------------------------------------


# Restarts whose agent recorded a root cause (a failed worker, an expired timer, no progress).
_HAS_ROOT_CAUSE = frozenset(
    {RestartReason.FAILURE.value, RestartReason.TIMER.value, RestartReason.HANG.value}
)


def _merge_reports(draft: _Draft, observed: Observed) -> None:
    before = draft.status.restarts
    current = _current_workers(observed.workers, draft.status.attempts)
    merged = restarts.merge_reports(
        before,
        observed.reports.values(),
        draft.status.run_id,
        [p.final_counts for p in current.values() if p.final_counts is not None],
    )
    failure = root_cause.newest_failure(
        observed.reports,
        draft.status.run_id,
        draft.status.last_failure,
        {p.name: p.last_failure for p in current.values() if p.last_failure is not None},
    )
    if failure is not None:
        draft.status = draft.status.evolve(last_failure=failure.to_json())
    else:
        failure = root_cause.parse_stored(draft.status.last_failure)
    for reason in sorted(merged):
        added = merged[reason] - before.get(reason, 0)
        if added > 0:
            cause = ""
            if reason in _HAS_ROOT_CAUSE and failure is not None:
                cause = f"; root cause: {failure.summary()}"
            elif reason == RestartReason.HANG.value:
                cause = "; no rank advanced for progressTimeoutSeconds"
            draft.event(
                "Warning" if reason in restarts.SPENDS_BUDGET else "Normal",
                "Restarted",
                f"worker group restarted ({reason}), {added} time(s); job-wide restarts: "
                f"{restarts.total(merged)}, failures {restarts.failures(merged)}{cause}",
            )
    draft.status = draft.status.evolve(restarts=merged)


MAX_INVALID_REPORTS = 16
"""Pods listed in ``status.invalidReports`` at most (the status stays small whatever pods send)."""
MAX_REASON_CHARS = 200


def _note_invalid_reports(draft: _Draft, observed: Observed) -> None:
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


def _mark_joined(draft: _Draft, observed: Observed) -> None:
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


def _replacement_reason(pod: PodView, lost_nodes: frozenset[str]) -> str | None:
    """The operator's restart reason for replacing ``pod``, or ``None`` when it does not count."""
    if pod.joined:
        return None  # its agent was in a round: the agents counted the group restart
    if pod.exit_code == ExitCode.ETCD_UNREACHABLE:
        return None  # etcd's fault: counted once as etcd-recovered when etcd is recreated
    if pod.phase is PodPhase.FAILED and not pod.evicted and pod.node not in lost_nodes:
        if pod.exit_code == ExitCode.TERMINATED:
            return restarts.POD_LOST
        return restarts.POD_FAILURE
    return restarts.POD_LOST


# -- terminal states -----------------------------------------------------------------------------


ROOT_CAUSE_WAIT_SECONDS = 30.0
"""How long a spent budget's ``Failed`` verdict waits for the other agents to exit after the first
did (they all exit within a second or two of each other)."""


def _peers_still_exiting(reason: str, workers: Mapping[int, PodView], now: float) -> bool:
    """Whether a ``MaxRestartsExceeded`` verdict should wait: one agent exited on the spent budget
    and others still run. Each leaves its root cause in its termination message, and the one
    whose rank raised may reach the API after a peer that only lost its connection; the verdict
    quotes the root cause, so it waits (at most ``ROOT_CAUSE_WAIT_SECONDS``) for all of them."""
    if reason != ExitCode.MAX_RESTARTS_EXCEEDED.reason:
        return False
    exited = [p.finished_at for p in workers.values() if p.terminal and p.finished_at is not None]
    running = [p for p in workers.values() if p.phase is PodPhase.RUNNING and not p.deleting]
    return bool(exited and running) and now - min(exited) < ROOT_CAUSE_WAIT_SECONDS


def _terminal_failure(
    spec: JobSpec, status: JobStatus, workers: Mapping[int, PodView], now: float
) -> tuple[str, str] | None:
    codes = {p.exit_code for p in workers.values() if p.phase is PodPhase.FAILED}
    failures = restarts.failures(status.restarts)
    if ExitCode.MAX_RESTARTS_EXCEEDED in codes or failures > spec.max_restarts:
        last = root_cause.parse_stored(status.last_failure)
        return (
            ExitCode.MAX_RESTARTS_EXCEEDED.reason,
            f"job-wide restart budget spent: {failures} failure restarts, "
            f"maxRestarts {spec.max_restarts}"
            + ("" if last is None else f"; last root cause: {last.summary()}")
            + "".join(f"; cannot start: {f.summary()}" for f in status.start_failures[:1]),
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


def _succeeded(
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


def _finish(
    draft: _Draft,
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
    )
    draft.commit_first = True
    draft.event("Warning" if phase is Phase.FAILED else "Normal", reason, message)
    _clean_pods(
        draft, observed, CleanPodPolicy.ALL if force_all else spec.run_policy.clean_pod_policy
    )


def _finish_cleanup(draft: _Draft, spec: JobSpec, observed: Observed, now: float) -> None:
    forced = draft.status.stall is not None and draft.status.phase is Phase.FAILED
    _clean_pods(draft, observed, CleanPodPolicy.ALL if forced else spec.run_policy.clean_pod_policy)
    ttl = spec.run_policy.ttl_seconds_after_finished
    done = draft.status.completion_time
    if ttl is not None and done is not None and now - done >= ttl:
        draft.actions.append(DeleteJob())


def _clean_pods(draft: _Draft, observed: Observed, policy: CleanPodPolicy) -> None:
    if policy is CleanPodPolicy.NONE:
        return
    for pod in (*observed.workers, *observed.etcd_pods):
        if pod.deleting:
            if pod.node in observed.lost_nodes:
                draft.actions.append(DeletePod(pod.name, force=True))
            continue
        if policy is CleanPodPolicy.ALL or not pod.terminal:
            draft.actions.append(DeletePod(pod.name, force=pod.node in observed.lost_nodes))


# -- suspend -------------------------------------------------------------------------------------


def _suspend(draft: _Draft, observed: Observed, now: float) -> None:
    attempts = dict(draft.status.attempts)
    deletes: list[Action] = []
    for pod in observed.workers:
        if pod.attempt >= attempts.get(pod.index, 0):
            attempts[pod.index] = pod.attempt + 1  # resume with fresh names
        if not pod.deleting:
            deletes.append(DeletePod(pod.name, force=pod.node in observed.lost_nodes))
    if attempts != draft.status.attempts:
        draft.commit_first = True
    if draft.status.phase is not Phase.SUSPENDED:
        draft.event("Normal", "Suspended", "spec.runPolicy.suspend is true: worker pods deleted")
    draft.status = draft.status.evolve(
        phase=Phase.SUSPENDED,
        reason="Suspended",
        message="spec.runPolicy.suspend is true",
        attempts=attempts,
        ready_nodes=0,
        waiting_nodes=0,
        replicas=0,
        stall=None,
        conditions=tuple(
            set_condition(
                set_condition(
                    draft.status.conditions,
                    ConditionType.SUSPENDED,
                    True,
                    "Suspended",
                    "spec.runPolicy.suspend is true",
                    now=now,
                ),
                ConditionType.RUNNING,
                False,
                "Suspended",
                "spec.runPolicy.suspend is true",
                now=now,
            )
        ),
    )
    draft.actions.extend(deletes)


# -- objects -------------------------------------------------------------------------------------


def _ensure_services(
    draft: _Draft, job: manifests.JobRef, spec: JobSpec, services: frozenset[str]
) -> None:
    if names.workers_service_name(job.name) not in services:
        draft.actions.append(CreateObject(manifests.build_workers_service(job)))
    if spec.etcd.mode is EtcdMode.MANAGED and names.etcd_service_name(job.name) not in services:
        draft.actions.append(CreateObject(manifests.build_etcd_service(job)))


def _manage_etcd(
    draft: _Draft,
    job: manifests.JobRef,
    spec: JobSpec,
    observed: Observed,
    now: float,
    *,
    settings: StallSettings,
) -> EtcdView:
    state = draft.status.etcd
    # Track the probe: when did the current outage start (kept across operator restarts).
    if observed.etcd_reachable is True:
        state = EtcdState(state.generation, state.generation, state.seeded_generation, None)
    elif _vouched(observed, draft.status.run_id, state):
        # Someone else reaches etcd: the operator's failing probe is no outage. The clock
        # starts again with the first failure nobody contradicts, so one step in which every
        # witness fails together (a loaded machine) cannot add up to an old outage at once.
        state = EtcdState(state.generation, state.ready_generation, state.seeded_generation, None)
    elif observed.etcd_reachable is False and state.unreachable_since is None:
        state = EtcdState(state.generation, state.ready_generation, state.seeded_generation, now)
    if spec.etcd.mode is EtcdMode.EXTERNAL:
        draft.status = draft.status.evolve(etcd=state)
        return EtcdView(
            endpoint=",".join(spec.etcd.endpoints),
            pod=None,
            managed=False,
            ever_ready=state.ready_generation >= 0,
            unreachable_since=state.unreachable_since,
        )

    by_generation = {p.index: p for p in observed.etcd_pods}
    top = max(by_generation, default=-1)
    if top > state.generation:  # a status write was lost: adopt what exists
        state = EtcdState(
            top, state.ready_generation, state.seeded_generation, state.unreachable_since
        )
    current = by_generation.get(state.generation)
    if (
        current is not None
        and state.ready_generation != state.generation
        and _served(current, observed, draft.status.run_id, state.generation)
    ):
        state = EtcdState(
            state.generation, state.generation, state.seeded_generation, state.unreachable_since
        )
    ever_ready = state.ready_generation == state.generation
    lost: str | None = None
    """Why the current generation is lost, for the Event (the evidence of a remediation)."""
    if current is None:
        lost = "its pod is gone" if ever_ready else None
    elif current.terminal:
        lost = f"its pod ended ({current.phase.value}, exit code {current.exit_code})"
    elif current.deleting:
        lost = "its pod is being deleted"
    elif current.node in observed.lost_nodes:
        lost = f"its node {current.node} is lost and nobody reaches it"
    elif ever_ready and _unreachable(
        current, state, observed, draft.status.run_id, now=now, settings=settings
    ):
        lost = (
            "unreachable: no probe of the operator, the kubelet or any agent reached it for "
            f"{settings.etcd_unavailable_after:g} s"
        )
    endpoint = manifests.rdzv_endpoints(job, spec)[0]
    if lost:
        old = state.generation
        # The new generation's outage clock starts with its own first failed probe.
        state = EtcdState(old + 1, state.ready_generation, state.seeded_generation, None)
        counts = restarts.bump(draft.status.restarts, restarts.ETCD_RECOVERED)
        draft.status = draft.status.evolve(restarts=counts)
        draft.commit_first = True
        draft.event(
            "Warning",
            "EtcdRecreated",
            f"managed etcd generation {old} lost ({lost}); creating generation {old + 1} "
            f"(restart reason {restarts.ETCD_RECOVERED}, "
            f"job-wide restarts {restarts.total(counts)})",
        )
        draft.actions.append(CreateObject(manifests.build_etcd_pod(job, spec, state.generation)))
        current = None
        ever_ready = False
    elif current is None:
        draft.actions.append(CreateObject(manifests.build_etcd_pod(job, spec, state.generation)))
    for gen, pod in by_generation.items():
        if gen < state.generation and not pod.deleting:
            draft.actions.append(DeletePod(pod.name, force=True))  # its data is abandoned anyway
    if (
        current is not None
        and (observed.etcd_reachable is True or current.ready)
        and state.generation > state.seeded_generation
        and current.ip
    ):
        keys = JobKeys(spec.etcd.key_prefix, job.run_id)
        draft.actions.append(
            WriteSeed(
                f"{current.ip}:{names.ETCD_CLIENT_PORT}",
                seeding.SeedKeys.of(keys),
                restarts.seed_counts(draft.status.restarts),
                state.generation,
            )
        )
    draft.status = draft.status.evolve(etcd=state)
    return EtcdView(
        endpoint=endpoint,
        pod=current,
        managed=True,
        ever_ready=ever_ready,
        unreachable_since=state.unreachable_since,
        recreated_generation=state.generation
        if state.generation > 0 and state.ready_generation != state.generation
        else None,
    )


def _vouched(observed: Observed, run_id: str, state: EtcdState) -> bool:
    """Whether an agent of this run or the kubelet (the current managed etcd pod is Ready)
    reaches the job's etcd in this step."""
    if any(r.run_id == run_id and r.etcd.reachable for r in observed.reports.values()):
        return True
    return any(p.ready and p.index == state.generation for p in observed.etcd_pods)


def _served(etcd: PodView, observed: Observed, run_id: str, generation: int) -> bool:
    """Whether managed etcd ``generation`` (pod ``etcd``) is known to have been up.

    The operator's own probe is one witness (recorded by the caller); this adds two more, so
    that remediation never hangs on the operator's probe alone (it can fail for reasons of
    its own: load, a network path of its own). The kubelet's readiness probe vouches for any
    generation. A worker group running in a round vouches only for generation 0: no other
    etcd ever served the job, whereas after a recreation an agent may still report a round
    formed on the lost generation.
    """
    if etcd.ready:
        return True
    return generation == 0 and any(
        r.run_id == run_id and r.state is AgentState.RUNNING and r.round is not None
        for r in observed.reports.values()
    )


def _unreachable(
    etcd: PodView,
    state: EtcdState,
    observed: Observed,
    run_id: str,
    *,
    now: float,
    settings: StallSettings,
) -> bool:
    """Whether a managed etcd that was up is now lost to the job through the network.

    Lost when nobody reaches it: neither the operator's probe in this step, nor the kubelet's
    readiness probe, nor any agent; and either the operator's probe has failed for
    ``etcd_unavailable_after`` or an agent has been cut off for as long. An etcd that someone
    else still reaches is left alone, whatever the operator's probe says: replacing it would
    cost the job a restart and cure nothing.
    """
    if observed.etcd_reachable is True or etcd.ready:
        return False
    reports = [r for r in observed.reports.values() if r.run_id == run_id]
    if any(r.etcd.reachable for r in reports):
        return False
    after = settings.etcd_unavailable_after
    probe_out = state.unreachable_since is not None and now - state.unreachable_since >= after
    agents_out = any(
        r.etcd.unreachable_since is not None and now - r.etcd.unreachable_since >= after
        for r in reports
    )
    return probe_out or agents_out


def _current_workers(pods: Sequence[PodView], attempts: Mapping[int, int]) -> dict[int, PodView]:
    """The newest pod per replica index whose attempt is at least the recorded one."""
    current: dict[int, PodView] = {}
    for pod in pods:
        if pod.attempt < attempts.get(pod.index, 0):
            continue
        best = current.get(pod.index)
        if best is None or pod.attempt > best.attempt:
            current[pod.index] = pod
    return current


def _needs_replacement(pod: PodView, lost_nodes: frozenset[str]) -> bool:
    if pod.phase is PodPhase.SUCCEEDED:
        return False
    return (
        pod.phase is PodPhase.FAILED
        or pod.deleting
        or (pod.node is not None and pod.node in lost_nodes)
    )


def _manage_workers(
    draft: _Draft, job: manifests.JobRef, spec: JobSpec, observed: Observed, now: float
) -> kueue.Admission:
    attempts = dict(draft.status.attempts)
    counts = dict(draft.status.restarts)
    lost_nodes = observed.lost_nodes
    for pod in observed.workers:  # adopt pods newer than the status says (a lost status write)
        if pod.attempt > attempts.get(pod.index, 0):
            attempts[pod.index] = pod.attempt
    current = _current_workers(observed.workers, attempts)
    admission = kueue.decide(spec, current, observed.workers, lost_nodes)
    for pod in admission.release:  # the core lost its admission: extras go, new names later
        attempts[pod.index] = pod.attempt + 1
        draft.commit_first = True
        draft.event("Normal", "ExtraReleased", f"{pod.name} deleted: the core is queued again")
    current = _current_workers(observed.workers, attempts)
    for index in range(spec.replicas):
        found = current.get(index)
        attempt = attempts.get(index, 0)
        if found is None:
            if index not in admission.hold:
                draft.actions.append(
                    CreateObject(manifests.build_worker_pod(job, spec, index, attempt))
                )
            continue
        if not _needs_replacement(found, lost_nodes):
            continue
        reason = _replacement_reason(found, lost_nodes)
        if reason is not None:
            counts = restarts.bump(counts, reason)
        attempts[index] = attempt + 1
        draft.commit_first = True
        why = _describe_loss(found, lost_nodes)
        draft.event(
            "Warning",
            "WorkerReplaced",
            f"worker pod {found.name} {why}; creating attempt {attempt + 1}"
            + (f" (restart reason {reason})" if reason else " (the agents count this restart)"),
        )
        if index not in admission.hold:
            draft.actions.append(
                CreateObject(manifests.build_worker_pod(job, spec, index, attempt + 1))
            )
    for pod in observed.workers:
        superseded = pod.attempt < attempts.get(pod.index, 0)
        scaled_away = pod.index >= spec.replicas
        on_lost_node = pod.node is not None and pod.node in lost_nodes
        if superseded or scaled_away:
            if not pod.deleting:
                draft.actions.append(DeletePod(pod.name, force=on_lost_node))
            elif on_lost_node:
                draft.actions.append(DeletePod(pod.name, force=True))  # stuck Terminating
    draft.status = draft.status.evolve(attempts=attempts, restarts=counts)
    return admission


def _describe_loss(pod: PodView, lost_nodes: frozenset[str]) -> str:
    if pod.start_failure is not None:
        failure = pod.start_failure
        return f"could not start container {failure.container}: {failure.reason}: {failure.message}"
    if pod.node is not None and pod.node in lost_nodes:
        return f"is on lost node {pod.node}"
    if pod.evicted:
        return "was evicted"
    if pod.deleting:
        return "is being deleted"
    return f"failed (exit code {pod.exit_code})"


# -- stalls and summary --------------------------------------------------------------------------


def _no_progress(
    draft: _Draft,
    spec: JobSpec,
    before: JobStatus,
    seen: progress.GroupProgress | None,
    now: float,
) -> Stall | None:
    """``NoProgress`` (``progress.no_progress``), from the reports and the ``hang`` count."""
    hang = RestartReason.HANG.value
    current = draft.status.stall
    verdict = progress.no_progress(
        timeout=spec.progress_timeout_seconds,
        seen=seen,
        current=(current.since, current.message)
        if current is not None and current.reason == StallReason.NO_PROGRESS
        else None,
        hang_restarts_added=draft.status.restarts.get(hang, 0) - before.restarts.get(hang, 0),
        now=now,
    )
    return None if verdict is None else Stall(StallReason.NO_PROGRESS, verdict.message)


def _track_progress(
    draft: _Draft, seen: progress.GroupProgress | None, stall: Stall | None
) -> None:
    state = progress.advance(draft.status.progress, seen)
    if (
        state is not None
        and stall is not None
        and stall.reason is StallReason.NO_PROGRESS
        and state.steps_per_second != 0.0
    ):
        state = progress.ProgressState(state.step, state.at, 0.0)
    draft.status = draft.status.evolve(progress=state)


def _note_start_failures(draft: _Draft, spec: JobSpec, observed: Observed, now: float) -> None:
    """Keep ``status.startFailures`` and the ``PodsNotStarting`` condition, with a Warning
    Event (the kubelet's reason) for each new cause (``start_failures``).

    Each slot's newest pod speaks for it, also one replaced in this very step: a pod that ends
    with ``StartError`` is seen once before its replacement supersedes it."""
    before = draft.status.start_failures
    after = start_failures.track(
        before,
        workers=_current_workers(observed.workers, {}),
        replicas=spec.replicas,
        etcd=max(observed.etcd_pods, key=lambda p: p.index, default=None),
        managed_etcd=spec.etcd.mode is EtcdMode.MANAGED,
    )
    for failure in start_failures.news(before, after):
        draft.event("Warning", failure.reason, f"cannot start {failure.summary()}")
    conds = start_failures.condition(draft.status.conditions, after, now=now)
    draft.status = draft.status.evolve(start_failures=after, conditions=tuple(conds))


def _track_stall(draft: _Draft, spec: JobSpec, stall: Stall | None, now: float) -> bool:
    """Record the stall in status and conditions; ``True`` when its timeout has run out."""
    status = draft.status
    if stall is None:
        if status.stall is not None:
            draft.event("Normal", "Recovered", f"no longer stalled ({status.stall.reason})")
            draft.status = status.evolve(
                stall=None,
                conditions=tuple(
                    set_condition(
                        status.conditions,
                        ConditionType.STALLED,
                        False,
                        "Recovered",
                        f"recovered from {status.stall.reason}",
                        now=now,
                    )
                ),
            )
        return False
    reason = stall.reason.value
    since = status.stall.since if status.stall is not None else now
    if status.stall is None or status.stall.reason != reason:
        draft.new_stall = reason
        draft.event("Warning", reason, stall.message)
    conds = set_condition(
        status.conditions, ConditionType.STALLED, True, reason, stall.message, now=now
    )
    draft.status = status.evolve(
        stall=StallState(reason, stall.message, since),
        conditions=tuple(conds),
        reason=reason,
        message=stall.message,
    )
    # A job without progress restarts (and spends its budget) instead: its group may need longer
    # than stallTimeoutSeconds to load its model again.
    if stall.reason is not StallReason.NO_PROGRESS and now - since > spec.stall_timeout_seconds:
        draft.status = draft.status.evolve(
            message=f"stalled for more than stallTimeoutSeconds ({spec.stall_timeout_seconds}): "
            f"{stall.message}"
        )
        return True
    return False


def _summarize(
    draft: _Draft,
    spec: JobSpec,
    observed: Observed,
    now: float,
    admission: kueue.Admission = kueue.NOT_QUEUED,
) -> None:
    status = draft.status
    reports = [r for r in observed.reports.values() if r.run_id == status.run_id]
    running = [r for r in reports if r.state is AgentState.RUNNING and r.round is not None]
    waiting = [r for r in reports if r.state in (AgentState.RENDEZVOUS, AgentState.RESTARTING)]
    top_round = max((r.round or 0 for r in running), default=status.round)
    in_round = [r for r in running if r.round == top_round]
    world = max((r.world_size or 0 for r in in_round), default=0)
    waiting_since = min(
        (r.waiting_since for r in waiting if r.waiting_since is not None), default=None
    )
    last_duration = status.last_rendezvous_seconds
    if top_round > status.round:
        # The agents' own figures first: a quick rendezvous can start and end between two polls.
        reported = [r.last_rendezvous_seconds for r in in_round]
        if any(d is not None for d in reported):
            last_duration = max(d for d in reported if d is not None)
        elif status.rendezvous_waiting_since is not None:
            last_duration = max(0.0, now - status.rendezvous_waiting_since)
    current = _current_workers(observed.workers, status.attempts)
    replicas = sum(1 for p in current.values() if not p.terminal and not p.deleting)
    if in_round:
        phase, reason, message = Phase.RUNNING, "Running", f"round {top_round}, world size {world}"
    elif status.phase is Phase.RUNNING and not waiting:
        # Agents finishing (Stopping, Succeeded) or not answering for a moment: no news.
        phase, reason, message = Phase.RUNNING, status.reason, status.message
    elif status.phase in (Phase.RUNNING, Phase.RESTARTING):
        phase, reason, message = Phase.RESTARTING, "Restarting", "the worker group is re-forming"
    else:
        phase, reason, message = Phase.PENDING, "Pending", "waiting for the first rendezvous"
    conds: list[dict[str, Any]] = [dict(c) for c in status.conditions]
    if spec.kueue is not None:
        queued = kueue.queued_message(spec, observed.kueue_reason)
        if admission.queued and not in_round:
            phase, reason, message = Phase.QUEUED, "Queued", queued
        conds = set_condition(
            conds,
            ConditionType.QUEUED,
            admission.queued,
            "Queued" if admission.queued else "Admitted",
            queued if admission.queued else "Kueue admitted the core",
            now=now,
        )
    if status.stall is not None:
        reason, message = status.stall.reason, status.stall.message
    conds = set_condition(
        conds,
        ConditionType.RUNNING,
        phase is Phase.RUNNING,
        "Running" if phase is Phase.RUNNING else phase.value,
        message,
        now=now,
    )
    if phase is not status.phase:
        draft.event("Normal", phase.value, message)
    draft.status = status.evolve(
        phase=phase,
        reason=reason,
        message=message,
        conditions=tuple(conds),
        ready_nodes=len(in_round),
        waiting_nodes=len(waiting),
        world_size=world,
        round=top_round,
        replicas=replicas,
        rendezvous_waiting_since=waiting_since if not in_round or waiting else None,
        last_rendezvous_seconds=last_duration,
    )
