"""The NetworkPolicies of a job (pure builders).

Two policies, owned by the job, limit who reaches its pods (ingress only; egress is the user's):

- ``<job>-etcd`` selects the job's managed etcd pods: the client port only from the job's own
  worker pods and from the operator; the plain-HTTP ``/health`` and ``/metrics`` port only from
  the operator (and Prometheus, when configured).
- ``<job>-workers`` selects the job's worker pods: any port from the job's other workers
  (collectives, the store, ``MASTER_PORT``), and the agents' health port from the operator (and
  Prometheus, when configured). Nothing else: a user who needs more (e.g. a dashboard port) adds
  a policy of their own; Kubernetes allows what any policy allows.

Policies only act where the cluster's network plugin enforces them (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from elasticjob_agent.protocol.health import DEFAULT_HEALTH_PORT

from . import names
from .names import JobRef

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Set by the API server on every namespace: selects a namespace by its name."""


@dataclass(frozen=True)
class Peer:
    """Pods allowed in: a namespace selector (labels) and a pod selector (labels)."""

    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    pod_labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def in_namespace(cls, namespace: str, pod_labels: Mapping[str, str]) -> Peer:
        return cls({NAMESPACE_NAME_LABEL: namespace}, dict(pod_labels))

    def to_json(self) -> dict[str, Any]:
        return {
            "namespaceSelector": {"matchLabels": dict(self.namespace_labels)},
            "podSelector": {"matchLabels": dict(self.pod_labels)},
        }


@dataclass(frozen=True)
class PolicySettings:
    """Who the policies let in besides the job's own pods."""

    operator: Peer
    prometheus: Peer | None = None


def _policy(
    job: JobRef, name: str, selects: Mapping[str, str], rules: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": {names.LABEL_JOB: job.name},
            "ownerReferences": [job.owner_reference()],
        },
        "spec": {
            "podSelector": {"matchLabels": dict(selects)},
            "policyTypes": ["Ingress"],
            "ingress": rules,
        },
    }


def _tcp(port: int) -> dict[str, Any]:
    return {"protocol": "TCP", "port": port}


def build_network_policies(
    job: JobRef, operator: Peer, prometheus: Peer | None, *, managed_etcd: bool
) -> list[dict[str, Any]]:
    """The job's policies (the etcd one only for a managed etcd)."""
    workers = {"podSelector": {"matchLabels": names.worker_selector(job.name)}}
    scrapers = [operator.to_json(), *([prometheus.to_json()] if prometheus else [])]
    policies = [
        _policy(
            job,
            names.workers_network_policy_name(job.name),
            names.worker_selector(job.name),
            [
                {"from": [workers]},
                {"from": scrapers, "ports": [_tcp(DEFAULT_HEALTH_PORT)]},
            ],
        )
    ]
    if managed_etcd:
        policies.append(
            _policy(
                job,
                names.etcd_network_policy_name(job.name),
                names.etcd_selector(job.name),
                [
                    {
                        "from": [workers, operator.to_json()],
                        "ports": [_tcp(names.ETCD_CLIENT_PORT)],
                    },
                    {"from": scrapers, "ports": [_tcp(names.ETCD_METRICS_PORT)]},
                ],
            )
        )
    return policies
