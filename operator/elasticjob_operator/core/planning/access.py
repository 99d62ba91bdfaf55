"""Who may reach a job: its NetworkPolicies and its managed etcd's certificates Secret, created
first in a step so that no pod of the job starts unguarded."""

from __future__ import annotations

from .. import names
from ..netpol import PolicySettings, build_network_policies
from ..observed import Observed
from ..spec import EtcdMode, JobSpec
from ..status import JobStatus
from .actions import Action, CreateEtcdTlsSecret, CreatePolicies


def guard(
    job: names.JobRef,
    spec: JobSpec,
    status: JobStatus,
    observed: Observed,
    policies: PolicySettings | None,
) -> tuple[Action, ...]:
    """The actions that create what guards the job: its NetworkPolicies when ``policies`` says
    whom they let in (``None``: none, or created already), and the managed etcd's TLS Secret
    when it is missing. Nothing for a finished job."""
    if status.phase.finished:
        return ()
    actions: list[Action] = []
    managed = spec.etcd.mode is EtcdMode.MANAGED
    if policies is not None:
        made = build_network_policies(
            job, policies.operator, policies.prometheus, managed_etcd=managed
        )
        actions.append(CreatePolicies(tuple(made)))
    if observed.tls_secret_missing and managed and spec.etcd.tls:
        actions.append(CreateEtcdTlsSecret())
    return tuple(actions)
