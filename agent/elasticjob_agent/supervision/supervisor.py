"""The agent's main loop: rendezvous, start the local workers, watch them, restart together.

One iteration per round: ``next_rendezvous()`` -> agree on ranks through the round's store ->
start ``nproc_per_node`` workers -> every ``monitor_interval`` check workers, timers, waiting
nodes and lost members -> on any of those stop the group, count the restart once for the job,
and go around again. Terminal outcomes are ``ExitCode`` values (protocol/exit_codes.py).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from elasticjob_agent.etcd.client import EtcdRequestError
from elasticjob_agent.health.metrics import AgentMetrics
from elasticjob_agent.health.status import AgentStatus
from elasticjob_agent.logs import EventLog
from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.failure import MAX_MESSAGE, FinalCounts, WorkerFailure, cap
from elasticjob_agent.protocol.failure_policy import (
    Action,
    FailurePolicy,
    PolicyDecision,
    decision_record,
    facts_of,
)
from elasticjob_agent.protocol.health import AgentState, WorkerStatus
from elasticjob_agent.protocol.restarts import RestartCounts, RestartReason, RestartStateError
from elasticjob_agent.rendezvous import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousError,
    RendezvousStateError,
    RendezvousTimeoutError,
)
from elasticjob_agent.rendezvous.role_info import (
    RankAssignment,
    RoleInfo,
    parse_master,
)
from elasticjob_agent.rendezvous.roles import exchange_roles
from elasticjob_agent.rendezvous.supervised_handler import SupervisedHandler as Handler
from elasticjob_agent.supervision.failure_report import read_failure, write_termination_message
from elasticjob_agent.supervision.oom import oom_kills
from elasticjob_agent.supervision.restart_counter import Recorded
from elasticjob_agent.supervision.restart_policy import (
    exit_for_closed,
    judge_budget,
    plan_restart,
    suspects_round_loss,
)
from elasticjob_agent.supervision.root_cause import first_failure, signal_name
from elasticjob_agent.supervision.worker_env import AgentKnobs, GroupContext, worker_env
from elasticjob_agent.timers.steps import StepProgress, is_hung
from elasticjob_agent.timers.table import Expired

logger = logging.getLogger(__name__)

_MASTER_KEY = "elasticjob/master"
_EXIT_KEY = "elasticjob/exit/{}"
# Written by every node that enters the exit barrier (the last one's rank stays): one read tells
# whether any node of the round finished, however many nodes the round has.
_FINISHED_KEY = "elasticjob/finished"
_EXIT_BARRIER_TIMEOUT = 300.0
_MEMBERSHIP_CHECK_EVERY = 0.2
_PEER_COUNT_GRACE = 3.0
"""How long an agent that sees a member vanish waits for that member to count the restart
itself (its lease lapsed while it ran) before counting a ``failure``: a few membership checks of
a slow peer."""


class Counter(Protocol):
    def read(self) -> RestartCounts: ...
    def record(
        self,
        round_: int,
        reason: RestartReason,
        patience: float | None = None,
        *,
        spend: bool = True,
    ) -> Recorded: ...
    def counted(self, round_: int) -> RestartReason | None: ...
    def mark_budget_spent(self, counts: RestartCounts, max_restarts: int) -> None: ...
    def mark_failed_by_policy(self, decision: PolicyDecision) -> None: ...
    def close_reason(self) -> str | None: ...


class Workers(Protocol):
    def start(self, envs: Mapping[int, Mapping[str, str]], attempt: int, role: str) -> None: ...
    def pids(self) -> dict[int, int]: ...
    def exit_codes(self) -> dict[int, int | None]: ...
    def kill(self, pid: int, sig: int = ...) -> None: ...
    def stop(self, grace: float) -> dict[int, int | None]: ...
    def maintain(self) -> None: ...
    def error_file(self, attempt: int, local_rank: int) -> Path: ...
    def stderr_tail(self, local_rank: int) -> bytes | None: ...
    def warm_ready(self) -> tuple[int, int]: ...

    warm_started: bool
    """Whether the last ``start`` used warm workers."""


class Timers(Protocol):
    def reset(self, pids: frozenset[int]) -> None: ...
    def expired(self) -> list[Expired]: ...
    def steps(self) -> StepProgress | None: ...
    def learned_timeout(self) -> float | None: ...


@dataclass(frozen=True)
class SupervisorSettings:
    role: str
    nproc_per_node: int
    max_restarts: int
    monitor_interval: float
    shutdown_timeout: float
    etcd_timeout: float
    local_addr: str | None
    knobs: AgentKnobs
    progress_timeout: float | None = None
    """``--progress-timeout``: restart with reason ``hang`` after this long without a step."""
    progress_auto: bool = False
    """``--progress-timeout auto``: the timeout is the one the timers learned from the steps
    (``protocol.hang_timeout``); ``progress_timeout`` is unused."""
    failure_policy: FailurePolicy = field(default_factory=FailurePolicy)
    """``--failure-policy``: what a failure that would spend the budget does instead."""


class _Exit(Exception):
    def __init__(self, code: ExitCode, detail: str = "") -> None:
        super().__init__(code, detail)
        self.code = code
        self.detail = detail


class Supervisor:
    def __init__(
        self,
        settings: SupervisorSettings,
        *,
        handler: Handler,
        counter: Counter,
        workers: Workers,
        timers: Timers,
        status: AgentStatus,
        metrics: AgentMetrics,
        events: EventLog,
        environ: Mapping[str, str],
        etcd_unreachable_since: Callable[[], float | None],
    ) -> None:
        self._s = settings
        self._handler = handler
        self._counter = counter
        self._workers = workers
        self._timers = timers
        self._status = status
        self._metrics = metrics
        self._events = events
        self._environ = dict(environ)
        self._unreachable_since = etcd_unreachable_since
        self._stop_signal = threading.Event()
        self._round = 0
        self._attempt = 0
        self._base_rank: int | None = None
        self._root_cause: WorkerFailure | None = None
        """The last root cause written to the termination message (rewritten with the final
        counts when the budget is spent)."""
        self._decision: Mapping[str, Any] | None = None
        """The failure policy's last decision written to the termination message (kept when it
        is rewritten)."""
        self._counts: RestartCounts | None = None
        """The job-wide restart counts as this agent last saw them (at its round's start or its
        group's stop): the final counts it leaves in the termination message when it exits."""
        self._round_cause: WorkerFailure | None = None
        """This round's root cause, if this agent saw one (what the failure policy judges)."""
        self._oom_kills_at_start: int | None = None

    # -- public --------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Called from the SIGTERM handler: stop workers, leave the rendezvous, exit 143."""
        self._stop_signal.set()

    def run(self) -> ExitCode:
        self._events.info(
            "agent_started",
            max_restarts=self._s.max_restarts,
            nproc_per_node=self._s.nproc_per_node,
            worst_case_time_to_fail_s=self._status.report().worst_case_time_to_fail_seconds,
        )
        # torch has no supported way to set the workers' default process-group timeout
        # (docs/agent.md, NCCL failure detection): only scripts that pass it are bounded.
        self._events.warning(
            "collective_timeout_not_enforced",
            seconds=self._s.knobs.nccl_collective_timeout,
            unless="init_process_group(timeout=ELASTICJOB_COLLECTIVE_TIMEOUT_SECONDS)",
            torch_default_gloo_s=1800,
            torch_default_nccl_s=600,
            see="docs/agent.md#nccl-failure-detection",
        )
        try:
            while True:
                self._one_round()
        except _Exit as done:
            return self._finish(done.code, done.detail)
        finally:
            self._workers.stop(self._s.shutdown_timeout)

    # -- one round -----------------------------------------------------------------------------

    def _one_round(self) -> None:
        info, rdzv_seconds = self._rendezvous()
        handler_round = self._handler.round
        self._round = self._attempt if handler_round is None else int(handler_round)
        group_rank, group_world = int(info.rank), int(info.world_size)
        self._events.ctx = self._events.ctx.with_round(self._round, group_rank, None)
        self._events.info(
            "rendezvous_completed", seconds=f"{rdzv_seconds:.3f}", group_world_size=group_world
        )
        counts = self._etcd(self._counter.read)
        try:
            assignment = self._exchange_roles(info.store, group_rank, group_world)
            master_addr, master_port = self._master(info, group_rank)
        except RendezvousStateError as exc:  # a peer's value in etcd is not what agents write
            raise _Exit(ExitCode.WORKER_FAILED, f"corrupt rendezvous state: {exc}") from exc
        ctx = GroupContext(
            run_id=self._handler.get_run_id(),
            role=self._s.role,
            group_rank=group_rank,
            group_world_size=group_world,
            local_world_size=self._s.nproc_per_node,
            master_addr=master_addr,
            master_port=master_port,
            restart_count=counts.total,
            max_restarts=self._s.max_restarts,
            assignment=assignment,
        )
        self._events.ctx = self._events.ctx.with_round(
            self._round, group_rank, assignment.global_world_size
        )
        self._metrics.set_round(self._round, assignment.global_world_size, rdzv_seconds)
        self._metrics.set_restarts(counts.full())
        self._counts = counts
        envs = {
            lr: worker_env(
                ctx,
                lr,
                self._environ,
                self._s.knobs,
                error_file=str(self._workers.error_file(self._attempt, lr)),
            )
            for lr in range(self._s.nproc_per_node)
        }
        self._base_rank = assignment.base_global_rank
        self._round_cause = None
        self._oom_kills_at_start = oom_kills() if self._s.failure_policy.rules else None
        self._workers.start(envs, self._attempt, self._s.role)
        pids = self._workers.pids()
        self._timers.reset(frozenset(pids.values()))
        now = time.time()
        self._status.update(
            state=AgentState.RUNNING,
            round=self._round,
            group_rank=group_rank,
            group_world_size=group_world,
            world_size=assignment.global_world_size,
            restarts_by_reason=counts.full(),
            waiting_since=None,
            last_rendezvous_seconds=rdzv_seconds,
            last_progress=now,
            workers=tuple(WorkerStatus(lr, pid, None) for lr, pid in sorted(pids.items())),
        )
        self._events.info(
            "workers_started",
            master=f"{master_addr}:{master_port}",
            first_rank=assignment.base_global_rank,
            restart_count=counts.total,
            rendezvous_s=f"{rdzv_seconds:.3f}",
            warm=self._workers.warm_started,
        )
        reason = self._monitor(info.store, group_rank, group_world)
        self._restart(reason)

    def _rendezvous(self) -> tuple[Any, float]:
        """``next_rendezvous()`` in a helper thread, so SIGTERM and the etcd deadline still act."""
        self._attempt += 1
        started = time.time()
        self._status.update(state=AgentState.RENDEZVOUS, waiting_since=started, workers=())
        self._events.info("rendezvous_started", attempt=self._attempt)
        box: dict[str, Any] = {}

        def call() -> None:
            try:
                box["info"] = self._handler.next_rendezvous()
            except BaseException as exc:  # handed to the main thread below
                box["error"] = exc

        thread = threading.Thread(target=call, name="rendezvous", daemon=True)
        thread.start()
        standby: float | None = None
        while thread.is_alive():
            self._status.beat()
            thread.join(0.1)
            was = standby
            standby = self._note_standby(standby)
            if was is not None and standby is None:
                started = time.time()  # a spare's rendezvous starts when a round calls it in
            if self._stop_signal.is_set():
                self._leave()
                raise _Exit(ExitCode.TERMINATED, "SIGTERM while in rendezvous")
            self._check_etcd_deadline("rendezvous")
        error = box.get("error")
        if error is not None:
            self._raise_for_rendezvous_error(error)
        return box["info"], time.time() - started

    def _note_standby(self, was: float | None) -> float | None:
        """Report a spare (``Standby``, not waiting for anything the job lacks) while the
        rendezvous says this node stands by; back to ``Rendezvous`` when a round calls it in.
        Returns since when it stands by, or None."""
        standing = self._handler.standby_since() is not None
        warm = self._note_warm()
        now = time.time()
        if standing and was is None:
            self._events.info("standing_by", warm_workers=warm)
            self._status.update(state=AgentState.STANDBY, waiting_since=None)
            return now
        if not standing and was is not None:
            self._events.info("called_in", standby_s=f"{now - was:.3f}", warm_workers=warm)
            self._status.update(state=AgentState.RENDEZVOUS, waiting_since=now)
        return was if standing else None

    def _note_warm(self) -> int:
        """Put the warm workers that have torch imported (and the pool's size) in the report."""
        warm, pool = self._workers.warm_ready()
        fields = self._status.fields
        if (warm, pool) != (fields.warm_workers, fields.warm_pool):
            self._status.update(warm_workers=warm, warm_pool=pool)
        return int(warm)

    def _raise_for_rendezvous_error(self, error: BaseException) -> None:
        if isinstance(error, RendezvousClosedError):
            reason = self._closed_reason()
            raise _Exit(exit_for_closed(reason), f"rendezvous closed (reason: {reason})")
        if isinstance(error, RendezvousTimeoutError):
            raise _Exit(ExitCode.JOIN_TIMEOUT, str(error))
        if isinstance(error, RendezvousConnectionError):
            raise _Exit(ExitCode.ETCD_UNREACHABLE, str(error))
        if isinstance(error, RendezvousStateError):
            raise _Exit(ExitCode.WORKER_FAILED, f"corrupt rendezvous state: {error}")
        if isinstance(error, RendezvousError):
            raise _Exit(ExitCode.WORKER_FAILED, f"rendezvous failed: {error}")
        raise error

    def _closed_reason(self) -> str | None:
        try:
            return self._counter.close_reason()
        except (RendezvousConnectionError, EtcdRequestError, RestartStateError) as exc:
            logger.warning("could not read why the rendezvous was closed: %s", exc)
            return None

    def _exchange_roles(self, store: Any, group_rank: int, group_world: int) -> RankAssignment:
        """torchrun's role-rank exchange through the round's store, O(1) requests per node."""
        mine = RoleInfo(self._s.role, group_rank, self._s.nproc_per_node)
        return exchange_roles(store, mine, group_world)

    def _master(self, info: Any, group_rank: int) -> tuple[str, int]:
        bootstrap = getattr(info, "bootstrap_store_info", None)
        if bootstrap is not None and getattr(bootstrap, "master_addr", None):
            return str(bootstrap.master_addr), int(bootstrap.master_port)
        # Fallback when the handler does not publish it: rank 0's node does, through the store.
        if group_rank == 0:
            addr = self._s.local_addr or socket.getfqdn()
            with socket.socket() as sock:
                sock.bind(("", 0))
                port = int(sock.getsockname()[1])
            info.store.set(_MASTER_KEY, f"{addr}:{port}".encode())
            return addr, port
        return parse_master(_MASTER_KEY, bytes(info.store.get(_MASTER_KEY)))

    def _monitor(self, store: Any, group_rank: int, group_world: int) -> RestartReason:
        """Watch until the group must restart; return why. Success and SIGTERM exit from here."""
        next_membership_check = 0.0
        finishing = False
        while True:
            self._status.beat()
            self._workers.maintain()
            self._note_warm()
            if self._stop_signal.wait(self._s.monitor_interval):
                self._preempted()
            if self._timers_fired():
                return RestartReason.TIMER
            steps = self._timers.steps()
            timeout = self._hang_timeout()
            if self._status.fields.progress_timeout != timeout:
                self._status.update(progress_timeout=timeout)
            if steps is not None and is_hung(steps, timeout, time.monotonic()):
                self._hung(steps, timeout)
                return RestartReason.HANG
            codes = self._workers.exit_codes()
            self._status.update(
                workers=tuple(
                    WorkerStatus(lr, pid, codes.get(lr))
                    for lr, pid in sorted(self._workers.pids().items())
                )
            )
            failures = {lr: c for lr, c in codes.items() if c not in (None, 0)}
            if failures:
                self._metrics.worker_failed(len(failures))
                self._events.warning("worker_failed", exit_codes=failures)
                self._record_root_cause(failures)
                return RestartReason.FAILURE
            if codes and all(c == 0 for c in codes.values()):
                self._succeeded(store, group_rank, group_world)
            now = time.monotonic()
            if not finishing and now >= next_membership_check and self._unreachable_since() is None:
                next_membership_check = now + _MEMBERSHIP_CHECK_EVERY
                reason = self._membership_change()
                if reason is None:
                    continue
                finished = self._finished_peer(store)
                if finished is None:
                    return reason
                # Re-forming now would leave the finished node (in its exit barrier, never
                # joining again) and us waiting for each other. Our workers finish or fail on
                # their own; either way the monitor sees their exit codes.
                self._events.info("group_finishing", finished_rank=finished, ignored=reason.value)
                finishing = True

    def _finished_peer(self, store: Any) -> int | None:
        """The group rank of a node of this round whose workers all exited 0 (it entered the
        exit barrier, see ``_succeeded``), or ``None``. Once one has, the training is done: a
        member that vanishes now (its lease lapsed while its workers were exiting, say) must
        not restart the group."""
        try:
            if not store.check([_FINISHED_KEY]):
                return None
            return int(store.get(_FINISHED_KEY))
        except Exception as exc:  # unknown: re-form, as without this check
            logger.debug("could not read the exit barrier: %s", exc)
            return None

    def _hang_timeout(self) -> float | None:
        """The progress timeout in force: the fixed one, or the one learned from the steps."""
        if self._s.progress_auto:
            return self._timers.learned_timeout()
        return self._s.progress_timeout

    def _hung(self, steps: StepProgress, timeout: float | None) -> None:
        """No local worker reported a step for the progress timeout: that is the round's root
        cause (the peers' workers then fail with lost connections, mere consequences)."""
        silent = time.time() - steps.at
        self._events.warning(
            "no_progress",
            last_step=steps.step,
            seconds=f"{silent:.1f}",
            progress_timeout_s=timeout,
            learned=self._s.progress_auto,
        )
        failure = WorkerFailure(
            local_rank=0,
            time=time.time(),
            rank=self._base_rank,
            node=self._status.node,
            pod=self._environ.get("POD_NAME") or self._environ.get("HOSTNAME"),
            message=cap(
                f"no training step for {silent:.0f} s after step {steps.step} "
                f"(progress timeout {timeout or 0:g} s): a rank of this node hung, "
                "or waits for one that did",
                MAX_MESSAGE,
            ),
            round=self._round,
        )
        self._status.update(last_failure=failure)
        self._events.warning("root_cause", failure=failure.summary()[:1000])
        self._write_root_cause(failure)

    def _timers_fired(self) -> bool:
        """Kill the workers whose expiration timer fired (with the signal their timer asked
        for; torch's ``signal <= 0`` only reports) and record the first as the root cause."""
        killed: list[Expired] = []
        for timer in self._timers.expired():
            self._events.warning(
                "timer_expired", pid=timer.pid, scope=timer.scope, signal=timer.signal
            )
            if timer.signal > 0:
                self._workers.kill(timer.pid, timer.signal)
                killed.append(timer)
        if not killed:
            return False
        self._metrics.worker_failed(len(killed))
        first = killed[0]
        local = {pid: lr for lr, pid in self._workers.pids().items()}
        lr = local.get(first.pid, 0)
        failure = WorkerFailure(
            local_rank=lr,
            time=time.time(),
            rank=None if self._base_rank is None else self._base_rank + lr,
            node=self._status.node,
            pod=self._environ.get("POD_NAME") or self._environ.get("HOSTNAME"),
            signal=signal_name(-first.signal),
            message=cap(f"expiration timer {first.scope!r} expired", MAX_MESSAGE),
            round=self._round,
        )
        self._status.update(last_failure=failure)
        self._events.warning("root_cause", failure=failure.summary()[:1000])
        self._write_root_cause(failure)
        return True

    def _record_root_cause(self, failures: Mapping[int, int | None]) -> None:
        """The round's root cause (``root_cause.first_failure``) goes to the health report and
        the container's termination message."""
        seen_at = time.time()
        pod = self._environ.get("POD_NAME") or self._environ.get("HOSTNAME")
        records = [
            read_failure(
                self._workers.error_file(self._attempt, lr),
                local_rank=lr,
                status=int(code or 0),
                seen_at=seen_at,
                rank=None if self._base_rank is None else self._base_rank + lr,
                node=self._status.node,
                pod=pod,
                captured_tail=self._workers.stderr_tail(lr),
            )
            for lr, code in sorted(failures.items())
        ]
        for record in records:
            self._events.warning("worker_error", failure=record.summary()[:500])
        first = replace(first_failure(records), round=self._round)
        self._status.update(last_failure=first)
        self._events.warning("root_cause", failure=first.summary()[:1000])
        self._write_root_cause(first)

    def _write_root_cause(self, failure: WorkerFailure) -> None:
        self._root_cause = failure
        self._round_cause = failure
        self._write_termination()

    def _write_termination(self, final: bool = False, headline: str | None = None) -> None:
        """The termination message: this node's last root cause, the policy's last decision
        and, when ``final`` (the agent exits now, maybe before the operator's next poll), the
        restart counts it last saw. The kubelet keeps the message after we exit."""
        counts = None
        if final and self._counts is not None:
            counts = FinalCounts(self._handler.get_run_id(), dict(self._counts.by_reason))
        write_termination_message(
            self._root_cause, counts=counts, decision=self._decision, headline=headline
        )

    def _membership_change(self) -> RestartReason | None:
        try:
            waiting = self._handler.num_nodes_waiting()
            members_ok = self._handler.members_alive()
        except RendezvousError as exc:
            # etcd is only needed to re-form: keep training, the probe reports the outage.
            logger.debug("membership check failed: %s", exc)
            return None
        if not members_ok:
            if self._round_state_lost():
                return RestartReason.ETCD_RECOVERED
            if self._own_lease_lapsed():
                return RestartReason.MEMBERSHIP
            self._events.warning("member_lost")
            self._await_peer_count()
            return RestartReason.FAILURE
        if waiting > 0:
            self._events.info("nodes_waiting", waiting=waiting)
            return RestartReason.MEMBERSHIP
        return None

    def _own_lease_lapsed(self) -> bool:
        """Our own joined key is gone while we run: etcd saw no keep-alive of ours within the
        lease TTL (it or this agent was starved), so nobody failed. The group re-forms (the
        others saw us vanish), and the restart is a free ``membership`` one."""
        try:
            lapsed = not self._handler.holds_membership()
        except RendezvousError as exc:
            logger.debug("membership check failed: %s", exc)
            return False
        if lapsed:
            self._events.warning(
                "lease_lapsed", detail="etcd dropped this node's keys while it ran (lease TTL)"
            )
        return lapsed

    def _await_peer_count(self) -> None:
        """A member's key is gone: it died, or its lease lapsed while it ran. A live one counts
        the restart itself (``membership``, see ``_own_lease_lapsed``) when it notices; give it
        ``_PEER_COUNT_GRACE`` seconds to be first before counting a ``failure``. A dead member
        counts nothing, so this costs a lost node that grace, once."""
        deadline = time.monotonic() + _PEER_COUNT_GRACE
        while time.monotonic() < deadline:
            try:
                if self._counter.counted(self._round) is not None:
                    return
            except (RendezvousConnectionError, EtcdRequestError, RestartStateError) as exc:
                logger.debug("could not read the round's restart record: %s", exc)
                return
            self._status.beat()
            if self._stop_signal.wait(0.1):
                self._preempted()

    def _round_state_lost(self) -> bool:
        """etcd no longer holds our completed round (it was recreated or restored empty): the
        group re-forms, and what looked like a lost member or a failed worker is that loss (a
        peer that re-formed first stopped its workers, and ours lost their connections)."""
        try:
            gone = self._handler.round_state_lost()
        except RendezvousError as exc:
            logger.debug("round state check failed: %s", exc)
            return False
        if gone:
            self._events.warning("rendezvous_state_lost", detail="etcd lost the round's state")
        return gone

    def _restart(self, observed: RestartReason) -> None:
        self._status.update(state=AgentState.RESTARTING)
        counts: RestartCounts | None = None
        round_lost = False
        if suspects_round_loss(observed):
            # Reading waits for etcd (with the counter's patience) before we ask about the round.
            counts = self._etcd(self._counter.read)
            round_lost = self._round_state_lost()
        plan = plan_restart(observed, round_lost)
        reason = plan.reason
        decided: tuple[RestartReason, PolicyDecision | None] = (reason, None)
        if plan.agent_counts and reason.spends_budget and self._s.failure_policy.rules:
            decided = self._apply_policy(reason)  # a FailJob ends the job here
        reason, decision = decided
        if plan.agent_counts:
            # Count first, then stop: peers racing to count the same round see our reason.
            recorded = self._etcd(lambda: self._counter.record(self._round, reason))
            if decision is not None and recorded.counted:
                self._status.update(failure_policy=decision)
                self._decision = decision.to_json()
                self._write_termination()
        else:
            if counts is None:
                counts = self._etcd(self._counter.read)
            recorded = Recorded(False, reason, counts)
        codes = self._workers.stop(self._s.shutdown_timeout)
        counts = recorded.counts
        self._counts = counts
        self._metrics.set_restarts(counts.full())
        self._status.update(restarts_by_reason=counts.full())
        self._events.info(
            "group_stopped",
            reason=reason.value,
            counted_reason=recorded.reason.value,
            counted_here=recorded.counted,
            restarts_total=counts.total,
            restarts_spent=counts.spent,
            exit_codes=codes,
        )
        verdict = judge_budget(counts, self._s.max_restarts)
        if verdict.exhausted:
            self._etcd(lambda: self._counter.mark_budget_spent(counts, self._s.max_restarts))
            # The operator may never poll this count (we exit now).
            self._write_termination(final=True)
            try:
                self._handler.set_closed()
            except RendezvousError as exc:
                logger.warning("closing the rendezvous failed: %s", exc)
            raise _Exit(ExitCode.MAX_RESTARTS_EXCEEDED, verdict.detail)

    # -- failure policy ------------------------------------------------------------------------

    def _apply_policy(self, reason: RestartReason) -> tuple[RestartReason, PolicyDecision | None]:
        """The failure policy's verdict on this round's failure, as the reason to count it under
        and the decision to report (``None``: no rule matched). One decision per round for the
        job: the first agent to count the round decides (``record``), so an agent that only saw
        a peer's lost connection first gives the peer that saw the cause time to decide."""
        cause = self._round_cause
        if cause is not None and cause.is_consequence():
            self._await_peer_count()  # (a lost member was given that time already)
        facts = facts_of(reason.value, cause, oom_killed=self._oom_killed(cause))
        verdict = self._s.failure_policy.decide(facts)
        summary = None if cause is None else cause.summary()
        decision = decision_record(verdict, facts, self._round, time.time(), summary)
        if decision is None:
            return reason, None
        self._events.warning(
            "failure_policy",
            rule=decision.rule,
            action=decision.action.value,
            reason=reason.value,
            root_cause=decision.root_cause[:500],
        )
        if decision.action is Action.FAIL_JOB:
            self._fail_by_policy(reason, decision)
            return reason, None  # a peer decided the round first: its decision stands
        if decision.action is Action.IGNORE:
            return RestartReason.IGNORED, decision
        return reason, decision

    def _fail_by_policy(self, reason: RestartReason, decision: PolicyDecision) -> None:
        """``FailJob``: claim the round without counting it, say why the rendezvous closes,
        close it and exit; peers find it closed and exit the same way. Returns only when a peer
        had already counted the round (its decision stands)."""
        claimed = self._etcd(lambda: self._counter.record(self._round, reason, spend=False))
        if not claimed.counted:
            self._events.info("failure_policy_decided_by_peer", counted_reason=claimed.reason.value)
            return
        self._status.update(failure_policy=decision)
        self._etcd(lambda: self._counter.mark_failed_by_policy(decision))
        self._decision = decision.to_json()
        self._write_termination()
        try:
            self._handler.set_closed()
        except RendezvousError as exc:
            logger.warning("closing the rendezvous failed: %s", exc)
        raise _Exit(ExitCode.FAILURE_POLICY, decision.summary())

    def _oom_killed(self, cause: WorkerFailure | None) -> bool:
        """The worker died of SIGKILL while the container's OOM kill count went up."""
        if cause is None or cause.signal != "SIGKILL" or self._oom_kills_at_start is None:
            return False
        now = oom_kills()
        return now is not None and now > self._oom_kills_at_start

    # -- terminal paths ------------------------------------------------------------------------

    def _preempted(self) -> None:
        self._status.update(state=AgentState.STOPPING)
        self._events.info("sigterm_received")
        try:
            # Short patience: the grace period matters more than the count during an outage.
            self._counter.record(self._round, RestartReason.PREEMPTION, patience=2.0)
        except (RendezvousConnectionError, EtcdRequestError, RestartStateError) as exc:
            logger.warning("could not count the preemption: %s", exc)
        self._leave()
        self._workers.stop(self._s.shutdown_timeout)
        raise _Exit(ExitCode.TERMINATED, "SIGTERM")

    def _leave(self) -> None:
        try:
            self._handler.leave()
        except RendezvousError as exc:
            logger.warning("leaving the rendezvous failed: %s", exc)

    def _succeeded(self, store: Any, group_rank: int, group_world: int) -> None:
        self._events.info("workers_succeeded")
        self._status.update(state=AgentState.SUCCEEDED)
        # Exit barrier (like torchrun's): stay a live member until every node is done, so
        # nobody mistakes our exit for a lost member and restarts a finished job.
        try:
            store.set(_FINISHED_KEY, str(group_rank).encode())
            store.set(_EXIT_KEY.format(group_rank), b"1")
            deadline = time.monotonic() + _EXIT_BARRIER_TIMEOUT
            keys = [_EXIT_KEY.format(r) for r in range(group_world)]
            while not store.check(keys) and time.monotonic() < deadline:
                self._status.beat()
                if self._stop_signal.wait(0.1):
                    break
        except Exception as exc:  # the job is done; a broken barrier must not fail it
            logger.warning("exit barrier failed: %s", exc)
        try:
            self._handler.shutdown()
        except RendezvousError as exc:
            logger.warning("rendezvous shutdown failed: %s", exc)
        # The last round's restarts may have come after the operator's last poll.
        self._write_termination(final=True, headline="all workers exited 0")
        raise _Exit(ExitCode.SUCCEEDED, "all workers exited 0")

    def _etcd(self, fn: Callable[[], Any]) -> Any:
        """An etcd operation we cannot do without: exit 13 if etcd stays away too long."""
        try:
            return fn()
        except (RendezvousConnectionError, EtcdRequestError) as exc:
            raise _Exit(ExitCode.ETCD_UNREACHABLE, str(exc)) from exc
        except RestartStateError as exc:
            raise _Exit(ExitCode.WORKER_FAILED, f"corrupt restart state: {exc}") from exc

    def _check_etcd_deadline(self, what: str) -> None:
        since = self._unreachable_since()
        if since is not None and time.time() - since > self._s.etcd_timeout:
            raise _Exit(
                ExitCode.ETCD_UNREACHABLE,
                f"etcd unreachable for more than {self._s.etcd_timeout:g}s during {what}",
            )

    def _finish(self, code: ExitCode, detail: str) -> ExitCode:
        state = AgentState.SUCCEEDED if code is ExitCode.SUCCEEDED else AgentState.FAILED
        self._status.update(state=state, exit_reason=code.reason, waiting_since=None)
        log = self._events.info if code is ExitCode.SUCCEEDED else self._events.error
        log("agent_exiting", exit_code=int(code), reason=code.reason, detail=repr(detail))
        return code
