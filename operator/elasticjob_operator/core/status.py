"""The job's ``status`` as a typed value, and its JSON shape (pure).

Besides what users read (phase, conditions, restarts, nodes), the status holds the counters that
make the operator restartable at any point: ``attempts`` (the current pod attempt per replica
index) and ``etcd.generation`` are bumped in a status write *before* the objects they name are
created, so a restarted operator creates exactly those names and counts nothing twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from elasticjob_agent.protocol.failure_policy import FailurePolicyError, PolicyDecision
from elasticjob_agent.protocol.integers import IntegerError, bounded_int

from . import restarts
from .checkpoint_status import CheckpointStatus, newest
from .conditions import rfc3339
from .evidence import full_json
from .observed import StartFailure, parse_time
from .progress import ProgressState
from .quarantine import AvoidedNode, read
from .recovery import Goodput, Recovery
from .stragglers_status import StragglerEntry, entries_from_json, entries_to_json


class Phase(StrEnum):
    PENDING = "Pending"
    QUEUED = "Queued"
    """Kueue has not admitted the core (see ``kueue.py``)."""
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def finished(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED)


@dataclass(frozen=True)
class StallState:
    reason: str
    message: str
    since: float


@dataclass(frozen=True)
class EtcdState:
    generation: int = 0
    """Generation of the current managed etcd pod (bumped on every recreation)."""
    ready_generation: int = -1
    """Last generation known to have been up: the operator's probe reached it, the kubelet's
    readiness probe passed, or (generation 0) a worker group ran on it. Only a generation that
    was up is replaced when it becomes unreachable; one that never came up gets a start-up
    grace instead."""
    seeded_generation: int = 0
    """Last generation that received the restart seed (generation 0 starts empty: no seed)."""
    unreachable_since: float | None = None


@dataclass(frozen=True)
class JobStatus:
    phase: Phase = Phase.PENDING
    reason: str = ""
    message: str = ""
    conditions: tuple[Mapping[str, Any], ...] = ()
    run_id: str = ""
    selector: str = ""
    replicas: int = 0
    ready_nodes: int = 0
    waiting_nodes: int = 0
    ready_spares: int = 0
    world_size: int = 0
    round: int = 0
    observed_generation: int = 0
    start_time: float | None = None
    completion_time: float | None = None
    restarts: Mapping[str, int] = field(default_factory=dict)
    attempts: Mapping[int, int] = field(default_factory=dict)
    etcd: EtcdState = EtcdState()
    stall: StallState | None = None
    rendezvous_waiting_since: float | None = None
    last_rendezvous_seconds: float | None = None
    invalid_reports: Mapping[str, str] = field(default_factory=dict)
    """Pods whose last answer was not a valid health report, with the reason (bounded)."""
    last_failure: Mapping[str, Any] | None = None
    """The job's root cause (``evidence.Cause`` as JSON: ranked job-wide by ``root_cause``)."""
    progress: ProgressState | None = None
    """The training step the agents report, sampled (``progress.py``)."""
    start_failures: tuple[StartFailure, ...] = ()
    """Pods whose containers the kubelet cannot start, one per slot (``start_failures.track``)."""
    failure_policy: PolicyDecision | None = None
    """The latest failure-policy decision (``policy_status.py``)."""
    last_recovery: Recovery | None = None
    """What the latest recovery cost (``recovery.py``)."""
    goodput: Goodput | None = None
    """Training time kept over wall time since the job started (``recovery.account``)."""
    checkpoint: CheckpointStatus = field(default_factory=CheckpointStatus)
    """What the agents' checkpoints kept (``checkpoint_status.py``)."""
    stragglers: tuple[StragglerEntry, ...] = ()
    """Nodes whose compute time per step stands out, and nodes replaced for it
    (``stragglers_status.py``)."""
    avoided_nodes: tuple[AvoidedNode, ...] = ()
    """Nodes the job's new worker pods keep off, and nodes watched for it (``quarantine.py``)."""

    def evolve(self, **changes: Any) -> JobStatus:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """The ``status`` object as stored; a full write (merge-patch ``None`` clears fields)."""
        return {
            "phase": self.phase.value,
            "reason": self.reason,
            "message": self.message,
            "conditions": [dict(c) for c in self.conditions],
            "runId": self.run_id,
            "selector": self.selector,
            "replicas": self.replicas,
            "readyNodes": self.ready_nodes,
            "waitingNodes": self.waiting_nodes,
            "readySpares": self.ready_spares,
            "worldSize": self.world_size,
            "round": self.round,
            "observedGeneration": self.observed_generation,
            "startTime": _time(self.start_time),
            "completionTime": _time(self.completion_time),
            "restarts": {
                "total": restarts.total(self.restarts),
                "failures": restarts.failures(self.restarts),
                "byReason": dict(sorted(self.restarts.items())),
            },
            "attempts": {str(k): v for k, v in sorted(self.attempts.items())},
            "etcd": {
                "generation": self.etcd.generation,
                "readyGeneration": self.etcd.ready_generation,
                "seededGeneration": self.etcd.seeded_generation,
                "unreachableSince": _time(self.etcd.unreachable_since),
            },
            "stall": None
            if self.stall is None
            else {
                "reason": self.stall.reason,
                "message": self.stall.message,
                "since": _time(self.stall.since),
            },
            "rendezvous": {
                "waitingSince": _time(self.rendezvous_waiting_since),
                "lastDurationSeconds": self.last_rendezvous_seconds,
            },
            "invalidReports": [
                {"pod": pod, "reason": reason}
                for pod, reason in sorted(self.invalid_reports.items())
            ],
            "lastFailure": None if self.last_failure is None else full_json(self.last_failure),
            "progress": None if self.progress is None else self.progress.to_json(),
            "startFailures": [f.to_json() for f in self.start_failures],
            "failurePolicy": None
            if self.failure_policy is None
            else {**self.failure_policy.to_json(), "time": _time(self.failure_policy.time)},
            "lastRecovery": None if self.last_recovery is None else self.last_recovery.to_json(),
            "goodput": None if self.goodput is None else self.goodput.to_json(),
            "checkpoint": None if self.checkpoint.empty else self.checkpoint.to_json(),
            "stragglers": entries_to_json(self.stragglers),
            "avoidedNodes": [e.to_json() for e in self.avoided_nodes],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> JobStatus:
        """Read a stored status; unknown or missing fields fall back to defaults (never raises)."""
        data = data or {}
        etcd = data.get("etcd") or {}
        stall = data.get("stall")
        rdzv = data.get("rendezvous") or {}
        try:
            phase = Phase(data.get("phase") or "Pending")
        except ValueError:
            phase = Phase.PENDING
        by_reason = (data.get("restarts") or {}).get("byReason") or {}
        return cls(
            phase=phase,
            reason=str(data.get("reason") or ""),
            message=str(data.get("message") or ""),
            conditions=tuple(dict(c) for c in data.get("conditions") or [] if isinstance(c, dict)),
            run_id=str(data.get("runId") or ""),
            selector=str(data.get("selector") or ""),
            replicas=_int(data.get("replicas")),
            ready_nodes=_int(data.get("readyNodes")),
            waiting_nodes=_int(data.get("waitingNodes")),
            ready_spares=_int(data.get("readySpares")),
            world_size=_int(data.get("worldSize")),
            round=_int(data.get("round")),
            observed_generation=_int(data.get("observedGeneration")),
            start_time=parse_time(data.get("startTime")),
            completion_time=parse_time(data.get("completionTime")),
            restarts={str(k): _int(v) for k, v in by_reason.items()},
            attempts={
                int(k): _int(v) for k, v in (data.get("attempts") or {}).items() if str(k).isdigit()
            },
            etcd=EtcdState(
                generation=_int(etcd.get("generation")),
                ready_generation=_int(etcd.get("readyGeneration"), -1),
                seeded_generation=_int(etcd.get("seededGeneration")),
                unreachable_since=parse_time(etcd.get("unreachableSince")),
            ),
            stall=None
            if not isinstance(stall, Mapping) or not stall.get("reason")
            else StallState(
                reason=str(stall["reason"]),
                message=str(stall.get("message") or ""),
                since=parse_time(stall.get("since")) or 0.0,
            ),
            rendezvous_waiting_since=parse_time(rdzv.get("waitingSince")),
            last_rendezvous_seconds=_float(rdzv.get("lastDurationSeconds")),
            invalid_reports={
                str(r["pod"]): str(r.get("reason") or "")
                for r in data.get("invalidReports") or []
                if isinstance(r, Mapping) and r.get("pod")
            },
            last_failure=dict(data["lastFailure"])
            if isinstance(data.get("lastFailure"), Mapping)
            else None,
            progress=ProgressState.from_json(data.get("progress")),
            start_failures=tuple(
                f
                for f in (StartFailure.from_json(d) for d in _list(data.get("startFailures")))
                if f is not None
            ),
            failure_policy=_decision(data.get("failurePolicy")),
            last_recovery=Recovery.from_json(data.get("lastRecovery")),
            goodput=Goodput.from_json(data.get("goodput")),
            checkpoint=CheckpointStatus.from_json(data.get("checkpoint")),
            stragglers=entries_from_json(data.get("stragglers")),
            avoided_nodes=read(data.get("avoidedNodes")),
        )


def _time(value: float | None) -> str | None:
    return None if value is None else rfc3339(value)


def _decision(value: Any) -> PolicyDecision | None:
    """A stored ``status.failurePolicy`` (its time as RFC 3339); ``None`` when not ours."""
    if not isinstance(value, Mapping):
        return None
    try:
        return PolicyDecision.from_json({**value, "time": parse_time(value.get("time")) or 0.0})
    except FailurePolicyError:
        return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any, default: int = 0) -> int:
    """``value`` if it is an integer, else ``default`` (a status is read leniently)."""
    try:
        return bounded_int(value)
    except IntegerError:
        return default


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def never_lower(ours: JobStatus, theirs: JobStatus) -> JobStatus:
    """``ours`` with every counter raised to at least the value in ``theirs`` (a status read back
    from the API server after a write conflict, or the stored one at the start of a step).

    Restart counts per reason, pod attempts per index and the etcd generations only ever grow,
    whoever wrote them; a finished job stays finished. This is what keeps counts from going down
    when two writers (a lost status write, a second operator) disagree.
    """
    if theirs.phase.finished and not ours.phase.finished:
        ours = replace(
            ours,
            phase=theirs.phase,
            reason=theirs.reason,
            message=theirs.message,
            conditions=theirs.conditions,
            completion_time=theirs.completion_time,
        )
    counts = dict(ours.restarts)
    for reason, value in theirs.restarts.items():
        counts[reason] = max(counts.get(reason, 0), value)
    attempts = dict(ours.attempts)
    for index, value in theirs.attempts.items():
        attempts[index] = max(attempts.get(index, 0), value)
    etcd = EtcdState(
        generation=max(ours.etcd.generation, theirs.etcd.generation),
        ready_generation=max(ours.etcd.ready_generation, theirs.etcd.ready_generation),
        seeded_generation=max(ours.etcd.seeded_generation, theirs.etcd.seeded_generation),
        unreachable_since=ours.etcd.unreachable_since,
    )
    checkpoint = newest(ours.checkpoint, theirs.checkpoint)
    return replace(ours, restarts=counts, attempts=attempts, etcd=etcd, checkpoint=checkpoint)
