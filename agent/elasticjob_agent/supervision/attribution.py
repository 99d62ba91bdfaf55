"""Failure attribution: the root cause of this node's part of a restart (a fired timer, a hang,
failed workers), for the health report, the container's termination message and the policy."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from elasticjob_agent.protocol.failure import MAX_MESSAGE, WorkerFailure, cap
from elasticjob_agent.supervision.context import Supervision
from elasticjob_agent.supervision.failure_report import read_failure
from elasticjob_agent.supervision.oom import oom_kills
from elasticjob_agent.supervision.root_cause import first_failure, signal_name
from elasticjob_agent.timers.steps import StepProgress
from elasticjob_agent.timers.table import Expired


def timer_fired(sup: Supervision, killed: Sequence[Expired]) -> None:
    """Workers were killed by their expiration timers: the first is the root cause."""
    sup.metrics.worker_failed(len(killed))
    first = killed[0]
    local = {pid: lr for lr, pid in sup.workers.pids().items()}
    lr = local.get(first.pid, 0)
    _record(
        sup,
        WorkerFailure(
            local_rank=lr,
            time=time.time(),
            rank=None if sup.base_rank is None else sup.base_rank + lr,
            node=sup.status.node,
            pod=sup.pod,
            signal=signal_name(-first.signal),
            message=cap(f"expiration timer {first.scope!r} expired", MAX_MESSAGE),
            round=sup.round,
        ),
    )


def hung(sup: Supervision, steps: StepProgress, timeout: float | None) -> None:
    """No local worker reported a step for the progress timeout: that is the round's root
    cause (the peers' workers then fail with lost connections, mere consequences)."""
    silent = time.time() - steps.at
    sup.events.warning(
        "no_progress",
        last_step=steps.step,
        seconds=f"{silent:.1f}",
        progress_timeout_s=timeout,
        learned=sup.settings.progress_auto,
    )
    _record(
        sup,
        WorkerFailure(
            local_rank=0,
            time=time.time(),
            rank=sup.base_rank,
            node=sup.status.node,
            pod=sup.pod,
            message=cap(
                f"no training step for {silent:.0f} s after step {steps.step} "
                f"(progress timeout {timeout or 0:g} s): a rank of this node hung, "
                "or waits for one that did",
                MAX_MESSAGE,
            ),
            round=sup.round,
        ),
    )


def workers_failed(sup: Supervision, failures: Mapping[int, int | None]) -> None:
    """Local workers exited non-zero: the round's root cause (``root_cause.first_failure``)."""
    sup.metrics.worker_failed(len(failures))
    sup.events.warning("worker_failed", exit_codes=dict(failures))
    seen_at = time.time()
    records = [
        read_failure(
            sup.workers.error_file(sup.attempt, lr),
            local_rank=lr,
            status=int(code or 0),
            seen_at=seen_at,
            rank=None if sup.base_rank is None else sup.base_rank + lr,
            node=sup.status.node,
            pod=sup.pod,
            captured_tail=sup.workers.stderr_tail(lr),
        )
        for lr, code in sorted(failures.items())
    ]
    cause = first_failure(records)
    # Read now, while the kill is fresh: a SIGKILL with the cgroup's OOM count up is the
    # kernel's (cgroup v1 kills the process, not the container: no kubelet ``OOMKilled``).
    cause = replace(cause, round=sup.round, oom_killed=oom_killed(sup, cause))
    for record in records:
        said = cause if record.local_rank == cause.local_rank else record
        sup.events.warning("worker_error", failure=said.summary()[:500])
    _record(sup, cause)


def oom_killed(sup: Supervision, cause: WorkerFailure | None) -> bool:
    """The worker died of SIGKILL while the container's OOM kill count went up."""
    if cause is None or cause.signal != "SIGKILL" or sup.oom_kills_at_start is None:
        return False
    now = oom_kills()
    return now is not None and now > sup.oom_kills_at_start


def _record(sup: Supervision, failure: WorkerFailure) -> None:
    """The root cause goes to the health report, the log and the termination message."""
    sup.status.update(last_failure=failure)
    sup.events.warning("root_cause", failure=failure.summary()[:1000])
    sup.write_root_cause(failure)
