"""The etcd outage clock and its witnesses: a failing operator probe that someone else
contradicts (the kubelet's readiness, an agent) is no outage, and the clock starts again with
the first failure nobody contradicts. A loaded machine once made every witness fail in one
step, after minutes of the operator's probe alone failing: the old clock recreated a healthy
etcd at once."""

from __future__ import annotations

from elasticjob_operator.core.status import JobStatus, Phase

from tests.support.operator_model import T0, Cluster, job_spec, report, step

WORKERS = ("demo-worker-0-0", "demo-worker-1-0")


def _running(cluster: Cluster) -> JobStatus:
    spec = job_spec()
    status = step(cluster, JobStatus(), spec, T0).status
    cluster.run_all()
    cluster.set("demo-etcd-0", ready=True)
    reports = {n: report(n) for n in WORKERS}
    status = step(cluster, status, spec, T0 + 1, etcd_reachable=True, reports=reports).status
    assert status.phase is Phase.RUNNING
    return status


def test_a_probe_failing_under_witnesses_keeps_no_outage_clock() -> None:
    cluster = Cluster()
    spec = job_spec()
    status = _running(cluster)
    reports = {n: report(n) for n in WORKERS}
    for t in (10, 20, 60, 120):
        status = step(cluster, status, spec, T0 + t, etcd_reachable=False, reports=reports).status
        assert status.etcd.generation == 0 and status.stall is None
    # The first step the probe failed set the clock; every witnessed step after it clears it.
    assert status.etcd.unreachable_since is None


def test_every_witness_failing_at_once_starts_the_clock_instead_of_recreating() -> None:
    cluster = Cluster()
    spec = job_spec()
    status = _running(cluster)
    reports = {n: report(n) for n in WORKERS}
    for t in (10, 20, 60):
        status = step(cluster, status, spec, T0 + t, etcd_reachable=False, reports=reports).status
    # A loaded machine: the probe, the agents' reports and the kubelet's readiness all fail.
    cluster.set("demo-etcd-0", ready=False)
    blip = step(cluster, status, spec, T0 + 61, etcd_reachable=False)
    assert blip.status.etcd.generation == 0, "a healthy etcd was recreated on one bad step"
    assert blip.status.etcd.unreachable_since == T0 + 61
    # Still nobody reaches it 4 s later: that is an outage, and it is remediated.
    later = step(cluster, blip.status, spec, T0 + 65, etcd_reachable=False)
    assert later.status.etcd.generation == 1
    assert later.status.stall is not None and later.status.stall.reason == "EtcdUnavailable"


def test_a_witness_coming_back_clears_the_clock() -> None:
    cluster = Cluster()
    spec = job_spec()
    status = _running(cluster)
    cluster.set("demo-etcd-0", ready=False)
    status = step(cluster, status, spec, T0 + 10, etcd_reachable=False).status
    assert status.etcd.unreachable_since == T0 + 10
    back = {WORKERS[0]: report(WORKERS[0])}
    status = step(cluster, status, spec, T0 + 12, etcd_reachable=False, reports=back).status
    assert status.etcd.unreachable_since is None
    status = step(cluster, status, spec, T0 + 15, etcd_reachable=False).status
    assert status.etcd.generation == 0 and status.etcd.unreachable_since == T0 + 15


def test_reports_taken_before_this_step_vouch_for_nobody() -> None:
    # The agents' round is still out (a loaded operator): the step plans with their previous
    # reports, which said etcd was reachable then. They do not stop the outage clock now.
    cluster = Cluster()
    spec = job_spec()
    status = _running(cluster)
    cluster.set("demo-etcd-0", ready=False)
    earlier = {n: report(n) for n in WORKERS}
    status = step(
        cluster, status, spec, T0 + 10, etcd_reachable=False, reports=earlier, reports_fresh=False
    ).status
    assert status.etcd.unreachable_since == T0 + 10
    later = step(
        cluster, status, spec, T0 + 14, etcd_reachable=False, reports=earlier, reports_fresh=False
    )
    assert later.status.stall is not None and later.status.stall.reason == "EtcdUnavailable"
    # The same reports fetched in the step do vouch.
    fresh = step(cluster, status, spec, T0 + 14, etcd_reachable=False, reports=earlier)
    assert fresh.status.etcd.unreachable_since is None and fresh.status.stall is None
