"""A round's set-up after its rendezvous: ranks by role, the master address, the workers'
environment, and the local workers started."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.health import AgentState, WorkerStatus
from elasticjob_agent.rendezvous import RendezvousStateError
from elasticjob_agent.rendezvous.role_info import RankAssignment, RoleInfo, parse_master
from elasticjob_agent.rendezvous.roles import exchange_roles
from elasticjob_agent.supervision.context import AgentExit, Supervision
from elasticjob_agent.supervision.oom import oom_kills
from elasticjob_agent.supervision.worker_env import GroupContext, worker_env

MASTER_KEY = "elasticjob/master"


@dataclass(frozen=True)
class Group:
    """This node's place in the round that was set up."""

    store: Any
    """The round's store (torch's ``Store`` API)."""
    rank: int
    """The node's group rank."""
    world_size: int
    """Nodes in the round."""


def set_up_round(sup: Supervision, info: Any, rdzv_seconds: float) -> Group:
    """Start this node's workers in the round ``info`` (a ``RendezvousInfo``) completed.
    Raises ``AgentExit`` when etcd stays away or a peer's value in etcd is not one we write."""
    s = sup.settings
    handler_round = sup.handler.round
    sup.round = sup.attempt if handler_round is None else int(handler_round)
    group_rank, group_world = int(info.rank), int(info.world_size)
    sup.events.ctx = sup.events.ctx.with_round(sup.round, group_rank, None)
    sup.events.info(
        "rendezvous_completed", seconds=f"{rdzv_seconds:.3f}", group_world_size=group_world
    )
    counts = sup.etcd(sup.counter.read)
    try:
        assignment = _exchange_roles(sup, info.store, group_rank, group_world)
        master_addr, master_port = _master(sup, info, group_rank)
    except RendezvousStateError as exc:  # a peer's value in etcd is not what agents write
        raise AgentExit(ExitCode.WORKER_FAILED, f"corrupt rendezvous state: {exc}") from exc
    ctx = GroupContext(
        run_id=sup.handler.get_run_id(),
        role=s.role,
        group_rank=group_rank,
        group_world_size=group_world,
        local_world_size=s.nproc_per_node,
        master_addr=master_addr,
        master_port=master_port,
        restart_count=counts.total,
        max_restarts=s.max_restarts,
        assignment=assignment,
    )
    sup.events.ctx = sup.events.ctx.with_round(sup.round, group_rank, assignment.global_world_size)
    sup.metrics.set_round(sup.round, assignment.global_world_size, rdzv_seconds)
    sup.metrics.set_restarts(counts.full())
    sup.counts = counts
    envs = {
        lr: worker_env(
            ctx,
            lr,
            sup.environ,
            s.knobs,
            error_file=str(sup.workers.error_file(sup.attempt, lr)),
        )
        for lr in range(s.nproc_per_node)
    }
    sup.base_rank = assignment.base_global_rank
    sup.round_cause = None
    # Read every round (one small file): the root cause names an OOM kill, policy or not.
    sup.oom_kills_at_start = oom_kills()
    sup.workers.start(envs, sup.attempt, s.role)
    pids = sup.workers.pids()
    sup.timers.reset(frozenset(pids.values()))
    now = time.time()
    sup.status.update(
        state=AgentState.RUNNING,
        round=sup.round,
        group_rank=group_rank,
        group_world_size=group_world,
        world_size=assignment.global_world_size,
        restarts_by_reason=counts.full(),
        waiting_since=None,
        last_rendezvous_seconds=rdzv_seconds,
        last_progress=now,
        round_started_at=now,
        workers=tuple(WorkerStatus(lr, pid, None) for lr, pid in sorted(pids.items())),
    )
    sup.events.info(
        "workers_started",
        master=f"{master_addr}:{master_port}",
        first_rank=assignment.base_global_rank,
        restart_count=counts.total,
        rendezvous_s=f"{rdzv_seconds:.3f}",
        warm=sup.workers.warm_started,
    )
    return Group(info.store, group_rank, group_world)


def _exchange_roles(
    sup: Supervision, store: Any, group_rank: int, group_world: int
) -> RankAssignment:
    """torchrun's role-rank exchange through the round's store, O(1) requests per node."""
    mine = RoleInfo(sup.settings.role, group_rank, sup.settings.nproc_per_node)
    return exchange_roles(store, mine, group_world)


def _master(sup: Supervision, info: Any, group_rank: int) -> tuple[str, int]:
    bootstrap = getattr(info, "bootstrap_store_info", None)
    if bootstrap is not None and getattr(bootstrap, "master_addr", None):
        return str(bootstrap.master_addr), int(bootstrap.master_port)
    # Fallback when the handler does not publish it: rank 0's node does, through the store.
    if group_rank == 0:
        addr = sup.settings.local_addr or socket.getfqdn()
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = int(sock.getsockname()[1])
        info.store.set(MASTER_KEY, f"{addr}:{port}".encode())
        return addr, port
    return parse_master(MASTER_KEY, bytes(info.store.get(MASTER_KEY)))
