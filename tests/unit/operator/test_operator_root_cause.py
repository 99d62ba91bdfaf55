"""The job's last root cause: status.lastFailure, the Restarted Event and the Failed condition."""

from __future__ import annotations

from dataclasses import replace

from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.failure import FinalCounts, WorkerFailure
from elasticjob_operator.core import planning
from elasticjob_operator.core.observed import PodPhase
from elasticjob_operator.core.status import JobStatus, Phase

from tests.support.operator_model import RUN_ID, T0, Cluster, job_spec, report, step
from tests.support.operator_model import started as _started

RAISED = WorkerFailure(
    local_rank=1,
    time=T0 + 4,
    rank=3,
    node="node-b",
    exit_code=1,
    exception_type="ValueError",
    message="loss is nan",
    frame="/app/train.py:42 in step",
)


def test_a_reported_failure_becomes_last_failure_and_the_restarted_event_quotes_it() -> None:
    cluster = Cluster()
    status = _started(cluster)
    reports = {
        "demo-worker-1-0": replace(
            report("demo-worker-1-0", restarts={"failure": 1}), last_failure=RAISED
        )
    }
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    stored = result.status.last_failure
    assert stored is not None
    assert stored["pod"] == "demo-worker-1-0"  # the agent did not know its pod: the report's
    assert stored["exceptionType"] == "ValueError" and stored["frame"].endswith("in step")
    restarted = [e for e in result.events if e.reason == "Restarted"]
    assert len(restarted) == 1
    assert restarted[0].message.endswith(
        "root cause: rank 3 on pod demo-worker-1-0 (node node-a) exited with code 1: "
        "ValueError: loss is nan (at /app/train.py:42 in step)"
    )
    # It survives the status round trip (what the next reconcile reads back).
    assert JobStatus.from_json(result.status.to_json()).last_failure == stored


def test_within_a_round_the_first_failure_wins_and_a_later_round_is_news() -> None:
    """Of one round's failures the first in time is the cause (the others are secondary
    evidence); a later round's failure replaces it; another run's report is not read."""
    cluster = Cluster()
    status = _started(cluster)
    first = replace(RAISED, time=T0 + 1, message="first", round=2)
    second = replace(RAISED, time=T0 + 3, message="second", round=2)
    reports = {
        "demo-worker-0-0": replace(report("demo-worker-0-0"), last_failure=second),
        "demo-worker-1-0": replace(report("demo-worker-1-0"), last_failure=first),
    }
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    stored = result.status.last_failure
    assert stored is not None and stored["message"] == "first", stored
    assert [e["summary"] for e in stored["secondary"]] == [
        "rank 3 on pod demo-worker-0-0 (node node-a) exited with code 1: ValueError: second "
        "(at /app/train.py:42 in step)"
    ]
    later = replace(RAISED, time=T0 + 9, message="later", round=3)
    reports["demo-worker-0-0"] = replace(report("demo-worker-0-0"), last_failure=later)
    reports["demo-worker-1-0"] = replace(
        report("x", run_id="another-run"), last_failure=replace(RAISED, time=T0 + 10, round=9)
    )
    result = step(cluster, result.status, job_spec(), T0 + 10, etcd_reachable=True, reports=reports)
    stored = result.status.last_failure
    assert stored is not None and stored["message"] == "later" and stored["round"] == 3, stored
    assert stored["secondary"] == [], stored


def test_the_failed_condition_quotes_the_last_root_cause_when_the_budget_is_spent() -> None:
    cluster = Cluster()
    status = _started(cluster).evolve(last_failure=replace(RAISED, pod="demo-worker-1-0").to_json())
    cluster.set("demo-worker-0-0", phase=PodPhase.FAILED, exit_code=ExitCode.MAX_RESTARTS_EXCEEDED)
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True)
    assert (result.status.phase, result.status.reason) == (Phase.FAILED, "MaxRestartsExceeded")
    assert result.status.message.endswith(
        "last root cause: rank 3 on pod demo-worker-1-0 (node node-b) exited with code 1: "
        "ValueError: loss is nan (at /app/train.py:42 in step)"
    )
    failed = [c for c in result.status.conditions if c.get("type") == "Failed"]
    assert failed and "last root cause: rank 3" in failed[0]["message"]


