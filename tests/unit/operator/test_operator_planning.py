"""plan(): scenarios from creation to the end of a job, one table or story per rule."""

from __future__ import annotations

from dataclasses import replace

from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.health import AgentState, HealthReport
from elasticjob_operator.core import planning, restarts
from elasticjob_operator.core.conditions import ConditionType, find_condition, is_true
from elasticjob_operator.core.observed import PodPhase
from elasticjob_operator.core.status import JobStatus, Phase

from tests.support.operator_model import JOB, RUN_ID, T0, Cluster, job_spec, report, step
from tests.support.operator_model import started as _started


def _kinds(plan: planning.Plan) -> list[tuple[str, str]]:
    out = []
    for action in plan.actions:
        if isinstance(action, planning.CreateObject):
            out.append(("create", action.manifest["metadata"]["name"]))
        elif isinstance(action, planning.DeletePod):
            out.append(("delete" + (" force" if action.force else ""), action.name))
        else:
            out.append((type(action).__name__, getattr(action, "pod", "")))
    return out


def test_a_new_job_gets_services_etcd_and_one_pod_per_replica() -> None:
    cluster = Cluster()
    result = step(cluster, JobStatus(), job_spec(replicas=3), T0)
    assert sorted(_kinds(result)) == [
        ("create", "demo-etcd"),
        ("create", "demo-etcd-0"),
        ("create", "demo-worker-0-0"),
        ("create", "demo-worker-1-0"),
        ("create", "demo-worker-2-0"),
        ("create", "demo-workers"),
    ]
    assert result.status.phase is Phase.PENDING
    assert result.status.run_id == RUN_ID
    assert result.status.selector == "elasticjob.dev/job-name=demo,elasticjob.dev/role=worker"
    assert result.status.start_time == T0


def test_planning_twice_on_the_same_world_creates_nothing_new() -> None:
    cluster = Cluster()
    status = _started(cluster)
    again = step(cluster, status, job_spec(), T0 + 2, etcd_reachable=True)
    assert _kinds(again) == []
    assert not again.commit_first


def test_running_agents_make_the_job_running_and_are_marked_joined() -> None:
    cluster = Cluster()
    status = _started(cluster)
    reports = {
        "demo-worker-0-0": report("demo-worker-0-0", round_=1),
        "demo-worker-1-0": report("demo-worker-1-0", round_=1),
    }
    result = step(cluster, status, job_spec(), T0 + 3, etcd_reachable=True, reports=reports)
    assert result.status.phase is Phase.RUNNING
    assert (result.status.ready_nodes, result.status.world_size, result.status.round) == (2, 4, 1)
    assert sorted(_kinds(result)) == [
        ("MarkJoined", "demo-worker-0-0"),
        ("MarkJoined", "demo-worker-1-0"),
    ]
    assert is_true(result.status.conditions, ConditionType.RUNNING)
    assert any(e.reason == "Running" for e in result.events)


def test_a_pod_that_failed_before_joining_is_replaced_and_counted_once() -> None:
    cluster = Cluster()
    status = _started(cluster)
    cluster.set("demo-worker-1-0", phase=PodPhase.FAILED, exit_code=1)
    result = planning.plan(
        JOB,
        spec=job_spec(),
        generation=1,
        status=status,
        observed=cluster.observed(etcd_reachable=True),
        now=T0 + 5,
        services=frozenset(cluster.services),
    )
    assert result.commit_first  # the new attempt and the count are written before the create
    assert result.status.restarts == {restarts.POD_FAILURE: 1}
    assert result.status.attempts[1] == 1
    assert ("create", "demo-worker-1-1") in _kinds(result)
    assert ("delete", "demo-worker-1-0") in _kinds(result)
    assert any(e.reason == "WorkerReplaced" for e in result.events)

    # The operator dies right after the status write: nothing of the plan ran. The next plan
    # creates the same pod and counts nothing again.
    retry = planning.plan(
        JOB,
        spec=job_spec(),
        generation=1,
        status=result.status,
        observed=cluster.observed(etcd_reachable=True),
        now=T0 + 6,
        services=frozenset(cluster.services),
    )
    assert retry.status.restarts == {restarts.POD_FAILURE: 1}
    assert ("create", "demo-worker-1-1") in _kinds(retry)


