"""Prometheus metrics of the operator (names in docs/contracts.md), labelled by namespace and job.

Per-job series are set from the job's status after each reconcile step, so they survive operator
restarts (the status is durable), and are removed when the job is deleted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from elasticjob_agent.protocol.failure_policy import Action, PolicyDecision
from prometheus_client import Counter, Gauge, Histogram, start_http_server

from .core.recovery import PHASES, Recovery
from .core.stall import StallReason
from .core.status import JobStatus, Phase

JOB = ("namespace", "job")

RESTARTS = Gauge(
    "elasticjob_job_restarts",
    "Job-wide group restarts by reason (status.restarts)",
    [*JOB, "reason"],
)
PHASE = Gauge("elasticjob_job_phase", "1 for the job's current phase, else 0", [*JOB, "phase"])
WORLD_SIZE = Gauge("elasticjob_job_world_size", "Worker processes in the current round", JOB)
ROUND = Gauge("elasticjob_job_rendezvous_round", "Current rendezvous round", JOB)
RDZV_DURATION = Gauge(
    "elasticjob_job_rendezvous_duration_seconds",
    "Duration of the last completed rendezvous round, as the operator observed it",
    JOB,
)
STEP = Gauge("elasticjob_job_step", "Training step the agents report (status.progress)", JOB)
STEPS_PER_SECOND = Gauge(
    "elasticjob_job_steps_per_second", "Training steps per second (status.progress)", JOB
)
MAX_RESTARTS = Gauge(
    "elasticjob_job_max_restarts", "The job's restart budget (spec.maxRestarts)", JOB
)
SPARES_READY = Gauge(
    "elasticjob_job_spares_ready", "Hot spares standing by ready (status.readySpares)", JOB
)
ETCD_REACHABLE = Gauge(
    "elasticjob_job_etcd_reachable",
    "1 while the operator's probes reach the job's etcd, 0 while they fail"
    " (status.etcd.unreachableSince)",
    JOB,
)
POLICY_DECISIONS = Counter(
    "elasticjob_job_failure_policy_decisions",
    "Failure-policy decisions recorded in the job's status, by action (FailJob, Ignore, Count)",
    [*JOB, "action"],
)
POLICY_ACTIONS = tuple(action.value for action in Action)
RECOVERY_SECONDS = Histogram(
    "elasticjob_recovery_seconds",
    "Seconds of each recorded recovery by phase: detect (fault to restart), rendezvous, restore"
    " (to the first step's start), first_step (status.lastRecovery)",
    [*JOB, "phase"],
    buckets=(0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0),
)
GOODPUT = Gauge(
    "elasticjob_job_goodput_ratio",
    "Training time kept over wall time since the job started (status.goodput.ratio)",
    JOB,
)
NODE_STRAGGLER = Gauge(
    "elasticjob_node_straggler",
    "1 while the node's compute time per step stays above spec.health.stragglers.factor times"
    " the other nodes' median, 0 for a node only suspected or replaced (status.stragglers)",
    [*JOB, "node"],
)
STALLS = Counter("elasticjob_job_stalls_total", "Stalls detected, by reason", [*JOB, "reason"])
STALLED = Gauge("elasticjob_job_stalled", "1 while the job is stalled for reason", [*JOB, "reason"])
STEADY_CHECKS = Counter(
    "elasticjob_steady_checks_total",
    "Steady jobs' etcd-only checks between reconcile steps, by result (ok, restless, no_verdict)",
    ["result"],
)
BAD_EVIDENCE = Counter(
    "elasticjob_bad_evidence_total",
    "Root-cause evidence refused (a record naming a pod not in the job or not its reporter, "
    "dated in the future, too much of it), by reason, per sighting",
    ["reason"],
)
RECONCILES = Counter("elasticjob_reconcile_total", "Reconcile steps by result", ["result"])
RECONCILE_SECONDS = Histogram(
    "elasticjob_reconcile_duration_seconds",
    "Time of one reconcile step (observe, plan, apply)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)

GC_PAUSES = Histogram(
    "elasticjob_gc_pause_seconds",
    "Pauses of the garbage collector (the event loop stands still meanwhile), by generation",
    ["generation"],
    buckets=(0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5),
)

STALL_REASONS = tuple(reason.value for reason in StallReason)


def observe_gc(generation: int, seconds: float) -> None:
    GC_PAUSES.labels(str(generation)).observe(seconds)


_known_reasons: dict[tuple[str, str], set[str]] = {}
_straggler_nodes: dict[tuple[str, str], set[str]] = {}
"""The nodes each job has a ``elasticjob_node_straggler`` series for (to remove the stale ones)."""


def serve(port: int) -> None:
    """Serve ``/metrics`` on ``port`` (0 disables)."""
    if port:
        start_http_server(port)


def publish(
    namespace: str, job: str, status: JobStatus, *, max_restarts: int | None = None
) -> None:
    """Set every per-job series from ``status`` (and the budget, ``spec.maxRestarts``)."""
    if max_restarts is not None:
        MAX_RESTARTS.labels(namespace, job).set(max_restarts)
    SPARES_READY.labels(namespace, job).set(status.ready_spares)
    ETCD_REACHABLE.labels(namespace, job).set(0 if status.etcd.unreachable_since else 1)
    for phase in Phase:
        PHASE.labels(namespace, job, phase.value).set(1 if status.phase is phase else 0)
    reasons = _known_reasons.setdefault((namespace, job), set())
    reasons.update(status.restarts)
    for reason in reasons:
        RESTARTS.labels(namespace, job, reason).set(status.restarts.get(reason, 0))
    WORLD_SIZE.labels(namespace, job).set(status.world_size)
    ROUND.labels(namespace, job).set(status.round)
    if status.last_rendezvous_seconds is not None:
        RDZV_DURATION.labels(namespace, job).set(status.last_rendezvous_seconds)
    if status.progress is not None:
        STEP.labels(namespace, job).set(status.progress.step)
        STEPS_PER_SECOND.labels(namespace, job).set(status.progress.steps_per_second or 0.0)
    if status.goodput is not None:
        GOODPUT.labels(namespace, job).set(status.goodput.ratio)
    current = status.stall.reason if status.stall is not None else None
    for reason in STALL_REASONS:
        STALLED.labels(namespace, job, reason).set(1 if reason == current else 0)
    _publish_stragglers(namespace, job, status)


def _publish_stragglers(namespace: str, job: str, status: JobStatus) -> None:
    """One series per node in ``status.stragglers``; a node that left the list loses its own."""
    nodes = {entry.node: entry.straggling for entry in status.stragglers}
    for gone in _straggler_nodes.get((namespace, job), set()) - nodes.keys():
        _remove(NODE_STRAGGLER, namespace, job, gone)
    _straggler_nodes[(namespace, job)] = set(nodes)
    for node, straggling in nodes.items():
        NODE_STRAGGLER.labels(namespace, job, node).set(1 if straggling else 0)


def stall_started(namespace: str, job: str, reason: str) -> None:
    STALLS.labels(namespace, job, reason).inc()


def decision_taken(
    namespace: str, job: str, before: PolicyDecision | None, after: PolicyDecision | None
) -> None:
    """Count ``after`` by its action when a step's written status took it up in place of
    ``before`` (``status.failurePolicy`` holds the latest decision, so each counts once)."""
    if after is not None and after != before:
        POLICY_DECISIONS.labels(namespace, job, after.action.value).inc()


def recovered(namespace: str, job: str, before: Recovery | None, after: Recovery | None) -> None:
    """Observe each phase of ``after`` when a step's written status recorded it in place of
    ``before`` (a correction of the same recovery is not observed again)."""
    if after is not None and not after.same_as(before):
        for phase, seconds in after.phases().items():
            RECOVERY_SECONDS.labels(namespace, job, phase).observe(seconds)


def evidence_refused(reasons: tuple[str, ...]) -> None:
    for reason in reasons:
        BAD_EVIDENCE.labels(reason).inc()


def forget(namespace: str, job: str) -> None:
    """Drop the series of a deleted job."""
    reasons = _known_reasons.pop((namespace, job), set())
    for reason in reasons:
        _remove(RESTARTS, namespace, job, reason)
    for node in _straggler_nodes.pop((namespace, job), set()):
        _remove(NODE_STRAGGLER, namespace, job, node)
    for phase in Phase:
        _remove(PHASE, namespace, job, phase.value)
    for gauge in (
        WORLD_SIZE,
        ROUND,
        RDZV_DURATION,
        STEP,
        STEPS_PER_SECOND,
        MAX_RESTARTS,
        SPARES_READY,
        ETCD_REACHABLE,
        GOODPUT,
    ):
        _remove(gauge, namespace, job)
    for step in PHASES:
        _remove(RECOVERY_SECONDS, namespace, job, step)
    for action in POLICY_ACTIONS:
        _remove(POLICY_DECISIONS, namespace, job, action)
    for reason in STALL_REASONS:
        _remove(STALLED, namespace, job, reason)
        _remove(STALLS, namespace, job, reason)


def _remove(metric: Gauge | Counter | Histogram, *labels: str) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labels)


def snapshot() -> Mapping[str, float]:
    """Reconcile counts by result, for logs and tests."""
    return {
        sample.labels["result"]: sample.value
        for family in RECONCILES.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    }
