"""The plain API's restore: every rank agrees on one saved step, in a world of any size, reads
it (verified, from memory, a peer or disk) and maps it onto the current ranks by
``checkpoint.resize``'s rule.

A restore ends in one of three ways, the same on every rank:

- a ``RestoreReport`` and the state (the newest step every rank could read);
- ``None``: no rank can see any shard, nothing was ever saved (a fresh start);
- ``NothingRestoredError``: shards exist but none could be restored (a torn step, corrupt
  copies, an entry that cannot be mapped onto the new world, a state that does not match the
  caller's template). Its ``reason`` says why; a job never silently restarts from step 0.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import time
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from elasticjob_agent.checkpoint import tensors
from elasticjob_agent.checkpoint.manifest import ShardId
from elasticjob_agent.checkpoint.node import Source
from elasticjob_agent.checkpoint.resize import (
    PER_RANK_KEY,
    SHARDED_KEY,
    RestoreReport,
    Save,
    choose_save,
    complete_saves,
    first_difference,
    first_mismatch,
    nothing_restored_reason,
    read_plan,
    replicated_entries,
    sharded_entries,
)
from elasticjob_agent.checkpoint.store import CheckpointError

logger = logging.getLogger(__name__)

STATE_FILE = "state.bin"

__all__ = [
    "CheckpointMismatchError",
    "NothingRestoredError",
    "UnmappableEntryError",
    "restore",
]


class NothingRestoredError(CheckpointError):
    """A checkpoint exists but nothing could be restored; ``reason`` says why (the value the
    agent reports)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"no checkpoint restored: {reason}")
        self.reason = reason


class UnmappableEntryError(NothingRestoredError):
    """A rank-sharded entry that a restore into another world size cannot map; ``entry``
    names it."""

    def __init__(self, entry: str, reason: str) -> None:
        super().__init__(reason)
        self.entry = entry


class CheckpointMismatchError(NothingRestoredError):
    """The restored state does not match the caller's template (``load(like=...)``);
    ``reason`` names the first mismatched key."""


class Reader(Protocol):
    """What a restore needs of the node (``checkpoint.api.Backend``)."""

    def candidates(self) -> list[ShardId]: ...
    def fetch(self, shard: ShardId) -> Source: ...
    def restored(self, step: int, report: RestoreReport | None = None) -> None: ...
    def restore_failed(self, reason: str) -> None: ...


Gather = Callable[[Any], list[Any]]

_DCP = (
    "save rank-sharded state with DCP (elasticjob_agent.checkpoint.dcp), which reshards, or "
    f"restore into the world size that saved it; per-rank state belongs under "
    f"state[{PER_RANK_KEY!r}]"
)


def restore(
    backend: Reader,
    rank: int,
    world: int,
    gather: Gather,
    like: Any = None,
) -> tuple[RestoreReport, Any] | None:
    """Restore the newest save every rank can read into this world (all ranks call it
    together); see the module's docstring for the outcomes. ``like``: a template state dict
    (``{"model": model.state_dict()}``) the restored state must match, key by key and shape
    by shape."""
    started = time.monotonic()
    shards = backend.candidates()
    seen = gather((sorted(complete_saves(shards)), [s.as_list() for s in shards]))
    views: list[list[Save]] = [[tuple(v) for v in view] for view, _ in seen]
    all_shards = {ShardId.from_list(s) for _, listed in seen for s in listed}
    if not all_shards:
        return None
    refused: dict[Save, str] = {}
    while (save := choose_save(views, refused, world)) is not None:
        found, error = _read(backend, rank, world, save)
        answers = gather((error, found[2] if found else {}))
        errors = [e for e, _ in answers if e]
        if errors or found is None:
            refused[save] = errors[0] if errors else f"rank {rank} read nothing"
            logger.warning("checkpoint: step %d refused: %s", save[0], refused[save])
            continue
        source, state, _ = found
        if save[1] != world:
            _check_replicas(save, {o: d for _, ds in answers for o, d in ds.items()}, backend)
        if like is not None:
            mismatch = first_mismatch(tensors.signature(like), tensors.signature(state))
            mismatches = [m for m in gather(mismatch) if m]
            if mismatches:
                _fail(backend, CheckpointMismatchError(f"step {save[0]}: {mismatches[0]}"))
        report = RestoreReport(save[0], save[1], world, source.kind, time.monotonic() - started)
        backend.restored(save[0], report)
        logger.info(
            "checkpoint: rank %d of %d restored step %d (saved by %d ranks) from %s in %.2fs",
            rank,
            world,
            report.step,
            report.saved_world_size,
            report.source,
            report.seconds,
        )
        return report, state
    _fail(backend, NothingRestoredError(nothing_restored_reason(all_shards, views, refused)))


def _read(
    backend: Reader, rank: int, world: int, save: Save
) -> tuple[tuple[Source, Any, dict[int, Any]] | None, str | None]:
    """This rank's part of ``save``: its source shard's state, and on a resize the digests of
    every old shard it reads; or why it could not."""
    step, saved = save
    plan = read_plan(rank, saved, world)
    try:
        sources = {old: backend.fetch(ShardId(step, old, saved)) for old in plan.reads}
        digests = (
            {old: tensors.digests(src.directory / STATE_FILE) for old, src in sources.items()}
            if plan.resized
            else {}
        )
        source = sources[plan.source]
        return (source, tensors.read(source.directory / STATE_FILE), digests), None
    except (CheckpointError, OSError, ValueError, EOFError, pickle.UnpicklingError) as exc:
        # Whatever failed, this rank must still take part in the vote.
        return None, f"rank {rank}: {exc}"


def _check_replicas(save: Save, digests: dict[int, Any], backend: Reader) -> None:
    """On a resize: every old rank's replicated entries have the same keys, dtypes and
    shapes (else the restore fails naming the entry); differing values are only logged."""
    step, saved = save
    sharded = sharded_entries(digests.get(0, {}))
    if sharded:
        _fail(
            backend,
            UnmappableEntryError(
                sharded[0],
                f"step {step} was saved by {saved} ranks with the rank-sharded entry "
                f"{sharded[0]!r} (under state[{SHARDED_KEY!r}]), which cannot be mapped onto "
                f"this world's ranks: {_DCP}",
            ),
        )
    replicated = {old: replicated_entries(d) for old, d in digests.items()}
    shape = first_difference(replicated, lambda d: d[0])
    if shape is not None:
        _fail(
            backend,
            UnmappableEntryError(
                shape.entry,
                f"step {step} was saved by {saved} ranks and its entry {shape.entry!r} differs "
                f"in keys, dtype or shape between rank {shape.a} ({_show(shape.digest_a)}) and "
                f"rank {shape.b} ({_show(shape.digest_b)}): it is rank-sharded and cannot be "
                f"mapped onto this world's ranks: {_DCP}",
            ),
        )
    values = first_difference(replicated, lambda d: d[1])
    if values is not None:
        logger.warning(
            "checkpoint: step %d: entry %r differs between ranks %d and %d of the %d that saved "
            "it; restored from one of them (fine for a DDP buffer; if it is rank-sharded, %s)",
            step,
            values.entry,
            values.a,
            values.b,
            saved,
            _DCP,
        )


def _show(structure: Any) -> str:
    if structure is None:
        return "missing"
    if len(structure) == 2:
        return f"{structure[0]} of shape {list(structure[1])}"
    return f"a {structure[0]}"


def _fail(backend: Reader, error: NothingRestoredError) -> NoReturn:
    with contextlib.suppress(CheckpointError, OSError):
        backend.restore_failed(error.reason)
    logger.error("checkpoint: %s", error)
    raise error
