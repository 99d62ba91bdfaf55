"""How a step saved by ``W`` ranks is restored into ``W'`` ranks with the plain API (pure: no
torch, no I/O).

The rule, on a state dict saved by every rank:

- Every top-level entry is *replicated* (the same on every rank: a DDP model's and optimizer's
  state dicts, a step number, the ``ElasticSampler``'s state), except two reserved keys. A new
  rank may read a replicated entry from any old rank's shard.
- ``state["per_rank"]`` is *per-rank* (RNG state, anything a rank keeps for itself): new rank
  ``r`` gets the ``per_rank`` entry of old rank ``r mod W`` (with ``W' < W``, those of the old
  ranks ``W'..W-1`` are dropped; with ``W' > W``, some are handed to two new ranks).
- ``state["sharded"]`` is *rank-sharded* (each rank holds a different piece): it restores only
  into a world of the size that saved it. Resharding is DCP's business (``checkpoint.dcp``).

New rank ``r`` loads the whole shard of old rank ``r mod W`` (the replicated entries and its
per-rank entry). On a resize every old shard is also read by some new rank, to check that the
replicated entries really are: an entry whose keys, dtype or shape differ between old ranks is
a rank-sharded tensor that cannot be mapped, and the restore fails naming it. An entry whose
values differ with the same shape cannot be told from a DDP buffer (BatchNorm statistics differ
between DDP ranks until the next forward pass broadcasts rank 0's): it is restored from one
rank, with a warning that names it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elasticjob_agent.checkpoint.manifest import ShardId
from elasticjob_agent.protocol.checkpoint import RestoreReport

__all__ = [
    "PER_RANK_KEY",
    "SHARDED_KEY",
    "Difference",
    "ReadPlan",
    "RestoreReport",
    "choose_save",
    "complete_saves",
    "first_difference",
    "first_mismatch",
    "flatten",
    "nothing_restored_reason",
    "read_plan",
    "replicated_entries",
    "sharded_entries",
]

PER_RANK_KEY = "per_rank"
"""The top-level entry of a state dict that is per rank: new rank r takes old rank r mod W's."""
SHARDED_KEY = "sharded"
"""The top-level entry that is rank-sharded: restored only into the world size that saved it."""

Save = tuple[int, int]
"""A saved step and the world size that saved it."""


@dataclass(frozen=True)
class ReadPlan:
    """What new ``rank`` of ``world_size`` reads of a step saved by ``saved_world_size`` ranks:
    ``source`` (the old rank whose shard it loads) and ``reads`` (every old shard it reads,
    ``source`` first; the others only to check the replicated entries)."""

    rank: int
    saved_world_size: int
    world_size: int
    source: int
    reads: tuple[int, ...]

    @property
    def resized(self) -> bool:
        return self.saved_world_size != self.world_size


def read_plan(rank: int, saved_world_size: int, world_size: int) -> ReadPlan:
    """The rule above. Over the new ranks, ``reads`` covers every old rank exactly once when
    the world shrinks, and every old rank at least once when it grows."""
    if not 0 <= rank < world_size or saved_world_size < 1:
        raise ValueError(f"rank {rank} of {world_size} restoring a save of {saved_world_size}")
    source = rank % saved_world_size
    others = range(rank + world_size, saved_world_size, world_size)
    return ReadPlan(rank, saved_world_size, world_size, source, (source, *others))


def complete_saves(shards: Iterable[ShardId]) -> set[Save]:
    """``(step, world_size)`` for which every rank of that world size is in ``shards``."""
    ranks: dict[Save, set[int]] = {}
    for s in shards:
        ranks.setdefault((s.step, s.world_size), set()).add(s.rank)
    return {save for save, seen in ranks.items() if len(seen) == save[1]}


def choose_save(
    views: Iterable[Iterable[Save]], refused: Iterable[Save], world_size: int
) -> Save | None:
    """The save every rank restores: the newest step complete in every rank's view, minus the
    ``refused`` ones; for a step saved by two world sizes, the current one, else the larger.
    The same answer on every rank (they all pass the same gathered views)."""
    common: set[Save] | None = None
    for view in views:
        common = set(view) if common is None else common & set(view)
    usable = (common or set()) - set(refused)
    if not usable:
        return None
    return max(usable, key=lambda s: (s[0], s[1] == world_size, s[1]))


