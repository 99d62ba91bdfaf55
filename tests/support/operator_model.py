"""Builders of specs, pods and health reports for the operator's pure unit tests.

``Cluster`` is an in-memory stand-in for the objects planning reads and writes (pure tests at our
own boundary: ``plan`` takes values and returns values; nothing here imitates the API server).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

from elasticjob_agent.protocol.health import AgentState, EtcdStatus, HealthReport
from elasticjob_operator.core import names, planning, restarts
from elasticjob_operator.core.names import JobRef
from elasticjob_operator.core.observed import Observed, PodPhase, PodView, pod_view
from elasticjob_operator.core.spec import JobSpec, parse_spec
from elasticjob_operator.core.status import JobStatus

JOB = JobRef("ns", "demo", "0123abcd-0000-0000-0000-000000000000")
RUN_ID = JOB.run_id
T0 = 1_700_000_000.0


def raw_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": 2,
        "minNodes": 1,
        "maxNodes": 4,
        "device": "cpu",
        "nprocPerNode": 2,
        "maxRestarts": 3,
        "stallTimeoutSeconds": 60,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "trainer",
                        "image": "img",
                        "command": ["python", "examples/train.py"],
                        "args": ["--steps", "10"],
                    }
                ]
            }
        },
    }
    spec.update(overrides)
    return spec


def job_spec(**overrides: Any) -> JobSpec:
    return parse_spec(raw_spec(**overrides))


def report(
    node: str,
    state: AgentState = AgentState.RUNNING,
    *,
    round_: int | None = 1,
    world_size: int | None = 4,
    restarts: dict[str, int] | None = None,
    etcd_reachable: bool = True,
    unreachable_since: float | None = None,
    waiting_since: float | None = None,
    last_rendezvous_seconds: float | None = None,
    run_id: str = RUN_ID,
) -> HealthReport:
    return HealthReport(
        run_id=run_id,
        node=node,
        state=state,
        etcd=EtcdStatus(
            reachable=etcd_reachable, last_contact=None, unreachable_since=unreachable_since
        ),
        round=round_,
        world_size=world_size,
        restarts_total=sum((restarts or {}).values()),
        restarts_by_reason=restarts or {},
        waiting_since=waiting_since,
        last_rendezvous_seconds=last_rendezvous_seconds,
    )


@dataclass
class Cluster:
    """Pods by name as ``PodView`` values, plus Services; mutated by ``apply``."""

    pods: dict[str, PodView] = field(default_factory=dict)
    services: set[str] = field(default_factory=set)
    seeds: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)

    def apply(self, plan: planning.Plan, upto: int | None = None) -> None:
        """Run the plan's actions (the first ``upto`` of them: a crash after that many)."""
        for action in plan.actions[:upto]:
            if isinstance(action, planning.CreateObject):
                manifest = copy.deepcopy(dict(action.manifest))
                name = manifest["metadata"]["name"]
                if manifest["kind"] == "Service":
                    self.services.add(name)
                elif name not in self.pods:
                    view = pod_view(manifest)
                    assert view is not None
                    self.pods[name] = view
                    self.created.append(name)
            elif isinstance(action, planning.DeletePod):
                self.pods.pop(action.name, None)
            elif isinstance(action, planning.MarkJoined):
                if action.pod in self.pods:
                    self.pods[action.pod] = replace(self.pods[action.pod], joined=True)
            elif isinstance(action, planning.MarkStoodBy):
                if action.pod in self.pods:
                    self.pods[action.pod] = replace(self.pods[action.pod], stood_by=True)
            elif isinstance(action, planning.WriteSeed):
                self.seeds.append(restarts.seed_json(action.seed))

    def set(self, name: str, **changes: Any) -> None:
        self.pods[name] = replace(self.pods[name], **changes)

    def run_all(self, ip_prefix: str = "10.0.0.") -> None:
        """Every pending pod runs (gets an IP and a node)."""
        for i, (name, pod) in enumerate(sorted(self.pods.items())):
            if pod.phase is PodPhase.PENDING:
                self.pods[name] = replace(
                    pod, phase=PodPhase.RUNNING, ip=f"{ip_prefix}{i + 10}", node="node-a"
                )

    def workers(self) -> list[PodView]:
        return sorted(
            (p for p in self.pods.values() if p.role == names.ROLE_WORKER), key=lambda p: p.name
        )

    def etcd(self) -> list[PodView]:
        return sorted(
            (p for p in self.pods.values() if p.role == names.ROLE_ETCD), key=lambda p: p.name
        )

    def observed(self, **extra: Any) -> Observed:
        return Observed(workers=tuple(self.workers()), etcd_pods=tuple(self.etcd()), **extra)


def step(
    cluster: Cluster,
    status: JobStatus,
    spec: JobSpec,
    now: float,
    **observed: Any,
) -> planning.Plan:
    """Plan one step against ``cluster``, apply it fully, return the plan."""
    result = planning.plan(
        JOB,
        spec=spec,
        generation=1,
        status=status,
        observed=cluster.observed(**observed),
        now=now,
        services=frozenset(cluster.services),
    )
    cluster.apply(result)
    return result


def started(cluster: Cluster, replicas: int = 2) -> JobStatus:
    """Create the job's objects, let them run, reach etcd: the status after that."""
    spec = job_spec(replicas=replicas)
    result = step(cluster, JobStatus(), spec, T0)
    cluster.run_all()
    result = step(cluster, result.status, spec, T0 + 1, etcd_reachable=True)
    return result.status