def test_a_pod_whose_agent_joined_is_replaced_but_left_to_the_agents_to_count() -> None:
    cluster = Cluster()
    status = _started(cluster)
    cluster.set("demo-worker-0-0", deleting=True, joined=True)
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True)
    assert result.status.restarts == {}
    assert ("create", "demo-worker-0-1") in _kinds(result)
    # The agents counted the group restart; the operator takes their number.
    reports = {"demo-worker-1-0": report("demo-worker-1-0", restarts={"preemption": 1})}
    later = step(cluster, result.status, job_spec(), T0 + 6, etcd_reachable=True, reports=reports)
    assert later.status.restarts == {"preemption": 1}
    assert [e.reason for e in later.events].count("Restarted") == 1


def test_pods_on_a_lost_node_are_force_deleted_and_replaced() -> None:
    cluster = Cluster()
    status = _started(cluster)
    cluster.set("demo-worker-0-0", node="node-b", joined=True)
    result = step(
        cluster, status, job_spec(), T0 + 5, etcd_reachable=True, lost_nodes=frozenset({"node-b"})
    )
    assert ("delete force", "demo-worker-0-0") in _kinds(result)
    assert ("create", "demo-worker-0-1") in _kinds(result)


def test_a_pod_stuck_terminating_on_a_lost_node_is_force_deleted() -> None:
    cluster = Cluster()
    status = _started(cluster)
    cluster.set("demo-worker-0-0", node="node-b", deleting=True)
    result = step(
        cluster, status, job_spec(), T0 + 5, etcd_reachable=True, lost_nodes=frozenset({"node-b"})
    )
    assert ("delete force", "demo-worker-0-0") in _kinds(result)
    assert result.status.restarts == {restarts.POD_LOST: 1}


def test_scale_up_and_down() -> None:
    cluster = Cluster()
    status = _started(cluster)
    up = step(cluster, status, job_spec(replicas=4), T0 + 5, etcd_reachable=True)
    assert sorted(_kinds(up)) == [("create", "demo-worker-2-0"), ("create", "demo-worker-3-0")]
    cluster.run_all()
    down = step(cluster, up.status, job_spec(replicas=1), T0 + 6, etcd_reachable=True)
    assert sorted(_kinds(down)) == [
        ("delete", "demo-worker-1-0"),
        ("delete", "demo-worker-2-0"),
        ("delete", "demo-worker-3-0"),
    ]
    assert down.status.restarts == {}  # scaling costs nothing


def test_budget_spent_fails_the_job_and_cleans_running_pods() -> None:
    cluster = Cluster()
    status = _started(cluster)
    reports = {"demo-worker-0-0": report("demo-worker-0-0", restarts={"failure": 4})}
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    assert result.status.phase is Phase.FAILED
    assert result.status.reason == "MaxRestartsExceeded"
    assert is_true(result.status.conditions, ConditionType.FAILED)
    assert cluster.workers() == [] and cluster.etcd() == []
    assert result.status.completion_time == T0 + 5


def test_agent_exit_code_10_fails_the_job() -> None:
    cluster = Cluster()
    status = _started(cluster)
    cluster.set("demo-worker-0-0", phase=PodPhase.FAILED, exit_code=ExitCode.MAX_RESTARTS_EXCEEDED)
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True)
    assert (result.status.phase, result.status.reason) == (Phase.FAILED, "MaxRestartsExceeded")
    # Running pods are cleaned (policy Running); the failed one stays for its logs.
    assert [p.name for p in cluster.workers()] == ["demo-worker-0-0"]


def test_operator_counted_pod_failures_spend_the_budget() -> None:
    cluster = Cluster()
    spec = job_spec(maxRestarts=1)
    status = _started(cluster)
    for attempt in range(2):
        cluster.set(f"demo-worker-1-{attempt}", phase=PodPhase.FAILED, exit_code=1)
        status = step(cluster, status, spec, T0 + 5 + attempt, etcd_reachable=True).status
        cluster.run_all()
    final = step(cluster, status, spec, T0 + 9, etcd_reachable=True)
    assert final.status.restarts == {restarts.POD_FAILURE: 2}
    assert (final.status.phase, final.status.reason) == (Phase.FAILED, "MaxRestartsExceeded")


