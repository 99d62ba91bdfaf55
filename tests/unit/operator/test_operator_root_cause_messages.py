"""Every kind of root cause names its node and pod: ``status.lastFailure``, the ``Restarted``
Event and the ``Failed`` condition, one planning step each on the in-memory model, with a
survivor's transport error kept as secondary evidence."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.failure import WorkerFailure
from elasticjob_operator.core.observed import PodPhase, StartFailure
from elasticjob_operator.core.status import JobStatus, Phase, StallState

from tests.support.operator_model import T0, Cluster, job_spec, report, step
from tests.support.operator_model import started as _started

W0, W1 = "demo-worker-0-0", "demo-worker-1-0"
IPS = {W0: "10.100.0.7", W1: "10.100.1.3"}
NODES = {W0: "real-0", W1: "real-1"}

SURVIVOR = WorkerFailure(
    local_rank=0,
    time=T0 + 4,
    rank=0,
    exit_code=1,
    exception_type="RuntimeError",
    message=f"[pair.cc:534] Read error [{IPS[W1]}]:47024: Connection reset by peer",
    round=1,
)
"""Rank 0's gloo error on the survivor: its peer on ``W1`` went away."""
OWN = WorkerFailure(local_rank=0, time=T0 + 3, rank=1, round=1)
"""A failure of rank 1's own on ``W1`` (each case fills in how it ended)."""


def _placed(cluster: Cluster) -> JobStatus:
    status = _started(cluster)
    for pod in (W0, W1):
        cluster.set(pod, joined=True, node=NODES[pod], ip=IPS[pod])
    return status


def _start_failure(reason: str, message: str) -> StartFailure:
    return StartFailure(
        slot="worker-1", pod=W1, container="trainer", reason=reason, message=message
    )


# (case, what W1's pod shows, W1's agent's own record, step extras, lastFailure kind, headline)
CASES: list[tuple[str, dict[str, Any], WorkerFailure | None, dict[str, Any], str, str]] = [
    (
        "node lost",
        {},
        None,
        {"lost_nodes": frozenset({NODES[W1]})},
        "NodeLost",
        f"node real-1 lost (pod {W1})",
    ),
    (
        "pod deleted",
        {"deleting": True, "deleted_at": T0 + 3},
        None,
        {},
        "PodDeleted",
        f"pod {W1} deleted (node real-1)",
    ),
    (
        "pod evicted",
        {"deleting": True, "deleted_at": T0 + 3, "disruption": "EvictionByEvictionAPI"},
        None,
        {},
        "PodEvicted",
        f"pod {W1} evicted (node real-1): EvictionByEvictionAPI",
    ),
    (
        "pod preempted",
        {"deleting": True, "deleted_at": T0 + 3, "disruption": "PreemptionByScheduler"},
        None,
        {},
        "PodPreempted",
        f"pod {W1} preempted (node real-1)",
    ),
    (
        "container OOMKilled",
        {"phase": PodPhase.FAILED, "exit_code": 137, "oom_killed": True, "finished_at": T0 + 3},
        None,
        {},
        "OOMKilled",
        f"pod {W1} OOMKilled (node real-1)",
    ),
    (
        "image not pulled",
        {"start_failure": _start_failure("ErrImagePull", "not found")},
        None,
        {},
        "ImageNotPulled",
        f"pod {W1} image not pulled (node real-1): ErrImagePull: not found",
    ),
    (
        "a rank's exception",
        {},
        replace(OWN, exit_code=1, exception_type="ValueError", message="loss is nan"),
        {},
        "WorkerFailed",
        f"rank 1 on pod {W1} (node real-1) exited with code 1: ValueError: loss is nan",
    ),
    (
        "a rank killed by SIGKILL",
        {},
        replace(OWN, signal="SIGKILL"),
        {},
        "WorkerFailed",
        f"rank 1 on pod {W1} (node real-1) killed by SIGKILL",
    ),
    (
        "a rank's sys.exit(3)",
        {},
        replace(OWN, exit_code=3, output_tail="step 7\n"),
        {},
        "WorkerFailed",
        f"rank 1 on pod {W1} (node real-1) exited with code 3: step 7",
    ),
    (
        "a hang found by the agent",
        {},
        replace(OWN, signal="SIGKILL", message="no training step for 60 s after step 7"),
        {},
        "WorkerFailed",
        f"rank 1 on pod {W1} (node real-1) killed by SIGKILL: no training step for 60 s after "
        "step 7",
    ),
]


