"""The environment of each worker, exactly as torchrun builds it (pure functions).

Reference: torch's ``LocalElasticAgent._start_workers`` and
``SimpleElasticAgent._assign_worker_ranks``.
Workers inherit the agent's environment, then get the variables below on top.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from elasticjob_agent.protocol import defaults
from elasticjob_agent.protocol.defaults import COLLECTIVE_TIMEOUT_ENV, TIMER_SOCKET_ENV
from elasticjob_agent.rendezvous.role_info import RankAssignment

TORCH_TIMER_FILE_ENV = "TORCHELASTIC_TIMER_FILE"


@dataclass(frozen=True)
class GroupContext:
    """What every worker of this node shares in one round."""

    run_id: str
    role: str
    group_rank: int
    group_world_size: int
    local_world_size: int
    master_addr: str
    master_port: int
    restart_count: int
    max_restarts: int
    assignment: RankAssignment


@dataclass(frozen=True)
class AgentKnobs:
    """Agent-wide settings passed to workers (NCCL failure detection, timers)."""

    nccl_async_error_handling: str = str(defaults.NCCL_ASYNC_ERROR_HANDLING)
    nccl_heartbeat_timeout: float = float(defaults.NCCL_HEARTBEAT_TIMEOUT_SECONDS)
    nccl_monitoring: str = str(int(defaults.NCCL_MONITORING))
    nccl_collective_timeout: float = float(defaults.NCCL_COLLECTIVE_TIMEOUT_SECONDS)
    timer_socket: str | None = None
    torch_timer_file: str | None = None
    """The FIFO of torch's ``FileTimerClient`` (``TORCHELASTIC_TIMER_FILE``), served by us."""


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def worker_env(
    ctx: GroupContext,
    local_rank: int,
    parent_env: Mapping[str, str],
    knobs: AgentKnobs,
    error_file: str | None = None,
) -> dict[str, str]:
    """The full environment of local worker ``local_rank`` (parent environment included)."""
    if not 0 <= local_rank < ctx.local_world_size:
        raise ValueError(f"local_rank {local_rank} outside 0..{ctx.local_world_size - 1}")
    a = ctx.assignment
    env = dict(parent_env)
    env.update(
        {
            "LOCAL_RANK": str(local_rank),
            "RANK": str(a.base_global_rank + local_rank),
            "GROUP_RANK": str(ctx.group_rank),
            "ROLE_RANK": str(a.base_role_rank + local_rank),
            "ROLE_NAME": ctx.role,
            "LOCAL_WORLD_SIZE": str(ctx.local_world_size),
            "WORLD_SIZE": str(a.global_world_size),
            "GROUP_WORLD_SIZE": str(ctx.group_world_size),
            "ROLE_WORLD_SIZE": str(a.role_world_size),
            "MASTER_ADDR": ctx.master_addr,
            "MASTER_PORT": str(ctx.master_port),
            "TORCHELASTIC_RESTART_COUNT": str(ctx.restart_count),
            "TORCHELASTIC_MAX_RESTARTS": str(ctx.max_restarts),
            "TORCHELASTIC_RUN_ID": ctx.run_id,
            # Workers never talk to the rendezvous store: they get their own TCPStore.
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            defaults.NCCL_ASYNC_ERROR_HANDLING_ENV: knobs.nccl_async_error_handling,
            defaults.NCCL_HEARTBEAT_TIMEOUT_ENV: _seconds(knobs.nccl_heartbeat_timeout),
            defaults.NCCL_MONITORING_ENV: knobs.nccl_monitoring,
            COLLECTIVE_TIMEOUT_ENV: _seconds(knobs.nccl_collective_timeout),
        }
    )
    # torchrun sets OMP_NUM_THREADS=1 for multi-worker nodes unless the user chose a value.
    if "OMP_NUM_THREADS" not in parent_env and ctx.local_world_size > 1:
        env["OMP_NUM_THREADS"] = "1"
    if knobs.timer_socket is not None:
        env[TIMER_SOCKET_ENV] = knobs.timer_socket
    if knobs.torch_timer_file is not None:
        env[TORCH_TIMER_FILE_ENV] = knobs.torch_timer_file
    if error_file is not None:
        env["TORCHELASTIC_ERROR_FILE"] = error_file
    return env