def test_usage_error_fails_at_once() -> None:
    cluster = Cluster()
    status = _started(cluster)
    cluster.set("demo-worker-0-0", phase=PodPhase.FAILED, exit_code=ExitCode.USAGE)
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True)
    assert (result.status.phase, result.status.reason) == (Phase.FAILED, "InvalidArguments")


def test_success_when_the_group_finished() -> None:
    cluster = Cluster()
    status = _started(cluster)
    cluster.set("demo-worker-0-0", phase=PodPhase.SUCCEEDED, exit_code=0, finished_at=T0 + 4)
    # The other worker still trains: not yet.
    reports = {"demo-worker-1-0": report("demo-worker-1-0")}
    wait = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    assert wait.status.phase is not Phase.SUCCEEDED
    assert ("create", "demo-worker-0-1") not in _kinds(wait)  # a success is never replaced
    cluster.set("demo-worker-1-0", phase=PodPhase.SUCCEEDED, exit_code=0, finished_at=T0 + 6)
    done = step(cluster, wait.status, job_spec(), T0 + 7, etcd_reachable=True)
    assert (done.status.phase, done.status.reason) == (Phase.SUCCEEDED, "Succeeded")
    assert is_true(done.status.conditions, ConditionType.SUCCEEDED)
    assert [p.name for p in cluster.workers()] == ["demo-worker-0-0", "demo-worker-1-0"]
    assert cluster.etcd() == []  # the managed etcd was running: cleaned


def test_finished_job_is_deleted_after_its_ttl() -> None:
    cluster = Cluster()
    spec = job_spec(runPolicy={"ttlSecondsAfterFinished": 30})
    status = _started(cluster)
    for pod in cluster.workers():
        cluster.set(pod.name, phase=PodPhase.SUCCEEDED, exit_code=0, finished_at=T0 + 4)
    done = step(cluster, status, spec, T0 + 5).status
    assert not any(
        isinstance(a, planning.DeleteJob) for a in step(cluster, done, spec, T0 + 20).actions
    )
    assert any(
        isinstance(a, planning.DeleteJob) for a in step(cluster, done, spec, T0 + 36).actions
    )


def test_active_deadline() -> None:
    cluster = Cluster()
    spec = job_spec(runPolicy={"activeDeadlineSeconds": 100})
    status = _started(cluster)
    result = step(cluster, status, spec, T0 + 101, etcd_reachable=True)
    assert (result.status.phase, result.status.reason) == (Phase.FAILED, "DeadlineExceeded")


def test_suspend_deletes_workers_and_resume_recreates_them_under_new_names() -> None:
    cluster = Cluster()
    status = _started(cluster)
    suspended = step(cluster, status, job_spec(runPolicy={"suspend": True}), T0 + 5)
    assert suspended.status.phase is Phase.SUSPENDED
    assert cluster.workers() == [] and len(cluster.etcd()) == 1
    resumed = step(cluster, suspended.status, job_spec(), T0 + 6, etcd_reachable=True)
    assert sorted(n for k, n in _kinds(resumed) if k == "create") == [
        "demo-worker-0-1",
        "demo-worker-1-1",
    ]
    cond = find_condition(resumed.status.conditions, ConditionType.SUSPENDED)
    assert cond is not None and cond["status"] == "False"
    assert resumed.status.restarts == {}


def test_lost_managed_etcd_is_recreated_counted_once_and_seeded() -> None:
    cluster = Cluster()
    status = _started(cluster)
    reports = {"demo-worker-0-0": report("demo-worker-0-0", restarts={"failure": 1})}
    status = step(cluster, status, job_spec(), T0 + 2, etcd_reachable=True, reports=reports).status
    cluster.set("demo-etcd-0", phase=PodPhase.FAILED, exit_code=137)
    lost = step(cluster, status, job_spec(), T0 + 3, etcd_reachable=False)
    assert lost.commit_first
    assert lost.status.etcd.generation == 1
    assert lost.status.restarts == {"failure": 1, "etcd-recovered": 1}
    assert ("create", "demo-etcd-1") in _kinds(lost)
    assert lost.status.stall is not None and lost.status.stall.reason == "EtcdUnavailable"
    assert lost.new_stall == "EtcdUnavailable"
    # Not recreated again while the new one starts.
    again = step(cluster, lost.status, job_spec(), T0 + 4)
    assert again.status.etcd.generation == 1
    # Once it answers, the seed goes in (agent reasons only), and the stall clears.
    cluster.run_all()
    up = step(cluster, again.status, job_spec(), T0 + 6, etcd_reachable=True)
    assert cluster.seeds == ['{"byReason": {"etcd-recovered": 1, "failure": 1}}']
    assert up.status.stall is None
    cond = find_condition(up.status.conditions, ConditionType.STALLED)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "Recovered"


