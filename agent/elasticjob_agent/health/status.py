"""What the agent knows about itself, shared between the supervisor and the health server.

A small lock-guarded record; ``report()`` turns it into the versioned ``HealthReport``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from elasticjob_agent.protocol.checkpoint import NO_CHECKPOINTS, CheckpointFacts, RestoreReport
from elasticjob_agent.protocol.compute import NO_COMPUTE, ComputeFigure
from elasticjob_agent.protocol.failure import WorkerFailure
from elasticjob_agent.protocol.failure_policy import PolicyDecision
from elasticjob_agent.protocol.health import (
    MAX_RESTORE_FAILURE,
    AgentState,
    EtcdStatus,
    HealthReport,
    WorkerStatus,
)


@dataclass(frozen=True)
class StatusFields:
    state: AgentState = AgentState.STARTING
    round: int | None = None
    group_rank: int | None = None
    group_world_size: int | None = None
    world_size: int | None = None
    restarts_by_reason: Mapping[str, int] = field(default_factory=dict)
    waiting_since: float | None = None
    last_rendezvous_seconds: float | None = None
    last_progress: float | None = None
    workers: tuple[WorkerStatus, ...] = ()
    exit_reason: str | None = None
    health_port: int | None = None
    last_failure: WorkerFailure | None = None
    warm_workers: int = 0
    warm_pool: int = 0

    failure_policy: PolicyDecision | None = None
    progress_timeout: float | None = None
    round_started_at: float | None = None
    preflight_seconds: float | None = None


class AgentStatus:
    def __init__(
        self,
        run_id: str,
        node: str,
        max_restarts: int,
        worst_case_time_to_fail: float,
        *,
        etcd: Callable[[], EtcdStatus],
        progress: Callable[[], float | None] = lambda: None,
        steps: Callable[[], tuple[int, float, bool] | None] = lambda: None,
        first_step: Callable[[], tuple[int, float] | None] = lambda: None,
        previous_step: Callable[[], tuple[int, float] | None] = lambda: None,
        checkpoints: Callable[[], CheckpointFacts] = lambda: NO_CHECKPOINTS,
        compute: Callable[[], ComputeFigure] = lambda: NO_COMPUTE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.run_id = run_id
        self.node = node
        self._max_restarts = max_restarts
        self._worst = worst_case_time_to_fail
        self._etcd = etcd
        self._progress = progress
        self._steps = steps
        self._first_step = first_step
        self._previous_step = previous_step
        self._checkpoints = checkpoints
        self._compute = compute
        # The round each restore (and each restore failure) was first seen in, by identity:
        # the checkpoint node replaces the object at every restore, and knows no rounds.
        self._restore_seen: tuple[RestoreReport, int | None] | None = None
        self._failure_seen: tuple[str, int | None] | None = None
        self._clock = clock
        self._lock = threading.Lock()
        self._fields = StatusFields()
        self._heartbeat = clock()

    def update(self, **changes: Any) -> None:
        with self._lock:
            self._fields = replace(self._fields, **changes)

    @property
    def fields(self) -> StatusFields:
        with self._lock:
            return self._fields

    def beat(self) -> None:
        """The main loop is alive (for ``/healthz``)."""
        with self._lock:
            self._heartbeat = self._clock()

    def alive(self, within: float) -> bool:
        with self._lock:
            return self._clock() - self._heartbeat <= within

    def report(self) -> HealthReport:
        f = self.fields
        timer_progress = self._progress()
        # (step, Unix time, loop over) of the current round; a group not running has none.
        steps = self._steps() if f.state is AgentState.RUNNING else None
        first = self._first_step() if f.state is AgentState.RUNNING else None
        previous = self._previous_step()
        last_progress = max(
            (p for p in (f.last_progress, timer_progress) if p is not None), default=None
        )
        compute = self._compute()
        running_compute = compute.seconds if f.state is AgentState.RUNNING else None
        saved, restore, failure = self._checkpoints()
        restore, failure_round = self._stamp(restore, failure, f.round)
        return HealthReport(
            run_id=self.run_id,
            node=self.node,
            state=f.state,
            etcd=self._etcd(),
            round=f.round,
            group_rank=f.group_rank,
            group_world_size=f.group_world_size,
            world_size=f.world_size,
            restarts_total=sum(f.restarts_by_reason.values()),
            restarts_by_reason=dict(f.restarts_by_reason),
            max_restarts=self._max_restarts,
            waiting_since=f.waiting_since,
            last_rendezvous_seconds=f.last_rendezvous_seconds,
            last_progress=last_progress,
            workers=f.workers,
            worst_case_time_to_fail_seconds=self._worst,
            exit_reason=f.exit_reason,
            updated_at=self._clock(),
            health_port=f.health_port,
            last_failure=f.last_failure,
            last_step=None if steps is None else steps[0],
            last_step_at=None if steps is None else steps[1],
            steps_done=False if steps is None else steps[2],
            warm_workers=f.warm_workers,
            warm_pool=f.warm_pool,
            failure_policy=f.failure_policy,
            progress_timeout_seconds=f.progress_timeout if f.state is AgentState.RUNNING else None,
            round_started_at=f.round_started_at if f.state is AgentState.RUNNING else None,
            first_step=None if first is None else first[0],
            first_step_at=None if first is None else first[1],
            previous_step=None if previous is None else previous[0],
            previous_step_at=None if previous is None else previous[1],
            last_saved_step=saved,
            last_restore=restore,
            restore_failure=None if failure is None else failure[:MAX_RESTORE_FAILURE],
            restore_failure_round=failure_round,
            compute_seconds=running_compute,
            compute_samples=0 if running_compute is None else compute.samples,
            compute_rejected=compute.rejected,
            preflight_seconds=f.preflight_seconds,
        )

    def _stamp(
        self, restore: RestoreReport | None, failure: str | None, round_: int | None
    ) -> tuple[RestoreReport | None, int | None]:
        """``restore`` with the round it was first seen in, and the round of ``failure``."""
        with self._lock:
            if restore is not None and (
                self._restore_seen is None or self._restore_seen[0] is not restore
            ):
                self._restore_seen = (restore, round_)
            if failure is not None and (
                self._failure_seen is None or self._failure_seen[0] is not failure
            ):
                self._failure_seen = (failure, round_)
            restore_round = None if self._restore_seen is None else self._restore_seen[1]
            failure_round = None if self._failure_seen is None else self._failure_seen[1]
        if restore is not None and restore.round is None:
            restore = replace(restore, round=restore_round)
        return restore, None if failure is None else failure_round