@pytest.mark.parametrize(
    ("pod", "own", "extra", "kind", "headline"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_each_kind_of_cause_names_its_node_and_pod(
    pod: dict[str, Any],
    own: WorkerFailure | None,
    extra: dict[str, Any],
    kind: str,
    headline: str,
) -> None:
    cluster = Cluster()
    status = _placed(cluster)
    if pod:
        cluster.set(W1, **pod)
    reports = {W0: replace(report(W0, restarts={"failure": 1}), last_failure=SURVIVOR)}
    if own is not None:
        reports[W1] = replace(report(W1, restarts={"failure": 1}), last_failure=own)
    result = step(
        cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports, **extra
    )
    stored = result.status.last_failure
    assert stored is not None
    assert (stored["kind"], stored["node"], stored["pod"]) == (kind, NODES[W1], W1), stored
    # The survivor's symptom is kept, as secondary evidence.
    assert [e["kind"] for e in stored["secondary"]] == ["ConnectionLost"], stored
    assert f"on pod {W0} (node real-0)" in stored["secondary"][0]["summary"]
    restarted = [e.message for e in result.events if e.reason == "Restarted"]
    assert len(restarted) == 1 and restarted[0].endswith(f"root cause: {headline}"), restarted


def test_etcd_lost_names_the_etcd_pod_and_its_node() -> None:
    cluster = Cluster()
    status = _placed(cluster)
    (etcd,) = cluster.etcd()
    status = status.evolve(stall=StallState("EtcdUnavailable", "etcd unreachable for 4 s", T0 + 2))
    store_error = replace(SURVIVOR, message="TCPStore: Broken pipe", time=T0 + 3)
    reports = {
        W0: replace(
            report(W0, restarts={"failure": 1}, etcd_reachable=False), last_failure=store_error
        )
    }
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=False, reports=reports)
    stored = result.status.last_failure
    assert stored is not None
    assert (stored["kind"], stored["node"], stored["pod"]) == ("EtcdLost", etcd.node, etcd.name)
    (restarted,) = [e.message for e in result.events if e.reason == "Restarted"]
    assert f"root cause: etcd lost (pod {etcd.name} on node {etcd.node}): etcd unr" in restarted


def test_a_symptom_alone_points_at_the_peer_its_error_names() -> None:
    """The node's loss is not seen yet (the node controller takes 40 s): the Restarted Event
    says the cause is not known, and names the pod (and node) whose address the survivor's
    transport error carries."""
    cluster = Cluster()
    status = _placed(cluster)
    reports = {W0: replace(report(W0, restarts={"failure": 1}), last_failure=SURVIVOR)}
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    (restarted,) = [e.message for e in result.events if e.reason == "Restarted"]
    assert (
        f"root cause not known yet; a survivor's symptom (ConnectionLost) points at pod {W1} "
        f"(node real-1): rank 0 on pod {W0} (node real-0) exited with code 1"
    ) in restarted, restarted
    # An address that is no pod of the job (or the survivor's own) points at nobody.
    elsewhere = replace(SURVIVOR, message="Read error [10.9.9.9]:1: Connection reset by peer")
    cluster = Cluster()
    status = _placed(cluster)
    reports = {W0: replace(report(W0, restarts={"failure": 1}), last_failure=elsewhere)}
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    (restarted,) = [e.message for e in result.events if e.reason == "Restarted"]
    assert "points at" not in restarted and "(ConnectionLost): rank 0" in restarted, restarted


def test_an_image_that_cannot_be_pulled_before_the_group_formed_is_the_cause() -> None:
    """No agent ever ran, so none reports: what the kubelet says is the job's failure."""
    cluster = Cluster()
    spec = job_spec()
    result = step(cluster, JobStatus(), spec, T0)
    cluster.run_all()
    cluster.set(W1, phase=PodPhase.PENDING, node="real-1", start_failure=_start_failure(
        "ImagePullBackOff", 'Back-off pulling image "nowhere/none:1"'
    ))  # fmt: skip
    result = step(cluster, result.status, spec, T0 + 2, etcd_reachable=True)
    stored = result.status.last_failure
    assert stored is not None
    assert (stored["kind"], stored["node"], stored["pod"]) == ("ImageNotPulled", "real-1", W1)
    # Once the group formed, a pod that never joined (a replacement, a spare) is not the
    # group's failure by its image alone.
    cluster = Cluster()
    status = _placed(cluster).evolve(round=1)
    cluster.set(W1, joined=False, start_failure=_start_failure("ErrImagePull", "x"))
    result = step(cluster, status, spec, T0 + 5, etcd_reachable=True)
    assert result.status.last_failure is None


def test_the_failed_condition_names_the_node_and_pod_of_the_last_cause() -> None:
    cluster = Cluster()
    status = _placed(cluster)
    raised = replace(OWN, exit_code=1, exception_type="ValueError", message="loss is nan")
    reports = {W1: replace(report(W1, restarts={"failure": 1}), last_failure=raised)}
    status = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports).status
    cluster.set(W0, phase=PodPhase.FAILED, exit_code=ExitCode.MAX_RESTARTS_EXCEEDED)
    cluster.set(W1, phase=PodPhase.FAILED, exit_code=ExitCode.MAX_RESTARTS_EXCEEDED)
    result = step(cluster, status, job_spec(), T0 + 6, etcd_reachable=True)
    assert result.status.phase is Phase.FAILED
    (failed,) = [c for c in result.status.conditions if c.get("type") == "Failed"]
    assert failed["message"].endswith(
        f"last root cause: rank 1 on pod {W1} (node real-1) exited with code 1: "
        "ValueError: loss is nan"
    ), failed


