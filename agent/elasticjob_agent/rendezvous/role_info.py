"""What nodes tell each other after a round completes: role info, rank assignment, master.

Pure. Every value here is read from etcd, written by a peer: untrusted. A value that is not what
an agent writes, or out of bounds, raises ``RendezvousStateError`` naming the key. torchrun's
rank assignment (``assign_ranks``) is the reference (``SimpleElasticAgent._assign_worker_ranks``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard

from elasticjob_agent.errors import RendezvousStateError


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