def test_etcd_cut_off_the_network_is_detected_then_recreated() -> None:
    cluster = Cluster()
    status = _started(cluster)
    first = step(cluster, status, job_spec(), T0 + 10, etcd_reachable=False)
    assert first.status.etcd.unreachable_since == T0 + 10
    assert first.status.stall is None and first.status.etcd.generation == 0
    later = step(cluster, first.status, job_spec(), T0 + 14, etcd_reachable=False)
    assert later.status.stall is not None
    assert later.status.stall.reason == "EtcdUnavailable"
    assert later.status.etcd.generation == 1
    assert ("delete force", "demo-etcd-0") in _kinds(later)


def test_external_etcd_outage_fails_the_job_after_the_stall_timeout_with_every_pod_gone() -> None:
    cluster = Cluster()
    spec = job_spec(etcd={"mode": "External", "endpoints": ["e:2379"]}, stallTimeoutSeconds=30)
    status = step(cluster, JobStatus(), spec, T0).status
    cluster.run_all()
    status = step(cluster, status, spec, T0 + 1, etcd_reachable=True).status
    status = step(cluster, status, spec, T0 + 2, etcd_reachable=False).status
    stalled = step(cluster, status, spec, T0 + 7, etcd_reachable=False)
    assert stalled.status.stall is not None and stalled.status.phase is not Phase.FAILED
    assert is_true(stalled.status.conditions, ConditionType.STALLED)
    done = step(cluster, stalled.status, spec, T0 + 40, etcd_reachable=False)
    assert (done.status.phase, done.status.reason) == (Phase.FAILED, "EtcdUnavailable")
    assert "stallTimeoutSeconds" in done.status.message
    assert cluster.workers() == []


def test_unschedulable_pods_stall_the_job_with_their_reason() -> None:
    cluster = Cluster()
    spec = job_spec(replicas=2, minNodes=2)
    status = step(cluster, JobStatus(), spec, T0).status
    cluster.set("demo-worker-1-0", unschedulable="0/3 nodes: Insufficient nvidia.com/gpu")
    result = step(cluster, status, spec, T0 + 1)
    assert result.status.stall is not None
    assert result.status.stall.reason == "PodsUnschedulable"
    assert "Insufficient nvidia.com/gpu" in result.status.message
    assert result.status.reason == "PodsUnschedulable"


def test_restart_counts_never_decrease() -> None:
    cluster = Cluster()
    status = replace(_started(cluster), restarts={"failure": 2, "membership": 1})
    reports = {"demo-worker-0-0": report("demo-worker-0-0", restarts={"failure": 1})}
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    assert result.status.restarts == {"failure": 2, "membership": 1}


def test_reports_of_another_run_are_ignored() -> None:
    cluster = Cluster()
    status = _started(cluster)
    reports = {"demo-worker-0-0": report("demo-worker-0-0", restarts={"failure": 9}, run_id="x")}
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    assert result.status.restarts == {}


def test_rendezvous_duration_comes_from_the_agents_when_they_report_it() -> None:
    # The whole rendezvous fell between two polls: the operator never saw anyone waiting.
    cluster = Cluster()
    status = _started(cluster)
    running = {
        "demo-worker-0-0": report("demo-worker-0-0", round_=1, last_rendezvous_seconds=0.4),
        "demo-worker-1-0": report("demo-worker-1-0", round_=1, last_rendezvous_seconds=1.25),
    }
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=running)
    assert result.status.last_rendezvous_seconds == 1.25


def test_rendezvous_duration_is_measured_from_the_first_waiting_agent() -> None:
    # Agents of an older version do not report their own figure.
    cluster = Cluster()
    status = _started(cluster)
    waiting = {
        "demo-worker-0-0": report(
            "demo-worker-0-0", AgentState.RENDEZVOUS, round_=None, waiting_since=T0 + 2
        )
    }
    status = step(cluster, status, job_spec(), T0 + 3, etcd_reachable=True, reports=waiting).status
    running = {"demo-worker-0-0": report("demo-worker-0-0", round_=1)}
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=running)
    assert result.status.last_rendezvous_seconds == 3.0


