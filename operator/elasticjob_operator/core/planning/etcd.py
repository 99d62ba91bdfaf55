"""The managed etcd: created, probed, recreated when lost (one ``etcd-recovered`` restart per
generation) and seeded with the job's restart counts.
"""

from __future__ import annotations

from elasticjob_agent.protocol.endpoints import format_endpoints
from elasticjob_agent.protocol.health import AgentState
from elasticjob_agent.protocol.keys import JobKeys

from .. import manifests, names, restarts, seeding
from ..observed import Observed, PodView, current_etcd
from ..spec import EtcdMode, JobSpec
from ..stall import EtcdView, StallSettings
from ..status import EtcdState
from .actions import CreateObject, DeletePod, Draft, WriteSeed


def manage_etcd(
    draft: Draft,
    job: names.JobRef,
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
            endpoint=format_endpoints(spec.etcd.endpoints),
            pod=None,
            managed=False,
            ever_ready=state.ready_generation >= 0,
            unreachable_since=state.unreachable_since,
        )

    current = current_etcd(observed.etcd_pods, state.generation)
    if current is not None and current.index > state.generation:
        # A status write was lost: adopt what exists.
        state = EtcdState(
            current.index, state.ready_generation, state.seeded_generation, state.unreachable_since
        )
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
    endpoint = format_endpoints(manifests.rdzv_endpoints(job, spec)[:1])
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
    for pod in observed.etcd_pods:
        if pod.index < state.generation and not pod.deleting:
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
    if observed.agent_reaches_etcd(run_id):
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
