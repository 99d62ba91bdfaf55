"""The environment of each worker, exactly as torchrun builds it (pure functions).

Reference: torch's ``LocalElasticAgent._start_workers`` and
``SimpleElasticAgent._assign_worker_ranks``.
Workers inherit the agent's environment, then get the variables below on top.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeGuard

from elasticjob_agent.rendezvous.errors import RendezvousStateError

TIMER_SOCKET_ENV = "ELASTICJOB_TIMER_SOCKET"
COLLECTIVE_TIMEOUT_ENV = "ELASTICJOB_COLLECTIVE_TIMEOUT_SECONDS"


@dataclass(frozen=True)
class RoleInfo:
    """What one node tells the others at the start of a round."""

    role: str
    group_rank: int
    local_world_size: int

    def encode(self) -> bytes:
        return json.dumps(
            {
                "role": self.role,
                "groupRank": self.group_rank,
                "localWorldSize": self.local_world_size,
            }
        ).encode()

    @classmethod
    def decode(cls, raw: bytes, key: str = "role info") -> RoleInfo:
        """Parse a peer's role info read from etcd at ``key`` (untrusted): anything but what
        ``encode`` writes, within bounds, raises ``RendezvousStateError`` naming the key."""
        if len(raw) > MAX_ROLE_INFO_BYTES:
            raise RendezvousStateError(f"role info at {key} is {len(raw)} bytes: corrupt")
        try:
            data = json.loads(raw, parse_constant=_no_constant)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise RendezvousStateError(f"role info at {key} is not valid JSON") from None
        if not isinstance(data, dict):
            raise RendezvousStateError(f"role info at {key} is not a JSON object")
        role, rank, size = data.get("role"), data.get("groupRank"), data.get("localWorldSize")
        if not isinstance(role, str) or not 0 < len(role) <= MAX_ROLE_CHARS:
            raise RendezvousStateError(
                f"role info at {key}: role must be 1-{MAX_ROLE_CHARS} characters"
            )
        if not _bounded_int(rank, 0, MAX_GROUP_RANK):
            raise RendezvousStateError(
                f"role info at {key}: groupRank must be an integer in 0..{MAX_GROUP_RANK}"
            )
        if not _bounded_int(size, 1, MAX_LOCAL_WORLD_SIZE):
            raise RendezvousStateError(
                f"role info at {key}: localWorldSize must be an integer in "
                f"1..{MAX_LOCAL_WORLD_SIZE}"
            )
        return cls(role, rank, size)


MAX_ROLE_INFO_BYTES = 4096
MAX_ROLE_CHARS = 256
MAX_GROUP_RANK = 1_000_000
MAX_LOCAL_WORLD_SIZE = 4096


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not allowed")


def _bounded_int(value: object, low: int, high: int) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def parse_master(key: str, raw: bytes) -> tuple[str, int]:
    """``host:port`` that rank 0 published at ``key`` (untrusted); ``RendezvousStateError``
    naming the key when it is not one."""
    text = raw.decode("utf-8", errors="replace")
    host, sep, port = text.rpartition(":")
    if (
        not sep
        or not 0 < len(host) <= 255
        or any(c.isspace() for c in host)
        or not (port.isascii() and port.isdigit() and 0 < int(port) < 65536)
    ):
        raise RendezvousStateError(f"master address at {key} is {text[:80]!r}, not host:port")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class RankAssignment:
    """One node's ranks: workers get ``base + local_rank``."""

    base_global_rank: int
    global_world_size: int
    base_role_rank: int
    role_world_size: int


def assign_ranks(infos: Sequence[RoleInfo]) -> list[RankAssignment]:
    """torchrun's assignment: global ranks by cumulative ``local_world_size`` in group-rank order,
    role ranks the same within each role. ``infos[i]`` must be group rank ``i``.

    With equal ``nproc_per_node`` this is ``group_rank * nproc + local_rank``.
    """
    for index, info in enumerate(infos):
        if info.group_rank != index:
            raise ValueError(f"role info #{index} is for group rank {info.group_rank}")
    global_size = sum(i.local_world_size for i in infos)
    role_sizes: dict[str, int] = {}
    for info in infos:
        role_sizes[info.role] = role_sizes.get(info.role, 0) + info.local_world_size
    out = []
    base_global = 0
    role_next: dict[str, int] = {}
    for info in infos:
        base_role = role_next.get(info.role, 0)
        out.append(RankAssignment(base_global, global_size, base_role, role_sizes[info.role]))
        base_global += info.local_world_size
        role_next[info.role] = base_role + info.local_world_size
    return out


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

    nccl_async_error_handling: str = "3"
    nccl_heartbeat_timeout: float = 600.0
    nccl_monitoring: str = "1"
    nccl_collective_timeout: float = 1800.0
    timer_socket: str | None = None


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
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": knobs.nccl_async_error_handling,
            "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": _seconds(knobs.nccl_heartbeat_timeout),
            "TORCH_NCCL_ENABLE_MONITORING": knobs.nccl_monitoring,
            COLLECTIVE_TIMEOUT_ENV: _seconds(knobs.nccl_collective_timeout),
        }
    )
    # torchrun sets OMP_NUM_THREADS=1 for multi-worker nodes unless the user chose a value.
    if "OMP_NUM_THREADS" not in parent_env and ctx.local_world_size > 1:
        env["OMP_NUM_THREADS"] = "1"
    if knobs.timer_socket is not None:
        env[TIMER_SOCKET_ENV] = knobs.timer_socket
    if error_file is not None:
        env["TORCHELASTIC_ERROR_FILE"] = error_file
    return env
