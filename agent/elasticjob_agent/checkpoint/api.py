"""The plain API for a training script: ``Checkpointer.save(step, state_dict)`` and
``Checkpointer.load()``.

Under ``elasticjob-agent`` (``ELASTICJOB_CHECKPOINT_SOCKET`` is set) a rank hands its state to
its node's agent, which replicates it to a peer and persists it. Without an agent (plain
``torchrun``, a single process) each rank keeps a ``CheckpointNode`` of its own on the node's
shared memory, plus the persistence path if one is given: memory and disk, no peer.

Restore: every rank lists the saves (a step and the world size that saved it) complete on
every rank that its node can reach, the ranks agree on the newest one in every list
(``all_gather_object`` when a process group of more than one rank is initialized), each fetches
the shards it needs (memory, a peer, disk: verified), and if any rank fails, all fall back to
the next older common save. No rank ever loads a torn step. A save by another world size is
mapped onto this one by ``checkpoint.resize``'s rule (``checkpoint.restore``).
"""

from __future__ import annotations

import atexit
import logging
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from elasticjob_agent.checkpoint import tensors
from elasticjob_agent.checkpoint.config import (
    DEFAULT_DIR,
    DEFAULT_KEEP,
    SOCKET_ENV,
    CheckpointSettings,
    settings_from_env,
)
from elasticjob_agent.checkpoint.manifest import (
    ShardId,
    complete_steps,
    newest_common,
    parse_size,
)
from elasticjob_agent.checkpoint.node import CheckpointNode, Source
from elasticjob_agent.checkpoint.resize import RestoreReport
from elasticjob_agent.checkpoint.restore import (
    STATE_FILE,
    CheckpointMismatchError,
    NothingRestoredError,
    UnmappableEntryError,
    restore,
)
from elasticjob_agent.checkpoint.store import (
    RECYCLED,
    CheckpointError,
    CheckpointLimitError,
    Reservation,
)

logger = logging.getLogger(__name__)

__all__ = [
    "STATE_FILE",
    "Backend",
    "CheckpointMismatchError",
    "Checkpointer",
    "NothingRestoredError",
    "UnmappableEntryError",
    "agree_and_fetch",
    "gather",
    "open_backend",
    "rank_and_world",
]


class Backend(Protocol):
    """What a rank needs of its node: the agent's service client or an in-process node."""

    def reserve(self, shard: ShardId, size: int) -> Reservation: ...
    def commit(self, token: str) -> None: ...
    def abort(self, token: str) -> None: ...
    def candidates(self) -> list[ShardId]: ...
    def fetch(self, shard: ShardId) -> Source: ...
    def restored(self, step: int, report: RestoreReport | None = None) -> None: ...
    def restore_failed(self, reason: str) -> None: ...
    def flush(self, timeout: float) -> bool: ...
    def close(self) -> None: ...


def _dist() -> Any:
    import torch.distributed as dist  # noqa: PLC0415

    return dist if dist.is_available() and dist.is_initialized() else None


def rank_and_world() -> tuple[int, int]:
    """This process's rank and world size: the process group's, else ``RANK``/``WORLD_SIZE``."""
    dist = _dist()
    if dist is not None:
        return int(dist.get_rank()), int(dist.get_world_size())
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def gather(value: Any) -> list[Any]:
    """``value`` from every rank (just ours without a process group of several ranks)."""
    dist = _dist()
    if dist is None or dist.get_world_size() == 1:
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def open_backend(
    *,
    memory_limit: str | int | None = None,
    keep: int | None = None,
    directory: str | None = None,
    persist_dir: str | None = None,
) -> Backend:
    """The agent's service when this process runs under ``elasticjob-agent``, else a node of
    this process's own (arguments, then ``ELASTICJOB_CHECKPOINT_*``)."""
    socket_path = os.environ.get(SOCKET_ENV)
    if socket_path:
        from elasticjob_agent.checkpoint.service import ServiceClient  # noqa: PLC0415

        return ServiceClient(socket_path)
    env = settings_from_env(os.environ)
    if memory_limit is None and env is None:
        raise ValueError(
            "no checkpoint memory limit: pass memory_limit='8Gi' (or set "
            "ELASTICJOB_CHECKPOINT_MEMORY_LIMIT) when running without elasticjob-agent"
        )
    limit = (
        parse_size(str(memory_limit), "memory_limit")
        if memory_limit is not None
        else env.memory_limit  # type: ignore[union-attr]
    )
    settings = CheckpointSettings(
        memory_limit=limit,
        keep=keep or (env.keep if env else DEFAULT_KEEP),
        directory=directory or (env.directory if env else DEFAULT_DIR),
        persist_dir=persist_dir or (env.persist_dir if env else None),
    )
    rank, _ = rank_and_world()
    # Each rank is a writer of its own on the node's shared directory (no peers, no etcd).
    return CheckpointNode(settings, f"rank{rank}", shared_directory=True)


