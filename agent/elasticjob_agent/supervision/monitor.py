"""The monitor: every ``monitor_interval`` observe the group (``observation.Tick``), let the
pure ``decision.decide`` choose, and carry the decision out. Returns the reason the group must
restart; success and SIGTERM leave through ``exits``."""

from __future__ import annotations

import time
from dataclasses import replace

from elasticjob_agent.protocol.health import WorkerStatus
from elasticjob_agent.protocol.restarts import RestartReason
from elasticjob_agent.supervision import attribution, probes
from elasticjob_agent.supervision.context import Supervision
from elasticjob_agent.supervision.decision import Cause, Decision, Verdict, decide
from elasticjob_agent.supervision.exits import preempted, succeeded
from elasticjob_agent.supervision.observation import Tick
from elasticjob_agent.supervision.round_setup import Group

MEMBERSHIP_CHECK_EVERY = 0.2
"""Seconds between membership checks (each costs etcd reads; none while etcd is unreachable
or once the group is finishing)."""


def monitor(sup: Supervision, group: Group) -> RestartReason:
    """Watch until the group must restart; return why."""
    next_membership_check = 0.0
    finishing = False
    while True:
        sup.status.beat()
        sup.workers.maintain()
        sup.note_warm()
        tick = _observe(sup)
        decision = decide(tick)
        now = time.monotonic()
        if (
            decision.verdict is Verdict.CONTINUE
            and not finishing
            and now >= next_membership_check
            and sup.unreachable_since() is None
        ):
            next_membership_check = now + MEMBERSHIP_CHECK_EVERY
            tick = replace(tick, membership=probes.membership(sup))
            decision = decide(tick)
        if decision.verdict is Verdict.READ_EXIT_BARRIER:
            _announce_change(sup, tick, decision)
            tick = replace(tick, barrier=probes.exit_barrier(group.store))
            decision = decide(tick)
        if decision.verdict is Verdict.PREEMPT:
            preempted(sup)
        if decision.verdict is Verdict.SUCCEED:
            succeeded(sup, group.store, group.rank, group.world_size)
        if decision.verdict is Verdict.FINISHING and tick.barrier is not None:
            ignored = None if decision.reason is None else decision.reason.value
            finished = tick.barrier.finished_rank
            sup.events.info("group_finishing", finished_rank=finished, ignored=ignored)
            finishing = True
        if decision.verdict is Verdict.RESTART and decision.reason is not None:
            _attribute(sup, tick, decision)
            return decision.reason


def _observe(sup: Supervision) -> Tick:
    """The tick's local observations (no etcd): signals, timers, steps, exit codes. Reports
    what it saw (expired timers, the progress timeout in force, the workers' exit codes)."""
    if sup.stop_signal.wait(sup.settings.monitor_interval):
        return Tick(stop_requested=True)
    expired = tuple(sup.timers.expired())
    for timer in expired:
        sup.events.warning("timer_expired", pid=timer.pid, scope=timer.scope, signal=timer.signal)
    steps = sup.timers.steps()
    s = sup.settings
    timeout = sup.timers.learned_timeout() if s.progress_auto else s.progress_timeout
    if sup.status.fields.progress_timeout != timeout:
        sup.status.update(progress_timeout=timeout)
    now = time.monotonic()
    codes = sup.workers.exit_codes()
    sup.status.update(
        workers=tuple(
            WorkerStatus(lr, pid, codes.get(lr)) for lr, pid in sorted(sup.workers.pids().items())
        )
    )
    return Tick(expired=expired, steps=steps, hang_timeout=timeout, now=now, exit_codes=codes)


def _announce_change(sup: Supervision, tick: Tick, decision: Decision) -> None:
    """Before the exit barrier is read: say why the group would re-form; a lost member gets
    the time to count its own restart first (``probes.await_peer_count``)."""
    if decision.cause is Cause.NODES_WAITING and tick.membership is not None:
        sup.events.info("nodes_waiting", waiting=tick.membership.waiting)
    if decision.cause is Cause.MEMBER_LOST:
        sup.events.warning("member_lost")
        probes.await_peer_count(sup)


def _attribute(sup: Supervision, tick: Tick, decision: Decision) -> None:
    """A restart this node caused: kill the workers of fired timers and record the root cause
    (a membership change has none here)."""
    if decision.cause is Cause.TIMER:
        for timer in tick.timer_kills:
            sup.workers.kill(timer.pid, timer.signal)
        attribution.timer_fired(sup, tick.timer_kills)
    elif decision.cause is Cause.HANG and tick.steps is not None:
        attribution.hung(sup, tick.steps, tick.hang_timeout)
    elif decision.cause is Cause.WORKERS:
        attribution.workers_failed(sup, tick.failures)