def test_a_timer_restart_quotes_the_expired_timer() -> None:
    cluster = Cluster()
    status = _started(cluster)
    expired = WorkerFailure(
        local_rank=0,
        time=T0 + 4,
        rank=2,
        signal="SIGKILL",
        message="expiration timer 'step' expired",
    )
    reports = {
        "demo-worker-1-0": replace(
            report("demo-worker-1-0", restarts={"timer": 1}), last_failure=expired
        )
    }
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    restarted = [e for e in result.events if e.reason == "Restarted"]
    assert len(restarted) == 1
    assert restarted[0].message.endswith(
        "root cause: rank 2 on pod demo-worker-1-0 (node node-a) killed by SIGKILL: "
        "expiration timer 'step' expired"
    )


LOST_PEER = WorkerFailure(
    local_rank=0,
    time=T0 + 6,
    rank=0,
    node="node-a",
    exit_code=1,
    exception_type="RuntimeError",
    message="[gloo/transport/tcp/pair.cc:561] Connection closed by peer [10.0.0.2]:4242",
    round=3,
)


def test_a_peers_lost_connection_never_hides_the_rank_that_died() -> None:
    cluster = Cluster()
    status = _started(cluster)
    killed = WorkerFailure(local_rank=1, time=T0 + 4, rank=3, signal="SIGKILL", round=3)
    reports = {
        "demo-worker-0-0": replace(report("demo-worker-0-0"), last_failure=LOST_PEER),
        "demo-worker-1-0": replace(report("demo-worker-1-0"), last_failure=killed),
    }
    # Seen in one poll: the cause wins although the consequence is newer.
    result = step(cluster, status, job_spec(), T0 + 7, etcd_reachable=True, reports=reports)
    stored = result.status.last_failure
    assert stored is not None and (stored["pod"], stored["signal"]) == (
        "demo-worker-1-0",
        "SIGKILL",
    )
    assert [e["kind"] for e in stored["secondary"]] == ["ConnectionLost"], stored
    # Seen one poll after the cause was stored: nothing new, nothing corrected.
    again = step(cluster, result.status, job_spec(), T0 + 9, etcd_reachable=True, reports=reports)
    assert again.status.last_failure == stored
    assert not [e for e in again.events if e.reason == "RootCause"]
    # A later round's failure is news, a consequence or not.
    later = replace(LOST_PEER, round=4, time=T0 + 60)
    reports = {"demo-worker-0-0": replace(report("demo-worker-0-0"), last_failure=later)}
    news = step(cluster, again.status, job_spec(), T0 + 61, etcd_reachable=True, reports=reports)
    stored = news.status.last_failure
    assert stored is not None and (stored["kind"], stored["round"]) == ("ConnectionLost", 4)


def test_outranks_orders_round_then_cause_then_time() -> None:
    cause = replace(RAISED, round=2)
    assert cause.outranks(None)
    assert cause.outranks(replace(LOST_PEER, round=2, time=T0 + 100))
    assert not replace(LOST_PEER, round=2).outranks(cause)
    assert replace(LOST_PEER, round=3).outranks(cause)
    assert replace(cause, time=cause.time + 1).outranks(cause)
    assert not cause.outranks(cause)
    # An agent that did not say its round: cause, then time.
    assert replace(cause, round=None).outranks(replace(LOST_PEER, round=None))
    assert LOST_PEER.is_consequence() and not cause.is_consequence()


def test_the_cause_in_an_exited_pods_termination_message_beats_a_reported_consequence() -> None:
    """The agent whose rank raised spent the budget and exited before its last report was
    polled; its peer's report (a lost connection) was. The kubelet kept the cause."""
    cluster = Cluster()
    cause = replace(RAISED, round=3, time=T0 + 5, pod=None)
    status = _started(cluster).evolve(
        last_failure=replace(LOST_PEER, pod="demo-worker-0-0").to_json()
    )
    cluster.set(
        "demo-worker-1-0",
        phase=PodPhase.FAILED,
        exit_code=ExitCode.MAX_RESTARTS_EXCEEDED,
        last_failure=cause,
    )
    result = step(cluster, status, job_spec(), T0 + 8, etcd_reachable=True)
    stored = result.status.last_failure
    assert stored is not None
    assert (stored["kind"], stored["pod"], stored["exceptionType"]) == (
        "WorkerFailed",
        "demo-worker-1-0",
        "ValueError",
    )
    assert result.status.phase is Phase.FAILED
    assert result.status.message.endswith(
        "last root cause: rank 3 on pod demo-worker-1-0 (node node-a) exited with code 1: "
        "ValueError: loss is nan (at /app/train.py:42 in step)"
    )


