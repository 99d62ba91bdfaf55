"""The role exchange after a rendezvous, in O(1) store requests per node: rank 0 gathers every
node's role, publishes one table, every other node reads that table once.

torchrun's agents exchange ``(role, local_world_size)`` so that each can number its workers
(``worker_env.assign_ranks``). Reading one key per peer costs O(N) requests per node and O(N^2)
per restart of the job; torch fixed the same in its agent (pytorch#124982). Here:

- node ``r > 0`` writes ``elasticjob/roles/<r>`` and reads ``elasticjob/role-table``: one
  ``set_then_get`` on our etcd stores (one transaction, then a watch from its revision if the
  table is not there yet), a ``set`` and a ``get`` on any other ``torch.distributed.Store``;
- node 0 gathers ``elasticjob/roles/1..N-1`` with one ``multi_get`` (one range read and one watch
  on an ``EtcdStore``) and writes the table: 2 calls.

The table is run-length encoded (``[[role, local_world_size, count], ...]``), so in the usual job
(one role, the same ``nproc_per_node`` everywhere) it is one run whatever N, and each node
computes its ranks from the runs in O(runs), not O(N).

The exchange is written once, as a generator of store operations (``exchange``), and driven
either by a synchronous ``torch.distributed.Store`` (``exchange_roles``, the agent) or by an
asynchronous store (``exchange_roles_async``, the benchmark's simulated nodes). Everything read
from the store is untrusted: a malformed value raises ``RendezvousStateError`` naming its key.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from elasticjob_agent.errors import RendezvousStateError
from elasticjob_agent.rendezvous.role_info import RankAssignment, RoleInfo

ROLE_PREFIX = "elasticjob/roles/"
TABLE_KEY = "elasticjob/role-table"
TABLE_VERSION = 1
MAX_ROLE_LENGTH = 256


def role_key(rank: int) -> str:
    """Zero-padded, so the keys of ranks 1..N-1 are contiguous in key order (one range)."""
    return f"{ROLE_PREFIX}{rank:08d}"


@dataclass(frozen=True)
class Run:
    """``count`` consecutive group ranks with the same role and local world size."""

    role: str
    local_world_size: int
    count: int


# --- the table (pure) ---------------------------------------------------------------------


def runs_of(infos: Sequence[RoleInfo]) -> tuple[Run, ...]:
    """Run-length encode ``infos`` (in group-rank order)."""
    runs: list[Run] = []
    for info in infos:
        last = runs[-1] if runs else None
        if last is not None and (last.role, last.local_world_size) == (
            info.role,
            info.local_world_size,
        ):
            runs[-1] = Run(last.role, last.local_world_size, last.count + 1)
        else:
            runs.append(Run(info.role, info.local_world_size, 1))
    return tuple(runs)


def encode_table(runs: Sequence[Run]) -> bytes:
    body = [[r.role, r.local_world_size, r.count] for r in runs]
    return json.dumps({"v": TABLE_VERSION, "runs": body}, separators=(",", ":")).encode()


def _bad(key: str, why: str) -> RendezvousStateError:
    return RendezvousStateError(f"corrupt role exchange state at {key!r}: {why}")


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def decode_table(raw: bytes, group_world: int, key: str = TABLE_KEY) -> tuple[Run, ...]:
    """The runs in ``raw``; ``RendezvousStateError`` naming ``key`` unless they describe exactly
    ``group_world`` nodes with non-empty roles and positive local world sizes."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(key, f"not JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("v") != TABLE_VERSION:
        raise _bad(key, f'expected a JSON object with "v": {TABLE_VERSION}, got {raw[:200]!r}')
    body = data.get("runs")
    if not isinstance(body, list) or not body:
        raise _bad(key, '"runs" must be a non-empty list')
    runs = []
    for item in body:
        if (
            not isinstance(item, list)
            or len(item) != 3
            or not isinstance(item[0], str)
            or not 0 < len(item[0]) <= MAX_ROLE_LENGTH
            or not _positive(item[1])
            or not _positive(item[2])
        ):
            raise _bad(key, f"a run must be [role, local_world_size >= 1, count >= 1]: {item!r}")
        runs.append(Run(item[0], item[1], item[2]))
    total = sum(r.count for r in runs)
    if total != group_world:
        raise _bad(key, f"the table covers {total} nodes, the round has {group_world}")
    return tuple(runs)


def decode_role(key: str, raw: bytes, rank: int) -> RoleInfo:
    """Node ``rank``'s role info; ``RendezvousStateError`` naming ``key`` if it is malformed or
    claims another rank."""
    info = RoleInfo.decode(raw, key)  # names the key itself when malformed
    if info.group_rank != rank:
        raise _bad(key, f"written for group rank {info.group_rank}, expected {rank}")
    if not 0 < len(info.role) <= MAX_ROLE_LENGTH:
        raise _bad(key, f"role must be 1-{MAX_ROLE_LENGTH} characters")
    return info


