"""Lifecycle log lines and the health report the supervisor publishes."""

from __future__ import annotations

from elasticjob_agent.health.status import AgentStatus
from elasticjob_agent.logs import EventContext, format_event
from elasticjob_agent.protocol.health import AgentState, EtcdStatus, HealthReport


def test_every_line_has_the_context() -> None:
    ctx = EventContext("job", "node-a")
    assert format_event(ctx, "agent_started", {"x": 1}) == (
        "event=agent_started run_id=job round=- node=node-a rank=- world_size=- x=1"
    )
    ctx = ctx.with_round(3, 1, 4)
    assert "round=3 node=node-a rank=1 world_size=4" in format_event(ctx, "e", {})


def test_status_report_round_trips_through_the_schema() -> None:
    now = [100.0]
    status = AgentStatus(
        "job",
        "n",
        3,
        7200.0,
        etcd=lambda: EtcdStatus(False, 90.0, 95.0, ("127.0.0.1:2379",)),
        progress=lambda: 99.0,
        clock=lambda: now[0],
    )
    status.update(
        state=AgentState.RUNNING,
        round=2,
        restarts_by_reason={"failure": 1},
        last_rendezvous_seconds=0.75,
    )
    report = HealthReport.loads(status.report().dumps())
    assert report.state is AgentState.RUNNING
    assert report.last_rendezvous_seconds == 0.75
    assert report.round == 2 and report.restarts_total == 1
    assert report.etcd.reachable is False and report.etcd.unreachable_since == 95.0
    assert report.last_progress == 99.0
    assert report.worst_case_time_to_fail_seconds == 7200.0
    assert status.alive(within=5)
    now[0] = 200.0
    assert not status.alive(within=5)


def test_the_round_start_is_reported_while_running() -> None:
    status = AgentStatus(
        "job",
        "n",
        3,
        7200.0,
        etcd=lambda: EtcdStatus(True, 90.0, None),
        first_step=lambda: (41, 105.0),
        previous_step=lambda: (57, 80.0),
    )
    status.update(state=AgentState.RENDEZVOUS, round_started_at=100.0)
    waiting = HealthReport.loads(status.report().dumps())
    assert (waiting.round_started_at, waiting.first_step) == (None, None)
    assert (waiting.previous_step, waiting.previous_step_at) == (57, 80.0)
    status.update(state=AgentState.RUNNING, round=2)
    running = HealthReport.loads(status.report().dumps())
    assert (running.round_started_at, running.first_step, running.first_step_at) == (
        100.0,
        41,
        105.0,
    )


def test_a_spare_is_ready_once_every_warm_worker_imported_torch() -> None:
    status = AgentStatus("job", "n", 3, 0.0, etcd=lambda: EtcdStatus(True, 1.0, None))
    status.update(state=AgentState.STANDBY, warm_workers=1, warm_pool=2)
    report = HealthReport.loads(status.report().dumps())
    assert report.state is AgentState.STANDBY
    assert (report.warm_workers, report.warm_pool) == (1, 2)
    assert not report.spare_ready
    status.update(warm_workers=2)
    assert HealthReport.loads(status.report().dumps()).spare_ready
    # Without warm workers (--warm-workers 0, --no-python) standing by is all it takes.
    status.update(warm_workers=0, warm_pool=0)
    assert HealthReport.loads(status.report().dumps()).spare_ready
    status.update(state=AgentState.RENDEZVOUS)
    assert not HealthReport.loads(status.report().dumps()).spare_ready
    # Reports from agents without these fields parse as no warm workers.
    legacy = status.report().to_json()
    del legacy["warmWorkers"], legacy["warmPool"]
    assert HealthReport.from_json(legacy).warm_pool == 0