def _running_unprobed(cluster: Cluster) -> tuple[JobStatus, dict[str, HealthReport]]:
    """A job whose group trains on etcd generation 0 while every operator probe has failed."""
    spec = job_spec()
    status = step(cluster, JobStatus(), spec, T0).status
    cluster.run_all()
    status = step(cluster, status, spec, T0 + 1, etcd_reachable=False).status
    running = {n: report(n) for n in ("demo-worker-0-0", "demo-worker-1-0")}
    status = step(cluster, status, spec, T0 + 3, etcd_reachable=False, reports=running).status
    assert status.phase is Phase.RUNNING
    return status, running


def test_an_etcd_that_served_a_running_group_is_recreated_when_lost_though_no_probe_saw_it() -> (
    None
):
    """A failure seen end to end: the probe never saw generation 0 ready, the agents trained on
    it, then it was cut off. It must be replaced, not left to fail the job at the stall timeout."""
    cluster = Cluster()
    spec = job_spec()
    status, _ = _running_unprobed(cluster)
    cut = {
        n: report(n, etcd_reachable=False, unreachable_since=T0 + 10)
        for n in ("demo-worker-0-0", "demo-worker-1-0")
    }
    lost = step(cluster, status, spec, T0 + 15, etcd_reachable=False, reports=cut)
    assert lost.status.stall is not None and lost.status.stall.reason == "EtcdUnavailable"
    assert lost.status.etcd.generation == 1
    assert lost.status.restarts.get(restarts.ETCD_RECOVERED) == 1
    assert ("create", "demo-etcd-1") in _kinds(lost)
    assert ("delete force", "demo-etcd-0") in _kinds(lost)
    # The new generation is reported ready by the kubelet: the stall ends, the job lives on.
    cluster.run_all()
    cluster.set("demo-etcd-1", ready=True)
    later = step(
        cluster, lost.status, spec, T0 + 20 + spec.stall_timeout_seconds, etcd_reachable=False
    )
    assert later.status.phase is not Phase.FAILED
    assert later.status.etcd.generation == 1 and later.status.stall is None


def test_a_serving_etcd_the_operator_cannot_probe_is_left_alone() -> None:
    """Agents train on it and reach it: a failing operator probe alone (a network policy, an
    overloaded operator) must not make the operator replace a healthy etcd."""
    cluster = Cluster()
    spec = job_spec()
    status, running = _running_unprobed(cluster)
    for t in (10, 20, 40, 200):
        status = step(cluster, status, spec, T0 + t, etcd_reachable=False, reports=running).status
    assert status.etcd.generation == 0 and status.stall is None
    assert status.phase is Phase.RUNNING


def test_a_recreated_etcd_is_not_recreated_again_on_stale_agent_reports() -> None:
    """Right after a recreation the agents may still report the old generation reachable;
    that is no evidence the new one served, so it gets its start-up grace."""
    cluster = Cluster()
    spec = job_spec()
    status = _started(cluster)
    running = {n: report(n) for n in ("demo-worker-0-0", "demo-worker-1-0")}
    status = step(cluster, status, spec, T0 + 2, etcd_reachable=True, reports=running).status
    cluster.set("demo-etcd-0", phase=PodPhase.FAILED, exit_code=137)
    status = step(cluster, status, spec, T0 + 3, etcd_reachable=False, reports=running).status
    assert status.etcd.generation == 1
    cluster.run_all()
    for t in (5, 8, 12, 20):
        status = step(cluster, status, spec, T0 + t, etcd_reachable=False, reports=running).status
    assert status.etcd.generation == 1


def test_an_invalid_report_is_listed_with_its_reason_and_an_event_once() -> None:
    cluster = Cluster()
    spec = job_spec()
    status = _started(cluster)
    bad = {"demo-worker-1-0": "health report contains NaN, which JSON does not allow"}
    good = {"demo-worker-0-0": report("demo-worker-0-0")}
    first = step(
        cluster, status, spec, T0 + 2, etcd_reachable=True, reports=good, invalid_reports=bad
    )
    assert first.status.invalid_reports == bad
    assert first.status.to_json()["invalidReports"] == [
        {"pod": "demo-worker-1-0", "reason": bad["demo-worker-1-0"]}
    ]
    assert [e.reason for e in first.events].count("InvalidHealthReport") == 1
    # No answer at all next time: kept, no new Event.
    quiet = step(cluster, first.status, spec, T0 + 4, etcd_reachable=True, reports=good)
    assert quiet.status.invalid_reports == bad
    assert "InvalidHealthReport" not in [e.reason for e in quiet.events]
    # A valid report clears it.
    both = {**good, "demo-worker-1-0": report("demo-worker-1-0")}
    fixed = step(cluster, quiet.status, spec, T0 + 6, etcd_reachable=True, reports=both)
    assert fixed.status.invalid_reports == {}


