"""The job's Services and worker pods: one pod per index (``replicas`` plus hot spares),
replaced (with a new attempt number) when it fails or its node is lost, counted by the operator
when no agent could.
"""

from __future__ import annotations

from collections.abc import Mapping

from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.failure_policy import Action as PolicyAction

from .. import kueue, manifests, names, policy_status, restarts
from ..observed import Observed, PodPhase, PodView, current_workers
from ..spec import EtcdMode, JobSpec
from .actions import CreateObject, DeletePod, Draft
from .policy import record_decision


def ensure_services(
    draft: Draft, job: names.JobRef, spec: JobSpec, services: frozenset[str]
) -> None:
    if names.workers_service_name(job.name) not in services:
        draft.actions.append(CreateObject(manifests.build_workers_service(job)))
    if spec.etcd.mode is EtcdMode.MANAGED and names.etcd_service_name(job.name) not in services:
        draft.actions.append(CreateObject(manifests.build_etcd_service(job)))


def _replacement_reason(pod: PodView, lost_nodes: frozenset[str]) -> str | None:
    """The operator's restart reason for replacing ``pod``, or ``None`` when it does not count."""
    if pod.joined:
        return None  # its agent was in a round: the agents counted the group restart
    if pod.stood_by:
        return None  # a hot spare held no place in a group: its loss restarts nothing
    if pod.exit_code == ExitCode.ETCD_UNREACHABLE:
        return None  # etcd's fault: counted once as etcd-recovered when etcd is recreated
    if pod.phase is PodPhase.FAILED and not pod.evicted and pod.node not in lost_nodes:
        if pod.exit_code == ExitCode.TERMINATED:
            return restarts.POD_LOST
        return restarts.POD_FAILURE
    return restarts.POD_LOST


def _needs_replacement(pod: PodView, lost_nodes: frozenset[str]) -> bool:
    if pod.phase is PodPhase.SUCCEEDED:
        return False
    return (
        pod.phase is PodPhase.FAILED
        or pod.deleting
        or (pod.node is not None and pod.node in lost_nodes)
    )


def manage_workers(
    draft: Draft, job: names.JobRef, spec: JobSpec, observed: Observed, now: float
) -> kueue.Admission:
    attempts = dict(draft.status.attempts)
    counts = dict(draft.status.restarts)
    lost_nodes = observed.lost_nodes
    for pod in observed.workers:  # adopt pods newer than the status says (a lost status write)
        if pod.attempt > attempts.get(pod.index, 0):
            attempts[pod.index] = pod.attempt
    current = current_workers(observed.workers, attempts)
    admission = kueue.decide(spec, current, observed.workers, lost_nodes)
    for pod in admission.release:  # the core lost its admission: extras go, new names later
        attempts[pod.index] = pod.attempt + 1
        draft.commit_first = True
        draft.event("Normal", "ExtraReleased", f"{pod.name} deleted: the core is queued again")
    current = current_workers(observed.workers, attempts)
    for index in range(spec.worker_pods):
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
        if reason == restarts.POD_FAILURE:
            decided = policy_status.pod_decision(
                spec.failure_policy, found, draft.status.round, now
            )
            if decided is not None:
                record_decision(draft, decided, now)
                if decided.action is PolicyAction.IGNORE:
                    reason = restarts.POD_IGNORED
        if reason is not None:
            counts = restarts.bump(counts, reason)
        attempts[index] = attempt + 1
        draft.commit_first = True
        why = _describe_loss(found, lost_nodes)
        draft.event(
            "Warning",
            "WorkerReplaced",
            f"worker pod {found.name} {why}; creating attempt {attempt + 1}"
            + (
                f" (restart reason {reason})"
                if reason
                else " (a hot spare: no restart)"
                if found.stood_by and not found.joined
                else " (the agents count this restart)"
            ),
        )
        if index not in admission.hold:
            draft.actions.append(
                CreateObject(manifests.build_worker_pod(job, spec, index, attempt + 1))
            )
    for pod in observed.workers:
        superseded = pod.attempt < attempts.get(pod.index, 0)
        scaled_away = pod.index >= spec.worker_pods
        on_lost_node = pod.node is not None and pod.node in lost_nodes
        if superseded or scaled_away:
            if not pod.deleting:
                draft.actions.append(DeletePod(pod.name, force=on_lost_node))
            elif on_lost_node:
                draft.actions.append(DeletePod(pod.name, force=True))  # stuck Terminating
    draft.status = draft.status.evolve(attempts=attempts, restarts=counts)
    return admission


def policy_fails_a_pod(
    draft: Draft,
    spec: JobSpec,
    workers: Mapping[int, PodView],
    lost_nodes: frozenset[str],
    now: float,
) -> tuple[str, str] | None:
    """A worker pod failed before its agent joined a round (no agent decided it) and a
    ``FailJob`` rule matches it: the job fails instead of replacing the pod."""
    for pod in workers.values():
        if not _needs_replacement(pod, lost_nodes):
            continue
        if _replacement_reason(pod, lost_nodes) != restarts.POD_FAILURE:
            continue
        decided = policy_status.pod_decision(spec.failure_policy, pod, draft.status.round, now)
        if decided is not None and decided.action is PolicyAction.FAIL_JOB:
            record_decision(draft, decided, now)
            return (ExitCode.FAILURE_POLICY.reason, decided.summary())
    return None


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