def test_a_spent_budget_waits_for_every_agent_to_exit_before_quoting_the_root_cause() -> None:
    """The peer that only lost its connection exits first; the verdict waits for the agent
    whose rank raised (its termination message), at most ROOT_CAUSE_WAIT_SECONDS."""
    cluster = Cluster()
    status = _started(cluster)
    cluster.set(
        "demo-worker-0-0",
        phase=PodPhase.FAILED,
        exit_code=ExitCode.MAX_RESTARTS_EXCEEDED,
        finished_at=T0 + 5,
        last_failure=LOST_PEER,
    )
    waiting = step(cluster, status, job_spec(), T0 + 6, etcd_reachable=True)
    assert waiting.status.phase is not Phase.FAILED
    cause = replace(RAISED, round=3, pod=None)
    cluster.set(
        "demo-worker-1-0",
        phase=PodPhase.FAILED,
        exit_code=ExitCode.MAX_RESTARTS_EXCEEDED,
        finished_at=T0 + 7,
        last_failure=cause,
    )
    done = step(cluster, waiting.status, job_spec(), T0 + 8, etcd_reachable=True)
    assert done.status.phase is Phase.FAILED
    assert "last root cause: rank 3 on pod demo-worker-1-0 (node node-a)" in done.status.message


def test_a_budget_spent_before_any_agent_exited_waits_for_their_termination_messages() -> None:
    """The counts told of the spent budget before any agent exited (a report was polled first).
    A verdict now would delete the running pods (cleanPodPolicy Running) and the termination
    messages the agents are about to write with them; it waits, at most ROOT_CAUSE_WAIT_SECONDS
    from the failure that spent the budget."""
    cluster = Cluster()
    status = _started(cluster).evolve(
        restarts={"failure": 4}, last_failure=replace(RAISED, pod="demo-worker-1-0").to_json()
    )
    waiting = step(cluster, status, job_spec(), T0 + 6, etcd_reachable=True)
    assert waiting.status.phase is not Phase.FAILED
    assert not any(type(a).__name__ == "DeletePod" for a in waiting.actions), waiting.actions
    late = RAISED.time + planning.terminal.ROOT_CAUSE_WAIT_SECONDS
    assert step(cluster, status, job_spec(), late, etcd_reachable=True).status.phase is Phase.FAILED


def test_a_spent_budget_does_not_wait_past_the_deadline_for_a_pod_that_keeps_running() -> None:
    cluster = Cluster()
    status = _started(cluster)
    cluster.set(
        "demo-worker-0-0",
        phase=PodPhase.FAILED,
        exit_code=ExitCode.MAX_RESTARTS_EXCEEDED,
        finished_at=T0 + 5,
    )
    late = T0 + 5 + planning.terminal.ROOT_CAUSE_WAIT_SECONDS
    assert step(cluster, status, job_spec(), late, etcd_reachable=True).status.phase is Phase.FAILED


def test_the_final_counts_an_exited_agent_left_raise_the_status_before_the_verdict() -> None:
    """The agent counted the restart that spent the budget and exited before any poll saw it;
    the count in its termination message is the job's, so the verdict quotes it (a verdict of
    "3 failure restarts, maxRestarts 3" contradicts itself)."""
    cluster = Cluster()
    status = _started(cluster).evolve(restarts={"failure": 3, "membership": 1})
    cluster.set(
        "demo-worker-1-0",
        phase=PodPhase.FAILED,
        exit_code=ExitCode.MAX_RESTARTS_EXCEEDED,
        last_failure=replace(RAISED, round=4),
        final_counts=FinalCounts(RUN_ID, {"failure": 4, "membership": 0, "etcd-recovered": 9}),
    )
    cluster.set(
        "demo-worker-0-0",
        phase=PodPhase.FAILED,
        exit_code=ExitCode.MAX_RESTARTS_EXCEEDED,
        final_counts=FinalCounts("another-run", {"failure": 50}),
    )
    result = step(cluster, status, job_spec(), T0 + 8, etcd_reachable=True)
    assert (result.status.phase, result.status.reason) == (Phase.FAILED, "MaxRestartsExceeded")
    # Raised per agent reason, never lowered; not from another run; etcd-recovered is the
    # operator's own count, whatever an agent says.
    assert result.status.restarts == {"failure": 4, "membership": 1}
    assert result.status.message.startswith(
        "job-wide restart budget spent: 4 failure restarts, maxRestarts 3"
    )
    restarted = [e.message for e in result.events if e.reason == "Restarted"]
    assert len(restarted) == 1 and "(failure), 1 time(s)" in restarted[0], restarted