def test_invalid_reports_in_status_stay_bounded() -> None:
    cluster = Cluster()
    spec = job_spec(replicas=40, maxNodes=40)
    status = step(cluster, JobStatus(), spec, T0).status
    cluster.run_all()
    bad = {p.name: "x" * 10_000 for p in cluster.workers()}
    result = step(cluster, status, spec, T0 + 1, etcd_reachable=True, invalid_reports=bad)
    assert len(result.status.invalid_reports) == planning.reports.MAX_INVALID_REPORTS
    assert all(
        len(r) == planning.reports.MAX_REASON_CHARS for r in result.status.invalid_reports.values()
    )


def test_a_rejected_request_is_a_condition_with_the_servers_message_and_one_event() -> None:
    rejection = planning.Rejection(
        "create Pod ns/demo-worker-0-0",
        403,
        'pods "demo-worker-0-0" is forbidden: violates PodSecurity',
    )
    status, event = planning.note_rejection(JobStatus(), rejection, now=T0, generation=4)
    cond = find_condition(status.conditions, ConditionType.REQUEST_REJECTED)
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "Forbidden"
    assert cond["message"] == f"create Pod ns/demo-worker-0-0: {rejection.message}"
    assert cond["observedGeneration"] == 4
    assert event is not None and event.reason == "Forbidden" and event.message == cond["message"]
    again, repeat = planning.note_rejection(status, rejection, now=T0 + 2, generation=4)
    assert repeat is None and again.conditions == status.conditions  # no Event per retry
    fixed, none = planning.note_rejection(again, None, now=T0 + 4, generation=4)
    cond = find_condition(fixed.conditions, ConditionType.REQUEST_REJECTED)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "Accepted"
    assert none is None
    untouched, _ = planning.note_rejection(JobStatus(), None, now=T0, generation=1)
    assert untouched.conditions == ()


def test_every_condition_carries_the_observed_generation() -> None:
    cluster = Cluster()
    result = planning.plan(
        JOB,
        spec=job_spec(),
        generation=7,
        status=JobStatus(),
        observed=cluster.observed(),
        now=T0,
    )
    assert result.status.conditions
    assert all(c["observedGeneration"] == 7 for c in result.status.conditions)


def test_a_node_whose_pods_still_answer_is_not_lost_to_the_job() -> None:
    # A starved kubelet misses its heartbeats (Ready=Unknown) while its containers run on: the
    # job hears from them, so nothing is replaced and no restart is counted.
    cluster = Cluster()
    status = _started(cluster)
    cluster.set("demo-worker-0-0", node="node-b", joined=True)
    cluster.set("demo-etcd-0", node="node-b")
    reports = {"demo-worker-0-0": report("demo-worker-0-0")}
    result = step(
        cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports,
        lost_nodes=frozenset({"node-b"}),
    )  # fmt: skip
    assert [k for k in _kinds(result) if k[0] != "mark joined"] == []
    assert result.status.etcd.generation == 0
    assert result.status.restarts == {}


def test_an_etcd_on_a_silent_lost_node_is_recreated_at_once() -> None:
    cluster = Cluster()
    status = _started(cluster)
    cluster.set("demo-etcd-0", node="node-b")
    reports = {
        "demo-worker-0-0": report("demo-worker-0-0", etcd_reachable=False, unreachable_since=T0)
    }
    result = step(
        cluster, status, job_spec(), T0 + 5, etcd_reachable=False, reports=reports,
        lost_nodes=frozenset({"node-b"}),
    )  # fmt: skip
    assert result.status.etcd.generation == 1
    assert ("create", "demo-etcd-1") in _kinds(result)
    assert result.status.restarts == {restarts.ETCD_RECOVERED: 1}