def nothing_restored_reason(
    seen: Iterable[ShardId], views: Sequence[Iterable[Save]], refused: Mapping[Save, str]
) -> str:
    """Why no save could be restored although shards were ``seen`` (by any rank): the value
    the caller reports. ``views``: each rank's complete saves; ``refused``: a save that was
    tried and why it failed."""
    shards = set(seen)
    if refused:
        return "; ".join(
            f"step {step} (saved by {world} ranks): {why}"
            for (step, world), why in sorted(refused.items(), reverse=True)
        )
    everywhere = set.union(set(), *(set(v) for v in views))
    if everywhere:
        step, world = max(everywhere)
        missing = [r for r, v in enumerate(views) if (step, world) not in set(v)]
        return (
            f"step {step} (saved by {world} ranks) is complete for some ranks but ranks "
            f"{missing} cannot reach all of its shards (their node cannot read the holders)"
        )
    step, world = max((s.step, s.world_size) for s in shards)
    have = {s.rank for s in shards if (s.step, s.world_size) == (step, world)}
    lost = [r for r in range(world) if r not in have]
    shown = ", ".join(str(r) for r in lost[:20]) + (", ..." if len(lost) > 20 else "")
    return (
        f"no step is complete on every rank: the newest, step {step} (saved by {world} ranks), "
        f"has no copy of the shards of ranks {shown} in memory, on a peer or on disk (lost with "
        "their node and its replica, and not persisted?)"
    )


def flatten(value: Any, leaf: Callable[[Any], Any], prefix: str = "") -> dict[str, Any]:
    """Entry path (``model.layer.weight``, ``optim.state.0.exp_avg``) to ``leaf(value)`` for
    every leaf of nested dicts, lists and tuples, in order."""
    out: dict[str, Any] = {}
    if isinstance(value, dict) and value:
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, (list, tuple)) and value and not hasattr(value, "_fields"):
        items = enumerate(value)
    else:
        out[prefix] = leaf(value)
        return out
    for key, item in items:
        out.update(flatten(item, leaf, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _under(path: str, key: str) -> bool:
    return path == key or path.startswith(key + ".")


def replicated_entries(entries: Mapping[str, Any]) -> dict[str, Any]:
    """The replicated entries of a ``flatten``ed state: all but ``per_rank`` and ``sharded``."""
    return {
        p: v
        for p, v in entries.items()
        if not _under(p, PER_RANK_KEY) and not _under(p, SHARDED_KEY)
    }


def sharded_entries(entries: Mapping[str, Any]) -> list[str]:
    """The paths under ``sharded`` of a ``flatten``ed state."""
    return [p for p in entries if _under(p, SHARDED_KEY)]


@dataclass(frozen=True)
class Difference:
    """The first entry (path) whose digest differs between old ranks ``a`` and ``b``; a
    digest of ``None`` means the entry is missing there."""

    entry: str
    a: int
    b: int
    digest_a: Any
    digest_b: Any


def first_difference(
    digests: Mapping[int, Mapping[str, Any]], part: Callable[[Any], Any] = lambda d: d
) -> Difference | None:
    """The first entry whose ``part(digest)`` differs between two old ranks, compared with the
    lowest old rank; entries in the lowest rank's order, then the ones it lacks."""
    if not digests:
        return None
    base_rank = min(digests)
    base = digests[base_rank]
    for rank in sorted(digests):
        other = digests[rank]
        for entry in [*base, *(e for e in other if e not in base)]:
            mine = part(base[entry]) if entry in base else None
            theirs = part(other[entry]) if entry in other else None
            if mine != theirs:
                return Difference(entry, base_rank, rank, mine, theirs)
    return None


def first_mismatch(want: Mapping[str, Any], got: Mapping[str, Any]) -> str | None:
    """How a restored state fails the caller's template, naming the first mismatched key;
    ``None`` when it matches. Both are ``flatten``ed signatures (path to ``(dtype, shape)``
    for a tensor, ``None`` for a plain value or an empty container); only the template's
    top-level entries are compared (``like={"model": model.state_dict()}`` checks the model
    only). A plain value or empty container in the template (a fresh optimizer's empty
    ``state``) matches whatever the checkpoint holds under it."""
    tops = {path.split(".", 1)[0] for path in want}
    prefixes = {p.rsplit(".", n)[0] for p in got for n in range(1, p.count(".") + 1)}
    open_ended = [w for w, signature in want.items() if signature is None]
    for path, signature in want.items():
        if path not in got and not (signature is None and path in prefixes):
            return f"key {path!r} is missing from the checkpoint"
        if signature is not None and signature != got[path]:
            return (
                f"key {path!r} is {_describe(got[path])} in the checkpoint but "
                f"{_describe(signature)} in the model"
            )
    for path in got:
        if path.split(".", 1)[0] not in tops or path in want:
            continue
        if not any(path.startswith(w + ".") for w in open_ended):
            return f"key {path!r} is in the checkpoint but not in the model"
    return None


def _describe(signature: Any) -> str:
    if isinstance(signature, tuple) and len(signature) == 2:
        dtype, shape = signature
        return f"{dtype} of shape {list(shape)}"
    return "a plain value"
