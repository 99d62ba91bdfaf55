"""The agent's health report (``GET /status``), schema version 1.

The operator polls this from every worker pod to tell a stalled rendezvous (etcd unreachable) from
one that is simply waiting for nodes; etcd itself cannot say it is gone. The JSON uses camelCase
keys, like Kubernetes objects. Additive changes keep ``schemaVersion``; anything else bumps it.

Endpoints of the health server (default port ``DEFAULT_HEALTH_PORT``):

- ``GET /healthz``: 200 while the agent's main loop is alive (liveness), else 503.
- ``GET /status``: this report as JSON.
- ``GET /metrics``: Prometheus text format.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Literal, overload

from elasticjob_agent.protocol import defaults
from elasticjob_agent.protocol.checkpoint import RestoreReport
from elasticjob_agent.protocol.failure import FailureRecordError, WorkerFailure
from elasticjob_agent.protocol.failure_policy import FailurePolicyError, PolicyDecision
from elasticjob_agent.protocol.integers import IntegerError, bounded_int

SCHEMA_VERSION = 1
DEFAULT_HEALTH_PORT = defaults.HEALTH_PORT


class AgentState(str, Enum):
    STARTING = "Starting"
    RENDEZVOUS = "Rendezvous"
    """Blocked in ``next_rendezvous()``; ``waitingSince`` says since when."""
    STANDBY = "Standby"
    """A hot spare: its round completed full without it; it waits, with its workers warm
    (``warmWorkers``), to join the next round. Not waiting for anything the job lacks."""
    RUNNING = "Running"
    RESTARTING = "Restarting"
    STOPPING = "Stopping"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class HealthReportError(ValueError):
    """The payload is not a valid health report of a schema version we understand."""


@dataclass(frozen=True)
class WorkerStatus:
    local_rank: int
    pid: int | None
    exit_code: int | None


@dataclass(frozen=True)
class EtcdStatus:
    reachable: bool
    last_contact: float | None
    """Unix time of the last successful etcd request or keep-alive."""
    unreachable_since: float | None
    """Unix time of the first failure of the current outage, ``None`` while reachable."""
    endpoints: tuple[str, ...] = ()


@dataclass(frozen=True)
class HealthReport:
    run_id: str
    node: str
    state: AgentState
    etcd: EtcdStatus
    round: int | None = None
    group_rank: int | None = None
    group_world_size: int | None = None
    world_size: int | None = None
    restarts_total: int = 0
    restarts_by_reason: Mapping[str, int] = field(default_factory=dict)
    max_restarts: int = 0
    waiting_since: float | None = None
    """Unix time the agent entered the current rendezvous; ``None`` when not in one."""
    last_rendezvous_seconds: float | None = None
    """How long this agent waited in the rendezvous that formed ``round`` (the operator takes
    the longest over the group: a rendezvous that completes between two polls is not missed)."""
    last_progress: float | None = None
    """Unix time of the last sign of life from a worker (start, or a timer heartbeat)."""
    workers: tuple[WorkerStatus, ...] = ()
    worst_case_time_to_fail_seconds: float | None = None
    exit_reason: str | None = None
    updated_at: float = 0.0
    health_port: int | None = None
    """The port this report is served on (not the default when that one was busy)."""
    last_failure: WorkerFailure | None = None
    """The first worker failure of the latest round that had one (``protocol.failure``)."""
    last_step: int | None = None
    """The highest training step a local worker reported in the current round
    (``elasticjob_agent.progress.report_step``); ``None`` before the first one."""
    last_step_at: float | None = None
    """Unix time (the agent's clock) of the latest step report in the current round."""
    steps_done: bool = False
    """A local worker said its training loop is over (``report_done``) in the current round:
    no hang is judged from here on."""
    warm_workers: int = 0
    """Warm worker processes that have imported torch and wait to become workers."""
    warm_pool: int = 0
    """How many warm workers the agent keeps (``nproc_per_node``; 0 without warm workers)."""

    @property
    def spare_ready(self) -> bool:
        """A hot spare ready to be called in: standing by with every warm worker's imports
        done (the operator's ``status.readySpares`` counts these)."""
        return self.state is AgentState.STANDBY and self.warm_workers >= self.warm_pool

    failure_policy: PolicyDecision | None = None
    """The latest failure-policy rule that decided a round this agent counted
    (``protocol.failure_policy``)."""
    progress_timeout_seconds: float | None = None
    """The progress (hang) timeout in force while running: the fixed one, or the one learned
    from the step intervals; ``None``: none (off, or the round's first steps are exempt)."""
    round_started_at: float | None = None
    """Unix time (the agent's clock) the current round's workers started, while running."""
    first_step: int | None = None
    """The first step a local worker reported in the current round (the step training resumed
    from is one less); ``None`` before it."""
    first_step_at: float | None = None
    """Unix time (the agent's clock) of ``first_step``."""
    previous_step: int | None = None
    """The highest step of the latest earlier round that reported one (the last step before
    the restart that started the current round); ``None``: no earlier round had a step."""
    previous_step_at: float | None = None
    """Unix time (the agent's clock) of ``previous_step``'s latest report."""
    last_saved_step: int | None = None
    """The newest step this agent's checkpoint memory holds a shard of (``None``: none, or
    checkpoints off)."""
    last_restore: RestoreReport | None = None
    """The last restore a rank of this agent reported, with the round it happened in."""
    restore_failure: str | None = None
    """Why the last restore restored nothing although a checkpoint exists (at most
    ``MAX_RESTORE_FAILURE`` characters); cleared by the next successful restore."""
    restore_failure_round: int | None = None
    """The round ``restore_failure`` happened in."""
    compute_seconds: float | None = None
    """The node's compute time per step while running: the median over its local ranks of each
    rank's median over its last timed steps (``elasticjob_agent.progress.step_timer``);
    ``None``: no rank timed a step in this round."""
    compute_samples: int = 0
    """How many timings ``compute_seconds`` was computed from."""
    compute_rejected: int = 0
    """Timings the agent ignored since it started (negative, non-finite, huge, not a number)."""
    preflight_seconds: float | None = None
    """``--preflight``: how long this node took for the pre-flight check's fixed computation
    before its first round (``timers.preflight``); ``None``: no check."""

    def to_json(self) -> dict[str, Any]:
        return {
            "schemaVersion": SCHEMA_VERSION,
            "runId": self.run_id,
            "node": self.node,
            "state": self.state.value,
            "round": self.round,
            "groupRank": self.group_rank,
            "groupWorldSize": self.group_world_size,
            "worldSize": self.world_size,
            "restarts": {"total": self.restarts_total, "byReason": dict(self.restarts_by_reason)},
            "maxRestarts": self.max_restarts,
            "etcd": {
                "reachable": self.etcd.reachable,
                "lastContact": self.etcd.last_contact,
                "unreachableSince": self.etcd.unreachable_since,
                "endpoints": list(self.etcd.endpoints),
            },
            "waitingSince": self.waiting_since,
            "lastRendezvousSeconds": self.last_rendezvous_seconds,
            "lastProgress": self.last_progress,
            "workers": [
                {"localRank": w.local_rank, "pid": w.pid, "exitCode": w.exit_code}
                for w in self.workers
            ],
            "worstCaseTimeToFailSeconds": self.worst_case_time_to_fail_seconds,
            "exitReason": self.exit_reason,
            "updatedAt": self.updated_at,
            "healthPort": self.health_port,
            "lastFailure": None if self.last_failure is None else self.last_failure.to_json(),
            "lastStep": self.last_step,
            "lastStepAt": self.last_step_at,
            "stepsDone": self.steps_done,
            "warmWorkers": self.warm_workers,
            "warmPool": self.warm_pool,
            "failurePolicy": None if self.failure_policy is None else self.failure_policy.to_json(),
            "progressTimeoutSeconds": self.progress_timeout_seconds,
            "roundStartedAt": self.round_started_at,
            "firstStep": self.first_step,
            "firstStepAt": self.first_step_at,
            "previousStep": self.previous_step,
            "previousStepAt": self.previous_step_at,
            "lastSavedStep": self.last_saved_step,
            "lastRestore": None if self.last_restore is None else self.last_restore.as_status(),
            "restoreFailure": self.restore_failure,
            "restoreFailureRound": self.restore_failure_round,
            "computeSeconds": self.compute_seconds,
            "computeSamples": self.compute_samples,
            "computeRejected": self.compute_rejected,
            "preflightSeconds": self.preflight_seconds,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, data: object) -> HealthReport:
        """Parse a decoded report strictly; raise ``HealthReportError`` naming the bad field.

        The report comes from a pod, so it is untrusted input: every field must have its type
        (``bool`` is not an ``int``), integers lie within ``[0, MAX_INT]`` (``pid``/``exitCode``
        within ``[-MAX_INT, MAX_INT]``), numbers are finite and non-negative, strings and lists
        are bounded, and unknown keys are ignored (additive schema changes).
        """
        if not isinstance(data, dict):
            raise HealthReportError("health report must be a JSON object")
        version = data.get("schemaVersion")
        if type(version) is not int or version != SCHEMA_VERSION:
            raise HealthReportError(
                f"unsupported health report schemaVersion {_show(version)} "
                f"(expected {SCHEMA_VERSION})"
            )
        etcd = _object(data, "etcd", required=True)
        restarts = _object(data, "restarts", required=True)
        by_reason = _object(restarts, "byReason", where="restarts.byReason")
        if len(by_reason) > MAX_REASONS:
            raise HealthReportError(f"field 'restarts.byReason' has more than {MAX_REASONS} keys")
        for reason in by_reason:
            _check_string(reason, "restarts.byReason key", MAX_NAME)
        state = _string(data, "state", required=True)
        try:
            agent_state = AgentState(state)
        except ValueError:
            raise HealthReportError(f"field 'state' is not a known state: {_show(state)}") from None
        endpoints = _list(etcd, "endpoints", MAX_ENDPOINTS, where="etcd.endpoints")
        workers = _list(data, "workers", MAX_WORKERS)
        return cls(
            run_id=_string(data, "runId", required=True),
            node=_string(data, "node", required=True),
            state=agent_state,
            etcd=EtcdStatus(
                reachable=_bool(etcd, "reachable", where="etcd.reachable"),
                last_contact=_opt_num(etcd, "lastContact", where="etcd.lastContact"),
                unreachable_since=_opt_num(etcd, "unreachableSince", where="etcd.unreachableSince"),
                endpoints=tuple(_check_string(e, "etcd.endpoints[]", MAX_NAME) for e in endpoints),
            ),
            round=_opt_int(data, "round"),
            group_rank=_opt_int(data, "groupRank"),
            group_world_size=_opt_int(data, "groupWorldSize"),
            world_size=_opt_int(data, "worldSize"),
            restarts_total=_int(restarts, "total", where="restarts.total"),
            restarts_by_reason={
                str(k): _int(by_reason, str(k), where=f"restarts.byReason.{k}") for k in by_reason
            },
            max_restarts=_int(data, "maxRestarts"),
            waiting_since=_opt_num(data, "waitingSince"),
            last_rendezvous_seconds=_opt_num(data, "lastRendezvousSeconds"),
            last_progress=_opt_num(data, "lastProgress"),
            workers=tuple(_worker(w, i) for i, w in enumerate(workers)),
            worst_case_time_to_fail_seconds=_opt_num(data, "worstCaseTimeToFailSeconds"),
            exit_reason=_string(data, "exitReason", limit=MAX_TEXT),
            updated_at=_opt_num(data, "updatedAt") or 0.0,
            health_port=_opt_port(data, "healthPort"),
            last_failure=_opt_failure(data.get("lastFailure")),
            last_step=_opt_int(data, "lastStep"),
            last_step_at=_opt_num(data, "lastStepAt"),
            steps_done=_opt_bool(data, "stepsDone"),
            warm_workers=_opt_int(data, "warmWorkers") or 0,
            warm_pool=_opt_int(data, "warmPool") or 0,
            failure_policy=_opt_decision(data.get("failurePolicy")),
            progress_timeout_seconds=_opt_num(data, "progressTimeoutSeconds"),
            round_started_at=_opt_num(data, "roundStartedAt"),
            first_step=_opt_int(data, "firstStep"),
            first_step_at=_opt_num(data, "firstStepAt"),
            previous_step=_opt_int(data, "previousStep"),
            previous_step_at=_opt_num(data, "previousStepAt"),
            last_saved_step=_opt_int(data, "lastSavedStep"),
            last_restore=_opt_restore(data.get("lastRestore")),
            restore_failure=_string(data, "restoreFailure", limit=MAX_RESTORE_FAILURE),
            restore_failure_round=_opt_int(data, "restoreFailureRound"),
            compute_seconds=_opt_num(data, "computeSeconds"),
            compute_samples=_opt_int(data, "computeSamples") or 0,
            compute_rejected=_opt_int(data, "computeRejected") or 0,
            preflight_seconds=_opt_num(data, "preflightSeconds"),
        )

    @classmethod
    def loads(cls, text: str | bytes) -> HealthReport:
        """Decode and parse a report body of at most ``MAX_REPORT_BYTES``, strictly.

        Refused with ``HealthReportError`` (never another exception): a longer body, invalid
        UTF-8 or JSON, ``NaN``/``Infinity`` (and numbers that overflow to it), integer literals
        longer than ``MAX_INT_DIGITS``, nesting deeper than ``MAX_DEPTH``, and whatever
        ``from_json`` refuses.
        """
        raw = text.encode() if isinstance(text, str) else bytes(text)
        if len(raw) > MAX_REPORT_BYTES:
            raise HealthReportError(
                f"health report is larger than {MAX_REPORT_BYTES} bytes ({len(raw)})"
            )
        try:
            decoded = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HealthReportError(f"health report is not UTF-8: {exc}") from None
        depth = json_depth(decoded)
        if depth > MAX_DEPTH:
            raise HealthReportError(f"health report nests deeper than {MAX_DEPTH} levels")
        try:
            data = json.loads(
                decoded,
                parse_constant=_refuse_constant,
                parse_int=_bounded_int,
                parse_float=_finite_float,
            )
        except HealthReportError:
            raise
        except (ValueError, RecursionError) as exc:
            raise HealthReportError(f"health report is not JSON: {exc}") from None
        return cls.from_json(data)


MAX_REPORT_BYTES = 32 * 1024
"""Largest ``/status`` body the operator reads (a real report is well under 4 KiB)."""
MAX_DEPTH = 8
"""Deepest nesting of objects and lists a report may have (a real one has 3)."""
MAX_INT = 2**53
"""Largest magnitude of an integer field (exact in every JSON implementation)."""
MAX_INT_DIGITS = 20
"""Longest integer literal decoded at all (refused before Python converts it)."""
MAX_NAME = 256
MAX_TEXT = 4096
MAX_REASONS = 32
MAX_ENDPOINTS = 32
MAX_WORKERS = 1024
MAX_RESTORE_FAILURE = 1024
"""Longest ``restoreFailure``; the agent reports the first this many characters of a reason."""


def json_depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings in ``text`` (linear, no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _refuse_constant(name: str) -> Any:
    raise HealthReportError(f"health report contains {name}, which JSON does not allow")


def _bounded_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise HealthReportError(f"health report has an integer of {len(literal)} digits")
    return int(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise HealthReportError(f"health report has a number out of range: {literal[:40]}")
    return value


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _object(
    obj: Mapping[str, Any], key: str, *, required: bool = False, where: str | None = None
) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise HealthReportError(f"field {where or key!r} must be an object, got {_show(value)}")
    return value


def _list(obj: Mapping[str, Any], key: str, limit: int, *, where: str | None = None) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise HealthReportError(f"field {where or key!r} must be a list, got {_show(value)}")
    if len(value) > limit:
        raise HealthReportError(f"field {where or key!r} has more than {limit} entries")
    return value


def _check_string(value: object, where: str, limit: int) -> str:
    if not isinstance(value, str):
        raise HealthReportError(f"field {where!r} must be a string, got {_show(value)}")
    if len(value) > limit:
        raise HealthReportError(f"field {where!r} is longer than {limit} characters")
    return value


@overload
def _string(
    obj: Mapping[str, Any], key: str, *, required: Literal[True], limit: int = ...
) -> str: ...
@overload
def _string(
    obj: Mapping[str, Any], key: str, *, required: Literal[False] = ..., limit: int = ...
) -> str | None: ...
def _string(
    obj: Mapping[str, Any], key: str, *, required: bool = False, limit: int = MAX_NAME
) -> str | None:
    value = obj.get(key)
    if value is None:
        if required:
            raise HealthReportError(f"field {key!r} is missing")
        return None
    return _check_string(value, key, limit)


def _bool(obj: Mapping[str, Any], key: str, *, where: str) -> bool:
    value = obj.get(key)
    if not isinstance(value, bool):
        raise HealthReportError(f"field {where!r} must be true or false, got {_show(value)}")
    return value


def _opt_bool(obj: Mapping[str, Any], key: str) -> bool:
    """An optional flag: absent or ``null`` is False."""
    if obj.get(key) is None:
        return False
    return _bool(obj, key, where=key)


def _int(
    obj: Mapping[str, Any], key: str, *, where: str | None = None, signed: bool = False
) -> int:
    value = obj.get(key)
    low = -MAX_INT if signed else 0
    try:
        return bounded_int(value, low, MAX_INT)
    except IntegerError as exc:
        if exc.out_of_range:
            raise HealthReportError(
                f"field {where or key!r} is out of range [{low}, {MAX_INT}]"
            ) from None
        raise HealthReportError(
            f"field {where or key!r} must be an integer, got {_show(value)}"
        ) from None


def _opt_int(obj: Mapping[str, Any], key: str, *, signed: bool = False) -> int | None:
    if obj.get(key) is None:
        return None
    return _int(obj, key, signed=signed)


def _opt_failure(value: object) -> WorkerFailure | None:
    if value is None:
        return None
    try:
        return WorkerFailure.from_json(value)
    except FailureRecordError as exc:
        raise HealthReportError(str(exc)) from None


def _opt_decision(value: object) -> PolicyDecision | None:
    if value is None:
        return None
    try:
        return PolicyDecision.from_json(value)
    except FailurePolicyError as exc:
        raise HealthReportError(str(exc)) from None


def _opt_restore(value: object) -> RestoreReport | None:
    if value is None:
        return None
    try:
        return RestoreReport.from_status(value)
    except ValueError as exc:
        raise HealthReportError(f"field 'lastRestore': {exc}") from None


def _opt_port(obj: Mapping[str, Any], key: str) -> int | None:
    port = _opt_int(obj, key)
    if port is not None and port > 65535:
        raise HealthReportError(f"field {key!r} is not a port number: {port}")
    return port


def _opt_num(obj: Mapping[str, Any], key: str, *, where: str | None = None) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise HealthReportError(f"field {where or key!r} must be a number, got {_show(value)}")
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise HealthReportError(f"field {where or key!r} is out of range")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise HealthReportError(f"field {where or key!r} must be finite and >= 0, got {value!r}")
    return number


def _worker(value: object, index: int) -> WorkerStatus:
    if not isinstance(value, dict):
        raise HealthReportError(f"field 'workers[{index}]' must be an object, got {_show(value)}")
    return WorkerStatus(
        local_rank=_int(value, "localRank", where=f"workers[{index}].localRank"),
        pid=_opt_int(value, "pid", signed=True),
        exit_code=_opt_int(value, "exitCode", signed=True),
    )


def as_dict(report: HealthReport) -> dict[str, Any]:
    """Plain-dict view (snake_case) for logs and tests."""
    return asdict(report)