def test_a_pod_deleted_by_someone_else_is_a_failure_by_itself() -> None:
    """A graceful delete: the agents may re-form without any worker failing (no record), yet
    the group lost a member: the deletion is the cause."""
    cluster = Cluster()
    status = _placed(cluster)
    cluster.set(W1, deleting=True, deleted_at=T0 + 3)
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True)
    stored = result.status.last_failure
    assert stored is not None
    assert (stored["kind"], stored["node"], stored["pod"]) == ("PodDeleted", NODES[W1], W1)


@pytest.mark.parametrize(
    ("how", "changes"),
    [
        ("scaled away", {"spec": {"replicas": 1}}),
        ("replaced (an older attempt)", {"attempts": {1: 1}}),
        ("suspended", {"phase": Phase.SUSPENDED}),
    ],
)
def test_a_pod_the_operator_deletes_itself_is_no_failure(how: str, changes: dict[str, Any]) -> None:
    cluster = Cluster()
    status = _placed(cluster)
    cluster.set(W1, deleting=True, deleted_at=T0 + 3)
    spec = job_spec(**changes.get("spec", {}))
    if "attempts" in changes:
        status = status.evolve(attempts=changes["attempts"])
    if "phase" in changes:
        status = status.evolve(phase=changes["phase"])
        spec = job_spec(runPolicy={"suspend": True})
    result = step(cluster, status, spec, T0 + 5, etcd_reachable=True)
    assert result.status.last_failure is None, how


def test_an_etcd_pod_that_ended_is_named_in_the_step_it_is_replaced() -> None:
    """Its container killed: the operator replaces the pod at once (the next generation), so
    the lost pod is named while it is still there, not the new generation's."""
    cluster = Cluster()
    status = _placed(cluster)
    (etcd,) = cluster.etcd()
    assert status.etcd.ready_generation == status.etcd.generation == 0
    cluster.set(etcd.name, phase=PodPhase.FAILED, exit_code=137, finished_at=T0 + 3)
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=False)
    assert result.status.etcd.generation == 1  # replaced in this step
    stored = result.status.last_failure
    assert stored is not None
    assert (stored["kind"], stored["node"], stored["pod"]) == ("EtcdLost", etcd.node, etcd.name)
    # The stall that follows, named by the new generation, does not take the headline.
    later = result.status.evolve(
        stall=StallState("EtcdUnavailable", "etcd unreachable for 4 s", T0 + 6)
    )
    after = step(cluster, later, job_spec(), T0 + 8, etcd_reachable=False)
    stored = after.status.last_failure
    assert stored is not None and stored["pod"] == etcd.name, stored


