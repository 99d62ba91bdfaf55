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
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

SCHEMA_VERSION = 1
DEFAULT_HEALTH_PORT = 29401


class AgentState(str, Enum):
    STARTING = "Starting"
    RENDEZVOUS = "Rendezvous"
    """Blocked in ``next_rendezvous()``; ``waitingSince`` says since when."""
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
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, data: object) -> HealthReport:
        """Parse a report; raise ``HealthReportError`` naming the first bad field."""
        if not isinstance(data, dict):
            raise HealthReportError("health report must be a JSON object")
        version = data.get("schemaVersion")
        if version != SCHEMA_VERSION:
            raise HealthReportError(
                f"unsupported health report schemaVersion {version!r} (expected {SCHEMA_VERSION})"
            )
        try:
            etcd = data["etcd"]
            restarts = data["restarts"]
            return cls(
                run_id=_typed(data, "runId", str),
                node=_typed(data, "node", str),
                state=AgentState(data["state"]),
                etcd=EtcdStatus(
                    reachable=_typed(etcd, "reachable", bool),
                    last_contact=_opt_num(etcd, "lastContact"),
                    unreachable_since=_opt_num(etcd, "unreachableSince"),
                    endpoints=tuple(str(e) for e in etcd.get("endpoints", [])),
                ),
                round=_opt_int(data, "round"),
                group_rank=_opt_int(data, "groupRank"),
                group_world_size=_opt_int(data, "groupWorldSize"),
                world_size=_opt_int(data, "worldSize"),
                restarts_total=_typed(restarts, "total", int),
                restarts_by_reason={
                    str(k): int(v) for k, v in dict(restarts.get("byReason", {})).items()
                },
                max_restarts=_typed(data, "maxRestarts", int),
                waiting_since=_opt_num(data, "waitingSince"),
                last_rendezvous_seconds=_opt_num(data, "lastRendezvousSeconds"),
                last_progress=_opt_num(data, "lastProgress"),
                workers=tuple(
                    WorkerStatus(
                        local_rank=_typed(w, "localRank", int),
                        pid=_opt_int(w, "pid"),
                        exit_code=_opt_int(w, "exitCode"),
                    )
                    for w in data.get("workers", [])
                ),
                worst_case_time_to_fail_seconds=_opt_num(data, "worstCaseTimeToFailSeconds"),
                exit_reason=data.get("exitReason"),
                updated_at=float(data.get("updatedAt", 0.0)),
            )
        except HealthReportError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise HealthReportError(f"invalid health report: {exc!r}") from exc

    @classmethod
    def loads(cls, text: str | bytes) -> HealthReport:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise HealthReportError(f"health report is not JSON: {exc}") from exc
        return cls.from_json(data)


def as_dict(report: HealthReport) -> dict[str, Any]:
    """Plain-dict view (snake_case) for logs and tests."""
    return asdict(report)


def _typed(obj: Mapping[str, Any], key: str, kind: type[Any]) -> Any:
    value = obj[key]
    # bool is an int subclass: refuse it where an int is meant.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise HealthReportError(f"field {key!r} must be {kind.__name__}, got {value!r}")
    return value


def _opt_int(obj: Mapping[str, Any], key: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    return int(_typed(obj, key, int))


def _opt_num(obj: Mapping[str, Any], key: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise HealthReportError(f"field {key!r} must be a number, got {value!r}")
    return float(value)