class Checkpointer:
    """Save and restore one rank's ``state_dict`` through its node's agent (or locally).

    ``save`` blocks only while the state is copied into shared memory; checksums, the replica
    on a peer and persistence happen afterwards. A state over the node's memory limit is not
    saved: ``save`` logs an error naming the limit and returns False, and the last good
    checkpoint stays (pass ``strict=True`` to raise ``CheckpointLimitError`` instead).
    """

    def __init__(
        self,
        *,
        memory_limit: str | int | None = None,
        keep: int | None = None,
        directory: str | None = None,
        persist_dir: str | None = None,
        strict: bool = False,
        backend: Backend | None = None,
    ) -> None:
        self.backend = backend or open_backend(
            memory_limit=memory_limit, keep=keep, directory=directory, persist_dir=persist_dir
        )
        self.strict = strict
        self.last_error: str | None = None
        self.last_restore_source: str | None = None
        self.last_restore: RestoreReport | None = None
        """The last successful ``load``: step, world sizes, source, seconds."""
        self.restore_failure: str | None = None
        """Why the last ``load`` restored nothing although a checkpoint exists."""
        atexit.register(self.close)

    def save(self, step: int, state: Any) -> bool:
        """Hand ``state`` (a state dict of tensors and plain values) for ``step`` to the node."""
        rank, world = rank_and_world()
        layout = tensors.plan(state)
        shard = ShardId(step, rank, world)
        try:
            reservation = self.backend.reserve(shard, layout.size)
        except CheckpointLimitError as exc:
            self.last_error = str(exc)
            if self.strict:
                raise
            logger.error("checkpoint not saved: %s", exc)
            return False
        try:
            tensors.write(
                layout, reservation.directory / STATE_FILE, reservation.directory / RECYCLED
            )
        except BaseException:
            self.backend.abort(reservation.token)
            raise
        self.backend.commit(reservation.token)
        self.last_error = None
        return True

    def load(self, like: Any = None) -> tuple[int, Any] | None:
        """``(step, state)`` of the newest step complete on every rank, saved by a world of
        any size and mapped onto this one (``checkpoint.resize``); ``None`` when nothing was
        ever saved. All ranks call it together.

        ``NothingRestoredError`` (its ``reason`` says why, also kept in ``restore_failure``)
        when a checkpoint exists but cannot be restored: a torn step, corrupt copies, a
        rank-sharded entry that cannot be mapped onto this world (``UnmappableEntryError``),
        or, with ``like`` (a template such as ``{"model": model.state_dict()}``), a state whose
        keys or shapes do not match it (``CheckpointMismatchError``, naming the first key).
        """
        rank, world = rank_and_world()
        self.restore_failure = None
        try:
            found = restore(self.backend, rank, world, gather, like)
        except NothingRestoredError as exc:
            self.restore_failure = exc.reason
            raise
        if found is None:
            return None
        report, state = found
        self.last_restore = report
        self.last_restore_source = report.source
        return report.step, state

    def flush(self, timeout: float = 300.0) -> bool:
        """Wait until every saved step is checksummed, replicated and persisted."""
        return self.backend.flush(timeout)

    def close(self) -> None:
        try:
            self.backend.flush(60.0)
            self.backend.close()
        except (CheckpointError, OSError) as exc:
            logger.warning("checkpoint: closing: %s", exc)
        atexit.unregister(self.close)


def agree_and_fetch(
    backend: Backend,
    rank: int,
    world: int | None,
    shard_of: Callable[[int], ShardId],
) -> tuple[int, Source] | None:
    """Agree with every rank on the newest step all can restore and fetch this rank's shard of
    it (``shard_of(step)``); older common steps are tried when a rank cannot load one."""
    started = time.monotonic()
    mine = complete_steps(backend.candidates(), world)
    views = gather(mine)
    refused: list[int] = []
    while (step := newest_common(views, refused)) is not None:
        source: Source | None = None
        try:
            source = backend.fetch(shard_of(step))
        except (CheckpointError, OSError, ValueError) as exc:
            # Whatever failed, this rank must still take part in the vote below.
            logger.warning("checkpoint: rank %d cannot load step %d: %s", rank, step, exc)
        if all(gather(source is not None)) and source is not None:
            backend.restored(step)
            logger.info(
                "checkpoint: rank %d restored step %d from %s in %.2fs",
                rank,
                step,
                source.kind,
                time.monotonic() - started,
            )
            return step, source
        refused.append(step)
    return None