def test_a_cause_known_only_after_the_restart_was_counted_gets_its_own_event() -> None:
    """The survivor's agent counts the restart first, with no record yet; the record of the
    rank that raised comes one poll later: a RootCause Event names it then, once."""
    cluster = Cluster()
    status = _placed(cluster)
    counted = step(
        cluster,
        status,
        job_spec(),
        T0 + 5,
        etcd_reachable=True,
        reports={W0: report(W0, restarts={"failure": 1})},
    )
    (restarted,) = [e.message for e in counted.events if e.reason == "Restarted"]
    assert "root cause" not in restarted and counted.status.last_failure is None
    raised = replace(OWN, exit_code=1, exception_type="ValueError", message="loss is nan")
    reports = {
        W0: report(W0, restarts={"failure": 1}),
        W1: replace(report(W1, restarts={"failure": 1}), last_failure=raised),
    }
    known = step(cluster, counted.status, job_spec(), T0 + 6, etcd_reachable=True, reports=reports)
    (event,) = [e for e in known.events if e.reason == "RootCause"]
    assert event.type == "Warning" and event.message == (
        f"root cause: rank 1 on pod {W1} (node real-1) exited with code 1: ValueError: loss is "
        "nan (round 1)"
    )
    again = step(cluster, known.status, job_spec(), T0 + 7, etcd_reachable=True, reports=reports)
    assert not [e for e in again.events if e.reason == "RootCause"]


def test_a_cause_seen_with_no_restart_of_a_failure_gets_its_own_event() -> None:
    cluster = Cluster()
    status = _placed(cluster)
    cluster.set(W1, phase=PodPhase.FAILED, exit_code=137, oom_killed=True, finished_at=T0 + 3)
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True)
    (event,) = [e.message for e in result.events if e.reason == "RootCause"]
    assert event == f"root cause: pod {W1} OOMKilled (node real-1) (round 0)"


def test_an_earlier_failures_cause_is_not_quoted_for_a_later_restart() -> None:
    cluster = Cluster()
    status = _placed(cluster)
    raised = replace(OWN, exit_code=1, exception_type="ValueError", message="loss is nan")
    reports = {W1: replace(report(W1, restarts={"failure": 1}), last_failure=raised)}
    first = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    assert first.status.last_failure is not None
    later = {W0: report(W0, restarts={"failure": 2})}
    result = step(cluster, first.status, job_spec(), T0 + 600, etcd_reachable=True, reports=later)
    (restarted,) = [e.message for e in result.events if e.reason == "Restarted"]
    assert "root cause" not in restarted, restarted


def test_an_agent_that_alone_cannot_reach_etcd_is_no_loss_of_etcd() -> None:
    """Every rank raised; one agent, starved, did not reach etcd for a few seconds and the job
    stalled for it, while the operator's probe reached etcd: the ranks' failure is the cause."""
    cluster = Cluster()
    status = _placed(cluster).evolve(
        stall=StallState("EtcdUnavailable", "1 agent(s) cannot reach etcd (for 6 s)", T0 + 2)
    )
    raised = replace(OWN, exit_code=1, exception_type="RuntimeError", message="injected")
    reports = {
        W0: replace(report(W0, restarts={"failure": 1}, etcd_reachable=False), last_failure=None),
        W1: replace(report(W1, restarts={"failure": 1}), last_failure=raised),
    }
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    stored = result.status.last_failure
    assert stored is not None and (stored["kind"], stored["pod"]) == ("WorkerFailed", W1), stored
    assert "EtcdLost" not in [e["kind"] for e in stored["secondary"]]