def assignment(runs: Sequence[Run], rank: int) -> RankAssignment:
    """``worker_env.assign_ranks`` of the expanded table, for one rank, in O(len(runs))."""
    global_size = sum(r.local_world_size * r.count for r in runs)
    role_sizes: dict[str, int] = {}
    for r in runs:
        role_sizes[r.role] = role_sizes.get(r.role, 0) + r.local_world_size * r.count
    first = 0
    base_global = 0
    role_next: dict[str, int] = {}
    for r in runs:
        if rank < first + r.count:
            offset = (rank - first) * r.local_world_size
            base_role = role_next.get(r.role, 0) + offset
            return RankAssignment(base_global + offset, global_size, base_role, role_sizes[r.role])
        first += r.count
        base_global += r.local_world_size * r.count
        role_next[r.role] = role_next.get(r.role, 0) + r.local_world_size * r.count
    raise ValueError(f"rank {rank} is not in a table of {first} nodes")


# --- the exchange, as store operations (pure) ------------------------------------------------


@dataclass(frozen=True)
class MultiGet:
    keys: tuple[str, ...]


@dataclass(frozen=True)
class Set:
    key: str
    value: bytes


@dataclass(frozen=True)
class SetThenGet:
    """Set ``set_key`` to ``value``, then get ``get_key``, a key written only after it."""

    set_key: str
    value: bytes
    get_key: str


StoreOp = MultiGet | Set | SetThenGet
Flow = Generator[StoreOp, Any, RankAssignment]


def exchange(mine: RoleInfo, group_world: int) -> Flow:
    """The exchange for this node: yields store operations, receives their results
    (``SetThenGet``: bytes, ``MultiGet``: a list of bytes, ``Set``: ignored), returns this
    node's ranks."""
    rank = mine.group_rank
    if not 0 <= rank < group_world:
        raise ValueError(f"group rank {rank} outside 0..{group_world - 1}")
    if group_world == 1:
        return assignment(runs_of([mine]), 0)
    if rank == 0:
        keys = tuple(role_key(r) for r in range(1, group_world))
        values = yield MultiGet(keys)
        if len(values) != len(keys):
            raise RendezvousStateError(f"asked for {len(keys)} role keys, got {len(values)}")
        infos = [mine]
        for r, (key, raw) in enumerate(zip(keys, values, strict=True), start=1):
            infos.append(decode_role(key, bytes(raw), r))
        runs = runs_of(infos)
        yield Set(TABLE_KEY, encode_table(runs))
        return assignment(runs, 0)
    # Rank 0 writes the table only once it has read every role: after ours.
    raw = yield SetThenGet(role_key(rank), mine.encode(), TABLE_KEY)
    return assignment(decode_table(bytes(raw), group_world), rank)


# --- drivers --------------------------------------------------------------------------------


class SyncStore(Protocol):
    """The part of ``torch.distributed.Store`` the exchange uses (blocking ``get``s)."""

    def set(self, key: str, value: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def multi_get(self, keys: list[str]) -> list[bytes]: ...


@runtime_checkable
class SetThenGetStore(Protocol):
    """A store that writes a key and reads one written after it in one step (ours)."""

    def set_then_get(self, set_key: str, value: bytes, get_key: str) -> bytes: ...


class AsyncStore(Protocol):
    async def set(self, key: str, value: bytes) -> None: ...

    async def multi_get(self, keys: list[str]) -> list[bytes]: ...

    async def set_then_get(self, set_key: str, value: bytes, get_key: str) -> bytes: ...


def exchange_roles(store: SyncStore, mine: RoleInfo, group_world: int) -> RankAssignment:
    """Run the exchange on a ``torch.distributed.Store`` (the round's store)."""
    flow = exchange(mine, group_world)
    result: Any = None
    try:
        while True:
            op = flow.send(result)
            if isinstance(op, Set):
                store.set(op.key, op.value)
                result = None
            elif isinstance(op, SetThenGet):
                if isinstance(store, SetThenGetStore):
                    result = store.set_then_get(op.set_key, op.value, op.get_key)
                else:
                    store.set(op.set_key, op.value)
                    result = store.get(op.get_key)
            else:
                result = store.multi_get(list(op.keys))
    except StopIteration as done:
        value: RankAssignment = done.value
        return value


async def exchange_roles_async(
    store: AsyncStore, mine: RoleInfo, group_world: int
) -> RankAssignment:
    """The same exchange on an asynchronous store."""
    flow = exchange(mine, group_world)
    result: Any = None
    try:
        while True:
            op = flow.send(result)
            if isinstance(op, Set):
                await store.set(op.key, op.value)
                result = None
            elif isinstance(op, SetThenGet):
                result = await store.set_then_get(op.set_key, op.value, op.get_key)
            else:
                result = await store.multi_get(list(op.keys))
    except StopIteration as done:
        value: RankAssignment = done.value
        return value
